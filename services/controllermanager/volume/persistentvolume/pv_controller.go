// Package persistentvolume is kube-controller-manager's PersistentVolume binder
// ("persistentvolume-binder-controller", its events from persistentvolume-controller):
// it binds each Pending PersistentVolumeClaim to the smallest Available
// PersistentVolume that satisfies it (storage class, access modes, capacity, volume
// mode, selector) or to the volume it, or a volume's claimRef, names; it keeps both
// sides' phases (Available, Bound, Released, Lost) and, when a bound claim is deleted,
// releases its volume and reclaims it per its reclaim policy: Retain keeps it Released,
// Delete deletes the PersistentVolume object, or leaves it to the external provisioner
// that made it. skiff has no in-tree volume plugins: a claim whose class names a
// provisioner is annotated for an external one (volume.kubernetes.io/storage-provisioner,
// ExternalProvisioning), which creates a volume whose claimRef names the claim, bound
// here; a kubernetes.io/ provisioner fails (ProvisioningFailed). A claim of a
// WaitForFirstConsumer class waits (WaitForFirstConsumer) until the scheduler either
// pre-binds a volume to it or sets volume.kubernetes.io/selected-node for the
// provisioner. Mirrors k8s.io/kubernetes/pkg/controller/volume/persistentvolume.
package persistentvolume

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list;
// EventSource the component its events come from.
const (
	Name        = "persistentvolume-binder-controller"
	EventSource = "persistentvolume-controller"
)

// Annotations the controller reads and writes. Mirrors storagehelpers' Ann* constants.
const (
	// AnnBindCompleted on a claim: the controller finished binding it ("yes").
	AnnBindCompleted = "pv.kubernetes.io/bind-completed"
	// AnnBoundByController on a claim or volume: the controller, not a user, set its
	// volumeName / claimRef ("yes").
	AnnBoundByController = "pv.kubernetes.io/bound-by-controller"
	// AnnStorageProvisioner and AnnBetaStorageProvisioner on a claim name the external
	// provisioner expected to make its volume.
	AnnStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	AnnBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// AnnSelectedNode on a claim of a WaitForFirstConsumer class: the node the scheduler
	// chose for the claim's first pod, set by the scheduler for the provisioner to
	// provision on.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnDynamicallyProvisioned on a volume names the provisioner that made it; the
	// same provisioner deletes it when it is released with reclaim policy Delete.
	AnnDynamicallyProvisioned = "pv.kubernetes.io/provisioned-by"
	// annBetaStorageClass is the class annotation that predates storageClassName.
	annBetaStorageClass = "volume.beta.kubernetes.io/storage-class"
)

// Event reasons. Mirrors pkg/controller/volume/events.
const (
	FailedBinding        = "FailedBinding"
	VolumeMismatch       = "VolumeMismatch"
	ClaimLost            = "ClaimLost"
	ClaimMisbound        = "ClaimMisbound"
	ProvisioningFailed   = "ProvisioningFailed"
	ExternalProvisioning = "ExternalProvisioning"
	WaitForFirstConsumer = "WaitForFirstConsumer"
	VolumeFailedRecycle  = "VolumeFailedRecycle"
	VolumeDelete         = "VolumeDelete"
)

// SyncPeriod is how often every claim and volume is looked at again, kube's default
// --pvclaimbinder-sync-period: a claim waiting for a volume is matched against volumes
// made since.
const SyncPeriod = 15 * time.Second

// Controller is the PersistentVolume binder.
type Controller struct {
	client      kubernetes.Interface
	recorder    record.EventRecorder
	volumes     corelisters.PersistentVolumeLister
	claims      corelisters.PersistentVolumeClaimLister
	classes     storagelisters.StorageClassLister
	synced      []cache.InformerSynced
	volumeQueue workqueue.TypedRateLimitingInterface[string]
	claimQueue  workqueue.TypedRateLimitingInterface[string]
	log         *slog.Logger
}

