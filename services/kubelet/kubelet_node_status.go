package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
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

// nodeStatusUpdateRetry is how many times syncNodeStatus tries to write the status
// before giving up until the next tick (kubelet's nodeStatusUpdateRetry).
const nodeStatusUpdateRetry = 5

// syncNodeStatus writes the node's status, trying up to nodeStatusUpdateRetry times. It
// returns false when the Node no longer exists, so that the kubelet registers it again.
// Mirrors Kubelet.updateNodeStatus.
func (kl *Kubelet) syncNodeStatus(ctx context.Context) bool {
	var err error
	for try := range nodeStatusUpdateRetry {
		if err = kl.tryUpdateNodeStatus(ctx, try); err == nil || apierrors.IsNotFound(err) || ctx.Err() != nil {
			break
		}
	}
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

// tryUpdateNodeStatus reads the Node (the first try from the apiserver's cache,
// resourceVersion "0", as kubelet does), runs the status setters and PATCHes the
// difference onto nodes/NAME/status. A strategic merge patch carries no resourceVersion,
// so it does not conflict with the controllers' writes to the Node (node IPAM's podCIDR,
// taints) the way an UpdateStatus would. Mirrors Kubelet.tryUpdateNodeStatus.
func (kl *Kubelet) tryUpdateNodeStatus(ctx context.Context, try int) error {
	nodes := kl.kubeClient.CoreV1().Nodes()
	opts := metav1.GetOptions{}
	if try == 0 {
		opts.ResourceVersion = "0"
	}
	node, err := nodes.Get(ctx, kl.nodeName, opts)
	if err != nil {
		return err
	}
	if kl.updatePodCIDR(ctx, nodePodCIDR(node)) {
		// A network that waited for the range may be ready now: let this status say so.
		kl.updateRuntimeUp(ctx)
	}
	updated := node.DeepCopy()
	kl.setNodeStatus(ctx, updated)
	patch, err := nodeStatusPatch(node, updated)
	if err != nil {
		return err
	}
	if _, err := nodes.Patch(ctx, kl.nodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return err
	}
	kl.recordNodeReadyTransition(node, updated)
	return nil
}

// nodeStatusPatch is the strategic merge patch from old to updated's status (and
// metadata; spec is left out). status.addresses is annotated patchStrategy=merge on the
// name-less type field, which merges addresses wrongly, so a changed list is sent whole
// with the $patch: replace directive. Mirrors kube's preparePatchBytesforNodeStatus
// (pkg/util/node).
func nodeStatusPatch(old, updated *v1.Node) ([]byte, error) {
	oldData, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	replaceAddresses := len(old.Status.Addresses) > 0 && !equality.Semantic.DeepEqual(old.Status.Addresses, updated.Status.Addresses)
	diff := updated.DeepCopy()
	diff.Spec = old.Spec
	if replaceAddresses {
		diff.Status.Addresses = old.Status.Addresses
	}
	newData, err := json.Marshal(diff)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Node{})
	if err != nil || !replaceAddresses {
		return patch, err
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	status, _ := m["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		m["status"] = status
	}
	addresses := make([]any, 0, len(updated.Status.Addresses)+1)
	for _, a := range updated.Status.Addresses {
		addresses = append(addresses, map[string]any{"type": a.Type, "address": a.Address})
	}
	status["addresses"] = append(addresses, map[string]any{"$patch": "replace"})
	return json.Marshal(m)
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

// nodePodCIDR is the node's pod range: spec.podCIDRs joined by commas (as kubelet
// hands them to the runtime), else spec.podCIDR, else "".
func nodePodCIDR(node *v1.Node) string {
	if cidr := strings.Join(node.Spec.PodCIDRs, ","); cidr != "" {
		return cidr
	}
	return node.Spec.PodCIDR
}

// updatePodCIDR hands the pod range to the runtime when it changed: nodeCIDR (see
// nodePodCIDR), else Config.PodCIDR. With neither it logs, once, that pods wait for one
// (a runtime whose network needs it, as the sim runtime's, stays not ready). It reports
// whether the runtime got a new range. Mirrors Kubelet.updatePodCIDR.
func (kl *Kubelet) updatePodCIDR(ctx context.Context, nodeCIDR string) bool {
	cidr := nodeCIDR
	if cidr == "" {
		cidr = kl.podCIDRFallback
	}
	kl.podCIDRMu.Lock()
	defer kl.podCIDRMu.Unlock()
	if cidr == "" {
		if !kl.podCIDRWaitLogged {
			kl.podCIDRWaitLogged = true
			kl.logger.Info("waiting for the node's spec.podCIDR (set by the controller-manager's node IPAM, or give the kubelet --pod-cidr)")
		}
		return false
	}
	if cidr == kl.podCIDR {
		return false
	}
	if err := kl.containerRuntime.UpdatePodCIDR(ctx, cidr); err != nil {
		if ctx.Err() == nil {
			kl.logger.Error("failed to hand the pod CIDR to the runtime", "podCIDR", cidr, "err", err)
		}
		return false
	}
	kl.logger.Info("updated the runtime's pod CIDR", "podCIDR", cidr)
	kl.podCIDR = cidr
	return true
}

// hasPodCIDR reports whether the runtime has been handed a pod range.
func (kl *Kubelet) hasPodCIDR() bool {
	kl.podCIDRMu.Lock()
	defer kl.podCIDRMu.Unlock()
	return kl.podCIDR != ""
}

// pollPodCIDR reads the Node (from the apiserver's cache) and hands its pod range to
// the runtime, for a kubelet whose network waits for one: node IPAM sets it right
// after the registration, and the runtime's network is then ready within
// runtimeNotReadyPeriod instead of at the next node status update. It reports whether
// the runtime got a new range. Mirrors the pod CIDR part of fastNodeStatusUpdate.
func (kl *Kubelet) pollPodCIDR(ctx context.Context) bool {
	if kl.kubeClient == nil {
		return false
	}
	node, err := kl.kubeClient.CoreV1().Nodes().Get(ctx, kl.nodeName, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return false // not registered yet, or the apiserver is away: the next poll
	}
	return kl.updatePodCIDR(ctx, nodePodCIDR(node))
}
