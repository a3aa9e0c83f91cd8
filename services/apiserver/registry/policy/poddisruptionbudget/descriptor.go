package poddisruptionbudget

import (
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves policy/v1 poddisruptionbudgets (kubectl: poddisruptionbudgets, pdb)
// with poddisruptionbudgets/status. Objects live at
// /registry/poddisruptionbudgets/<namespace>/<name>. Mirrors kube's
// pkg/registry/policy/poddisruptionbudget/storage.
var Descriptor = registry.Descriptor{
	GroupVersion: policyv1.SchemeGroupVersion,
	Resource:     "poddisruptionbudgets",
	SingularName: "poddisruptionbudget",
	Kind:         "PodDisruptionBudget",
	ShortNames:   []string{"pdb"},
	NewFunc:      func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
	NewListFunc:  func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "PodDisruptionBudget", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
