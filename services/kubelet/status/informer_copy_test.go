package status

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// requestCounter counts the requests by "METHOD path" that pass through it.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	next   http.RoundTripper
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.counts[r.Method+" "+r.URL.Path]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *requestCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// startWithPod starts a real apiserver, creates pod default/p through it and returns a
// client whose requests counter counts, and the created pod.
func startWithPod(t *testing.T) (kubernetes.Interface, *requestCounter, *v1.Pod) {
	t.Helper()
	cfg := controlplanetest.Start(t)
	counter := &requestCounter{counts: map[string]int{}}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter }
	client := kubernetes.NewForConfigOrDie(cfg)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}}}
	var created *v1.Pod
	// The namespace's default ServiceAccount, which admission wants, comes from a controller.
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("pod not created")
	}
	return client, counter, created
}

// TestDeletedPodsStatusIsNotWritten: once the pod manager has forgotten a pod (its
// DELETE arrived), a status change for it sends nothing; a kubelet's GET would only be
// refused by the Node authorizer, once per status change of every deleted pod.
func TestDeletedPodsStatusIsNotWritten(t *testing.T) {
	client, counter, created := startWithPod(t)
	ctx := context.Background()
	m := NewManager(client, podGetter{created.UID: created}, safety(false), nil)
	m.SetPodStatus(created, runningStatus())
	m.syncBatch(ctx, false)
	if err := client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	m.podGetter = podGetter{} // HandlePodRemoves
	counter.take()
	m.SetPodStatus(created, succeededStatus())
	m.syncBatch(ctx, false)
	m.syncBatch(ctx, true)
	if got := counter.take(); len(got) != 0 {
		t.Errorf("requests for a deleted pod's status: %v, want none", got)
	}
}

// TestStatusWriteStartsFromTheKubeletsCopy, against a real apiserver: with a current
// copy of the pod a status write is one PUT and no GET, also when the copy lags only the
// kubelet's own last write; with a copy older than another writer's change the PUT gets
// 409 and the write is retried from a GET, so the status lands either way.
func TestStatusWriteStartsFromTheKubeletsCopy(t *testing.T) {
	client, counter, created := startWithPod(t)
	ctx := context.Background()
	m := NewManager(client, podGetter{created.UID: created}, safety(true), nil)
	statusPath := "/api/v1/namespaces/default/pods/p/status"
	podPath := "/api/v1/namespaces/default/pods/p"

	// writeStatus has the manager write a running status with podIP and checks the
	// requests it took: gets GETs of the pod and puts PUTs of its status.
	writeStatus := func(podIP string, gets, puts int, what string) {
		t.Helper()
		counter.take()
		next := runningStatus()
		next.PodIP = podIP
		m.SetPodStatus(created, next)
		m.syncBatch(ctx, false)
		if got := counter.take(); got["GET "+podPath] != gets || got["PUT "+statusPath] != puts {
			t.Errorf("%s: requests %v, want %d GET and %d PUT", what, got, gets, puts)
		}
	}
	before := created.DeepCopy()
	writeStatus("10.0.0.4", 0, 1, "with a current copy")
	if !reflect.DeepEqual(created, before) {
		t.Errorf("the status write changed the kubelet's copy of the pod:\n%+v\nwas\n%+v", created, before)
	}
	// The copy now lags the manager's own write (which changed the resourceVersion):
	// the next write starts from the copy at the written version, still one PUT.
	writeStatus("10.0.0.5", 0, 1, "with a copy lagging the kubelet's own write")

	// Another writer changes the pod: the copy is stale, the PUT gets 409 and the
	// write is retried from a GET.
	other, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Labels = map[string]string{"touched": "by-another-writer"}
	if _, err := client.CoreV1().Pods("default").Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	writeStatus("10.0.0.6", 1, 2, "with a copy older than another writer's change (a PUT answered 409)")
	latest, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if latest.Labels["touched"] == "" {
		t.Errorf("the status write undid another writer's label: %v", latest.Labels)
	}
	if latest.Status.PodIP != "10.0.0.6" || latest.Status.Phase != v1.PodRunning {
		t.Errorf("status not written: phase %s, podIP %s", latest.Status.Phase, latest.Status.PodIP)
	}
	// The informer catches up: the periodic sync forgets the write it no longer needs.
	if len(m.ownWrites) != 1 {
		t.Fatalf("%d writes remembered after a write the informer has not seen, want 1", len(m.ownWrites))
	}
	m.podGetter = podGetter{latest.UID: latest}
	m.syncBatch(ctx, true)
	if len(m.ownWrites) != 0 {
		t.Errorf("%d writes remembered after the informer caught up, want 0", len(m.ownWrites))
	}

	// Another writer changes the status; the kubelet's copy still shows what the
	// kubelet wants, so only a read can show that a write is needed.
	m.podGetter = podGetter{latest.UID: latest}
	foreign := latest.DeepCopy()
	foreign.Status.PodIP = "10.0.0.99"
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, foreign, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.syncPod(ctx, latest.UID, versionedPodStatus{status: latest.Status, version: 100, podName: "p", podNamespace: "default"})
	latest, err = client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if latest.Status.PodIP != "10.0.0.6" {
		t.Errorf("another writer's podIP %s stayed: the kubelet's stale copy decided nothing needed writing", latest.Status.PodIP)
	}
}
