package apiserver_test

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/util/wait"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// newQuota is a ResourceQuota of hard whose status a controller has computed: hard
// copied from spec, used as given (zero for what used omits). Without the resource quota
// controller running, the test writes that status itself.
func newQuota(t *testing.T, cs kubernetes.Interface, name string, hard, used corev1.ResourceList) *corev1.ResourceQuota {
	t.Helper()
	ctx := context.Background()
	rq, err := cs.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Status.Hard = hard
	rq.Status.Used = corev1.ResourceList{}
	for k := range hard {
		rq.Status.Used[k] = resource.MustParse("0")
	}
	for k, v := range used {
		rq.Status.Used[k] = v
	}
	if rq, err = cs.CoreV1().ResourceQuotas("default").UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Admission reads quotas from the watch cache (as kube's from its informer): wait
	// until the cache holds this status, or the next write may meet the quota without it.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().ResourceQuotas("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		for _, q := range list.Items {
			if q.Name == name && q.ResourceVersion == rq.ResourceVersion {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("quota %s's status never reached the watch cache: %v", name, err)
	}
	return rq
}

// TestResourceQuotaAndLimitRangeValidation covers both resources' registries: kube's
// 422s, status cleared on create and kept apart from spec, and the quota's columns.
func TestResourceQuotaAndLimitRangeValidation(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	quotas, limits := cs.CoreV1().ResourceQuotas("default"), cs.CoreV1().LimitRanges("default")
	for _, tc := range []struct {
		name string
		spec corev1.ResourceQuotaSpec
		want string
	}{
		{"unknown resource", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"widgets": resource.MustParse("1")}},
			`spec.hard[widgets]: Invalid value: "widgets": must be a standard resource type or fully qualified`},
		{"not a quota resource", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"storage": resource.MustParse("1")}},
			`spec.hard[storage]: Invalid value: "storage": must be a standard resource for quota`},
		{"negative", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("-1")}},
			`spec.hard[pods]: Invalid value: "-1": must be greater than or equal to 0`},
		{"fractional count", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("500m")}},
			`spec.hard[pods]: Invalid value: "500m": must be an integer`},
		{"conflicting scopes", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("1")},
			Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort}},
			"spec.scopes: Invalid value: [\"BestEffort\",\"NotBestEffort\"]: conflicting scopes"},
		{"scope not for resource", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"services": resource.MustParse("1")},
			Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}},
			"unsupported scope applied to resource"},
		{"selector operator", corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("1")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{
				{ScopeName: corev1.ResourceQuotaScopeBestEffort, Operator: corev1.ScopeSelectorOpIn, Values: []string{"x"}}}}},
			"spec.scopeSelector.matchExpressions.operator: Invalid value: \"In\": must be 'Exist' when scope is any of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a 422 containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		item corev1.LimitRangeItem
		want string
	}{
		{"min above max", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Min: corev1.ResourceList{"cpu": resource.MustParse("2")}, Max: corev1.ResourceList{"cpu": resource.MustParse("1")}},
			"spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1"},
		{"default request above default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Default: corev1.ResourceList{"cpu": resource.MustParse("100m")}, DefaultRequest: corev1.ResourceList{"cpu": resource.MustParse("200m")}},
			"spec.limits[0].defaultRequest[cpu]: Invalid value: \"200m\": default request value 200m is greater than default limit value 100m"},
		{"ratio below one", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			MaxLimitRequestRatio: corev1.ResourceList{"cpu": resource.MustParse("500m")}},
			"ratio 500m is less than 1"},
		{"default on Pod", corev1.LimitRangeItem{Type: corev1.LimitTypePod, Default: corev1.ResourceList{"cpu": resource.MustParse("1")}},
			"spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'"},
		{"unknown type", corev1.LimitRangeItem{Type: "Volume"},
			"spec.limits[0].type: Invalid value: \"Volume\": must be a standard limit type or fully qualified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := limits.Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{tc.item}}}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a 422 containing %q", err, tc.want)
			}
		})
	}

	hard := corev1.ResourceList{"pods": resource.MustParse("3"), "limits.cpu": resource.MustParse("2")}
	rq, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: hard},
		Status: corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{"pods": resource.MustParse("99")}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rq.Status.Hard) != 0 {
		t.Errorf("status not cleared on create: %+v", rq.Status)
	}
	rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{"pods": resource.MustParse("1"), "limits.cpu": resource.MustParse("500m")}}
	rq.Spec.Hard = corev1.ResourceList{"pods": resource.MustParse("7")}
	if rq, err = quotas.UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rq.Spec.Hard["pods"]; got.String() != "3" || rq.Status.Used.Pods().String() != "1" {
		t.Errorf("a status write keeps spec and sets status: spec %v status %v", rq.Spec.Hard, rq.Status)
	}
	rq.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating}
	if _, err := quotas.Update(ctx, rq, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "field is immutable") {
		t.Errorf("changing scopes: got %v, want 422 field is immutable", err)
	}

	table := &metav1.Table{}
	if err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("resourcequotas").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if fmt.Sprint(cols) != "[Name Age Request Limit]" || len(table.Rows) != 1 ||
		table.Rows[0].Cells[2] != "pods: 1/3" || table.Rows[0].Cells[3] != "limits.cpu: 500m/2" {
		t.Errorf("table: columns %v rows %+v", cols, table.Rows)
	}
}

