package kuberuntime

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"skiff.dev/services/kubelet/container"
)

var now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func testPod(policy v1.RestartPolicy, names ...string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"},
		Spec:       v1.PodSpec{RestartPolicy: policy},
	}
	for _, n := range names {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: n, Image: "busybox:1"})
	}
	return pod
}

func sandbox(state runtimeapi.PodSandboxState, attempt uint32) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{Id: "sb", State: state, Metadata: &runtimeapi.PodSandboxMetadata{Attempt: attempt}}
}

func cs(pod *v1.Pod, name string, state container.State, exitCode int) *container.Status {
	i := slices.IndexFunc(pod.Spec.Containers, func(c v1.Container) bool { return c.Name == name })
	return &container.Status{
		ID: container.ContainerID{Type: "sim", ID: name + "-id"}, Name: name, State: state, ExitCode: exitCode,
		Hash: container.HashContainer(&pod.Spec.Containers[i]), FinishedAt: now.Add(-time.Second),
	}
}

func TestComputePodActions(t *testing.T) {
	ready := runtimeapi.PodSandboxState_SANDBOX_READY
	notReady := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	tests := []struct {
		name string
		pod  *v1.Pod
		// status builds the runtime view of pod.
		status func(pod *v1.Pod) *container.PodStatus
		// inBackOff lists containers whose last exit is within their
		// crash-loop backoff.
		inBackOff     []string
		wantCreate    bool
		wantKillPod   bool
		wantStarted   []string
		wantKilled    []string
		wantInitStart string
	}{
		{
			name:       "no sandbox: create the sandbox and start every container",
			pod:        testPod(v1.RestartPolicyAlways, "a", "b"),
			status:     func(*v1.Pod) *container.PodStatus { return &container.PodStatus{} },
			wantCreate: true, wantKillPod: true, wantStarted: []string{"a", "b"},
		},
		{
			name: "running containers in a ready sandbox: nothing to do",
			pod:  testPod(v1.RestartPolicyAlways, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateRunning, 0)}}
			},
		},
		{
			name: "Never, container exited: nothing started, sandbox stopped",
			pod:  testPod(v1.RestartPolicyNever, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateExited, 1)}}
			},
			wantKillPod: true,
		},
		{
			name: "OnFailure, exit 1: restart it",
			pod:  testPod(v1.RestartPolicyOnFailure, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateExited, 1)}}
			},
			wantStarted: []string{"a"},
		},
		{
			name: "OnFailure, exit 0: nothing started",
			pod:  testPod(v1.RestartPolicyOnFailure, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateExited, 0)}}
			},
			wantKillPod: true,
		},
		{
			name: "Always, exit 0: restart it",
			pod:  testPod(v1.RestartPolicyAlways, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateExited, 0)}}
			},
			wantStarted: []string{"a"},
		},
		{
			name: "container in crash-loop backoff: not started",
			pod:  testPod(v1.RestartPolicyAlways, "a", "b"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{
						cs(p, "a", container.ContainerStateExited, 1),
						cs(p, "b", container.ContainerStateExited, 1),
					}}
			},
			inBackOff:   []string{"a"},
			wantStarted: []string{"b"},
		},
		{
			name: "sandbox died: kill the pod, new sandbox with the next attempt, start again",
			pod:  testPod(v1.RestartPolicyAlways, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(notReady, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateExited, 0)}}
			},
			wantCreate: true, wantKillPod: true, wantStarted: []string{"a"},
		},
		{
			name: "Never pod whose sandbox died after running: no new sandbox",
			pod:  testPod(v1.RestartPolicyNever, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(notReady, 1)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateExited, 0)}}
			},
			wantKillPod: true,
		},
		{
			name: "changed spec of a running container: replace it",
			pod:  testPod(v1.RestartPolicyNever, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				s := cs(p, "a", container.ContainerStateRunning, 0)
				s.Hash++
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{s}}
			},
			wantStarted: []string{"a"}, wantKilled: []string{"a"},
		},
		{
			name: "unknown container state: kill it before starting again",
			pod:  testPod(v1.RestartPolicyAlways, "a"),
			status: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{cs(p, "a", container.ContainerStateUnknown, 0)}}
			},
			wantStarted: []string{"a"}, wantKilled: []string{"a"},
		},
		{
			name: "pod with init containers: a new sandbox starts the first init container only",
			pod: func() *v1.Pod {
				p := testPod(v1.RestartPolicyAlways, "a")
				p.Spec.InitContainers = []v1.Container{{Name: "i1"}, {Name: "i2"}}
				return p
			}(),
			status:     func(*v1.Pod) *container.PodStatus { return &container.PodStatus{} },
			wantCreate: true, wantKillPod: true, wantInitStart: "i1",
		},
		{
			name: "first init container succeeded: start the second",
			pod: func() *v1.Pod {
				p := testPod(v1.RestartPolicyAlways, "a")
				p.Spec.InitContainers = []v1.Container{{Name: "i1"}, {Name: "i2"}}
				return p
			}(),
			status: func(*v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{{Name: "i1", State: container.ContainerStateExited}}}
			},
			wantInitStart: "i2",
		},
		{
			name: "init containers done: start the regular containers",
			pod: func() *v1.Pod {
				p := testPod(v1.RestartPolicyAlways, "a")
				p.Spec.InitContainers = []v1.Container{{Name: "i1"}}
				return p
			}(),
			status: func(*v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{{Name: "i1", State: container.ContainerStateExited}}}
			},
			wantStarted: []string{"a"},
		},
		{
			name: "init container failed with Never: kill the pod",
			pod: func() *v1.Pod {
				p := testPod(v1.RestartPolicyNever, "a")
				p.Spec.InitContainers = []v1.Container{{Name: "i1"}}
				return p
			}(),
			status: func(*v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
					ContainerStatuses: []*container.Status{{Name: "i1", State: container.ContainerStateExited, ExitCode: 1}}}
			},
			wantKillPod: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			podStatus := tt.status(tt.pod)
			actions := (&Manager{}).computePodActions(tt.pod, podStatus)
			if actions.CreateSandbox != tt.wantCreate {
				t.Errorf("CreateSandbox = %v, want %v", actions.CreateSandbox, tt.wantCreate)
			}
			if actions.KillPod != tt.wantKillPod {
				t.Errorf("KillPod = %v, want %v", actions.KillPod, tt.wantKillPod)
			}
			var initStart string
			if actions.NextInitContainerToStart != nil {
				initStart = actions.NextInitContainerToStart.Name
			}
			if initStart != tt.wantInitStart {
				t.Errorf("NextInitContainerToStart = %q, want %q", initStart, tt.wantInitStart)
			}
			var killed []string
			for _, k := range actions.ContainersToKill {
				killed = append(killed, k.name)
			}
			if !slices.Equal(killed, tt.wantKilled) {
				t.Errorf("ContainersToKill = %v, want %v", killed, tt.wantKilled)
			}

			// What SyncPod starts: the containers to start, less those
			// still backing off.
			clock := testingclock.NewFakeClock(now)
			backOff := flowcontrol.NewFakeBackOff(10*time.Second, 300*time.Second, clock)
			for _, name := range tt.inBackOff {
				i := slices.IndexFunc(tt.pod.Spec.Containers, func(c v1.Container) bool { return c.Name == name })
				backOff.Next(getStableKey(tt.pod, &tt.pod.Spec.Containers[i]), now.Add(-time.Second))
			}
			var started []string
			for _, idx := range actions.ContainersToStart {
				c := &tt.pod.Spec.Containers[idx]
				if inBackOff, _, _ := doBackOff(tt.pod, c, podStatus, backOff); !inBackOff {
					started = append(started, c.Name)
				}
			}
			if !slices.Equal(started, tt.wantStarted) {
				t.Errorf("started = %v, want %v", started, tt.wantStarted)
			}
		})
	}
}

