package endpoints

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/scheme"
)

// trackCase is a write whose managedFields a test tracks: updated replacing live (an
// empty pod for a create) through subresource.
type trackCase struct {
	name          string
	subresource   string
	live, updated *corev1.Pod
}

// TestStructuredTypeConverterTracksAsValidatingOne checks that managedFields come out
// the same whether typed objects are validated on conversion (kube's TypeConverter) or
// not (structuredTypeConverter): for well-formed writes and for malformed ones (keys
// empty, missing or repeated), which the registry's validation refuses afterwards.
func TestStructuredTypeConverterTracksAsValidatingOne(t *testing.T) {
	validating, err := testOpenAPI(t).TypeConverter()
	if err != nil {
		t.Fatal(err)
	}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	newManager := func(tc managedfields.TypeConverter, subresource string) *managedfields.FieldManager {
		fm, err := managedfields.NewDefaultFieldManager(tc, scheme.Scheme, scheme.Scheme, scheme.Scheme, gvk, gvk.GroupVersion(), subresource, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fm
	}
	unvalidated := &structuredTypeConverter{TypeConverter: validating}

	created := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "nginx", Env: []corev1.EnvVar{{Name: "A", Value: "1"}},
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
		}}},
	}
	running := created.DeepCopy()
	running.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true}}}
	relabelled := created.DeepCopy()
	relabelled.Labels["tier"] = "front"
	unnamed := created.DeepCopy()
	unnamed.Spec.Containers = append(unnamed.Spec.Containers, corev1.Container{Image: "busybox"})
	duplicate := created.DeepCopy()
	duplicate.Spec.Containers = append(duplicate.Spec.Containers, duplicate.Spec.Containers[0])
	unnamedEnv := created.DeepCopy()
	unnamedEnv.Spec.Containers[0].Env = append(unnamedEnv.Spec.Containers[0].Env, corev1.EnvVar{Value: "2"})
	noProtocol := created.DeepCopy()
	noProtocol.Spec.Containers[0].Ports = append(noProtocol.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 81})
	noCondition := running.DeepCopy()
	noCondition.Status.Conditions = append(noCondition.Status.Conditions, corev1.PodCondition{Status: corev1.ConditionFalse})

	tests := []trackCase{
		{"create", "", &corev1.Pod{}, created},
		{"status update", "status", created, running},
		{"label update", "", created, relabelled},
		{"container without a name", "", created, unnamed},
		{"duplicate container", "", created, duplicate},
		{"env var without a name", "", created, unnamedEnv},
		{"port without a protocol", "", created, noProtocol},
		{"condition without a type", "status", running, noCondition},
	}
	withoutTimes := func(out runtime.Object) []metav1.ManagedFieldsEntry {
		entries := out.(*corev1.Pod).ManagedFields
		for i := range entries {
			entries[i].Time = nil
		}
		return entries
	}
	track := func(fm *managedfields.FieldManager, live, updated *corev1.Pod, manager string) []metav1.ManagedFieldsEntry {
		live, updated = live.DeepCopy(), updated.DeepCopy()
		live.SetGroupVersionKind(gvk)
		updated.SetGroupVersionKind(gvk)
		return withoutTimes(fm.UpdateNoErrors(live, updated, manager))
	}
	fields := &fieldManagers{openAPI: testOpenAPI(t)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The live object carries the creator's entry, as a stored object does.
			live := tt.live
			if live.Name != "" {
				live = live.DeepCopy()
				live.ManagedFields = track(newManager(validating, ""), &corev1.Pod{}, live, "kubectl")
			}
			want := track(newManager(validating, tt.subresource), live, tt.updated, "kubelet")
			got := track(newManager(unvalidated, tt.subresource), live, tt.updated, "kubelet")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("managedFields differ from a validating conversion's (-want +got):\n%s", diff)
			}
			// What the handlers do: track the very objects, the live one only read (it may
			// be the watch cache's), through the unsafe convertor.
			stored := live.DeepCopy()
			updated := tt.updated.DeepCopy()
			updated.ManagedFields = stored.ManagedFields
			out := fields.track(gvk, tt.subresource, nil, stored, updated, "kubelet")
			if out != runtime.Object(updated) {
				t.Errorf("track returned another object than the one it was given")
			}
			if diff := cmp.Diff(want, withoutTimes(out)); diff != "" {
				t.Errorf("managedFields differ when tracked as the handlers do (-want +got):\n%s", diff)
			}
			if !equality.Semantic.DeepEqual(stored, live) {
				t.Errorf("track modified the live object")
			}
			updated.ManagedFields = nil
			given := tt.updated.DeepCopy()
			given.SetGroupVersionKind(gvk)
			if !equality.Semantic.DeepEqual(updated, given) {
				t.Errorf("track changed more than managedFields: %s", cmp.Diff(given, updated))
			}
			if len(want) == 0 {
				t.Logf("a validating conversion drops managedFields here too")
			}
		})
	}
}

