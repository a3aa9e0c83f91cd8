package event

import (
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1beta1 "k8s.io/api/events/v1beta1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Length limits of an event's fields, kube's.
const (
	ReportingInstanceLengthLimit = 128
	ActionLengthLimit            = 128
	ReasonLengthLimit            = 128
	NoteLengthLimit              = 1024
)

// ValidateEventCreate checks a new event written through requestVersion, the group
// version of the request: every event passes the legacy rules (below); one written
// through events.k8s.io/v1 (or any version other than core/v1 and events.k8s.io/v1beta1)
// must also have valid metadata, a valid series, an eventTime, type Normal or Warning,
// and none of the deprecated fields (firstTimestamp, lastTimestamp, count, source) set.
// The legacy rules: an event without eventTime must sit in its involved object's
// namespace ("" or default for a cluster-scoped object); one with eventTime must name a
// reporting controller (a qualified name) and instance (at most 128 characters), an
// action and a reason (at most 128 each), and a message (note) of at most 1024
// characters; its involved object must have a namespace unless the event is in default
// or kube-system. Field paths are core/v1's, as kube reports them whatever the version
// (message, not note; involvedObject, not regarding), except that the reporting
// controller is reportingComponent through core/v1 and reportingController otherwise.
// Mirrors ValidateEventCreate in k8s.io/kubernetes/pkg/apis/core/validation/events.go.
func ValidateEventCreate(event *corev1.Event, requestVersion schema.GroupVersion) field.ErrorList {
	allErrs := legacyValidateEvent(event, requestVersion)
	if requestVersion == corev1.SchemeGroupVersion || requestVersion == eventsv1beta1.SchemeGroupVersion {
		return allErrs
	}
	allErrs = append(allErrs, apivalidation.ValidateObjectMeta(&event.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	allErrs = append(allErrs, validateV1EventSeries(event)...)
	if event.EventTime.IsZero() {
		allErrs = append(allErrs, field.Required(field.NewPath("eventTime"), ""))
	}
	if event.Type != corev1.EventTypeNormal && event.Type != corev1.EventTypeWarning {
		allErrs = append(allErrs, field.Invalid(field.NewPath("type"), "", fmt.Sprintf("has invalid value: %v", event.Type)))
	}
	if !event.FirstTimestamp.IsZero() {
		allErrs = append(allErrs, field.Invalid(field.NewPath("firstTimestamp"), "", "needs to be unset"))
	}
	if !event.LastTimestamp.IsZero() {
		allErrs = append(allErrs, field.Invalid(field.NewPath("lastTimestamp"), "", "needs to be unset"))
	}
	if event.Count != 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("count"), "", "needs to be unset"))
	}
	if event.Source.Component != "" || event.Source.Host != "" {
		allErrs = append(allErrs, field.Invalid(field.NewPath("source"), "", "needs to be unset"))
	}
	return allErrs
}

// ValidateEventUpdate checks an update of oldEvent to newEvent written through
// requestVersion: the new event passes the legacy rules; through events.k8s.io/v1 the
// metadata update rules apply too, a changed series must be valid, and everything else
// is immutable: involvedObject, reason, message, source, firstTimestamp, lastTimestamp,
// count, type, action, related, reportingController, reportingInstance, and eventTime
// beyond a microsecond (clients that serialize it truncated must be able to update).
// Mirrors ValidateEventUpdate.
func ValidateEventUpdate(newEvent, oldEvent *corev1.Event, requestVersion schema.GroupVersion) field.ErrorList {
	allErrs := legacyValidateEvent(newEvent, requestVersion)
	if requestVersion == corev1.SchemeGroupVersion || requestVersion == eventsv1beta1.SchemeGroupVersion {
		return allErrs
	}
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&newEvent.ObjectMeta, &oldEvent.ObjectMeta, field.NewPath("metadata"))...)
	if !reflect.DeepEqual(newEvent.Series, oldEvent.Series) {
		allErrs = append(allErrs, validateV1EventSeries(newEvent)...)
	}
	immutable := func(newVal, oldVal any, name string) {
		allErrs = append(allErrs, apivalidation.ValidateImmutableField(newVal, oldVal, field.NewPath(name))...)
	}
	immutable(newEvent.InvolvedObject, oldEvent.InvolvedObject, "involvedObject")
	immutable(newEvent.Reason, oldEvent.Reason, "reason")
	immutable(newEvent.Message, oldEvent.Message, "message")
	immutable(newEvent.Source, oldEvent.Source, "source")
	immutable(newEvent.FirstTimestamp, oldEvent.FirstTimestamp, "firstTimestamp")
	immutable(newEvent.LastTimestamp, oldEvent.LastTimestamp, "lastTimestamp")
	immutable(newEvent.Count, oldEvent.Count, "count")
	immutable(newEvent.Type, oldEvent.Type, "type")
	if !newEvent.EventTime.Truncate(time.Microsecond).UTC().Equal(oldEvent.EventTime.Truncate(time.Microsecond).UTC()) {
		immutable(newEvent.EventTime, oldEvent.EventTime, "eventTime")
	}
	immutable(newEvent.Action, oldEvent.Action, "action")
	immutable(newEvent.Related, oldEvent.Related, "related")
	immutable(newEvent.ReportingController, oldEvent.ReportingController, "reportingController")
	immutable(newEvent.ReportingInstance, oldEvent.ReportingInstance, "reportingInstance")
	return allErrs
}

