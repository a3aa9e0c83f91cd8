package kubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/cri"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/volumemanager"
)

const nodeName = "node-1"

// startAPIServer runs a fresh API server (over embedded etcd) for the test.
func startAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.ContentType = "application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// startSim serves a sim runtime on a unix socket for the test and returns
// CRI clients to it.
func startSim(t *testing.T) *socketharness.Clients {
	t.Helper()
	rt := sim.New()
	t.Cleanup(rt.Close)
	return socketharness.Start(t, rt, rt)
}

// rootDir is a kubelet root directory for the test. The tmpfs volumes the
// kubelet mounts there (every pod's projected service account token) are
// unmounted when the test ends, after the kubelet stopped, so the directory
// can be removed.
func rootDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		if err := volumemanager.UnmountAll(filepath.Join(dir, "pods")); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// runKubelet runs a kubelet for nodeName with the sim runtime's default range as its
// --pod-cidr (no node IPAM runs here); the returned func stops it and waits for Run to
// return (also done when the test ends).
func runKubelet(t *testing.T, client kubernetes.Interface, socket, rootDir string) (stop func()) {
	t.Helper()
	return runKubeletWithPodCIDR(t, client, socket, rootDir, sim.PodCIDR)
}

// runKubeletWithPodCIDR is runKubelet with podCIDR as the kubelet's --pod-cidr ("": it
// waits for the Node's spec.podCIDR).
func runKubeletWithPodCIDR(t *testing.T, client kubernetes.Interface, socket, rootDir, podCIDR string) (stop func()) {
	t.Helper()
	kl, err := kubelet.New(kubelet.Config{
		PodCIDR:         podCIDR,
		NodeName:        nodeName,
		Client:          client,
		RuntimeEndpoint: socket,
		RootDir:         rootDir,
		NodeIP:          "10.1.2.3",
		NodeLabels:      map[string]string{"skiff.dev/pool": "test"},
		Capacity:        v1.ResourceList{v1.ResourcePods: resource.MustParse("20")},
		// A short lease shows renewals within the test (every 1 s).
		LeaseDuration: 4 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kl.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return after its context was cancelled")
		}
	})
	t.Cleanup(stop)
	return stop
}

// eventually polls cond every 100 ms until it returns nil or the deadline
// passes, then fails with cond's last error.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%s: %v", what, last)
	}
}

func newPod(name string, restart v1.RestartPolicy, annotations map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: v1.PodSpec{
			NodeName:      nodeName,
			RestartPolicy: restart,
			Containers:    []v1.Container{{Name: "main", Image: "busybox:1.36", Command: []string{"sleep", "3600"}}},
		},
	}
}

