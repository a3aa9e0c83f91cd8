package podgc

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"skiff.dev/services/controlplanetest"
)

type fixture struct {
	gcc    *Controller
	client kubernetes.Interface
	clock  *testingclock.FakeClock
	ctx    context.Context
}

func newFixture(t *testing.T, threshold int) *fixture {
	t.Helper()
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	factory := informers.NewSharedInformerFactory(client, 0)
	t.Cleanup(factory.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := testingclock.NewFakeClock(time.Now())
	gcc := New(factory.Core().V1().Pods(), factory.Core().V1().Nodes(), client, threshold, clk)
	t.Cleanup(gcc.nodeQueue.ShutDown)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return &fixture{gcc: gcc, client: client, clock: clk, ctx: ctx}
}

func (f *fixture) createPod(t *testing.T, name, node string, phase v1.PodPhase) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "busybox"}}}}
	created, err := f.client.CoreV1().Pods("default").Create(f.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase != "" {
		created.Status.Phase = phase
		if _, err := f.client.CoreV1().Pods("default").UpdateStatus(f.ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// podNames lists the pods the apiserver holds once the cache agrees with it.
func (f *fixture) podNames(t *testing.T) []string {
	t.Helper()
	list, err := f.client.CoreV1().Pods("default").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.waitCache(t, list)
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

func (f *fixture) waitCache(t *testing.T, list *v1.PodList) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, err := f.gcc.podLister.Pods("default").List(everything())
		if err != nil || len(cached) != len(list.Items) {
			return false, err
		}
		for _, p := range list.Items {
			c, err := f.gcc.podLister.Pods("default").Get(p.Name)
			if err != nil || c.ResourceVersion != p.ResourceVersion {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("pod cache never caught up: %v", err)
	}
}

func TestGCTerminatedKeepsTheNewestUpToTheThreshold(t *testing.T) {
	f := newFixture(t, 2)
	// Created in name order; the apiserver's timestamps have second resolution, so ties
	// break by name, oldest first either way.
	for _, name := range []string{"done-1", "done-2", "done-3", "done-4"} {
		f.createPod(t, name, "", v1.PodSucceeded)
	}
	f.createPod(t, "running", "", "")
	f.podNames(t)
	if err := f.gcc.gc(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := f.podNames(t), []string{"done-3", "done-4", "running"}; !slices.Equal(got, want) {
		t.Errorf("pods after gc = %v, want %v", got, want)
	}
}

func TestGCOrphanedAfterQuarantine(t *testing.T) {
	f := newFixture(t, 12500)
	if _, err := f.client.CoreV1().Nodes().Create(f.ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "alive"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.createPod(t, "on-alive", "alive", v1.PodRunning)
	f.createPod(t, "on-gone", "gone", v1.PodRunning)
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := f.gcc.nodeLister.Get("alive")
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	f.podNames(t)
	if err := f.gcc.gc(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.podNames(t); len(got) != 2 {
		t.Fatalf("pods right after the node went missing = %v, want both (quarantine)", got)
	}
	f.clock.Step(quarantineTime)
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.gcc.nodeQueue.Len() > 0, nil
	}); err != nil {
		t.Fatal("quarantine never ended")
	}
	if err := f.gcc.gc(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := f.podNames(t), []string{"on-alive"}; !slices.Equal(got, want) {
		t.Errorf("pods after the quarantine = %v, want %v", got, want)
	}
}

func TestGCUnscheduledTerminating(t *testing.T) {
	f := newFixture(t, 12500)
	f.createPod(t, "pending", "", "")
	// A finalizer keeps the deleted pod around, terminating, as a stuck one would be.
	pod, err := f.client.CoreV1().Pods("default").Get(f.ctx, "pending", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = []string{"example.com/hold"}
	if _, err := f.client.CoreV1().Pods("default").Update(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.CoreV1().Pods("default").Delete(f.ctx, "pending", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.podNames(t)
	if err := f.gcc.gc(f.ctx); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.CoreV1().Pods("default").Get(f.ctx, "pending", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodFailed {
		t.Errorf("unscheduled terminating pod phase = %s, want Failed before its forced deletion", got.Status.Phase)
	}
}

func everything() labels.Selector { return labels.Everything() }
