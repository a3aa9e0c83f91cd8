package daemon_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
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

	"skiff.dev/services/controllermanager/daemon"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver, the DaemonSet controller, and a stand-in for the
// scheduler and the kubelets (there are none in unit tests): every new pod is bound to
// the node its node affinity names and marked Running and Ready through pods/status.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: daemon.EventSource, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	dsc := daemon.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); dsc.Run(ctx, 2) }()
	go func() { defer wg.Done(); standInKubelet(ctx, t, cs) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	return cs
}

// standInKubelet binds each new pod to its target node and makes it Running and Ready.
func standInKubelet(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
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
		if !ok || ev.Type != watch.Added || p.Spec.NodeName != "" {
			continue
		}
		nodeName, err := daemon.GetTargetNodeName(p)
		if err != nil {
			continue
		}
		if err := cs.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: nodeName}}, metav1.CreateOptions{}); err != nil {
			continue
		}
		bound, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		bound.Status.Phase = corev1.PodRunning
		bound.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		_, _ = cs.CoreV1().Pods("default").UpdateStatus(ctx, bound, metav1.UpdateOptions{})
	}
}

func createNode(t *testing.T, cs kubernetes.Interface, name string, labels map[string]string, taints ...corev1.Taint) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func newDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}},
					// Deleted pods go at once: there is no kubelet to finish them.
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
				},
			},
		},
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
}

// podsByNode maps node names to the live pods the DaemonSet with uid controls there.
func podsByNode(ctx context.Context, cs kubernetes.Interface, uid types.UID) (map[string][]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][]corev1.Pod{}
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == uid && p.DeletionTimestamp == nil {
			n, _ := daemon.GetTargetNodeName(&p)
			out[n] = append(out[n], p)
		}
	}
	return out, nil
}

