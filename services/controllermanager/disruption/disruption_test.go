package disruption_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/disruption"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver and the disruption controller against it (no workload
// controllers: the tests write ReplicaSets and pods themselves), with stale
// DisruptionTarget conditions cleared after stale.
func start(t *testing.T, stale time.Duration) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: disruption.EventSource, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	c := disruption.New(disruption.Config{Factory: factory, Client: cs, Recorder: recorder, Discovery: cs.Discovery(),
		StalePodDisruptionTimeout: stale})
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return cs
}

// readyPod creates pod name with labels app=<app>, owned by owner when set, and reports
// it Running and Ready.
func readyPod(t *testing.T, cs kubernetes.Interface, name, app string, owner *metav1.OwnerReference) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			AutomountServiceAccountToken: ptr.To(false)},
	}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func newPDB(name, app string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}
}

// waitForStatus polls budget name until check accepts its status.
func waitForStatus(t *testing.T, cs kubernetes.Interface, name string, check func(*policyv1.PodDisruptionBudget) error) *policyv1.PodDisruptionBudget {
	t.Helper()
	var last *policyv1.PodDisruptionBudget
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last, lastErr = p, check(p)
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("budget %s: %v; last status %+v", name, lastErr, last.Status)
	}
	return last
}

// counts checks the status numbers and that the DisruptionAllowed condition follows
// disruptionsAllowed at the budget's generation.
func counts(expected, desired, current, allowed int32) func(*policyv1.PodDisruptionBudget) error {
	return func(p *policyv1.PodDisruptionBudget) error {
		st := p.Status
		if st.ExpectedPods != expected || st.DesiredHealthy != desired || st.CurrentHealthy != current || st.DisruptionsAllowed != allowed ||
			st.ObservedGeneration != p.Generation {
			return fmt.Errorf("want expected %d desired %d current %d allowed %d at generation %d", expected, desired, current, allowed, p.Generation)
		}
		cond := apimeta.FindStatusCondition(st.Conditions, policyv1.DisruptionAllowedCondition)
		want := metav1.Condition{Status: metav1.ConditionFalse, Reason: policyv1.InsufficientPodsReason}
		if allowed > 0 {
			want = metav1.Condition{Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason}
		}
		if cond == nil || cond.Status != want.Status || cond.Reason != want.Reason {
			return fmt.Errorf("DisruptionAllowed condition %+v, want %s/%s", cond, want.Status, want.Reason)
		}
		return nil
	}
}

