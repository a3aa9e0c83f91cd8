package daemon

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func testDS() *appsv1.DaemonSet {
	labels := map[string]string{"app": "agent"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid",
			Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "2"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
		},
	}
}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

func TestNodeShouldRunDaemonPod(t *testing.T) {
	withSelector := testDS()
	withSelector.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	pinned := testDS()
	pinned.Spec.Template.Spec.NodeName = "other"
	withAffinity := testDS()
	withAffinity.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}
	tolerating := testDS()
	tolerating.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}

	noSchedule := corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}
	noExecute := corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name               string
		ds                 *appsv1.DaemonSet
		node               *corev1.Node
		run, continueToRun bool
	}{
		{"plain node", testDS(), node("n", nil), true, true},
		{"nodeSelector matches", withSelector, node("n", map[string]string{"disk": "ssd"}), true, true},
		{"nodeSelector does not match", withSelector, node("n", nil), false, false},
		{"template pinned to another node", pinned, node("n", nil), false, false},
		{"required node affinity does not match", withAffinity, node("n", map[string]string{"zone": "b"}), false, false},
		{"required node affinity matches", withAffinity, node("n", map[string]string{"zone": "a"}), true, true},
		{"untolerated NoSchedule: no new pod, the old one stays", testDS(), node("n", nil, noSchedule), false, true},
		{"untolerated NoExecute: none at all", testDS(), node("n", nil, noExecute), false, false},
		{"tolerated taints", tolerating, node("n", nil, noSchedule, noExecute), true, true},
		{"daemon tolerations: unschedulable, not-ready", testDS(), node("n", nil,
			corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}), true, true},
		{"network-unavailable only tolerated with hostNetwork", testDS(), node("n", nil,
			corev1.Taint{Key: corev1.TaintNodeNetworkUnavailable, Effect: corev1.TaintEffectNoSchedule}), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, cont := NodeShouldRunDaemonPod(tc.node, tc.ds)
			if run != tc.run || cont != tc.continueToRun {
				t.Errorf("got shouldRun %v shouldContinueRunning %v, want %v %v", run, cont, tc.run, tc.continueToRun)
			}
		})
	}
}

func TestAddOrUpdateDaemonPodTolerations(t *testing.T) {
	spec := &corev1.PodSpec{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
		{Key: "mine", Operator: corev1.TolerationOpExists},
	}}
	AddOrUpdateDaemonPodTolerations(spec)
	got := map[string]corev1.Toleration{}
	for _, tol := range spec.Tolerations {
		got[tol.Key+":"+string(tol.Effect)] = tol
	}
	for _, want := range []string{
		corev1.TaintNodeNotReady + ":NoExecute", corev1.TaintNodeUnreachable + ":NoExecute",
		corev1.TaintNodeDiskPressure + ":NoSchedule", corev1.TaintNodeMemoryPressure + ":NoSchedule",
		corev1.TaintNodePIDPressure + ":NoSchedule", corev1.TaintNodeUnschedulable + ":NoSchedule", "mine:",
	} {
		if _, ok := got[want]; !ok {
			t.Errorf("missing toleration %s in %v", want, spec.Tolerations)
		}
	}
	if len(spec.Tolerations) != 7 {
		t.Errorf("%d tolerations, want 7 (the not-ready one replaced, not duplicated): %v", len(spec.Tolerations), spec.Tolerations)
	}
	if got[corev1.TaintNodeNotReady+":NoExecute"].TolerationSeconds != nil {
		t.Error("the not-ready toleration keeps a time limit: daemon pods must never be evicted")
	}
	if _, ok := got[corev1.TaintNodeNetworkUnavailable+":NoSchedule"]; ok {
		t.Error("network-unavailable tolerated without hostNetwork")
	}
	host := &corev1.PodSpec{HostNetwork: true}
	AddOrUpdateDaemonPodTolerations(host)
	if len(host.Tolerations) != 7 || host.Tolerations[6].Key != corev1.TaintNodeNetworkUnavailable {
		t.Errorf("hostNetwork tolerations %v", host.Tolerations)
	}
}

