package cacher

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
)

func rvs(events []*event) []uint64 {
	out := []uint64{}
	for _, e := range events {
		out = append(out, e.rv)
	}
	return out
}

func TestEventRing(t *testing.T) {
	r := newEventRing(3, 10)
	for rv := uint64(11); rv <= 15; rv++ {
		r.add(&event{rv: rv})
	}
	t.Run("keeps the last capacity events and covers every change after the last dropped", func(t *testing.T) {
		if got := rvs(r.events); !slices.Equal(got, []uint64{13, 14, 15}) || r.oldestRV != 12 {
			t.Errorf("ring %v oldest %d, want [13 14 15] oldest 12", got, r.oldestRV)
		}
	})
	t.Run("since returns the events after a revision it covers", func(t *testing.T) {
		for _, tc := range []struct {
			rv   uint64
			want []uint64
			ok   bool
		}{{12, []uint64{13, 14, 15}, true}, {14, []uint64{15}, true}, {15, []uint64{}, true}, {11, nil, false}} {
			got, ok := r.since(tc.rv)
			if ok != tc.ok || (ok && !slices.Equal(rvs(got), tc.want)) {
				t.Errorf("since(%d) = %v, %v; want %v, %v", tc.rv, rvs(got), ok, tc.want, tc.ok)
			}
		}
	})
	t.Run("a backfill extends it back until the next capacity events push it out", func(t *testing.T) {
		r.prepend([]*event{{rv: 9}, {rv: 12}}, 8)
		if got, ok := r.since(8); !ok || !slices.Equal(rvs(got), []uint64{9, 12, 13, 14, 15}) {
			t.Fatalf("since(8) after the backfill = %v, %v", rvs(got), ok)
		}
		r.add(&event{rv: 16})
		if got := rvs(r.events); !slices.Equal(got, []uint64{14, 15, 16}) || r.oldestRV != 13 {
			t.Errorf("ring %v oldest %d, want [14 15 16] oldest 13", got, r.oldestRV)
		}
	})
}

// TestEventRingReplayOutlivesTheRing: what since returned stays whole while the ring
// moves on; a watcher replays it without the cache's lock. A replay that shared the
// ring's array saw the dropped entries cleared (nil) and the apiserver crashed on them.
func TestEventRingReplayOutlivesTheRing(t *testing.T) {
	r := newEventRing(3, 0)
	for rv := uint64(1); rv <= 3; rv++ {
		r.add(&event{rv: rv})
	}
	replay, ok := r.since(0)
	if !ok || len(replay) != 3 {
		t.Fatalf("since(0) = %v, %v", rvs(replay), ok)
	}
	for rv := uint64(4); rv <= 9; rv++ {
		r.add(&event{rv: rv})
	}
	for i, e := range replay {
		if e == nil || e.rv != uint64(i+1) {
			t.Fatalf("replay[%d] = %v after the ring moved on; want the event at %d", i, e, i+1)
		}
	}
}

func TestObjectStoreListsInKeyOrderAndByIndex(t *testing.T) {
	e := func(key, node string) *entry {
		return &entry{key: key, fields: fields.Set{"spec.nodeName": node}}
	}
	s := newObjectStore([]string{"spec.nodeName"}, []*entry{e("/p/ns1/c", "n1"), e("/p/ns1/a", "n2")})
	s.put(e("/p/ns2/b", "n1"))
	s.put(e("/p/ns1/b", "n1"))
	s.put(e("/p/ns1/a", "n1")) // moves to n1
	s.remove("/p/ns1/c")
	keys := func(es []*entry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.key)
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		prefix string
		by     indexValue
		want   string
	}{
		{"/p/", indexValue{}, "[/p/ns1/a /p/ns1/b /p/ns2/b]"},
		{"/p/ns1/", indexValue{}, "[/p/ns1/a /p/ns1/b]"},
		{"/p/", indexValue{"spec.nodeName", "n1", true}, "[/p/ns1/a /p/ns1/b /p/ns2/b]"},
		{"/p/ns2/", indexValue{"spec.nodeName", "n1", true}, "[/p/ns2/b]"},
		{"/p/", indexValue{"spec.nodeName", "n2", true}, "[]"},
	} {
		if got := keys(s.list(tc.prefix, tc.by)); got != tc.want {
			t.Errorf("list(%s, %v) = %s, want %s", tc.prefix, tc.by, got, tc.want)
		}
	}
}

func TestTimeBudgetRefillsUpToItsMaximum(t *testing.T) {
	b := timeBudget{available: maxDispatchBudget, refilled: time.Now()}
	if got := b.take(); got < maxDispatchBudget || got > maxDispatchBudget {
		t.Errorf("first take %v, want %v", got, maxDispatchBudget)
	}
	b.giveBack(30 * time.Millisecond)
	b.refilled = b.refilled.Add(-time.Second) // a second passes
	if got := b.take(); got < 80*time.Millisecond || got > maxDispatchBudget {
		t.Errorf("after giving back 30 ms and one second's refill: %v, want 80 ms", got)
	}
	b.refilled = b.refilled.Add(-time.Hour)
	if got := b.take(); got != maxDispatchBudget {
		t.Errorf("after an hour: %v, want the maximum %v", got, maxDispatchBudget)
	}
}
