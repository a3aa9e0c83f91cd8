package container

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestGetNewerThanWaitsForAFresherRelist(t *testing.T) {
	c := NewCache()
	t0 := time.Now()
	got := make(chan *PodStatus, 1)
	go func() {
		s, _ := c.GetNewerThan(context.Background(), "u", t0)
		got <- s
	}()

	// An entry stamped before t0 does not satisfy the reader.
	c.Set("u", &PodStatus{ID: "u", Name: "old"}, nil, t0.Add(-time.Second))
	c.UpdateTime(t0.Add(-time.Second))
	select {
	case s := <-got:
		t.Fatalf("returned a stale status %+v", s)
	case <-time.After(50 * time.Millisecond):
	}

	c.Set("u", &PodStatus{ID: "u", Name: "new"}, nil, t0.Add(time.Second))
	select {
	case s := <-got:
		if s.Name != "new" {
			t.Errorf("got %+v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reader not woken by a newer entry")
	}
}

func TestGetNewerThanReturnsEmptyStatusForUnknownPodAfterRelist(t *testing.T) {
	c := NewCache()
	t0 := time.Now()
	c.UpdateTime(t0.Add(time.Millisecond))
	s, err := c.GetNewerThan(context.Background(), "unknown", t0)
	if err != nil || s == nil || s.ID != "unknown" || len(s.ContainerStatuses) != 0 {
		t.Errorf("GetNewerThan = %+v, %v", s, err)
	}
}

func TestGetNewerThanStopsWithItsContext(t *testing.T) {
	c := NewCache()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.GetNewerThan(ctx, "u", time.Now()); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// TestSetKeepsTheNewerStatus: a relist and an Evented PLEG inspection may finish in
// either order; the status read later wins.
func TestSetKeepsTheNewerStatus(t *testing.T) {
	c := NewCache()
	t0 := time.Now()
	c.Set("u", &PodStatus{ID: "u", Name: "newer"}, nil, t0)
	c.Set("u", &PodStatus{ID: "u", Name: "older"}, nil, t0.Add(-time.Millisecond))
	if s, _ := c.Get("u"); s.Name != "newer" {
		t.Errorf("after an older Set: %q, want the newer status kept", s.Name)
	}
	c.Set("u", &PodStatus{ID: "u", Name: "newest"}, nil, t0.Add(time.Millisecond))
	if s, _ := c.Get("u"); s.Name != "newest" {
		t.Errorf("after a newer Set: %q, want it stored", s.Name)
	}
}

// TestUpdateTimeDropsEmptyEntries: an empty status (the runtime had nothing of the pod)
// answers waiters until a relist vouches for every pod, then goes, so pods that came and
// went leave nothing behind; a pod with containers stays.
func TestUpdateTimeDropsEmptyEntries(t *testing.T) {
	c := NewCache()
	t0 := time.Now()
	c.Set("gone", &PodStatus{ID: "gone"}, nil, t0)
	c.Set("here", &PodStatus{ID: "here", ContainerStatuses: []*Status{{Name: "c"}}}, nil, t0)
	if s, err := c.GetNewerThan(context.Background(), "gone", t0.Add(-time.Second)); err != nil || s.ID != "gone" {
		t.Fatalf("GetNewerThan before any relist = %+v, %v; want the empty status", s, err)
	}
	c.UpdateTime(t0.Add(time.Second))
	c.mu.Lock()
	_, gone := c.pods["gone"]
	_, here := c.pods["here"]
	c.mu.Unlock()
	if gone || !here {
		t.Errorf("after a relist: empty entry kept %v, pod with containers kept %v; want false, true", gone, here)
	}
}