func nodeNames(m map[string][]corev1.Pod) string {
	var names []string
	for n, pods := range m {
		for range pods {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// waitForPodsOn waits until the DaemonSet runs exactly one pod on each of nodes.
func waitForPodsOn(t *testing.T, cs kubernetes.Interface, uid types.UID, nodes ...string) map[string][]corev1.Pod {
	t.Helper()
	sort.Strings(nodes)
	var got map[string][]corev1.Pod
	waitFor(t, "pods on "+strings.Join(nodes, ","), func(ctx context.Context) (bool, error) {
		var err error
		got, err = podsByNode(ctx, cs, uid)
		if err != nil {
			return false, err
		}
		return nodeNames(got) == strings.Join(nodes, ","), fmt.Errorf("pods on %q", nodeNames(got))
	})
	return got
}

// rolledOut is kubectl rollout status's test for DaemonSets, plus every node's pods
// ready.
func rolledOut(ctx context.Context, cs kubernetes.Interface, name string) (bool, error) {
	ds, err := cs.AppsV1().DaemonSets("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
		st.NumberAvailable == st.DesiredNumberScheduled && st.CurrentNumberScheduled == st.DesiredNumberScheduled, fmt.Errorf("status %+v", st)
}

func revisionsOf(ctx context.Context, cs kubernetes.Interface, uid types.UID) (map[string]appsv1.ControllerRevision, error) {
	list, err := cs.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]appsv1.ControllerRevision{}
	for _, cr := range list.Items {
		if ref := metav1.GetControllerOf(&cr); ref != nil && ref.UID == uid {
			out[cr.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] = cr
		}
	}
	return out, nil
}

func TestDaemonSetRunsOnePodOnEachEligibleNode(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	yes := map[string]string{"ds": "yes"}
	createNode(t, cs, "n1", yes)
	createNode(t, cs, "n2", yes)
	createNode(t, cs, "n3", nil)
	createNode(t, cs, "n4", yes, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})

	ds := newDaemonSet("agent")
	ds.Spec.Template.Spec.NodeSelector = yes
	ds, err := cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitForPodsOn(t, cs, ds.UID, "n1", "n2")
	waitFor(t, "the status", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "agent") })

	revs, err := revisionsOf(ctx, cs, ds.UID)
	if err != nil || len(revs) != 1 {
		t.Fatalf("want one revision, got %v (%v)", revs, err)
	}
	var rev appsv1.ControllerRevision
	var hash string
	for hash, rev = range revs {
	}
	if rev.Revision != 1 || rev.Name != "agent-"+hash || !strings.Contains(string(rev.Data.Raw), `"$patch":"replace"`) || rev.Labels["app"] != "agent" {
		t.Errorf("revision %s: %d labels %v data %s", rev.Name, rev.Revision, rev.Labels, rev.Data.Raw)
	}

	p := pods["n1"][0]
	ref := metav1.GetControllerOf(&p)
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	switch {
	case ref == nil || ref.Kind != "DaemonSet" || ref.UID != ds.UID || !ptr.Deref(ref.BlockOwnerDeletion, false):
		t.Errorf("controller reference %+v", ref)
	case p.GenerateName != "agent-":
		t.Errorf("generateName %q", p.GenerateName)
	case p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != hash || p.Labels["pod-template-generation"] != "1":
		t.Errorf("labels %v, want hash %s and generation 1", p.Labels, hash)
	case len(terms) != 1 || terms[0].MatchFields[0].Key != "metadata.name" || terms[0].MatchFields[0].Values[0] != "n1":
		t.Errorf("node affinity %+v", terms)
	}
	tolerated := map[string]bool{}
	for _, tol := range p.Spec.Tolerations {
		tolerated[tol.Key+":"+string(tol.Effect)] = true
	}
	for _, key := range []string{"node.kubernetes.io/not-ready:NoExecute", "node.kubernetes.io/unreachable:NoExecute",
		"node.kubernetes.io/disk-pressure:NoSchedule", "node.kubernetes.io/memory-pressure:NoSchedule",
		"node.kubernetes.io/pid-pressure:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"} {
		if !tolerated[key] {
			t.Errorf("pod lacks toleration %s: %v", key, p.Spec.Tolerations)
		}
	}

	t.Run("a node labelled later gets a pod", func(t *testing.T) {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, "n3", types.MergePatchType, []byte(`{"metadata":{"labels":{"ds":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForPodsOn(t, cs, ds.UID, "n1", "n2", "n3")
	})
	t.Run("a node added later gets a pod", func(t *testing.T) {
		createNode(t, cs, "n5", yes)
		waitForPodsOn(t, cs, ds.UID, "n1", "n2", "n3", "n5")
	})
	t.Run("a node that stops matching loses its pod", func(t *testing.T) {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"metadata":{"labels":{"ds":null}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForPodsOn(t, cs, ds.UID, "n2", "n3", "n5")
		waitFor(t, "the status", func(ctx context.Context) (bool, error) {
			cur, err := cs.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			st := cur.Status
			return st.DesiredNumberScheduled == 3 && st.CurrentNumberScheduled == 3 && st.NumberReady == 3 && st.NumberAvailable == 3 &&
				st.UpdatedNumberScheduled == 3 && st.NumberMisscheduled == 0 && st.NumberUnavailable == 0 && st.ObservedGeneration == 1, fmt.Errorf("status %+v", st)
		})
	})
	t.Run("a failed pod is killed and replaced", func(t *testing.T) {
		cur, err := podsByNode(ctx, cs, ds.UID)
		if err != nil {
			t.Fatal(err)
		}
		failed := cur["n2"][0]
		failed.Status.Phase = corev1.PodFailed
		if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, &failed, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the failed pod's replacement", func(ctx context.Context) (bool, error) {
			now, err := podsByNode(ctx, cs, ds.UID)
			if err != nil {
				return false, err
			}
			n2 := now["n2"]
			return len(n2) == 1 && n2[0].UID != failed.UID && n2[0].Status.Phase == corev1.PodRunning, fmt.Errorf("pods on n2: %d", len(n2))
		})
		waitFor(t, "the FailedDaemonPod event", func(ctx context.Context) (bool, error) {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + daemon.FailedDaemonPodReason})
			if err != nil || len(evs.Items) == 0 {
				return false, err
			}
			want := fmt.Sprintf("Found failed daemon pod default/%s on node n2, will try to kill it", failed.Name)
			return evs.Items[0].Message == want && evs.Items[0].InvolvedObject.Name == "agent", fmt.Errorf("event %q", evs.Items[0].Message)
		})
	})
	t.Run("pods and revisions are orphaned, not deleted, with the DaemonSet gone", func(t *testing.T) {
		// Without a garbage collector here, deleting the DaemonSet leaves its pods and
		// revisions; the controller stops touching them.
		if err := cs.AppsV1().DaemonSets("default").Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		after, err := podsByNode(ctx, cs, ds.UID)
		if err != nil || len(after) != 3 {
			t.Errorf("pods after delete: %v %v", after, err)
		}
	})
}

func TestRollingUpdateHistoryAndRollback(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2", "n3"} {
		createNode(t, cs, n, nil)
	}
	ds, err := cs.AppsV1().DaemonSets("default").Create(ctx, newDaemonSet("agent"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitForPodsOn(t, cs, ds.UID, "n1", "n2", "n3")
	waitFor(t, "the first rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "agent") })
	first, err := revisionsOf(ctx, cs, ds.UID)
	if err != nil || len(first) != 1 {
		t.Fatalf("revisions %v %v", first, err)
	}
	var firstHash string
	for firstHash = range first {
	}

	// Watch the status during the update: with maxUnavailable 1 no more than one node
	// is ever without an available pod.
	patched, err := cs.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.AppsV1().DaemonSets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=agent", ResourceVersion: patched.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	maxUnavailable := int32(0)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			cur, ok := ev.Object.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			maxUnavailable = max(maxUnavailable, cur.Status.NumberUnavailable)
			st := cur.Status
			done = st.ObservedGeneration >= patched.Generation && st.UpdatedNumberScheduled == 3 && st.NumberAvailable == 3
		case <-time.After(60 * time.Second):
			t.Fatal("the update did not finish")
		}
	}
	if maxUnavailable > 1 {
		t.Errorf("%d nodes were without an available pod at once, maxUnavailable is 1", maxUnavailable)
	}
	revs, err := revisionsOf(ctx, cs, ds.UID)
	if err != nil || len(revs) != 2 {
		t.Fatalf("want 2 revisions, got %v (%v)", revs, err)
	}
	var secondHash string
	for h, r := range revs {
		if h != firstHash {
			secondHash = h
			if r.Revision != 2 {
				t.Errorf("the new revision is %d, want 2", r.Revision)
			}
		}
	}
	pods, _ := podsByNode(ctx, cs, ds.UID)
	for n, ps := range pods {
		if len(ps) != 1 || ps[0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != secondHash || ps[0].Spec.Containers[0].Image != "busybox:2" {
			t.Errorf("node %s: pods %d, hash %s image %s", n, len(ps), ps[0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey], ps[0].Spec.Containers[0].Image)
		}
	}

	t.Run("rollback by the first revision's patch, as kubectl rollout undo does", func(t *testing.T) {
		if _, err := cs.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.StrategicMergePatchType, first[firstHash].Data.Raw, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the rollback", func(ctx context.Context) (bool, error) {
			ok, err := rolledOut(ctx, cs, "agent")
			if !ok {
				return false, err
			}
			pods, err := podsByNode(ctx, cs, ds.UID)
			return err == nil && len(pods) == 3 && pods["n1"][0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == firstHash, err
		})
		revs, err := revisionsOf(ctx, cs, ds.UID)
		if err != nil || len(revs) != 2 || revs[firstHash].Revision != 3 || revs[secondHash].Revision != 2 {
			t.Errorf("after the rollback the first revision is renumbered 3: %v %v", revs, err)
		}
	})
	t.Run("revisionHistoryLimit removes unused old revisions", func(t *testing.T) {
		if _, err := cs.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.MergePatchType, []byte(`{"spec":{"revisionHistoryLimit":0}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "one revision left", func(ctx context.Context) (bool, error) {
			revs, err := revisionsOf(ctx, cs, ds.UID)
			_, kept := revs[firstHash]
			return err == nil && len(revs) == 1 && kept, fmt.Errorf("revisions %d", len(revs))
		})
	})
}

func TestSurgeKeepsEveryNodeAvailable(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2", "n3"} {
		createNode(t, cs, n, nil)
	}
	ds := newDaemonSet("agent")
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}
	ds, err := cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitForPodsOn(t, cs, ds.UID, "n1", "n2", "n3")
	waitFor(t, "the first rollout", func(ctx context.Context) (bool, error) { return rolledOut(ctx, cs, "agent") })

	// Follow every pod from the current ones on: a node never has more than two, two
	// nodes never surge at once, and no node is ever left without a live pod.
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
	if err != nil {
		t.Fatal(err)
	}
	live := map[types.UID]corev1.Pod{}
	for _, p := range list.Items {
		live[p.UID] = p
	}
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=agent", ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := cs.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	maxPerNode, maxSurged, minNodes := 0, 0, 3
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			ok, _ := rolledOut(ctx, cs, "agent")
			if !ok {
				return false, nil
			}
			pods, err := podsByNode(ctx, cs, ds.UID)
			return err == nil && nodeNames(pods) == "n1,n2,n3" && pods["n1"][0].Spec.Containers[0].Image == "busybox:2", nil
		})
	}()
	for finished := false; !finished; {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
				delete(live, p.UID)
			} else {
				live[p.UID] = *p
			}
			perNode := map[string]int{}
			for _, lp := range live {
				n, _ := daemon.GetTargetNodeName(&lp)
				perNode[n]++
			}
			surged := 0
			for _, c := range perNode {
				maxPerNode = max(maxPerNode, c)
				if c > 1 {
					surged++
				}
			}
			maxSurged, minNodes = max(maxSurged, surged), min(minNodes, len(perNode))
		case <-done:
			finished = true
		}
	}
	if ok, err := rolledOut(ctx, cs, "agent"); !ok {
		t.Fatalf("the update did not finish: %v", err)
	}
	if maxPerNode != 2 || maxSurged > 1 || minNodes < 3 {
		t.Errorf("at most %d pods on a node (want 2), %d nodes surged at once (want at most 1), %d nodes with a pod at worst (want 3)", maxPerNode, maxSurged, minNodes)
	}
}