// New builds the controller over the factory's PersistentVolume, PersistentVolumeClaim
// and StorageClass informers. Mirrors NewController.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	pvInformer := factory.Core().V1().PersistentVolumes()
	pvcInformer := factory.Core().V1().PersistentVolumeClaims()
	classInformer := factory.Storage().V1().StorageClasses()
	c := &Controller{
		client:   client,
		recorder: recorder,
		volumes:  pvInformer.Lister(),
		claims:   pvcInformer.Lister(),
		classes:  classInformer.Lister(),
		synced:   []cache.InformerSynced{pvInformer.Informer().HasSynced, pvcInformer.Informer().HasSynced, classInformer.Informer().HasSynced},
		volumeQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "volumes"}),
		claimQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "claims"}),
		log: slog.With("controller", Name),
	}
	_, _ = pvInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.volumeChanged,
		UpdateFunc: func(_, obj interface{}) { c.volumeChanged(obj) },
		DeleteFunc: c.volumeChanged,
	})
	_, _ = pvcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.claimChanged,
		UpdateFunc: func(_, obj interface{}) { c.claimChanged(obj) },
		DeleteFunc: c.claimChanged,
	})
	_, _ = classInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(interface{}) { c.enqueueUnboundClaims() },
	})
	return c
}

// Run waits for the caches, then syncs volumes and claims (one worker each, as kube)
// and resyncs everything every SyncPeriod, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	done := make(chan struct{}, 2)
	go func() {
		worker.Run(ctx, "persistent volume", c.volumeQueue, c.synced, 1, c.log, c.syncVolumeKey)
		done <- struct{}{}
	}()
	go func() {
		worker.Run(ctx, "persistent volume claim", c.claimQueue, c.synced, 1, c.log, c.syncClaimKey)
		done <- struct{}{}
	}()
	go wait.UntilWithContext(ctx, func(context.Context) { c.resync() }, SyncPeriod)
	<-done
	<-done
}

// resync enqueues every volume and claim. Mirrors the controller's resync.
func (c *Controller) resync() {
	if pvs, err := c.volumes.List(labels.Everything()); err == nil {
		for _, pv := range pvs {
			c.volumeQueue.Add(pv.Name)
		}
	}
	if pvcs, err := c.claims.List(labels.Everything()); err == nil {
		for _, pvc := range pvcs {
			c.claimQueue.Add(pvc.Namespace + "/" + pvc.Name)
		}
	}
}

// volumeChanged enqueues the volume and the claim it names; a volume that may now
// serve a claim (no claimRef) enqueues every unbound claim.
func (c *Controller) volumeChanged(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return
	}
	c.volumeQueue.Add(pv.Name)
	if ref := pv.Spec.ClaimRef; ref != nil {
		c.claimQueue.Add(ref.Namespace + "/" + ref.Name)
	} else {
		c.enqueueUnboundClaims()
	}
}

// claimChanged enqueues the claim and the volume it names.
func (c *Controller) claimChanged(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	c.claimQueue.Add(pvc.Namespace + "/" + pvc.Name)
	if pvc.Spec.VolumeName != "" {
		c.volumeQueue.Add(pvc.Spec.VolumeName)
	}
}

// enqueueUnboundClaims enqueues the claims not bound to a volume yet.
func (c *Controller) enqueueUnboundClaims() {
	pvcs, err := c.claims.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pvc := range pvcs {
		if pvc.Spec.VolumeName == "" {
			c.claimQueue.Add(pvc.Namespace + "/" + pvc.Name)
		}
	}
}

func (c *Controller) syncClaimKey(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pvc, err := c.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.syncClaim(ctx, pvc.DeepCopy())
}

func (c *Controller) syncVolumeKey(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.syncVolume(ctx, pv.DeepCopy())
}

