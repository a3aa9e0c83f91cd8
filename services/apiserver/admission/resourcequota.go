package admission

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/sets"
	k8sadmission "k8s.io/apiserver/pkg/admission"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/utils/clock"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/internal/apis/core/defaults"
	skiffquota "skiff.dev/services/internal/quota"
)

// ResourceQuota enforces the ResourceQuotas of a namespace on every create and update
// that changes what they count (see skiff.dev/services/internal/quota): the write's
// usage is added to each matching quota's status.used, and the write is refused with
// 403 when that would pass status.hard (`exceeded quota: q, requested: pods=1, used:
// pods=1, limited: pods=1`), when a pod leaves a limited cpu or memory resource unset
// (`failed quota: q: must specify limits.cpu for: app`), or when the quota's usage is
// not yet known (`status unknown for quota: q, resources: pods`). A quota counts only
// once the resource quota controller has written its status.hard. The charge is written
// into status.used before the write proceeds, each quota updated with its
// resourceVersion as precondition: on a conflict the quotas are read again from etcd and
// the request judged again (three times at most, then the conflict is returned), so
// concurrent writes can never both take the last unit. Requests in one namespace are
// judged one at a time in this apiserver, as kube's per-namespace work queue does. A
// dry run is judged and charges nothing. Usage charged for a write that then fails is
// given back by the controller's next recount. Mirrors the ResourceQuota admission
// plugin (k8s.io/apiserver/pkg/admission/plugin/resourcequota) without its
// configuration file (no limited resources). Build it with NewResourceQuota.
type ResourceQuota struct {
	quotas   rest.Lister
	status   rest.Updater
	registry quota.Registry
	ignored  map[string]bool
	locks    [64]sync.Mutex
	// updatedQuotas holds the quotas this plugin wrote, newer than the watch cache may
	// be yet (kube's updatedQuotas LRU).
	updatedQuotas *utilcache.LRUExpireCache
}

// quotaRetries is how many times a request is judged again after its charge met a
// conflict (kube's checkQuotas retries).
const quotaRetries = 3

// NewResourceQuota returns the plugin reading ResourceQuotas from quotas (the watch
// cache first, etcd after a conflict) and charging through status (resourcequotas/status).
func NewResourceQuota(quotas rest.Lister, status rest.Updater) *ResourceQuota {
	ignored := map[string]bool{}
	for gr := range skiffquota.IgnoredResources() {
		ignored[gr.String()] = true
	}
	return &ResourceQuota{
		quotas: quotas, status: status, ignored: ignored,
		registry:      skiffquota.NewRegistry(nil, clock.RealClock{}),
		updatedQuotas: utilcache.NewLRUExpireCache(1000),
	}
}

// Admit implements Interface.
func (q *ResourceQuota) Admit(ctx context.Context, a Attributes) error {
	if a.Subresource != "" || a.Namespace == "" || a.Object == nil || (a.Operation != Create && a.Operation != Update) {
		return nil
	}
	gr := a.Resource.GroupResource()
	if q.ignored[gr.String()] {
		return nil
	}
	evaluator := q.registry.Get(gr)
	if evaluator == nil {
		// Any other resource is counted by object count, count/<resource>.<group>.
		evaluator = generic.NewObjectCountEvaluator(gr, nil, "")
		q.registry.Add(evaluator)
	}
	obj, old := a.Object, a.OldObject
	if pod, ok := obj.(*corev1.Pod); ok {
		// kube judges the pod as decoded, with its defaults (requests from limits).
		pod = pod.DeepCopy()
		defaults.SetPodSpecDefaults(&pod.Spec)
		obj = pod
	}
	attrs := k8sadmission.NewAttributesRecord(obj, old, a.Kind, a.Namespace, a.Name, a.Resource, a.Subresource,
		k8sadmission.Operation(a.Operation), a.Options, a.DryRun, a.User(ctx))
	if !evaluator.Handles(attrs) {
		return nil
	}
	mu := q.lock(a.Namespace)
	mu.Lock()
	defer mu.Unlock()

	quotas, err := q.getQuotas(ctx, a.Namespace, false)
	if err != nil {
		return err
	}
	for retries := quotaRetries; len(quotas) > 0; retries-- {
		newQuotas, err := checkRequest(quotas, a, obj, old, evaluator)
		if err != nil {
			return err
		}
		if a.DryRun {
			return nil
		}
		failed, lastErr := sets.New[string](), error(nil)
		for i := range quotas {
			if quota.Equals(quotas[i].Status.Used, newQuotas[i].Status.Used) {
				continue
			}
			if err := q.updateQuotaStatus(ctx, &newQuotas[i]); err != nil {
				failed.Insert(newQuotas[i].Name)
				lastErr = err
			}
		}
		if failed.Len() == 0 {
			return nil
		}
		if retries <= 0 {
			return lastErr
		}
		// Judge again against the quotas whose charge failed, as etcd holds them now.
		live, err := q.getQuotas(ctx, a.Namespace, true)
		if err != nil {
			return err
		}
		quotas = quotas[:0]
		for _, rq := range live {
			if failed.Has(rq.Name) {
				quotas = append(quotas, rq)
			}
		}
	}
	return nil
}

// lock is the lock of namespace's requests.
func (q *ResourceQuota) lock(namespace string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace))
	return &q.locks[h.Sum32()%uint32(len(q.locks))]
}

