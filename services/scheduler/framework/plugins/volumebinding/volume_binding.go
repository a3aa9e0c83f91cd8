// Package volumebinding is the VolumeBinding plugin: it schedules a pod with its
// PersistentVolumeClaims. PreFilter collects the pod's claims and rejects a pod whose
// claim is missing, being deleted, or unbound in an Immediate class; Filter rejects a
// node that a bound claim's volume cannot be used on (its nodeAffinity) or where an
// unbound claim of a WaitForFirstConsumer class can neither take an available volume
// nor be provisioned; Reserve keeps the node's choice; PreBind writes it (a static
// volume's claimRef, or volume.kubernetes.io/selected-node on a claim for its
// provisioner) and waits until the PersistentVolume controller has bound every claim,
// for at most the bind timeout. Mirrors kube-scheduler's
// pkg/scheduler/framework/plugins/volumebinding, without its assume cache (a volume
// chosen for a claim is held in the plugin until the binding ends), storage capacity
// or CSI volume limits.
package volumebinding

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

// The reasons a node is rejected, kube's words.
const (
	// ErrReasonBindConflict: an unbound delayed-binding claim finds no available
	// volume on the node and cannot be provisioned there.
	ErrReasonBindConflict = "node(s) didn't find available persistent volumes to bind"
	// ErrReasonNodeConflict: a bound claim's volume's nodeAffinity excludes the node.
	ErrReasonNodeConflict = "node(s) had volume node affinity conflict"
	// ErrReasonPVNotExist: a bound claim names a volume that does not exist.
	ErrReasonPVNotExist = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	// ErrReasonUnboundImmediate: a claim of an Immediate class is not bound yet (the
	// PersistentVolume controller binds those, not the scheduler).
	ErrReasonUnboundImmediate = "pod has unbound immediate PersistentVolumeClaims"
)

// DefaultBindTimeout is how long PreBind waits for the pod's claims to be bound: kube's
// VolumeBindingArgs bindTimeoutSeconds default, 600 s.
const DefaultBindTimeout = 600 * time.Second

// pollInterval is how often PreBind looks at the informer caches for the bindings.
const pollInterval = 200 * time.Millisecond

const stateKey framework.StateKey = "PreFilter" + names.VolumeBinding

// Args configures the plugin. Mirrors kube-scheduler's VolumeBindingArgs.
type Args struct {
	// BindTimeout bounds PreBind's wait for the claims to be bound; 0 means
	// DefaultBindTimeout.
	BindTimeout time.Duration
}

// VolumeBinding is the plugin. Build it with New or NewWithArgs.
type VolumeBinding struct {
	client      kubernetes.Interface
	claims      corelisters.PersistentVolumeClaimLister
	volumes     corelisters.PersistentVolumeLister
	classes     storagelisters.StorageClassLister
	bindTimeout time.Duration

	mu sync.Mutex
	// assumed holds the volumes chosen for a claim (volume name → claim
	// namespace/name) from Reserve until the binding cycle ends, so that the next
	// pods do not choose them too while the informers catch up.
	assumed map[string]string
}

var (
	_ framework.PreFilterPlugin = (*VolumeBinding)(nil)
	_ framework.FilterPlugin    = (*VolumeBinding)(nil)
	_ framework.ReservePlugin   = (*VolumeBinding)(nil)
	_ framework.PreBindPlugin   = (*VolumeBinding)(nil)
)

// New builds the plugin with the default Args.
func New(ctx context.Context, h framework.Handle) (framework.Plugin, error) {
	return NewWithArgs(Args{})(ctx, h)
}

// NewWithArgs returns a factory of the plugin with args. The plugin reads claims,
// volumes and classes through the handle's informer factory (an error without one)
// and writes through its client.
func NewWithArgs(args Args) func(context.Context, framework.Handle) (framework.Plugin, error) {
	return func(_ context.Context, h framework.Handle) (framework.Plugin, error) {
		factory := h.SharedInformerFactory()
		if factory == nil {
			return nil, errors.New("VolumeBinding needs the scheduler's informer factory")
		}
		timeout := args.BindTimeout
		if timeout <= 0 {
			timeout = DefaultBindTimeout
		}
		return &VolumeBinding{
			client:      h.ClientSet(),
			claims:      factory.Core().V1().PersistentVolumeClaims().Lister(),
			volumes:     factory.Core().V1().PersistentVolumes().Lister(),
			classes:     factory.Storage().V1().StorageClasses().Lister(),
			bindTimeout: timeout,
			assumed:     map[string]string{},
		}, nil
	}
}

