package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func newDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// TestDaemonSetsServed covers apps/v1 daemonsets over HTTP: discovery (short name ds,
// category all, daemonsets/status), kube's defaults, generation and template
// generation, 422s with kube's messages, the immutable selector, status-only writes to
// daemonsets/status, the strategic merge patch kubectl rollout undo sends (a template
// with "$patch": "replace"), and kubectl's columns.
func TestDaemonSetsServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	daemonSets := cs.AppsV1().DaemonSets("default")

	t.Run("discovery", func(t *testing.T) {
		list, err := cs.Discovery().ServerResourcesForGroupVersion("apps/v1")
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]metav1.APIResource{}
		for _, r := range list.APIResources {
			found[r.Name] = r
		}
		ds, status := found["daemonsets"], found["daemonsets/status"]
		if !ds.Namespaced || ds.Kind != "DaemonSet" || strings.Join(ds.ShortNames, ",") != "ds" || strings.Join(ds.Categories, ",") != "all" ||
			status.Kind != "DaemonSet" || strings.Join(status.Verbs, ",") != "get,patch,update" {
			t.Errorf("daemonsets %+v, daemonsets/status %+v", ds, status)
		}
		if cr := found["controllerrevisions"]; !cr.Namespaced || cr.Kind != "ControllerRevision" {
			t.Errorf("controllerrevisions %+v", cr)
		}
	})

	ds, err := daemonSets.Create(ctx, newDaemonSet("agent"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String() != "1" ||
		ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge.String() != "0" || *ds.Spec.RevisionHistoryLimit != 10 || ds.Generation != 1 ||
		ds.Annotations[appsv1.DeprecatedTemplateGeneration] != "1" {
		t.Fatalf("defaults not applied: %+v generation %d annotations %v", ds.Spec, ds.Generation, ds.Annotations)
	}

	t.Run("invalid daemonsets are 422 with kube's messages", func(t *testing.T) {
		zero := intstr.FromInt32(0)
		noMatch := newDaemonSet("no-match")
		noMatch.Spec.Template.Labels = map[string]string{"app": "other"}
		bothZero := newDaemonSet("both-zero")
		bothZero.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &zero}
		never := newDaemonSet("never")
		never.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		for _, tc := range []struct {
			ds   *appsv1.DaemonSet
			want string
		}{
			{noMatch, "spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`"},
			{bothZero, "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"},
			{never, "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""},
		} {
			_, err := daemonSets.Create(ctx, tc.ds, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want 422 with %q", tc.ds.Name, err, tc.want)
			}
		}
	})

	t.Run("generation, template generation and the immutable selector", func(t *testing.T) {
		cur, err := daemonSets.Patch(ctx, "agent", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"spec":{"terminationGracePeriodSeconds":1}}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Generation != 2 || cur.Annotations[appsv1.DeprecatedTemplateGeneration] != "2" {
			t.Errorf("after a template change: generation %d annotations %v", cur.Generation, cur.Annotations)
		}
		// The conformance specs' patch, with updateStrategy misplaced at the root: an
		// unknown field is dropped, not refused.
		cur, err = daemonSets.Patch(ctx, "agent", types.StrategicMergePatchType, []byte(`{"spec":{"minReadySeconds":1},"updateStrategy":{"type":"RollingUpdate"}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Generation != 3 || cur.Annotations[appsv1.DeprecatedTemplateGeneration] != "2" {
			t.Errorf("after a minReadySeconds change: generation %d annotations %v", cur.Generation, cur.Annotations)
		}
		cur.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent", "v": "2"}}
		cur.Spec.Template.Labels = map[string]string{"app": "agent", "v": "2"}
		if _, err := daemonSets.Update(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "field is immutable") {
			t.Errorf("selector change: got %v, want 422 field is immutable", err)
		}
	})

	t.Run("status writes change status only", func(t *testing.T) {
		cur, err := daemonSets.Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, ObservedGeneration: cur.Generation, CollisionCount: ptr.To(int32(1))}
		cur.Spec.MinReadySeconds = 30
		st, err := daemonSets.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.DesiredNumberScheduled != 2 || st.Spec.MinReadySeconds != 1 || st.Generation != cur.Generation {
			t.Errorf("status write: status %+v minReadySeconds %d generation %d", st.Status, st.Spec.MinReadySeconds, st.Generation)
		}
		st.Status.CollisionCount = ptr.To(int32(0))
		if _, err := daemonSets.UpdateStatus(ctx, st, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot be decremented") {
			t.Errorf("decremented collisionCount: got %v", err)
		}
		// A spec write keeps the status.
		st, _ = daemonSets.Get(ctx, "agent", metav1.GetOptions{})
		st.Status = appsv1.DaemonSetStatus{}
		st.Spec.MinReadySeconds = 2
		up, err := daemonSets.Update(ctx, st, metav1.UpdateOptions{})
		if err != nil || up.Status.DesiredNumberScheduled != 2 {
			t.Errorf("spec write: %v status %+v", err, up.Status)
		}
	})

	t.Run("rollout undo's strategic merge patch replaces the template", func(t *testing.T) {
		// What the daemonset controller records and kubectl rollout undo applies.
		patch := `{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"agent"}},` +
			`"spec":{"containers":[{"name":"c","image":"busybox:1.35"}]}}}}`
		cur, err := daemonSets.Patch(ctx, "agent", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := cur.Spec.Template.Spec
		if spec.Containers[0].Image != "busybox:1.35" || spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != 30 ||
			cur.Annotations[appsv1.DeprecatedTemplateGeneration] != "3" {
			t.Errorf("after the replace patch: template %+v annotations %v", cur.Spec.Template, cur.Annotations)
		}
	})

	t.Run("kubectl's columns", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/apis/apps/v1/namespaces/default/daemonsets/agent", nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
		resp, err := srv.HTTPClient().Do(req)
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
			names = append(names, strings.ToUpper(c.Name))
		}
		if got := strings.Join(names, " "); got != "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE CONTAINERS IMAGES SELECTOR" {
			t.Errorf("columns %q", got)
		}
		if len(table.Rows) != 1 || table.Rows[0].Cells[0] != "agent" || table.Rows[0].Cells[1] != float64(2) || table.Rows[0].Cells[6] != "<none>" ||
			table.Rows[0].Cells[9] != "busybox:1.35" {
			t.Errorf("rows %+v", table.Rows)
		}
	})
}