func TestOnDeleteReplacesOnlyDeletedPods(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	createNode(t, cs, "n1", nil)
	createNode(t, cs, "n2", nil)
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	ds, err := cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := waitForPodsOn(t, cs, ds.UID, "n1", "n2")
	updated, err := cs.AppsV1().DaemonSets("default").Patch(ctx, "agent", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Once the controller has seen the new generation, nothing is updated.
	waitFor(t, "the new generation observed", func(ctx context.Context) (bool, error) {
		cur, err := cs.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cur.Status.ObservedGeneration == updated.Generation && cur.Status.UpdatedNumberScheduled == 0 && cur.Status.CurrentNumberScheduled == 2, fmt.Errorf("status %+v", cur.Status)
	})
	old := before["n1"][0]
	if err := cs.CoreV1().Pods("default").Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n1's replacement from the new template", func(ctx context.Context) (bool, error) {
		pods, err := podsByNode(ctx, cs, ds.UID)
		if err != nil || len(pods["n1"]) != 1 || len(pods["n2"]) != 1 {
			return false, err
		}
		return pods["n1"][0].Spec.Containers[0].Image == "busybox:2" && pods["n2"][0].UID == before["n2"][0].UID, nil
	})
	waitFor(t, "updatedNumberScheduled 1", func(ctx context.Context) (bool, error) {
		cur, err := cs.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		return err == nil && cur.Status.UpdatedNumberScheduled == 1, err
	})
}
