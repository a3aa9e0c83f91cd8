package kubelet

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
	kubepod "skiff.dev/services/kubelet/pod"
	"skiff.dev/services/kubelet/prober"
	proberesults "skiff.dev/services/kubelet/prober/results"
	"skiff.dev/services/kubelet/status"
)

func running() v1.ContainerState {
	return v1.ContainerState{Running: &v1.ContainerStateRunning{}}
}

func terminated(code int32) v1.ContainerState {
	return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}
}

func waiting() v1.ContainerState {
	return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}
}

func cstatus(name string, state v1.ContainerState) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: state}
}

// restarting is a container waiting to restart after it exited with code.
func restarting(name string, code int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: waiting(), LastTerminationState: terminated(code)}
}

func podWith(policy v1.RestartPolicy, containers ...string) *v1.Pod {
	pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: policy}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c})
	}
	return pod
}

func TestGetPhase(t *testing.T) {
	withInit := func(p *v1.Pod) *v1.Pod {
		p.Spec.InitContainers = []v1.Container{{Name: "init"}}
		return p
	}
	tests := []struct {
		name     string
		pod      *v1.Pod
		statuses []v1.ContainerStatus
		terminal bool
		want     v1.PodPhase
	}{
		{"no statuses yet is Pending", podWith(v1.RestartPolicyAlways, "a"), nil, false, v1.PodPending},
		{"a waiting container is Pending", podWith(v1.RestartPolicyAlways, "a", "b"),
			[]v1.ContainerStatus{cstatus("a", running()), cstatus("b", waiting())}, false, v1.PodPending},
		{"all running is Running", podWith(v1.RestartPolicyAlways, "a", "b"),
			[]v1.ContainerStatus{cstatus("a", running()), cstatus("b", running())}, false, v1.PodRunning},
		{"one running one exited is Running", podWith(v1.RestartPolicyNever, "a", "b"),
			[]v1.ContainerStatus{cstatus("a", running()), cstatus("b", terminated(1))}, false, v1.PodRunning},
		{"Always: all exited is Running (restarting)", podWith(v1.RestartPolicyAlways, "a"),
			[]v1.ContainerStatus{cstatus("a", terminated(0))}, false, v1.PodRunning},
		{"Always: crash-looping container is Running", podWith(v1.RestartPolicyAlways, "a"),
			[]v1.ContainerStatus{restarting("a", 1)}, false, v1.PodRunning},
		{"Never: all exited 0 is Succeeded", podWith(v1.RestartPolicyNever, "a", "b"),
			[]v1.ContainerStatus{cstatus("a", terminated(0)), cstatus("b", terminated(0))}, false, v1.PodSucceeded},
		{"Never: one exited non-zero is Failed", podWith(v1.RestartPolicyNever, "a", "b"),
			[]v1.ContainerStatus{cstatus("a", terminated(0)), cstatus("b", terminated(2))}, false, v1.PodFailed},
		{"OnFailure: all exited 0 is Succeeded", podWith(v1.RestartPolicyOnFailure, "a"),
			[]v1.ContainerStatus{cstatus("a", terminated(0))}, false, v1.PodSucceeded},
		{"OnFailure: exited non-zero is Running (restarting)", podWith(v1.RestartPolicyOnFailure, "a"),
			[]v1.ContainerStatus{cstatus("a", terminated(1))}, false, v1.PodRunning},
		{"OnFailure: waiting after a failure is Running", podWith(v1.RestartPolicyOnFailure, "a"),
			[]v1.ContainerStatus{restarting("a", 1)}, false, v1.PodRunning},
		{"terminating Always pod, all exited 0, is Succeeded", podWith(v1.RestartPolicyAlways, "a"),
			[]v1.ContainerStatus{cstatus("a", terminated(0))}, true, v1.PodSucceeded},
		{"terminating Always pod, killed with 137, is Failed", podWith(v1.RestartPolicyAlways, "a"),
			[]v1.ContainerStatus{cstatus("a", terminated(137))}, true, v1.PodFailed},
		{"unknown container status keeps Pending", podWith(v1.RestartPolicyAlways, "a", "b"),
			[]v1.ContainerStatus{cstatus("a", terminated(0))}, false, v1.PodPending},
		{"init container running is Pending", withInit(podWith(v1.RestartPolicyAlways, "a")),
			[]v1.ContainerStatus{cstatus("init", running()), cstatus("a", waiting())}, false, v1.PodPending},
		{"init container failed with Never is Failed", withInit(podWith(v1.RestartPolicyNever, "a")),
			[]v1.ContainerStatus{cstatus("init", terminated(1)), cstatus("a", waiting())}, false, v1.PodFailed},
		{"init container failed with OnFailure is Pending (retrying)", withInit(podWith(v1.RestartPolicyOnFailure, "a")),
			[]v1.ContainerStatus{restarting("init", 1), cstatus("a", waiting())}, false, v1.PodPending},
		{"init done and container running is Running", withInit(podWith(v1.RestartPolicyAlways, "a")),
			[]v1.ContainerStatus{cstatus("init", terminated(0)), cstatus("a", running())}, false, v1.PodRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := getPhase(tt.pod, tt.statuses, tt.terminal); got != tt.want {
				t.Errorf("getPhase = %s, want %s", got, tt.want)
			}
		})
	}
}

