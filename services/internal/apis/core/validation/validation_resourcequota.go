package validation

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kube's messages for quantities and quota names (pkg/apis/core/validation).
const (
	isNegativeErrorMsg     = "must be greater than or equal to 0"
	isNotIntegerErrorMsg   = "must be an integer"
	isInvalidQuotaResource = "must be a standard resource for quota"
	fieldImmutableErrorMsg = "field is immutable"
)

// standardResources are the unprefixed resource names kube knows (helper.standardResources).
var standardResources = sets.New(
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourceConfigMaps, corev1.ResourcePersistentVolumeClaims,
	corev1.ResourceStorage, corev1.ResourceRequestsStorage,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
)

// standardQuotaResources are the unprefixed names a ResourceQuota may limit
// (helper.standardQuotaResources): standardResources less storage.
var standardQuotaResources = sets.New(
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsStorage, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourcePersistentVolumeClaims, corev1.ResourceConfigMaps,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
)

// integerResources are counted in whole units (helper.integerResources).
var integerResources = sets.New(
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourceConfigMaps, corev1.ResourcePersistentVolumeClaims,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
)

// standardResourceQuotaScopes are the scopes kube 1.32 serves (helper.IsStandardResourceQuotaScope).
var standardResourceQuotaScopes = sets.New(
	corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
	corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
	corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity,
)

// podComputeQuotaResources and podObjectCountQuotaResources are what pod scopes may
// limit (helper.IsResourceQuotaScopeValidForResource).
var (
	podObjectCountQuotaResources = sets.New(corev1.ResourcePods)
	podComputeQuotaResources     = sets.New(corev1.ResourceCPU, corev1.ResourceMemory,
		corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory)
)

// isQuotaHugePageResourceName reports hugepages-<size> and requests.hugepages-<size>.
func isQuotaHugePageResourceName(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(string(name), corev1.ResourceRequestsHugePagesPrefix)
}

// IsStandardQuotaResourceName reports whether name is an unprefixed resource a quota may
// limit: the compute resources (plain, requests.* and limits.*), the object counts
// (pods, services, secrets...), services.nodeports/loadbalancers and hugepages. Mirrors
// helper.IsStandardQuotaResourceName.
func IsStandardQuotaResourceName(name corev1.ResourceName) bool {
	return standardQuotaResources.Has(name) || isQuotaHugePageResourceName(name)
}

// IsIntegerResourceName reports whether name is counted in whole units: object counts,
// node ports, load balancers and extended resources. Mirrors helper.IsIntegerResourceName.
func IsIntegerResourceName(name corev1.ResourceName) bool {
	return integerResources.Has(name) || IsExtendedResourceName(name)
}

// isResourceQuotaScopeValidForResource mirrors helper.IsResourceQuotaScopeValidForResource:
// pod scopes limit only pods and pod compute resources, BestEffort only pods.
func isResourceQuotaScopeValidForResource(scope corev1.ResourceQuotaScope, name corev1.ResourceName) bool {
	switch scope {
	case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeNotBestEffort,
		corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return podObjectCountQuotaResources.Has(name) || podComputeQuotaResources.Has(name)
	case corev1.ResourceQuotaScopeBestEffort:
		return podObjectCountQuotaResources.Has(name)
	}
	return true
}

// validateResourceName checks a qualified resource name that, unprefixed, is a standard
// resource. Mirrors validateResourceName.
func validateResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(name)) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	if len(allErrs) != 0 {
		return allErrs
	}
	if !strings.Contains(string(name), "/") && !standardResources.Has(name) && !isQuotaHugePageResourceName(name) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, "must be a standard resource type or fully qualified"))
	}
	return allErrs
}

// ValidateResourceQuotaResourceName checks a name in a quota's hard or used list at
// fldPath: a qualified name; unprefixed, a standard quota resource (see
// IsStandardQuotaResourceName); prefixed names ("requests.example.com/gpu",
// "count/deployments.apps") pass. Mirrors ValidateResourceQuotaResourceName.
func ValidateResourceQuotaResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	allErrs := validateResourceName(name, fldPath)
	if len(allErrs) == 0 && !strings.Contains(string(name), "/") && !IsStandardQuotaResourceName(name) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, isInvalidQuotaResource))
	}
	return allErrs
}

// ValidateResourceQuantityValue checks q for resource name at fldPath: not negative, and
// whole for an integer resource (see IsIntegerResourceName). Mirrors
// ValidateResourceQuantityValue.
func ValidateResourceQuantityValue(name corev1.ResourceName, q resource.Quantity, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if q.Sign() < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath, q.String(), isNegativeErrorMsg))
	}
	if IsIntegerResourceName(name) && q.MilliValue()%1000 != 0 {
		allErrs = append(allErrs, field.Invalid(fldPath, q, isNotIntegerErrorMsg))
	}
	return allErrs
}

