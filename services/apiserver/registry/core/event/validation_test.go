package event

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// newStyle is an event as events.k8s.io/v1 writes it, in its stored (core/v1) form.
func newStyle() *corev1.Event {
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "e", Namespace: "ns"},
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "ns"},
		EventTime:           metav1.NewMicroTime(time.Unix(1505828956, 0)),
		Reason:              "Test",
		Message:             "a note",
		Action:              "Do",
		Type:                corev1.EventTypeNormal,
		ReportingController: "example.com/controller",
		ReportingInstance:   "instance-1",
	}
}

// oldStyle is an event as client-go's core/v1 recorder writes it.
func oldStyle() *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e", Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "ns"},
		Reason:         "Started", Message: "Started container c", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet", Host: "n1"}, Count: 1,
		FirstTimestamp: metav1.NewTime(time.Unix(1505828956, 0)), LastTimestamp: metav1.NewTime(time.Unix(1505828956, 0)),
	}
}

func TestValidateEventCreate(t *testing.T) {
	eventsV1, coreV1 := eventsv1.SchemeGroupVersion, corev1.SchemeGroupVersion
	for _, tc := range []struct {
		name    string
		event   *corev1.Event
		version schema.GroupVersion
		want    []string // the errors, in order; none means valid
	}{
		{"an events.k8s.io/v1 event as the conformance suite writes it", newStyle(), eventsV1, nil},
		{"an old-style event through core/v1", oldStyle(), coreV1, nil},
		{"through events.k8s.io/v1 eventTime is required", with(newStyle(), func(e *corev1.Event) { e.EventTime = metav1.MicroTime{} }), eventsV1,
			// Without eventTime the legacy rules see an old-style event, whose namespace matches.
			[]string{"eventTime: Required value"}},
		{"through events.k8s.io/v1 reportingController and reportingInstance are required", with(newStyle(), func(e *corev1.Event) { e.ReportingController, e.ReportingInstance = "", "" }), eventsV1,
			[]string{"reportingController: Required value", "reportingInstance: Required value"}},
		{"through core/v1 the reporting controller is reportingComponent", with(newStyle(), func(e *corev1.Event) { e.ReportingController = "" }), coreV1,
			[]string{"reportingComponent: Required value"}},
		{"the reporting controller is a qualified name", with(newStyle(), func(e *corev1.Event) { e.ReportingController = "not a name" }), eventsV1,
			[]string{"reportingController: Invalid value: \"not a name\""}},
		{"a note of 1024 bytes is fine", with(newStyle(), func(e *corev1.Event) { e.Message = strings.Repeat("n", NoteLengthLimit) }), eventsV1, nil},
		{"a note of 1025 bytes is not", with(newStyle(), func(e *corev1.Event) { e.Message = strings.Repeat("n", NoteLengthLimit+1) }), eventsV1,
			[]string{"message: Invalid value: \"\": can have at most 1024 characters"}},
		{"action and reason are required and at most 128 characters", with(newStyle(), func(e *corev1.Event) { e.Action, e.Reason = "", strings.Repeat("r", 129) }), eventsV1,
			[]string{"action: Required value", "reason: Invalid value: \"\": can have at most 128 characters"}},
		{"reportingInstance is at most 128 characters", with(newStyle(), func(e *corev1.Event) { e.ReportingInstance = strings.Repeat("i", 129) }), eventsV1,
			[]string{"reportingInstance: Invalid value: \"\": can have at most 128 characters"}},
		{"through events.k8s.io/v1 the type is Normal or Warning", with(newStyle(), func(e *corev1.Event) { e.Type = "Odd" }), eventsV1,
			[]string{"type: Invalid value: \"\": has invalid value: Odd"}},
		{"through core/v1 any type goes", with(newStyle(), func(e *corev1.Event) { e.Type = "Odd" }), coreV1, nil},
		{"through events.k8s.io/v1 the deprecated fields must be unset", with(newStyle(), func(e *corev1.Event) {
			e.FirstTimestamp, e.LastTimestamp, e.Count, e.Source = metav1.Now(), metav1.Now(), 1, corev1.EventSource{Host: "n"}
		}), eventsV1, []string{"firstTimestamp: Invalid value: \"\": needs to be unset", "lastTimestamp: Invalid value: \"\": needs to be unset",
			"count: Invalid value: \"\": needs to be unset", "source: Invalid value: \"\": needs to be unset"}},
		{"a series counts at least 2 and has a lastObservedTime", with(newStyle(), func(e *corev1.Event) { e.Series = &corev1.EventSeries{Count: 1} }), eventsV1,
			[]string{"series.count: Invalid value: \"\": should be at least 2", "series.lastObservedTime: Required value"}},
		{"through events.k8s.io/v1 the name is a DNS subdomain", with(newStyle(), func(e *corev1.Event) { e.Name = "Not_A_Name" }), eventsV1,
			[]string{"metadata.name: Invalid value: \"Not_A_Name\""}},
		{"a new-style event about a cluster-scoped object sits in default or kube-system", with(newStyle(), func(e *corev1.Event) { e.InvolvedObject.Namespace = "" }), eventsV1,
			[]string{"involvedObject.namespace: Invalid value: \"\": does not match event.namespace"}},
		{"an old-style event sits in its object's namespace", with(oldStyle(), func(e *corev1.Event) { e.InvolvedObject.Namespace = "other" }), coreV1,
			[]string{"involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"}},
		{"an old-style event about a cluster-scoped object sits in default", with(oldStyle(), func(e *corev1.Event) { e.InvolvedObject.Namespace, e.Namespace = "", "default" }), coreV1, nil},
		{"an old-style event about a cluster-scoped object elsewhere is refused", with(oldStyle(), func(e *corev1.Event) { e.InvolvedObject.Namespace = "" }), coreV1,
			[]string{"involvedObject.namespace: Invalid value: \"\": does not match event.namespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertErrors(t, ValidateEventCreate(tc.event, tc.version), tc.want)
		})
	}
}

