package results

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/kubelet/container"
)

func TestManagerAnnouncesChangesOnly(t *testing.T) {
	m := NewManager()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	id := container.ContainerID{Type: "test", ID: "c1"}

	if _, ok := m.Get(id); ok {
		t.Fatal("Get of an unknown container found a result")
	}
	m.Set(id, Failure, pod)
	m.Set(id, Failure, pod) // unchanged: no second update
	m.Set(id, Success, pod)

	for _, want := range []Result{Failure, Success} {
		select {
		case u := <-m.Updates():
			if u.ContainerID != id || u.Result != want || u.PodUID != "u1" {
				t.Errorf("update %+v, want %v for %v", u, want, id)
			}
		default:
			t.Fatalf("no update for %v", want)
		}
	}
	select {
	case u := <-m.Updates():
		t.Errorf("unexpected update %+v", u)
	default:
	}
	if r, ok := m.Get(id); !ok || r != Success {
		t.Errorf("Get = %v, %v; want Success", r, ok)
	}
	m.Remove(id)
	if _, ok := m.Get(id); ok {
		t.Error("Get after Remove found a result")
	}
}