// Name returns "VolumeBinding".
func (*VolumeBinding) Name() string { return names.VolumeBinding }

// staticBinding is a claim to bind to an existing volume.
type staticBinding struct {
	pv  *v1.PersistentVolume
	pvc *v1.PersistentVolumeClaim
}

// podVolumes is what binding the pod's claims on one node takes: volumes to bind and
// claims to provision. Mirrors kube's PodVolumes.
type podVolumes struct {
	node              *v1.Node
	staticBindings    []staticBinding
	dynamicProvisions []*v1.PersistentVolumeClaim
}

// stateData is the cycle's view of the pod's claims, and the per-node choices Filter
// made. Mirrors kube's stateData.
type stateData struct {
	// bound claims (volumeName set and bind-completed), unbound claims of a
	// WaitForFirstConsumer class, and the unclaimed volumes of those claims' classes.
	boundClaims    []*v1.PersistentVolumeClaim
	delayedClaims  []*v1.PersistentVolumeClaim
	unboundByClass map[string][]*v1.PersistentVolume

	mu     sync.Mutex
	byNode map[string]*podVolumes
	// reserved is the chosen node's podVolumes, set by Reserve.
	reserved *podVolumes
}

// Clone shares the state: Filter's choices are read back by Reserve.
func (s *stateData) Clone() framework.StateData { return s }

// PreFilter reads the pod's claims (a generic ephemeral volume's claim is
// <pod>-<volume>). A missing claim is UnschedulableAndUnresolvable with the lister's
// `persistentvolumeclaim "x" not found`, a claim being deleted with
// `persistentvolumeclaim "x" is being deleted`, an unbound claim of an Immediate (or
// missing) class with ErrReasonUnboundImmediate.
func (pl *VolumeBinding) PreFilter(_ context.Context, state *framework.CycleState, pod *v1.Pod) *framework.Status {
	data := &stateData{unboundByClass: map[string][]*v1.PersistentVolume{}, byNode: map[string]*podVolumes{}}
	state.Write(stateKey, data)
	immediate := false
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		var name string
		switch {
		case vol.PersistentVolumeClaim != nil:
			name = vol.PersistentVolumeClaim.ClaimName
		case vol.Ephemeral != nil:
			name = pod.Name + "-" + vol.Name
		default:
			continue
		}
		pvc, err := pl.claims.PersistentVolumeClaims(pod.Namespace).Get(name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return framework.NewStatus(framework.UnschedulableAndUnresolvable, err.Error())
			}
			return framework.AsStatus(err)
		}
		if pvc.DeletionTimestamp != nil {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable, fmt.Sprintf("persistentvolumeclaim %q is being deleted", pvc.Name))
		}
		if vol.Ephemeral != nil && !metav1.IsControlledBy(pvc, pod) {
			return framework.NewStatus(framework.UnschedulableAndUnresolvable,
				fmt.Sprintf("PVC %s/%s was not created for pod %s/%s (pod is not owner)", pvc.Namespace, pvc.Name, pod.Namespace, pod.Name))
		}
		if pvc.Spec.VolumeName != "" && metav1.HasAnnotation(pvc.ObjectMeta, volume.AnnBindCompleted) {
			data.boundClaims = append(data.boundClaims, pvc)
			continue
		}
		delayed, err := pl.isDelayBinding(pvc)
		if err != nil {
			return framework.AsStatus(err)
		}
		// A claim naming its volume is the controller's to bind, as an Immediate one.
		if delayed && pvc.Spec.VolumeName == "" {
			data.delayedClaims = append(data.delayedClaims, pvc)
		} else {
			immediate = true
		}
	}
	if immediate {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonUnboundImmediate)
	}
	for _, pvc := range data.delayedClaims {
		class := volume.GetPersistentVolumeClaimClass(pvc)
		if _, done := data.unboundByClass[class]; done {
			continue
		}
		pvs, err := pl.volumes.List(labels.Everything())
		if err != nil {
			return framework.AsStatus(err)
		}
		var ofClass []*v1.PersistentVolume
		for _, pv := range pvs {
			if volume.GetPersistentVolumeClass(pv) == class {
				ofClass = append(ofClass, pv)
			}
		}
		data.unboundByClass[class] = ofClass
	}
	return nil
}

