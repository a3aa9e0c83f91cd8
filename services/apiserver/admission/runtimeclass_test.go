package admission_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/registry/node/runtimeclass"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/etcd3"
)

func TestRuntimeClassAdmission(t *testing.T) {
	d := runtimeclass.Descriptor
	classes := d.NewStore(etcd3.New(etcdClient, scheme.StorageCodec, d.NewFunc))
	overhead := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("1Mi")}
	sandboxed := corev1.Toleration{Key: "sandbox", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, rc := range []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "rca-plain"}, Handler: "runc"},
		{ObjectMeta: metav1.ObjectMeta{Name: "rca-overhead"}, Handler: "runc", Overhead: &nodev1.Overhead{PodFixed: overhead}},
		{ObjectMeta: metav1.ObjectMeta{Name: "rca-scheduled"}, Handler: "runsc", Scheduling: &nodev1.Scheduling{
			NodeSelector: map[string]string{"sandbox": "gvisor"}, Tolerations: []corev1.Toleration{sandboxed}}},
	} {
		if _, err := classes.Create(context.Background(), "", rc, &metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	plugin := admission.RuntimeClass{RuntimeClasses: classes}
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	pod := func(class string, change ...func(*corev1.Pod)) *corev1.Pod {
		p := newPod("rca", "", "")
		p.GenerateName = "test-runtimeclass-"
		if class != "" {
			p.Spec.RuntimeClassName = ptr.To(class)
		}
		for _, c := range change {
			c(p)
		}
		return p
	}
	admit := func(p *corev1.Pod, op admission.Operation) error {
		return plugin.Admit(context.Background(), admission.Attributes{Operation: op, Resource: pods, Namespace: "rca", Name: p.Name, Object: p})
	}

	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		op      admission.Operation
		forbids string // the whole 403 message; "" admits
		want    func(*corev1.Pod) bool
	}{
		{name: "a pod naming no class is untouched", pod: pod(""), want: func(p *corev1.Pod) bool { return p.Spec.Overhead == nil && p.Spec.NodeSelector == nil }},
		{name: "a pod naming a class that does not exist is refused", pod: pod("rca-missing"),
			forbids: `pods is forbidden: pod rejected: RuntimeClass "rca-missing" not found`},
		{name: "a named pod is refused by name", pod: pod("rca-missing", func(p *corev1.Pod) { p.Name = "web" }),
			forbids: `pods "web" is forbidden: pod rejected: RuntimeClass "rca-missing" not found`},
		{name: "a class without overhead leaves the pod's unset", pod: pod("rca-plain"), want: func(p *corev1.Pod) bool { return p.Spec.Overhead == nil }},
		{name: "a class's overhead becomes the pod's", pod: pod("rca-overhead"),
			want: func(p *corev1.Pod) bool { return apiequality.Semantic.DeepEqual(p.Spec.Overhead, overhead) }},
		{name: "a pod that sets the class's overhead itself is admitted", pod: pod("rca-overhead", func(p *corev1.Pod) { p.Spec.Overhead = overhead.DeepCopy() }),
			want: func(p *corev1.Pod) bool { return apiequality.Semantic.DeepEqual(p.Spec.Overhead, overhead) }},
		{name: "a pod that sets another overhead is refused", pod: pod("rca-overhead", func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}), forbids: `pods is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead`},
		{name: "a pod that sets an overhead its class does not define is refused", pod: pod("rca-plain", func(p *corev1.Pod) { p.Spec.Overhead = overhead.DeepCopy() }),
			forbids: `pods is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead`},
		{name: "a pod without a class may not set an overhead", pod: pod("", func(p *corev1.Pod) { p.Spec.Overhead = overhead.DeepCopy() }),
			forbids: `pods is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead`},
		{name: "the class's nodeSelector and tolerations are merged into the pod's", pod: pod("rca-scheduled", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"zone": "a"}
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "x"}}
		}), want: func(p *corev1.Pod) bool {
			return apiequality.Semantic.DeepEqual(p.Spec.NodeSelector, map[string]string{"zone": "a", "sandbox": "gvisor"}) &&
				apiequality.Semantic.DeepEqual(p.Spec.Tolerations, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "x"}, sandboxed})
		}},
		{name: "a pod without a nodeSelector gets the class's", pod: pod("rca-scheduled"),
			want: func(p *corev1.Pod) bool {
				return apiequality.Semantic.DeepEqual(p.Spec.NodeSelector, map[string]string{"sandbox": "gvisor"})
			}},
		{name: "a pod's toleration covering the class's keeps the pod's alone", pod: pod("rca-scheduled", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}), want: func(p *corev1.Pod) bool {
			return apiequality.Semantic.DeepEqual(p.Spec.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}})
		}},
		{name: "a pod selecting another value of the class's key is refused", pod: pod("rca-scheduled", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"sandbox": "kata"}
		}), forbids: `pods is forbidden: conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor; pod.spec.nodeSelector[sandbox] = kata`},
		{name: "updates are not looked at", pod: pod("rca-missing"), op: admission.Update},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := tc.op
			if op == "" {
				op = admission.Create
			}
			err := admit(tc.pod, op)
			switch {
			case tc.forbids != "":
				if !apierrors.IsForbidden(err) || err.Error() != tc.forbids {
					t.Errorf("got %v, want 403 %q", err, tc.forbids)
				}
			case err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != nil && !tc.want(tc.pod):
				t.Errorf("pod spec after admission: %+v", tc.pod.Spec)
			}
		})
	}
}

func TestMergeTolerations(t *testing.T) {
	secs := func(s int64) *int64 { return &s }
	noExec := func(key string, seconds *int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
	}
	for _, tc := range []struct {
		name          string
		first, second []corev1.Toleration
		want          []corev1.Toleration
	}{
		{"disjoint ones are all kept, first then second",
			[]corev1.Toleration{noExec("a", nil)}, []corev1.Toleration{noExec("b", nil)}, []corev1.Toleration{noExec("a", nil), noExec("b", nil)}},
		{"of two equal ones the first is kept",
			[]corev1.Toleration{noExec("a", secs(5))}, []corev1.Toleration{noExec("a", secs(5))}, []corev1.Toleration{noExec("a", secs(5))}},
		{"a longer tolerationSeconds covers a shorter one",
			[]corev1.Toleration{noExec("a", secs(5))}, []corev1.Toleration{noExec("a", secs(50))}, []corev1.Toleration{noExec("a", secs(50))}},
		{"no tolerationSeconds covers any",
			[]corev1.Toleration{noExec("a", nil)}, []corev1.Toleration{noExec("a", secs(50))}, []corev1.Toleration{noExec("a", nil)}},
		{"an empty effect covers every effect",
			[]corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}}, []corev1.Toleration{noExec("a", nil)},
			[]corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}}},
		{"Equal with another value is not covered",
			[]corev1.Toleration{{Key: "a", Value: "x", Operator: corev1.TolerationOpEqual}}, []corev1.Toleration{{Key: "a", Value: "y", Operator: corev1.TolerationOpEqual}},
			[]corev1.Toleration{{Key: "a", Value: "x", Operator: corev1.TolerationOpEqual}, {Key: "a", Value: "y", Operator: corev1.TolerationOpEqual}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := admission.MergeTolerations(tc.first, tc.second); !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
