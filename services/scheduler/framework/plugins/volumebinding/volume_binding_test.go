package volumebinding

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"skiff.dev/services/scheduler/framework"
)

// handle lends the plugin a client and an informer factory, nothing else.
type handle struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
}

func (h handle) ClientSet() kubernetes.Interface                        { return h.client }
func (h handle) Logger() *slog.Logger                                   { return slog.Default() }
func (h handle) EventRecorder() record.EventRecorder                    { return nil }
func (h handle) SnapshotSharedLister() framework.NodeInfoLister         { return nil }
func (h handle) PodNominator() framework.PodNominator                   { return nil }
func (h handle) PDBLister() policylisters.PodDisruptionBudgetLister     { return nil }
func (h handle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h handle) RunFilterPluginsWithNominatedPods(context.Context, *framework.CycleState, *v1.Pod, *framework.NodeInfo) *framework.Status {
	return nil
}

// newPlugin builds the plugin over a fake clientset holding objects, its informers
// synced.
func newPlugin(t *testing.T, timeout time.Duration, objects ...runtime.Object) (*VolumeBinding, kubernetes.Interface) {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	p, err := NewWithArgs(Args{BindTimeout: timeout})(context.Background(), handle{client: client, factory: factory})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return p.(*VolumeBinding), client
}

func node(name string, labels map[string]string) *framework.NodeInfo {
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1.LabelHostname] = name
	n := framework.NewNodeInfo()
	n.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	return n
}

func podWithClaims(claims ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "pod-uid"}}
	for _, c := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: c,
			VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return pod
}

func claim(name, class, size string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: ptr.To(class),
		},
	}
}

func boundClaim(name, class, pvName string) *v1.PersistentVolumeClaim {
	c := claim(name, class, "1Gi")
	c.Spec.VolumeName = pvName
	c.Annotations = map[string]string{volume.AnnBindCompleted: "yes"}
	c.Status.Phase = v1.ClaimBound
	return c
}

func pv(name, class, size, onNode string) *v1.PersistentVolume {
	p := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)},
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName:       class,
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/" + name}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeAvailable},
	}
	if onNode != "" {
		p.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{onNode}}}}}}}
	}
	return p
}

func class(name, provisioner string, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: ptr.To(mode)}
}

func wantStatus(t *testing.T, what string, s *framework.Status, code framework.Code, message string) {
	t.Helper()
	if s.Code() != code || s.Message() != message {
		t.Errorf("%s: %v %q, want %v %q", what, s.Code(), s.Message(), code, message)
	}
}

func TestPreFilterRejectsWhatNoNodeCanFix(t *testing.T) {
	deleting := claim("deleting", "standard", "1Gi")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"kubernetes.io/pvc-protection"}
	p, _ := newPlugin(t, 0,
		class("standard", "example.com/disk", storagev1.VolumeBindingImmediate),
		class("local", volume.NotSupportedProvisioner, storagev1.VolumeBindingWaitForFirstConsumer),
		deleting, claim("immediate", "standard", "1Gi"), claim("no-class", "missing", "1Gi"), claim("delayed", "local", "1Gi"))
	ctx := context.Background()
	for _, tc := range []struct {
		claims  []string
		code    framework.Code
		message string
	}{
		{[]string{"absent"}, framework.UnschedulableAndUnresolvable, `persistentvolumeclaim "absent" not found`},
		{[]string{"deleting"}, framework.UnschedulableAndUnresolvable, `persistentvolumeclaim "deleting" is being deleted`},
		{[]string{"delayed", "immediate"}, framework.UnschedulableAndUnresolvable, ErrReasonUnboundImmediate},
		{[]string{"no-class"}, framework.UnschedulableAndUnresolvable, ErrReasonUnboundImmediate},
		{[]string{"delayed"}, framework.Success, ""},
		{nil, framework.Success, ""},
	} {
		wantStatus(t, strings.Join(tc.claims, ","), p.PreFilter(ctx, framework.NewCycleState(), podWithClaims(tc.claims...)), tc.code, tc.message)
	}

	// A generic ephemeral volume's claim is <pod>-<volume>, and must be the pod's.
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "pod-uid"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}}}}
	wantStatus(t, "ephemeral", p.PreFilter(ctx, framework.NewCycleState(), pod), framework.UnschedulableAndUnresolvable, `persistentvolumeclaim "p-scratch" not found`)
}

