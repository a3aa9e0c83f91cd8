package statefulset_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/statefulset"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver and the
// StatefulSet controller against it. No kubelet runs: the tests play its part by
// writing pod status.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: statefulset.Name, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	c := statefulset.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return cs
}

func newSet(name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitForPod waits until pod name exists, not being deleted, and returns it; with
// notUID set, until it is another pod than that one.
func waitForPod(t *testing.T, cs kubernetes.Interface, name string, notUID types.UID) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, "pod "+name, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.DeletionTimestamp == nil && p.UID != notUID, nil
	})
	return pod
}

// setPhase writes the pod's status as a kubelet would: phase, and Ready when Running.
func setPhase(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	ready := corev1.ConditionFalse
	if phase == corev1.PodRunning {
		ready = corev1.ConditionTrue
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p.Status.Phase = phase
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.Now()}}
		_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		t.Fatalf("status of pod %s: %v", pod.Name, err)
	}
}

// readyPod waits for pod name (other than notUID) and makes it Running and Ready.
func readyPod(t *testing.T, cs kubernetes.Interface, name string, notUID types.UID) *corev1.Pod {
	t.Helper()
	pod := waitForPod(t, cs, name, notUID)
	setPhase(t, cs, pod, corev1.PodRunning)
	return pod
}

// waitForStatus waits until the set's status satisfies cond and returns the set.
func waitForStatus(t *testing.T, cs kubernetes.Interface, name, what string, cond func(*appsv1.StatefulSet) bool) *appsv1.StatefulSet {
	t.Helper()
	var set *appsv1.StatefulSet
	waitFor(t, what, func(ctx context.Context) (bool, error) {
		s, err := cs.AppsV1().StatefulSets("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		set = s
		return s.Status.ObservedGeneration == s.Generation && cond(s), nil
	})
	return set
}

func podExists(t *testing.T, cs kubernetes.Interface, name string) bool {
	t.Helper()
	_, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// deletions watches pod deletions from now on and returns a function that waits for n
// of them and returns the deleted pods' names in order.
func deletions(t *testing.T, cs kubernetes.Interface) func(n int) []string {
	t.Helper()
	w, err := cs.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var names []string
	return func(n int) []string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for len(names) < n {
			select {
			case ev := <-w.ResultChan():
				if ev.Type == watch.Deleted {
					names = append(names, ev.Object.(*corev1.Pod).Name)
				}
			case <-timeout:
				t.Fatalf("waiting for %d pod deletions, saw %v", n, names)
			}
		}
		return names[:n]
	}
}

func hasEvent(ctx context.Context, cs kubernetes.Interface, eventType, reason, message string) (bool, error) {
	list, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, e := range list.Items {
		if e.Type == eventType && e.Reason == reason && e.Message == message && e.InvolvedObject.Kind == "StatefulSet" && e.Source.Component == statefulset.Name {
			return true, nil
		}
	}
	return false, nil
}

// TestOrderedReadyScalesInOrder: OrderedReady creates web-0, web-1, web-2 one at a time,
// each only once the one before is Running and Ready, with kube's identity (name,
// labels, hostname, subdomain, controller reference) and events; status counts them;
// scaling down deletes the highest ordinal first.
func TestOrderedReadyScalesInOrder(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	set, err := cs.AppsV1().StatefulSets("default").Create(ctx, newSet("web", 3), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web0 := waitForPod(t, cs, "web-0", "")
	// The controller has looked at the set with web-0 created and not ready.
	waitForStatus(t, cs, "web", "status.replicas 1", func(s *appsv1.StatefulSet) bool { return s.Status.Replicas == 1 })
	if podExists(t, cs, "web-1") {
		t.Fatal("web-1 created before web-0 is Ready")
	}
	set = waitForStatus(t, cs, "web", "an update revision", func(s *appsv1.StatefulSet) bool { return s.Status.UpdateRevision != "" })
	ref := metav1.GetControllerOf(web0)
	if ref == nil || ref.Kind != "StatefulSet" || ref.Name != "web" || ref.UID != set.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("web-0 controller reference %+v", ref)
	}
	if web0.Labels[appsv1.StatefulSetPodNameLabel] != "web-0" || web0.Labels[appsv1.PodIndexLabel] != "0" ||
		web0.Labels[appsv1.StatefulSetRevisionLabel] != set.Status.UpdateRevision || web0.Labels["app"] != "web" {
		t.Errorf("web-0 labels %v, update revision %s", web0.Labels, set.Status.UpdateRevision)
	}
	if web0.Spec.Hostname != "web-0" || web0.Spec.Subdomain != "web" {
		t.Errorf("web-0 hostname %q subdomain %q, want web-0 and web", web0.Spec.Hostname, web0.Spec.Subdomain)
	}

	setPhase(t, cs, web0, corev1.PodRunning)
	web1 := waitForPod(t, cs, "web-1", "")
	waitForStatus(t, cs, "web", "status.replicas 2", func(s *appsv1.StatefulSet) bool { return s.Status.Replicas == 2 })
	if podExists(t, cs, "web-2") {
		t.Fatal("web-2 created before web-1 is Ready")
	}
	setPhase(t, cs, web1, corev1.PodRunning)
	readyPod(t, cs, "web-2", "")
	set = waitForStatus(t, cs, "web", "3 ready replicas", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 3 })
	st := set.Status
	if st.Replicas != 3 || st.AvailableReplicas != 3 || st.CurrentReplicas != 3 || st.UpdatedReplicas != 3 ||
		st.CurrentRevision == "" || st.CurrentRevision != st.UpdateRevision || ptr.Deref(st.CollisionCount, -1) != 0 {
		t.Errorf("status %+v", st)
	}
	waitFor(t, "SuccessfulCreate events", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, cs, corev1.EventTypeNormal, "SuccessfulCreate", "create Pod web-2 in StatefulSet web successful")
	})

	deleted := deletions(t, cs)
	if _, err := cs.AppsV1().StatefulSets("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := deleted(2); !slices.Equal(got, []string{"web-2", "web-1"}) {
		t.Errorf("scale down deleted %v, want web-2 then web-1", got)
	}
	waitForStatus(t, cs, "web", "1 replica", func(s *appsv1.StatefulSet) bool { return s.Status.Replicas == 1 && s.Status.ReadyReplicas == 1 })
	waitFor(t, "a SuccessfulDelete event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, cs, corev1.EventTypeNormal, "SuccessfulDelete", "delete Pod web-2 in StatefulSet web successful")
	})
}

