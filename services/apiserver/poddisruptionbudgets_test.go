package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// newPDB is a PodDisruptionBudget selecting app=<app> with minAvailable min.
func newPDB(name, app string, min intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &min,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
}

// TestPodDisruptionBudgetsServed covers policy/v1 poddisruptionbudgets: discovery,
// status cleared on create, kube's validation (422 with its field paths), generation
// bumps on spec changes only, the resourceVersion an update must carry, status-only
// writes through /status, and kubectl's columns.
func TestPodDisruptionBudgetsServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	pdbs := cs.PolicyV1().PodDisruptionBudgets("default")

	resources, err := cs.Discovery().ServerResourcesForGroupVersion("policy/v1")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]metav1.APIResource{}
	for _, r := range resources.APIResources {
		byName[r.Name] = r
	}
	if r := byName["poddisruptionbudgets"]; !r.Namespaced || strings.Join(r.ShortNames, ",") != "pdb" || r.Kind != "PodDisruptionBudget" {
		t.Errorf("poddisruptionbudgets in discovery: %+v", r)
	}
	if r := byName["poddisruptionbudgets/status"]; strings.Join(r.Verbs, ",") != "get,patch,update" {
		t.Errorf("poddisruptionbudgets/status in discovery: %+v", r)
	}

	in := newPDB("web", "web", intstr.FromInt32(2))
	in.Status.DisruptionsAllowed = 5
	created, err := pdbs.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.DisruptionsAllowed != 0 || created.Generation != 1 {
		t.Errorf("created: status %+v generation %d, want a cleared status and generation 1", created.Status, created.Generation)
	}

	t.Run("validation", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			mutate func(*policyv1.PodDisruptionBudget)
			want   string
		}{
			{"both set", func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1)) },
				"minAvailable and maxUnavailable cannot be both set"},
			{"negative", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptr.To(intstr.FromInt32(-1)) },
				"spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"},
			{"over 100%", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptr.To(intstr.FromString("120%")) },
				`spec.minAvailable: Invalid value: "120%": must not be greater than 100%`},
			{"not a percent", func(p *policyv1.PodDisruptionBudget) {
				p.Spec.MinAvailable = nil
				p.Spec.MaxUnavailable = ptr.To(intstr.FromString("half"))
			}, `spec.maxUnavailable: Invalid value: "half": a valid percent string must be`},
			{"policy", func(p *policyv1.PodDisruptionBudget) {
				p.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.UnhealthyPodEvictionPolicyType("Sometimes"))
			}, `spec.unhealthyPodEvictionPolicy: Unsupported value: "Sometimes": supported values: "AlwaysAllow", "IfHealthyBudget"`},
			{"selector", func(p *policyv1.PodDisruptionBudget) {
				p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "no spaces allowed"}}
			}, "spec.selector.matchLabels"},
		} {
			p := newPDB("bad-"+strings.ReplaceAll(tc.name, " ", "-"), "web", intstr.FromInt32(1))
			tc.mutate(p)
			_, err := pdbs.Create(ctx, p, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want 422 containing %q", tc.name, err, tc.want)
			}
		}
	})

	t.Run("generation and unconditional update", func(t *testing.T) {
		p, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{"x": "y"}
		if p, err = pdbs.Update(ctx, p, metav1.UpdateOptions{}); err != nil || p.Generation != 1 {
			t.Fatalf("label update: err %v generation %d, want 1", err, p.Generation)
		}
		p.Spec.MinAvailable = ptr.To(intstr.FromString("50%"))
		if p, err = pdbs.Update(ctx, p, metav1.UpdateOptions{}); err != nil || p.Generation != 2 {
			t.Fatalf("spec update: err %v generation %d, want 2", err, p.Generation)
		}
		p.ResourceVersion = ""
		if _, err := pdbs.Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("update without resourceVersion: got %v, want 422", err)
		}
	})

	t.Run("status", func(t *testing.T) {
		p, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.DisruptionsAllowed, p.Status.ObservedGeneration = 3, p.Generation
		p.Spec.MinAvailable = ptr.To(intstr.FromInt32(7))
		st, err := pdbs.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.DisruptionsAllowed != 3 || st.Spec.MinAvailable.String() != "50%" {
			t.Errorf("status write: status %+v minAvailable %s, want 3 and the stored 50%%", st.Status, st.Spec.MinAvailable)
		}
		st.Status.CurrentHealthy = -1
		if _, err := pdbs.UpdateStatus(ctx, st, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			!strings.Contains(err.Error(), "status.currentHealthy") {
			t.Errorf("negative currentHealthy: got %v, want 422 on status.currentHealthy", err)
		}
		st.Status.CurrentHealthy = 0
		st.Spec.MinAvailable = ptr.To(intstr.FromInt32(1))
		if after, err := pdbs.Update(ctx, st, metav1.UpdateOptions{}); err != nil || after.Status.DisruptionsAllowed != 3 {
			t.Errorf("main resource write: err %v status %+v, want the stored status kept", err, after.Status)
		}
	})

	t.Run("table", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/apis/policy/v1/namespaces/default/poddisruptionbudgets", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
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
			names = append(names, c.Name)
		}
		if got := strings.Join(names, ","); got != "Name,Min Available,Max Unavailable,Allowed Disruptions,Age" {
			t.Errorf("columns %s", got)
		}
		if len(table.Rows) != 1 || table.Rows[0].Cells[1] != "1" || table.Rows[0].Cells[2] != "N/A" || table.Rows[0].Cells[3] != float64(3) {
			t.Errorf("rows %+v", table.Rows)
		}
	})
}

