// Package config is where the kubelet learns which pods it should run: the
// API server's pods bound to this node, watched with a client-go informer
// (field selector spec.nodeName=<node>, all namespaces), and the static pods
// of a manifest directory (source "file"), turned into PodUpdates on one
// channel for the sync loop. Mirrors kubelet's pkg/kubelet/config
// (PodConfig, NewSourceApiserver, NewSourceFile) and the PodUpdate type of
// pkg/kubelet/types.
package config

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	kubetypes "skiff.dev/services/kubelet/types"
)

// PodOperation says what a PodUpdate means. Mirrors kubetypes.PodOperation.
type PodOperation int

// The operations, as in Kubernetes.
const (
	// ADD: pods seen for the first time.
	ADD PodOperation = iota
	// UPDATE: the spec, labels or annotations of known pods changed.
	UPDATE
	// DELETE: known pods got a deletionTimestamp (graceful deletion began).
	DELETE
	// REMOVE: pods are gone from the API server.
	REMOVE
	// RECONCILE: only the status of known pods changed in the API server.
	RECONCILE
)

// String returns the operation's name.
func (o PodOperation) String() string {
	switch o {
	case ADD:
		return "ADD"
	case UPDATE:
		return "UPDATE"
	case DELETE:
		return "DELETE"
	case REMOVE:
		return "REMOVE"
	case RECONCILE:
		return "RECONCILE"
	}
	return fmt.Sprintf("PodOperation(%d)", int(o))
}

// ApiserverSource is the name of the API server pod source.
const ApiserverSource = kubetypes.ApiserverSource

// PodUpdate is one change to the desired pods. The pods are the informer's
// objects: shared, never to be modified. Mirrors kubetypes.PodUpdate.
type PodUpdate struct {
	Pods   []*v1.Pod
	Op     PodOperation
	Source string
}

// updateChannelCapacity bounds the updates waiting for the sync loop
// (kubelet: 50); beyond it the informer waits.
const updateChannelCapacity = 50

// PodConfig watches the pods bound to one node and publishes their changes
// on Updates. Mirrors kubelet's PodConfig with its API server source.
type PodConfig struct {
	nodeName string
	logger   *slog.Logger
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	updates  chan PodUpdate
	file     *sourceFile

	mu   sync.Mutex
	done <-chan struct{}
}

// NewPodConfig returns a PodConfig over client for nodeName; logger nil
// means slog.Default(). Nothing is watched until Run.
func NewPodConfig(client kubernetes.Interface, nodeName string, logger *slog.Logger) *PodConfig {
	if logger == nil {
		logger = slog.Default()
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }),
		// The kubelet never reads managedFields: dropping them keeps each node's pod cache
		// smaller (a hundred hollow nodes hold a hundred of them).
		informers.WithTransform(func(obj any) (any, error) {
			if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
				accessor.SetManagedFields(nil)
			}
			return obj, nil
		}))
	c := &PodConfig{
		nodeName: nodeName,
		logger:   logger,
		factory:  factory,
		informer: factory.Core().V1().Pods().Informer(),
		updates:  make(chan PodUpdate, updateChannelCapacity),
	}
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onAdd,
		UpdateFunc: c.onUpdate,
		DeleteFunc: c.onDelete,
	})
	return c
}

// AddFileSource adds the static pod source: the manifests under path (a
// directory or one file), read at Run and every period after (0 means
// DefaultFileCheckFrequency). Call it before Run.
func (c *PodConfig) AddFileSource(path string, period time.Duration) {
	if period <= 0 {
		period = DefaultFileCheckFrequency
	}
	c.file = &sourceFile{
		path: path, nodeName: c.nodeName, period: period, logger: c.logger,
		send: c.send, pods: map[types.UID]*v1.Pod{}, seen: make(chan struct{}),
	}
}

// Updates returns the channel of pod changes (the sync loop's configCh).
func (c *PodConfig) Updates() <-chan PodUpdate { return c.updates }

// SeenAllSources reports whether every source delivered its initial pods;
// until then the kubelet must not clean up pods it does not know, since it
// may just not have heard of them yet.
func (c *PodConfig) SeenAllSources() bool {
	if c.file != nil {
		select {
		case <-c.file.seen:
		default:
			return false
		}
	}
	return c.informer.HasSynced()
}

// Run watches until ctx ends (retrying, with the informer's backoff, while
// the API server is unreachable), then stops the informer and returns.
func (c *PodConfig) Run(ctx context.Context) {
	c.mu.Lock()
	c.done = ctx.Done()
	c.mu.Unlock()
	c.factory.Start(ctx.Done())
	if c.file != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.file.run(ctx)
		}()
		defer func() { <-done }()
	}
	<-ctx.Done()
	c.factory.Shutdown()
}

func (c *PodConfig) send(u PodUpdate) {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	select {
	case c.updates <- u:
	case <-done:
	}
}

func (c *PodConfig) onAdd(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	c.send(PodUpdate{Pods: []*v1.Pod{pod}, Op: ADD, Source: ApiserverSource})
}

func (c *PodConfig) onUpdate(oldObj, newObj any) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if oldPod.UID != newPod.UID {
		// The name was reused by a new pod between two watch events.
		c.send(PodUpdate{Pods: []*v1.Pod{oldPod}, Op: REMOVE, Source: ApiserverSource})
		c.send(PodUpdate{Pods: []*v1.Pod{newPod}, Op: ADD, Source: ApiserverSource})
		return
	}
	op, changed := classifyUpdate(oldPod, newPod)
	if !changed {
		return
	}
	c.send(PodUpdate{Pods: []*v1.Pod{newPod}, Op: op, Source: ApiserverSource})
}

func (c *PodConfig) onDelete(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	c.send(PodUpdate{Pods: []*v1.Pod{pod}, Op: REMOVE, Source: ApiserverSource})
}

// classifyUpdate says what a change of a known pod means: DELETE when it
// (now) has a deletionTimestamp, UPDATE when its spec, labels, annotations or
// deletion fields changed, RECONCILE when only its status did; changed=false
// when nothing the kubelet cares about did (e.g. only resourceVersion).
// Mirrors podStorage's checkAndUpdatePod, which compares with reflect.DeepEqual
// (apimachinery's semantic equality, which also equates nil and empty, walked
// each pod several times slower; both pods come from the same decoder).
func classifyUpdate(oldPod, newPod *v1.Pod) (op PodOperation, changed bool) {
	if podsDifferSemantically(oldPod, newPod) {
		if newPod.DeletionTimestamp != nil {
			return DELETE, true
		}
		return UPDATE, true
	}
	if !reflect.DeepEqual(&oldPod.Status, &newPod.Status) {
		return RECONCILE, true
	}
	return 0, false
}

// podsDifferSemantically reports whether a and b differ in what makes a pod's change an
// UPDATE. Annotations and labels compare as maps, so nil equals empty. Mirrors kube's
// podsDifferSemantically (pkg/kubelet/config).
func podsDifferSemantically(a, b *v1.Pod) bool {
	return !reflect.DeepEqual(&a.Spec, &b.Spec) ||
		!maps.Equal(a.Labels, b.Labels) ||
		!maps.Equal(a.Annotations, b.Annotations) ||
		!reflect.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) ||
		!reflect.DeepEqual(a.DeletionGracePeriodSeconds, b.DeletionGracePeriodSeconds)
}
