package compose

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Sizes of the controller-manager scenario.
const (
	cmKubelets         = 5
	cmSurvivors        = 3
	cmReplicas         = 10
	evictionToleration = 10 // seconds: the Deployment's tolerationSeconds for unreachable/not-ready
)

// TestControllerManager runs compose.yaml with simulated containers and five kubelets
// and drives kube-controller-manager's node and workload controllers as a user sees
// them: two kubelets go away and their nodes go NotReady, their pods are evicted and
// replaced on the survivors; every pod's IP is unique and inside its node's podCIDR
// (node IPAM and the sim runtime); and killing the leading controller-manager hands its
// Lease to the other replica mid-rollout without ever surging past maxSurge.
func TestControllerManager(t *testing.T) {
	if os.Getenv("SKIFF_COMPOSE_TEST") != "1" {
		t.Skip("the compose suite runs with SKIFF_COMPOSE_TEST=1 (make test-compose)")
	}
	s := newStackWithRuntime(t, "sim")
	var survivors []string
	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"Up", func(t *testing.T) {
			s.up(t, cmKubelets)
			s.waitReadyNodes(t, cmKubelets)
		}},
		{"DeploymentSpreadOverFiveNodes", s.testDeploymentSpread},
		{"NodesDieTheirPodsAreReplaced", func(t *testing.T) { survivors = s.testNodesDie(t) }},
		{"PodIPsUniqueWithinNodePodCIDRs", func(t *testing.T) { s.testPodIPs(t, survivors) }},
		{"ScaleBackAllReady", s.testScaleBack},
		{"LeaderFailoverDuringRollout", s.testLeaderFailover},
		{"DownLeavesNothing", s.testDown},
	}
	for _, step := range steps {
		if !t.Run(step.name, step.run) {
			t.FailNow()
		}
	}
}

// webDeployment is a Deployment of cmReplicas simulated pods that each request a tenth
// of a CPU (so least-allocated scoring spreads them) and tolerate an unreachable or
// not-ready node for evictionToleration seconds only.
func webDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	toleration := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](evictionToleration)}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](cmReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "web", Image: "nginx",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
					Tolerations: []corev1.Toleration{toleration(corev1.TaintNodeUnreachable), toleration(corev1.TaintNodeNotReady)},
				},
			},
		},
	}
}

// livePods are the pods selected by selector in default that are not being deleted.
func (s *stack) livePods(ctx context.Context, selector string) ([]corev1.Pod, error) {
	list, err := s.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live, nil
}

// runningOn checks that want pods of app=web run, none being deleted, all on nodes in
// nodes (nil: any), and returns how many run on each node.
func (s *stack) runningOn(ctx context.Context, want int, nodes []string) (map[string]int, error) {
	pods, err := s.livePods(ctx, "app=web")
	if err != nil {
		return nil, err
	}
	perNode := map[string]int{}
	running := 0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		if nodes != nil && !contains(nodes, p.Spec.NodeName) {
			return nil, fmt.Errorf("pod %s runs on %s, not one of %v", p.Name, p.Spec.NodeName, nodes)
		}
		running++
		perNode[p.Spec.NodeName]++
	}
	if running != want || len(pods) != want {
		return nil, fmt.Errorf("%d of %d live pods Running, want %d: %v", running, len(pods), want, perNode)
	}
	return perNode, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// testDeploymentSpread creates the Deployment and waits until its ten pods run, on
// every one of the five nodes.
func (s *stack) testDeploymentSpread(t *testing.T) {
	if _, err := s.client.AppsV1().Deployments("default").Create(s.ctx, webDeployment(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(t, 2*time.Minute, "10 pods Running over 5 nodes", func(ctx context.Context) error {
		perNode, err := s.runningOn(ctx, cmReplicas, nil)
		if err != nil {
			return err
		}
		if len(perNode) != cmKubelets {
			return fmt.Errorf("pods on %d nodes, want %d: %v", len(perNode), cmKubelets, perNode)
		}
		return nil
	})
}

// nodeState is a node's Ready condition status and whether it carries the
// unreachable or not-ready taint.
func nodeState(n *corev1.Node) (ready corev1.ConditionStatus, tainted bool) {
	ready = corev1.ConditionUnknown
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status
		}
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == corev1.TaintNodeUnreachable || taint.Key == corev1.TaintNodeNotReady {
			tainted = true
		}
	}
	return ready, tainted
}