func TestKubeletRunsPodsAgainstAPIServer(t *testing.T) {
	client := startAPIServer(t)
	cri := startSim(t)
	runKubelet(t, client, cri.Socket, rootDir(t))
	ctx := context.Background()

	t.Run("node registers and becomes Ready", func(t *testing.T) {
		eventually(t, 30*time.Second, "node Ready", func() error {
			node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range node.Status.Conditions {
				if c.Type == v1.NodeReady {
					if c.Status != v1.ConditionTrue || c.Reason != "KubeletReady" {
						return fmt.Errorf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
					}
					return nil
				}
			}
			return fmt.Errorf("no Ready condition in %v", node.Status.Conditions)
		})
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Labels[v1.LabelHostname]; got != nodeName {
			t.Errorf("hostname label = %q, want %q", got, nodeName)
		}
		if got := node.Labels["skiff.dev/pool"]; got != "test" {
			t.Errorf("extra label = %q, want test", got)
		}
		if got := node.Status.NodeInfo.KubeletVersion; got != kubelet.KubeletVersion {
			t.Errorf("kubeletVersion = %q", got)
		}
		if got := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(got, sim.RuntimeName+"://") {
			t.Errorf("containerRuntimeVersion = %q, want %s://...", got, sim.RuntimeName)
		}
		if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; got != kubelet.KubeletPort {
			t.Errorf("kubelet port = %d", got)
		}
		if got := node.Status.Capacity[v1.ResourcePods]; got.Value() != 20 {
			t.Errorf("pods capacity = %s, want the override 20", got.String())
		}
		if _, ok := node.Status.Allocatable[v1.ResourceCPU]; !ok {
			t.Errorf("allocatable has no cpu: %v", node.Status.Allocatable)
		}
		var internalIP string
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				internalIP = a.Address
			}
		}
		if internalIP != "10.1.2.3" {
			t.Errorf("InternalIP = %q, want 10.1.2.3", internalIP)
		}
	})

	t.Run("lease is held and renewed", func(t *testing.T) {
		var first *coordinationv1.Lease
		eventually(t, 30*time.Second, "lease exists", func() error {
			l, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			first = l
			return nil
		})
		if got := ptr.Deref(first.Spec.HolderIdentity, ""); got != nodeName {
			t.Errorf("holderIdentity = %q", got)
		}
		if got := ptr.Deref(first.Spec.LeaseDurationSeconds, 0); got != 4 {
			t.Errorf("leaseDurationSeconds = %d, want 4", got)
		}
		eventually(t, 30*time.Second, "lease renewed", func() error {
			l, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Spec.RenewTime == nil || first.Spec.RenewTime == nil || !l.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
				return fmt.Errorf("renewTime %v not after %v", l.Spec.RenewTime, first.Spec.RenewTime)
			}
			return nil
		})
	})

	t.Run("pod bound to the node runs with an IP", func(t *testing.T) {
		create(t, client, newPod("web", v1.RestartPolicyAlways, nil))
		eventually(t, 60*time.Second, "pod Running", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.Status.Phase != v1.PodRunning || pod.Status.PodIP == "" {
				return fmt.Errorf("phase=%s podIP=%q statuses=%v", pod.Status.Phase, pod.Status.PodIP, pod.Status.ContainerStatuses)
			}
			cs := pod.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready || !strings.HasPrefix(cs[0].ContainerID, sim.RuntimeName+"://") {
				return fmt.Errorf("container statuses %+v", cs)
			}
			if pod.Status.HostIP != "10.1.2.3" || pod.Status.StartTime == nil || pod.Status.QOSClass != v1.PodQOSBestEffort {
				return fmt.Errorf("hostIP=%q startTime=%v qos=%q", pod.Status.HostIP, pod.Status.StartTime, pod.Status.QOSClass)
			}
			if !hasCondition(pod, v1.PodReady, v1.ConditionTrue) {
				return fmt.Errorf("not Ready: %v", pod.Status.Conditions)
			}
			return nil
		})
	})

	t.Run("OnFailure pod that fails is restarted", func(t *testing.T) {
		create(t, client, newPod("flaky", v1.RestartPolicyOnFailure, map[string]string{
			sim.AnnotationRunTime: "1s", sim.AnnotationExitCode: "1",
		}))
		eventually(t, 60*time.Second, "restartCount >= 1", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, "flaky", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cs := pod.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount < 1 || cs[0].LastTerminationState.Terminated == nil {
				return fmt.Errorf("phase=%s statuses=%+v", pod.Status.Phase, cs)
			}
			if pod.Status.Phase != v1.PodRunning {
				return fmt.Errorf("phase=%s, want Running while restarting", pod.Status.Phase)
			}
			return nil
		})
		// The second exit comes within a second of the restart: the next
		// restart waits out a backoff, and the status says so.
		eventually(t, 60*time.Second, "waiting CrashLoopBackOff", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, "flaky", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cs := pod.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "CrashLoopBackOff" ||
				!strings.Contains(cs[0].State.Waiting.Message, "back-off") {
				return fmt.Errorf("statuses=%+v", cs)
			}
			return nil
		})
	})

	t.Run("Never pod that exits 0 succeeds and stays", func(t *testing.T) {
		create(t, client, newPod("job", v1.RestartPolicyNever, map[string]string{
			sim.AnnotationRunTime: "1s", sim.AnnotationExitCode: "0",
		}))
		eventually(t, 60*time.Second, "pod Succeeded", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, "job", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.Status.Phase != v1.PodSucceeded {
				return fmt.Errorf("phase=%s statuses=%+v", pod.Status.Phase, pod.Status.ContainerStatuses)
			}
			if cs := pod.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
				cs[0].State.Terminated.ExitCode != 0 || cs[0].State.Terminated.Reason != "Completed" {
				return fmt.Errorf("container statuses %+v", cs)
			}
			return nil
		})
	})

	t.Run("deleted pod terminates and disappears", func(t *testing.T) {
		if err := client.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "pod gone", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("still there: deletionTimestamp=%v phase=%s", pod.DeletionTimestamp, pod.Status.Phase)
		})
	})

	t.Run("force-deleted pod is killed and its sandbox removed", func(t *testing.T) {
		create(t, client, newPod("forced", v1.RestartPolicyAlways, nil))
		var uid string
		eventually(t, 60*time.Second, "pod Running", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, "forced", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.Status.Phase != v1.PodRunning {
				return fmt.Errorf("phase=%s", pod.Status.Phase)
			}
			uid = string(pod.UID)
			return nil
		})
		if err := client.CoreV1().Pods("default").Delete(ctx, "forced", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		// Within seconds (the container GC runs once something died), not
		// containerGCPeriod (a minute) later.
		eventually(t, 30*time.Second, "runtime has nothing of the pod", func() error {
			sandboxes, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				return err
			}
			for _, s := range sandboxes.GetItems() {
				if s.GetMetadata().GetUid() == uid {
					return fmt.Errorf("sandbox %s (%s) still there", s.GetId(), s.GetState())
				}
			}
			containers, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				return err
			}
			for _, c := range containers.GetContainers() {
				if c.GetLabels()[kubetypes.KubernetesPodUIDLabel] == uid {
					return fmt.Errorf("container %s (%s) still there", c.GetId(), c.GetState())
				}
			}
			return nil
		})
	})
}

