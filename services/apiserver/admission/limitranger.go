package admission

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	resourcehelper "k8s.io/component-helpers/resource"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/internal/apis/core/defaults"
)

// LimitRangerAnnotation is the annotation LimitRanger leaves on a pod it defaulted,
// e.g. "LimitRanger plugin set: cpu request for container app; memory limit for init
// container setup".
const LimitRangerAnnotation = "kubernetes.io/limit-ranger"

// LimitRanger applies the LimitRanges of a pod's namespace when the pod is created:
// first (Admit, in the mutating phase) each container and init container without a
// request or limit of a resource gets the Container limit's defaultRequest and default,
// noted in the kubernetes.io/limit-ranger annotation; then (Validating, in the
// validating phase) every Container limit's min, max and maxLimitRequestRatio is checked
// on each container and every Pod limit's on the pod's effective requests and limits. A
// violation is a 403 listing kube's messages, e.g. `pods "x" is forbidden: [minimum cpu
// usage per Container is 100m, but request is 50m, maximum memory usage per Container
// is 1Gi, but limit is 2Gi]`. Pod updates are not looked at (containers' resources are
// immutable), nor subresources, nor objects being deleted. persistentvolumeclaims are
// not served, so PersistentVolumeClaim limits apply to nothing yet. Mirrors kube's
// LimitRanger admission plugin (plugin/pkg/admission/limitranger).
type LimitRanger struct {
	// LimitRanges lists LimitRanges (the registry), read from the watch cache as
	// kube's plugin reads its informer.
	LimitRanges rest.Lister
}

// Admit implements Interface: it defaults the pod's containers' resources.
func (l LimitRanger) Admit(ctx context.Context, a Attributes) error {
	return l.run(ctx, a, podMutateLimitFunc)
}

// Validating is the plugin's validating half, for the validating phase.
func (l LimitRanger) Validating() Interface { return limitRangerValidation{l} }

type limitRangerValidation struct{ l LimitRanger }

func (v limitRangerValidation) Admit(ctx context.Context, a Attributes) error {
	return v.l.run(ctx, a, podValidateLimitFunc)
}

// supportsAttributes mirrors DefaultLimitRangerActions.SupportsAttributes for the kinds
// skiff serves: pod creates.
func (LimitRanger) supportsAttributes(a Attributes) bool {
	return a.Subresource == "" && a.Resource.Group == "" && a.Resource.Resource == "pods" && a.Operation == Create
}

func (l LimitRanger) run(ctx context.Context, a Attributes, limitFn func(*corev1.LimitRange, *corev1.Pod) error) error {
	if !l.supportsAttributes(a) || l.LimitRanges == nil {
		return nil
	}
	if a.OldObject != nil {
		if m, err := meta.Accessor(a.OldObject); err == nil && m.GetDeletionTimestamp() != nil {
			return nil
		}
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest("Resource was marked with kind Pod but was unable to be converted")
	}
	list, err := l.LimitRanges.List(ctx, a.Namespace, &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return forbidden(a, fmt.Errorf("unable to %s %v at this time because there was an error enforcing limit ranges", a.Operation, a.Resource))
	}
	items := list.(*corev1.LimitRangeList).Items
	if len(items) > 0 {
		// kube-apiserver decodes a pod with its defaults (requests copied from limits
		// among them) before admission; skiff's strategy fills them after, so they are
		// filled here first, for the LimitRanges to see what kube's see.
		defaults.SetPodSpecDefaults(&pod.Spec)
	}
	for i := range items {
		if err := limitFn(&items[i], pod); err != nil {
			return forbidden(a, err)
		}
	}
	return nil
}

