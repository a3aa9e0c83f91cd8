package statefulset

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/autoscaling/scale"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves apps/v1 statefulsets (kubectl: statefulsets, sts, category all) with
// statefulsets/status and statefulsets/scale (autoscaling/v1 Scale). Objects live at
// /registry/statefulsets/<namespace>/<name>. Mirrors
// k8s.io/kubernetes/pkg/registry/apps/statefulset/storage.
var Descriptor = registry.Descriptor{
	GroupVersion: appsv1.SchemeGroupVersion,
	Resource:     "statefulsets",
	SingularName: "statefulset",
	Kind:         "StatefulSet",
	ShortNames:   []string{"sts"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &appsv1.StatefulSet{} },
	NewListFunc:  func() runtime.Object { return &appsv1.StatefulSetList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "StatefulSet", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
			"scale":  {Kind: "Scale", Storage: &scale.REST{Store: store, Scalable: Scalable{}}},
		}, nil
	},
}
