// Package events holds the reasons of the events the kubelet records, with kubelet's own
// values. Mirrors k8s.io/kubernetes/pkg/kubelet/events/event.go.
package events

// Container event reasons.
const (
	CreatedContainer        = "Created"
	StartedContainer        = "Started"
	FailedToCreateContainer = "Failed"
	FailedToStartContainer  = "Failed"
	KillingContainer        = "Killing"
	BackOffStartContainer   = "BackOff"
	ContainerUnhealthy      = "Unhealthy"
	ContainerProbeWarning   = "ProbeWarning"
	FailedPostStartHook     = "FailedPostStartHook"
	FailedPreStopHook       = "FailedPreStopHook"
)

// Image event reasons.
const (
	PullingImage            = "Pulling"
	PulledImage             = "Pulled"
	FailedToPullImage       = "Failed"
	BackOffPullImage        = "BackOff"
	ErrImageNeverPullPolicy = "ErrImageNeverPull"
)

// Pod sandbox event reasons.
const (
	FailedCreatePodSandBox = "FailedCreatePodSandBox"
)

// Node event reasons.
const (
	NodeReady       = "NodeReady"
	NodeNotReady    = "NodeNotReady"
	StartingKubelet = "Starting"
	RegisteredNode  = "RegisteredNode"
)