// validateQuotaResourceList checks each name and quantity of list under fldPath.
func validateQuotaResourceList(list corev1.ResourceList, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for k, v := range list {
		resPath := fldPath.Key(string(k))
		allErrs = append(allErrs, ValidateResourceQuotaResourceName(k, resPath)...)
		allErrs = append(allErrs, ValidateResourceQuantityValue(k, v, resPath)...)
	}
	return allErrs
}

// ValidateResourceQuota checks a ResourceQuota: metadata (a DNS subdomain name), its spec
// (see ValidateResourceQuotaSpec) and the names and quantities of status.hard and
// status.used. Mirrors ValidateResourceQuota.
func ValidateResourceQuota(rq *corev1.ResourceQuota) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&rq.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateResourceQuotaSpec(&rq.Spec, field.NewPath("spec"))...)
	allErrs = append(allErrs, validateQuotaResourceList(rq.Status.Hard, field.NewPath("status", "hard"))...)
	return append(allErrs, validateQuotaResourceList(rq.Status.Used, field.NewPath("status", "used"))...)
}

// ValidateResourceQuotaSpec checks spec at fld: spec.hard's names and quantities, the
// scopes (standard, valid for every standard resource limited, not conflicting:
// BestEffort with NotBestEffort, Terminating with NotTerminating) and the scope
// selector's expressions. Mirrors ValidateResourceQuotaSpec.
func ValidateResourceQuotaSpec(spec *corev1.ResourceQuotaSpec, fld *field.Path) field.ErrorList {
	allErrs := validateQuotaResourceList(spec.Hard, fld.Child("hard"))
	allErrs = append(allErrs, validateResourceQuotaScopes(spec, fld)...)
	return append(allErrs, validateScopeSelector(spec, fld)...)
}

// conflictingScopes reports whether scopes hold both of a pair kube refuses together.
func conflictingScopes(scopes sets.Set[corev1.ResourceQuotaScope]) bool {
	return scopes.HasAll(corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort) ||
		scopes.HasAll(corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating)
}

// validateResourceQuotaScopes mirrors validateResourceQuotaScopes: errors sit at
// spec.scopes with the whole list as the value.
func validateResourceQuotaScopes(spec *corev1.ResourceQuotaSpec, fld *field.Path) field.ErrorList {
	if len(spec.Scopes) == 0 {
		return nil
	}
	var allErrs field.ErrorList
	fldPath := fld.Child("scopes")
	hard := sets.KeySet(spec.Hard)
	scopeSet := sets.New[corev1.ResourceQuotaScope]()
	for _, scope := range spec.Scopes {
		if !standardResourceQuotaScopes.Has(scope) {
			allErrs = append(allErrs, field.Invalid(fldPath, spec.Scopes, "unsupported scope"))
		}
		for _, k := range sets.List(hard) {
			if IsStandardQuotaResourceName(k) && !isResourceQuotaScopeValidForResource(scope, k) {
				allErrs = append(allErrs, field.Invalid(fldPath, spec.Scopes, "unsupported scope applied to resource"))
			}
		}
		scopeSet.Insert(scope)
	}
	if conflictingScopes(scopeSet) {
		allErrs = append(allErrs, field.Invalid(fldPath, spec.Scopes, "conflicting scopes"))
	}
	return allErrs
}

// validateScopeSelector mirrors validateScopeSelector: each expression names a standard
// scope valid for the resources limited; the pod-state scopes take only Exists; In and
// NotIn need values, Exists and DoesNotExist take none.
func validateScopeSelector(spec *corev1.ResourceQuotaSpec, fld *field.Path) field.ErrorList {
	if spec.ScopeSelector == nil {
		return nil
	}
	var allErrs field.ErrorList
	fldPath := fld.Child("scopeSelector")
	exprPath := fldPath.Child("matchExpressions")
	hard := sets.KeySet(spec.Hard)
	scopeSet := sets.New[corev1.ResourceQuotaScope]()
	for _, req := range spec.ScopeSelector.MatchExpressions {
		if !standardResourceQuotaScopes.Has(req.ScopeName) {
			allErrs = append(allErrs, field.Invalid(exprPath.Child("scopeName"), req.ScopeName, "unsupported scope"))
		}
		for _, k := range sets.List(hard) {
			if IsStandardQuotaResourceName(k) && !isResourceQuotaScopeValidForResource(req.ScopeName, k) {
				allErrs = append(allErrs, field.Invalid(fldPath, spec.ScopeSelector, "unsupported scope applied to resource"))
			}
		}
		switch req.ScopeName {
		case corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeTerminating,
			corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
			if req.Operator != corev1.ScopeSelectorOpExists {
				allErrs = append(allErrs, field.Invalid(exprPath.Child("operator"), req.Operator,
					"must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"))
			}
		}
		switch req.Operator {
		case corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn:
			if len(req.Values) == 0 {
				allErrs = append(allErrs, field.Required(exprPath.Child("values"),
					"must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"))
			}
		case corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist:
			if len(req.Values) != 0 {
				allErrs = append(allErrs, field.Invalid(exprPath.Child("values"), req.Values,
					"must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"))
			}
		default:
			allErrs = append(allErrs, field.Invalid(exprPath.Child("operator"), req.Operator, "not a valid selector operator"))
		}
		scopeSet.Insert(req.ScopeName)
	}
	if conflictingScopes(scopeSet) {
		allErrs = append(allErrs, field.Invalid(fldPath, spec.ScopeSelector, "conflicting scopes"))
	}
	return allErrs
}

