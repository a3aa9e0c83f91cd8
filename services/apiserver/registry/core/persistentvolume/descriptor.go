package persistentvolume

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves v1 persistentvolumes (kubectl: persistentvolumes, pv), cluster-scoped,
// with persistentvolumes/status, at /registry/persistentvolumes/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "persistentvolumes",
	SingularName: "persistentvolume",
	Kind:         "PersistentVolume",
	ShortNames:   []string{"pv"},
	NewFunc:      func() runtime.Object { return &corev1.PersistentVolume{} },
	NewListFunc:  func() runtime.Object { return &corev1.PersistentVolumeList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "PersistentVolume", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
