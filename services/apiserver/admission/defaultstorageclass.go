package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/registry/storage/storageclass"
)

// betaStorageClassAnnotation names a claim's class before spec.storageClassName did.
const betaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"

// DefaultStorageClass gives a PersistentVolumeClaim created without a class (no
// spec.storageClassName, not even "", and no volume.beta.kubernetes.io/storage-class
// annotation) the default StorageClass: the one annotated
// storageclass.kubernetes.io/is-default-class: "true", the newest of several (then
// the first by name). With no default class the claim is left alone. Mirrors kube's
// DefaultStorageClass admission plugin (plugin/pkg/admission/storage/storageclass/
// setdefault).
type DefaultStorageClass struct {
	// StorageClasses lists StorageClasses (the registry), from the watch cache as kube's
	// plugin reads its informer.
	StorageClasses rest.Lister
}

// Admit implements Interface.
func (p DefaultStorageClass) Admit(ctx context.Context, a Attributes) error {
	if a.Resource.Group != "" || a.Resource.Resource != "persistentvolumeclaims" || a.Subresource != "" || a.Operation != Create || p.StorageClasses == nil {
		return nil
	}
	pvc, ok := a.Object.(*corev1.PersistentVolumeClaim)
	if !ok {
		return apierrors.NewBadRequest("Resource was marked with kind PersistentVolumeClaim but was unable to be converted")
	}
	if _, ok := pvc.Annotations[betaStorageClassAnnotation]; ok || pvc.Spec.StorageClassName != nil {
		return nil
	}
	list, err := p.StorageClasses.List(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("unable to list storage classes: %v", err))
	}
	var chosen *storagev1.StorageClass
	for i := range list.(*storagev1.StorageClassList).Items {
		sc := &list.(*storagev1.StorageClassList).Items[i]
		if !storageclass.IsDefault(sc.ObjectMeta) {
			continue
		}
		if chosen == nil || sc.CreationTimestamp.After(chosen.CreationTimestamp.Time) ||
			(sc.CreationTimestamp.Equal(&chosen.CreationTimestamp) && sc.Name < chosen.Name) {
			chosen = sc
		}
	}
	if chosen != nil {
		name := chosen.Name
		pvc.Spec.StorageClassName = &name
	}
	return nil
}
