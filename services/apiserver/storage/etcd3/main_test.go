package etcd3_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// testClient talks to the one embedded etcd every test and benchmark of this package
// shares; tests stay apart by key prefix (see newTestStore).
var testClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &testClient))
}

// testNamespace is the namespace of the current test's pods, unique per test, so every
// test owns the collection "/registry/pods/<testNamespace>/".
func testNamespace(tb testing.TB) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(tb.Name()))
}

// newTestStore returns a pod Store and the collection key the test owns, emptied of
// what an earlier run of the test (go test -count=N) left there.
func newTestStore(tb testing.TB) (*etcd3.Store, string) {
	tb.Helper()
	store := etcd3.New(testClient, scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion),
		func() runtime.Object { return &corev1.Pod{} })
	prefix := "/registry/pods/" + testNamespace(tb) + "/"
	if _, err := testClient.Delete(testContext(tb), prefix, clientv3.WithPrefix()); err != nil {
		tb.Fatal(err)
	}
	return store, prefix
}

func testContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// newPod returns a pod of the test's namespace bound to node ("" = unscheduled).
func newPod(tb testing.TB, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: testNamespace(tb),
			UID:       types.UID("uid-" + name),
			Labels:    map[string]string{"app": "web"},
		},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "main", Image: "nginx"}},
		},
	}
}

// createPod stores pod under the test's collection and returns the stored copy.
func createPod(tb testing.TB, store *etcd3.Store, prefix string, pod *corev1.Pod) *corev1.Pod {
	tb.Helper()
	out := &corev1.Pod{}
	if err := store.Create(testContext(tb), prefix+pod.Name, pod, out); err != nil {
		tb.Fatalf("create %s: %v", pod.Name, err)
	}
	return out
}

// podAttrs is the pod strategy's GetAttrs: the fields the scheduler and kubelet select on.
func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), fields.Set{
		"metadata.name":      pod.Name,
		"metadata.namespace": pod.Namespace,
		"spec.nodeName":      pod.Spec.NodeName,
		"status.phase":       string(pod.Status.Phase),
	}, nil
}

func rvOf(tb testing.TB, obj metav1.Object) int64 {
	tb.Helper()
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		tb.Fatalf("resourceVersion %q of %s: %v", obj.GetResourceVersion(), obj.GetName(), err)
	}
	return rv
}

// compactAll compacts etcd up to its current revision, so every earlier revision is gone.
func compactAll(tb testing.TB) int64 {
	tb.Helper()
	ctx := testContext(tb)
	resp, err := testClient.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := testClient.Compact(ctx, resp.Header.Revision); err != nil {
		tb.Fatal(err)
	}
	return resp.Header.Revision
}