func TestNodeNameAffinityRoundTrip(t *testing.T) {
	other := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: other}}
	for name, affinity := range map[string]*corev1.Affinity{
		"nil":                 nil,
		"no node affinity":    {PodAntiAffinity: &corev1.PodAntiAffinity{}},
		"only preferred":      {NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}},
		"required terms kept": {NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{other}}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := ReplaceDaemonSetPodNodeNameNodeAffinity(affinity.DeepCopy(), "node-1")
			terms := got.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if len(terms) != 1 || len(terms[0].MatchExpressions) != 0 || len(terms[0].MatchFields) != 1 {
				t.Fatalf("terms %+v", terms)
			}
			f := terms[0].MatchFields[0]
			if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 || f.Values[0] != "node-1" {
				t.Errorf("field requirement %+v", f)
			}
			if affinity != nil && affinity.NodeAffinity != nil && len(affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 &&
				len(got.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Error("preferred terms dropped")
			}
			pod := &corev1.Pod{Spec: corev1.PodSpec{Affinity: got}}
			if n, err := GetTargetNodeName(pod); err != nil || n != "node-1" {
				t.Errorf("GetTargetNodeName: %q %v", n, err)
			}
		})
	}
	if n, _ := GetTargetNodeName(&corev1.Pod{Spec: corev1.PodSpec{NodeName: "bound"}}); n != "bound" {
		t.Errorf("a bound pod's node is its nodeName, got %q", n)
	}
	if _, err := GetTargetNodeName(&corev1.Pod{}); err == nil {
		t.Error("a pod with neither nodeName nor affinity has a target node")
	}
}

func TestCreatePodTemplateAndIsPodUpdated(t *testing.T) {
	ds := testDS()
	gen, err := GetTemplateGeneration(ds)
	if err != nil || gen == nil || *gen != 2 {
		t.Fatalf("template generation %v %v", gen, err)
	}
	tmpl := CreatePodTemplate(ds.Spec.Template, gen, "hash1")
	if tmpl.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != "hash1" || tmpl.Labels["pod-template-generation"] != "2" || tmpl.Labels["app"] != "agent" {
		t.Errorf("labels %v", tmpl.Labels)
	}
	if len(ds.Spec.Template.Labels) != 1 || len(ds.Spec.Template.Spec.Tolerations) != 0 {
		t.Error("CreatePodTemplate changed the DaemonSet's template")
	}
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta}
	one := int64(1)
	switch {
	case !IsPodUpdated(pod, "hash1", nil):
		t.Error("the hash does not match")
	case !IsPodUpdated(pod, "other", gen):
		t.Error("the template generation does not match")
	case IsPodUpdated(pod, "other", &one):
		t.Error("an old pod counts as updated")
	}
}

func TestGetPatchAndMatch(t *testing.T) {
	ds := testDS()
	patch, err := getPatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	s := string(patch)
	// Byte for byte what kube 1.32's getPatch (and kubectl 1.32) make of this DaemonSet.
	want := `{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"app":"agent"}},` +
		`"spec":{"containers":[{"image":"busybox","name":"c","resources":{}}]}}}}`
	if s != want {
		t.Errorf("patch %s", s)
	}
	history := &appsv1.ControllerRevision{Data: runtimeRaw(patch)}
	if ok, _ := Match(ds, history); !ok {
		t.Error("the DaemonSet does not match its own patch")
	}
	changed := ds.DeepCopy()
	changed.Spec.Template.Spec.Containers[0].Image = "busybox:2"
	if ok, _ := Match(changed, history); ok {
		t.Error("a changed template matches the old revision")
	}
	onlyStrategy := ds.DeepCopy()
	onlyStrategy.Spec.MinReadySeconds = 5
	if ok, _ := Match(onlyStrategy, history); !ok {
		t.Error("a change outside the template makes a new revision")
	}
}

func TestSurgeAndUnavailableCounts(t *testing.T) {
	ds := testDS()
	pct, two := intstr.FromString("30%"), intstr.FromInt32(2)
	ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &pct, MaxSurge: &two}
	if n, _ := UnavailableCount(ds, 10); n != 3 {
		t.Errorf("30%% of 10 is %d, want 3", n)
	}
	if n, _ := UnavailableCount(ds, 4); n != 2 {
		t.Errorf("30%% of 4 rounds up to %d, want 2", n)
	}
	if n, _ := SurgeCount(ds, 10); n != 2 || !AllowsSurge(ds) {
		t.Errorf("surge %d", n)
	}
	ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	if n, _ := UnavailableCount(ds, 10); n != 0 || AllowsSurge(ds) {
		t.Error("OnDelete has rolling bounds")
	}
}

func runtimeRaw(b []byte) runtime.RawExtension { return runtime.RawExtension{Raw: b} }
