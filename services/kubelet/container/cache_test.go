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
