// Package nodelease keeps the node's heartbeat Lease
// (coordination.k8s.io/v1, kube-node-lease/<node>) renewed, which is how the
// control plane tells a live node from a dead one. Mirrors kubelet's
// pkg/kubelet/nodelease and the lease controller of
// k8s.io/component-helpers/apimachinery/lease.
package nodelease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordclientset "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

const (
	// NamespaceNodeLease is where node leases live.
	NamespaceNodeLease = "kube-node-lease"
	// maxUpdateRetries bounds the update attempts of one renewal.
	maxUpdateRetries = 5
	// maxBackoff caps the wait between attempts to create the lease.
	maxBackoff = 7 * time.Second
	// renewJitter spreads renewals of many nodes (lease controller: 0.04).
	renewJitter = 0.04
)

// errNodeNotRegistered delays the lease's creation until its owner exists.
var errNodeNotRegistered = errors.New("node is not registered yet")

// Controller renews the node's Lease every renewInterval. Mirrors the lease
// controller.
type Controller struct {
	client               kubernetes.Interface
	leaseClient          coordclientset.LeaseInterface
	holderIdentity       string
	leaseName            string
	leaseDurationSeconds int32
	renewInterval        time.Duration
	logger               *slog.Logger
	// clock stamps renewTime (kube's lease controller takes one too); tests move a fake.
	clock clock.Clock

	// latestLease is the last lease written; renewing from it saves a GET.
	latestLease *coordinationv1.Lease
}

// NewController returns a controller for nodeName's lease with the given
// duration (seconds in the Lease, e.g. 40 s), renewed every renewInterval
// (e.g. 10 s: a quarter of the duration). logger nil means slog.Default().
func NewController(client kubernetes.Interface, nodeName string, leaseDuration, renewInterval time.Duration, logger *slog.Logger) *Controller {
	if logger == nil {
		logger = slog.Default()
	}
	return &Controller{
		client:               client,
		leaseClient:          client.CoordinationV1().Leases(NamespaceNodeLease),
		holderIdentity:       nodeName,
		leaseName:            nodeName,
		leaseDurationSeconds: int32(leaseDuration / time.Second),
		renewInterval:        renewInterval,
		logger:               logger,
		clock:                clock.RealClock{},
	}
}

// Run renews the lease until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	for {
		c.sync(ctx)
		d := c.renewInterval + time.Duration(rand.Float64()*renewJitter*float64(c.renewInterval))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// sync renews the lease, creating it first if needed.
func (c *Controller) sync(ctx context.Context) {
	if c.latestLease != nil {
		// Only this kubelet writes its lease, so the last written copy is
		// almost always current.
		if err := c.retryUpdateLease(ctx, c.latestLease); err == nil {
			return
		} else if ctx.Err() == nil {
			c.logger.Info("failed to update lease using latest lease, falling back to ensure lease", "err", err)
		}
	}
	lease, created := c.backoffEnsureLease(ctx)
	c.latestLease = lease
	if !created && lease != nil {
		if err := c.retryUpdateLease(ctx, lease); err != nil && ctx.Err() == nil {
			c.logger.Error("failed to update lease, will retry", "err", err, "interval", c.renewInterval)
		}
	}
}

// backoffEnsureLease gets or creates the lease, retrying with backoff
// (doubling from 200 ms to 7 s) until it succeeds or ctx ends.
func (c *Controller) backoffEnsureLease(ctx context.Context) (*coordinationv1.Lease, bool) {
	sleep := 100 * time.Millisecond
	for {
		lease, created, err := c.ensureLease(ctx)
		if err == nil {
			return lease, created
		}
		sleep = min(2*sleep, maxBackoff)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errNodeNotRegistered):
			c.logger.Info("waiting for the node to be registered before creating its lease", "interval", sleep)
		default:
			c.logger.Error("failed to ensure lease exists, will retry", "err", err, "interval", sleep)
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(sleep):
		}
	}
}

func (c *Controller) ensureLease(ctx context.Context) (*coordinationv1.Lease, bool, error) {
	lease, err := c.leaseClient.Get(ctx, c.leaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err := c.newLease(ctx, nil)
		if err != nil {
			return nil, false, err
		}
		lease, err = c.leaseClient.Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			return nil, false, err
		}
		return lease, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return lease, false, nil
}

// retryUpdateLease writes a renewed copy of base, refetching on conflict.
func (c *Controller) retryUpdateLease(ctx context.Context, base *coordinationv1.Lease) error {
	for range maxUpdateRetries {
		lease, _ := c.newLease(ctx, base)
		updated, err := c.leaseClient.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil {
			c.latestLease = updated
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if apierrors.IsConflict(err) {
			base, _ = c.backoffEnsureLease(ctx)
			if base == nil {
				return ctx.Err()
			}
			continue
		}
		c.logger.Error("failed to update lease", "err", err)
	}
	return fmt.Errorf("failed %d attempts to update lease", maxUpdateRetries)
}

// newLease returns base (or a new lease) with holder, duration and a fresh
// renewTime, owned by the Node object. A new lease waits for the Node to
// exist (error), so that the lease is garbage-collected with it; a renewal
// proceeds without the owner if the Node cannot be read.
func (c *Controller) newLease(ctx context.Context, base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	var lease *coordinationv1.Lease
	if base == nil {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: c.leaseName, Namespace: NamespaceNodeLease},
		}
	} else {
		lease = base.DeepCopy()
	}
	lease.Spec.HolderIdentity = ptr.To(c.holderIdentity)
	lease.Spec.LeaseDurationSeconds = ptr.To(c.leaseDurationSeconds)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: c.clock.Now()}
	if len(lease.OwnerReferences) == 0 {
		node, err := c.client.CoreV1().Nodes().Get(ctx, c.holderIdentity, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return lease, errNodeNotRegistered
		}
		if err != nil {
			return lease, fmt.Errorf("get node %s for lease owner: %w", c.holderIdentity, err)
		}
		lease.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1.SchemeGroupVersion.String(),
			Kind:       "Node",
			Name:       node.Name,
			UID:        node.UID,
		}}
	}
	return lease, nil
}
