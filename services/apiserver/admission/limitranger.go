package admission

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/lru"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/internal/apis/core/defaults"
)

// LimitRangerAnnotation is the annotation LimitRanger leaves on a pod it defaulted,
// e.g. "LimitRanger plugin set: cpu request for container app; memory limit for init
// container setup".
const LimitRangerAnnotation = "kubernetes.io/limit-ranger"

// LimitRanger applies the LimitRanges of a namespace to the pods and
// PersistentVolumeClaims written in it: first (Admit, in the mutating phase) each
// container and init container of a new pod without a request or limit of a resource
// gets the Container limit's defaultRequest and default, noted in the
// kubernetes.io/limit-ranger annotation; then (Validating, in the validating phase) every
// Container limit's min, max and maxLimitRequestRatio is checked on each container, every
// Pod limit's on the pod's effective requests and limits, and every
// PersistentVolumeClaim limit's min and max on a claim's requests (on create and
// update). A violation is a 403 listing kube's messages, e.g. `pods "x" is forbidden:
// [minimum cpu usage per Container is 100m, but request is 50m, maximum memory usage per
// Container is 1Gi, but limit is 2Gi]`. Pod updates are not looked at (containers'
// resources are immutable), nor subresources, nor objects being deleted.
//
// LimitRanges are read from the watch cache, as kube's plugin reads its informer; when
// the cache holds none for the namespace, they are listed live from etcd, that answer
// kept for liveLookupTTL, so a pod created right after its namespace's first LimitRange
// still meets it. Mirrors kube's LimitRanger admission plugin
// (plugin/pkg/admission/limitranger). Build it with NewLimitRanger.
type LimitRanger struct {
	// LimitRanges lists LimitRanges (the registry).
	LimitRanges rest.Lister
	live        *lru.Cache
	group       *singleflight.Group
}

// liveLookupTTL is how long a live list of a namespace's LimitRanges stands in for the
// watch cache's empty answer; kube's liveTTL.
const liveLookupTTL = 30 * time.Second

// liveLookupEntry is one namespace's live answer and when it stops counting.
type liveLookupEntry struct {
	expiry time.Time
	items  []corev1.LimitRange
}

// NewLimitRanger returns the plugin over lister, with kube's live-lookup cache of 10,000
// namespaces.
func NewLimitRanger(lister rest.Lister) LimitRanger {
	return LimitRanger{LimitRanges: lister, live: lru.New(10000), group: &singleflight.Group{}}
}

// Admit implements Interface: it defaults the pod's containers' resources.
func (l LimitRanger) Admit(ctx context.Context, a Attributes) error {
	return l.run(ctx, a, limitFuncs{pod: podMutateLimitFunc})
}

// Validating is the plugin's validating half, for the validating phase.
func (l LimitRanger) Validating() Interface { return limitRangerValidation{l} }

type limitRangerValidation struct{ l LimitRanger }

func (v limitRangerValidation) Admit(ctx context.Context, a Attributes) error {
	return v.l.run(ctx, a, limitFuncs{pod: podValidateLimitFunc, pvc: persistentVolumeClaimValidateLimitFunc})
}

// supportsAttributes mirrors DefaultLimitRangerActions.SupportsAttributes: pod creates
// and PersistentVolumeClaim creates and updates, no subresource.
func (LimitRanger) supportsAttributes(a Attributes) bool {
	if a.Subresource != "" || a.Resource.Group != "" {
		return false
	}
	switch a.Resource.Resource {
	case "pods":
		return a.Operation == Create
	case "persistentvolumeclaims":
		return a.Operation == Create || a.Operation == Update
	}
	return false
}

// limitFuncs are one phase's work on each kind: kube's MutateLimit and ValidateLimit.
type limitFuncs struct {
	pod func(*corev1.LimitRange, *corev1.Pod) error
	pvc func(*corev1.LimitRange, *corev1.PersistentVolumeClaim) error
}

