// Package nodeipam is kube's node IPAM controller with its range allocator: each node
// gets spec.podCIDRs, one subnet of --node-cidr-mask-size bits per --cluster-cidr, never
// given to two nodes; the allocations are rebuilt from the nodes at start and released
// when a node is deleted. Mirrors k8s.io/kubernetes/pkg/controller/nodeipam.
package nodeipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// cidrUpdateWorkers is kube's cidrUpdateWorkers.
const cidrUpdateWorkers = 30

// Controller is the node IPAM controller with the range allocator.
type Controller struct {
	client      kubernetes.Interface
	recorder    record.EventRecorder
	log         *slog.Logger
	nodeLister  corelisters.NodeLister
	nodesSynced cache.InformerSynced
	// cidrSets holds one CidrSet per cluster CIDR, in --cluster-cidr order.
	cidrSets []*CidrSet
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller: clusterCIDRs (one per IP family) are cut into subnets of
// maskSizes[i] bits. Errors: no cluster CIDR, a bad mask size.
func New(nodeInformer coreinformers.NodeInformer, client kubernetes.Interface, recorder record.EventRecorder,
	clusterCIDRs []*net.IPNet, maskSizes []int) (*Controller, error) {
	if len(clusterCIDRs) == 0 || len(clusterCIDRs) != len(maskSizes) {
		return nil, errors.New("nodeipam: one node CIDR mask size per cluster CIDR is required")
	}
	c := &Controller{
		client: client, recorder: recorder,
		log:         slog.Default().With("controller", "node-ipam-controller"),
		nodeLister:  nodeInformer.Lister(),
		nodesSynced: nodeInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_ipam_controller"}),
	}
	for i, cidr := range clusterCIDRs {
		set, err := NewCIDRSet(cidr, maskSizes[i])
		if err != nil {
			return nil, fmt.Errorf("nodeipam: %w", err)
		}
		c.cidrSets = append(c.cidrSets, set)
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueue(obj) },
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				c.releaseCIDRs(node.Spec.PodCIDRs)
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	if node, ok := obj.(*v1.Node); ok && len(node.Spec.PodCIDRs) == 0 {
		c.queue.Add(node.Name)
	}
}

// Run waits for the node cache, marks every existing node's CIDRs taken, then allocates
// for nodes without one until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.log.Info("starting")
	defer c.log.Info("stopped")
	if !cache.WaitForNamedCacheSync("node-ipam-controller", ctx.Done(), c.nodesSynced) {
		return
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		c.log.Error("listing nodes", "err", err)
		return
	}
	for _, node := range nodes {
		if err := c.occupyCIDRs(node); err != nil {
			c.log.Error("node holds a CIDR outside the cluster CIDR", "node", node.Name, "err", err)
		}
	}
	for range cidrUpdateWorkers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for {
		name, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.allocateOrOccupyCIDR(ctx, name); err != nil {
			c.log.Error("allocating node CIDR", "node", name, "err", err)
			c.queue.AddRateLimited(name)
		} else {
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

// allocateOrOccupyCIDR gives node name one free CIDR per cluster CIDR, or marks its
// existing ones taken (kube's AllocateOrOccupyCIDR and updateCIDRsAllocation).
func (c *Controller) allocateOrOccupyCIDR(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if len(node.Spec.PodCIDRs) > 0 {
		return c.occupyCIDRs(node)
	}
	allocated := make([]*net.IPNet, 0, len(c.cidrSets))
	for _, set := range c.cidrSets {
		cidr, err := set.AllocateNext()
		if err != nil {
			c.releaseNets(allocated)
			c.recorder.Eventf(&v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
				v1.EventTypeNormal, "CIDRNotAvailable", "Node %s status is now: CIDRNotAvailable", node.Name)
			return fmt.Errorf("allocate a CIDR for node %s: %w", node.Name, err)
		}
		allocated = append(allocated, cidr)
	}
	cidrs := make([]string, len(allocated))
	for i, n := range allocated {
		cidrs[i] = n.String()
	}
	// A strategic merge patch, as kube's PatchNodeCIDRs: it needs no
	// resourceVersion, so the kubelet's status writes never make it conflict.
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": cidrs[0], "podCIDRs": cidrs}})
	if err != nil {
		c.releaseNets(allocated)
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsInvalid(err):
		// The node got CIDRs meanwhile (an earlier pass, seen after this one read
		// its stale copy, or an admin) and they never change: keep them.
		c.releaseNets(allocated)
		current, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if len(current.Spec.PodCIDRs) == 0 {
			return fmt.Errorf("set podCIDRs %v on node %s: refused, and the node has none", cidrs, name)
		}
		return c.occupyCIDRs(current)
	case apierrors.IsNotFound(err):
		c.releaseNets(allocated)
		return nil
	case err != nil:
		c.releaseNets(allocated)
		c.recorder.Eventf(&v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
			v1.EventTypeWarning, "CIDRAssignmentFailed", "Node %s: podCIDRs %v not set: %v", node.Name, cidrs, err)
		return fmt.Errorf("set podCIDRs %v on node %s: %w", cidrs, name, err)
	}
	c.log.Info("allocated node CIDRs", "node", name, "podCIDRs", cidrs)
	return nil
}

// occupyCIDRs marks node's podCIDRs taken in the set of their IP family.
func (c *Controller) occupyCIDRs(node *v1.Node) error {
	var errs []error
	for _, s := range node.Spec.PodCIDRs {
		_, cidr, err := net.ParseCIDR(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, set := range c.cidrSets {
			if set.Contains(cidr) {
				errs = append(errs, set.Occupy(cidr))
			}
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) releaseCIDRs(podCIDRs []string) {
	for _, s := range podCIDRs {
		if _, cidr, err := net.ParseCIDR(s); err == nil {
			c.releaseNets([]*net.IPNet{cidr})
		}
	}
}

func (c *Controller) releaseNets(cidrs []*net.IPNet) {
	for _, cidr := range cidrs {
		for _, set := range c.cidrSets {
			if set.Contains(cidr) {
				_ = set.Release(cidr)
			}
		}
	}
}
