package cronjob

import (
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves batch/v1 cronjobs (kubectl: cronjobs, cj, category all) with
// cronjobs/status. Objects live at /registry/cronjobs/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: batchv1.SchemeGroupVersion,
	Resource:     "cronjobs",
	SingularName: "cronjob",
	Kind:         "CronJob",
	ShortNames:   []string{"cj"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &batchv1.CronJob{} },
	NewListFunc:  func() runtime.Object { return &batchv1.CronJobList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "CronJob", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
