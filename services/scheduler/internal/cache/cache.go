// Package cache holds the scheduler's cache: nodes and the pods on them
// with their requested resources, including pods this scheduler has assumed
// on a node but whose binding the informer has not confirmed yet. Mirrors
// kube-scheduler's pkg/scheduler/internal/cache.
package cache

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"skiff.dev/services/scheduler/framework"
)

// DefaultAssumedPodTTL is how long an assumed pod whose binding succeeded
// may wait for the assigned-pod informer to confirm it before the cache
// drops it. kube-scheduler today never expires (kubernetes/kubernetes#106361: expiring too
// early double-books nodes when the apiserver is slow). skiff keeps a long
// TTL instead because its field-selected informers cannot tell "bound" from
// "deleted" on the unassigned side: a pod bound and deleted between two
// relists would otherwise hold its resources forever.
const DefaultAssumedPodTTL = 15 * time.Minute

// DefaultCleanupPeriod is how often expired assumed pods are dropped.
const DefaultCleanupPeriod = 1 * time.Second

// Cache is the scheduler's cluster state. The informers write it (nodes,
// assigned pods), the scheduler writes assumptions, and each scheduling
// cycle reads a Snapshot. Mirrors kube-scheduler's internal/cache.Cache.
//
// A pod's life in the cache: AssumePod (scheduling cycle chose a node) →
// FinishBinding (bind call returned) → AddPod (informer saw it bound:
// confirmed) → UpdatePod… → RemovePod. ForgetPod undoes an assumption whose
// binding failed.
type Cache interface {
	// AssumePod adds pod (with spec.nodeName set to the chosen node) to its
	// node before binding, so the next cycle already counts its resources.
	AssumePod(pod *v1.Pod) error
	// FinishBinding starts the expiry clock of an assumed pod.
	FinishBinding(pod *v1.Pod) error
	// ForgetPod removes an assumed pod whose binding failed.
	ForgetPod(pod *v1.Pod) error
	// IsAssumedPod reports whether pod is assumed and not yet confirmed.
	IsAssumedPod(pod *v1.Pod) bool
	// AddPod adds a bound pod seen by the informer, confirming it if assumed.
	AddPod(pod *v1.Pod) error
	// UpdatePod replaces a bound pod.
	UpdatePod(oldPod, newPod *v1.Pod) error
	// RemovePod removes a pod that was deleted or finished.
	RemovePod(pod *v1.Pod) error
	// AddNode adds or replaces a node.
	AddNode(node *v1.Node)
	// UpdateNode replaces a node.
	UpdateNode(oldNode, newNode *v1.Node)
	// RemoveNode removes a node; its pods stay accounted until removed.
	RemoveNode(node *v1.Node) error
	// UpdateSnapshot brings snapshot up to date, copying only changed nodes.
	UpdateSnapshot(snapshot *Snapshot)
	// NodeCount and PodCount report sizes, for tests and debugging.
	NodeCount() int
	PodCount() int
	// Run drops expired assumed pods every cleanup period until stop closes.
	Run(stop <-chan struct{})
}

type podState struct {
	pod *v1.Pod
	// deadline is set by FinishBinding; the pod expires after it.
	deadline *time.Time
}

type cacheImpl struct {
	clock         clock.WithTicker
	logger        *slog.Logger
	ttl           time.Duration
	cleanupPeriod time.Duration

	mu          sync.RWMutex
	nodes       map[string]*framework.NodeInfo
	podStates   map[types.UID]*podState
	assumedPods map[types.UID]bool
	generation  int64
}

// Option configures the cache.
type Option func(*cacheImpl)

// WithClock sets the clock (tests use a fake one).
func WithClock(c clock.WithTicker) Option { return func(c2 *cacheImpl) { c2.clock = c } }

// WithAssumedPodTTL sets how long a bound, assumed pod waits for confirmation.
func WithAssumedPodTTL(d time.Duration) Option { return func(c *cacheImpl) { c.ttl = d } }

// WithCleanupPeriod sets how often expired assumed pods are dropped.
func WithCleanupPeriod(d time.Duration) Option { return func(c *cacheImpl) { c.cleanupPeriod = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *cacheImpl) { c.logger = l } }

