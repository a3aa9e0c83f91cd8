package quota

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"

	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// podObjectCountName is count/pods.
var podObjectCountName = generic.ObjectCountQuotaResourceNameFor(corev1.Resource("pods"))

// podResources are what the pod evaluator counts by name. Mirrors podResources.
var podResources = []corev1.ResourceName{
	podObjectCountName,
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
	corev1.ResourcePods,
}

// podResourcePrefixes are the prefixes of the other names it counts (hugepages).
var podResourcePrefixes = []string{corev1.ResourceHugePagesPrefix, corev1.ResourceRequestsHugePagesPrefix}

// validationSet are the resources every container must set once a quota limits them: a
// backward-compatibility rule kube keeps for cpu and memory only. Mirrors validationSet.
var validationSet = sets.NewString(
	string(corev1.ResourceCPU), string(corev1.ResourceMemory),
	string(corev1.ResourceRequestsCPU), string(corev1.ResourceRequestsMemory),
	string(corev1.ResourceLimitsCPU), string(corev1.ResourceLimitsMemory),
)

// NewPodEvaluator returns the evaluator of pods: pods and count/pods, cpu, memory and
// ephemeral-storage (plain and requests.*), limits.*, hugepages and requests.<extended>.
// A pod in a terminal phase, or past its deletion grace period on clk, counts only in
// count/pods. f lists pods for UsageStats (nil: Usage only). Mirrors NewPodEvaluator.
func NewPodEvaluator(f quota.ListerForResourceFunc, clk clock.Clock) quota.Evaluator {
	return &podEvaluator{listFuncByNamespace: listFunc(f, corev1.SchemeGroupVersion.WithResource("pods")), clock: clk}
}

type podEvaluator struct {
	listFuncByNamespace generic.ListFuncByNamespace
	clock               clock.Clock
}

var _ quota.Evaluator = &podEvaluator{}

// Constraints requires every container and init container to set each cpu or memory
// resource a quota limits; the error reads "must specify limits.cpu for: a,b;
// requests.memory for: a". Mirrors podEvaluator.Constraints.
func (p *podEvaluator) Constraints(required []corev1.ResourceName, item runtime.Object) error {
	pod, ok := item.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("expect *v1.Pod, got %T", item)
	}
	requiredSet := quota.ToSet(required).Intersection(validationSet)
	missing := map[string]sets.String{}
	check := func(c *corev1.Container) {
		have := quota.ToSet(quota.ResourceNames(podComputeUsageHelper(c.Resources.Requests, c.Resources.Limits)))
		for _, name := range requiredSet.Difference(have).List() {
			if missing[name] == nil {
				missing[name] = sets.NewString()
			}
			missing[name].Insert(c.Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		check(&pod.Spec.InitContainers[i])
	}
	if len(missing) == 0 {
		return nil
	}
	names := make([]string, 0, len(missing))
	for name := range missing {
		names = append(names, name)
	}
	sort.Strings(names)
	msgs := make([]string, 0, len(names))
	for _, name := range names {
		msgs = append(msgs, fmt.Sprintf("%s for: %s", name, strings.Join(missing[name].List(), ",")))
	}
	return fmt.Errorf("must specify %s", strings.Join(msgs, "; "))
}

// GroupResource is pods.
func (p *podEvaluator) GroupResource() schema.GroupResource { return corev1.Resource("pods") }

// Handles pod creation only: a pod's resources cannot change after (kube 1.32 without
// InPlacePodVerticalScaling).
func (p *podEvaluator) Handles(a admission.Attributes) bool {
	return a.GetSubresource() == "" && a.GetOperation() == admission.Create
}

// Matches reports whether the quota limits a pod resource and every one of its scopes
// matches pod.
func (p *podEvaluator) Matches(rq *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(rq, item, p.MatchingResources, podMatchesScopeFunc)
}

// MatchingResources keeps the names of input the evaluator counts.
func (p *podEvaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	result := quota.Intersection(input, podResources)
	for _, name := range input {
		if quota.ContainsPrefix(podResourcePrefixes, name) || isExtendedResourceNameForQuota(name) {
			result = append(result, name)
		}
	}
	return result
}

// MatchingScopes returns the selectors of scopeSelectors the pod matches.
func (p *podEvaluator) MatchingScopes(item runtime.Object, scopeSelectors []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	matched := []corev1.ScopedResourceSelectorRequirement{}
	for _, selector := range scopeSelectors {
		match, err := podMatchesScopeFunc(selector, item)
		if err != nil {
			return []corev1.ScopedResourceSelectorRequirement{}, fmt.Errorf("error on matching scope %v: %v", selector, err)
		}
		if match {
			matched = append(matched, selector)
		}
	}
	return matched, nil
}

// UncoveredQuotaScopes returns the limited scopes no matched quota scope covers.
func (p *podEvaluator) UncoveredQuotaScopes(limited, matched []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	uncovered := []corev1.ScopedResourceSelectorRequirement{}
	for _, selector := range limited {
		covered := false
		for _, m := range matched {
			if m.ScopeName == selector.ScopeName {
				covered = true
				break
			}
		}
		if !covered {
			uncovered = append(uncovered, selector)
		}
	}
	return uncovered, nil
}

// Usage is PodUsageFunc on the evaluator's clock.
func (p *podEvaluator) Usage(item runtime.Object) (corev1.ResourceList, error) {
	return PodUsageFunc(item, p.clock)
}

// UsageStats sums the usage of the namespace's pods matching options' scopes.
func (p *podEvaluator) UsageStats(options quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(options, p.listFuncByNamespace, podMatchesScopeFunc, p.Usage)
}

// isExtendedResourceNameForQuota reports requests.<extended>, the only form quota takes
// extended resources in. Mirrors isExtendedResourceNameForQuota.
func isExtendedResourceNameForQuota(name corev1.ResourceName) bool {
	return !corevalidation.IsNativeResource(name) && strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix)
}

