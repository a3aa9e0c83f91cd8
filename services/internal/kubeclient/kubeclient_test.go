package kubeclient_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/kubeclient"
)

// contentTypes records the Content-Type of every request body and response.
type contentTypes struct {
	mu                  sync.Mutex
	requests, responses map[string]int
	next                http.RoundTripper
}

func (c *contentTypes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Body != nil {
		c.requests[req.Header.Get("Content-Type")]++
	}
	if err == nil {
		c.responses[resp.Header.Get("Content-Type")]++
	}
	return resp, err
}

// TestProtobufClient drives a pod's writes, list and watch the way the kubelet and the
// scheduler do, with the default content type: the apiserver takes and answers protobuf.
func TestProtobufClient(t *testing.T) {
	cfg := controlplanetest.Start(t)
	kubeclient.SetContentType(cfg, kubeclient.DefaultContentType)
	seen := &contentTypes{requests: map[string]int{}, responses: map[string]int{}}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { seen.next = rt; return seen }
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pods := cs.CoreV1().Pods("default")
	w, err := pods.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pod, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if pod, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodRunning {
		t.Errorf("status after UpdateStatus = %q, want Running", pod.Status.Phase)
	}
	if _, err := pods.Patch(ctx, "p", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Labels["a"] != "b" {
		t.Fatalf("list = %v, %v; want the patched pod", list, err)
	}
	select {
	case ev := <-w.ResultChan():
		if p, ok := ev.Object.(*corev1.Pod); !ok || p.Name != "p" {
			t.Errorf("first watch event %s %T, want pod p", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}

	seen.mu.Lock()
	defer seen.mu.Unlock()
	if n := seen.requests[runtime.ContentTypeProtobuf]; n != 2 { // create, update status
		t.Errorf("protobuf request bodies = %d, want 2 (all content types: %v)", n, seen.requests)
	}
	for ct, n := range seen.responses {
		if ct != runtime.ContentTypeProtobuf && ct != runtime.ContentTypeProtobuf+";stream=watch" {
			t.Errorf("%d responses in %q, want protobuf", n, ct)
		}
	}
}
