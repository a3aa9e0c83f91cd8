package event

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coreevent "skiff.dev/services/apiserver/registry/core/event"
)

// recorded is an event as client-go's core/v1 recorder writes it: valid through core/v1,
// not through events.k8s.io/v1 (no eventTime, deprecated fields set).
func recorded() *corev1.Event {
	t := metav1.NewTime(time.Unix(1505828956, 0))
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "web", Namespace: "default"},
		Reason:         "Started", Message: "Started container web", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet", Host: "n1"}, Count: 1, FirstTimestamp: t, LastTimestamp: t,
	}
}

func TestStrategyJudgesAsEventsV1(t *testing.T) {
	ctx := context.Background()
	if errs := (coreevent.Strategy{}).Validate(ctx, recorded()); len(errs) != 0 {
		t.Fatalf("core/v1 refuses a recorded event: %v", errs.ToAggregate())
	}
	errs := Strategy{}.Validate(ctx, recorded())
	for _, want := range []string{"eventTime: Required value", "firstTimestamp", "count", "source"} {
		if !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("events.k8s.io/v1 errors %v lack %q", errs.ToAggregate(), want)
		}
	}
	old := recorded()
	old.ResourceVersion = "1"
	changed := old.DeepCopy()
	changed.Message = "other"
	if errs := (coreevent.Strategy{}).ValidateUpdate(ctx, changed, old); len(errs) != 0 {
		t.Errorf("core/v1 refuses a changed message: %v", errs.ToAggregate())
	}
	if errs := (Strategy{}).ValidateUpdate(ctx, changed, old); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "message: Invalid value: \"other\": field is immutable") {
		t.Errorf("events.k8s.io/v1 update of the message: %v", errs.ToAggregate())
	}
}

func TestDescriptorIsAViewOfCoreEvents(t *testing.T) {
	if Descriptor.StorageOf != corev1.Resource("events") || Descriptor.GroupVersion.String() != "events.k8s.io/v1" || !Descriptor.Namespaced() {
		t.Errorf("descriptor %+v", Descriptor)
	}
}