func TestFilterChecksVolumeNodeAffinityAndAvailability(t *testing.T) {
	zoned := class("zoned", "example.com/disk", storagev1.VolumeBindingWaitForFirstConsumer)
	zoned.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: v1.LabelTopologyZone, Values: []string{"z1"}}}}}
	selected := claim("selected", "local-path", "1Gi")
	selected.Annotations = map[string]string{volume.AnnSelectedNode: "b"}
	p, _ := newPlugin(t, 0,
		class("local", volume.NotSupportedProvisioner, storagev1.VolumeBindingWaitForFirstConsumer),
		class("local-path", "rancher.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer),
		zoned,
		boundClaim("on-a", "local", "pv-on-a"), pv("pv-on-a", "local", "1Gi", "a"),
		boundClaim("dangling", "local", "gone"),
		claim("static", "local", "5Gi"), pv("small-on-b", "local", "1Gi", "b"), pv("big-on-b", "local", "10Gi", "b"), pv("fits-on-b", "local", "5Gi", "b"),
		claim("dynamic", "local-path", "1Gi"), claim("in-zone", "zoned", "1Gi"), selected)
	ctx := context.Background()
	nodes := []*framework.NodeInfo{node("a", map[string]string{v1.LabelTopologyZone: "z1"}), node("b", map[string]string{v1.LabelTopologyZone: "z2"})}
	for _, tc := range []struct {
		claim string
		want  map[string]string // node → rejection ("" fits)
	}{
		{"on-a", map[string]string{"a": "", "b": ErrReasonNodeConflict}},
		{"dangling", map[string]string{"a": ErrReasonPVNotExist, "b": ErrReasonPVNotExist}},
		{"static", map[string]string{"a": ErrReasonBindConflict, "b": ""}},
		{"dynamic", map[string]string{"a": "", "b": ""}},
		{"in-zone", map[string]string{"a": "", "b": ErrReasonBindConflict}},
		{"selected", map[string]string{"a": ErrReasonBindConflict, "b": ""}},
	} {
		state := framework.NewCycleState()
		pod := podWithClaims(tc.claim)
		if s := p.PreFilter(ctx, state, pod); !s.IsSuccess() {
			t.Fatalf("%s: PreFilter %v", tc.claim, s.Message())
		}
		for _, n := range nodes {
			want := tc.want[n.Node().Name]
			code := framework.Success
			if want != "" {
				code = framework.UnschedulableAndUnresolvable
			}
			wantStatus(t, tc.claim+" on "+n.Node().Name, p.Filter(ctx, state, pod, n), code, want)
		}
		if tc.claim == "static" {
			data, _ := getStateData(state)
			got := data.byNode["b"]
			if len(got.staticBindings) != 1 || got.staticBindings[0].pv.Name != "fits-on-b" || len(got.dynamicProvisions) != 0 {
				t.Errorf("static: chose %+v, want the smallest volume that fits, fits-on-b", got)
			}
		}
	}
}

// bindLikeTheController completes what the PV controller would, once the scheduler has
// written its choice: the claim's volumeName and bind-completed.
func bindLikeTheController(t *testing.T, client kubernetes.Interface, claimName string, volumeFor func(*v1.PersistentVolumeClaim) string) {
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		name := volumeFor(pvc)
		if name == "" {
			return false, nil
		}
		pvc.Spec.VolumeName = name
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, volume.AnnBindCompleted, "yes")
		_, err = client.CoreV1().PersistentVolumeClaims("default").Update(ctx, pvc, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("binding %s: %v", claimName, err)
	}
}

