package slicetracker

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func slice(name, rv string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
}

// TestStale: a write is stale until the informer shows its resourceVersion (or a later
// one), a delete until the informer no longer shows the slice; keys are independent.
func TestStale(t *testing.T) {
	tr := New()
	tr.Wrote("ns/a", slice("a-1", "10"))
	if !tr.Stale("ns/a", nil) {
		t.Error("a slice written but not yet seen is not stale")
	}
	if !tr.Stale("ns/a", []*discoveryv1.EndpointSlice{slice("a-1", "9")}) {
		t.Error("an older resourceVersion is not stale")
	}
	if tr.Stale("ns/b", nil) {
		t.Error("another key is stale")
	}
	if tr.Stale("ns/a", []*discoveryv1.EndpointSlice{slice("a-1", "11")}) {
		t.Error("a newer resourceVersion is stale")
	}
	if tr.Stale("ns/a", nil) {
		t.Error("a write seen once is remembered")
	}
	tr.Wrote("ns/a", slice("a-2", "12"))
	tr.Deleted("ns/a", "a-2")
	if !tr.Stale("ns/a", []*discoveryv1.EndpointSlice{slice("a-2", "12")}) {
		t.Error("a deleted slice still listed is not stale")
	}
	if tr.Stale("ns/a", nil) {
		t.Error("a deleted slice gone from the cache is stale")
	}
	tr.Wrote("ns/a", slice("a-3", "13"))
	tr.ObservedDelete("ns/a", "a-3")
	if tr.Stale("ns/a", nil) {
		t.Error("a write to a slice the informer saw deleted is stale")
	}
}