// testNodesDie scales the kubelets from five to three: within 60 s the two nodes left
// behind are NotReady (Unknown, tainted unreachable), and within 60 s after their pods'
// toleration ends the Deployment has its ten pods Running on the three survivors. It
// returns the survivors.
func (s *stack) testNodesDie(t *testing.T) []string {
	s.composeRun(t, "up", "-d", "--no-build", "--no-recreate", "--scale", fmt.Sprintf("kubelet=%d", cmSurvivors))
	stopped := time.Now()
	var survivors, dead []string
	s.eventually(t, 60*time.Second, "two nodes NotReady and tainted", func(ctx context.Context) error {
		nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		survivors, dead = nil, nil
		for i := range nodes.Items {
			n := &nodes.Items[i]
			switch ready, tainted := nodeState(n); {
			case ready == corev1.ConditionTrue && !tainted:
				survivors = append(survivors, n.Name)
			case ready != corev1.ConditionTrue && tainted:
				dead = append(dead, n.Name)
			}
		}
		if len(survivors) != cmSurvivors || len(dead) != cmKubelets-cmSurvivors {
			return fmt.Errorf("ready %v, NotReady and tainted %v", survivors, dead)
		}
		return nil
	})
	t.Logf("nodes %v NotReady %s after the scale-down", dead, time.Since(stopped).Round(time.Second))
	// The node controller marks their pods Ready=False; the taint manager deletes them
	// when their toleration ends; the ReplicaSet replaces them on the survivors.
	deadline := time.Until(time.Now().Add(evictionToleration*time.Second + 60*time.Second))
	s.eventually(t, deadline, "10 pods Running on the 3 survivors", func(ctx context.Context) error {
		_, err := s.runningOn(ctx, cmReplicas, survivors)
		return err
	})
	t.Logf("the Deployment is whole on %v %s after the scale-down", survivors, time.Since(stopped).Round(time.Second))
	// Each controller reported what it did under its own kube component name.
	s.eventually(t, time.Minute, "events of node-controller, taint-eviction-controller and replicaset-controller", func(ctx context.Context) error {
		events, err := s.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		want := map[string]string{"NodeNotReady": "node-controller", "TaintManagerEviction": "taint-eviction-controller", "SuccessfulCreate": "replicaset-controller"}
		for _, e := range events.Items {
			if want[e.Reason] == e.Source.Component && e.ReportingController == e.Source.Component {
				delete(want, e.Reason)
			}
		}
		if len(want) > 0 {
			return fmt.Errorf("no event (reason: component) %v", want)
		}
		return nil
	})
	return survivors
}

// testPodIPs checks cluster-wide pod IPs: every node has a podCIDR of its
// own (node IPAM), and every live pod's IP is unique and inside its node's podCIDR (the
// sim runtime allocates from the range the kubelet hands it over CRI).
func (s *stack) testPodIPs(t *testing.T, survivors []string) {
	nodes, err := s.client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidrs := map[string]netip.Prefix{}
	owner := map[netip.Prefix]string{}
	for _, n := range nodes.Items {
		p, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			t.Fatalf("node %s: podCIDR %q: %v", n.Name, n.Spec.PodCIDR, err)
		}
		if other, dup := owner[p]; dup {
			t.Errorf("nodes %s and %s share podCIDR %s", other, n.Name, p)
		}
		owner[p], cidrs[n.Name] = n.Name, p
	}
	pods, err := s.livePods(s.ctx, "app=web")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	onNodes := map[string]bool{}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			t.Errorf("pod %s on %s: pod IP %q: %v", p.Name, p.Spec.NodeName, p.Status.PodIP, err)
			continue
		}
		if other, dup := seen[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share IP %s", other, p.Name, ip)
		}
		seen[p.Status.PodIP] = p.Name
		if !cidrs[p.Spec.NodeName].Contains(ip) {
			t.Errorf("pod %s: IP %s is outside node %s's podCIDR %s", p.Name, ip, p.Spec.NodeName, cidrs[p.Spec.NodeName])
		}
		onNodes[p.Spec.NodeName] = true
	}
	if len(seen) != cmReplicas || len(onNodes) < 2 {
		t.Errorf("%d distinct pod IPs over %d nodes; want %d over the survivors %v", len(seen), len(onNodes), cmReplicas, survivors)
	}
}