// forbidden is kube's admission.NewForbidden: a 403 on the object a names (its
// generateName before a name is generated, "Unknown" without either), err as the cause,
// unless err is already a 403.
func forbidden(a Attributes, err error) error {
	if apierrors.IsForbidden(err) {
		return err
	}
	name := a.Name
	if name == "" {
		name = "Unknown"
		if m, merr := meta.Accessor(a.Object); merr == nil {
			if m.GetName() != "" {
				name = m.GetName()
			} else if m.GetGenerateName() != "" {
				name = m.GetGenerateName()
			}
		}
	}
	return apierrors.NewForbidden(a.Resource.GroupResource(), name, err)
}

// defaultContainerResourceRequirements gathers the Container limits' defaultRequest (as
// requests) and default (as limits). Mirrors defaultContainerResourceRequirements.
func defaultContainerResourceRequirements(lr *corev1.LimitRange) corev1.ResourceRequirements {
	req := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, limit := range lr.Spec.Limits {
		if limit.Type != corev1.LimitTypeContainer {
			continue
		}
		for k, v := range limit.DefaultRequest {
			req.Requests[k] = v.DeepCopy()
		}
		for k, v := range limit.Default {
			req.Limits[k] = v.DeepCopy()
		}
	}
	return req
}

// mergeContainerResources sets the defaults c lacks and appends what it set to
// annotations ("cpu, memory request for container app"). Mirrors
// mergeContainerResources.
func mergeContainerResources(c *corev1.Container, defaults *corev1.ResourceRequirements, prefix string, annotations []string) []string {
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	var setRequests, setLimits []string
	for k, v := range defaults.Limits {
		if _, found := c.Resources.Limits[k]; !found {
			c.Resources.Limits[k] = v.DeepCopy()
			setLimits = append(setLimits, string(k))
		}
	}
	for k, v := range defaults.Requests {
		if _, found := c.Resources.Requests[k]; !found {
			c.Resources.Requests[k] = v.DeepCopy()
			setRequests = append(setRequests, string(k))
		}
	}
	if len(setRequests) > 0 {
		sort.Strings(setRequests)
		annotations = append(annotations, strings.Join(setRequests, ", ")+fmt.Sprintf(" request for %s %s", prefix, c.Name))
	}
	if len(setLimits) > 0 {
		sort.Strings(setLimits)
		annotations = append(annotations, strings.Join(setLimits, ", ")+fmt.Sprintf(" limit for %s %s", prefix, c.Name))
	}
	return annotations
}

// podMutateLimitFunc defaults pod's containers and init containers from lr. Mirrors
// PodMutateLimitFunc.
func podMutateLimitFunc(lr *corev1.LimitRange, pod *corev1.Pod) error {
	defaults := defaultContainerResourceRequirements(lr)
	var annotations []string
	for i := range pod.Spec.Containers {
		annotations = mergeContainerResources(&pod.Spec.Containers[i], &defaults, "container", annotations)
	}
	for i := range pod.Spec.InitContainers {
		annotations = mergeContainerResources(&pod.Spec.InitContainers[i], &defaults, "init container", annotations)
	}
	if len(annotations) > 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[LimitRangerAnnotation] = "LimitRanger plugin set: " + strings.Join(annotations, "; ")
	}
	return nil
}