// syncClaim: a claim the controller has not finished binding is bound (syncUnboundClaim),
// a bound one checked (syncBoundClaim). Mirrors syncClaim.
func (c *Controller) syncClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Annotations[AnnBindCompleted] == "" {
		return c.syncUnboundClaim(ctx, pvc)
	}
	return c.syncBoundClaim(ctx, pvc)
}

// syncUnboundClaim binds a claim without volumeName to the best matching volume, or
// waits (WaitForFirstConsumer), or reports provisioning; a claim naming a volume is
// bound to it when the volume is free and satisfies it. Mirrors syncUnboundClaim.
func (c *Controller) syncUnboundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName == "" {
		delayBinding, class, classErr := c.delayBinding(pvc)
		pv, err := c.findMatchingVolume(pvc, delayBinding)
		if err != nil {
			return err
		}
		if pv != nil {
			return c.bind(ctx, pv, pvc)
		}
		switch {
		case delayBinding && !isDelayBindingProvisioning(pvc):
			// The scheduler picks the node (or a static volume) once a pod uses the claim.
			c.recorder.Event(pvc, corev1.EventTypeNormal, WaitForFirstConsumer, "waiting for first consumer to be created before binding")
		case claimClass(pvc) != "":
			c.provisionClaim(ctx, pvc, class, classErr)
		default:
			c.recorder.Event(pvc, corev1.EventTypeNormal, FailedBinding, "no persistent volumes available for this claim and no storage class is set")
		}
		return c.updateClaimStatus(ctx, pvc, corev1.ClaimPending, nil)
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		// The user asked for a volume that does not exist (yet): wait for it.
		return c.updateClaimStatus(ctx, pvc, corev1.ClaimPending, nil)
	}
	if err != nil {
		return err
	}
	pv = pv.DeepCopy()
	switch {
	case pv.Spec.ClaimRef == nil:
		if reason := checkVolumeSatisfyClaim(pv, pvc); reason != "" {
			c.recorder.Event(pvc, corev1.EventTypeWarning, VolumeMismatch, fmt.Sprintf("Cannot bind to requested volume %q: %s", pv.Name, reason))
			return c.updateClaimStatus(ctx, pvc, corev1.ClaimPending, nil)
		}
		return c.bind(ctx, pv, pvc)
	case isVolumeBoundToClaim(pv, pvc):
		return c.bind(ctx, pv, pvc)
	default:
		if pvc.Annotations[AnnBoundByController] == "" {
			c.recorder.Event(pvc, corev1.EventTypeWarning, FailedBinding, "volume \""+pv.Name+"\" already bound to a different claim.")
		}
		return c.updateClaimStatus(ctx, pvc, corev1.ClaimPending, nil)
	}
}

// syncBoundClaim keeps a bound claim's status, or marks it Lost when its volume is
// gone or bound elsewhere. Mirrors syncBoundClaim.
func (c *Controller) syncBoundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName == "" {
		return c.claimLost(ctx, pvc, ClaimLost, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return c.claimLost(ctx, pvc, ClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
	}
	if err != nil {
		return err
	}
	pv = pv.DeepCopy()
	if pv.Spec.ClaimRef == nil || isVolumeBoundToClaim(pv, pvc) {
		return c.bind(ctx, pv, pvc)
	}
	return c.claimLost(ctx, pvc, ClaimMisbound, "Two claims are bound to the same volume, this one is bound incorrectly")
}

// claimLost sets the claim's phase Lost with a warning event, once.
func (c *Controller) claimLost(ctx context.Context, pvc *corev1.PersistentVolumeClaim, reason, message string) error {
	if pvc.Status.Phase == corev1.ClaimLost {
		return nil
	}
	c.recorder.Event(pvc, corev1.EventTypeWarning, reason, message)
	return c.updateClaimStatus(ctx, pvc, corev1.ClaimLost, nil)
}

// syncVolume keeps a volume's phase: Available without a bound claim, Bound with one;
// a volume whose claim is gone is Released and reclaimed. Mirrors syncVolume.
func (c *Controller) syncVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		// Unused, or pre-bound to a claim the claim sync will bind.
		return c.updateVolumePhase(ctx, pv, corev1.VolumeAvailable, "")
	}
	pvc, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		// The cache may lag: ask the apiserver before releasing the volume.
		pvc, err = c.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) || pvc.UID != ref.UID {
		return c.releaseVolume(ctx, pv)
	}
	switch pvc.Spec.VolumeName {
	case "":
		// The claim sync finishes the binding.
		c.claimQueue.Add(pvc.Namespace + "/" + pvc.Name)
		return nil
	case pv.Name:
		return c.updateVolumePhase(ctx, pv, corev1.VolumeBound, "")
	default:
		// The claim is bound to another volume: free this one.
		return c.unbindVolume(ctx, pv)
	}
}

