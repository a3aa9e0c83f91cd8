package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// TestPriorityClasses covers scheduling.k8s.io/v1 priorityclasses and the Priority
// admission plugin: the system classes exist and cannot be deleted; kube's validation;
// value and preemptionPolicy immutable; one global default; a pod gets its class's
// priority and preemption policy, the default class's when it names none, and is refused
// (403) for a missing class or a priority of its own.
func TestPriorityClasses(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pcs := cs.SchedulingV1().PriorityClasses()

	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err1 := pcs.Get(ctx, "system-node-critical", metav1.GetOptions{})
		_, err2 := pcs.Get(ctx, "system-cluster-critical", metav1.GetOptions{})
		return err1 == nil && err2 == nil, nil
	}); err != nil {
		t.Fatalf("system priority classes: %v", err)
	}
	if err := pcs.Delete(ctx, "system-node-critical", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "this is a system priority class and cannot be deleted") {
		t.Errorf("deleting system-node-critical: %v, want 403", err)
	}

	for name, tc := range map[string]struct {
		pc   schedulingv1.PriorityClass
		want string
	}{
		"too high": {schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000000001},
			"value: Forbidden: maximum allowed value of a user defined priority is 1000000000"},
		"system prefix": {schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "system-mine"}, Value: 1},
			"metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"},
		"bad policy": {schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "policy"}, Value: 1, PreemptionPolicy: ptr.To(corev1.PreemptionPolicy("Sometimes"))},
			`preemptionPolicy: Unsupported value: "Sometimes"`},
	} {
		if _, err := pcs.Create(ctx, &tc.pc, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 422 with %q", name, err, tc.want)
		}
	}

	low, err := pcs.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 10, GlobalDefault: true}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if low.PreemptionPolicy == nil || *low.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Errorf("preemptionPolicy %v, want the default PreemptLowerPriority", low.PreemptionPolicy)
	}
	low.Value = 11
	if _, err := pcs.Update(ctx, low, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "value: Forbidden: may not be changed in an update.") {
		t.Errorf("changing the value: %v, want 422", err)
	}
	if _, err := pcs.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "other-default"}, Value: 5, GlobalDefault: true}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "PriorityClass low is already marked as default. Only one default can exist") {
		t.Errorf("second global default: %v, want 403", err)
	}
	if _, err := pcs.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "never"}, Value: 100, PreemptionPolicy: ptr.To(corev1.PreemptNever)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pods := cs.CoreV1().Pods("default")
	newPod := func(name, class string, priority *int32) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			PriorityClassName: class, Priority: priority, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	p, err := pods.Create(ctx, newPod("named", "never", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *p.Spec.Priority != 100 || *p.Spec.PreemptionPolicy != corev1.PreemptNever {
		t.Errorf("pod of class never: priority %d policy %s", *p.Spec.Priority, *p.Spec.PreemptionPolicy)
	}
	p, err = pods.Create(ctx, newPod("defaulted", "", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.PriorityClassName != "low" || *p.Spec.Priority != 10 {
		t.Errorf("pod naming no class: class %q priority %d, want the default low/10", p.Spec.PriorityClassName, *p.Spec.Priority)
	}
	if _, err := pods.Create(ctx, newPod("missing", "nope", nil), metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "no PriorityClass with name nope was found") {
		t.Errorf("missing class: %v, want 403", err)
	}
	if _, err := pods.Create(ctx, newPod("own", "never", ptr.To(int32(5))), metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 100 from the given PriorityClass name") {
		t.Errorf("pod with its own priority: %v, want 403", err)
	}
	// The class's priority stays through an update that leaves it out.
	p.Spec.Priority, p.Spec.PreemptionPolicy = nil, nil
	p.Labels = map[string]string{"updated": "yes"}
	if p, err = pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil || p.Spec.Priority == nil || *p.Spec.Priority != 10 {
		t.Errorf("update: %v, priority %v", err, p.Spec.Priority)
	}
}
