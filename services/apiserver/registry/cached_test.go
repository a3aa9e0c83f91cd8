package registry_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
)

// cachedPodStore is the real pods Store over a watch cache of etcd, and the test's own
// namespace, emptied.
func cachedPodStore(t *testing.T) (*registry.Store, string) {
	t.Helper()
	_, ns := podStore(t) // empties the test's namespace
	d := pod.NewDescriptor(nil)
	c, err := cacher.New(cacher.Config{
		Storage: etcd3.New(testClient, scheme.StorageCodec, d.NewFunc), ResourcePrefix: d.EtcdPrefix() + "/",
		Kind: corev1.SchemeGroupVersion.WithKind("Pod"), NewFunc: d.NewFunc, NewListFunc: d.NewListFunc,
		GetAttrs: d.Strategy.GetAttrs, IndexFields: []string{"spec.nodeName"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return d.NewStore(c), ns
}

// TestGetCachedFirstReadsTheCacheInPlace checks rest.GetCachedFirst over a Store with a
// watch cache: the cache's own object when it is accepted, etcd's when the cache shows
// the object otherwise than asked, NotFound when there is none.
func TestGetCachedFirstReadsTheCacheInPlace(t *testing.T) {
	store, ns := cachedPodStore(t)
	ctx := testContext(t)
	createPod(t, store, ns, "a", "web", "n1")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		found := false
		_, err := store.ReadCached(ns, "a", func(runtime.Object) { found = true })
		return found, err
	}); err != nil {
		t.Fatalf("the cache never had the pod: %v", err)
	}
	onNode := func(node string) func(runtime.Object) bool {
		return func(obj runtime.Object) bool { return obj.(*corev1.Pod).Spec.NodeName == node }
	}

	first, err := rest.GetCachedFirst(ctx, store, ns, "a", onNode("n1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := rest.GetCachedFirst(ctx, store, ns, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("two cached reads gave two objects, want the cache's own (no copy)")
	}
	fromEtcd, err := rest.GetCachedFirst(ctx, store, ns, "a", onNode("n2"))
	if err != nil {
		t.Fatal(err)
	}
	if fromEtcd == first || fromEtcd.(*corev1.Pod).Spec.NodeName != "n1" {
		t.Error("a cached object the caller does not accept: want etcd's answer, a fresh object")
	}
	if _, err := rest.GetCachedFirst(ctx, store, ns, "missing", nil); !apierrors.IsNotFound(err) {
		t.Errorf("a pod that does not exist: %v, want NotFound", err)
	}
}