// ValidateResourceQuotaUpdate checks an update of the main resource: metadata rules, a
// valid spec, and scopes that did not change. Mirrors ValidateResourceQuotaUpdate.
func ValidateResourceQuotaUpdate(newRQ, oldRQ *corev1.ResourceQuota) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRQ.ObjectMeta, &oldRQ.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateResourceQuotaSpec(&newRQ.Spec, field.NewPath("spec"))...)
	oldScopes, newScopes := sets.New(oldRQ.Spec.Scopes...), sets.New(newRQ.Spec.Scopes...)
	if !oldScopes.Equal(newScopes) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "scopes"), newRQ.Spec.Scopes, fieldImmutableErrorMsg))
	}
	return allErrs
}

// ValidateResourceQuotaStatusUpdate checks a resourcequotas/status write: metadata rules,
// a resourceVersion (status is written only against what was read), and valid names and
// quantities in status.hard and status.used. Mirrors ValidateResourceQuotaStatusUpdate.
func ValidateResourceQuotaStatusUpdate(newRQ, oldRQ *corev1.ResourceQuota) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRQ.ObjectMeta, &oldRQ.ObjectMeta, field.NewPath("metadata"))
	if newRQ.ResourceVersion == "" {
		allErrs = append(allErrs, field.Required(field.NewPath("resourceVersion"), ""))
	}
	allErrs = append(allErrs, validateQuotaResourceList(newRQ.Status.Hard, field.NewPath("status", "hard"))...)
	return append(allErrs, validateQuotaResourceList(newRQ.Status.Used, field.NewPath("status", "used"))...)
}

// standardLimitRangeTypes are the LimitRange types kube knows.
var standardLimitRangeTypes = sets.New(corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim)

// validateLimitRangeTypeName mirrors validateLimitRangeTypeName: a qualified name that,
// unprefixed, is Pod, Container or PersistentVolumeClaim.
func validateLimitRangeTypeName(value corev1.LimitType, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(value)) {
		allErrs = append(allErrs, field.Invalid(fldPath, value, msg))
	}
	if len(allErrs) == 0 && !strings.Contains(string(value), "/") && !standardLimitRangeTypes.Has(value) {
		allErrs = append(allErrs, field.Invalid(fldPath, value, "must be a standard limit type or fully qualified"))
	}
	return allErrs
}

// validateLimitRangeResourceName checks a container resource name for Pod and Container
// limits, any standard or qualified name for the others. Mirrors
// validateLimitRangeResourceName.
func validateLimitRangeResourceName(limitType corev1.LimitType, name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	switch limitType {
	case corev1.LimitTypePod, corev1.LimitTypeContainer:
		return ValidateContainerResourceName(name, fldPath)
	}
	return validateResourceName(name, fldPath)
}