// podComputeUsageHelper turns requests and limits into quota names: pods 1, cpu and
// requests.cpu from the cpu request, limits.cpu from its limit, the same for memory and
// ephemeral-storage, hugepages-* and requests.hugepages-*, requests.<extended>. Mirrors
// podComputeUsageHelper.
func podComputeUsageHelper(requests, limits corev1.ResourceList) corev1.ResourceList {
	result := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	for _, r := range []struct{ name, requests, limits corev1.ResourceName }{
		{corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := requests[r.name]; ok {
			result[r.name] = q
			result[r.requests] = q
		}
		if q, ok := limits[r.name]; ok {
			result[r.limits] = q
		}
	}
	for name, q := range requests {
		if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			result[name] = q
			result[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = q
		}
		if corevalidation.IsExtendedResourceName(name) {
			result[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = q
		}
	}
	return result
}

// PodUsageFunc is what a pod is charged: count/pods 1 always (the object is stored), and,
// unless the pod is terminal or past its deletion grace period (see QuotaV1Pod), pods 1
// and its effective requests and limits (containers summed, init containers and sidecars
// as the scheduler sees them, overhead added). Errors: obj is not a *v1.Pod. Mirrors
// PodUsageFunc.
func PodUsageFunc(obj runtime.Object, clk clock.Clock) (corev1.ResourceList, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return corev1.ResourceList{}, fmt.Errorf("expect *v1.Pod, got %T", obj)
	}
	result := corev1.ResourceList{podObjectCountName: *resource.NewQuantity(1, resource.DecimalSI)}
	if !QuotaV1Pod(pod, clk) {
		return result, nil
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	return quota.Add(result, podComputeUsageHelper(requests, limits)), nil
}

// QuotaV1Pod reports whether a pod counts against compute quota: not Succeeded or
// Failed, and not marked for deletion longer ago than its grace period (a pod stuck on a
// lost node). Mirrors QuotaV1Pod.
func QuotaV1Pod(pod *corev1.Pod, clk clock.Clock) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		grace := time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		if clk.Now().After(pod.DeletionTimestamp.Time.Add(grace)) {
			return false
		}
	}
	return true
}

