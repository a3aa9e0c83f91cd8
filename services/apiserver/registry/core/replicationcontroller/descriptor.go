package replicationcontroller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/autoscaling/scale"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves v1 replicationcontrollers (kubectl: replicationcontrollers, rc,
// category all) with replicationcontrollers/status and replicationcontrollers/scale
// (autoscaling/v1 Scale). Objects live at /registry/controllers/<namespace>/<name>, kube's
// key for them.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "replicationcontrollers",
	SingularName: "replicationcontroller",
	Kind:         "ReplicationController",
	ShortNames:   []string{"rc"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &corev1.ReplicationController{} },
	NewListFunc:  func() runtime.Object { return &corev1.ReplicationControllerList{} },
	Strategy:     Strategy{},
	KeyRoot:      "/registry/controllers",
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "ReplicationController", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
			"scale":  {Kind: "Scale", Storage: &scale.REST{Store: store, Scalable: Scalable{}}},
		}, nil
	},
}