// nodeReadyCondition is nodeName's Ready condition.
func nodeReadyCondition(ctx context.Context, client kubernetes.Interface) (*v1.NodeCondition, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("no Ready condition")
}

func create(t *testing.T, client kubernetes.Interface, pod *v1.Pod) {
	t.Helper()
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
}

func hasCondition(pod *v1.Pod, t v1.PodConditionType, s v1.ConditionStatus) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == s
		}
	}
	return false
}

func TestRestartedKubeletAdoptsItsPodsAndCleansUpOrphans(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t)
	cri := startSim(t)
	rootDir := rootDir(t)

	stop := runKubelet(t, client, cri.Socket, rootDir)
	create(t, client, newPod("keep", v1.RestartPolicyAlways, nil))
	create(t, client, newPod("gone", v1.RestartPolicyAlways, nil))
	var keepID string
	for _, name := range []string{"keep", "gone"} {
		eventually(t, 60*time.Second, name+" Running", func() error {
			pod, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.Status.Phase != v1.PodRunning || len(pod.Status.ContainerStatuses) != 1 {
				return fmt.Errorf("phase=%s", pod.Status.Phase)
			}
			if name == "keep" {
				keepID = pod.Status.ContainerStatuses[0].ContainerID
			}
			return nil
		})
	}
	stop()

	// While no kubelet runs, "gone" is force-deleted from the API.
	if err := client.CoreV1().Pods("default").Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	runKubelet(t, client, cri.Socket, rootDir)
	eventually(t, 60*time.Second, "orphaned sandbox removed", func() error {
		resp, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		var names []string
		for _, s := range resp.GetItems() {
			names = append(names, s.GetMetadata().GetName())
		}
		if len(names) != 1 || names[0] != "keep" {
			return fmt.Errorf("sandboxes of %v, want only keep's", names)
		}
		return nil
	})
	pod, err := client.CoreV1().Pods("default").Get(ctx, "keep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs := pod.Status.ContainerStatuses
	if pod.Status.Phase != v1.PodRunning || len(cs) != 1 || cs[0].ContainerID != keepID || cs[0].RestartCount != 0 {
		t.Errorf("keep after restart: phase=%s statuses=%+v, want the same container %s still running", pod.Status.Phase, cs, keepID)
	}
}

