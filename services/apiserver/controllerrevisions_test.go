package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// TestControllerRevisionsServed covers apps/v1 controllerrevisions as the
// ControllerRevision conformance spec uses them (create, strategic merge patch of labels,
// update, list across namespaces by label, delete, delete-collection) and kube's rules:
// data is required and immutable, revision is not negative and may be renumbered, and
// kubectl's columns are NAME CONTROLLER REVISION AGE.
func TestControllerRevisionsServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	revisions := cs.AppsV1().ControllerRevisions("default")
	isTrue := true
	newRevision := func(name string, revision int64) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "cr-test"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "fluentd", UID: "uid-1", Controller: &isTrue}}},
			Data:     runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace","spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`)},
			Revision: revision,
		}
	}

	created, err := revisions.Create(ctx, newRevision("fluentd-1", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Revision != 1 || !strings.Contains(string(created.Data.Raw), `"image":"busybox"`) {
		t.Fatalf("created %+v data %s", created, created.Data.Raw)
	}

	t.Run("invalid revisions are 422 with kube's messages", func(t *testing.T) {
		noData := newRevision("no-data", 1)
		noData.Data = runtime.RawExtension{}
		negative := newRevision("negative", -1)
		for _, tc := range []struct {
			cr   *appsv1.ControllerRevision
			want string
		}{
			{noData, "data: Required value: data is mandatory"},
			{negative, "revision: Invalid value: -1: must be greater than or equal to 0"},
		} {
			_, err := revisions.Create(ctx, tc.cr, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want 422 with %q", tc.cr.Name, err, tc.want)
			}
		}
	})

	t.Run("labels and revision change, data does not", func(t *testing.T) {
		patched, err := revisions.Patch(ctx, "fluentd-1", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"fluentd-1":"patched"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Labels["fluentd-1"] != "patched" {
			t.Fatalf("patch: %v %v", err, patched)
		}
		patched.Labels["fluentd-1"] = "updated"
		patched.Revision = 3
		updated, err := revisions.Update(ctx, patched, metav1.UpdateOptions{})
		if err != nil || updated.Labels["fluentd-1"] != "updated" || updated.Revision != 3 {
			t.Fatalf("update: %v %+v", err, updated)
		}
		updated.Data = runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`)}
		if _, err := revisions.Update(ctx, updated, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "data: Invalid value") ||
			!strings.Contains(err.Error(), "field is immutable") {
			t.Errorf("data change: got %v, want 422 field is immutable", err)
		}
		// Data re-encoded with other spacing is the same data.
		same, err := revisions.Get(ctx, "fluentd-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var v interface{}
		_ = json.Unmarshal(same.Data.Raw, &v)
		indented, _ := json.MarshalIndent(v, "", "  ")
		same.Data = runtime.RawExtension{Raw: indented}
		if _, err := revisions.Update(ctx, same, metav1.UpdateOptions{}); err != nil {
			t.Errorf("update with re-encoded data: %v", err)
		}
	})

	t.Run("list across namespaces, delete and delete-collection by label", func(t *testing.T) {
		if _, err := revisions.Create(ctx, newRevision("fluentd-2", 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		all, err := cs.AppsV1().ControllerRevisions("").List(ctx, metav1.ListOptions{LabelSelector: "app=cr-test"})
		if err != nil || len(all.Items) != 2 {
			t.Fatalf("list: %v %d items", err, len(all.Items))
		}
		if err := revisions.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "fluentd-1=updated"}); err != nil {
			t.Fatal(err)
		}
		left, err := revisions.List(ctx, metav1.ListOptions{LabelSelector: "app=cr-test"})
		if err != nil || len(left.Items) != 1 || left.Items[0].Name != "fluentd-2" {
			t.Fatalf("after delete-collection: %v %+v", err, left)
		}
	})

	t.Run("kubectl's columns", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/apis/apps/v1/namespaces/default/controllerrevisions", nil)
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
		if got := strings.Join(names, " "); got != "NAME CONTROLLER REVISION AGE" {
			t.Errorf("columns %q", got)
		}
		if len(table.Rows) != 1 || table.Rows[0].Cells[0] != "fluentd-2" || table.Rows[0].Cells[1] != "daemonset.apps/fluentd" || table.Rows[0].Cells[2] != float64(2) {
			t.Errorf("rows %+v", table.Rows)
		}
	})

	if err := revisions.Delete(ctx, "fluentd-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := revisions.Get(ctx, "fluentd-2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after delete: %v", err)
	}
}
