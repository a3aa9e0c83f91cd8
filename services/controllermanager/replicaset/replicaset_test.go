package replicaset_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/replicaset"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver and the ReplicaSet controller against it.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs := startAPIServer(t)
	startController(t, cs)
	return cs
}

// startAPIServer runs a real apiserver and returns an unthrottled client of it.
func startAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	return kubernetes.NewForConfigOrDie(cfg)
}

// startController runs the ReplicaSet controller against cs until the test ends. Its
// workers start once its informers have listed what cs holds.
func startController(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: replicaset.Name, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	c := replicaset.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
}

func newRS(name string, replicas int32) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// ownedPods lists the pods whose controller is the ReplicaSet with uid.
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

func TestReplicaSetKeepsReplicasWithOwnerReferences(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	rs, err := cs.AppsV1().ReplicaSets("default").Create(ctx, newRS("web", 3), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitForPods(t, cs, rs.UID, 3)
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		if ref.Kind != "ReplicaSet" || ref.APIVersion != "apps/v1" || ref.Name != "web" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("pod %s: controller reference %+v", p.Name, ref)
		}
		if p.GenerateName != "web-" {
			t.Errorf("pod %s: generateName %q, want web-", p.Name, p.GenerateName)
		}
	}

	t.Run("a deleted pod is replaced", func(t *testing.T) {
		victim := pods[0].Name
		if err := cs.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a replacement", func(ctx context.Context) (bool, error) {
			now, err := ownedPods(ctx, cs, rs.UID)
			if err != nil || len(now) != 3 {
				return false, nil
			}
			for _, p := range now {
				if p.Name == victim {
					return false, nil
				}
			}
			return true, nil
		})
	})

	t.Run("status counts ready pods", func(t *testing.T) {
		now := waitForPods(t, cs, rs.UID, 3)
		p := now[0]
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "status", func(ctx context.Context) (bool, error) {
			got, err := cs.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
			return err == nil && got.Status.Replicas == 3 && got.Status.ReadyReplicas == 1 &&
				got.Status.AvailableReplicas == 1 && got.Status.ObservedGeneration == got.Generation, nil
		})
	})

	t.Run("scaling down deletes not-ready pods first", func(t *testing.T) {
		var ready string
		for _, p := range waitForPods(t, cs, rs.UID, 3) {
			if len(p.Status.Conditions) > 0 {
				ready = p.Name
			}
		}
		if _, err := cs.AppsV1().ReplicaSets("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		left := waitForPods(t, cs, rs.UID, 1)
		if left[0].Name != ready {
			t.Errorf("kept %s, want the ready pod %s", left[0].Name, ready)
		}
	})
}

// TestReplicaSetAdoptsAndReleases: a ReplicaSet adopts a matching orphan instead of
// creating a pod, and releases (and replaces) a pod that stops matching. The controller
// starts after the orphan exists, so its informer has listed it before the first sync
// (two watches have no order between them: a ReplicaSet seen before the orphan creates
// a pod, and the tie-break between two pods of the same second may keep either).
func TestReplicaSetAdoptsAndReleases(t *testing.T) {
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
	adopter, err := cs.AppsV1().ReplicaSets("default").Create(ctx, newRS("adopter", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitForPods(t, cs, adopter.UID, 1)
	if pods[0].Name != "orphan" {
		t.Fatalf("the ReplicaSet owns %s, want the adopted orphan", pods[0].Name)
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
