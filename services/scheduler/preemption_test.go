package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/scheduler"
)

const fooResource = v1.ResourceName("example.com/foo")

// fooPod asks for one example.com/foo at class's priority; it stops at once when
// deleted.
func fooPod(name, class string) *v1.Pod {
	one := v1.ResourceList{fooResource: resource.MustParse("1")}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			PriorityClassName:             class,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []v1.Container{{Name: "app", Image: "busybox",
				Resources: v1.ResourceRequirements{Requests: one, Limits: one}}},
		},
	}
}

// TestPreemption runs the scheduler against a real apiserver: on a node with room for
// one example.com/foo, a high-priority pod evicts the low-priority one holding it (which
// gets the DisruptionTarget condition first), is nominated to the node and bound there;
// a pod of the same high priority that may not preempt (policy Never) stays pending
// with kube's message.
func TestPreemption(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	createReadyNode(t, client, "node-a", "4")
	node, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity[fooResource] = resource.MustParse("1")
	node.Status.Allocatable[fooResource] = resource.MustParse("1")
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pc := range []schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 1},
		{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: "high-never"}, Value: 1000, PreemptionPolicy: ptr.To(v1.PreemptNever)},
	} {
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, &pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	sched, err := scheduler.New(scheduler.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sched.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	bound := func(p *v1.Pod) bool { return p.Spec.NodeName == "node-a" }

	if _, err := client.CoreV1().Pods("default").Create(ctx, fooPod("victim", "low"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPod(t, client, "victim", "bound", bound)
	// A finalizer keeps the victim visible after its deletion, to read its conditions.
	victim, err := client.CoreV1().Pods("default").Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim.Finalizers = []string{"example.com/keep"}
	if _, err := client.CoreV1().Pods("default").Update(ctx, victim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err := client.CoreV1().Pods("default").Create(ctx, fooPod("preemptor", "high"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim = waitForPod(t, client, "victim", "preempted", func(p *v1.Pod) bool { return p.DeletionTimestamp != nil })
	var disruption *v1.PodCondition
	for i := range victim.Status.Conditions {
		if victim.Status.Conditions[i].Type == v1.DisruptionTarget {
			disruption = &victim.Status.Conditions[i]
		}
	}
	if disruption == nil || disruption.Status != v1.ConditionTrue || disruption.Reason != v1.PodReasonPreemptionByScheduler ||
		disruption.Message != "default-scheduler: preempting to accommodate a higher priority pod" {
		t.Errorf("victim's DisruptionTarget condition %+v", disruption)
	}
	waitForPod(t, client, "preemptor", "nominated", func(p *v1.Pod) bool { return p.Status.NominatedNodeName == "node-a" })

	// The room is the preemptor's: a pod of the same priority that may not preempt
	// stays pending, with kube's message.
	if _, err := client.CoreV1().Pods("default").Create(ctx, fooPod("never", "high-never"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPod(t, client, "never", "unschedulable", func(p *v1.Pod) bool {
		c := podScheduled(p)
		return c != nil && c.Status == v1.ConditionFalse && strings.HasSuffix(c.Message, "Insufficient example.com/foo. not eligible due to preemptionPolicy=Never.")
	})

	victim.Finalizers = nil
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, err := client.CoreV1().Pods("default").Get(ctx, "victim", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		v.Finalizers = nil
		_, _ = client.CoreV1().Pods("default").Update(ctx, v, metav1.UpdateOptions{})
		return false, nil
	}); err != nil {
		t.Fatalf("victim not gone: %v", err)
	}
	waitForPod(t, client, "preemptor", "bound", bound)
	if p, _ := client.CoreV1().Pods("default").Get(ctx, "never", metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Errorf("the pod that may not preempt was bound to %s", p.Spec.NodeName)
	}
}