func TestValidateEventUpdate(t *testing.T) {
	eventsV1, coreV1 := eventsv1.SchemeGroupVersion, corev1.SchemeGroupVersion
	old := with(newStyle(), func(e *corev1.Event) { e.ResourceVersion = "1" })
	for _, tc := range []struct {
		name    string
		change  func(*corev1.Event)
		version schema.GroupVersion
		want    []string
	}{
		{"the series may change", func(e *corev1.Event) {
			e.Series = &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(time.Unix(1505828960, 0))}
		}, eventsV1, nil},
		{"a new series must be valid", func(e *corev1.Event) { e.Series = &corev1.EventSeries{Count: 1} }, eventsV1,
			[]string{"series.count: Invalid value: \"\": should be at least 2", "series.lastObservedTime: Required value"}},
		{"labels may change", func(e *corev1.Event) { e.Labels = map[string]string{"a": "b"} }, eventsV1, nil},
		{"through events.k8s.io/v1 the note is immutable", func(e *corev1.Event) { e.Message = "other" }, eventsV1,
			[]string{"message: Invalid value: \"other\": field is immutable"}},
		{"through core/v1 it is not", func(e *corev1.Event) { e.Message = "other" }, coreV1, nil},
		{"everything but the series is immutable", func(e *corev1.Event) {
			e.InvolvedObject.Name, e.Reason, e.Type, e.Action = "q", "Other", corev1.EventTypeWarning, "Undo"
			e.Related = &corev1.ObjectReference{Name: "r"}
			e.ReportingController, e.ReportingInstance = "example.com/other", "instance-2"
		}, eventsV1, []string{"involvedObject: Invalid value", "field is immutable", "reason: Invalid value: \"Other\": field is immutable",
			"type: Invalid value: \"Warning\": field is immutable", "action: Invalid value: \"Undo\": field is immutable", "related: Invalid value",
			"reportingController: Invalid value: \"example.com/other\": field is immutable", "reportingInstance: Invalid value: \"instance-2\": field is immutable"}},
		{"an eventTime changed below a microsecond is the same", func(e *corev1.Event) { e.EventTime = metav1.NewMicroTime(e.EventTime.Add(500 * time.Nanosecond)) }, eventsV1, nil},
		{"an eventTime changed by a second is not", func(e *corev1.Event) { e.EventTime = metav1.NewMicroTime(e.EventTime.Add(time.Second)) }, eventsV1,
			[]string{"eventTime: Invalid value", "field is immutable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertErrors(t, ValidateEventUpdate(with(old.DeepCopy(), tc.change), old, tc.version), tc.want)
		})
	}
}

// with returns e after change.
func with(e *corev1.Event, change func(*corev1.Event)) *corev1.Event {
	change(e)
	return e
}

// assertErrors checks that errs, joined, contain want's strings in order, and that errs
// is empty when want is.
func assertErrors(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	got := errs.ToAggregate()
	if len(want) == 0 {
		if got != nil {
			t.Errorf("want valid, got %v", got)
		}
		return
	}
	if got == nil {
		t.Fatalf("want %q, got valid", want)
	}
	rest := got.Error()
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("errors %q lack %q (in order)", got.Error(), w)
		}
		rest = rest[i+len(w):]
	}
}