// releaseVolume marks a volume whose claim was deleted Released and reclaims it:
// Retain keeps it; Delete leaves a volume an external provisioner made
// (pv.kubernetes.io/provisioned-by) to that provisioner, which deletes the storage and
// then the PersistentVolume, and deletes any other PersistentVolume object itself
// (skiff has no volume plugin to delete the storage behind it); Recycle fails (no
// recycler). Mirrors syncVolume's released branch, reclaimVolume and
// deleteVolumeOperation ("External deleter for volume requested, ignoring").
func (c *Controller) releaseVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
		if err := c.updateVolumePhase(ctx, pv, corev1.VolumeReleased, ""); err != nil {
			return err
		}
	}
	switch pv.Spec.PersistentVolumeReclaimPolicy {
	case corev1.PersistentVolumeReclaimDelete:
		if pv.DeletionTimestamp != nil {
			return nil
		}
		if provisioner := pv.Annotations[AnnDynamicallyProvisioned]; provisioner != "" && !strings.HasPrefix(provisioner, "kubernetes.io/") {
			// An external provisioner made the volume: it deletes the storage, then
			// the PersistentVolume (with its own finalizer, if it set one).
			return nil
		}
		err := c.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		if err != nil {
			c.recorder.Event(pv, corev1.EventTypeWarning, VolumeDelete, err.Error())
		}
		return err
	case corev1.PersistentVolumeReclaimRecycle:
		if pv.Status.Phase == corev1.VolumeFailed {
			return nil
		}
		c.recorder.Event(pv, corev1.EventTypeWarning, VolumeFailedRecycle, "No recycler plugin found for the volume!")
		return c.updateVolumePhase(ctx, pv, corev1.VolumeFailed, "No recycler plugin found for the volume!")
	}
	return nil
}

// isDelayBindingProvisioning: the scheduler chose a node for the claim of a
// WaitForFirstConsumer class, so that it is provisioned now. Mirrors storagehelpers'
// IsDelayBindingProvisioning.
func isDelayBindingProvisioning(pvc *corev1.PersistentVolumeClaim) bool {
	_, ok := pvc.Annotations[AnnSelectedNode]
	return ok
}

// unbindVolume frees a volume whose claim is bound elsewhere: a claimRef the controller
// set is removed, a user's pre-binding keeps its name but loses the UID. Mirrors
// unbindVolume.
func (c *Controller) unbindVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[AnnBoundByController] != "" {
		pv.Spec.ClaimRef = nil
		delete(pv.Annotations, AnnBoundByController)
	} else {
		pv.Spec.ClaimRef.UID = ""
	}
	updated, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	return c.updateVolumePhase(ctx, updated, corev1.VolumeAvailable, "")
}