// TestStatusFromPodsAndControllers covers the counts: an integer minAvailable counts the
// selected pods; maxUnavailable and a percentage count the scale of the pods'
// ReplicaSet, or of the Deployment above it; a spec change moves observedGeneration; a
// pod whose controller cannot be found fails the sync safe (SyncFailed, nothing allowed).
func TestStatusFromPodsAndControllers(t *testing.T) {
	cs := start(t, disruption.StalePodDisruptionTimeout)
	ctx := context.Background()
	pdbs := cs.PolicyV1().PodDisruptionBudgets("default")

	// Plain pods, integer minAvailable.
	readyPod(t, cs, "plain-1", "plain", nil)
	readyPod(t, cs, "plain-2", "plain", nil)
	plain := newPDB("plain", "plain")
	plain.Spec.MinAvailable = ptr.To(intstr.FromInt32(1))
	if _, err := pdbs.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitForStatus(t, cs, "plain", counts(2, 1, 2, 1))
	p.Spec.MinAvailable = ptr.To(intstr.FromInt32(2))
	if _, err := pdbs.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, cs, "plain", counts(2, 2, 2, 0))

	// A Deployment's ReplicaSet with 4 replicas, 3 pods ready: maxUnavailable 25% of 4.
	labels := map[string]string{"app": "web"}
	d, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(4)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cs.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment",
			Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: d.Spec.Template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rsRef := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}
	for i := range 3 {
		readyPod(t, cs, fmt.Sprintf("web-%d", i), "web", rsRef)
	}
	web := newPDB("web", "web")
	web.Spec.MaxUnavailable = ptr.To(intstr.FromString("25%"))
	if _, err := pdbs.Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Deployment's 4 replicas count, not its ReplicaSet's 2: desired 4-1.
	waitForStatus(t, cs, "web", counts(4, 3, 3, 0))

	// A bare ReplicaSet's own scale, with minAvailable 50%.
	lone, err := cs.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "lone"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "lone"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "lone"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loneRef := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: lone.Name, UID: lone.UID, Controller: ptr.To(true)}
	readyPod(t, cs, "lone-1", "lone", loneRef)
	readyPod(t, cs, "lone-2", "lone", loneRef)
	lonePDB := newPDB("lone", "lone")
	lonePDB.Spec.MinAvailable = ptr.To(intstr.FromString("50%"))
	if _, err := pdbs.Create(ctx, lonePDB, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, cs, "lone", counts(2, 1, 2, 1))

	// A controller of a kind no finder knows: the sync fails safe.
	readyPod(t, cs, "odd-1", "odd", &metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "1234", Controller: ptr.To(true)})
	odd := newPDB("odd", "odd")
	odd.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	if _, err := pdbs.Create(ctx, odd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, cs, "odd", func(p *policyv1.PodDisruptionBudget) error {
		cond := apimeta.FindStatusCondition(p.Status.Conditions, policyv1.DisruptionAllowedCondition)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != policyv1.SyncFailedReason ||
			cond.Message != `found no controllers for pod "odd-1"` || p.Status.DisruptionsAllowed != 0 {
			return fmt.Errorf("want SyncFailed, got %+v", cond)
		}
		return nil
	})
}

// TestDisruptedPodsExpire covers status.disruptedPods as evictions leave it: a pod
// evicted a moment ago does not count as healthy and stays listed; one evicted longer
// ago than DeletionTimeout and still not deleted is dropped and counts again.
func TestDisruptedPodsExpire(t *testing.T) {
	cs := start(t, disruption.StalePodDisruptionTimeout)
	ctx := context.Background()
	readyPod(t, cs, "db-1", "db", nil)
	readyPod(t, cs, "db-2", "db", nil)
	readyPod(t, cs, "db-3", "db", nil)
	pdb := newPDB("db", "db")
	pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(1))
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitForStatus(t, cs, "db", counts(3, 1, 3, 2))
	// What two evictions would have written: db-1 just now, db-2 long ago.
	p.Status.DisruptedPods = map[string]metav1.Time{
		"db-1": metav1.Now(),
		"db-2": metav1.NewTime(time.Now().Add(-disruption.DeletionTimeout - time.Minute)),
	}
	p.Status.DisruptionsAllowed = 0
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, cs, "db", func(p *policyv1.PodDisruptionBudget) error {
		if err := counts(3, 1, 2, 1)(p); err != nil {
			return err
		}
		if _, ok := p.Status.DisruptedPods["db-1"]; !ok || len(p.Status.DisruptedPods) != 1 {
			return fmt.Errorf("disruptedPods %v, want db-1 only", p.Status.DisruptedPods)
		}
		return nil
	})
}

// TestStaleDisruptionTargetReset covers a pod left with DisruptionTarget=True by an
// eviction that never deleted it: after the stale timeout the condition turns False.
func TestStaleDisruptionTargetReset(t *testing.T) {
	cs := start(t, 200*time.Millisecond)
	ctx := context.Background()
	readyPod(t, cs, "kept", "kept", nil)
	pod, err := cs.CoreV1().Pods("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: metav1.Now()})
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget {
				return c.Status == corev1.ConditionFalse, nil
			}
		}
		return false, fmt.Errorf("DisruptionTarget condition gone: %+v", p.Status.Conditions)
	})
	if err != nil {
		t.Fatalf("stale DisruptionTarget not reset: %v", err)
	}
}