// TestResourceQuotaAdmission covers the ResourceQuota admission plugin: usage charged
// into status.used, kube's refusals, and the last unit taken by one of many concurrent
// creates only.
func TestResourceQuotaAdmission(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")

	newQuota(t, cs, "q", corev1.ResourceList{"pods": resource.MustParse("1"), "count/configmaps": resource.MustParse("5")}, nil)
	if _, err := pods.Create(ctx, newPod("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rq, err := cs.CoreV1().ResourceQuotas("default").Get(ctx, "q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rq.Status.Used["pods"]; got.String() != "1" {
		t.Errorf("status.used after one pod: %v, want pods=1", rq.Status.Used)
	}
	_, err = pods.Create(ctx, newPod("second"), metav1.CreateOptions{})
	const want = `pods "second" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("second pod: got %v, want 403 %q", err, want)
	}
	// A dry run is judged but charges nothing; configmaps count under count/configmaps.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rq, err = cs.CoreV1().ResourceQuotas("default").Get(ctx, "q", metav1.GetOptions{})
	if got := rq.Status.Used["count/configmaps"]; err != nil || got.String() != "1" {
		t.Errorf("count/configmaps after a dry run and a create: %v %v, want 1", rq.Status.Used, err)
	}

	// A quota on cpu limits makes every container say its cpu limit.
	newQuota(t, cs, "compute", corev1.ResourceList{"limits.cpu": resource.MustParse("1"), "requests.memory": resource.MustParse("1Gi")}, nil)
	_, err = pods.Create(ctx, newPod("unlimited"), metav1.CreateOptions{})
	const wantFailed = `pods "unlimited" is forbidden: failed quota: compute: must specify limits.cpu for: c; requests.memory for: c`
	if !apierrors.IsForbidden(err) || err.Error() != wantFailed {
		t.Errorf("pod without limits: got %v, want 403 %q", err, wantFailed)
	}
}

// TestResourceQuotaAdmissionClaims charges claims by count and storage request, overall
// and per storage class.
func TestResourceQuotaAdmissionClaims(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	newQuota(t, cs, "storage", corev1.ResourceList{
		"requests.storage": resource.MustParse("3Gi"),
		"gold.storageclass.storage.k8s.io/persistentvolumeclaims": resource.MustParse("1"),
	}, nil)
	claim := func(name, class, size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{"storage": resource.MustParse(size)}},
		}}
	}
	pvcs := cs.CoreV1().PersistentVolumeClaims("default")
	if _, err := pvcs.Create(ctx, claim("gold-1", "gold", "1Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := pvcs.Create(ctx, claim("gold-2", "gold", "1Gi"), metav1.CreateOptions{})
	const wantClass = `persistentvolumeclaims "gold-2" is forbidden: exceeded quota: storage, requested: gold.storageclass.storage.k8s.io/persistentvolumeclaims=1, ` +
		`used: gold.storageclass.storage.k8s.io/persistentvolumeclaims=1, limited: gold.storageclass.storage.k8s.io/persistentvolumeclaims=1`
	if !apierrors.IsForbidden(err) || err.Error() != wantClass {
		t.Errorf("second gold claim: got %v\nwant 403 %q", err, wantClass)
	}
	_, err = pvcs.Create(ctx, claim("big", "", "3Gi"), metav1.CreateOptions{})
	const wantStorage = `persistentvolumeclaims "big" is forbidden: exceeded quota: storage, requested: requests.storage=3Gi, used: requests.storage=1Gi, limited: requests.storage=3Gi`
	if !apierrors.IsForbidden(err) || err.Error() != wantStorage {
		t.Errorf("claim over the storage quota: got %v\nwant 403 %q", err, wantStorage)
	}
	if _, err := pvcs.Create(ctx, claim("small", "", "2Gi"), metav1.CreateOptions{}); err != nil {
		t.Errorf("claim within the quota: %v", err)
	}
}

// TestResourceQuotaAdmissionConcurrentCreates sends many creates at once against the
// last free unit of a quota: exactly one gets it, the others are refused as exceeding
// it, and status.used ends at the hard limit.
func TestResourceQuotaAdmissionConcurrentCreates(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	newQuota(t, cs, "one-pod", corev1.ResourceList{"pods": resource.MustParse("1")}, nil)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = cs.CoreV1().Pods("default").Create(ctx, newPod(fmt.Sprintf("p%d", i)), metav1.CreateOptions{})
		}()
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch {
		case err == nil:
			created++
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota: one-pod"):
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created != 1 || len(list.Items) != 1 {
		t.Fatalf("%d creates succeeded and %d pods exist, want exactly 1", created, len(list.Items))
	}
	rq, err := cs.CoreV1().ResourceQuotas("default").Get(ctx, "one-pod", metav1.GetOptions{})
	if got := rq.Status.Used["pods"]; err != nil || got.String() != "1" {
		t.Errorf("status.used %v %v, want pods=1", rq.Status.Used, err)
	}
}

// TestLimitRangerAdmission covers the LimitRanger plugin: Container defaults applied to
// containers and init containers with the annotation, requests taken from limits before
// defaults, and kube's refusals of min, max and ratio.
func TestLimitRangerAdmission(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	if _, err := cs.CoreV1().LimitRanges("default").Create(ctx, &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "limits"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:                 corev1.LimitTypeContainer,
			Default:              corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("256Mi")},
			DefaultRequest:       corev1.ResourceList{"cpu": resource.MustParse("200m"), "memory": resource.MustParse("128Mi")},
			Min:                  corev1.ResourceList{"cpu": resource.MustParse("100m")},
			Max:                  corev1.ResourceList{"memory": resource.MustParse("1Gi")},
			MaxLimitRequestRatio: corev1.ResourceList{"cpu": resource.MustParse("4")},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := newPod("defaulted")
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse("300m")}}}}
	pod, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, ic := pod.Spec.Containers[0].Resources, pod.Spec.InitContainers[0].Resources
	if c.Requests.Cpu().String() != "200m" || c.Limits.Cpu().String() != "500m" ||
		c.Requests.Memory().String() != "128Mi" || c.Limits.Memory().String() != "256Mi" {
		t.Errorf("container defaults: %+v", c)
	}
	if ic.Requests.Cpu().String() != "300m" || ic.Limits.Cpu().String() != "300m" || ic.Limits.Memory().String() != "256Mi" {
		t.Errorf("init container: a request is taken from its limit before defaults: %+v", ic)
	}
	const annotation = "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c; " +
		"memory request for init container init; memory limit for init container init"
	if got := pod.Annotations["kubernetes.io/limit-ranger"]; got != annotation {
		t.Errorf("annotation %q, want %q", got, annotation)
	}

	bad := newPod("bad")
	bad.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"cpu": resource.MustParse("50m")},
		Limits:   corev1.ResourceList{"cpu": resource.MustParse("1"), "memory": resource.MustParse("2Gi")},
	}
	_, err = pods.Create(ctx, bad, metav1.CreateOptions{})
	const want = `pods "bad" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, ` +
		`maximum memory usage per Container is 1Gi, but limit is 2Gi, cpu max limit to request ratio per Container is 4, but provided ratio is 20.000000]`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("got %v\nwant 403 %q", err, want)
	}
	// PersistentVolumeClaim limits bound a claim's storage request, on create and update.
	if _, err := cs.CoreV1().LimitRanges("default").Create(ctx, &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "storage"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypePersistentVolumeClaim,
			Min:  corev1.ResourceList{"storage": resource.MustParse("1Gi")},
			Max:  corev1.ResourceList{"storage": resource.MustParse("2Gi")},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// LimitRanger reads the watch cache (live only when it holds none for the
	// namespace): wait until it holds this second LimitRange.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().LimitRanges("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && len(list.Items) == 2, nil
	}); err != nil {
		t.Fatalf("the storage LimitRange never reached the watch cache: %v", err)
	}
	claim := func(name, size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(""),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{"storage": resource.MustParse(size)}},
		}}
	}
	pvcs := cs.CoreV1().PersistentVolumeClaims("default")
	for _, tc := range []struct{ size, want string }{
		{"512Mi", `persistentvolumeclaims "claim" is forbidden: minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 512Mi`},
		{"3Gi", `persistentvolumeclaims "claim" is forbidden: maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 3Gi`},
	} {
		if _, err := pvcs.Create(ctx, claim("claim", tc.size), metav1.CreateOptions{}); !apierrors.IsForbidden(err) || err.Error() != tc.want {
			t.Errorf("claim of %s: got %v\nwant 403 %q", tc.size, err, tc.want)
		}
	}
	if _, err := pvcs.Create(ctx, claim("claim", "1Gi"), metav1.CreateOptions{}); err != nil {
		t.Errorf("claim within the limits: %v", err)
	}
}