// TestOrderedReadyHaltsOnUnhealthyPod: while web-0 is not ready no pod is added, and a
// scale down does not delete anything while a lower pod is unhealthy (kube's "halt if
// any stateful pod is unhealthy").
func TestOrderedReadyHaltsOnUnhealthyPod(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, newSet("ss", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ss0 := readyPod(t, cs, "ss-0", "")
	ss1 := readyPod(t, cs, "ss-1", "")
	readyPod(t, cs, "ss-2", "")
	waitForStatus(t, cs, "ss", "3 ready", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 3 })

	// ss-0 turns unready: scaling down to 1 must not delete ss-2 while ss-0, below it,
	// is unhealthy.
	setPhase(t, cs, ss0, corev1.PodPending)
	waitForStatus(t, cs, "ss", "2 ready", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 2 })
	set, err := cs.AppsV1().StatefulSets("default").Patch(ctx, "ss", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, cs, "ss", "the scale down observed", func(s *appsv1.StatefulSet) bool { return s.Status.ObservedGeneration == set.Generation })
	if !podExists(t, cs, "ss-2") || !podExists(t, cs, "ss-1") {
		t.Fatal("a pod was deleted while ss-0 is unhealthy")
	}
	deleted := deletions(t, cs)
	setPhase(t, cs, ss0, corev1.PodRunning)
	if got := deleted(2); !slices.Equal(got, []string{"ss-2", "ss-1"}) {
		t.Errorf("scale down deleted %v, want ss-2 then ss-1", got)
	}
	_ = ss1
}