// alwaysSafe says no pod could have running containers.
type alwaysSafe struct{}

func (alwaysSafe) PodCouldHaveRunningContainers(types.UID) bool { return false }

// newTestKubelet returns a Kubelet with just what generateAPIPodStatus
// needs.
func newTestKubelet() *Kubelet {
	pods := kubepod.NewManager()
	statusManager := status.NewManager(nil, pods, alwaysSafe{}, nil)
	return &Kubelet{
		nodeIP:        "10.0.0.9",
		podManager:    pods,
		reasonCache:   NewReasonCache(),
		statusManager: statusManager,
		probeManager: prober.NewManager(prober.Options{
			StatusProvider:   statusManager,
			LivenessManager:  proberesults.NewManager(),
			ReadinessManager: proberesults.NewManager(),
			StartupManager:   proberesults.NewManager(),
		}),
	}
}

const testRuntime = "sim"

func readySandbox(ip string) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 0},
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: ip},
	}
}

func TestGenerateAPIPodStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	runningC := func(id string, restarts int) *container.Status {
		return &container.Status{ID: container.ContainerID{Type: testRuntime, ID: id}, Name: "app", State: container.ContainerStateRunning,
			CreatedAt: t0.Add(time.Duration(restarts) * time.Minute), StartedAt: t0.Add(time.Duration(restarts) * time.Minute), RestartCount: restarts, ImageID: "sha256:abc"}
	}
	exitedC := func(id string, restarts, code int) *container.Status {
		return &container.Status{ID: container.ContainerID{Type: testRuntime, ID: id}, Name: "app", State: container.ContainerStateExited,
			CreatedAt: t0.Add(time.Duration(restarts) * time.Minute), StartedAt: t0, FinishedAt: t0.Add(time.Second), ExitCode: code, RestartCount: restarts}
	}
	basePod := func(policy v1.RestartPolicy) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
			Spec:       v1.PodSpec{RestartPolicy: policy, Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
			Status: v1.PodStatus{Conditions: []v1.PodCondition{
				{Type: v1.PodScheduled, Status: v1.ConditionTrue},
				{Type: "example.com/Custom", Status: v1.ConditionTrue},
			}},
		}
	}

	tests := []struct {
		name      string
		pod       *v1.Pod
		podStatus *container.PodStatus
		reason    *reasonItem
		terminal  bool
		check     func(t *testing.T, s v1.PodStatus)
	}{
		{
			name: "nothing created yet: Pending, ContainerCreating, not ready",
			pod:  basePod(v1.RestartPolicyAlways), podStatus: &container.PodStatus{ID: "uid-1"},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodPending)
				wantWaiting(t, s, "ContainerCreating")
				wantCondition(t, s, v1.PodReadyToStartContainers, v1.ConditionFalse)
				wantCondition(t, s, v1.PodReady, v1.ConditionFalse)
				wantCondition(t, s, v1.PodScheduled, v1.ConditionTrue)
				wantCondition(t, s, "example.com/Custom", v1.ConditionTrue)
				if s.HostIP != "10.0.0.9" || len(s.HostIPs) != 1 {
					t.Errorf("hostIP = %q %v", s.HostIP, s.HostIPs)
				}
				if s.QOSClass != v1.PodQOSBestEffort {
					t.Errorf("qosClass = %q", s.QOSClass)
				}
			},
		},
		{
			name: "running container in a ready sandbox: Running, ready, pod IP",
			pod:  basePod(v1.RestartPolicyAlways),
			podStatus: &container.PodStatus{ID: "uid-1", IPs: []string{"10.88.0.5"},
				SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")}, ContainerStatuses: []*container.Status{runningC("c1", 0)}},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodRunning)
				if s.PodIP != "10.88.0.5" || len(s.PodIPs) != 1 {
					t.Errorf("podIP = %q %v", s.PodIP, s.PodIPs)
				}
				cs := s.ContainerStatuses[0]
				if cs.State.Running == nil || !cs.Ready || cs.Started == nil || !*cs.Started {
					t.Errorf("container status %+v", cs)
				}
				if cs.ContainerID != "sim://c1" || cs.Image != "busybox" || cs.ImageID != "sha256:abc" {
					t.Errorf("ids: containerID=%q image=%q imageID=%q", cs.ContainerID, cs.Image, cs.ImageID)
				}
				wantCondition(t, s, v1.PodReady, v1.ConditionTrue)
				wantCondition(t, s, v1.ContainersReady, v1.ConditionTrue)
				wantCondition(t, s, v1.PodInitialized, v1.ConditionTrue)
				wantCondition(t, s, v1.PodReadyToStartContainers, v1.ConditionTrue)
			},
		},
		{
			name: "Never pod whose container exited 0: Succeeded, Completed",
			pod:  basePod(v1.RestartPolicyNever),
			podStatus: &container.PodStatus{ID: "uid-1",
				SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")}, ContainerStatuses: []*container.Status{exitedC("c1", 0, 0)}},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodSucceeded)
				term := s.ContainerStatuses[0].State.Terminated
				if term == nil || term.Reason != "Completed" || term.ExitCode != 0 || term.ContainerID != "sim://c1" || !term.FinishedAt.Time.Equal(t0.Add(time.Second)) {
					t.Errorf("terminated = %+v", term)
				}
				wantCondition(t, s, v1.PodReady, v1.ConditionFalse)
			},
		},
		{
			name: "Always pod in crash-loop backoff: Running, waiting CrashLoopBackOff, last state terminated",
			pod:  basePod(v1.RestartPolicyAlways),
			podStatus: &container.PodStatus{ID: "uid-1",
				SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")}, ContainerStatuses: []*container.Status{exitedC("c2", 2, 1)}},
			reason: &reasonItem{Err: container.ErrCrashLoopBackOff, Message: "back-off 20s restarting failed container"},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodRunning)
				wantWaiting(t, s, "CrashLoopBackOff")
				cs := s.ContainerStatuses[0]
				if cs.RestartCount != 2 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 ||
					cs.LastTerminationState.Terminated.Reason != "Error" {
					t.Errorf("status %+v", cs)
				}
			},
		},
		{
			name: "restarted container: newest gives the state, the previous the last termination",
			pod:  basePod(v1.RestartPolicyAlways),
			podStatus: &container.PodStatus{ID: "uid-1",
				SandboxStatuses:   []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")},
				ContainerStatuses: []*container.Status{runningC("c2", 1), exitedC("c1", 0, 3)}},
			check: func(t *testing.T, s v1.PodStatus) {
				cs := s.ContainerStatuses[0]
				if cs.State.Running == nil || cs.RestartCount != 1 || cs.ContainerID != "sim://c2" {
					t.Errorf("status %+v", cs)
				}
				if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 3 || lt.ContainerID != "sim://c1" {
					t.Errorf("last termination %+v", cs.LastTerminationState)
				}
			},
		},
		{
			name: "create failure shows CreateContainerError with the runtime's message",
			pod:  basePod(v1.RestartPolicyAlways),
			podStatus: &container.PodStatus{ID: "uid-1",
				SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")}},
			reason: &reasonItem{Err: container.ErrCreateContainer, Message: "container has no command"},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodPending)
				w := s.ContainerStatuses[0].State.Waiting
				if w == nil || w.Reason != "CreateContainerError" || w.Message != "container has no command" {
					t.Errorf("waiting = %+v", w)
				}
			},
		},
		{
			name: "terminal phase from the API is kept when the runtime forgot the pod",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyNever)
				p.Status.Phase = v1.PodSucceeded
				p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: terminated(0)}}
				return p
			}(),
			podStatus: &container.PodStatus{ID: "uid-1"},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodSucceeded)
				if s.ContainerStatuses[0].State.Terminated == nil {
					t.Errorf("terminated state lost: %+v", s.ContainerStatuses[0])
				}
			},
		},
		{
			name: "terminating pod whose container was killed: Failed",
			pod:  basePod(v1.RestartPolicyAlways),
			podStatus: &container.PodStatus{ID: "uid-1",
				ContainerStatuses: []*container.Status{exitedC("c1", 0, 137)}},
			terminal: true,
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodFailed)
			},
		},
		{
			name: "host-network pod gets the node IP as pod IP",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways)
				p.Spec.HostNetwork = true
				return p
			}(),
			podStatus: &container.PodStatus{ID: "uid-1", SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("")}},
			check: func(t *testing.T, s v1.PodStatus) {
				if s.PodIP != "10.0.0.9" || len(s.PodIPs) != 1 || s.PodIPs[0].IP != "10.0.0.9" {
					t.Errorf("podIP = %q %v", s.PodIP, s.PodIPs)
				}
			},
		},
		{
			name: "init container running: Pending, PodInitializing, not Initialized",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways)
				p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
				return p
			}(),
			podStatus: &container.PodStatus{ID: "uid-1",
				SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")},
				ContainerStatuses: []*container.Status{{ID: container.ContainerID{Type: testRuntime, ID: "i1"}, Name: "init",
					State: container.ContainerStateRunning, StartedAt: t0}}},
			check: func(t *testing.T, s v1.PodStatus) {
				wantPhase(t, s, v1.PodPending)
				wantWaiting(t, s, "PodInitializing")
				wantCondition(t, s, v1.PodInitialized, v1.ConditionFalse)
				if len(s.InitContainerStatuses) != 1 || s.InitContainerStatuses[0].State.Running == nil {
					t.Errorf("init statuses %+v", s.InitContainerStatuses)
				}
			},
		},
		{
			// kube's generateAPIPodStatus gives init containers the default waiting state
			// PodInitializing too (the conformance suite's init container tests read it).
			name: "an init container waiting behind another: PodInitializing",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways)
				p.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "busybox"}, {Name: "init2", Image: "busybox"}}
				return p
			}(),
			podStatus: &container.PodStatus{ID: "uid-1",
				SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")},
				ContainerStatuses: []*container.Status{{ID: container.ContainerID{Type: testRuntime, ID: "i1"}, Name: "init1",
					State: container.ContainerStateRunning, StartedAt: t0}}},
			check: func(t *testing.T, s v1.PodStatus) {
				if len(s.InitContainerStatuses) != 2 || s.InitContainerStatuses[1].State.Waiting == nil ||
					s.InitContainerStatuses[1].State.Waiting.Reason != "PodInitializing" {
					t.Errorf("init statuses %+v; want init2 waiting, PodInitializing", s.InitContainerStatuses)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kl := newTestKubelet()
			if tt.reason != nil {
				kl.reasonCache.Update(tt.pod.UID, container.PodSyncResult{SyncResults: []*container.SyncResult{{
					Action: container.StartContainer, Target: "app", Error: tt.reason.Err, Message: tt.reason.Message,
				}}})
			}
			tt.check(t, kl.generateAPIPodStatus(tt.pod, tt.podStatus, tt.terminal))
		})
	}
}

func wantPhase(t *testing.T, s v1.PodStatus, want v1.PodPhase) {
	t.Helper()
	if s.Phase != want {
		t.Errorf("phase = %s, want %s (statuses %+v)", s.Phase, want, s.ContainerStatuses)
	}
}

func wantWaiting(t *testing.T, s v1.PodStatus, reason string) {
	t.Helper()
	if len(s.ContainerStatuses) == 0 || s.ContainerStatuses[0].State.Waiting == nil || s.ContainerStatuses[0].State.Waiting.Reason != reason {
		t.Errorf("want waiting %s, got %+v", reason, s.ContainerStatuses)
	}
}

func wantCondition(t *testing.T, s v1.PodStatus, ct v1.PodConditionType, want v1.ConditionStatus) {
	t.Helper()
	for _, c := range s.Conditions {
		if c.Type == ct {
			if c.Status != want {
				t.Errorf("condition %s = %s (%s: %s), want %s", ct, c.Status, c.Reason, c.Message, want)
			}
			return
		}
	}
	t.Errorf("no condition %s in %v", ct, s.Conditions)
}
