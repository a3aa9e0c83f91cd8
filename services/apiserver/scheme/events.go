package scheme

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
)

// An Event is stored once, as a core/v1 Event, and served in two group versions: core/v1
// and events.k8s.io/v1, whose fields carry other names (note for message, regarding for
// involvedObject, deprecated* for the fields events.k8s.io/v1 gave up). The conversions
// below are registered in Scheme, so Scheme.Convert turns one into the other. kube
// converts both through its internal Event (k8s.io/kubernetes/pkg/apis/events/v1/
// conversion.go); skiff, which keeps no internal versions, converts between the two
// directly, field for field, so that an event round-trips unchanged either way. With no
// hub version between the two groups, Scheme.ConvertToVersion cannot cross them: the
// field manager then drops, on a write through one version, the managedFields entries
// recorded through the other (kube converts them).

// ConvertEventToEventsV1 fills out, an events.k8s.io/v1 Event, from in, a core/v1 Event:
// message becomes note, involvedObject regarding, source deprecatedSource,
// firstTimestamp, lastTimestamp and count their deprecated* fields; the rest keeps its
// name. out shares nothing with in; its TypeMeta is left empty. Mirrors
// Convert_core_Event_To_v1_Event.
func ConvertEventToEventsV1(in *corev1.Event, out *eventsv1.Event) {
	*out = eventsv1.Event{
		ObjectMeta:               *in.ObjectMeta.DeepCopy(),
		EventTime:                in.EventTime,
		ReportingController:      in.ReportingController,
		ReportingInstance:        in.ReportingInstance,
		Action:                   in.Action,
		Reason:                   in.Reason,
		Regarding:                in.InvolvedObject,
		Related:                  in.Related.DeepCopy(),
		Note:                     in.Message,
		Type:                     in.Type,
		DeprecatedSource:         in.Source,
		DeprecatedFirstTimestamp: *in.FirstTimestamp.DeepCopy(),
		DeprecatedLastTimestamp:  *in.LastTimestamp.DeepCopy(),
		DeprecatedCount:          in.Count,
	}
	if in.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
}

// ConvertEventsV1ToEvent fills out, a core/v1 Event, from in, an events.k8s.io/v1 Event:
// the inverse of ConvertEventToEventsV1. Mirrors Convert_v1_Event_To_core_Event.
func ConvertEventsV1ToEvent(in *eventsv1.Event, out *corev1.Event) {
	*out = corev1.Event{
		ObjectMeta:          *in.ObjectMeta.DeepCopy(),
		InvolvedObject:      in.Regarding,
		Reason:              in.Reason,
		Message:             in.Note,
		Source:              in.DeprecatedSource,
		FirstTimestamp:      *in.DeprecatedFirstTimestamp.DeepCopy(),
		LastTimestamp:       *in.DeprecatedLastTimestamp.DeepCopy(),
		Count:               in.DeprecatedCount,
		Type:                in.Type,
		EventTime:           in.EventTime,
		Action:              in.Action,
		Related:             in.Related.DeepCopy(),
		ReportingController: in.ReportingController,
		ReportingInstance:   in.ReportingInstance,
	}
	if in.Series != nil {
		out.Series = &corev1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
}

// eventsV1FieldLabels maps the field selectors events.k8s.io/v1 Events support to the
// core/v1 fields the events store selects on (its GetAttrs). Mirrors
// AddFieldLabelConversionsForEvent in k8s.io/kubernetes/pkg/apis/events/v1.
var eventsV1FieldLabels = map[string]string{
	"reason":                    "reason",
	"regarding.kind":            "involvedObject.kind",
	"regarding.namespace":       "involvedObject.namespace",
	"regarding.name":            "involvedObject.name",
	"regarding.uid":             "involvedObject.uid",
	"regarding.apiVersion":      "involvedObject.apiVersion",
	"regarding.resourceVersion": "involvedObject.resourceVersion",
	"regarding.fieldPath":       "involvedObject.fieldPath",
	"reportingController":       "reportingComponent",
	"type":                      "type",
	"metadata.namespace":        "metadata.namespace",
	"metadata.name":             "metadata.name",
}

// addEventConversions registers the two conversions and the field-label conversion of
// events.k8s.io/v1 Events in s.
func addEventConversions(s *runtime.Scheme) error {
	if err := s.AddConversionFunc((*corev1.Event)(nil), (*eventsv1.Event)(nil), func(a, b interface{}, _ conversion.Scope) error {
		ConvertEventToEventsV1(a.(*corev1.Event), b.(*eventsv1.Event))
		return nil
	}); err != nil {
		return err
	}
	if err := s.AddConversionFunc((*eventsv1.Event)(nil), (*corev1.Event)(nil), func(a, b interface{}, _ conversion.Scope) error {
		ConvertEventsV1ToEvent(a.(*eventsv1.Event), b.(*corev1.Event))
		return nil
	}); err != nil {
		return err
	}
	return s.AddFieldLabelConversionFunc(eventsv1.SchemeGroupVersion.WithKind("Event"), func(label, value string) (string, string, error) {
		mapped, ok := eventsV1FieldLabels[label]
		if !ok {
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}
		return mapped, value, nil
	})
}
