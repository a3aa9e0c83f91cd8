package deployment

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/autoscaling/scale"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves apps/v1 deployments (kubectl: deployments, deploy, category all) with deployments/status and
// deployments/scale (autoscaling/v1 Scale). Objects live at /registry/deployments/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: appsv1.SchemeGroupVersion,
	Resource:     "deployments",
	SingularName: "deployment",
	Kind:         "Deployment",
	ShortNames:   []string{"deploy"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &appsv1.Deployment{} },
	NewListFunc:  func() runtime.Object { return &appsv1.DeploymentList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "Deployment", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
			"scale":  {Kind: "Scale", Storage: &scale.REST{Store: store, Scalable: Scalable{}}},
		}, nil
	},
}