// TestRollingUpdate: an image change replaces web-2, web-1, web-0 in that order, each
// after the one above is ready again; the set then has 2 ControllerRevisions and
// current == update revision. A partition keeps lower ordinals on the old revision, and
// going back to an old template renumbers that revision instead of making a new one.
func TestRollingUpdate(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	sets := cs.AppsV1().StatefulSets("default")
	if _, err := sets.Create(ctx, newSet("web", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, name := range []string{"web-0", "web-1", "web-2"} {
		uids[name] = readyPod(t, cs, name, "").UID
	}
	v1 := waitForStatus(t, cs, "web", "3 ready", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 3 }).Status.CurrentRevision

	deleted := deletions(t, cs)
	if _, err := sets.Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:1.37"}]}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"web-2", "web-1", "web-0"} {
		if got := deleted(i + 1); got[i] != name {
			t.Fatalf("rolling update deleted %v, want web-2, web-1, web-0 in order", got)
		}
		pod := readyPod(t, cs, name, uids[name])
		if pod.Spec.Containers[0].Image != "busybox:1.37" {
			t.Errorf("%s recreated with image %s", name, pod.Spec.Containers[0].Image)
		}
		uids[name] = pod.UID
	}
	set := waitForStatus(t, cs, "web", "the update done", func(s *appsv1.StatefulSet) bool {
		return s.Status.UpdatedReplicas == 3 && s.Status.ReadyReplicas == 3 && s.Status.CurrentRevision == s.Status.UpdateRevision
	})
	v2 := set.Status.UpdateRevision
	if v2 == v1 {
		t.Fatalf("the update revision did not change: %s", v2)
	}
	revisions := func() map[string]int64 {
		t.Helper()
		list, err := cs.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range list.Items {
			if ref := metav1.GetControllerOf(&r); ref == nil || ref.UID != set.UID {
				t.Errorf("revision %s not controlled by the set: %+v", r.Name, r.OwnerReferences)
			}
			out[r.Name] = r.Revision
		}
		return out
	}
	if got := revisions(); len(got) != 2 || got[v1] != 1 || got[v2] != 2 {
		t.Errorf("revisions %v, want %s=1 and %s=2", got, v1, v2)
	}

	// Partition 2: only web-2 takes the next template.
	if _, err := sets.Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}},"template":{"spec":{"containers":[{"name":"c","image":"busybox:1.38"}]}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := deleted(4); got[3] != "web-2" {
		t.Fatalf("partitioned update deleted %v, want web-2", got)
	}
	uids["web-2"] = readyPod(t, cs, "web-2", uids["web-2"]).UID
	set = waitForStatus(t, cs, "web", "the partitioned update", func(s *appsv1.StatefulSet) bool {
		return s.Status.UpdatedReplicas == 1 && s.Status.ReadyReplicas == 3
	})
	if set.Status.CurrentRevision != v2 || set.Status.CurrentReplicas != 2 {
		t.Errorf("after the partitioned update: status %+v, want current %s with 2 replicas", set.Status, v2)
	}
	for _, name := range []string{"web-0", "web-1"} {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.UID != uids[name] || p.Labels[appsv1.StatefulSetRevisionLabel] != v2 {
			t.Errorf("%s below the partition changed: %v %v", name, err, p.Labels)
		}
	}

	// Back to the first template, partition 0: the first revision becomes the newest.
	if _, err := sets.Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}},"template":{"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"web-2", "web-1", "web-0"} {
		if got := deleted(5 + i); got[4+i] != name {
			t.Fatalf("rollback deleted %v, want web-2, web-1, web-0 after the earlier ones", got)
		}
		uids[name] = readyPod(t, cs, name, uids[name]).UID
	}
	set = waitForStatus(t, cs, "web", "the rollback done", func(s *appsv1.StatefulSet) bool {
		return s.Status.UpdatedReplicas == 3 && s.Status.ReadyReplicas == 3 && s.Status.CurrentRevision == s.Status.UpdateRevision
	})
	if set.Status.UpdateRevision != v1 {
		t.Errorf("rollback update revision %s, want the first one %s", set.Status.UpdateRevision, v1)
	}
	if got := revisions(); len(got) != 3 || got[v1] != 4 || got[v2] != 2 {
		t.Errorf("revisions after the rollback %v, want %s renumbered 4 and %s still 2", got, v1, v2)
	}
}