// testScaleBack scales the kubelets back to five. The two new kubelets are new nodes
// (a container's host name is its node name); the two dead Nodes are deleted as an admin
// would, upon which the pod garbage collector removes the pods still bound to them. Then
// every node is Ready and untainted, and nothing of the dead nodes is left.
func (s *stack) testScaleBack(t *testing.T) {
	s.composeRun(t, "up", "-d", "--no-build", "--no-recreate", "--scale", fmt.Sprintf("kubelet=%d", cmKubelets))
	var dead []string
	s.eventually(t, 3*time.Minute, "five nodes Ready and untainted", func(ctx context.Context) error {
		nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var ready []string
		dead = nil
		for i := range nodes.Items {
			switch r, tainted := nodeState(&nodes.Items[i]); {
			case r == corev1.ConditionTrue && !tainted:
				ready = append(ready, nodes.Items[i].Name)
			case r != corev1.ConditionTrue:
				dead = append(dead, nodes.Items[i].Name)
			}
		}
		if len(ready) != cmKubelets {
			return fmt.Errorf("Ready and untainted: %v", ready)
		}
		return nil
	})
	for _, name := range dead {
		if _, err := s.kubectl(s.ctx, "", "delete", "node", name); err != nil {
			t.Fatal(err)
		}
	}
	s.eventually(t, 2*time.Minute, "no pod left on the deleted nodes", func(ctx context.Context) error {
		pods, err := s.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if contains(dead, p.Spec.NodeName) {
				return fmt.Errorf("pod %s still bound to deleted node %s", p.Name, p.Spec.NodeName)
			}
		}
		return nil
	})
	if ready, err := s.ReadyNodes(s.ctx); err != nil || len(ready) != cmKubelets {
		t.Fatalf("Ready nodes %v, %v; want %d", ready, err, cmKubelets)
	}
}

// leaseHolder is the kube-controller-manager Lease's holder identity.
func (s *stack) leaseHolder(ctx context.Context) (string, error) {
	lease, err := s.client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "kube-controller-manager", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", errors.New("the Lease has no holder")
	}
	return *lease.Spec.HolderIdentity, nil
}

// containerOf is the project's controller-manager container whose host name prefixes
// identity ("<hostname>_<uuid>", the host name being the container's short id).
func (s *stack) containerOf(t *testing.T, identity string) string {
	t.Helper()
	out, err := exec.CommandContext(s.ctx, "docker", "ps", "-q", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+s.project,
		"--filter", "label=com.docker.compose.service=controller-manager").Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	host, _, _ := strings.Cut(identity, "_")
	for _, id := range strings.Fields(string(out)) {
		if host != "" && strings.HasPrefix(id, host) {
			return id
		}
	}
	t.Fatalf("no controller-manager container of the project is the Lease holder %q (containers %s)", identity, out)
	return ""
}