// New returns an empty cache.
func New(opts ...Option) Cache {
	c := &cacheImpl{
		clock:         clock.RealClock{},
		logger:        slog.Default(),
		ttl:           DefaultAssumedPodTTL,
		cleanupPeriod: DefaultCleanupPeriod,
		nodes:         map[string]*framework.NodeInfo{},
		podStates:     map[types.UID]*podState{},
		assumedPods:   map[types.UID]bool{},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// nodeInfo returns the node's entry, creating it: a pod may be seen before
// its node.
func (c *cacheImpl) nodeInfo(name string) *framework.NodeInfo {
	n, ok := c.nodes[name]
	if !ok {
		n = framework.NewNodeInfo()
		c.nodes[name] = n
	}
	return n
}

func (c *cacheImpl) touch(n *framework.NodeInfo) {
	c.generation++
	n.Generation = c.generation
}

func (c *cacheImpl) addPod(pod *v1.Pod) {
	n := c.nodeInfo(pod.Spec.NodeName)
	n.AddPod(pod)
	c.touch(n)
}

func (c *cacheImpl) removePod(pod *v1.Pod) error {
	n, ok := c.nodes[pod.Spec.NodeName]
	if !ok {
		return fmt.Errorf("node %q of pod %s/%s not in cache", pod.Spec.NodeName, pod.Namespace, pod.Name)
	}
	if err := n.RemovePod(pod); err != nil {
		return err
	}
	c.touch(n)
	if len(n.Pods) == 0 && n.Node() == nil {
		delete(c.nodes, pod.Spec.NodeName)
	}
	return nil
}

func (c *cacheImpl) AssumePod(pod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.podStates[pod.UID]; ok {
		return fmt.Errorf("pod %s/%s (uid %s) is already in the cache, so can't be assumed", pod.Namespace, pod.Name, pod.UID)
	}
	c.addPod(pod)
	c.podStates[pod.UID] = &podState{pod: pod}
	c.assumedPods[pod.UID] = true
	return nil
}

func (c *cacheImpl) FinishBinding(pod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.podStates[pod.UID]
	if !ok || !c.assumedPods[pod.UID] {
		return nil // already confirmed or removed by the informer
	}
	deadline := c.clock.Now().Add(c.ttl)
	ps.deadline = &deadline
	return nil
}

func (c *cacheImpl) ForgetPod(pod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.podStates[pod.UID]
	if !ok {
		return fmt.Errorf("pod %s/%s (uid %s) is not in the cache, so can't be forgotten", pod.Namespace, pod.Name, pod.UID)
	}
	if !c.assumedPods[pod.UID] {
		return fmt.Errorf("pod %s/%s (uid %s) is confirmed, so can't be forgotten", pod.Namespace, pod.Name, pod.UID)
	}
	if ps.pod.Spec.NodeName != pod.Spec.NodeName {
		return fmt.Errorf("pod %s/%s was assumed on %q but forgotten on %q", pod.Namespace, pod.Name, ps.pod.Spec.NodeName, pod.Spec.NodeName)
	}
	if err := c.removePod(ps.pod); err != nil {
		return err
	}
	delete(c.podStates, pod.UID)
	delete(c.assumedPods, pod.UID)
	return nil
}

func (c *cacheImpl) IsAssumedPod(pod *v1.Pod) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.assumedPods[pod.UID]
}

func (c *cacheImpl) AddPod(pod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.podStates[pod.UID]
	switch {
	case ok && c.assumedPods[pod.UID]:
		// Confirmed. The informer's object is the truth: replace the
		// assumed copy, on whatever node the apiserver has it.
		if err := c.removePod(ps.pod); err != nil {
			return err
		}
		c.addPod(pod)
		delete(c.assumedPods, pod.UID)
		c.podStates[pod.UID] = &podState{pod: pod}
	case ok:
		// Already added: an informer relist replays adds. Treat as update.
		if err := c.removePod(ps.pod); err != nil {
			return err
		}
		c.addPod(pod)
		ps.pod = pod
	default:
		c.addPod(pod)
		c.podStates[pod.UID] = &podState{pod: pod}
	}
	return nil
}

func (c *cacheImpl) UpdatePod(oldPod, newPod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.podStates[oldPod.UID]
	if !ok {
		c.addPod(newPod)
		c.podStates[newPod.UID] = &podState{pod: newPod}
		return nil
	}
	if err := c.removePod(ps.pod); err != nil {
		return err
	}
	c.addPod(newPod)
	delete(c.assumedPods, newPod.UID)
	c.podStates[newPod.UID] = &podState{pod: newPod}
	return nil
}

func (c *cacheImpl) RemovePod(pod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.podStates[pod.UID]
	if !ok {
		return nil // never seen, or already expired
	}
	err := c.removePod(ps.pod)
	delete(c.podStates, pod.UID)
	delete(c.assumedPods, pod.UID)
	return err
}

func (c *cacheImpl) AddNode(node *v1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodeInfo(node.Name)
	n.SetNode(node)
	c.touch(n)
}

func (c *cacheImpl) UpdateNode(_, newNode *v1.Node) {
	c.AddNode(newNode)
}

func (c *cacheImpl) RemoveNode(node *v1.Node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[node.Name]
	if !ok {
		return fmt.Errorf("node %q is not in the cache", node.Name)
	}
	if len(n.Pods) == 0 {
		delete(c.nodes, node.Name)
		return nil
	}
	n.RemoveNode()
	c.touch(n)
	return nil
}

func (c *cacheImpl) NodeCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	count := 0
	for _, n := range c.nodes {
		if n.Node() != nil {
			count++
		}
	}
	return count
}

