// Package event is the events.k8s.io/v1 events resource: a second view of the events the
// core/v1 events resource stores (one object at /registry/events/<namespace>/<name>, the
// same name, uid and resourceVersion through both), converted by the apiserver's scheme
// (note ↔ message, regarding ↔ involvedObject, deprecated* ↔ the fields core/v1 still
// has) and judged by kube's stricter events.k8s.io validation. Mirrors
// k8s.io/kubernetes/pkg/registry/events/rest, which serves the core events storage under
// events.k8s.io.
package event

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	coreevent "skiff.dev/services/apiserver/registry/core/event"
)

// Descriptor serves events.k8s.io/v1 events (kubectl: events.events.k8s.io, ev) from the
// core/v1 events storage. Its printer, field selectors (in events.k8s.io's names:
// regarding.*, reportingController, reason, type, metadata.*) and TTL are core/v1's.
var Descriptor = registry.Descriptor{
	GroupVersion: eventsv1.SchemeGroupVersion,
	Resource:     "events",
	SingularName: "event",
	Kind:         "Event",
	ShortNames:   []string{"ev"},
	NewFunc:      func() runtime.Object { return &eventsv1.Event{} },
	NewListFunc:  func() runtime.Object { return &eventsv1.EventList{} },
	Strategy:     Strategy{},
	StorageOf:    corev1.Resource("events"),
}

// Strategy judges events written through events.k8s.io/v1, in their stored (core/v1)
// form: core/v1's strategy with events.k8s.io/v1's validation. Mirrors kube's event
// strategy when the request's group version is events.k8s.io/v1.
type Strategy struct{ coreevent.Strategy }

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
	_ registry.TTLStrategy  = Strategy{}
)

// Validate checks a new event as kube checks one created through events.k8s.io/v1 (see
// coreevent.ValidateEventCreate): eventTime, reportingController, reportingInstance,
// action and reason required, note at most 1 KiB, type Normal or Warning, no deprecated
// field set.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return coreevent.ValidateEventCreate(obj.(*corev1.Event), eventsv1.SchemeGroupVersion)
}

// ValidateUpdate checks an update as kube checks one through events.k8s.io/v1: only the
// series and metadata may change (see coreevent.ValidateEventUpdate).
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return coreevent.ValidateEventUpdate(obj.(*corev1.Event), old.(*corev1.Event), eventsv1.SchemeGroupVersion)
}