// bind binds volume and claim both ways: the volume's claimRef (bound-by-controller
// when the controller chose it) and phase Bound, then the claim's volumeName with the
// bind-completed (and bound-by-controller) annotations, and its status Bound with the
// volume's capacity and access modes. Each step is skipped when done. Mirrors bind.
func (c *Controller) bind(ctx context.Context, pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) error {
	if !isVolumeBoundToClaim(pv, pvc) || pv.Spec.ClaimRef.UID != pvc.UID {
		if pv.Spec.ClaimRef == nil {
			metav1.SetMetaDataAnnotation(&pv.ObjectMeta, AnnBoundByController, "yes")
		}
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace,
			Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
		updated, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		pv = updated
	}
	if err := c.updateVolumePhase(ctx, pv, corev1.VolumeBound, ""); err != nil {
		return err
	}
	if pvc.Spec.VolumeName != pv.Name || pvc.Annotations[AnnBindCompleted] == "" {
		if pvc.Spec.VolumeName != pv.Name {
			metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, AnnBoundByController, "yes")
			pvc.Spec.VolumeName = pv.Name
		}
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, AnnBindCompleted, "yes")
		updated, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(ctx, pvc, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		pvc = updated
	}
	return c.updateClaimStatus(ctx, pvc, corev1.ClaimBound, pv)
}

// updateVolumePhase writes the volume's phase, with message, when the phase differs
// (a message someone else wrote for the same phase is left alone). Mirrors
// updateVolumePhase.
func (c *Controller) updateVolumePhase(ctx context.Context, pv *corev1.PersistentVolume, phase corev1.PersistentVolumePhase, message string) error {
	if pv.Status.Phase == phase {
		return nil
	}
	pv = pv.DeepCopy()
	pv.Status.Phase, pv.Status.Message = phase, message
	_, err := c.client.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{})
	return err
}

// updateClaimStatus writes the claim's phase and, with pv, its capacity and access
// modes, when they differ. Mirrors updateClaimStatus.
func (c *Controller) updateClaimStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, phase corev1.PersistentVolumeClaimPhase, pv *corev1.PersistentVolume) error {
	st := pvc.Status.DeepCopy()
	st.Phase = phase
	if pv != nil {
		st.AccessModes = pv.Spec.AccessModes
		st.Capacity = corev1.ResourceList{corev1.ResourceStorage: pv.Spec.Capacity[corev1.ResourceStorage]}
	}
	if pvc.Status.Phase == st.Phase && equalModes(pvc.Status.AccessModes, st.AccessModes) &&
		quantityEqual(pvc.Status.Capacity, st.Capacity) {
		return nil
	}
	pvc = pvc.DeepCopy()
	pvc.Status = *st
	_, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	return err
}

func equalModes(a, b []corev1.PersistentVolumeAccessMode) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func quantityEqual(a, b corev1.ResourceList) bool {
	qa, oka := a[corev1.ResourceStorage]
	qb, okb := b[corev1.ResourceStorage]
	return oka == okb && qa.Cmp(qb) == 0
}

// delayBinding reports whether the claim's class binds on first consumer, with the
// class (nil when the claim names none or it is missing, then err says why).
func (c *Controller) delayBinding(pvc *corev1.PersistentVolumeClaim) (bool, *storagev1.StorageClass, error) {
	name := claimClass(pvc)
	if name == "" {
		return false, nil, nil
	}
	class, err := c.classes.Get(name)
	if err != nil {
		return false, nil, err
	}
	return ptr.Deref(class.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingWaitForFirstConsumer, class, nil
}

// provisionClaim reports what becomes of a claim no volume matches whose class names a
// provisioner: a missing class or a kubernetes.io/ provisioner (skiff has no in-tree
// volume plugins) is a ProvisioningFailed warning; any other provisioner is external:
// the claim is annotated with it and waits (ExternalProvisioning). Mirrors
// provisionClaimOperation and provisionClaimOperationExternal.
func (c *Controller) provisionClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, classErr error) {
	if classErr != nil {
		c.recorder.Event(pvc, corev1.EventTypeWarning, ProvisioningFailed, classErr.Error())
		return
	}
	if strings.HasPrefix(class.Provisioner, "kubernetes.io/") {
		c.recorder.Event(pvc, corev1.EventTypeWarning, ProvisioningFailed, "no volume plugin matched name: "+class.Provisioner)
		return
	}
	if pvc.Annotations[AnnStorageProvisioner] != class.Provisioner {
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, AnnStorageProvisioner, class.Provisioner)
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, AnnBetaStorageProvisioner, class.Provisioner)
		if updated, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(ctx, pvc, metav1.UpdateOptions{}); err == nil {
			*pvc = *updated
		}
	}
	c.recorder.Event(pvc, corev1.EventTypeNormal, ExternalProvisioning, fmt.Sprintf("Waiting for a volume to be created either by the external provisioner '%s' "+
		"or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.", class.Provisioner))
}