// testLeaderFailover starts a slow rollout (maxSurge 1, maxUnavailable 0, minReadySeconds
// 3), kills the leading controller-manager with docker kill, and checks that the other
// replica holds the Lease within 20 s, the rollout completes, and a pod watch that ran
// throughout never saw more live pods than replicas + maxSurge.
func (s *stack) testLeaderFailover(t *testing.T) {
	const replicas, maxSurge = 6, 1
	labels := map[string]string{"app": "rollout"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "rollout", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas:        ptr.To[int32](replicas),
			MinReadySeconds: 3,
			Selector:        &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(maxSurge)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}},
			},
		},
	}
	if _, err := s.client.AppsV1().Deployments("default").Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Watch the Deployment's pods from now on and keep the largest live count.
	watchCtx, stopWatch := context.WithCancel(s.ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=rollout" }))
	podInformer := factory.Core().V1().Pods().Informer()
	var mu sync.Mutex
	maxLive, maxAt := 0, ""
	count := func(any) {
		live := 0
		for _, obj := range podInformer.GetStore().List() {
			if obj.(*corev1.Pod).DeletionTimestamp == nil {
				live++
			}
		}
		mu.Lock()
		if live > maxLive {
			maxLive, maxAt = live, time.Now().Format(time.TimeOnly)
		}
		mu.Unlock()
	}
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count})
	factory.Start(watchCtx.Done())
	// Shutdown waits for the informer to stop, so the watch must end first, also when a
	// t.Fatal below unwinds the test (deferred in the other order, it waited for s.ctx).
	defer func() { stopWatch(); factory.Shutdown() }()

	s.eventually(t, 2*time.Minute, "the first revision available", func(ctx context.Context) error {
		got, err := s.client.AppsV1().Deployments("default").Get(ctx, "rollout", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.AvailableReplicas != replicas || got.Status.UpdatedReplicas != replicas {
			return fmt.Errorf("available %d, updated %d", got.Status.AvailableReplicas, got.Status.UpdatedReplicas)
		}
		return nil
	})

	leader, err := s.leaseHolder(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	container := s.containerOf(t, leader)
	if _, err := s.kubectl(s.ctx, "", "-n", "default", "set", "image", "deployment/rollout", "app=app:v2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // let the rollout begin under the first leader
	if out, err := exec.CommandContext(s.ctx, "docker", "kill", container).CombinedOutput(); err != nil {
		t.Fatalf("docker kill %s: %v\n%s", container, err, out)
	}
	killed := time.Now()
	// The other replica may take the Lease once it has gone unrenewed for a lease duration
	// (15 s) and its next retry (2 s, jittered) comes: up to ~18 s, plus this poll's 2 s.
	s.eventually(t, 40*time.Second, "the other controller-manager holds the Lease", func(ctx context.Context) error {
		holder, err := s.leaseHolder(ctx)
		if err != nil {
			return err
		}
		// Same host name: still the killed container (or it, restarted).
		if killedHost, _, _ := strings.Cut(leader, "_"); strings.HasPrefix(holder, killedHost+"_") {
			return fmt.Errorf("held by %s, of the killed container", holder)
		}
		return nil
	})
	newLeader, _ := s.leaseHolder(s.ctx)
	t.Logf("Lease passed from %s to %s %s after docker kill", leader, newLeader, time.Since(killed).Round(time.Second))

	s.eventually(t, 3*time.Minute, "the rollout complete under the new leader", func(ctx context.Context) error {
		got, err := s.client.AppsV1().Deployments("default").Get(ctx, "rollout", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := got.Status
		if st.ObservedGeneration < got.Generation || st.UpdatedReplicas != replicas || st.AvailableReplicas != replicas || st.Replicas != replicas {
			return fmt.Errorf("status %+v", st)
		}
		pods, err := s.livePods(ctx, "app=rollout")
		if err != nil {
			return err
		}
		var images []string
		for _, p := range pods {
			images = append(images, p.Spec.Containers[0].Image)
		}
		sort.Strings(images)
		if len(pods) != replicas || images[0] != "app:v2" {
			return fmt.Errorf("live pods' images %v", images)
		}
		return nil
	})
	stopWatch()
	factory.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	if maxLive > replicas+maxSurge {
		t.Errorf("the Deployment had %d live pods at %s, more than replicas %d + maxSurge %d", maxLive, maxAt, replicas, maxSurge)
	}
	t.Logf("at most %d live pods during the rollout (replicas %d + maxSurge %d)", maxLive, replicas, maxSurge)
	// The killed replica is left stopped; `down` removes it.
}