// resettingPods is the pods' storage as the field managers see it: a strategy that
// resets reset.
type resettingPods struct {
	reset map[fieldpath.APIVersion]*fieldpath.Set
}

func (resettingPods) New() runtime.Object { return &corev1.Pod{} }

func (s resettingPods) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return s.reset }

// TestTrackLeavesOutWhatTheStrategyResets checks that track, which compares the objects
// without the top-level fields the strategy resets (spec on pods/status, status on
// pods), records the managedFields kube's FieldManager records comparing them whole,
// with the same reset fields: for writes that change those fields too, over objects
// that other managers' entries cover.
func TestTrackLeavesOutWhatTheStrategyResets(t *testing.T) {
	validating, err := testOpenAPI(t).TypeConverter()
	if err != nil {
		t.Fatal(err)
	}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	resets := map[string]map[fieldpath.APIVersion]*fieldpath.Set{"": pod.Strategy{}.GetResetFields(), "status": pod.StatusStrategy{}.GetResetFields()}
	kubeTrack := func(subresource string, live, updated *corev1.Pod, manager string) []metav1.ManagedFieldsEntry {
		filters := map[fieldpath.APIVersion]fieldpath.Filter{}
		for version, set := range resets[subresource] {
			filters[version] = fieldpath.NewExcludeSetFilter(set)
		}
		fm, err := managedfields.NewDefaultFieldManager(validating, scheme.Scheme, scheme.Scheme, scheme.Scheme, gvk, gvk.GroupVersion(), subresource, filters)
		if err != nil {
			t.Fatal(err)
		}
		live, updated = live.DeepCopy(), updated.DeepCopy()
		live.SetGroupVersionKind(gvk)
		updated.SetGroupVersionKind(gvk)
		out := fm.UpdateNoErrors(live, updated, manager).(*corev1.Pod).ManagedFields
		for i := range out {
			out[i].Time = nil
		}
		return out
	}

	created := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}},
	}
	created.ManagedFields = kubeTrack("", &corev1.Pod{}, created, "kubectl")
	pending := created.DeepCopy()
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	pending.ManagedFields = kubeTrack("status", created, pending, "kube-scheduler")
	running := pending.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	running.Status.Conditions = append(running.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	running.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Ready: true}}
	respecced := running.DeepCopy() // a status write that also changes spec (which the strategy resets)
	respecced.Spec.Containers[0].Image = "nginx:2"
	respecced.Status.Conditions = respecced.Status.Conditions[:1]
	relabelled := pending.DeepCopy() // a main-resource write that also changes status
	relabelled.Labels["tier"] = "front"
	relabelled.Status.Phase = corev1.PodFailed
	reimaged := pending.DeepCopy()
	reimaged.Spec.Containers[0].Image = "nginx:2"
	reimaged.Spec.Containers[0].Ports = nil

	for _, tt := range []trackCase{
		{"create", "", &corev1.Pod{}, pending},
		{"status update", "status", pending, running},
		{"status update changing spec", "status", pending, respecced},
		{"update changing status", "", pending, relabelled},
		{"update removing fields", "", pending, reimaged},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The write carries the managedFields it read, as clients send them back.
			written := tt.updated.DeepCopy()
			written.ManagedFields = tt.live.ManagedFields
			want := kubeTrack(tt.subresource, tt.live, written, "kubelet")
			fields := &fieldManagers{openAPI: testOpenAPI(t)}
			if fm := fields.get(gvk, tt.subresource, resettingPods{resets[tt.subresource]}); len(fm.reset) != 1 {
				t.Fatalf("fields left out of the comparison: %v, want one (spec or status)", fm.reset)
			}
			live, updated := tt.live.DeepCopy(), written.DeepCopy()
			out := fields.track(gvk, tt.subresource, resettingPods{resets[tt.subresource]}, live, updated, "kubelet")
			if out != runtime.Object(updated) {
				t.Fatalf("track returned another object than the one it was given")
			}
			got := slices.Clone(updated.ManagedFields)
			for i := range got {
				got[i].Time = nil
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("managedFields differ from kube's FieldManager's (-want +got):\n%s", diff)
			}
			if !equality.Semantic.DeepEqual(live, tt.live) {
				t.Errorf("track modified the live object")
			}
			updated.ManagedFields = nil
			written.ManagedFields = nil
			written.SetGroupVersionKind(gvk)
			if !equality.Semantic.DeepEqual(updated, written) {
				t.Errorf("track changed more than managedFields: %s", cmp.Diff(written, updated))
			}
		})
	}
}

