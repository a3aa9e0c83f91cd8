package eventrecorder

import (
	"container/list"
	"sync"
)

// correlator remembers the events a POSTing recorder created, by AggregateKey, so a
// repeat updates the first one instead of creating another. It keeps the most recent
// size keys, like client-go's EventCorrelator LRU cache.
type correlator struct {
	mu    sync.Mutex
	size  int
	order *list.List // of *posted, most recent first
	byKey map[string]*list.Element
}

type posted struct {
	key   string
	name  string
	count int32
}

func newCorrelator(size int) *correlator {
	return &correlator{size: size, order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *correlator) get(key string) (posted, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return posted{}, false
	}
	c.order.MoveToFront(e)
	return *e.Value.(*posted), true
}

func (c *correlator) add(key, name string, count int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		p := e.Value.(*posted)
		p.name, p.count = name, count
		c.order.MoveToFront(e)
		return
	}
	c.byKey[key] = c.order.PushFront(&posted{key: key, name: name, count: count})
	if c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*posted).key)
	}
}
