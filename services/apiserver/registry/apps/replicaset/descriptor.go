package replicaset

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/autoscaling/scale"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves apps/v1 replicasets (kubectl: replicasets, rs, category all) with replicasets/status and
// replicasets/scale (autoscaling/v1 Scale). Objects live at /registry/replicasets/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: appsv1.SchemeGroupVersion,
	Resource:     "replicasets",
	SingularName: "replicaset",
	Kind:         "ReplicaSet",
	ShortNames:   []string{"rs"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &appsv1.ReplicaSet{} },
	NewListFunc:  func() runtime.Object { return &appsv1.ReplicaSetList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "ReplicaSet", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
			"scale":  {Kind: "Scale", Storage: &scale.REST{Store: store, Scalable: Scalable{}}},
		}, nil
	},
}