// validateV1EventSeries checks a series: a count of at least 2 and a lastObservedTime.
func validateV1EventSeries(event *corev1.Event) field.ErrorList {
	var allErrs field.ErrorList
	if event.Series != nil {
		if event.Series.Count < 2 {
			allErrs = append(allErrs, field.Invalid(field.NewPath("series.count"), "", "should be at least 2"))
		}
		if event.Series.LastObservedTime.IsZero() {
			allErrs = append(allErrs, field.Required(field.NewPath("series.lastObservedTime"), ""))
		}
	}
	return allErrs
}

// legacyValidateEvent holds the rules every event passes, whatever its version (see
// ValidateEventCreate). Mirrors legacyValidateEvent.
func legacyValidateEvent(event *corev1.Event, requestVersion schema.GroupVersion) field.ErrorList {
	var allErrs field.ErrorList
	reportingControllerFieldName := "reportingController"
	if requestVersion == corev1.SchemeGroupVersion {
		reportingControllerFieldName = "reportingComponent"
	}
	namespaceMismatch := field.Invalid(field.NewPath("involvedObject", "namespace"), event.InvolvedObject.Namespace, "does not match event.namespace")
	if event.EventTime.IsZero() {
		// An old-style event: its namespace must be its object's.
		switch {
		case event.InvolvedObject.Namespace == "":
			if event.Namespace != metav1.NamespaceNone && event.Namespace != metav1.NamespaceDefault {
				allErrs = append(allErrs, namespaceMismatch)
			}
		case event.Namespace != event.InvolvedObject.Namespace:
			allErrs = append(allErrs, namespaceMismatch)
		}
	} else {
		if event.InvolvedObject.Namespace == "" && event.Namespace != metav1.NamespaceDefault && event.Namespace != metav1.NamespaceSystem {
			allErrs = append(allErrs, namespaceMismatch)
		}
		if event.ReportingController == "" {
			allErrs = append(allErrs, field.Required(field.NewPath(reportingControllerFieldName), ""))
		}
		for _, msg := range validation.IsQualifiedName(event.ReportingController) {
			allErrs = append(allErrs, field.Invalid(field.NewPath(reportingControllerFieldName), event.ReportingController, msg))
		}
		if event.ReportingInstance == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("reportingInstance"), ""))
		}
		if len(event.ReportingInstance) > ReportingInstanceLengthLimit {
			allErrs = append(allErrs, field.Invalid(field.NewPath("reportingInstance"), "", fmt.Sprintf("can have at most %v characters", ReportingInstanceLengthLimit)))
		}
		if event.Action == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("action"), ""))
		}
		if len(event.Action) > ActionLengthLimit {
			allErrs = append(allErrs, field.Invalid(field.NewPath("action"), "", fmt.Sprintf("can have at most %v characters", ActionLengthLimit)))
		}
		if event.Reason == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("reason"), ""))
		}
		if len(event.Reason) > ReasonLengthLimit {
			allErrs = append(allErrs, field.Invalid(field.NewPath("reason"), "", fmt.Sprintf("can have at most %v characters", ReasonLengthLimit)))
		}
		if len(event.Message) > NoteLengthLimit {
			allErrs = append(allErrs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %v characters", NoteLengthLimit)))
		}
	}
	for _, msg := range validation.IsDNS1123Subdomain(event.Namespace) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("namespace"), event.Namespace, msg))
	}
	return allErrs
}
