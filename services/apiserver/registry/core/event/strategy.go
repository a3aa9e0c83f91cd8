// Package event is the core/v1 events resource. Mirrors
// k8s.io/kubernetes/pkg/registry/core/event.
package event

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
)

// DefaultTTL is how long an event lives after its last update, kube-apiserver's
// --event-ttl default.
const DefaultTTL = time.Hour

// Descriptor serves events.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "events",
	SingularName: "event",
	Kind:         "Event",
	ShortNames:   []string{"ev"},
	NewFunc:      func() runtime.Object { return &corev1.Event{} },
	NewListFunc:  func() runtime.Object { return &corev1.EventList{} },
	Strategy:     Strategy{},
	// As kube-apiserver's: a run of 5,000 pods writes some 20,000 events, which only
	// `kubectl get events -w` would watch.
	NoWatchCache: true,
}

// Strategy is the events strategy: events are written whole by their reporters and
// expire DefaultTTL after their last write.
type Strategy struct{}

// TTL is DefaultTTL: the events store gives every write a lease of that length.
func (Strategy) TTL() time.Duration { return DefaultTTL }

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate keeps the event as sent.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the event as sent (reporters update count and lastTimestamp).
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks metadata and kube's rules for events written through core/v1 (see
// ValidateEventCreate).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	ev := obj.(*corev1.Event)
	allErrs := apivalidation.ValidateObjectMeta(&ev.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, ValidateEventCreate(ev, corev1.SchemeGroupVersion)...)
}

// ValidateUpdate checks an update as kube does through core/v1 (see ValidateEventUpdate),
// plus the metadata update rules.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	ev, oldEv := obj.(*corev1.Event), old.(*corev1.Event)
	allErrs := apivalidation.ValidateObjectMeta(&ev.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateEventUpdate(ev, oldEv, corev1.SchemeGroupVersion)...)
	return append(allErrs, apivalidation.ValidateObjectMetaUpdate(&ev.ObjectMeta, &oldEv.ObjectMeta, field.NewPath("metadata"))...)
}

// GetAttrs returns labels and the selectable fields of kube's EventToSelectableFields
// (involvedObject.*, reason, reportingComponent, source, type).
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil, fmt.Errorf("not an event: %T", obj)
	}
	source := ev.Source.Component
	if source == "" {
		source = ev.ReportingController
	}
	f := fields.Set{
		"involvedObject.kind":            ev.InvolvedObject.Kind,
		"involvedObject.namespace":       ev.InvolvedObject.Namespace,
		"involvedObject.name":            ev.InvolvedObject.Name,
		"involvedObject.uid":             string(ev.InvolvedObject.UID),
		"involvedObject.apiVersion":      ev.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": ev.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       ev.InvolvedObject.FieldPath,
		"reason":                         ev.Reason,
		"reportingComponent":             ev.ReportingController,
		"source":                         source,
		"type":                           ev.Type,
	}
	return labels.Set(ev.Labels), registry.MergeFieldsSets(registry.ObjectMetaFieldsSet(&ev.ObjectMeta, true), f), nil
}

// TableColumns are LAST SEEN TYPE REASON OBJECT MESSAGE, and wide SUBOBJECT SOURCE FIRST
// SEEN COUNT NAME, in kube's order. Mirrors printEvent.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: "string", Description: "The last time this event was recorded."},
		{Name: "Type", Type: "string", Description: "Type of this event (Normal, Warning), new types could be added in the future."},
		{Name: "Reason", Type: "string", Description: "This should be a short, machine understandable string that gives the reason for this event being generated."},
		{Name: "Object", Type: "string", Description: "The object this Event is about."},
		{Name: "Subobject", Type: "string", Priority: 1, Description: "The subcomponent of the object this Event is about."},
		{Name: "Source", Type: "string", Priority: 1, Description: "The component reporting this event."},
		{Name: "Message", Type: "string", Description: "A human-readable description of the status of this operation."},
		{Name: "First Seen", Type: "string", Priority: 1, Description: "The first time this event was recorded."},
		{Name: "Count", Type: "string", Priority: 1, Description: "The number of times this event has occurred."},
		{Name: "Name", Type: "string", Priority: 1, Description: "Name of the event."},
	}
}

// TableRow prints one event.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	ev := obj.(*corev1.Event)
	firstTimestamp := ev.FirstTimestamp
	if firstTimestamp.IsZero() {
		firstTimestamp = metav1.NewTime(ev.EventTime.Time)
	}
	lastTimestamp := ev.LastTimestamp
	if lastTimestamp.IsZero() {
		lastTimestamp = firstTimestamp
	}
	source := ev.Source.Component
	if source == "" {
		source = ev.ReportingController
	}
	if ev.Source.Host != "" {
		source += ", " + ev.Source.Host
	}
	count := ev.Count
	if ev.Series != nil {
		count = ev.Series.Count
	} else if count == 0 {
		count = 1
	}
	return []interface{}{
		registry.TranslateTimestampSince(lastTimestamp), ev.Type, ev.Reason,
		strings.ToLower(ev.InvolvedObject.Kind) + "/" + ev.InvolvedObject.Name,
		ev.InvolvedObject.FieldPath, source, strings.TrimSpace(ev.Message),
		registry.TranslateTimestampSince(firstTimestamp), fmt.Sprint(count), ev.Name,
	}
}
