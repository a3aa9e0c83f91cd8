package framework

import (
	"errors"
	"testing"
)

func TestFitErrorMessage(t *testing.T) {
	unschedulable := func(reasons ...string) *Status { return NewStatus(Unschedulable, reasons...) }
	tests := []struct {
		name       string
		numNodes   int
		statuses   NodeToStatusMap
		preFilter  string
		postFilter string
		want       string
	}{
		{
			name:     "one reason per node, counted and sorted",
			numNodes: 3,
			statuses: NodeToStatusMap{
				"n1": NewStatus(UnschedulableAndUnresolvable, "node(s) were unschedulable"),
				"n2": unschedulable("Insufficient cpu"),
				"n3": unschedulable("Insufficient cpu"),
			},
			want: "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.",
		},
		{
			name:     "a node with several reasons counts in each",
			numNodes: 2,
			statuses: NodeToStatusMap{
				"n1": unschedulable("Insufficient cpu", "Insufficient memory"),
				"n2": unschedulable("Insufficient memory"),
			},
			want: "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory.",
		},
		{
			name:     "reasons sort as strings, count first",
			numNodes: 4,
			statuses: NodeToStatusMap{
				"n1": NewStatus(UnschedulableAndUnresolvable, "node(s) had untolerated taint {dedicated: gpu}"),
				"n2": NewStatus(UnschedulableAndUnresolvable, "node(s) didn't match Pod's node affinity/selector"),
				"n3": NewStatus(UnschedulableAndUnresolvable, "node(s) didn't match Pod's node affinity/selector"),
				"n4": unschedulable("Too many pods"),
			},
			want: "0/4 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) didn't match Pod's node affinity/selector.",
		},
		{
			name:      "a PreFilter rejection replaces the histogram",
			numNodes:  2,
			statuses:  NodeToStatusMap{"n1": unschedulable("x"), "n2": unschedulable("x")},
			preFilter: "pod has unbound immediate PersistentVolumeClaims",
			want:      "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
		},
		{
			name:       "preemption's word follows a PreFilter rejection too",
			numNodes:   1,
			statuses:   NodeToStatusMap{"n1": unschedulable("x")},
			preFilter:  "pod has unbound immediate PersistentVolumeClaims",
			postFilter: "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
			want:       "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := &FitError{NumAllNodes: tt.numNodes, Diagnosis: Diagnosis{NodeToStatusMap: tt.statuses, PreFilterMsg: tt.preFilter, PostFilterMsg: tt.postFilter}}
			if got := err.Error(); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	var nilStatus *Status
	if !nilStatus.IsSuccess() || nilStatus.Code() != Success || nilStatus.AsError() != nil {
		t.Error("a nil status must be success")
	}
	s := NewStatus(Unschedulable, "a", "b")
	if !s.IsRejected() || s.Message() != "a, b" || s.AsError().Error() != "a, b" {
		t.Errorf("unexpected %v %q", s.Code(), s.Message())
	}
	boom := errors.New("boom")
	e := AsStatus(boom)
	if e.Code() != Error || e.IsRejected() || !errors.Is(e.AsError(), boom) {
		t.Errorf("AsStatus: %v %v", e.Code(), e.AsError())
	}
	fit := &FitError{NumAllNodes: 0, Diagnosis: Diagnosis{}}
	w := NewStatus(Unschedulable).WithError(fit)
	var target *FitError
	if !errors.As(w.AsError(), &target) || w.Message() != "0/0 nodes are available:" {
		t.Errorf("WithError: %q", w.Message())
	}
}

// TestNilStatusIsSuccess pins that every method is safe on the nil *Status
// that means Success, including the chaining setters.
func TestNilStatusIsSuccess(t *testing.T) {
	var s *Status
	if s.Code() != Success || !s.IsSuccess() || s.IsRejected() || s.AsError() != nil ||
		s.Message() != "" || s.Reasons() != nil || s.Plugin() != "" {
		t.Fatalf("nil Status is not Success: code=%v msg=%q plugin=%q", s.Code(), s.Message(), s.Plugin())
	}
	if got := s.WithPlugin("NodeResourcesFit"); got != nil {
		t.Errorf("nil.WithPlugin = %v, want nil (Success names no plugin)", got)
	}
	if got := s.WithError(nil); got != nil {
		t.Errorf("nil.WithError(nil) = %v, want nil (Success)", got)
	}
	boom := errors.New("boom")
	got := s.WithError(boom)
	if got.Code() != Error || !errors.Is(got.AsError(), boom) {
		t.Errorf("nil.WithError(boom) = %v %v, want code Error wrapping boom", got.Code(), got.AsError())
	}
	if p := got.WithPlugin("X").Plugin(); p != "X" {
		t.Errorf("WithPlugin after WithError on nil: plugin %q, want X", p)
	}
}
