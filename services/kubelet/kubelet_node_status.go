package kubelet

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"skiff.dev/services/kubelet/events"
)

// maxRegisterBackoff caps the wait between registration attempts.
const maxRegisterBackoff = 7 * time.Second

// syncNodeStatusLoop registers the node (retrying while the API server is
// unreachable), then writes its status every NodeStatusUpdateFrequency and
// whenever readiness changes, until ctx ends.
func (kl *Kubelet) syncNodeStatusLoop(ctx context.Context) {
	t := time.NewTicker(kl.nodeStatusUpdateFrequency)
	defer t.Stop()
	for {
		if !kl.registerWithAPIServer(ctx) {
			return
		}
		for kl.syncNodeStatus(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-kl.nodeStatusUpdateCh:
			}
		}
	}
}

// registerWithAPIServer creates the Node, or adopts an existing one, retrying
// with backoff (200 ms doubling to 7 s) until it succeeds; false means ctx
// ended first. Mirrors Kubelet.registerWithAPIServer.
func (kl *Kubelet) registerWithAPIServer(ctx context.Context) bool {
	step := 100 * time.Millisecond
	for {
		if kl.tryRegisterWithAPIServer(ctx, kl.initialNode(ctx)) {
			kl.logger.Info("successfully registered node")
			return true
		}
		step = min(2*step, maxRegisterBackoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(step):
		}
	}
}

// initialNode is the Node the kubelet registers: name, labels and a full
// status. Mirrors Kubelet.initialNode.
func (kl *Kubelet) initialNode(ctx context.Context) *v1.Node {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: kl.nodeName, Labels: kl.nodeDefaultLabels()},
	}
	kl.setNodeStatus(ctx, node)
	return node
}

// nodeDefaultLabels are the labels the kubelet owns on its Node: the extra
// NodeLabels, then hostname, os and arch (which win).
func (kl *Kubelet) nodeDefaultLabels() map[string]string {
	labels := maps.Clone(kl.nodeLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1.LabelHostname] = kl.nodeName
	labels[v1.LabelOSStable] = runtime.GOOS
	labels[v1.LabelArchStable] = runtime.GOARCH
	labels["beta.kubernetes.io/os"] = runtime.GOOS
	labels["beta.kubernetes.io/arch"] = runtime.GOARCH
	return labels
}

// tryRegisterWithAPIServer creates node; if it exists, it makes sure the
// kubelet's labels are on it. Mirrors Kubelet.tryRegisterWithAPIServer.
func (kl *Kubelet) tryRegisterWithAPIServer(ctx context.Context, node *v1.Node) bool {
	nodes := kl.kubeClient.CoreV1().Nodes()
	_, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		kl.recordNodeEvent(v1.EventTypeNormal, events.RegisteredNode, "Node %s event: Registered Node %s in Controller", kl.nodeName, kl.nodeName)
		kl.recordNodeReadyTransition(nil, node)
		return true
	}
	if !apierrors.IsAlreadyExists(err) {
		if ctx.Err() == nil {
			kl.logger.Error("unable to register node with API server", "err", err)
		}
		return false
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := nodes.Get(ctx, kl.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		updated := existing.DeepCopy()
		if updated.Labels == nil {
			updated.Labels = map[string]string{}
		}
		maps.Copy(updated.Labels, node.Labels)
		if maps.Equal(updated.Labels, existing.Labels) {
			return nil
		}
		_, err = nodes.Update(ctx, updated, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			kl.logger.Error("unable to reconcile existing node", "err", err)
		}
		return false
	}
	return true
}

// setNodeStatus runs every status setter on node; a failing setter is
// logged and the others still run.
func (kl *Kubelet) setNodeStatus(ctx context.Context, node *v1.Node) {
	for i, f := range kl.setNodeStatusFuncs {
		if err := f(ctx, node); err != nil && ctx.Err() == nil {
			kl.logger.Debug("failed to set some node status fields", "setter", i, "err", err)
		}
	}
}

// syncNodeStatus writes the node's status (UpdateStatus on
// nodes/NAME/status, retried on conflict). It returns false when the Node
// no longer exists, so that the kubelet registers it again. Mirrors
// Kubelet.updateNodeStatus.
func (kl *Kubelet) syncNodeStatus(ctx context.Context) bool {
	nodes := kl.kubeClient.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, kl.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kl.updatePodCIDR(ctx, node)
		updated := node.DeepCopy()
		kl.setNodeStatus(ctx, updated)
		if _, err = nodes.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err == nil {
			kl.recordNodeReadyTransition(node, updated)
		}
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		kl.logger.Info("node object is gone, registering again")
		return false
	case err != nil:
		if ctx.Err() == nil {
			kl.logger.Error("unable to update node status", "err", fmt.Errorf("update node %s status: %w", kl.nodeName, err))
		}
	}
	return true
}

// recordNodeEvent records an event about the kubelet's Node, referenced as kubelet does
// (the node name doubles as its UID).
func (kl *Kubelet) recordNodeEvent(eventType, reason, messageFmt string, args ...any) {
	ref := &v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: kl.nodeName, UID: types.UID(kl.nodeName)}
	kl.recorder.Eventf(ref, eventType, reason, messageFmt, args...)
}

// recordNodeReadyTransition records NodeReady or NodeNotReady when the Ready condition
// changed between old (nil: the node was just registered) and updated. Mirrors the
// event kubelet's ReadyCondition setter records.
func (kl *Kubelet) recordNodeReadyTransition(old, updated *v1.Node) {
	ready := func(n *v1.Node) v1.ConditionStatus {
		if n == nil {
			return v1.ConditionUnknown
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status
			}
		}
		return v1.ConditionUnknown
	}
	was, now := ready(old), ready(updated)
	switch {
	case was == now:
	case now == v1.ConditionTrue:
		kl.recordNodeEvent(v1.EventTypeNormal, events.NodeReady, "Node %s status is now: %s", kl.nodeName, events.NodeReady)
	case was == v1.ConditionTrue:
		kl.recordNodeEvent(v1.EventTypeNormal, events.NodeNotReady, "Node %s status is now: %s", kl.nodeName, events.NodeNotReady)
	}
}

// updatePodCIDR hands the node's pod range to the runtime when it changed:
// spec.podCIDRs (joined by commas, as kubelet does), else spec.podCIDR, else
// Config.PodCIDR. With none it logs, once, that pods wait for one (the
// runtime's network stays not ready). Mirrors Kubelet.updatePodCIDR.
func (kl *Kubelet) updatePodCIDR(ctx context.Context, node *v1.Node) {
	cidr := strings.Join(node.Spec.PodCIDRs, ",")
	if cidr == "" {
		cidr = node.Spec.PodCIDR
	}
	if cidr == "" {
		cidr = kl.podCIDRFallback
	}
	kl.podCIDRMu.Lock()
	defer kl.podCIDRMu.Unlock()
	if cidr == kl.podCIDR {
		return
	}
	if cidr == "" {
		kl.logger.Info("waiting for the node's spec.podCIDR (set by the controller-manager's node IPAM, or give the kubelet --pod-cidr)")
		kl.podCIDR = cidr
		return
	}
	if err := kl.containerRuntime.UpdatePodCIDR(ctx, cidr); err != nil {
		if ctx.Err() == nil {
			kl.logger.Error("failed to hand the pod CIDR to the runtime", "podCIDR", cidr, "err", err)
		}
		return
	}
	kl.logger.Info("updated the runtime's pod CIDR", "podCIDR", cidr)
	kl.podCIDR = cidr
}
