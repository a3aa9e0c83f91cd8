package quota

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	quota "k8s.io/apiserver/pkg/quota/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestPodUsage(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: list("cpu", "2")}}},
		Containers: []corev1.Container{
			{Name: "a", Resources: corev1.ResourceRequirements{Requests: list("cpu", "500m", "memory", "1Gi", "example.com/gpu", "1"), Limits: list("cpu", "1")}},
			{Name: "b", Resources: corev1.ResourceRequirements{Requests: list("cpu", "250m")}},
		},
	}}
	got, err := PodUsageFunc(pod, clk)
	if err != nil {
		t.Fatal(err)
	}
	// The init container's 2 cpus exceed the containers' 750m: the pod asks for 2.
	want := list("count/pods", "1", "pods", "1", "cpu", "2", "requests.cpu", "2", "limits.cpu", "1",
		"memory", "1Gi", "requests.memory", "1Gi", "requests.example.com/gpu", "1")
	if !quota.Equals(got, want) {
		t.Errorf("usage %v\nwant %v", got, want)
	}

	for name, mutate := range map[string]func(*corev1.Pod){
		"succeeded": func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"past its grace period": func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: now.Add(-time.Minute)}, ptr.To(int64(30))
		},
	} {
		p := pod.DeepCopy()
		mutate(p)
		if got, _ := PodUsageFunc(p, clk); !quota.Equals(got, list("count/pods", "1")) {
			t.Errorf("%s: usage %v, want count/pods only", name, got)
		}
	}

	err = NewPodEvaluator(nil, clk).Constraints([]corev1.ResourceName{"limits.cpu", "requests.memory", "pods"}, pod)
	if want := "must specify limits.cpu for: b,init; requests.memory for: b,init"; err == nil || err.Error() != want {
		t.Errorf("constraints: %v, want %q", err, want)
	}
}

func TestPodScopes(t *testing.T) {
	bestEffort := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}, PriorityClassName: "high"}}
	burstable := &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: ptr.To(int64(10)),
		Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Requests: list("memory", "1Mi")}}}}}
	sel := func(scope corev1.ResourceQuotaScope, op corev1.ScopeSelectorOperator, values ...string) corev1.ScopedResourceSelectorRequirement {
		return corev1.ScopedResourceSelectorRequirement{ScopeName: scope, Operator: op, Values: values}
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		sel  corev1.ScopedResourceSelectorRequirement
		want bool
	}{
		{bestEffort, sel(corev1.ResourceQuotaScopeBestEffort, corev1.ScopeSelectorOpExists), true},
		{burstable, sel(corev1.ResourceQuotaScopeBestEffort, corev1.ScopeSelectorOpExists), false},
		{burstable, sel(corev1.ResourceQuotaScopeNotBestEffort, corev1.ScopeSelectorOpExists), true},
		{burstable, sel(corev1.ResourceQuotaScopeTerminating, corev1.ScopeSelectorOpExists), true},
		{bestEffort, sel(corev1.ResourceQuotaScopeNotTerminating, corev1.ScopeSelectorOpExists), true},
		{bestEffort, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpIn, "high", "low"), true},
		{bestEffort, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpNotIn, "high"), false},
		{burstable, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpExists), false},
	} {
		if got, err := podMatchesScopeFunc(tc.sel, tc.pod); err != nil || got != tc.want {
			t.Errorf("%+v on %s: %v %v, want %v", tc.sel, tc.pod.Spec.PriorityClassName, got, err, tc.want)
		}
	}
}

func TestServiceUsage(t *testing.T) {
	e := NewServiceEvaluator(nil)
	ports := []corev1.ServicePort{{Port: 80}, {Port: 443, NodePort: 30443}}
	for _, tc := range []struct {
		spec corev1.ServiceSpec
		want corev1.ResourceList
	}{
		{corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports}, list("count/services", "1", "services", "1")},
		{corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: ports}, list("count/services", "1", "services", "1", "services.nodeports", "2")},
		{corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports},
			list("count/services", "1", "services", "1", "services.nodeports", "2", "services.loadbalancers", "1")},
		{corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports, AllocateLoadBalancerNodePorts: ptr.To(false)},
			list("count/services", "1", "services", "1", "services.nodeports", "1", "services.loadbalancers", "1")},
	} {
		got, err := e.Usage(&corev1.Service{Spec: tc.spec})
		if err != nil || !quota.Equals(got, tc.want) {
			t.Errorf("%s: usage %v %v, want %v", tc.spec.Type, got, err, tc.want)
		}
	}
}

func TestPersistentVolumeClaimUsage(t *testing.T) {
	e := NewPersistentVolumeClaimEvaluator(nil)
	claim := func(class *string, annotation, request string) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}}}}
		if annotation != "" {
			pvc.Annotations = map[string]string{"volume.beta.kubernetes.io/storage-class": annotation}
		}
		return pvc
	}
	for _, tc := range []struct {
		name string
		pvc  *corev1.PersistentVolumeClaim
		want corev1.ResourceList
	}{
		{"no class", claim(nil, "", "1Gi"), list("count/persistentvolumeclaims", "1", "persistentvolumeclaims", "1", "requests.storage", "1Gi")},
		{"a class", claim(ptr.To("gold"), "", "1Gi"), list("count/persistentvolumeclaims", "1", "persistentvolumeclaims", "1", "requests.storage", "1Gi",
			"gold.storageclass.storage.k8s.io/persistentvolumeclaims", "1", "gold.storageclass.storage.k8s.io/requests.storage", "1Gi")},
		{"the beta annotation wins", claim(ptr.To("gold"), "silver", "2Gi"), list("count/persistentvolumeclaims", "1", "persistentvolumeclaims", "1", "requests.storage", "2Gi",
			"silver.storageclass.storage.k8s.io/persistentvolumeclaims", "1", "silver.storageclass.storage.k8s.io/requests.storage", "2Gi")},
		{"a fraction of a byte rounds up", claim(nil, "", "1500m"), list("count/persistentvolumeclaims", "1", "persistentvolumeclaims", "1", "requests.storage", "2")},
	} {
		got, err := e.Usage(tc.pvc)
		if err != nil || !quota.Equals(got, tc.want) {
			t.Errorf("%s: usage %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	names := []corev1.ResourceName{"requests.storage", "gold.storageclass.storage.k8s.io/requests.storage", "pods", "requests.cpu", "count/persistentvolumeclaims"}
	if got := e.MatchingResources(names); len(got) != 3 {
		t.Errorf("matching resources of %v: %v, want the storage, per-class storage and count ones", names, got)
	}
}