// TestParallelRecreatesFailedPods: Parallel creates every pod at once, without waiting
// for readiness; a Failed pod is deleted and created again; OnDelete leaves pods on the
// old revision until they are deleted; revisionHistoryLimit 0 drops revisions no pod
// uses.
func TestParallelRecreatesFailedPods(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	s := newSet("par", 3)
	s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	s.Spec.RevisionHistoryLimit = ptr.To(int32(0))
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, name := range []string{"par-0", "par-1", "par-2"} {
		pods = append(pods, waitForPod(t, cs, name, ""))
	}
	setPhase(t, cs, pods[1], corev1.PodFailed)
	recreated := waitForPod(t, cs, "par-1", pods[1].UID)
	if recreated.Status.Phase != corev1.PodPending {
		t.Errorf("recreated par-1 is %s", recreated.Status.Phase)
	}

	for _, image := range []string{"busybox:1.37", "busybox:1.38"} {
		if _, err := cs.AppsV1().StatefulSets("default").Patch(ctx, "par", types.StrategicMergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":%q}]}}}}`, image)), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	set := waitForStatus(t, cs, "par", "the OnDelete update observed", func(s *appsv1.StatefulSet) bool {
		return s.Status.UpdateRevision != s.Status.CurrentRevision && s.Status.CurrentReplicas == 3 && s.Status.UpdatedReplicas == 0
	})
	waitFor(t, "the unused middle revision dropped", func(ctx context.Context) (bool, error) {
		list, err := cs.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{LabelSelector: "app=par"})
		return err == nil && len(list.Items) == 2, err
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "par-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitForPod(t, cs, "par-0", pods[0].UID)
	if p.Labels[appsv1.StatefulSetRevisionLabel] != set.Status.UpdateRevision || p.Spec.Containers[0].Image != "busybox:1.38" {
		t.Errorf("par-0 recreated at %s with %s, want %s", p.Labels[appsv1.StatefulSetRevisionLabel], p.Spec.Containers[0].Image, set.Status.UpdateRevision)
	}
	for _, name := range []string{"par-1", "par-2"} {
		if p, _ := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); p.Labels[appsv1.StatefulSetRevisionLabel] != set.Status.CurrentRevision {
			t.Errorf("%s changed revision under OnDelete: %v", name, p.Labels)
		}
	}
}

// TestVolumeClaimTemplatesCreateClaims: a set with a volume claim template gets the
// claim <template>-<set>-<ordinal> made from the template, with kube's SuccessfulCreate
// event, and its pod a volume from that claim.
func TestVolumeClaimTemplatesCreateClaims(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	s := newSet("db", 1)
	s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
	s.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitForPod(t, cs, "db-0", "")
	if len(pod.Spec.Volumes) == 0 || pod.Spec.Volumes[0].Name != "data" || pod.Spec.Volumes[0].PersistentVolumeClaim == nil ||
		pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data-db-0" {
		t.Errorf("db-0 volumes %+v, want data from claim data-db-0", pod.Spec.Volumes)
	}
	claim, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := claim.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "1Gi" || len(claim.Spec.AccessModes) != 1 {
		t.Errorf("claim spec %+v, want the template's", claim.Spec)
	}
	waitFor(t, "the SuccessfulCreate event for the claim", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, cs, corev1.EventTypeNormal, "SuccessfulCreate", "create Claim data-db-0 Pod db-0 in StatefulSet db success")
	})
}

// TestAdoptsAndReleases: an orphan pod named <set>-<ordinal> that the selector matches
// is adopted instead of being created again and, once ready, given its identity labels;
// a pod whose labels stop matching is
// released and replaced.
func TestAdoptsAndReleases(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-0", Labels: map[string]string{"app": "app"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
	orphan, err := cs.CoreV1().Pods("default").Create(ctx, orphan, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// OnDelete: the adopted pod, which has no revision label, is kept as it is.
	s := newSet("app", 1)
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	set, err := cs.AppsV1().StatefulSets("default").Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "app-0 adopted", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "app-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(p)
		return ref != nil && ref.UID == set.UID && p.UID == orphan.UID, nil
	})
	// Once it is Running and Ready the controller gives it its identity labels.
	setPhase(t, cs, orphan, corev1.PodRunning)
	waitFor(t, "app-0's identity", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "app-0", metav1.GetOptions{})
		return err == nil && p.UID == orphan.UID && p.Labels[appsv1.StatefulSetPodNameLabel] == "app-0" && p.Labels[appsv1.PodIndexLabel] == "0", err
	})
	waitFor(t, "a SuccessfulUpdate event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, cs, corev1.EventTypeNormal, "SuccessfulUpdate", "update Pod app-0 in StatefulSet app successful")
	})

	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "app-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"gone"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "app-0 released", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "app-0", metav1.GetOptions{})
		return err == nil && metav1.GetControllerOf(p) == nil, err
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "app-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitForPod(t, cs, "app-0", orphan.UID)
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != set.UID || !strings.HasPrefix(p.Labels[appsv1.StatefulSetRevisionLabel], "app-") {
		t.Errorf("replacement app-0: %+v labels %v", ref, p.Labels)
	}
}