// isDelayBinding: the claim's class binds on first consumer. A missing class is not
// (the claim then waits as an Immediate one). Mirrors volume.IsDelayBindingMode.
func (pl *VolumeBinding) isDelayBinding(pvc *v1.PersistentVolumeClaim) (bool, error) {
	name := volume.GetPersistentVolumeClaimClass(pvc)
	if name == "" {
		return false, nil
	}
	class, err := pl.classes.Get(name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ptr.Deref(class.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingWaitForFirstConsumer, nil
}

func getStateData(state *framework.CycleState) (*stateData, error) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, err
	}
	s, ok := d.(*stateData)
	if !ok {
		return nil, fmt.Errorf("%+v convert to volumebinding.stateData error", d)
	}
	return s, nil
}

// Filter checks the node against the pod's claims: each bound claim's volume must
// exist (ErrReasonPVNotExist) and its nodeAffinity match the node
// (ErrReasonNodeConflict); each unbound delayed-binding claim needs an available
// volume of its class that fits it and the node, or else a class that provisions
// (not kubernetes.io/no-provisioner) with allowedTopologies matching the node; a claim
// already given a node by selected-node fits that node only (ErrReasonBindConflict).
// All rejections are UnschedulableAndUnresolvable. Mirrors FindPodVolumes.
func (pl *VolumeBinding) Filter(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	node := nodeInfo.Node()
	data, err := getStateData(state)
	if err != nil {
		return framework.AsStatus(err)
	}
	if len(data.boundClaims) == 0 && len(data.delayedClaims) == 0 {
		return nil
	}
	var reasons []string
	for _, pvc := range data.boundClaims {
		pv, err := pl.volumes.Get(pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			reasons = append(reasons, ErrReasonPVNotExist)
			break
		}
		if err != nil {
			return framework.AsStatus(err)
		}
		if volume.CheckNodeAffinity(pv, node.Labels) != nil {
			reasons = append(reasons, ErrReasonNodeConflict)
			break
		}
	}
	pvs, satisfied, err := pl.findVolumes(data, node)
	if err != nil {
		return framework.AsStatus(err)
	}
	if !satisfied {
		reasons = append(reasons, ErrReasonBindConflict)
	}
	if len(reasons) > 0 {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, reasons...)
	}
	data.mu.Lock()
	data.byNode[node.Name] = pvs
	data.mu.Unlock()
	return nil
}

// findVolumes chooses, for the unbound delayed-binding claims on node, an available
// volume each (the smallest that fits, not chosen for another claim) or provisioning,
// and reports whether every claim is served.
func (pl *VolumeBinding) findVolumes(data *stateData, node *v1.Node) (*podVolumes, bool, error) {
	result := &podVolumes{node: node}
	var toMatch []*v1.PersistentVolumeClaim
	for _, pvc := range data.delayedClaims {
		if selected, ok := pvc.Annotations[volume.AnnSelectedNode]; ok {
			if selected != node.Name {
				return nil, false, nil
			}
			result.dynamicProvisions = append(result.dynamicProvisions, pvc)
			continue
		}
		toMatch = append(toMatch, pvc)
	}
	// The smallest requests choose first, each the smallest volume that fits it.
	sort.SliceStable(toMatch, func(i, j int) bool {
		qi, qj := toMatch[i].Spec.Resources.Requests[v1.ResourceStorage], toMatch[j].Spec.Resources.Requests[v1.ResourceStorage]
		return qi.Cmp(qj) < 0
	})
	// Volumes chosen for this pod's other claims, or held for another pod's.
	chosen := map[string]*v1.PersistentVolume{}
	pl.mu.Lock()
	for name := range pl.assumed {
		chosen[name] = nil
	}
	pl.mu.Unlock()
	for _, pvc := range toMatch {
		pv, err := volume.FindMatchingVolume(pvc, data.unboundByClass[volume.GetPersistentVolumeClaimClass(pvc)], node, chosen, true, false)
		if err != nil {
			return nil, false, err
		}
		if pv == nil {
			result.dynamicProvisions = append(result.dynamicProvisions, pvc)
			continue
		}
		chosen[pv.Name] = pv
		result.staticBindings = append(result.staticBindings, staticBinding{pv: pv, pvc: pvc})
	}
	for _, pvc := range result.dynamicProvisions {
		ok, err := pl.canProvision(pvc, node)
		if err != nil || !ok {
			return nil, false, err
		}
	}
	return result, true, nil
}

