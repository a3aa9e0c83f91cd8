// Package quota measures what ResourceQuotas count: one evaluator per resource kind
// (pods by their compute requests and limits, services by type and node ports, claims
// by their storage requests and class, and object counts for configmaps, secrets,
// replicationcontrollers, resourcequotas and any count/<resource>.<group>), each implementing k8s.io/apiserver's quota/v1 Evaluator. It
// is neutral ground: the apiserver's ResourceQuota admission plugin charges a write's
// usage with it, and the controller-manager's resource quota controller recounts whole
// namespaces with it. Mirrors k8s.io/kubernetes/pkg/quota/v1/evaluator/core and
// pkg/quota/v1/install.
package quota

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/utils/clock"
)

// legacyObjectCountAliases are the object counts quota knew before count/<resource>:
// "configmaps" counts what "count/configmaps" counts. Mirrors legacyObjectCountAliases.
var legacyObjectCountAliases = map[schema.GroupVersionResource]corev1.ResourceName{
	corev1.SchemeGroupVersion.WithResource("configmaps"):             corev1.ResourceConfigMaps,
	corev1.SchemeGroupVersion.WithResource("resourcequotas"):         corev1.ResourceQuotas,
	corev1.SchemeGroupVersion.WithResource("replicationcontrollers"): corev1.ResourceReplicationControllers,
	corev1.SchemeGroupVersion.WithResource("secrets"):                corev1.ResourceSecrets,
}

// NewEvaluators returns the evaluators of the resources quota knows specially: pods,
// services, persistentvolumeclaims, and the legacy object counts of configmaps,
// resourcequotas, replicationcontrollers and secrets. f lists a resource's objects for
// UsageStats (the controller's informers); nil is fine where only Usage is needed
// (admission). Mirrors core.NewEvaluators.
func NewEvaluators(f quota.ListerForResourceFunc, clk clock.Clock) []quota.Evaluator {
	result := []quota.Evaluator{NewPodEvaluator(f, clk), NewServiceEvaluator(f), NewPersistentVolumeClaimEvaluator(f)}
	for gvr, alias := range legacyObjectCountAliases {
		result = append(result, generic.NewObjectCountEvaluator(gvr.GroupResource(), listFunc(f, gvr), alias))
	}
	return result
}

// NewRegistry is a registry of NewEvaluators(f, clk); an admission plugin or controller
// adds object count evaluators to it as quotas name other resources.
func NewRegistry(f quota.ListerForResourceFunc, clk clock.Clock) quota.Registry {
	return generic.NewRegistry(NewEvaluators(f, clk))
}

// listFunc lists gvr through f, or is nil without f.
func listFunc(f quota.ListerForResourceFunc, gvr schema.GroupVersionResource) generic.ListFuncByNamespace {
	if f == nil {
		return nil
	}
	return generic.ListResourceUsingListerFunc(f, gvr)
}

// ignoredResources are never counted: virtual resources that are not stored. Mirrors
// install.ignoredResources.
var ignoredResources = map[schema.GroupResource]struct{}{
	{Group: "", Resource: "bindings"}:                                      {},
	{Group: "", Resource: "componentstatuses"}:                             {},
	{Group: "", Resource: "events"}:                                        {},
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:             {},
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:       {},
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:      {},
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:  {},
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}: {},
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:   {},
}

// IgnoredResources are the resources quota never counts (bindings, events, reviews).
// Mirrors install.DefaultIgnoredResources.
func IgnoredResources() map[schema.GroupResource]struct{} { return ignoredResources }
