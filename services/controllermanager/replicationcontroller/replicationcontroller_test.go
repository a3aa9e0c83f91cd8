package replicationcontroller_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/replicationcontroller"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// startAPIServer runs a real apiserver and returns an unthrottled client of it.
func startAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	return kubernetes.NewForConfigOrDie(cfg)
}

// startController runs the replication controller against cs until the test ends,
// recording events as kube's replication-controller does.
func startController(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: replicationcontroller.EventSource, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	c := replicationcontroller.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
}

func newRC(name string, replicas int32) *corev1.ReplicationController {
	labels := map[string]string{"app": name}
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To(replicas),
			Selector: labels,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// ownedPods lists the pods whose controller is the object with uid.
func ownedPods(ctx context.Context, cs kubernetes.Interface, uid types.UID) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == uid {
			out = append(out, p)
		}
	}
	return out, nil
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func waitForPods(t *testing.T, cs kubernetes.Interface, uid types.UID, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, fmt.Sprintf("%d pods", n), func(ctx context.Context) (bool, error) {
		var err error
		pods, err = ownedPods(ctx, cs, uid)
		return err == nil && len(pods) == n, nil
	})
	return pods
}

// eventReasons counts the events recorded on the ReplicationController name by reason,
// keeping only those that report the replication controller as their source.
func eventReasons(ctx context.Context, cs kubernetes.Interface, name string) (map[string]int, error) {
	list, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=ReplicationController,involvedObject.name=" + name,
	})
	if err != nil {
		return nil, err
	}
	reasons := map[string]int{}
	for _, e := range list.Items {
		if e.Source.Component == replicationcontroller.EventSource && e.InvolvedObject.APIVersion == "v1" {
			reasons[e.Reason] += int(max(e.Count, 1))
		}
	}
	return reasons, nil
}

func TestReplicationControllerKeepsReplicasWithOwnerReferences(t *testing.T) {
	cs := startAPIServer(t)
	startController(t, cs)
	ctx := context.Background()
	rcs := cs.CoreV1().ReplicationControllers("default")
	rc, err := rcs.Create(ctx, newRC("web", 3), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitForPods(t, cs, rc.UID, 3)
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		if ref.Kind != "ReplicationController" || ref.APIVersion != "v1" || ref.Name != "web" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("pod %s: controller reference %+v", p.Name, ref)
		}
		if p.GenerateName != "web-" || p.Labels["app"] != "web" {
			t.Errorf("pod %s: generateName %q labels %v", p.Name, p.GenerateName, p.Labels)
		}
	}

	t.Run("status counts ready pods, at the observed generation", func(t *testing.T) {
		p := pods[0]
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "status", func(ctx context.Context) (bool, error) {
			got, err := rcs.Get(ctx, "web", metav1.GetOptions{})
			return err == nil && got.Status.Replicas == 3 && got.Status.FullyLabeledReplicas == 3 && got.Status.ReadyReplicas == 1 &&
				got.Status.AvailableReplicas == 1 && got.Status.ObservedGeneration == got.Generation, nil
		})
	})

	t.Run("scaling down through the scale subresource deletes not-ready pods first", func(t *testing.T) {
		ready := pods[0].Name
		if _, err := rcs.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}, "scale"); err != nil {
			t.Fatal(err)
		}
		left := waitForPods(t, cs, rc.UID, 1)
		if left[0].Name != ready {
			t.Errorf("kept %s, want the ready pod %s", left[0].Name, ready)
		}
	})

	t.Run("events name the ReplicationController, as kube's do", func(t *testing.T) {
		waitFor(t, "SuccessfulCreate and SuccessfulDelete events", func(ctx context.Context) (bool, error) {
			reasons, err := eventReasons(ctx, cs, "web")
			return err == nil && reasons["SuccessfulCreate"] == 3 && reasons["SuccessfulDelete"] == 2, nil
		})
	})
}

