package nodelifecycle

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestRateLimitedTimedQueue(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	q := NewRateLimitedTimedQueue(1, clk)
	for _, n := range []string{"a", "b", "c"} {
		q.Add(n, "")
	}
	if q.Add("a", "") {
		t.Error("Add of a queued node = true, want false")
	}
	var processed []string
	process := func(v TimedValue) (bool, time.Duration) {
		processed = append(processed, v.Value)
		return v.Value != "b", 5 * time.Second // b fails and retries in 5 s
	}
	q.Try(process)
	if len(processed) != 1 {
		t.Fatalf("processed at once = %v, want one node (burst 1)", processed)
	}
	clk.Step(time.Second)
	q.Try(process)
	clk.Step(time.Second)
	q.Try(process)
	if want := []string{"a", "b", "c"}; len(processed) != 3 || processed[1] != "b" || processed[2] != "c" {
		t.Fatalf("processed after 2 s = %v, want %v", processed, want)
	}
	clk.Step(5 * time.Second)
	q.Try(process)
	if len(processed) != 4 || processed[3] != "b" {
		t.Fatalf("processed after the retry delay = %v, want b retried", processed)
	}
	if q.Add("a", "") {
		t.Error("a processed node was queued again before Remove")
	}
	q.Remove("a")
	if !q.Add("a", "") {
		t.Error("Add after Remove = false, want true")
	}

	q.SwapLimiter(0)
	clk.Step(time.Hour)
	before := len(processed)
	q.Try(process)
	if len(processed) != before {
		t.Errorf("processed at rate 0: %v", processed[before:])
	}
	q.SwapLimiter(1)
	clk.Step(time.Second)
	q.Try(process)
	if len(processed) == before {
		t.Error("nothing processed after the rate came back")
	}
}