// podMatchesScopeFunc reports whether pod is in a scope: Terminating (an
// activeDeadlineSeconds), BestEffort (no cpu or memory request or limit anywhere),
// their Not* opposites, PriorityClass (by the selector over its priorityClassName) and
// CrossNamespacePodAffinity. Mirrors podMatchesScopeFunc.
func podMatchesScopeFunc(selector corev1.ScopedResourceSelectorRequirement, object runtime.Object) (bool, error) {
	pod, ok := object.(*corev1.Pod)
	if !ok {
		return false, fmt.Errorf("expect *v1.Pod, got %T", object)
	}
	switch selector.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return isTerminating(pod), nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return !isTerminating(pod), nil
	case corev1.ResourceQuotaScopeBestEffort:
		return isBestEffort(pod), nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !isBestEffort(pod), nil
	case corev1.ResourceQuotaScopePriorityClass:
		if selector.Operator == corev1.ScopeSelectorOpExists {
			return pod.Spec.PriorityClassName != "", nil
		}
		return podMatchesSelector(pod, selector)
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return usesCrossNamespacePodAffinity(pod), nil
	}
	return false, nil
}

func isTerminating(pod *corev1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// isBestEffort reports the BestEffort QoS class: no container or init container sets a
// non-zero cpu or memory request or limit (qos.GetPodQOS).
func isBestEffort(pod *corev1.Pod) bool {
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[name]; ok && !q.IsZero() {
				return false
			}
			if q, ok := c.Resources.Limits[name]; ok && !q.IsZero() {
				return false
			}
		}
	}
	return true
}

// podMatchesSelector matches the selector against {PriorityClass: <priorityClassName>}.
func podMatchesSelector(pod *corev1.Pod, selector corev1.ScopedResourceSelectorRequirement) (bool, error) {
	sel, err := ScopedResourceSelectorRequirementsAsSelector(selector)
	if err != nil {
		return false, fmt.Errorf("failed to parse and convert selector: %v", err)
	}
	var m map[string]string
	if pod.Spec.PriorityClassName != "" {
		m = map[string]string{string(corev1.ResourceQuotaScopePriorityClass): pod.Spec.PriorityClassName}
	}
	return sel.Matches(labels.Set(m)), nil
}

// ScopedResourceSelectorRequirementsAsSelector turns a scope selector expression into a
// label selector keyed by the scope name. Errors: an unknown operator or invalid values.
// Mirrors helper.ScopedResourceSelectorRequirementsAsSelector.
func ScopedResourceSelectorRequirementsAsSelector(ssr corev1.ScopedResourceSelectorRequirement) (labels.Selector, error) {
	var op selection.Operator
	switch ssr.Operator {
	case corev1.ScopeSelectorOpIn:
		op = selection.In
	case corev1.ScopeSelectorOpNotIn:
		op = selection.NotIn
	case corev1.ScopeSelectorOpExists:
		op = selection.Exists
	case corev1.ScopeSelectorOpDoesNotExist:
		op = selection.DoesNotExist
	default:
		return nil, fmt.Errorf("%q is not a valid scope selector operator", ssr.Operator)
	}
	r, err := labels.NewRequirement(string(ssr.ScopeName), op, ssr.Values)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*r), nil
}

// usesCrossNamespacePodAffinity reports an affinity or anti-affinity term naming
// namespaces or a namespace selector.
func usesCrossNamespacePodAffinity(pod *corev1.Pod) bool {
	if pod.Spec.Affinity == nil {
		return false
	}
	cross := func(t *corev1.PodAffinityTerm) bool { return len(t.Namespaces) != 0 || t.NamespaceSelector != nil }
	check := func(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) bool {
		for i := range required {
			if cross(&required[i]) {
				return true
			}
		}
		for i := range preferred {
			if cross(&preferred[i].PodAffinityTerm) {
				return true
			}
		}
		return false
	}
	if a := pod.Spec.Affinity.PodAffinity; a != nil && check(a.RequiredDuringSchedulingIgnoredDuringExecution, a.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	if a := pod.Spec.Affinity.PodAntiAffinity; a != nil && check(a.RequiredDuringSchedulingIgnoredDuringExecution, a.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	return false
}