// getQuotas lists namespace's quotas: from the watch cache, each replaced by the copy
// this plugin last wrote when that is newer, or, live, from etcd. Mirrors
// quotaAccessor.GetQuotas.
func (q *ResourceQuota) getQuotas(ctx context.Context, namespace string, live bool) ([]corev1.ResourceQuota, error) {
	opts := &metainternalversion.ListOptions{}
	if !live {
		opts.ResourceVersion = "0"
	}
	list, err := q.quotas.List(ctx, namespace, opts)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("error resolving quota: %v", err))
	}
	items := list.(*corev1.ResourceQuotaList).Items
	if !live {
		for i := range items {
			if v, ok := q.updatedQuotas.Get(namespace + "/" + items[i].Name); ok {
				if updated := v.(*corev1.ResourceQuota); updated.UID == items[i].UID && newerRV(updated.ResourceVersion, items[i].ResourceVersion) {
					items[i] = *updated.DeepCopy()
				}
			}
		}
	}
	return items, nil
}

// newerRV reports whether resourceVersion a is after b (etcd revisions).
func newerRV(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// updateQuotaStatus writes rq's status with its resourceVersion as precondition and
// remembers what was stored.
func (q *ResourceQuota) updateQuotaStatus(ctx context.Context, rq *corev1.ResourceQuota) error {
	out, _, err := q.status.Update(ctx, rq.Namespace, rq.Name, rest.DefaultUpdatedObjectInfo(rq), &metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	if stored, ok := out.(*corev1.ResourceQuota); ok {
		q.updatedQuotas.Add(stored.Namespace+"/"+stored.Name, stored, 30*time.Second)
	}
	return nil
}

// checkRequest judges one write against quotas and returns them with the write's usage
// added to the status.used of those it counts against. Errors are 403s with kube's
// messages. Mirrors CheckRequest.
func checkRequest(quotas []corev1.ResourceQuota, a Attributes, obj, old runtime.Object, evaluator quota.Evaluator) ([]corev1.ResourceQuota, error) {
	var interesting []int
	for i := range quotas {
		rq := &quotas[i]
		match, err := evaluator.Matches(rq, obj)
		if err != nil {
			return nil, forbidden(a, err)
		}
		if !match {
			continue
		}
		restricted := evaluator.MatchingResources(quota.ResourceNames(rq.Status.Hard))
		if err := evaluator.Constraints(restricted, obj); err != nil {
			return nil, forbidden(a, fmt.Errorf("failed quota: %s: %v", rq.Name, err))
		}
		if !hasUsageStats(rq, restricted) {
			return nil, forbidden(a, fmt.Errorf("status unknown for quota: %s, resources: %s", rq.Name, prettyPrintResourceNames(restricted)))
		}
		interesting = append(interesting, i)
	}
	if len(interesting) == 0 {
		return quotas, nil
	}
	delta, err := evaluator.Usage(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if negative := quota.IsNegative(delta); len(negative) > 0 {
		return nil, forbidden(a, fmt.Errorf("quota usage is negative for resource(s): %s", prettyPrintResourceNames(negative)))
	}
	if a.Operation == Update && old != nil {
		// Charge only what the update adds, unless it is a create-on-update.
		if m, err := meta.Accessor(old); err == nil && m.GetResourceVersion() != "" {
			prev, err := evaluator.Usage(old)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			delta = quota.SubtractWithNonNegativeResult(delta, prev)
		}
	}
	delta = quota.RemoveZeros(delta)
	if len(delta) == 0 {
		return quotas, nil
	}
	out := make([]corev1.ResourceQuota, len(quotas))
	for i := range quotas {
		quotas[i].DeepCopyInto(&out[i])
	}
	for _, i := range interesting {
		rq := &out[i]
		hard := quota.ResourceNames(rq.Status.Hard)
		requested := quota.Mask(delta, hard)
		newUsage := quota.Add(rq.Status.Used, requested)
		maskedNewUsage := quota.Mask(newUsage, quota.ResourceNames(requested))
		if allowed, exceeded := quota.LessThanOrEqual(maskedNewUsage, rq.Status.Hard); !allowed {
			return nil, forbidden(a, fmt.Errorf("exceeded quota: %s, requested: %s, used: %s, limited: %s", rq.Name,
				prettyPrint(quota.Mask(requested, exceeded)), prettyPrint(quota.Mask(rq.Status.Used, exceeded)), prettyPrint(quota.Mask(rq.Status.Hard, exceeded))))
		}
		rq.Status.Used = newUsage
	}
	return out, nil
}

// hasUsageStats reports whether status.used holds every resource of status.hard among
// interesting. Mirrors hasUsageStats.
func hasUsageStats(rq *corev1.ResourceQuota, interesting []corev1.ResourceName) bool {
	set := quota.ToSet(interesting)
	for name := range rq.Status.Hard {
		if !set.Has(string(name)) {
			continue
		}
		if _, found := rq.Status.Used[name]; !found {
			return false
		}
	}
	return true
}

// prettyPrint renders a list as "name=quantity,..." sorted by name. Mirrors prettyPrint.
func prettyPrint(item corev1.ResourceList) string {
	keys := make([]string, 0, len(item))
	for name := range item {
		keys = append(keys, string(name))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, key := range keys {
		q := item[corev1.ResourceName(key)]
		parts = append(parts, key+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// prettyPrintResourceNames renders names sorted and comma-separated.
func prettyPrintResourceNames(names []corev1.ResourceName) string {
	s := make([]string, 0, len(names))
	for _, n := range names {
		s = append(s, string(n))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}
