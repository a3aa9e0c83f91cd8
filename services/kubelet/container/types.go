// Package container holds the runtime-neutral view of pods and containers that
// the kubelet's components share: what the runtime reports (Pod, PodStatus,
// Status), the runtime cache the PLEG fills and the pod workers read, and the
// results of one SyncPod. It mirrors kubelet's pkg/kubelet/container
// ("kubecontainer").
package container

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// State is the state of a container (or of a sandbox, seen as a container) as
// the kubelet understands it. Mirrors kubecontainer.State.
type State string

// The container states. A sandbox is ContainerStateRunning while it is ready
// and ContainerStateExited otherwise.
const (
	ContainerStateCreated State = "created"
	ContainerStateRunning State = "running"
	ContainerStateExited  State = "exited"
	ContainerStateUnknown State = "unknown"
)

// ContainerID is a runtime-qualified container (or sandbox) id; its string
// form "<runtime>://<id>" is what Pod.status.containerStatuses[].containerID
// shows. Mirrors kubecontainer.ContainerID.
type ContainerID struct {
	// Type is the runtime name reported by CRI Version, e.g. "containerd".
	Type string
	// ID is the runtime's id of the container.
	ID string
}

// String returns "<type>://<id>", or "" for the zero ContainerID.
func (c ContainerID) String() string {
	if c.ID == "" {
		return ""
	}
	return c.Type + "://" + c.ID
}

// IsEmpty reports whether c names no container.
func (c ContainerID) IsEmpty() bool { return c.ID == "" }

// Container is one container (or sandbox) of a runtime Pod as listed by the
// runtime, without the details that need a status call. Mirrors
// kubecontainer.Container.
type Container struct {
	ID      ContainerID
	Name    string
	Image   string
	ImageID string
	// Hash is the io.kubernetes.container.hash annotation: the spec the
	// container was created from.
	Hash      uint64
	State     State
	CreatedAt time.Time
}

// Pod is a pod as the runtime knows it: its sandboxes and containers grouped
// by the io.kubernetes.pod.uid label. Mirrors kubecontainer.Pod.
type Pod struct {
	ID        types.UID
	Name      string
	Namespace string
	// Containers are the pod's application containers, newest first.
	Containers []*Container
	// Sandboxes are the pod's sandboxes, newest first.
	Sandboxes []*Container
}

// FindContainerByID returns the container (not sandbox) with id, or nil.
func (p *Pod) FindContainerByID(id ContainerID) *Container {
	for _, c := range p.Containers {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// FindSandboxByID returns the sandbox with id, or nil.
func (p *Pod) FindSandboxByID(id ContainerID) *Container {
	for _, c := range p.Sandboxes {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// IsEmpty reports whether the runtime pod has neither sandboxes nor
// containers.
func (p *Pod) IsEmpty() bool { return len(p.Containers) == 0 && len(p.Sandboxes) == 0 }

// Status is the detailed status of one container from CRI ContainerStatus.
// Mirrors kubecontainer.Status.
type Status struct {
	ID    ContainerID
	Name  string
	State State
	// CreatedAt, StartedAt and FinishedAt are zero when unknown; StartedAt is
	// zero for a container that was never started, FinishedAt for one that has
	// not exited.
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	// ExitCode is meaningful only in ContainerStateExited.
	ExitCode int
	// Image is the image the runtime reports; ImageID its resolved reference
	// (digest or image id).
	Image   string
	ImageID string
	// Hash is the spec hash recorded when the container was created.
	Hash uint64
	// RestartCount is the io.kubernetes.container.restartCount annotation: the
	// number of earlier containers of the same name in this pod.
	RestartCount int
	// Reason and Message explain an exit, e.g. "Completed", "Error",
	// "OOMKilled".
	Reason  string
	Message string
}

// PodStatus is the runtime's view of a pod: every sandbox and every container
// the runtime still has for the pod UID, plus the pod IPs of the ready
// sandbox. Values stored in the Cache are shared and must not be modified.
// Mirrors kubecontainer.PodStatus.
type PodStatus struct {
	ID        types.UID
	Name      string
	Namespace string
	// IPs are the pod IPs of the newest ready sandbox, primary first.
	IPs []string
	// SandboxStatuses are newest first.
	SandboxStatuses []*runtimeapi.PodSandboxStatus
	// ContainerStatuses are newest first; a container that restarted has one
	// entry per attempt still kept by the runtime.
	ContainerStatuses []*Status
	// TimeStamp is when the status was read.
	TimeStamp time.Time
}

// FindContainerStatusByName returns the newest status of the container named
// name, or nil.
func (s *PodStatus) FindContainerStatusByName(name string) *Status {
	if s == nil {
		return nil
	}
	for _, c := range s.ContainerStatuses {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// ConvertPodStatusToRunningPod returns the runtime Pod with the containers and
// sandboxes of s that may still hold resources (running or unknown
// containers; every sandbox), i.e. what KillPod must stop. Mirrors
// kubecontainer.ConvertPodStatusToRunningPod.
func ConvertPodStatusToRunningPod(runtimeName string, s *PodStatus) Pod {
	pod := Pod{ID: s.ID, Name: s.Name, Namespace: s.Namespace}
	for _, c := range s.ContainerStatuses {
		if c.State != ContainerStateRunning && c.State != ContainerStateUnknown && c.State != ContainerStateCreated {
			continue
		}
		pod.Containers = append(pod.Containers, &Container{
			ID: c.ID, Name: c.Name, Image: c.Image, ImageID: c.ImageID, Hash: c.Hash, State: c.State,
		})
	}
	for _, sb := range s.SandboxStatuses {
		state := ContainerStateExited
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			state = ContainerStateRunning
		}
		pod.Sandboxes = append(pod.Sandboxes, &Container{
			ID: ContainerID{Type: runtimeName, ID: sb.GetId()}, State: state,
		})
	}
	return pod
}

// BuildPodFullName returns "<name>_<namespace>", the key kubelet logs and
// backoff entries use for a pod.
func BuildPodFullName(name, namespace string) string {
	return name + "_" + namespace
}
