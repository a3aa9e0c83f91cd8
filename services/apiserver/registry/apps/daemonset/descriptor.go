package daemonset

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves apps/v1 daemonsets (kubectl: daemonsets, ds, category all) with
// daemonsets/status. Objects live at /registry/daemonsets/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: appsv1.SchemeGroupVersion,
	Resource:     "daemonsets",
	SingularName: "daemonset",
	Kind:         "DaemonSet",
	ShortNames:   []string{"ds"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &appsv1.DaemonSet{} },
	NewListFunc:  func() runtime.Object { return &appsv1.DaemonSetList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "DaemonSet", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
