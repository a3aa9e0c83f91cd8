package container

import (
	"errors"
	"fmt"
)

// The reasons a container start can fail; their Error() strings are the
// waiting reasons shown in the pod status (containerStatuses[].state.waiting
// .reason). Mirrors kubecontainer's and pkg/kubelet/images' error values.
var (
	ErrCrashLoopBackOff      = errors.New("CrashLoopBackOff")
	ErrCreateContainerConfig = errors.New("CreateContainerConfigError")
	ErrCreateContainer       = errors.New("CreateContainerError")
	ErrRunContainer          = errors.New("RunContainerError")
	ErrImagePull             = errors.New("ErrImagePull")
	ErrImagePullBackOff      = errors.New("ImagePullBackOff")
	ErrImageNeverPull        = errors.New("ErrImageNeverPull")
	ErrInvalidImageName      = errors.New("InvalidImageName")
	ErrKillContainer         = errors.New("KillContainerError")
	ErrPostStartHook         = errors.New("PostStartHookError")
	ErrCreatePodSandbox      = errors.New("CreatePodSandboxError")
	ErrKillPodSandbox        = errors.New("KillPodSandboxError")
)

// SyncAction names one step of SyncPod. Mirrors kubecontainer.SyncAction.
type SyncAction string

// The actions SyncPod records results for.
const (
	StartContainer   SyncAction = "StartContainer"
	KillContainer    SyncAction = "KillContainer"
	CreatePodSandbox SyncAction = "CreatePodSandbox"
	KillPodSandbox   SyncAction = "KillPodSandbox"
)

// SyncResult is the outcome of one action on one target (a container name or
// a pod). Mirrors kubecontainer.SyncResult.
type SyncResult struct {
	Action SyncAction
	// Target is the container name for container actions and the pod's full
	// name for sandbox actions.
	Target string
	// Error is one of the Err* values above, nil on success.
	Error error
	// Message is the human-readable detail that goes into the waiting
	// state's message.
	Message string
}

// NewSyncResult returns a successful result for action on target.
func NewSyncResult(action SyncAction, target string) *SyncResult {
	return &SyncResult{Action: action, Target: target}
}

// Fail records err (one of the Err* values) with msg.
func (r *SyncResult) Fail(err error, msg string) {
	r.Error, r.Message = err, msg
}

// PodSyncResult collects the results of one SyncPod. Mirrors
// kubecontainer.PodSyncResult.
type PodSyncResult struct {
	SyncResults []*SyncResult
	// SyncError is an error that is not tied to one action (e.g. listing
	// failed).
	SyncError error
}

// AddSyncResult appends results.
func (p *PodSyncResult) AddSyncResult(results ...*SyncResult) {
	p.SyncResults = append(p.SyncResults, results...)
}

// AddPodSyncResult merges another PodSyncResult into p.
func (p *PodSyncResult) AddPodSyncResult(result PodSyncResult) {
	p.AddSyncResult(result.SyncResults...)
	p.Fail(result.SyncError)
}

// Fail records a pod-level error; nil is ignored.
func (p *PodSyncResult) Fail(err error) {
	if err != nil && p.SyncError == nil {
		p.SyncError = err
	}
}

// Error returns nil when every action succeeded, else an error listing the
// failures; errors.Is matches each failed action's Err* value.
func (p *PodSyncResult) Error() error {
	var errs []error
	if p.SyncError != nil {
		errs = append(errs, fmt.Errorf("failed to SyncPod: %w", p.SyncError))
	}
	for _, r := range p.SyncResults {
		if r.Error != nil {
			errs = append(errs, fmt.Errorf("failed to %q for %q with %w: %q", r.Action, r.Target, r.Error, r.Message))
		}
	}
	return errors.Join(errs...)
}
