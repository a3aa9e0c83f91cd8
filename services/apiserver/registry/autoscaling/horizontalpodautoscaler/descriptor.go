package horizontalpodautoscaler

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves autoscaling/v2 horizontalpodautoscalers (kubectl: hpa, category
// all), the storage version, with horizontalpodautoscalers/status. Objects live at
// /registry/horizontalpodautoscalers/<namespace>/<name>. Mirrors kube's
// pkg/registry/autoscaling/horizontalpodautoscaler/storage.
var Descriptor = registry.Descriptor{
	GroupVersion: autoscalingv2.SchemeGroupVersion,
	Resource:     "horizontalpodautoscalers",
	SingularName: "horizontalpodautoscaler",
	Kind:         "HorizontalPodAutoscaler",
	ShortNames:   []string{"hpa"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
	NewListFunc:  func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "HorizontalPodAutoscaler", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// V1Descriptor serves autoscaling/v1 horizontalpodautoscalers, with
// horizontalpodautoscalers/status: the same objects as Descriptor, converted to and
// from autoscaling/v1 on every request and watch event (see scheme.ConvertHPAV2ToV1),
// and judged, once converted, by the same strategies.
var V1Descriptor = registry.Descriptor{
	GroupVersion: autoscalingv1.SchemeGroupVersion,
	Resource:     "horizontalpodautoscalers",
	SingularName: "horizontalpodautoscaler",
	Kind:         "HorizontalPodAutoscaler",
	ShortNames:   []string{"hpa"},
	Categories:   []string{"all"},
	NewFunc:      func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscaler{} },
	NewListFunc:  func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscalerList{} },
	Strategy:     Strategy{},
	StorageOf:    autoscalingv2.SchemeGroupVersion.WithResource("horizontalpodautoscalers").GroupResource(),
	ViewREST: func(view *registry.View) (rest.Storage, map[string]registry.Subresource, error) {
		return view, map[string]registry.Subresource{
			"status": {Kind: "HorizontalPodAutoscaler", Storage: view.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}