func (l LimitRanger) run(ctx context.Context, a Attributes, fns limitFuncs) error {
	if !l.supportsAttributes(a) || l.LimitRanges == nil {
		return nil
	}
	if a.OldObject != nil {
		if m, err := meta.Accessor(a.OldObject); err == nil && m.GetDeletionTimestamp() != nil {
			return nil
		}
	}
	var pod *corev1.Pod
	var pvc *corev1.PersistentVolumeClaim
	switch obj := a.Object.(type) {
	case *corev1.Pod:
		pod = obj
	case *corev1.PersistentVolumeClaim:
		pvc = obj
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("Resource was marked with kind %s but was unable to be converted", kindOf(a.Resource.Resource)))
	}
	if pvc != nil && fns.pvc == nil || pod != nil && fns.pod == nil {
		return nil
	}
	items, err := l.limitRanges(ctx, a.Namespace)
	if err != nil {
		return forbidden(a, fmt.Errorf("unable to %s %v at this time because there was an error enforcing limit ranges", a.Operation, a.Resource))
	}
	if len(items) > 0 && pod != nil {
		// kube-apiserver decodes a pod with its defaults (requests copied from limits
		// among them) before admission; skiff's strategy fills them after, so they are
		// filled here first, for the LimitRanges to see what kube's see.
		defaults.SetPodSpecDefaults(&pod.Spec)
	}
	for i := range items {
		if pod != nil {
			err = fns.pod(&items[i], pod)
		} else {
			err = fns.pvc(&items[i], pvc)
		}
		if err != nil {
			return forbidden(a, err)
		}
	}
	return nil
}

func kindOf(resource string) string {
	if resource == "persistentvolumeclaims" {
		return "PersistentVolumeClaim"
	}
	return "Pod"
}

// limitRanges returns namespace's LimitRanges: the watch cache's, or, when it holds
// none, a live list from etcd kept for liveLookupTTL (concurrent lookups of a namespace
// share one list). Mirrors GetLimitRanges.
func (l LimitRanger) limitRanges(ctx context.Context, namespace string) ([]corev1.LimitRange, error) {
	list, err := l.LimitRanges.List(ctx, namespace, &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	if items := list.(*corev1.LimitRangeList).Items; len(items) > 0 || l.live == nil {
		return items, nil
	}
	if v, ok := l.live.Get(namespace); ok && v.(liveLookupEntry).expiry.After(time.Now()) {
		return v.(liveLookupEntry).items, nil
	}
	v, err, _ := l.group.Do(namespace, func() (any, error) {
		list, err := l.LimitRanges.List(ctx, namespace, &metainternalversion.ListOptions{})
		if err != nil {
			return nil, err
		}
		entry := liveLookupEntry{expiry: time.Now().Add(liveLookupTTL), items: list.(*corev1.LimitRangeList).Items}
		l.live.Add(namespace, entry)
		return entry, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(liveLookupEntry).items, nil
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

// persistentVolumeClaimValidateLimitFunc checks a claim's requests (its limits are not
// the user's ask) against lr's PersistentVolumeClaim limits' min and max; claims get no
// defaults. Mirrors PersistentVolumeClaimValidateLimitFunc.
func persistentVolumeClaimValidateLimitFunc(lr *corev1.LimitRange, pvc *corev1.PersistentVolumeClaim) error {
	var errs []error
	for i := range lr.Spec.Limits {
		limit := &lr.Spec.Limits[i]
		if limit.Type != corev1.LimitTypePersistentVolumeClaim {
			continue
		}
		limitType := string(limit.Type)
		for k, v := range limit.Min {
			if err := minConstraint(limitType, string(k), v, pvc.Spec.Resources.Requests, corev1.ResourceList{}); err != nil {
				errs = append(errs, err)
			}
		}
		for k, v := range limit.Max {
			if err := maxRequestConstraint(limitType, string(k), v, pvc.Spec.Resources.Requests); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return utilerrors.NewAggregate(errs)
}

// maxRequestConstraint mirrors maxRequestConstraint: a request is required and may not
// be above enforced.
func maxRequestConstraint(limitType, name string, enforced resource.Quantity, request corev1.ResourceList) error {
	req, ok := request[corev1.ResourceName(name)]
	observedReq, _, enforcedValue := requestLimitEnforcedValues(req, resource.Quantity{}, enforced)
	if !ok {
		return fmt.Errorf("maximum %s usage per %s is %s.  No request is specified", name, limitType, enforced.String())
	}
	if observedReq > enforcedValue {
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, limitType, enforced.String(), req.String())
	}
	return nil
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