func TestKubeletWaitsForALateRuntime(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t)
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "cri.sock")
	runKubelet(t, client, socket, rootDir(t))
	create(t, client, newPod("early", v1.RestartPolicyAlways, nil))

	eventually(t, 30*time.Second, "node registered NotReady", func() error {
		c, err := nodeReadyCondition(ctx, client)
		if err != nil {
			return err
		}
		s := c.Status
		if s != v1.ConditionFalse {
			return fmt.Errorf("Ready=%s without a runtime", s)
		}
		return nil
	})

	rt := sim.New()
	t.Cleanup(rt.Close)
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- cri.Serve(serveCtx, socket, rt, rt) }()
	t.Cleanup(func() {
		stopServing()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	eventually(t, 60*time.Second, "node Ready", func() error {
		c, err := nodeReadyCondition(ctx, client)
		if err != nil {
			return err
		}
		s := c.Status
		if s != v1.ConditionTrue {
			return fmt.Errorf("Ready=%s", s)
		}
		return nil
	})
	eventually(t, 60*time.Second, "pod Running", func() error {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "early", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != v1.PodRunning {
			return fmt.Errorf("phase=%s", pod.Status.Phase)
		}
		return nil
	})
}

// TestKubeletWithoutAPodCIDRWaitsForNodeIPAM: a kubelet without --pod-cidr over the sim
// runtime, whose network (as kubenet's) needs a range, keeps its node NotReady and its
// pods without a sandbox until the Node gets spec.podCIDR (node IPAM sets it, here the
// test); then the node is Ready and the pod's IP lies in that range, not in the
// runtime's default one, so pods of different nodes never share an IP.
func TestKubeletWithoutAPodCIDRWaitsForNodeIPAM(t *testing.T) {
	client := startAPIServer(t)
	cri := startSim(t)
	runKubeletWithPodCIDR(t, client, cri.Socket, rootDir(t), "")
	ctx := context.Background()
	create(t, client, newPod("web", v1.RestartPolicyAlways, nil))

	eventually(t, 30*time.Second, "node NotReady for its network", func() error {
		c, err := nodeReadyCondition(ctx, client)
		if err != nil {
			return err
		}
		if c.Status != v1.ConditionFalse || !strings.Contains(c.Message, "NetworkPluginNotReady") {
			return fmt.Errorf("Ready=%s %q, want False for the runtime's network", c.Status, c.Message)
		}
		return nil
	})
	pod, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.PodIP != "" {
		t.Fatalf("pod got IP %s before the node had a pod range", pod.Status.PodIP)
	}

	const podCIDR = "10.244.7.0/24"
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR, podCIDR)
	if _, err := client.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "node Ready", func() error {
		c, err := nodeReadyCondition(ctx, client)
		if err != nil {
			return err
		}
		if c.Status != v1.ConditionTrue {
			return fmt.Errorf("Ready=%s %q", c.Status, c.Message)
		}
		return nil
	})
	eventually(t, 30*time.Second, "pod Running in the node's range", func() error {
		p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("phase=%s", p.Status.Phase)
		}
		if !strings.HasPrefix(p.Status.PodIP, "10.244.7.") {
			return fmt.Errorf("pod IP %q is outside %s", p.Status.PodIP, podCIDR)
		}
		return nil
	})
}
