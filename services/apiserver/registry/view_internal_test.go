package registry

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// renameToConfigMap stands in for a conversion: it turns a pod into a ConfigMap of the
// same name, and fails on a pod named "bad".
func renameToConfigMap(obj runtime.Object) (runtime.Object, error) {
	pod := obj.(*corev1.Pod)
	if pod.Name == "bad" {
		return nil, apierrors.NewInternalError(errors.New("cannot convert"))
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, ResourceVersion: pod.ResourceVersion}}, nil
}

func receive(t *testing.T, w watch.Interface) (watch.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		return ev, ok
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return watch.Event{}, false
	}
}

func TestConvertingWatchConvertsEveryObject(t *testing.T) {
	in := watch.NewFake()
	w := newConvertingWatch(in, renameToConfigMap)
	defer w.Stop()
	go func() {
		in.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
		in.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}})
		in.Error(&metav1.Status{Code: 410, Reason: metav1.StatusReasonExpired})
	}()
	if ev, _ := receive(t, w); ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "a" {
		t.Errorf("added: %s %#v", ev.Type, ev.Object)
	}
	if ev, _ := receive(t, w); ev.Type != watch.Bookmark || ev.Object.(*corev1.ConfigMap).ResourceVersion != "7" {
		t.Errorf("bookmark: %s %#v", ev.Type, ev.Object)
	}
	if ev, _ := receive(t, w); ev.Type != watch.Error || ev.Object.(*metav1.Status).Code != 410 {
		t.Errorf("error passed on as it is: %s %#v", ev.Type, ev.Object)
	}
	if _, ok := receive(t, w); ok {
		t.Error("the watch goes on after an error")
	}
}

func TestConvertingWatchEndsOnAFailedConversion(t *testing.T) {
	in := watch.NewFake()
	w := newConvertingWatch(in, renameToConfigMap)
	go in.Modify(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad"}})
	if ev, _ := receive(t, w); ev.Type != watch.Error || ev.Object.(*metav1.Status).Code != 500 {
		t.Errorf("got %s %#v, want a 500 ERROR", ev.Type, ev.Object)
	}
	if _, ok := receive(t, w); ok {
		t.Error("the watch goes on after a failed conversion")
	}
	if !in.IsStopped() {
		t.Error("the watch beneath was not stopped")
	}
}

func TestConvertingWatchStopsWhileAWatcherLags(t *testing.T) {
	in := watch.NewFakeWithChanSize(2*convertingWatchBuffer, false)
	w := newConvertingWatch(in, renameToConfigMap)
	for range 2 * convertingWatchBuffer {
		in.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	}
	w.Stop() // nobody reads: the loop must not stay blocked on its full buffer
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				if !in.IsStopped() {
					t.Error("the watch beneath was not stopped")
				}
				return
			}
		case <-deadline:
			t.Fatal("the result channel was not closed after Stop")
		}
	}
}