// canProvision: the claim's class names a provisioner (not
// kubernetes.io/no-provisioner) whose allowedTopologies, if any, match the node.
// Mirrors checkVolumeProvisions.
func (pl *VolumeBinding) canProvision(pvc *v1.PersistentVolumeClaim, node *v1.Node) (bool, error) {
	name := volume.GetPersistentVolumeClaimClass(pvc)
	class, err := pl.classes.Get(name)
	if err != nil {
		return false, fmt.Errorf("failed to find storage class %q", name)
	}
	if class.Provisioner == "" || class.Provisioner == volume.NotSupportedProvisioner {
		return false, nil
	}
	if len(class.AllowedTopologies) == 0 {
		return true, nil
	}
	return matchTopologySelectorTerms(class.AllowedTopologies, labels.Set(node.Labels)), nil
}

// matchTopologySelectorTerms: some term's every expression has the node's label
// among its values. Mirrors v1helper.MatchTopologySelectorTerms.
func matchTopologySelectorTerms(terms []v1.TopologySelectorTerm, nodeLabels labels.Set) bool {
	for _, term := range terms {
		match := true
		for _, req := range term.MatchLabelExpressions {
			value, ok := nodeLabels[req.Key]
			if !ok || !containsString(req.Values, value) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func containsString(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// Reserve keeps the chosen node's choice and holds its volumes for their claims.
func (pl *VolumeBinding) Reserve(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeName string) *framework.Status {
	data, err := getStateData(state)
	if err != nil {
		return framework.AsStatus(err)
	}
	data.mu.Lock()
	pvs := data.byNode[nodeName]
	data.reserved = pvs
	data.mu.Unlock()
	if pvs == nil {
		return nil
	}
	pl.mu.Lock()
	for _, b := range pvs.staticBindings {
		pl.assumed[b.pv.Name] = b.pvc.Namespace + "/" + b.pvc.Name
	}
	pl.mu.Unlock()
	return nil
}

// Unreserve lets the chosen volumes go. What PreBind wrote stays, as in kube: a
// volume's claimRef is completed or undone by the PersistentVolume controller, a
// selected-node annotation is acted on by the provisioner.
func (pl *VolumeBinding) Unreserve(_ context.Context, state *framework.CycleState, _ *v1.Pod, _ string) {
	data, err := getStateData(state)
	if err != nil {
		return
	}
	data.mu.Lock()
	pvs := data.reserved
	data.mu.Unlock()
	pl.release(pvs)
}

func (pl *VolumeBinding) release(pvs *podVolumes) {
	if pvs == nil {
		return
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, b := range pvs.staticBindings {
		delete(pl.assumed, b.pv.Name)
	}
}

// PreBind writes the reserved choice: each chosen volume's claimRef (with
// pv.kubernetes.io/bound-by-controller, as kube's binder sets it) and
// volume.kubernetes.io/selected-node: <node> on each claim to provision; then waits,
// for at most the bind timeout, until the PersistentVolume controller has bound every
// claim (volumeName and bind-completed) to a volume usable on the node. Errors: an API
// write failed, a claim was deleted, a volume's claimRef or a claim's selected-node
// was reset (the provisioner gave the node up), a provisioned volume does not fit
// the node, or the wait timed out ("binding volumes: ..."). Mirrors BindPodVolumes.
func (pl *VolumeBinding) PreBind(ctx context.Context, state *framework.CycleState, _ *v1.Pod, nodeName string) *framework.Status {
	data, err := getStateData(state)
	if err != nil {
		return framework.AsStatus(err)
	}
	data.mu.Lock()
	pvs := data.reserved
	data.mu.Unlock()
	if pvs == nil || len(pvs.staticBindings) == 0 && len(pvs.dynamicProvisions) == 0 {
		return nil
	}
	defer pl.release(pvs)
	for _, b := range pvs.staticBindings {
		if err := pl.bindVolume(ctx, b); err != nil {
			return framework.AsStatus(fmt.Errorf("binding volumes: %w", err))
		}
	}
	for _, pvc := range pvs.dynamicProvisions {
		if err := pl.selectNode(ctx, pvc, nodeName); err != nil {
			return framework.AsStatus(fmt.Errorf("binding volumes: %w", err))
		}
	}
	err = wait.PollUntilContextTimeout(ctx, pollInterval, pl.bindTimeout, false, func(context.Context) (bool, error) {
		return pl.checkBindings(pvs, pvs.node)
	})
	if err != nil {
		return framework.AsStatus(fmt.Errorf("binding volumes: %w", err))
	}
	return nil
}

// bindVolume sets the volume's claimRef to the claim. The informer's copy may be
// older than the apiserver's (the PV controller writes the volume's status): on a
// conflict the volume is read again and bound if it is still free or already the
// claim's.
func (pl *VolumeBinding) bindVolume(ctx context.Context, b staticBinding) error {
	current := b.pv
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, dirty, err := volume.GetBindVolumeToClaim(current, b.pvc)
		if err != nil || !dirty {
			return err
		}
		_, err = pl.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		latest, getErr := pl.client.CoreV1().PersistentVolumes().Get(ctx, b.pv.Name, metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		if latest.Spec.ClaimRef != nil && !volume.IsVolumeBoundToClaim(latest, b.pvc) {
			return fmt.Errorf("persistentvolume %q was bound to another claim meanwhile", latest.Name)
		}
		current = latest
		return err
	})
}

// selectNode sets volume.kubernetes.io/selected-node: nodeName on the claim. On a
// conflict (the PV controller writes the claim's status) the claim is read again and
// annotated if it is still the same, unbound claim.
func (pl *VolumeBinding) selectNode(ctx context.Context, pvc *v1.PersistentVolumeClaim, nodeName string) error {
	current := pvc
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if current.Annotations[volume.AnnSelectedNode] == nodeName {
			return nil
		}
		claim := current.DeepCopy()
		metav1.SetMetaDataAnnotation(&claim.ObjectMeta, volume.AnnSelectedNode, nodeName)
		_, err := pl.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, claim, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		latest, getErr := pl.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		if latest.UID != pvc.UID || latest.Spec.VolumeName != "" {
			return fmt.Errorf("persistentvolumeclaim %q changed meanwhile", pvc.Namespace+"/"+pvc.Name)
		}
		current = latest
		return err
	})
}

// checkBindings reports whether every claim PreBind wrote for is bound, or an error
// once one can no longer be. Mirrors checkBindings.
func (pl *VolumeBinding) checkBindings(pvs *podVolumes, node *v1.Node) (bool, error) {
	for _, b := range pvs.staticBindings {
		pvc, err := pl.currentClaim(b.pvc)
		if err != nil {
			return false, err
		}
		pv, err := pl.volumes.Get(b.pv.Name)
		if err != nil {
			return false, fmt.Errorf("failed to check binding: %w", err)
		}
		ref := pv.Spec.ClaimRef
		if ref == nil || ref.UID == "" {
			// The cache may not show the claimRef written yet.
			if pvc.Spec.VolumeName == "" {
				return false, nil
			}
			return false, fmt.Errorf("ClaimRef got reset for pv %q", pv.Name)
		}
		if ref.Namespace != pvc.Namespace || ref.Name != pvc.Name {
			return false, fmt.Errorf("ClaimRef got reset for pv %q", pv.Name)
		}
		if !fullyBound(pvc) {
			return false, nil
		}
	}
	for _, claim := range pvs.dynamicProvisions {
		pvc, err := pl.currentClaim(claim)
		if err != nil {
			return false, err
		}
		selected, ok := pvc.Annotations[volume.AnnSelectedNode]
		if !ok {
			if pvc.Spec.VolumeName == "" && pvc.ResourceVersion == claim.ResourceVersion {
				return false, nil // the cache does not show the annotation written yet
			}
			return false, fmt.Errorf("selectedNode annotation reset for PVC %q", pvc.Name)
		}
		if selected != node.Name {
			return false, fmt.Errorf("selectedNode annotation value %q not set to scheduled node %q", selected, node.Name)
		}
		if pvc.Spec.VolumeName == "" {
			return false, nil
		}
		pv, err := pl.volumes.Get(pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if err := volume.CheckNodeAffinity(pv, node.Labels); err != nil {
			return false, fmt.Errorf("pv %q node affinity doesn't match node %q: %w", pv.Name, node.Name, err)
		}
		if !fullyBound(pvc) {
			return false, nil
		}
	}
	return true, nil
}

// currentClaim is the claim as the informer has it now; an error once it is gone or
// replaced.
func (pl *VolumeBinding) currentClaim(claim *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error) {
	pvc, err := pl.claims.PersistentVolumeClaims(claim.Namespace).Get(claim.Name)
	if err != nil || pvc.UID != claim.UID {
		return nil, fmt.Errorf("failed to check binding: persistentvolumeclaim %q was deleted", claim.Namespace+"/"+claim.Name)
	}
	return pvc, nil
}

// fullyBound: the controller finished binding the claim.
func fullyBound(pvc *v1.PersistentVolumeClaim) bool {
	return pvc.Spec.VolumeName != "" && metav1.HasAnnotation(pvc.ObjectMeta, volume.AnnBindCompleted)
}
