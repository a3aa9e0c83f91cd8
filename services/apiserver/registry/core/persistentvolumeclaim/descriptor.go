package persistentvolumeclaim

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves v1 persistentvolumeclaims (kubectl: persistentvolumeclaims, pvc),
// namespaced, with persistentvolumeclaims/status, at
// /registry/persistentvolumeclaims/<namespace>/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "persistentvolumeclaims",
	SingularName: "persistentvolumeclaim",
	Kind:         "PersistentVolumeClaim",
	ShortNames:   []string{"pvc"},
	NewFunc:      func() runtime.Object { return &corev1.PersistentVolumeClaim{} },
	NewListFunc:  func() runtime.Object { return &corev1.PersistentVolumeClaimList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "PersistentVolumeClaim", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