func TestPreBindBindsStaticVolumesAndAsksForProvisioning(t *testing.T) {
	p, client := newPlugin(t, 0,
		class("local", volume.NotSupportedProvisioner, storagev1.VolumeBindingWaitForFirstConsumer),
		class("local-path", "rancher.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer),
		claim("static", "local", "1Gi"), pv("pv-b", "local", "1Gi", "b"), claim("dynamic", "local-path", "1Gi"))
	ctx := context.Background()
	pod := podWithClaims("static", "dynamic")
	state := framework.NewCycleState()
	if s := p.PreFilter(ctx, state, pod); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	b := node("b", nil)
	if s := p.Filter(ctx, state, pod, b); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	if s := p.Reserve(ctx, state, pod, "b"); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	// Until the binding ends, the volume is held: another attempt finds none for the
	// claim (its class cannot provision).
	other := framework.NewCycleState()
	otherPod := podWithClaims("static")
	_ = p.PreFilter(ctx, other, otherPod)
	wantStatus(t, "a held volume", p.Filter(ctx, other, otherPod, b), framework.UnschedulableAndUnresolvable, ErrReasonBindConflict)

	go bindLikeTheController(t, client, "static", func(*v1.PersistentVolumeClaim) string {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "pv-b", metav1.GetOptions{})
		if err != nil || pv.Spec.ClaimRef == nil {
			return ""
		}
		return pv.Name
	})
	go bindLikeTheController(t, client, "dynamic", func(pvc *v1.PersistentVolumeClaim) string {
		if pvc.Annotations[volume.AnnSelectedNode] != "b" {
			return ""
		}
		// The provisioner's volume, on the selected node.
		_, _ = client.CoreV1().PersistentVolumes().Create(ctx, pv("pvc-dynamic", "local-path", "1Gi", "b"), metav1.CreateOptions{})
		return "pvc-dynamic"
	})
	if s := p.PreBind(ctx, state, pod, "b"); !s.IsSuccess() {
		t.Fatalf("PreBind: %v", s.Message())
	}
	got, err := client.CoreV1().PersistentVolumes().Get(ctx, "pv-b", metav1.GetOptions{})
	if err != nil || got.Spec.ClaimRef == nil || got.Spec.ClaimRef.Name != "static" || got.Spec.ClaimRef.UID == "" ||
		got.Annotations[volume.AnnBoundByController] != "yes" {
		t.Errorf("pv-b after PreBind: %v %+v", err, got)
	}
	if len(p.assumed) != 0 {
		t.Errorf("volumes still held after the binding: %v", p.assumed)
	}
}

func TestPreBindTimesOutWhenNothingBinds(t *testing.T) {
	p, client := newPlugin(t, 300*time.Millisecond,
		class("local-path", "rancher.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer),
		claim("dynamic", "local-path", "1Gi"))
	ctx := context.Background()
	pod := podWithClaims("dynamic")
	state := framework.NewCycleState()
	_ = p.PreFilter(ctx, state, pod)
	if s := p.Filter(ctx, state, pod, node("a", nil)); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	_ = p.Reserve(ctx, state, pod, "a")
	s := p.PreBind(ctx, state, pod, "a")
	if s.Code() != framework.Error || !strings.HasPrefix(s.Message(), "binding volumes: ") {
		t.Fatalf("PreBind with no provisioner: %v %q, want an Error binding volumes", s.Code(), s.Message())
	}
	// The claim keeps the node it was given, as in kube: the provisioner may still act.
	pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "dynamic", metav1.GetOptions{})
	if err != nil || pvc.Annotations[volume.AnnSelectedNode] != "a" {
		t.Errorf("claim after PreBind: %v %v", err, pvc.Annotations)
	}
}