// podValidateLimitFunc checks pod against lr's Container and Pod limits, every
// violation in one aggregate. Mirrors PodValidateLimitFunc.
func podValidateLimitFunc(lr *corev1.LimitRange, pod *corev1.Pod) error {
	var errs []error
	check := func(limit *corev1.LimitRangeItem, requests, limits corev1.ResourceList) {
		limitType := string(limit.Type)
		for k, v := range limit.Min {
			if err := minConstraint(limitType, string(k), v, requests, limits); err != nil {
				errs = append(errs, err)
			}
		}
		for k, v := range limit.Max {
			if err := maxConstraint(limitType, string(k), v, requests, limits); err != nil {
				errs = append(errs, err)
			}
		}
		for k, v := range limit.MaxLimitRequestRatio {
			if err := limitRequestRatioConstraint(limitType, string(k), v, requests, limits); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for i := range lr.Spec.Limits {
		limit := &lr.Spec.Limits[i]
		switch limit.Type {
		case corev1.LimitTypeContainer:
			for j := range pod.Spec.Containers {
				c := &pod.Spec.Containers[j]
				check(limit, c.Resources.Requests, c.Resources.Limits)
			}
			for j := range pod.Spec.InitContainers {
				c := &pod.Spec.InitContainers[j]
				check(limit, c.Resources.Requests, c.Resources.Limits)
			}
		case corev1.LimitTypePod:
			// kube's podRequests/podLimits: the spec's containers (init containers and
			// sidecars as the scheduler counts them), without the pod overhead.
			opts := resourcehelper.PodResourcesOptions{ExcludeOverhead: true, SkipPodLevelResources: true}
			check(limit, resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// requestLimitEnforcedValues returns the three quantities at one precision, milli when
// none overflows. Mirrors requestLimitEnforcedValues.
func requestLimitEnforcedValues(requestQ, limitQ, enforcedQ resource.Quantity) (request, limit, enforced int64) {
	request, limit, enforced = requestQ.Value(), limitQ.Value(), enforcedQ.Value()
	if request <= resource.MaxMilliValue && limit <= resource.MaxMilliValue && enforced <= resource.MaxMilliValue {
		request, limit, enforced = requestQ.MilliValue(), limitQ.MilliValue(), enforcedQ.MilliValue()
	}
	return request, limit, enforced
}

// minConstraint mirrors minConstraint: a request is required and neither it nor a limit
// may be below enforced.
func minConstraint(limitType, name string, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, reqExists := request[corev1.ResourceName(name)]
	lim, limExists := limit[corev1.ResourceName(name)]
	observedReq, observedLim, enforcedValue := requestLimitEnforcedValues(req, lim, enforced)
	if !reqExists {
		return fmt.Errorf("minimum %s usage per %s is %s.  No request is specified", name, limitType, enforced.String())
	}
	if observedReq < enforcedValue {
		return fmt.Errorf("minimum %s usage per %s is %s, but request is %s", name, limitType, enforced.String(), req.String())
	}
	if limExists && observedLim < enforcedValue {
		return fmt.Errorf("minimum %s usage per %s is %s, but limit is %s", name, limitType, enforced.String(), lim.String())
	}
	return nil
}

// maxConstraint mirrors maxConstraint: a limit is required and neither it nor a request
// may be above enforced.
func maxConstraint(limitType, name string, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, reqExists := request[corev1.ResourceName(name)]
	lim, limExists := limit[corev1.ResourceName(name)]
	observedReq, observedLim, enforcedValue := requestLimitEnforcedValues(req, lim, enforced)
	if !limExists {
		return fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", name, limitType, enforced.String())
	}
	if observedLim > enforcedValue {
		return fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", name, limitType, enforced.String(), lim.String())
	}
	if reqExists && observedReq > enforcedValue {
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, limitType, enforced.String(), req.String())
	}
	return nil
}

// limitRequestRatioConstraint mirrors limitRequestRatioConstraint: both set, non-zero,
// and limit/request at most enforced.
func limitRequestRatioConstraint(limitType, name string, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, reqExists := request[corev1.ResourceName(name)]
	lim, limExists := limit[corev1.ResourceName(name)]
	observedReq, observedLim, _ := requestLimitEnforcedValues(req, lim, enforced)
	if !reqExists || observedReq == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", name, limitType, enforced.String())
	}
	if !limExists || observedLim == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", name, limitType, enforced.String())
	}
	observedRatio := float64(observedLim) / float64(observedReq)
	display := observedRatio
	maxRatio := float64(enforced.Value())
	if enforced.Value() <= resource.MaxMilliValue {
		observedRatio *= 1000
		maxRatio = float64(enforced.MilliValue())
	}
	if observedRatio > maxRatio {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", name, limitType, enforced.String(), display)
	}
	return nil
}
