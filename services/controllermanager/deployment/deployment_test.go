package deployment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/deployment"
	"skiff.dev/services/controllermanager/replicaset"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// noKubeletLabel marks pods the test's stand-in kubelet leaves unready.
const noKubeletLabel = "test.skiff.dev/no-kubelet"

// start runs a real apiserver with the ReplicaSet and Deployment controllers, and a
// stand-in for the kubelet (there is none in unit tests) that marks every new pod
// Running and Ready through pods/status, unless it carries noKubeletLabel.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "controller-manager", Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	rsc := replicaset.New(factory, cs, recorder)
	dc := deployment.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); rsc.Run(ctx, 2) }()
	go func() { defer wg.Done(); dc.Run(ctx, 2) }()
	go func() { defer wg.Done(); readyPods(ctx, t, cs) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	return cs
}

// readyPods is the stand-in kubelet.
func readyPods(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("watch pods: %v", err)
		}
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type != watch.Added || p.Labels[noKubeletLabel] != "" {
			continue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		_, _ = cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}
}

func newDeployment(name string, replicas int32, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
			},
		},
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// rolledOut is kubectl rollout status' test: the controller saw the spec, every replica
// is updated and available, and no old replica is left.
func rolledOut(ctx context.Context, cs kubernetes.Interface, name string) (bool, error) {
	d, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	r := *d.Spec.Replicas
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == r &&
		d.Status.Replicas == r && d.Status.AvailableReplicas == r, nil
}

func replicaSetsOf(ctx context.Context, cs kubernetes.Interface, uid types.UID) (map[string]appsv1.ReplicaSet, error) {
	list, err := cs.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]appsv1.ReplicaSet{}
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == uid {
			out[rs.Name] = rs
		}
	}
	return out, nil
}

func setImage(t *testing.T, cs kubernetes.Interface, name, image string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":%q}]}}}}`, image)
	if _, err := cs.AppsV1().Deployments("default").Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRollingUpdateRespectsSurgeAndUnavailabilityThenRollsBack(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	d := newDeployment("web", 3, "busybox:1")
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}
	d, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "web") })
	first, err := replicaSetsOf(ctx, cs, d.UID)
	if err != nil || len(first) != 1 {
		t.Fatalf("want one ReplicaSet, got %v (%v)", first, err)
	}
	var firstRS appsv1.ReplicaSet
	for _, rs := range first {
		firstRS = rs
	}
	hash := firstRS.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	if hash == "" || firstRS.Name != "web-"+hash || firstRS.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] != hash ||
		firstRS.Annotations[deployment.RevisionAnnotation] != "1" {
		t.Fatalf("first ReplicaSet %s: labels %v selector %v annotations %v", firstRS.Name, firstRS.Labels, firstRS.Spec.Selector, firstRS.Annotations)
	}

	// Watch every ReplicaSet state during the update: the pods they ask for never
	// exceed replicas+maxSurge = 4, and those available never drop below
	// replicas-maxUnavailable = 3.
	w, err := cs.AppsV1().ReplicaSets("default").Watch(ctx, metav1.ListOptions{ResourceVersion: firstRS.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	states := map[string]appsv1.ReplicaSet{firstRS.Name: firstRS}
	maxSpec, minAvailable := int32(0), int32(1<<30)
	observe := func() {
		var spec, available int32
		for _, rs := range states {
			spec += *rs.Spec.Replicas
			available += rs.Status.AvailableReplicas
		}
		maxSpec, minAvailable = max(maxSpec, spec), min(minAvailable, available)
	}
	setImage(t, cs, "web", "busybox:2")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			return rolledOut(ctx, cs, "web")
		})
	}()
	for finished := false; !finished; {
		select {
		case ev := <-w.ResultChan():
			if rs, ok := ev.Object.(*appsv1.ReplicaSet); ok {
				states[rs.Name] = *rs
				observe()
			}
		case <-done:
			finished = true
		}
	}
	if ok, _ := rolledOut(ctx, cs, "web"); !ok {
		t.Fatal("the update did not finish")
	}
	if maxSpec > 4 || minAvailable < 3 {
		t.Errorf("during the update: up to %d pods asked for (max 4), down to %d available (min 3)", maxSpec, minAvailable)
	}
	now, _ := replicaSetsOf(ctx, cs, d.UID)
	if len(now) != 2 || *now[firstRS.Name].Spec.Replicas != 0 {
		t.Fatalf("after the update: %d ReplicaSets, the first asks for %d", len(now), *now[firstRS.Name].Spec.Replicas)
	}
	got, _ := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if got.Annotations[deployment.RevisionAnnotation] != "2" {
		t.Errorf("deployment revision %q, want 2", got.Annotations[deployment.RevisionAnnotation])
	}
	if c := condition(got, appsv1.DeploymentProgressing); c == nil || c.Reason != deployment.NewRSAvailableReason {
		t.Errorf("Progressing condition %+v, want NewReplicaSetAvailable", c)
	}

	// kubectl rollout undo: put revision 1's template back (without its hash label).
	template := firstRS.Spec.Template.DeepCopy()
	delete(template.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	got.Spec.Template = *template
	if _, err := cs.AppsV1().Deployments("default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rollback", func(ctx context.Context) (bool, error) {
		if ok, err := rolledOut(ctx, cs, "web"); !ok || err != nil {
			return false, err
		}
		rsets, err := replicaSetsOf(ctx, cs, d.UID)
		rs := rsets[firstRS.Name]
		return err == nil && len(rsets) == 2 && *rs.Spec.Replicas == 3 &&
			rs.Annotations[deployment.RevisionAnnotation] == "3" && rs.Annotations[deployment.RevisionHistoryAnnotation] == "1", nil
	})
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func TestRecreateScalesOldToZeroFirst(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	d := newDeployment("batch", 2, "busybox:1")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	d, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "batch") })
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	setImage(t, cs, "batch", "busybox:2")
	// The first pod of the new template must not appear while an old one exists.
	live := map[string]string{}
	list, _ := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	for _, p := range list.Items {
		live[p.Name] = p.Spec.Containers[0].Image
	}
	timeout := time.After(60 * time.Second)
	for newPods := 0; newPods < 2; {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			switch ev.Type {
			case watch.Deleted:
				delete(live, p.Name)
			case watch.Added:
				if p.Spec.Containers[0].Image == "busybox:2" {
					for name, image := range live {
						if image == "busybox:1" {
							t.Fatalf("new pod %s created while old pod %s exists", p.Name, name)
						}
					}
					newPods++
				}
				live[p.Name] = p.Spec.Containers[0].Image
			}
		case <-timeout:
			t.Fatal("the new pods never came")
		}
	}
	waitFor(t, "the second rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "batch") })
}

