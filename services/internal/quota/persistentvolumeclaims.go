package quota

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
)

// pvcObjectCountName is count/persistentvolumeclaims.
var pvcObjectCountName = generic.ObjectCountQuotaResourceNameFor(corev1.Resource("persistentvolumeclaims"))

// pvcResources are what a claim is charged, each also per storage class.
var pvcResources = []corev1.ResourceName{corev1.ResourcePersistentVolumeClaims, corev1.ResourceRequestsStorage}

// storageClassSuffix names a resource counted per storage class:
// <class>.storageclass.storage.k8s.io/<resource>, e.g.
// gold.storageclass.storage.k8s.io/requests.storage.
const storageClassSuffix = ".storageclass.storage.k8s.io/"

// betaStorageClassAnnotation names a claim's class before spec.storageClassName did.
const betaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"

// NewPersistentVolumeClaimEvaluator returns the evaluator of persistentvolumeclaims:
// persistentvolumeclaims and count/persistentvolumeclaims (1 a claim), requests.storage
// (its storage request, rounded up to a whole byte), and both per storage class
// (<class>.storageclass.storage.k8s.io/persistentvolumeclaims and …/requests.storage).
// f lists claims for UsageStats (nil: Usage only). Mirrors
// NewPersistentVolumeClaimEvaluator.
func NewPersistentVolumeClaimEvaluator(f quota.ListerForResourceFunc) quota.Evaluator {
	return &pvcEvaluator{listFuncByNamespace: listFunc(f, corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))}
}

type pvcEvaluator struct {
	listFuncByNamespace generic.ListFuncByNamespace
}

var _ quota.Evaluator = &pvcEvaluator{}

// Constraints requires nothing of a claim.
func (p *pvcEvaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

// GroupResource is persistentvolumeclaims.
func (p *pvcEvaluator) GroupResource() schema.GroupResource {
	return corev1.Resource("persistentvolumeclaims")
}

// Handles creates and updates (an update may change the request).
func (p *pvcEvaluator) Handles(a admission.Attributes) bool {
	op := a.GetOperation()
	return a.GetSubresource() == "" && (op == admission.Create || op == admission.Update)
}

// Matches reports whether the quota limits a claim resource (claims have no scopes).
func (p *pvcEvaluator) Matches(rq *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(rq, item, p.MatchingResources, generic.MatchesNoScopeFunc)
}

// MatchingResources keeps the names of input the evaluator counts, the per-class ones
// among them.
func (p *pvcEvaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	var result []corev1.ResourceName
	for _, name := range input {
		if name == pvcObjectCountName || quota.Contains(pvcResources, name) {
			result = append(result, name)
			continue
		}
		for _, r := range pvcResources {
			if strings.HasSuffix(string(name), storageClassSuffix+string(r)) {
				result = append(result, name)
				break
			}
		}
	}
	return result
}

// MatchingScopes is empty: claims match no scope.
func (p *pvcEvaluator) MatchingScopes(runtime.Object, []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

// UncoveredQuotaScopes is empty.
func (p *pvcEvaluator) UncoveredQuotaScopes([]corev1.ScopedResourceSelectorRequirement, []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

// Usage is what a claim is charged. Errors: item is not a *v1.PersistentVolumeClaim.
func (p *pvcEvaluator) Usage(item runtime.Object) (corev1.ResourceList, error) {
	pvc, ok := item.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil, fmt.Errorf("expect *v1.PersistentVolumeClaim, got %T", item)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	result := corev1.ResourceList{corev1.ResourcePersistentVolumeClaims: one, pvcObjectCountName: one}
	class := pvc.Annotations[betaStorageClassAnnotation]
	if _, ok := pvc.Annotations[betaStorageClassAnnotation]; !ok && pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	if class != "" {
		result[corev1.ResourceName(class+storageClassSuffix+string(corev1.ResourcePersistentVolumeClaims))] = one
	}
	if request, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		// Charged in whole bytes, which a quota's status can hold.
		rounded := request.DeepCopy()
		rounded.RoundUp(0)
		result[corev1.ResourceRequestsStorage] = rounded
		if class != "" {
			result[corev1.ResourceName(class+storageClassSuffix+string(corev1.ResourceRequestsStorage))] = rounded
		}
	}
	return result, nil
}

// UsageStats sums the usage of the namespace's claims.
func (p *pvcEvaluator) UsageStats(options quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(options, p.listFuncByNamespace, generic.MatchesNoScopeFunc, p.Usage)
}