// findMatchingVolume returns the volume pre-bound to the claim, else the smallest
// unbound, undeleted volume that satisfies it; none with delayed binding unless
// pre-bound. Mirrors FindMatchingVolume.
func (c *Controller) findMatchingVolume(pvc *corev1.PersistentVolumeClaim, delayBinding bool) (*corev1.PersistentVolume, error) {
	pvs, err := c.volumes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(pvs, func(i, j int) bool {
		qi, qj := pvs[i].Spec.Capacity[corev1.ResourceStorage], pvs[j].Spec.Capacity[corev1.ResourceStorage]
		if cmp := qi.Cmp(qj); cmp != 0 {
			return cmp < 0
		}
		return pvs[i].Name < pvs[j].Name
	})
	var best *corev1.PersistentVolume
	for _, pv := range pvs {
		if pv.DeletionTimestamp != nil {
			continue
		}
		if ref := pv.Spec.ClaimRef; ref != nil {
			if isVolumeBoundToClaim(pv, pvc) && checkVolumeSatisfyClaim(pv, pvc) == "" {
				return pv.DeepCopy(), nil // pre-bound to this claim
			}
			continue
		}
		if best != nil || delayBinding || pv.Status.Phase != corev1.VolumeAvailable && pv.Status.Phase != corev1.VolumePending {
			continue
		}
		if pvc.Spec.Selector != nil {
			selector, err := metav1.LabelSelectorAsSelector(pvc.Spec.Selector)
			if err != nil || !selector.Matches(labels.Set(pv.Labels)) {
				continue
			}
		}
		if checkVolumeSatisfyClaim(pv, pvc) == "" {
			best = pv
		}
	}
	if best != nil {
		return best.DeepCopy(), nil
	}
	return nil, nil
}

// checkVolumeSatisfyClaim says why pv cannot serve pvc ("" when it can): capacity
// below the request, another storage class, another volume mode, missing access modes.
// Mirrors checkVolumeSatisfyClaim.
func checkVolumeSatisfyClaim(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) string {
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	if size.Cmp(request) < 0 {
		return "requested PV is too small"
	}
	if volumeClass(pv) != claimClass(pvc) {
		return "storageClassName does not match"
	}
	if ptr.Deref(pv.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) != ptr.Deref(pvc.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) {
		return "incompatible volumeMode"
	}
	have := map[corev1.PersistentVolumeAccessMode]bool{}
	for _, m := range pv.Spec.AccessModes {
		have[m] = true
	}
	for _, m := range pvc.Spec.AccessModes {
		if !have[m] {
			return "incompatible accessMode"
		}
	}
	return ""
}

// isVolumeBoundToClaim: the volume's claimRef names the claim (and its UID, when set).
func isVolumeBoundToClaim(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.Name == pvc.Name && ref.Namespace == pvc.Namespace && (ref.UID == "" || ref.UID == pvc.UID)
}

// claimClass is the claim's class: the beta annotation, else storageClassName.
func claimClass(pvc *corev1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[annBetaStorageClass]; ok {
		return c
	}
	return ptr.Deref(pvc.Spec.StorageClassName, "")
}

// volumeClass is the volume's class: the beta annotation, else storageClassName.
func volumeClass(pv *corev1.PersistentVolume) string {
	if c, ok := pv.Annotations[annBetaStorageClass]; ok {
		return c
	}
	return pv.Spec.StorageClassName
}
