package scheme

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// fullEventsV1Event sets every field of an events.k8s.io/v1 Event, so a round trip
// through core/v1 shows any field the conversion drops.
func fullEventsV1Event() *eventsv1.Event {
	t := time.Unix(1505828956, 0)
	return &eventsv1.Event{
		ObjectMeta:               metav1.ObjectMeta{Name: "e", Namespace: "ns", Labels: map[string]string{"a": "b"}, ResourceVersion: "7", UID: "u"},
		EventTime:                metav1.NewMicroTime(t),
		Series:                   &eventsv1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(t.Add(time.Second))},
		ReportingController:      "example.com/controller",
		ReportingInstance:        "controller-1",
		Action:                   "Do",
		Reason:                   "Test",
		Regarding:                corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p", UID: "pu", APIVersion: "v1", ResourceVersion: "3", FieldPath: "spec.containers{c}"},
		Related:                  &corev1.ObjectReference{Kind: "Node", Name: "n"},
		Note:                     "a note",
		Type:                     corev1.EventTypeWarning,
		DeprecatedSource:         corev1.EventSource{Component: "kubelet", Host: "n"},
		DeprecatedFirstTimestamp: metav1.NewTime(t.Add(-time.Minute)),
		DeprecatedLastTimestamp:  metav1.NewTime(t),
		DeprecatedCount:          5,
	}
}

// assertAllFieldsSet fails when a field of obj's struct is zero: a field k8s.io/api adds
// to either Event must get a value in the fixtures (and a place in the conversion).
func assertAllFieldsSet(t *testing.T, obj any) {
	t.Helper()
	v := reflect.ValueOf(obj).Elem()
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; name != "TypeMeta" && v.Field(i).IsZero() {
			t.Errorf("%T.%s is not set in the fixture", obj, name)
		}
	}
}

func TestEventsV1RoundTripsThroughCoreV1(t *testing.T) {
	in := fullEventsV1Event()
	assertAllFieldsSet(t, in)
	var core corev1.Event
	ConvertEventsV1ToEvent(in, &core)
	assertAllFieldsSet(t, &core)
	want := corev1.Event{
		ObjectMeta: in.ObjectMeta, InvolvedObject: in.Regarding, Reason: "Test", Message: "a note",
		Source: in.DeprecatedSource, FirstTimestamp: in.DeprecatedFirstTimestamp, LastTimestamp: in.DeprecatedLastTimestamp,
		Count: 5, Type: corev1.EventTypeWarning, EventTime: in.EventTime,
		Series: &corev1.EventSeries{Count: 3, LastObservedTime: in.Series.LastObservedTime},
		Action: "Do", Related: in.Related, ReportingController: "example.com/controller", ReportingInstance: "controller-1",
	}
	if !apiequality.Semantic.DeepEqual(&core, &want) {
		t.Errorf("core/v1 Event:\n got %+v\nwant %+v", core, want)
	}
	var back eventsv1.Event
	ConvertEventToEventsV1(&core, &back)
	if !apiequality.Semantic.DeepEqual(&back, in) {
		t.Errorf("round trip changed the event:\n got %+v\nwant %+v", back, *in)
	}
	core.Labels["a"], core.Related.Name, core.Series.Count = "changed", "changed", 99
	if in.Labels["a"] != "b" || in.Related.Name != "n" || in.Series.Count != 3 || back.Labels["a"] != "b" {
		t.Error("a converted event shares maps or pointers with its source")
	}
}

func TestSchemeConvertsEventsBothWays(t *testing.T) {
	in := fullEventsV1Event()
	var core corev1.Event
	if err := Scheme.Convert(in, &core, nil); err != nil {
		t.Fatal(err)
	}
	if core.Message != "a note" || core.InvolvedObject.Name != "p" {
		t.Fatalf("Convert to core/v1 = %+v", core)
	}
	var back eventsv1.Event
	if err := Scheme.Convert(&core, &back, nil); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(&back, in) {
		t.Fatalf("Convert back = %+v", back)
	}
}

func TestEventsV1FieldLabelsAreKubes(t *testing.T) {
	gvk := eventsv1.SchemeGroupVersion.WithKind("Event")
	for label, want := range map[string]string{
		"reportingController": "reportingComponent",
		"regarding.name":      "involvedObject.name",
		"regarding.kind":      "involvedObject.kind",
		"metadata.name":       "metadata.name",
		"type":                "type",
		"reason":              "reason",
	} {
		got, value, err := Scheme.ConvertFieldLabel(gvk, label, "x")
		if err != nil || got != want || value != "x" {
			t.Errorf("%s: got %q %q %v, want %q", label, got, value, err, want)
		}
	}
	// source and note are core/v1's or not selectable: events.k8s.io/v1 refuses them.
	for _, label := range []string{"source", "involvedObject.name", "note", "reportingComponent"} {
		if _, _, err := Scheme.ConvertFieldLabel(gvk, label, "x"); err == nil || err.Error() != "field label not supported: "+label {
			t.Errorf("%s: got %v, want field label not supported", label, err)
		}
	}
	sel, err := fields.ParseSelector("regarding.name=p,reportingController=c")
	if err != nil {
		t.Fatal(err)
	}
	converted, err := sel.Transform(func(l, v string) (string, string, error) { return Scheme.ConvertFieldLabel(gvk, l, v) })
	if err != nil || converted.String() != "involvedObject.name=p,reportingComponent=c" {
		t.Errorf("Transform: %v %v", converted, err)
	}
}
