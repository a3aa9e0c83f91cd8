package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
}

// do sends a raw request and decodes a Status from a non-2xx answer.
func do(t *testing.T, client *http.Client, method, url, contentType, body string) (int, *metav1.Status, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 {
		return resp.StatusCode, nil, data
	}
	var status metav1.Status
	if err := json.Unmarshal(data, &status); err != nil || status.Kind != "Status" {
		t.Fatalf("%s %s: %d with a body that is not a Status: %s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, &status, data
}

func TestBadInputGetsStatusWithClientErrorCode(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	bound := newPod("bound")
	bound.Spec.NodeName = "node-a"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := srv.URL + "/api/v1/namespaces/default/pods"
	tests := []struct {
		name, method, url, body string
		wantCode                int
		wantReason              metav1.StatusReason
		wantMessage             string
	}{
		{"malformed JSON", "POST", pods, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":`, 400, metav1.StatusReasonBadRequest, "cannot be handled as a Pod"},
		{"invalid name", "POST", pods, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"Not_Valid"},"spec":{"containers":[{"name":"c","image":"x"}]}}`, 422, metav1.StatusReasonInvalid, "metadata.name: Invalid value"},
		{"pod without containers", "POST", pods, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"empty"},"spec":{}}`, 422, metav1.StatusReasonInvalid, `Pod "empty" is invalid: spec.containers: Required value`},
		{"wrong kind for the URL", "POST", pods, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`, 400, metav1.StatusReasonBadRequest, "cannot be handled as a Pod"},
		{"unknown field selector", "GET", pods + "?fieldSelector=foo%3Dbar", "", 400, metav1.StatusReasonBadRequest, "field label not supported: foo"},
		{"malformed label selector", "GET", pods + "?labelSelector=a%20in%20(", "", 400, metav1.StatusReasonBadRequest, ""},
		{"binding of a bound pod", "POST", pods + "/bound/binding", `{"kind":"Binding","apiVersion":"v1","metadata":{"name":"bound"},"target":{"kind":"Node","name":"node-b"}}`, 409, metav1.StatusReasonConflict, `pod bound is already assigned to node "node-a"`},
		{"binding without a target", "POST", pods + "/bound/binding", `{"kind":"Binding","apiVersion":"v1","metadata":{"name":"bound"},"target":{}}`, 422, metav1.StatusReasonInvalid, "target.name: Required value"},
		{"binding whose name differs from the URL", "POST", pods + "/bound/binding", `{"kind":"Binding","apiVersion":"v1","metadata":{"name":"other"},"target":{"name":"n"}}`, 400, metav1.StatusReasonBadRequest, "does not match"},
		{"missing pod", "GET", pods + "/nope", "", 404, metav1.StatusReasonNotFound, `pods "nope" not found`},
		{"missing namespace", "POST", srv.URL + "/api/v1/namespaces/nope/pods", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}}`, 404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
		{"unknown resource", "GET", srv.URL + "/api/v1/namespaces/default/widgets", "", 404, metav1.StatusReasonNotFound, ""},
		{"sendInitialEvents without resourceVersionMatch", "GET", pods + "?watch=true&sendInitialEvents=true", "", 422, metav1.StatusReasonInvalid, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"},
		{"sendInitialEvents on a list", "GET", pods + "?sendInitialEvents=true", "", 422, metav1.StatusReasonInvalid, "sendInitialEvents is forbidden for list"},
		{"negative grace period", "DELETE", pods + "/bound", `{"gracePeriodSeconds":-5}`, 400, metav1.StatusReasonBadRequest, "gracePeriodSeconds"},
		{"unsupported patch type", "PATCH", pods + "/bound", `{}`, 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"body over 3 MiB", "POST", pods, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"big","annotations":{"a":"` + strings.Repeat("x", 3<<20) + `"}}}`, 413, metav1.StatusReasonRequestEntityTooLarge, "limit is 3145728"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			contentType := "application/json"
			if tt.method == "PATCH" {
				contentType = "application/xml-patch+xml" // a patch type no apiserver serves
			}
			code, status, body := do(t, srv.HTTPClient(), tt.method, tt.url, contentType, tt.body)
			if code != tt.wantCode || status == nil {
				t.Fatalf("code %d, want %d; body %s", code, tt.wantCode, body)
			}
			if status.Code != int32(tt.wantCode) || status.Reason != tt.wantReason || status.Status != metav1.StatusFailure {
				t.Errorf("status %+v, want code %d reason %s", status, tt.wantCode, tt.wantReason)
			}
			if !strings.Contains(status.Message, tt.wantMessage) {
				t.Errorf("message %q, want it to contain %q", status.Message, tt.wantMessage)
			}
		})
	}
}

func TestCreateUpdateConflicts(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	created, err := cs.CoreV1().Pods("default").Create(ctx, newPod("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Fatalf("server-managed metadata missing: %+v", created.ObjectMeta)
	}
	if created.Spec.RestartPolicy != corev1.RestartPolicyAlways || created.Spec.SchedulerName != "default-scheduler" ||
		*created.Spec.TerminationGracePeriodSeconds != 30 || created.Status.Phase != corev1.PodPending {
		t.Errorf("defaults not applied: %+v", created.Spec)
	}

	_, err = cs.CoreV1().Pods("default").Create(ctx, newPod("web"), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: got %v, want AlreadyExists", err)
	}

	update := created.DeepCopy()
	update.Labels["tier"] = "frontend"
	updated, err := cs.CoreV1().Pods("default").Update(ctx, update, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.ResourceVersion == created.ResourceVersion {
		t.Errorf("resourceVersion did not change on update")
	}
	stale := created.DeepCopy()
	stale.Labels["tier"] = "backend"
	_, err = cs.CoreV1().Pods("default").Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: got %v, want Conflict", err)
	}

	// The main resource ignores status; pods/status ignores spec.
	withStatus := updated.DeepCopy()
	withStatus.Status.Phase = corev1.PodRunning
	afterMain, err := cs.CoreV1().Pods("default").Update(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterMain.Status.Phase != corev1.PodPending {
		t.Errorf("main resource changed status to %s", afterMain.Status.Phase)
	}
	statusWrite := afterMain.DeepCopy()
	statusWrite.Status.Phase = corev1.PodRunning
	statusWrite.Spec.ActiveDeadlineSeconds = ptr.To(int64(5))
	afterStatus, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, statusWrite, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterStatus.Status.Phase != corev1.PodRunning || afterStatus.Spec.ActiveDeadlineSeconds != nil {
		t.Errorf("status write: phase %s, activeDeadlineSeconds %v", afterStatus.Status.Phase, afterStatus.Spec.ActiveDeadlineSeconds)
	}

	// A spec change other than the image is forbidden.
	forbidden := afterStatus.DeepCopy()
	forbidden.Spec.Containers[0].Name = "renamed"
	_, err = cs.CoreV1().Pods("default").Update(ctx, forbidden, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("renaming a container: got %v, want Invalid", err)
	}

	// A stale write is a 409 even when it would also be invalid: its writer must
	// reread, not be told that a change it may not have meant is forbidden.
	staleAndForbidden := created.DeepCopy()
	staleAndForbidden.Spec.Containers[0].Name = "renamed"
	_, err = cs.CoreV1().Pods("default").Update(ctx, staleAndForbidden, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("a stale and invalid update: got %v, want Conflict", err)
	}

	// Without a resourceVersion an update is unconditional (kubectl replace of a
	// manifest), as kube allows for its built-in resources.
	unconditional := created.DeepCopy()
	unconditional.ResourceVersion = ""
	unconditional.Labels["tier"] = "unconditional"
	if got, err := cs.CoreV1().Pods("default").Update(ctx, unconditional, metav1.UpdateOptions{}); err != nil || got.Labels["tier"] != "unconditional" {
		t.Errorf("update without a resourceVersion: %v %v", err, got)
	}

	// kubectl label sends a merge patch; a stale resourceVersion in it is a precondition.
	patched, err := cs.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{})
	if err != nil || patched.Labels["patched"] != "yes" {
		t.Fatalf("merge patch: %v %v", err, patched)
	}
	_, err = cs.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"resourceVersion":"`+created.ResourceVersion+`","labels":{"x":"y"}}}`), metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("patch with a stale resourceVersion: got %v, want Conflict", err)
	}
	_, err = cs.CoreV1().Pods("default").Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"containers":[{"name":"c","image":"busybox:1.37"}]}}`), metav1.PatchOptions{})
	if err != nil {
		t.Errorf("strategic merge patch of the image: %v", err)
	}
}

func TestBindingAssignsNodeAndSetsPodScheduled(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	pod, err := cs.CoreV1().Pods("default").Create(ctx, newPod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = cs.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: pod.UID, Annotations: map[string]string{"bound-by": "test"}},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-a"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "node-a" || got.Annotations["bound-by"] != "test" {
		t.Errorf("after binding: nodeName %q annotations %v", got.Spec.NodeName, got.Annotations)
	}
	scheduled := false
	for _, c := range got.Status.Conditions {
		scheduled = scheduled || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue)
	}
	if !scheduled {
		t.Errorf("PodScheduled=True missing: %+v", got.Status.Conditions)
	}
	err = cs.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Name: "node-b"},
	}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("second binding: got %v, want Conflict", err)
	}
}

func TestGracefulPodDeletion(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	unscheduled, err := cs.CoreV1().Pods("default").Create(ctx, newPod("unscheduled"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, unscheduled.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, unscheduled.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a pod no kubelet runs is deleted at once; get: %v", err)
	}

	running := newPod("running")
	running.Spec.NodeName = "node-a"
	pod, err := cs.CoreV1().Pods("default").Create(ctx, running, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	marked, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a bound pod stays until its kubelet deletes it: %v", err)
	}
	if marked.DeletionTimestamp == nil || marked.DeletionGracePeriodSeconds == nil || *marked.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("deletion not marked: %+v", marked.ObjectMeta)
	}
	wrongUID := types.UID("not-the-uid")
	err = cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &wrongUID}})
	if !apierrors.IsConflict(err) {
		t.Errorf("delete with a wrong UID precondition: got %v, want Conflict", err)
	}
	err = cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the kubelet's final delete: %v", err)
	}
}

func TestWatchFromResourceVersionWithFieldSelector(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := cs.CoreV1().Pods("default").Create(ctx, newPod("before"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{
		ResourceVersion: before.ResourceVersion,
		FieldSelector:   "spec.nodeName=node-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p := newPod("p")
	if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	// The unbound create does not match; binding makes the pod match (ADDED); the delete
	// removes it (DELETED). "before" predates the watch and never shows.
	want := []watch.EventType{watch.Added, watch.Deleted}
	for i, wantType := range want {
		select {
		case ev := <-w.ResultChan():
			pod, ok := ev.Object.(*corev1.Pod)
			if ev.Type != wantType || !ok || pod.Name != "p" {
				t.Fatalf("event %d: %s %T %v, want %s of pod p", i, ev.Type, ev.Object, ev.Object, wantType)
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for event %d (%s)", i, wantType)
		}
	}
}

func TestKubectlFacingShapes(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("t"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("version names the Kubernetes minor kubectl dispatches on", func(t *testing.T) {
		_, _, body := do(t, srv.HTTPClient(), "GET", srv.URL+"/version", "", "")
		var v map[string]string
		if err := json.Unmarshal(body, &v); err != nil || v["major"] != "1" || v["minor"] != "32" || !strings.HasPrefix(v["gitVersion"], "v1.32.") {
			t.Errorf("/version = %s", body)
		}
	})

	t.Run("pods print as a Table with kubectl's columns", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/namespaces/default/pods?limit=500", nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
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
			if c.Priority == 0 {
				names = append(names, strings.ToUpper(c.Name))
			}
		}
		if got := strings.Join(names, " "); got != "NAME READY STATUS RESTARTS AGE" || table.Kind != "Table" || table.ResourceVersion == "" {
			t.Errorf("columns %q kind %q rv %q", got, table.Kind, table.ResourceVersion)
		}
		if len(table.Rows) != 1 || table.Rows[0].Cells[0] != "t" || table.Rows[0].Cells[2] != "Pending" {
			t.Errorf("rows %+v", table.Rows)
		}
	})

	t.Run("watch stream is newline-delimited JSON events", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/namespaces/default/pods?watch=1&resourceVersion=0", nil)
		resp, err := srv.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Type   string
			Object map[string]interface{}
		}
		if err := json.Unmarshal(line, &ev); err != nil || ev.Type != "ADDED" || ev.Object["kind"] != "Pod" || ev.Object["apiVersion"] != "v1" {
			t.Errorf("first event %s (%v)", line, err)
		}
	})

	t.Run("discovery lists short names", func(t *testing.T) {
		resources, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
		if err != nil {
			t.Fatal(err)
		}
		short := map[string]string{}
		for _, r := range resources.APIResources {
			if len(r.ShortNames) > 0 {
				short[r.Name] = r.ShortNames[0]
			}
		}
		for name, want := range map[string]string{"pods": "po", "nodes": "no", "namespaces": "ns", "events": "ev"} {
			if short[name] != want {
				t.Errorf("%s short name %q, want %q", name, short[name], want)
			}
		}
	})
}

func TestNamespaceDeletionRemovesContentsThenNamespace(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("team").Create(ctx, newPod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ResourceQuotas("team").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("10")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().LimitRanges("team").Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "l"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cs.CoreV1().Pods("team").Create(ctx, newPod("late"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
		t.Errorf("create in a terminating namespace: got %v, want Forbidden (or NotFound once it is gone)", err)
	}
	var getErr error
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, getErr = cs.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
		return apierrors.IsNotFound(getErr), nil
	}); err != nil {
		t.Fatalf("namespace still there: %v", getErr)
	}
	if pods, err := cs.CoreV1().Pods("team").List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("contents left after the namespace went: %v %v", err, pods)
	}
	if quotas, err := cs.CoreV1().ResourceQuotas("team").List(ctx, metav1.ListOptions{}); err != nil || len(quotas.Items) != 0 {
		t.Errorf("quotas left after the namespace went: %v %v", err, quotas)
	}
	if limits, err := cs.CoreV1().LimitRanges("team").List(ctx, metav1.ListOptions{}); err != nil || len(limits.Items) != 0 {
		t.Errorf("limit ranges left after the namespace went: %v %v", err, limits)
	}
	err = cs.CoreV1().Namespaces().Delete(ctx, "kube-system", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("deleting kube-system: got %v, want Forbidden", err)
	}
}

func TestFinalizersHoldDeletionUntilRemoved(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	p := newPod("held")
	p.Finalizers = []string{"example.com/hold"}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held, err := cs.CoreV1().Pods("default").Get(ctx, "held", metav1.GetOptions{})
	if err != nil || held.DeletionTimestamp == nil {
		t.Fatalf("a pod with a finalizer stays, marked: %v %+v", err, held)
	}
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("removing the last finalizer deletes the pod; get: %v", err)
	}
}

func TestFieldValidation(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	pods := srv.URL + "/api/v1/namespaces/default/pods"
	body := func(name string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"` + name + `"},"spec":{"bogusField":1,"containers":[{"name":"c","image":"x"}]}}`
	}
	code, status, _ := do(t, srv.HTTPClient(), "POST", pods+"?fieldValidation=Strict", "application/json", body("strict"))
	if code != 400 || !strings.Contains(status.Message, `strict decoding error: unknown field "spec.bogusField"`) {
		t.Errorf("Strict: %d %+v", code, status)
	}
	req, _ := http.NewRequest("POST", pods+"?fieldValidation=Warn", strings.NewReader(body("warn")))
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get("Warning") != `299 - "unknown field \"spec.bogusField\""` {
		t.Errorf("Warn: %d, Warning %q", resp.StatusCode, resp.Header.Get("Warning"))
	}
	if code, _, _ := do(t, srv.HTTPClient(), "POST", pods+"?fieldValidation=Ignore", "application/json", body("ignore")); code != 201 {
		t.Errorf("Ignore: %d", code)
	}
}

