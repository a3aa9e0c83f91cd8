// Package pleg is the Pod Lifecycle Event Generator: it turns what changed in
// the container runtime into PodLifecycleEvents for the sync loop, and keeps
// the runtime cache of pod statuses the pod workers read. GenericPLEG finds
// the changes by relisting the runtime every second; EventedPLEG reads the
// runtime's container events and relists only as a safety net. Mirrors
// kubelet's pkg/kubelet/pleg.
package pleg

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// PodLifecycleEventGenerator is what the kubelet needs of a PLEG; GenericPLEG
// and EventedPLEG implement it. Mirrors pleg.PodLifecycleEventGenerator.
type PodLifecycleEventGenerator interface {
	// Run generates events until ctx ends.
	Run(ctx context.Context)
	// Watch returns the channel the events are sent on.
	Watch() <-chan *PodLifecycleEvent
	// Healthy reports an error when the PLEG has not seen the runtime
	// recently enough; the node is then NotReady.
	Healthy() (bool, error)
	// RequestRelist asks for pod uid's status to be read again soon, so that
	// a status newer than the call reaches the cache; it never blocks.
	RequestRelist(uid types.UID)
}

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