func TestDoBackOffGrowsAndExpires(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	c := &pod.Spec.Containers[0]
	clock := testingclock.NewFakeClock(now)
	backOff := flowcontrol.NewFakeBackOff(10*time.Second, 300*time.Second, clock)
	exitAt := func(at time.Time) *container.PodStatus {
		return &container.PodStatus{ContainerStatuses: []*container.Status{{Name: "a", State: container.ContainerStateExited, ExitCode: 1, FinishedAt: at}}}
	}

	// The first crash restarts at once.
	if in, _, _ := doBackOff(pod, c, exitAt(now), backOff); in {
		t.Fatal("first restart should not back off")
	}
	// The second crash, right after, waits 10 s.
	clock.Step(time.Second)
	in, msg, err := doBackOff(pod, c, exitAt(clock.Now()), backOff)
	if !in || err != container.ErrCrashLoopBackOff || msg == "" {
		t.Fatalf("second crash: inBackOff=%v err=%v msg=%q", in, err, msg)
	}
	clock.Step(10 * time.Second)
	if in, _, _ := doBackOff(pod, c, exitAt(now.Add(time.Second)), backOff); in {
		t.Fatal("still backing off after 10 s")
	}
	// Now the delay doubled to 20 s.
	if got := backOff.Get(getStableKey(pod, c)); got != 20*time.Second {
		t.Errorf("backoff = %v, want 20s", got)
	}
}

func TestPodSandboxChanged(t *testing.T) {
	ready := runtimeapi.PodSandboxState_SANDBOX_READY
	notReady := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	tests := []struct {
		name        string
		sandboxes   []*runtimeapi.PodSandboxStatus
		wantChanged bool
		wantAttempt uint32
	}{
		{"none", nil, true, 0},
		{"newest ready", []*runtimeapi.PodSandboxStatus{sandbox(ready, 2), sandbox(notReady, 1)}, false, 2},
		{"newest not ready", []*runtimeapi.PodSandboxStatus{sandbox(notReady, 2)}, true, 3},
		{"two ready", []*runtimeapi.PodSandboxStatus{sandbox(ready, 1), sandbox(ready, 0)}, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed, attempt, _ := podSandboxChanged(&v1.Pod{}, &container.PodStatus{SandboxStatuses: tt.sandboxes})
			if changed != tt.wantChanged || attempt != tt.wantAttempt {
				t.Errorf("changed=%v attempt=%d, want %v %d", changed, attempt, tt.wantChanged, tt.wantAttempt)
			}
		})
	}
}
