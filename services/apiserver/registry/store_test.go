package registry_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// testClient talks to the one embedded etcd the package's tests share; each test owns
// the namespace named after it.
var testClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &testClient))
}

// podStore is the real pods Store over etcd and the test's own namespace, emptied.
func podStore(t *testing.T) (*registry.Store, string) {
	t.Helper()
	h := fnv.New32a()
	_, _ = h.Write([]byte(t.Name()))
	ns := fmt.Sprintf("test-%x", h.Sum32()) // a valid namespace name, unique per test
	ctx := testContext(t)
	d := pod.NewDescriptor(nil)
	if _, err := testClient.Delete(ctx, d.EtcdPrefix()+"/"+ns+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	return d.NewStore(etcd3.New(testClient, scheme.StorageCodec, d.NewFunc)), ns
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createPod(t *testing.T, store *registry.Store, ns, name, app, node string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := store.Create(testContext(t), ns, p, &metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// names lists the pods left in ns, marked "name(deleting)" when deletionTimestamp is set.
func names(t *testing.T, store *registry.Store, ns string) string {
	t.Helper()
	list, err := store.List(testContext(t), ns, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.(*corev1.PodList).Items {
		if p.DeletionTimestamp != nil {
			out = append(out, p.Name+"(deleting)")
		} else {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func TestDeleteCollection(t *testing.T) {
	selector := func(s string) *metainternalversion.ListOptions {
		return &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app": s})}
	}
	for _, tc := range []struct {
		name     string
		listOpts *metainternalversion.ListOptions
		opts     *metav1.DeleteOptions
		want     string // pods left
		deleted  int    // items in the returned list
	}{
		{"a label selector deletes only the matching pods", selector("web"), nil, "db1", 2},
		{"no selector deletes every pod of the namespace", nil, nil, "", 3},
		{"dry run deletes nothing", nil, &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, "db1,web1,web2", 3},
		{"a selector matching nothing deletes nothing", selector("cache"), nil, "db1,web1,web2", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, ns := podStore(t)
			createPod(t, store, ns, "web1", "web", "")
			createPod(t, store, ns, "web2", "web", "")
			createPod(t, store, ns, "db1", "db", "")
			out, err := store.DeleteCollection(testContext(t), ns, nil, tc.opts, tc.listOpts)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(out.(*corev1.PodList).Items); n != tc.deleted {
				t.Errorf("returned %d items, want %d", n, tc.deleted)
			}
			if got := names(t, store, ns); got != tc.want {
				t.Errorf("left %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDeleteCollectionDeletesBoundPodsGracefully(t *testing.T) {
	store, ns := podStore(t)
	createPod(t, store, ns, "bound", "web", "node-1")
	createPod(t, store, ns, "pending", "web", "")
	if _, err := store.DeleteCollection(testContext(t), ns, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := names(t, store, ns); got != "bound(deleting)" {
		t.Errorf("left %q, want the bound pod marked for its kubelet and the pending one gone", got)
	}
}

func TestDeleteCollectionStopsAtARejectedObject(t *testing.T) {
	store, ns := podStore(t)
	createPod(t, store, ns, "keep", "web", "")
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), "keep", errors.New("admission says no"))
	validate := func(_ context.Context, obj runtime.Object) error {
		if obj.(*corev1.Pod).Name == "keep" {
			return forbidden
		}
		return nil
	}
	_, err := store.DeleteCollection(testContext(t), ns, validate, nil, nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want the validation's 403", err)
	}
	if got := names(t, store, ns); got != "keep" {
		t.Errorf("left %q, want the rejected pod kept", got)
	}
}

// BenchmarkDeleteCollection deletes 5,000 pods of one namespace through the real Store
// over etcd, as `kubectl delete pods --all` or a namespace deletion does: pods not yet
// scheduled are removed at once, bound pods are marked for their kubelet.
func BenchmarkDeleteCollection(b *testing.B) {
	const n = 5000
	d := pod.NewDescriptor(nil)
	store := d.NewStore(etcd3.New(testClient, scheme.StorageCodec, d.NewFunc))
	ctx := context.Background()
	for _, bc := range []struct{ name, node string }{{"unscheduled", ""}, {"bound", "node-1"}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ns := fmt.Sprintf("bench-%s-%d", bc.name, i)
				if _, err := testClient.Delete(ctx, d.EtcdPrefix()+"/"+ns+"/", clientv3.WithPrefix()); err != nil {
					b.Fatal(err)
				}
				for j := 0; j < n; j++ {
					p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", j), Namespace: ns},
						Spec: corev1.PodSpec{NodeName: bc.node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
					if _, err := store.Create(ctx, ns, p, &metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if _, err := store.DeleteCollection(ctx, ns, nil, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