// runningPod creates pod name (label app=<app>) bound to a node, so its delete is
// graceful and it stays visible, marked, after an eviction, and reports it Running and
// Ready (or not) as a kubelet would.
func runningPod(t *testing.T, cs kubernetes.Interface, name, app string, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			AutomountServiceAccountToken: ptr.To(false)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if pod, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pod
}

// setPDBStatus writes the status the disruption controller would have computed.
func setPDBStatus(t *testing.T, cs kubernetes.Interface, name string, allowed, desired, current int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	ctx := context.Background()
	p, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: p.Generation, DisruptionsAllowed: allowed,
		DesiredHealthy: desired, CurrentHealthy: current, ExpectedPods: current}
	if p, err = cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

func evict(cs kubernetes.Interface, pod string, opts *metav1.DeleteOptions) error {
	return cs.PolicyV1().Evictions("default").Evict(context.Background(), &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "default"}, DeleteOptions: opts,
	})
}

// TestEvictionHonoursDisruptionBudgets covers pods/eviction as kube's EvictionREST: the
// discovery entry kubectl drain looks for, 429 with kube's message and DisruptionBudget
// cause when the budget allows nothing, dry runs that change nothing, a granted eviction
// that takes one from disruptionsAllowed, records the pod in disruptedPods, marks the
// pod DisruptionTarget and deletes it gracefully; terminal pods evicted whatever the
// budget; unready pods under AlwaysAllow; a budget the controller has not seen yet; two
// budgets (500); a name mismatch (400); and RBAC on create pods/eviction.
func TestEvictionHonoursDisruptionBudgets(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	pdbs := cs.PolicyV1().PodDisruptionBudgets("default")

	t.Run("discovery", func(t *testing.T) {
		list, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range list.APIResources {
			if r.Name == "pods/eviction" {
				found = r.Group == "policy" && r.Version == "v1" && r.Kind == "Eviction" && strings.Join(r.Verbs, ",") == "create"
			}
		}
		if !found {
			t.Errorf("pods/eviction not in discovery as policy/v1 Eviction: %+v", list.APIResources)
		}
	})

	runningPod(t, cs, "web-1", "web", true)
	runningPod(t, cs, "web-2", "web", true)
	if _, err := pdbs.Create(ctx, newPDB("web", "web", intstr.FromInt32(2)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("not yet observed", func(t *testing.T) {
		// Asked once: client-go would follow the answer's Retry-After (10 s) ten times.
		body := `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1"}}`
		err := cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("web-1").SubResource("eviction").
			MaxRetries(0).Body([]byte(body)).Do(ctx).Error()
		var status apierrors.APIStatus
		if !apierrors.IsTooManyRequests(err) || !hasCause(err, "The disruption budget web is still being processed by the server.") ||
			!asStatus(err, &status) || status.Status().Details.RetryAfterSeconds != 10 {
			t.Errorf("eviction before the controller saw the budget: got %v, want 429 still being processed, retry after 10 s", err)
		}
	})

	setPDBStatus(t, cs, "web", 0, 2, 2)
	t.Run("refused", func(t *testing.T) {
		err := evict(cs, "web-1", nil)
		if !apierrors.IsTooManyRequests(err) || err.Error() != "Cannot evict pod as it would violate the pod's disruption budget." ||
			!hasCause(err, "The disruption budget web needs 2 healthy pods and has 2 currently") {
			t.Errorf("got %v (%#v), want kube's 429", err, err)
		}
		if p, err := pods.Get(ctx, "web-1", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("refused eviction touched the pod: %v %+v", err, p)
		}
	})

	setPDBStatus(t, cs, "web", 1, 1, 2)
	t.Run("dry run", func(t *testing.T) {
		if err := evict(cs, "web-1", &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		p, err := pods.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil || len(p.Status.Conditions) != 1 {
			t.Errorf("dry run changed the pod: %v %+v", err, p)
		}
		if b, err := pdbs.Get(ctx, "web", metav1.GetOptions{}); err != nil || b.Status.DisruptionsAllowed != 1 || len(b.Status.DisruptedPods) != 0 {
			t.Errorf("dry run changed the budget: %v %+v", err, b)
		}
	})

	t.Run("granted", func(t *testing.T) {
		if err := evict(cs, "web-1", nil); err != nil {
			t.Fatal(err)
		}
		p, err := pods.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp == nil {
			t.Fatalf("evicted pod not being deleted: %v %+v", err, p)
		}
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
				cond = &p.Status.Conditions[i]
			}
		}
		if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != "EvictionByEvictionAPI" {
			t.Errorf("DisruptionTarget condition: %+v", p.Status.Conditions)
		}
		b, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.Status.DisruptedPods["web-1"]; b.Status.DisruptionsAllowed != 0 || !ok {
			t.Errorf("budget after eviction: %+v", b.Status)
		}
		if err := evict(cs, "web-2", nil); !apierrors.IsTooManyRequests(err) {
			t.Errorf("second eviction: got %v, want 429", err)
		}
	})

	t.Run("terminal pod", func(t *testing.T) {
		done := runningPod(t, cs, "web-done", "web", false)
		done.Status.Phase = corev1.PodSucceeded
		if _, err := pods.UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := evict(cs, "web-done", nil); err != nil {
			t.Fatalf("terminal pod under an exhausted budget: %v", err)
		}
		if _, err := pods.Get(ctx, "web-done", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("terminal pod after eviction: got %v, want it gone", err)
		}
	})

	t.Run("unready pod under AlwaysAllow", func(t *testing.T) {
		runningPod(t, cs, "batch-1", "batch", false)
		b := newPDB("batch", "batch", intstr.FromInt32(1))
		b.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
		if _, err := pdbs.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setPDBStatus(t, cs, "batch", 0, 1, 0)
		if err := evict(cs, "batch-1", nil); err != nil {
			t.Fatalf("unready pod under AlwaysAllow: %v", err)
		}
		if got, err := pdbs.Get(ctx, "batch", metav1.GetOptions{}); err != nil || len(got.Status.DisruptedPods) != 0 {
			t.Errorf("budget charged for an unready pod: %v %+v", err, got)
		}
		runningPod(t, cs, "batch-2", "batch", false)
		b, err := pdbs.Get(ctx, "batch", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.IfHealthyBudget)
		if _, err := pdbs.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		setPDBStatus(t, cs, "batch", 0, 1, 0)
		if err := evict(cs, "batch-2", nil); !apierrors.IsTooManyRequests(err) {
			t.Errorf("unready pod under IfHealthyBudget with the budget unmet: got %v, want 429", err)
		}
	})

	t.Run("two budgets", func(t *testing.T) {
		other := newPDB("web-too", "web", intstr.FromInt32(0))
		if _, err := pdbs.Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := evict(cs, "web-2", nil)
		var status apierrors.APIStatus
		if !asStatus(err, &status) || status.Status().Code != 500 ||
			!strings.Contains(err.Error(), "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.") {
			t.Errorf("got %v, want kube's 500", err)
		}
		if err := pdbs.Delete(ctx, "web-too", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("name mismatch", func(t *testing.T) {
		body := `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1"}}`
		err := cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("web-2").SubResource("eviction").
			Body([]byte(body)).Do(ctx).Error()
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "name in URL does not match name in Eviction object") {
			t.Errorf("got %v, want 400", err)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		alice := kubernetes.NewForConfigOrDie(srv.ClientConfig("alice"))
		if err := evict(alice, "web-2", nil); !apierrors.IsForbidden(err) {
			t.Fatalf("eviction without rights: got %v, want 403", err)
		}
		if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// edit may evict: the budget (no disruption left) answers, not RBAC, once the
		// authorizer's watch cache holds the binding.
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			err = evict(alice, "web-2", nil)
			return !apierrors.IsForbidden(err), nil
		})
		if !apierrors.IsTooManyRequests(err) {
			t.Errorf("eviction as an editor: got %v, want the budget's 429", err)
		}
	})
}

// hasCause reports whether err is an API status with a DisruptionBudget cause saying msg.
func hasCause(err error, msg string) bool {
	var status apierrors.APIStatus
	if !asStatus(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == policyv1.DisruptionBudgetCause && c.Message == msg {
			return true
		}
	}
	return false
}

func asStatus(err error, status *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*status = s
	}
	return ok
}
