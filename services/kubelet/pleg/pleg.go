// Package pleg is the Pod Lifecycle Event Generator: it relists the runtime
// every second, turns what changed since the previous relist into
// PodLifecycleEvents for the sync loop, and keeps the runtime cache of pod
// statuses the pod workers read. Mirrors kubelet's pkg/kubelet/pleg.
package pleg

import (
	"k8s.io/apimachinery/pkg/types"
)

// PodLifecycleEventType says what happened to a container of a pod.
type PodLifecycleEventType string

// The event types, as in Kubernetes. ContainerChanged (a container entered an
// unknown or created state) is generated but not sent, since nothing acts on
// it.
const (
	ContainerStarted PodLifecycleEventType = "ContainerStarted"
	ContainerDied    PodLifecycleEventType = "ContainerDied"
	ContainerRemoved PodLifecycleEventType = "ContainerRemoved"
	ContainerChanged PodLifecycleEventType = "ContainerChanged"
)

// PodLifecycleEvent is one change seen by a relist. Sandboxes count as
// containers. Mirrors pleg.PodLifecycleEvent.
type PodLifecycleEvent struct {
	// ID is the pod UID.
	ID types.UID
	// Type is what happened.
	Type PodLifecycleEventType
	// Data is the container id (without the runtime prefix), a string.
	Data any
}