func TestDiscoveryOpenAPIAndMetrics(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	get := func(path, accept string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	resp, body := get("/api", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")
	if ct := resp.Header.Get("Content-Type"); ct != "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList" ||
		!strings.Contains(string(body), `"responseKind":{"group":"","version":"v1","kind":"Pod"}`) {
		t.Errorf("aggregated /api: %s %s", ct, body)
	}
	if _, body := get("/api", "application/json"); !strings.Contains(string(body), `"kind":"APIVersions"`) {
		t.Errorf("legacy /api: %s", body)
	}
	// With a trailing slash too, as kube-apiserver answers them.
	for path, kind := range map[string]string{"/api/": "APIVersions", "/apis/": "APIGroupList", "/api/v1/": "APIResourceList",
		"/apis/apps/": "APIGroup", "/apis/apps/v1/": "APIResourceList"} {
		if resp, body := get(path, "application/json"); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"kind":"`+kind+`"`) {
			t.Errorf("GET %s: %d %.200s; want %s", path, resp.StatusCode, body, kind)
		}
	}
	_, index := get("/openapi/v3", "")
	var paths struct {
		Paths map[string]struct{ ServerRelativeURL string }
	}
	if err := json.Unmarshal(index, &paths); err != nil || paths.Paths["api/v1"].ServerRelativeURL == "" {
		t.Fatalf("openapi index %s", index)
	}
	_, doc := get(paths.Paths["api/v1"].ServerRelativeURL, "")
	var v3 struct {
		Paths map[string]struct {
			Patch struct {
				GVK        map[string]string `json:"x-kubernetes-group-version-kind"`
				Parameters []struct{ Name string }
			}
		}
	}
	if err := json.Unmarshal(doc, &v3); err != nil {
		t.Fatal(err)
	}
	patch := v3.Paths["/api/v1/namespaces/{namespace}/pods/{name}"].Patch
	hasFieldValidation := false
	for _, p := range patch.Parameters {
		hasFieldValidation = hasFieldValidation || p.Name == "fieldValidation"
	}
	if patch.GVK["kind"] != "Pod" || !hasFieldValidation {
		t.Errorf("openapi api/v1 document lacks the pods PATCH operation kubectl looks for: %+v", patch)
	}
	if resp, body := get("/readyz", ""); resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("/readyz with etcd up: %d %s", resp.StatusCode, body)
	}
	_, _ = get("/api/v1/namespaces/default/pods", "")
	if _, metrics := get("/metrics", ""); !strings.Contains(string(metrics), `apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1`) {
		t.Errorf("metrics lack the pod LIST: %s", metrics)
	}
}

func TestWatchListSendsInitialEventsThenTheEndBookmark(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for len(got) < 3 {
		select {
		case ev := <-w.ResultChan():
			pod, _ := ev.Object.(*corev1.Pod)
			if ev.Type == watch.Bookmark && pod.Annotations["k8s.io/initial-events-end"] != "true" {
				continue // a periodic bookmark
			}
			got = append(got, string(ev.Type)+" "+pod.Name)
		case <-ctx.Done():
			t.Fatalf("events so far: %v", got)
		}
	}
	if strings.Join(got, ",") != "ADDED a,ADDED b,BOOKMARK " {
		t.Errorf("WatchList events %v, want ADDED a, ADDED b, then the initial-events-end BOOKMARK", got)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("c"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Bookmark {
				continue
			}
			if pod := ev.Object.(*corev1.Pod); ev.Type != watch.Added || pod.Name != "c" {
				t.Errorf("after the initial events: %s %s, want ADDED c", ev.Type, pod.Name)
			}
			return
		case <-ctx.Done():
			t.Fatal("no live event after the initial ones")
		}
	}
}

func TestManagedFieldsRecordEachManager(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("m"), metav1.CreateOptions{FieldManager: "kubectl-run"}); err != nil {
		t.Fatal(err)
	}
	patched, err := cs.CoreV1().Pods("default").Patch(ctx, "m", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"web"}}}`), metav1.PatchOptions{FieldManager: "kubectl-label"})
	if err != nil {
		t.Fatal(err)
	}
	managers := map[string]string{}
	for _, f := range patched.ManagedFields {
		managers[f.Manager] = string(f.Operation)
	}
	if managers["kubectl-run"] != "Update" || managers["kubectl-label"] != "Update" {
		t.Errorf("managedFields %v, want kubectl-run and kubectl-label", managers)
	}
}

// TestConfigMapsAndTheRootCAConfigMap pins what serving a resource from its descriptor
// alone gives: CRUD, discovery with short names, deletion with its namespace, and
// kube-root-ca.crt published into every namespace and put back when deleted.
func TestConfigMapsAndTheRootCAConfigMap(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rootCA := func() (*corev1.ConfigMap, error) {
		var cm *corev1.ConfigMap
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			cm, err = cs.CoreV1().ConfigMaps("team").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err == nil, nil
		})
		return cm, err
	}
	cm, err := rootCA()
	if err != nil {
		t.Fatalf("kube-root-ca.crt never appeared in a new namespace: %v", err)
	}
	ca, err := os.ReadFile(filepath.Join(srv.PKIDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["ca.crt"] != string(ca) {
		t.Errorf("kube-root-ca.crt holds %q, want the cluster CA", cm.Data["ca.crt"])
	}
	if err := cs.CoreV1().ConfigMaps("team").Delete(ctx, "kube-root-ca.crt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rootCA(); err != nil {
		t.Fatalf("kube-root-ca.crt not put back after a delete: %v", err)
	}

	if _, err := cs.CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "fast"}, Immutable: ptr.To(true),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settings, err := cs.CoreV1().ConfigMaps("team").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settings.Data["mode"] = "slow"
	if _, err := cs.CoreV1().ConfigMaps("team").Update(ctx, settings, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("updating an immutable ConfigMap's data: got %v, want 422 Invalid", err)
	}

	resources, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range resources.APIResources {
		if r.Name == "configmaps" {
			found = r.Kind == "ConfigMap" && r.Namespaced && len(r.ShortNames) == 1 && r.ShortNames[0] == "cm"
		}
	}
	if !found {
		t.Errorf("discovery lacks configmaps (kind ConfigMap, namespaced, short name cm): %+v", resources.APIResources)
	}

	// The namespace controller's list of contents comes from the descriptors, so a
	// terminating namespace loses its ConfigMaps too.
	if err := cs.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("namespace team never went: %v", err)
	}
	if left, err := cs.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{}); err != nil || len(left.Items) != 0 {
		t.Errorf("ConfigMaps left after their namespace went: %v %v", err, left)
	}
}