func TestPausedProgressDeadlineAndHistoryLimit(t *testing.T) {
	cs := start(t)
	ctx := context.Background()

	t.Run("a paused deployment does not roll out until resumed", func(t *testing.T) {
		d, err := cs.AppsV1().Deployments("default").Create(ctx, newDeployment("paused", 1, "busybox:1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the first rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "paused") })
		if _, err := cs.AppsV1().Deployments("default").Patch(ctx, "paused", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		setImage(t, cs, "paused", "busybox:2")
		waitFor(t, "the paused condition", func(ctx context.Context) (bool, error) {
			got, err := cs.AppsV1().Deployments("default").Get(ctx, "paused", metav1.GetOptions{})
			c := condition(got, appsv1.DeploymentProgressing)
			return err == nil && got.Status.ObservedGeneration == got.Generation && c != nil && c.Reason == deployment.PausedDeployReason, nil
		})
		if rsets, _ := replicaSetsOf(ctx, cs, d.UID); len(rsets) != 1 {
			t.Fatalf("a paused deployment made a new ReplicaSet: %d", len(rsets))
		}
		if _, err := cs.AppsV1().Deployments("default").Patch(ctx, "paused", types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the resumed rollout", func(ctx context.Context) (bool, error) {
			rsets, err := replicaSetsOf(ctx, cs, d.UID)
			ok, _ := rolledOut(ctx, cs, "paused")
			return err == nil && ok && len(rsets) == 2, nil
		})
	})

	t.Run("a rollout that cannot progress reports ProgressDeadlineExceeded", func(t *testing.T) {
		d := newDeployment("stuck", 1, "busybox:1")
		d.Spec.Template.Labels[noKubeletLabel] = "true"
		d.Spec.ProgressDeadlineSeconds = ptr.To(int32(1))
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the deadline", func(ctx context.Context) (bool, error) {
			got, err := cs.AppsV1().Deployments("default").Get(ctx, "stuck", metav1.GetOptions{})
			c := condition(got, appsv1.DeploymentProgressing)
			return err == nil && c != nil && c.Status == corev1.ConditionFalse && c.Reason == deployment.TimedOutReason, nil
		})
	})

	t.Run("revisionHistoryLimit old ReplicaSets are kept", func(t *testing.T) {
		d := newDeployment("history", 1, "busybox:1")
		d.Spec.RevisionHistoryLimit = ptr.To(int32(1))
		d, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, image := range []string{"busybox:2", "busybox:3", "busybox:4"} {
			waitFor(t, "a rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "history") })
			setImage(t, cs, "history", image)
		}
		waitFor(t, "cleanup", func(ctx context.Context) (bool, error) {
			rsets, err := replicaSetsOf(ctx, cs, d.UID)
			ok, _ := rolledOut(ctx, cs, "history")
			return err == nil && ok && len(rsets) == 2, nil
		})
	})
}