// TestReplicationControllerAdoptsAndReleases: a ReplicationController adopts a matching
// orphan instead of creating a pod, and releases (and replaces) a pod that stops
// matching. The controller starts after the orphan exists, so its informer has listed
// it before the first sync.
func TestReplicationControllerAdoptsAndReleases(t *testing.T) {
	cs := startAPIServer(t)
	ctx := context.Background()
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: map[string]string{"app": "adopter"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startController(t, cs)
	adopter, err := cs.CoreV1().ReplicationControllers("default").Create(ctx, newRC("adopter", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitForPods(t, cs, adopter.UID, 1)
	if pods[0].Name != "orphan" {
		t.Fatalf("the ReplicationController owns %s, want the adopted orphan", pods[0].Name)
	}
	if ref := metav1.GetControllerOf(&pods[0]); ref.Kind != "ReplicationController" || ref.APIVersion != "v1" {
		t.Errorf("adopted with %+v", ref)
	}
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "orphan", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"elsewhere"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "release", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "orphan", metav1.GetOptions{})
		return err == nil && len(p.OwnerReferences) == 0, nil
	})
	if replacement := waitForPods(t, cs, adopter.UID, 1); replacement[0].Name == "orphan" {
		t.Errorf("no replacement for the released pod")
	}
}

// TestReplicationControllerReportsReplicaFailure: pods the apiserver refuses (a missing
// service account) set the ReplicaFailure condition and record FailedCreate; fixing the
// template clears the condition.
func TestReplicationControllerReportsReplicaFailure(t *testing.T) {
	cs := startAPIServer(t)
	startController(t, cs)
	ctx := context.Background()
	rcs := cs.CoreV1().ReplicationControllers("default")
	rc := newRC("failing", 2)
	rc.Spec.Template.Spec.ServiceAccountName = "missing"
	if _, err := rcs.Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ReplicaFailure condition", func(ctx context.Context) (bool, error) {
		got, err := rcs.Get(ctx, "failing", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.ReplicationControllerReplicaFailure && c.Status == corev1.ConditionTrue && c.Reason == "FailedCreate" {
				return true, nil
			}
		}
		return false, nil
	})
	waitFor(t, "a FailedCreate event", func(ctx context.Context) (bool, error) {
		reasons, err := eventReasons(ctx, cs, "failing")
		return err == nil && reasons["FailedCreate"] > 0, nil
	})
	if _, err := rcs.Patch(ctx, "failing", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"spec":{"serviceAccountName":"default"}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the condition cleared and 2 replicas", func(ctx context.Context) (bool, error) {
		got, err := rcs.Get(ctx, "failing", metav1.GetOptions{})
		return err == nil && len(got.Status.Conditions) == 0 && got.Status.Replicas == 2, nil
	})
}

// TestConversionRoundTrips: what the controller writes back (status, events) is the
// ReplicationController it read.
func TestConversionRoundTrips(t *testing.T) {
	rc := newRC("web", 2)
	rc.Namespace, rc.UID, rc.ResourceVersion, rc.Generation = "default", "uid-1", "7", 3
	rc.Spec.MinReadySeconds = 5
	rc.Status = corev1.ReplicationControllerStatus{
		Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: 3,
		Conditions: []corev1.ReplicationControllerCondition{{Type: corev1.ReplicationControllerReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "quota"}},
	}
	rs := replicationcontroller.ToReplicaSet(rc)
	if rs.Spec.Selector.MatchLabels["app"] != "web" || *rs.Spec.Replicas != 2 || rs.Spec.Template.Labels["app"] != "web" ||
		string(rs.Status.Conditions[0].Type) != "ReplicaFailure" || rs.UID != "uid-1" {
		t.Fatalf("as a ReplicaSet: %+v", rs)
	}
	if back := replicationcontroller.ToReplicationController(rs); !reflect.DeepEqual(back, rc) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, rc)
	}
	rs.Spec.Replicas = ptr.To(int32(4))
	if *rc.Spec.Replicas != 2 {
		t.Error("the ReplicaSet shares the ReplicationController's memory")
	}
	if bare := replicationcontroller.ToReplicaSet(&corev1.ReplicationController{}); bare.Spec.Replicas != nil || len(bare.Spec.Template.Spec.Containers) != 0 {
		t.Errorf("a ReplicationController without template or replicas: %+v", bare.Spec)
	}
}
