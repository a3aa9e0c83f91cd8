package queue

import (
	"container/heap"

	"skiff.dev/services/scheduler/framework"
)

// podHeap is a keyed priority queue of pods: lookup, update and removal by
// key in O(log n). Mirrors kube-scheduler's internal/heap.
type podHeap struct {
	items []*heapItem
	index map[string]*heapItem
	less  framework.LessFunc
}

type heapItem struct {
	key   string
	pInfo *framework.QueuedPodInfo
	pos   int
}

func newPodHeap(less framework.LessFunc) *podHeap {
	return &podHeap{index: map[string]*heapItem{}, less: less}
}

// heap.Interface, over items.
func (h *podHeap) Len() int           { return len(h.items) }
func (h *podHeap) Less(i, j int) bool { return h.less(h.items[i].pInfo, h.items[j].pInfo) }
func (h *podHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].pos, h.items[j].pos = i, j
}
func (h *podHeap) Push(x any) {
	it := x.(*heapItem)
	it.pos = len(h.items)
	h.items = append(h.items, it)
}
func (h *podHeap) Pop() any {
	n := len(h.items)
	it := h.items[n-1]
	h.items[n-1] = nil
	h.items = h.items[:n-1]
	return it
}

// addOrUpdate inserts pInfo under key, or replaces and re-sorts the entry.
func (h *podHeap) addOrUpdate(key string, pInfo *framework.QueuedPodInfo) {
	if it, ok := h.index[key]; ok {
		it.pInfo = pInfo
		heap.Fix(h, it.pos)
		return
	}
	it := &heapItem{key: key, pInfo: pInfo}
	h.index[key] = it
	heap.Push(h, it)
}

func (h *podHeap) get(key string) (*framework.QueuedPodInfo, bool) {
	it, ok := h.index[key]
	if !ok {
		return nil, false
	}
	return it.pInfo, true
}

func (h *podHeap) delete(key string) bool {
	it, ok := h.index[key]
	if !ok {
		return false
	}
	heap.Remove(h, it.pos)
	delete(h.index, key)
	return true
}

// peek returns the first pod without removing it.
func (h *podHeap) peek() *framework.QueuedPodInfo {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0].pInfo
}

func (h *podHeap) pop() *framework.QueuedPodInfo {
	if len(h.items) == 0 {
		return nil
	}
	it := heap.Pop(h).(*heapItem)
	delete(h.index, it.key)
	return it.pInfo
}

func (h *podHeap) list() []*framework.QueuedPodInfo {
	out := make([]*framework.QueuedPodInfo, 0, len(h.items))
	for _, it := range h.items {
		out = append(out, it.pInfo)
	}
	return out
}
