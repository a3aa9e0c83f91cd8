package serviceaccount_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/names"

	"skiff.dev/services/apiserver/controller/serviceaccount"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/namespace"
	saregistry "skiff.dev/services/apiserver/registry/core/serviceaccount"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &etcdClient))
}

// cachedStore is d's Store over a watch cache over the shared etcd, as the apiserver
// builds it (the controller watches).
func cachedStore(t *testing.T, d registry.Descriptor) *registry.Store {
	t.Helper()
	store := etcd3.New(etcdClient, scheme.StorageCodec, d.NewFunc)
	kinds, _, err := scheme.Scheme.ObjectKinds(d.NewFunc())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cacher.New(cacher.Config{
		Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: d.EtcdPrefix() + "/", Kind: kinds[0],
		NewFunc: d.NewFunc, NewListFunc: d.NewListFunc, GetAttrs: d.Strategy.GetAttrs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return d.NewStore(c)
}

func TestControllerEnsuresDefaultServiceAccounts(t *testing.T) {
	namespaces := &namespace.REST{Store: cachedStore(t, namespace.Descriptor)}
	serviceAccounts := cachedStore(t, saregistry.NewDescriptor(saregistry.TokenConfig{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&serviceaccount.Controller{Namespaces: namespaces, ServiceAccounts: serviceAccounts}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	get := func(ns string) (*corev1.ServiceAccount, error) {
		obj, err := serviceAccounts.Get(ctx, ns, "default", &metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*corev1.ServiceAccount), nil
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	createNamespace := func(name string) {
		t.Helper()
		if _, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, &metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Fresh names, as the package's tests share one etcd.
	a, b := names.SimpleNameGenerator.GenerateName("ctl-a-"), names.SimpleNameGenerator.GenerateName("ctl-b-")
	createNamespace(a)
	createNamespace(b)
	var first *corev1.ServiceAccount
	waitFor("default service account in a new namespace", func() bool {
		sa, err := get(a)
		first = sa
		return err == nil
	})
	waitFor("default service account in another new namespace", func() bool { _, err := get(b); return err == nil })
	if _, _, err := serviceAccounts.Delete(ctx, a, "default", &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("default service account made again after its delete", func() bool {
		sa, err := get(a)
		return err == nil && sa.UID != first.UID
	})

	// A terminating namespace does not get its service account back: the namespace
	// controller is emptying it.
	if _, _, err := namespaces.Delete(ctx, "", a, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := serviceAccounts.Delete(ctx, a, "default", &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Deleting ctl-b's account next queues ctl-b behind ctl-a (one watch, one worker),
	// so once ctl-b's is back, ctl-a's delete has been handled.
	second, err := get(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := serviceAccounts.Delete(ctx, b, "default", &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("ctl-b's default service account made again", func() bool {
		sa, err := get(b)
		return err == nil && sa.UID != second.UID
	})
	if _, err := get(a); !apierrors.IsNotFound(err) {
		t.Fatalf("terminating namespace's service account: %v, want it gone", err)
	}
}
