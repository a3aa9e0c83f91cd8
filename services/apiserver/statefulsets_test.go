package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func newStatefulSet(name string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// TestStatefulSetServed covers apps/v1 statefulsets over HTTP: kube's defaults, the
// generation, statefulsets/scale in autoscaling/v1 and statefulsets/status, the 422s of
// ValidateStatefulSet, ValidateStatefulSetUpdate and ValidateStatefulSetStatusUpdate with
// kube's messages, the strategic merge patch kubectl rollout undo sends, discovery's
// names and kubectl's columns.
func TestStatefulSetServed(t *testing.T) {
	cfg := controlplanetest.Start(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	sets := cs.AppsV1().StatefulSets("default")

	set, err := sets.Create(ctx, newStatefulSet("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("defaults", func(t *testing.T) {
		s := set.Spec
		if *s.Replicas != 1 || s.PodManagementPolicy != appsv1.OrderedReadyPodManagement ||
			s.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || s.UpdateStrategy.RollingUpdate == nil ||
			ptr.Deref(s.UpdateStrategy.RollingUpdate.Partition, -1) != 0 || s.UpdateStrategy.RollingUpdate.MaxUnavailable != nil ||
			*s.RevisionHistoryLimit != 10 || s.PersistentVolumeClaimRetentionPolicy == nil ||
			s.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
			s.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
			s.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || s.Template.Spec.DNSPolicy != corev1.DNSClusterFirst ||
			s.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent || set.Generation != 1 {
			t.Fatalf("defaults not applied: %+v generation %d", s, set.Generation)
		}
	})

	t.Run("scale subresource", func(t *testing.T) {
		scale, err := sets.GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if scale.Spec.Replicas != 1 || scale.Status.Selector != "app=web" {
			t.Fatalf("scale: %+v", scale)
		}
		scale.Spec.Replicas = 3
		if _, err := sets.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// kubectl scale sends a merge patch to the scale subresource.
		if _, err := sets.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}, "scale"); err != nil {
			t.Fatal(err)
		}
		got, err := sets.Get(ctx, "web", metav1.GetOptions{})
		if err != nil || *got.Spec.Replicas != 2 || got.Generation != 3 {
			t.Fatalf("after scaling: err %v replicas %d generation %d, want 2 and 3", err, *got.Spec.Replicas, got.Generation)
		}
		scale.Spec.Replicas = -1
		scale.ResourceVersion = ""
		if _, err := sets.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("negative scale: got %v, want 422", err)
		}
	})

	t.Run("status subresource", func(t *testing.T) {
		got, err := sets.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Status = appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: got.Generation,
			CurrentRevision: "web-1", UpdateRevision: "web-1", CollisionCount: ptr.To(int32(2))}
		got.Spec.Replicas = ptr.To(int32(7))
		st, err := sets.UpdateStatus(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.Replicas != 2 || *st.Spec.Replicas != 2 || st.Generation != got.Generation {
			t.Errorf("status write changed spec or missed status: %+v spec.replicas %d", st.Status, *st.Spec.Replicas)
		}
		// A spec write keeps the stored status.
		st.Status.Replicas = 9
		upd, err := sets.Update(ctx, st, metav1.UpdateOptions{})
		if err != nil || upd.Status.Replicas != 2 {
			t.Errorf("spec write changed status: %v %+v", err, upd.Status)
		}
		for _, tc := range []struct {
			mutate func(*appsv1.StatefulSetStatus)
			want   string
		}{
			{func(s *appsv1.StatefulSetStatus) { s.ReadyReplicas = 5 }, "status.readyReplicas: Invalid value: 5: cannot be greater than status.replicas"},
			{func(s *appsv1.StatefulSetStatus) { s.Replicas = -1 }, "status.replicas: Invalid value: -1: must be greater than or equal to 0"},
			{func(s *appsv1.StatefulSetStatus) { s.AvailableReplicas = 2 }, "status.availableReplicas: Invalid value: 2: cannot be greater than status.readyReplicas"},
			{func(s *appsv1.StatefulSetStatus) { s.CollisionCount = ptr.To(int32(1)) }, "status.collisionCount: Invalid value: 1: cannot be decremented"},
		} {
			bad := upd.DeepCopy()
			tc.mutate(&bad.Status)
			if _, err := sets.UpdateStatus(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want 422 with %q", err, tc.want)
			}
		}
	})

	t.Run("invalid statefulsets are 422 with kube's messages", func(t *testing.T) {
		withClaim := func(mutate func(*corev1.PersistentVolumeClaim)) func(*appsv1.StatefulSet) {
			return func(s *appsv1.StatefulSet) {
				claim := corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Name: "www"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				}
				mutate(&claim)
				s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim}
			}
		}
		for _, tc := range []struct {
			name   string
			mutate func(*appsv1.StatefulSet)
			want   string
		}{
			{"selector does not match", func(s *appsv1.StatefulSet) { s.Spec.Template.Labels = map[string]string{"app": "other"} },
				"spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`"},
			{"no selector", func(s *appsv1.StatefulSet) { s.Spec.Selector = nil }, "spec.selector: Required value"},
			{"empty selector", func(s *appsv1.StatefulSet) { s.Spec.Selector = &metav1.LabelSelector{} }, "empty selector is invalid for statefulset"},
			{"restartPolicy", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever },
				`spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`},
			{"activeDeadlineSeconds", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To(int64(5)) },
				"spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in StatefulSet is not Supported"},
			{"podManagementPolicy", func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = "Random" },
				`spec.podManagementPolicy: Invalid value: "Random": must be 'OrderedReady' or 'Parallel'`},
			{"updateStrategy type", func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.Type = "Recreate" },
				"spec.updateStrategy: Invalid value: ",
			},
			{"rollingUpdate with OnDelete", func(s *appsv1.StatefulSet) {
				s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{}}
			}, "spec.updateStrategy.rollingUpdate: Invalid value: ", // then the value
			},
			{"negative partition", func(s *appsv1.StatefulSet) {
				s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(-1))}
			}, "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0"},
			{"maxUnavailable 0", func(s *appsv1.StatefulSet) {
				s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(0))}
			}, `spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "0": cannot be 0`},
			{"maxUnavailable over 100%", func(s *appsv1.StatefulSet) {
				s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: ptr.To(intstr.FromString("150%"))}
			}, `spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "150%": must not be greater than 100%`},
			{"negative ordinals.start", func(s *appsv1.StatefulSet) { s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: -2} },
				"spec.ordinals.start: Invalid value: -2: must be greater than or equal to 0"},
			{"negative replicas", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To(int32(-1)) },
				"spec.replicas: Invalid value: -1: must be greater than or equal to 0"},
			{"retention policy", func(s *appsv1.StatefulSet) {
				s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Keep"}
			}, `spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: "Keep": supported values: "Retain", "Delete"`},
			{"name not a DNS label", func(s *appsv1.StatefulSet) { s.Name = "web.example" }, `metadata.name: Invalid value: "web.example"`},
			{"claim without access modes", withClaim(func(c *corev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }),
				"spec.volumeClaimTemplates[0].spec.accessModes: Required value: at least 1 access mode is required"},
			{"claim without storage", withClaim(func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }),
				"spec.volumeClaimTemplates[0].spec.resources[storage]: Required value"},
			{"claim without name", withClaim(func(c *corev1.PersistentVolumeClaim) { c.Name = "" }),
				"spec.volumeClaimTemplates[0].metadata.name: Required value"},
		} {
			s := newStatefulSet("bad")
			tc.mutate(s)
			_, err := sets.Create(ctx, s, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want 422 with %q", tc.name, err, tc.want)
			}
		}
		good := newStatefulSet("claims")
		withClaim(func(*corev1.PersistentVolumeClaim) {})(good)
		created, err := sets.Create(ctx, good, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a valid claim template: %v", err)
		}
		if c := created.Spec.VolumeClaimTemplates[0]; ptr.Deref(c.Spec.VolumeMode, "") != corev1.PersistentVolumeFilesystem || c.Status.Phase != corev1.ClaimPending {
			t.Errorf("claim template defaults: %+v", c)
		}
	})

	t.Run("only replicas, ordinals, template, updateStrategy, retention policy and minReadySeconds change", func(t *testing.T) {
		got, err := sets.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ok := got.DeepCopy()
		ok.Spec.Replicas = ptr.To(int32(4))
		ok.Spec.Template.Spec.Containers[0].Image = "busybox:1.37"
		ok.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		ok.Spec.MinReadySeconds = 5
		ok.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
		ok.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
		updated, err := sets.Update(ctx, ok, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("allowed update: %v", err)
		}
		if updated.Generation != got.Generation+1 {
			t.Errorf("generation %d after a spec change, want %d", updated.Generation, got.Generation+1)
		}
		const forbidden = "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
		for name, mutate := range map[string]func(*appsv1.StatefulSet){
			"serviceName":          func(s *appsv1.StatefulSet) { s.Spec.ServiceName = "other" },
			"podManagementPolicy":  func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement },
			"revisionHistoryLimit": func(s *appsv1.StatefulSet) { s.Spec.RevisionHistoryLimit = ptr.To(int32(3)) },
			"selector": func(s *appsv1.StatefulSet) {
				s.Spec.Selector.MatchLabels = map[string]string{"app": "web", "tier": "x"}
				s.Spec.Template.Labels = map[string]string{"app": "web", "tier": "x"}
			},
		} {
			bad := updated.DeepCopy()
			mutate(bad)
			if _, err := sets.Update(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), forbidden) {
				t.Errorf("%s: got %v, want 422 %q", name, err, forbidden)
			}
		}
	})

	t.Run("kubectl rollout undo's strategic merge patch replaces the template", func(t *testing.T) {
		patch := `{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}}}`
		patched, err := sets.Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := patched.Spec.Template.Spec.Containers
		if len(c) != 1 || c[0].Image != "busybox:1.36" || c[0].ImagePullPolicy != corev1.PullIfNotPresent || patched.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
			t.Errorf("patched template: %+v", patched.Spec.Template)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
		list, err := dc.ServerResourcesForGroupVersion("apps/v1")
		if err != nil {
			t.Fatal(err)
		}
		var main, scale, status bool
		for _, r := range list.APIResources {
			switch r.Name {
			case "statefulsets":
				main = r.Namespaced && r.Kind == "StatefulSet" && slices.Equal(r.ShortNames, []string{"sts"}) && slices.Contains(r.Categories, "all")
			case "statefulsets/scale":
				scale = r.Group == "autoscaling" && r.Version == "v1" && r.Kind == "Scale"
			case "statefulsets/status":
				status = r.Kind == "StatefulSet"
			}
		}
		if !main || !scale || !status {
			t.Errorf("statefulsets %v, statefulsets/scale %v, statefulsets/status %v in discovery: %+v", main, scale, status, list.APIResources)
		}
	})

	t.Run("table columns", func(t *testing.T) {
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/apis/apps/v1/namespaces/default/statefulsets/claims", nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var table metav1.Table
		if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range table.ColumnDefinitions {
			names = append(names, c.Name)
		}
		if !slices.Equal(names, []string{"Name", "Ready", "Age", "Containers", "Images"}) || len(table.Rows) != 1 {
			t.Fatalf("columns %v rows %d", names, len(table.Rows))
		}
		if cells := table.Rows[0].Cells; cells[0] != "claims" || cells[1] != "0/1" || cells[3] != "c" || cells[4] != "busybox:1.36" {
			t.Errorf("row %v", cells)
		}
	})
}