func (c *cacheImpl) PodCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.podStates)
}

func (c *cacheImpl) Run(stop <-chan struct{}) {
	t := c.clock.NewTicker(c.cleanupPeriod)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
			c.cleanupAssumedPods(c.clock.Now())
		}
	}
}

// cleanupAssumedPods drops assumed pods whose binding finished before
// now - ttl and that the informer never confirmed.
func (c *cacheImpl) cleanupAssumedPods(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.assumedPods {
		ps := c.podStates[uid]
		if ps.deadline == nil || now.Before(*ps.deadline) {
			continue
		}
		c.logger.Warn("assumed pod expired without its binding being observed", "pod", ps.pod.Namespace+"/"+ps.pod.Name, "node", ps.pod.Spec.NodeName)
		if err := c.removePod(ps.pod); err != nil {
			c.logger.Error("removing expired assumed pod", "err", err)
		}
		delete(c.podStates, uid)
		delete(c.assumedPods, uid)
	}
}

// Snapshot is an immutable copy of the cache's nodes for one scheduling
// cycle, so filters see a consistent cluster while informers keep writing.
// Only nodes whose Node object is known are listed, sorted by name. Mirrors
// kube-scheduler's internal/cache.Snapshot.
type Snapshot struct {
	nodeInfoMap  map[string]*framework.NodeInfo
	nodeInfoList []*framework.NodeInfo
}

// NewEmptySnapshot returns a snapshot with no nodes.
func NewEmptySnapshot() *Snapshot {
	return &Snapshot{nodeInfoMap: map[string]*framework.NodeInfo{}}
}

// List returns the nodes, sorted by name.
func (s *Snapshot) List() []*framework.NodeInfo { return s.nodeInfoList }

// NumNodes returns the number of nodes.
func (s *Snapshot) NumNodes() int { return len(s.nodeInfoList) }

// Get returns the named node, or nil.
func (s *Snapshot) Get(name string) *framework.NodeInfo { return s.nodeInfoMap[name] }

func (c *cacheImpl) UpdateSnapshot(s *Snapshot) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m := make(map[string]*framework.NodeInfo, len(c.nodes))
	list := make([]*framework.NodeInfo, 0, len(c.nodes))
	for name, n := range c.nodes {
		if n.Node() == nil {
			continue
		}
		if old, ok := s.nodeInfoMap[name]; ok && old.Generation == n.Generation {
			m[name] = old
		} else {
			m[name] = n.Clone()
		}
		list = append(list, m[name])
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Node().Name < list[j].Node().Name })
	s.nodeInfoMap = m
	s.nodeInfoList = list
}
