package quota

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
)

// serviceObjectCountName is count/services.
var serviceObjectCountName = generic.ObjectCountQuotaResourceNameFor(corev1.Resource("services"))

// serviceResources are what the service evaluator counts.
var serviceResources = []corev1.ResourceName{
	serviceObjectCountName, corev1.ResourceServices, corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
}

// NewServiceEvaluator returns the evaluator of services: services and count/services,
// services.loadbalancers (1 per LoadBalancer) and services.nodeports (a NodePort or
// LoadBalancer Service's ports; for a LoadBalancer with allocateLoadBalancerNodePorts
// false, only ports naming a nodePort). f lists services for UsageStats (nil: Usage
// only). Mirrors NewServiceEvaluator.
func NewServiceEvaluator(f quota.ListerForResourceFunc) quota.Evaluator {
	return &serviceEvaluator{listFuncByNamespace: listFunc(f, corev1.SchemeGroupVersion.WithResource("services"))}
}

type serviceEvaluator struct {
	listFuncByNamespace generic.ListFuncByNamespace
}

var _ quota.Evaluator = &serviceEvaluator{}

// Constraints requires nothing of a service.
func (p *serviceEvaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

// GroupResource is services.
func (p *serviceEvaluator) GroupResource() schema.GroupResource { return corev1.Resource("services") }

// Handles creates and updates: an update may change the type.
func (p *serviceEvaluator) Handles(a admission.Attributes) bool {
	op := a.GetOperation()
	return a.GetSubresource() == "" && (op == admission.Create || op == admission.Update)
}

// Matches reports whether the quota limits a service resource (services have no scopes).
func (p *serviceEvaluator) Matches(rq *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(rq, item, p.MatchingResources, generic.MatchesNoScopeFunc)
}

// MatchingResources keeps the names of input the evaluator counts.
func (p *serviceEvaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	return quota.Intersection(input, serviceResources)
}

// MatchingScopes is empty: services match no scope.
func (p *serviceEvaluator) MatchingScopes(runtime.Object, []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

// UncoveredQuotaScopes is empty.
func (p *serviceEvaluator) UncoveredQuotaScopes([]corev1.ScopedResourceSelectorRequirement, []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

// Usage is what a service is charged. Errors: item is not a *v1.Service.
func (p *serviceEvaluator) Usage(item runtime.Object) (corev1.ResourceList, error) {
	svc, ok := item.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("expect *v1.Service, got %T", item)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	result := corev1.ResourceList{serviceObjectCountName: one, corev1.ResourceServices: one}
	ports := *resource.NewQuantity(int64(len(svc.Spec.Ports)), resource.DecimalSI)
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		result[corev1.ResourceServicesNodePorts] = ports
	case corev1.ServiceTypeLoadBalancer:
		if a := svc.Spec.AllocateLoadBalancerNodePorts; a != nil && !*a {
			n := 0
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					n++
				}
			}
			ports = *resource.NewQuantity(int64(n), resource.DecimalSI)
		}
		result[corev1.ResourceServicesNodePorts] = ports
		result[corev1.ResourceServicesLoadBalancers] = one
	}
	return result, nil
}

// UsageStats sums the usage of the namespace's services.
func (p *serviceEvaluator) UsageStats(options quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(options, p.listFuncByNamespace, generic.MatchesNoScopeFunc, p.Usage)
}
