package job

import (
	batchv1 "k8s.io/api/batch/v1"

	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"

	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves batch/v1 jobs (kubectl: jobs, category all) with jobs/status. Objects live at /registry/jobs/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: batchv1.SchemeGroupVersion,
	Resource:     "jobs",
	SingularName: "job",
	Kind:         "Job",

	Categories:  []string{"all"},
	NewFunc:     func() runtime.Object { return &batchv1.Job{} },
	NewListFunc: func() runtime.Object { return &batchv1.JobList{} },
	Strategy:    Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "Job", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