// isOvercommitAllowed reports whether a resource's request may be below its limit:
// native resources other than hugepages. Mirrors helper.IsOvercommitAllowed.
func isOvercommitAllowed(name corev1.ResourceName) bool {
	return IsNativeResource(name) && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

// ValidateLimitRange checks a LimitRange: metadata (a DNS subdomain name); per limit, a
// known type used once, valid resource names, no default or defaultRequest for type Pod,
// a storage min or max for type PersistentVolumeClaim; and per resource min <=
// defaultRequest <= default <= max, maxLimitRequestRatio >= 1 and within max/min, and
// default equal to defaultRequest for resources that cannot overcommit. Messages and
// paths (spec.limits[i].<field>[<resource>]) are kube's. Mirrors ValidateLimitRange.
func ValidateLimitRange(lr *corev1.LimitRange) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&lr.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	limitTypes := sets.New[corev1.LimitType]()
	fldPath := field.NewPath("spec", "limits")
	for i := range lr.Spec.Limits {
		idxPath := fldPath.Index(i)
		limit := &lr.Spec.Limits[i]
		allErrs = append(allErrs, validateLimitRangeTypeName(limit.Type, idxPath.Child("type"))...)
		if limitTypes.Has(limit.Type) {
			allErrs = append(allErrs, field.Duplicate(idxPath.Child("type"), limit.Type))
		}
		limitTypes.Insert(limit.Type)

		keys := sets.New[corev1.ResourceName]()
		collect := func(list corev1.ResourceList, child string) {
			for k := range list {
				allErrs = append(allErrs, validateLimitRangeResourceName(limit.Type, k, idxPath.Child(child).Key(string(k)))...)
				keys.Insert(k)
			}
		}
		collect(limit.Max, "max")
		collect(limit.Min, "min")
		defaults, defaultRequests := limit.Default, limit.DefaultRequest
		if limit.Type == corev1.LimitTypePod {
			if len(limit.Default) > 0 {
				allErrs = append(allErrs, field.Forbidden(idxPath.Child("default"), "may not be specified when `type` is 'Pod'"))
			}
			if len(limit.DefaultRequest) > 0 {
				allErrs = append(allErrs, field.Forbidden(idxPath.Child("defaultRequest"), "may not be specified when `type` is 'Pod'"))
			}
			defaults, defaultRequests = nil, nil
		} else {
			collect(limit.Default, "default")
			collect(limit.DefaultRequest, "defaultRequest")
		}
		if limit.Type == corev1.LimitTypePersistentVolumeClaim {
			_, minFound := limit.Min[corev1.ResourceStorage]
			_, maxFound := limit.Max[corev1.ResourceStorage]
			if !minFound && !maxFound {
				allErrs = append(allErrs, field.Required(idxPath.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
		collect(limit.MaxLimitRequestRatio, "maxLimitRequestRatio")

		for _, k := range sets.List(keys) {
			minQ, minFound := limit.Min[k]
			maxQ, maxFound := limit.Max[k]
			defQ, defFound := defaults[k]
			defReqQ, defReqFound := defaultRequests[k]
			ratio, ratioFound := limit.MaxLimitRequestRatio[k]
			key := string(k)
			if minFound && maxFound && minQ.Cmp(maxQ) > 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("min").Key(key), minQ, fmt.Sprintf("min value %s is greater than max value %s", minQ.String(), maxQ.String())))
			}
			if defReqFound && minFound && minQ.Cmp(defReqQ) > 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("defaultRequest").Key(key), defReqQ, fmt.Sprintf("min value %s is greater than default request value %s", minQ.String(), defReqQ.String())))
			}
			if defReqFound && maxFound && defReqQ.Cmp(maxQ) > 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("defaultRequest").Key(key), defReqQ, fmt.Sprintf("default request value %s is greater than max value %s", defReqQ.String(), maxQ.String())))
			}
			if defReqFound && defFound && defReqQ.Cmp(defQ) > 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("defaultRequest").Key(key), defReqQ, fmt.Sprintf("default request value %s is greater than default limit value %s", defReqQ.String(), defQ.String())))
			}
			if defFound && minFound && minQ.Cmp(defQ) > 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("default").Key(key), minQ, fmt.Sprintf("min value %s is greater than default value %s", minQ.String(), defQ.String())))
			}
			if defFound && maxFound && defQ.Cmp(maxQ) > 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("default").Key(key), maxQ, fmt.Sprintf("default value %s is greater than max value %s", defQ.String(), maxQ.String())))
			}
			if ratioFound && ratio.Cmp(*resource.NewQuantity(1, resource.DecimalSI)) < 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("maxLimitRequestRatio").Key(key), ratio, fmt.Sprintf("ratio %s is less than 1", ratio.String())))
			}
			if ratioFound && minFound && maxFound {
				ratioValue, minValue, maxValue := float64(ratio.Value()), minQ.Value(), maxQ.Value()
				if ratio.Value() < resource.MaxMilliValue && minValue < resource.MaxMilliValue && maxValue < resource.MaxMilliValue {
					ratioValue, minValue, maxValue = float64(ratio.MilliValue())/1000, minQ.MilliValue(), maxQ.MilliValue()
				}
				ratioLimit := float64(maxValue) / float64(minValue)
				if ratioValue > ratioLimit {
					allErrs = append(allErrs, field.Invalid(idxPath.Child("maxLimitRequestRatio").Key(key), ratio, fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), ratioLimit)))
				}
			}
			if !isOvercommitAllowed(k) && defFound && defReqFound && defQ.Cmp(defReqQ) != 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("defaultRequest").Key(key), defReqQ, fmt.Sprintf("default value %s must equal to defaultRequest value %s in %s", defQ.String(), defReqQ.String(), key)))
			}
		}
	}
	return allErrs
}
