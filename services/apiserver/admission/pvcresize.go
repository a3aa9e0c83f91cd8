package admission

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// errResize is kube's refusal of a claim's growth.
var errResize = errors.New("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize")

// PersistentVolumeClaimResize refuses an update that grows a claim's storage request
// (403, kube's message). kube's plugin lets it through when the claim's StorageClass has
// allowVolumeExpansion, for the expand controller and the CSI driver to act on; skiff
// provisions no volume dynamically and expands none, so it refuses every growth rather
// than store a size nothing will give. Mirrors kube's PersistentVolumeClaimResize
// admission plugin (plugin/pkg/admission/storage/persistentvolume/resize).
type PersistentVolumeClaimResize struct{}

// Admit implements Interface.
func (PersistentVolumeClaimResize) Admit(_ context.Context, a Attributes) error {
	if a.Resource.Group != "" || a.Resource.Resource != "persistentvolumeclaims" || a.Subresource != "" || a.Operation != Update {
		return nil
	}
	pvc, ok := a.Object.(*corev1.PersistentVolumeClaim)
	old, oldOK := a.OldObject.(*corev1.PersistentVolumeClaim)
	if !ok || !oldOK {
		return nil
	}
	newSize, oldSize := pvc.Spec.Resources.Requests[corev1.ResourceStorage], old.Spec.Resources.Requests[corev1.ResourceStorage]
	if newSize.Cmp(oldSize) <= 0 {
		return nil
	}
	return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name, errResize)
}