// BenchmarkTrackPodStatusUpdate measures managed-fields tracking of a kubelet's status
// update of a pod like the benchmark's (one container, a projected service-account
// volume), with kube's validating conversion and with structuredTypeConverter.
func BenchmarkTrackPodStatusUpdate(b *testing.B) {
	validating, err := testOpenAPI(b).TypeConverter()
	if err != nil {
		b.Fatal(err)
	}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	expiry := int64(3607)
	pending := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "bench-1", Namespace: "bench", Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{
			NodeName: "hollow-1",
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}}}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	// The stored pod's managedFields: its creator's and the scheduler's entries.
	fields := &fieldManagers{openAPI: testOpenAPI(b)}
	pending = fields.track(gvk, "", nil, &corev1.Pod{}, pending, "skiff-bench").(*corev1.Pod)
	pending = fields.track(gvk, "status", nil, pending.DeepCopy(), withCondition(pending, corev1.PodScheduled), "kube-scheduler").(*corev1.Pod)
	pending.UID, pending.ResourceVersion, pending.CreationTimestamp = "6f1c0de2-5a4e-4d8e-9a43-0b8f7d6c2e11", "1234", metav1.Now()
	running := pending.DeepCopy()
	running.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.1", PodIP: "10.244.1.5",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, Image: "registry.k8s.io/pause:3.10",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	for _, c := range []struct {
		name string
		tc   managedfields.TypeConverter
	}{{"validating", validating}, {"structured", &structuredTypeConverter{TypeConverter: validating}}} {
		b.Run(c.name, func(b *testing.B) {
			fm, err := managedfields.NewDefaultFieldManager(c.tc, scheme.Scheme, scheme.Scheme, scheme.Scheme, gvk, gvk.GroupVersion(), "status", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				fm.UpdateNoErrors(pending.DeepCopy(), running.DeepCopy(), "kubelet")
			}
		})
	}
	// What the update handler does: structured, through the unsafe convertor, spec left
	// out (pods/status resets it).
	statusStorage := resettingPods{pod.StatusStrategy{}.GetResetFields()}
	b.Run("track", func(b *testing.B) {
		fields := &fieldManagers{openAPI: testOpenAPI(b)} // not the one that built pending
		b.ReportAllocs()
		for b.Loop() {
			fields.track(gvk, "status", statusStorage, pending, running.DeepCopy(), "kubelet")
		}
	})
}

// withCondition returns a copy of pod, Pending, with condition conditionType True.
func withCondition(pod *corev1.Pod, conditionType corev1.PodConditionType) *corev1.Pod {
	out := pod.DeepCopy()
	out.Status.Phase = corev1.PodPending
	out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: conditionType, Status: corev1.ConditionTrue})
	return out
}