// TestRollingUpdateMaxUnavailable: with rollingUpdate.maxUnavailable 2, the two highest
// ordinals are deleted together, before either replacement exists, and mu-0 waits while
// two pods are unavailable.
func TestRollingUpdateMaxUnavailable(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	s := newSet("mu", 3)
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(2))}}
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, name := range []string{"mu-0", "mu-1", "mu-2"} {
		uids[name] = readyPod(t, cs, name, "").UID
	}
	waitForStatus(t, cs, "mu", "3 ready", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 3 })
	deleted := deletions(t, cs)
	if _, err := cs.AppsV1().StatefulSets("default").Patch(ctx, "mu", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:1.37"}]}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	got := deleted(2)
	slices.Sort(got)
	if !slices.Equal(got, []string{"mu-1", "mu-2"}) {
		t.Fatalf("first deletions %v, want mu-2 and mu-1 together", got)
	}
	// OrderedReady still recreates in order: mu-1 first. While it is not ready and mu-2
	// is missing, two pods are unavailable and mu-0 stays.
	waitForPod(t, cs, "mu-1", uids["mu-1"])
	waitForStatus(t, cs, "mu", "the replacement counted", func(s *appsv1.StatefulSet) bool {
		return s.Status.Replicas == 2 && s.Status.UpdatedReplicas == 1 && s.Status.ReadyReplicas == 1
	})
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "mu-0", metav1.GetOptions{}); err != nil || p.UID != uids["mu-0"] || p.DeletionTimestamp != nil {
		t.Fatalf("mu-0 touched while 2 pods are unavailable: %v", err)
	}
	readyPod(t, cs, "mu-1", uids["mu-1"])
	readyPod(t, cs, "mu-2", uids["mu-2"])
	if got := deleted(3); got[2] != "mu-0" {
		t.Errorf("third deletion %v, want mu-0", got)
	}
}

// TestClaimRetentionPolicy: with persistentVolumeClaimRetentionPolicy Delete/Delete, each
// claim is created owned by the set (the garbage collector deletes it with the set), and
// the claim of a pod scaled away is also owned by that pod before the pod is deleted (it
// goes with the pod); with the default Retain/Retain a claim has no owner.
func TestClaimRetentionPolicy(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	template := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	owners := func(name string) []metav1.OwnerReference {
		t.Helper()
		var claim *corev1.PersistentVolumeClaim
		waitFor(t, "claim "+name, func(ctx context.Context) (bool, error) {
			c, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
			claim = c
			return err == nil, nil
		})
		return claim.OwnerReferences
	}

	kept := newSet("kept", 1)
	kept.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{template}
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if refs := owners("data-kept-0"); len(refs) != 0 {
		t.Errorf("a Retain claim has owners %+v", refs)
	}

	s := newSet("gone", 2)
	s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{template}
	s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
	}
	set, err := cs.AppsV1().StatefulSets("default").Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data-gone-0", "data-gone-1"} {
		if refs := owners(name); len(refs) != 1 || refs[0].Kind != "StatefulSet" || refs[0].UID != set.UID {
			t.Errorf("claim %s owners %+v, want the set", name, refs)
		}
	}
	pod := waitForPod(t, cs, "gone-1", "")
	if _, err := cs.AppsV1().StatefulSets("default").Patch(ctx, "gone", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "data-gone-1 owned by gone-1", func(ctx context.Context) (bool, error) {
		c, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-gone-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, ref := range c.OwnerReferences {
			if ref.Kind == "Pod" && ref.UID == pod.UID {
				return true, nil
			}
		}
		return false, nil
	})
	if refs := owners("data-gone-0"); len(refs) != 1 {
		t.Errorf("the kept ordinal's claim has owners %+v, want the set only", refs)
	}
}
