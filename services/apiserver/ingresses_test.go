package apiserver_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// conformanceIngress is the Ingress API conformance test's template: a default
// backend and one rule with an ImplementationSpecific path.
func conformanceIngress(host string) *networkingv1.Ingress {
	backend := func(name string) networkingv1.IngressBackend {
		return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 8080}}}
	}
	def := backend("default-backend")
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-example-ing", Labels: map[string]string{"special-label": "ing-test"}},
		Spec: networkingv1.IngressSpec{
			DefaultBackend: &def,
			Rules: []networkingv1.IngressRule{{
				Host: host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{
					{Path: "/", PathType: ptr.To(networkingv1.PathTypeImplementationSpecific), Backend: backend("test-backend")},
				}}},
			}},
		},
		// A client's status is cleared on create.
		Status: networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: []networkingv1.IngressLoadBalancerIngress{{IP: "10.9.9.9"}}}},
	}
}

// TestIngressesServed covers networking.k8s.io/v1 ingresses as the conformance
// suite's "Ingress API should support creating Ingress API operations" uses them:
// discovery (ingresses and ingresses/status), create, get, list and watch (namespaced
// and cluster-wide), merge patch, update, patch and update of status (which keep the
// spec), get of status, delete and delete-collection; and validation errors.
func TestIngressesServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	ns := "default"
	ings := cs.NetworkingV1().Ingresses(ns)
	selector := metav1.ListOptions{LabelSelector: "special-label=ing-test"}

	t.Run("discovery", func(t *testing.T) {
		groups, err := cs.Discovery().ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range groups.Groups {
			found = found || g.Name == "networking.k8s.io" && g.PreferredVersion.Version == "v1"
		}
		if !found {
			t.Errorf("networking.k8s.io/v1 not in /apis: %+v", groups.Groups)
		}
		resources, err := cs.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range resources.APIResources {
			verbs := strings.Join(r.Verbs, ",")
			if r.Name == "ingresses/status" {
				// skiff lists a status subresource with its Store's verbs (kube: get,
				// patch, update); the ones kube's clients use are there.
				if !strings.Contains(verbs, "get") || !strings.Contains(verbs, "patch,update") {
					t.Errorf("ingresses/status verbs %s", verbs)
				}
				verbs = "get,patch,update"
			}
			got = append(got, r.Name+":"+r.Kind+":"+verbs+":"+strings.Join(r.ShortNames, ","))
			if (r.Name == "ingressclasses") == r.Namespaced {
				t.Errorf("%s namespaced %v", r.Name, r.Namespaced)
			}
		}
		sort.Strings(got)
		want := []string{
			"ingressclasses:IngressClass:create,delete,deletecollection,get,list,patch,update,watch:",
			"ingresses/status:Ingress:get,patch,update:",
			"ingresses:Ingress:create,delete,deletecollection,get,list,patch,update,watch:ing",
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("networking.k8s.io/v1 resources\n got %v\nwant %v", got, want)
		}
	})

	var created *networkingv1.Ingress
	for _, host := range []string{"host1.bar.com", "host2.bar.com", "host3.bar.com"} {
		var err error
		if created, err = ings.Create(ctx, conformanceIngress(host), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(created.Status.LoadBalancer.Ingress) != 0 || created.Generation != 1 {
		t.Errorf("created: status %+v generation %d", created.Status, created.Generation)
	}
	list, err := ings.List(ctx, selector)
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %v %+v", err, list)
	}
	w, err := ings.Watch(ctx, metav1.ListOptions{LabelSelector: selector.LabelSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	t.Run("get, list cluster-wide, patch, update, watch", func(t *testing.T) {
		got, err := ings.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil || got.UID != created.UID {
			t.Fatalf("get: %v %+v", err, got)
		}
		all, err := cs.NetworkingV1().Ingresses("").List(ctx, selector)
		if err != nil || len(all.Items) != 3 {
			t.Fatalf("cluster-wide list: %v %+v", err, all)
		}
		cw, err := cs.NetworkingV1().Ingresses("").Watch(ctx, metav1.ListOptions{LabelSelector: selector.LabelSelector, ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("cluster-wide watch: %v", err)
		}
		cw.Stop()
		patched, err := ings.Patch(ctx, created.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"true"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Annotations["patched"] != "true" {
			t.Fatalf("patch: %v %+v", err, patched)
		}
		patched.Annotations["updated"] = "true"
		updated, err := ings.Update(ctx, patched, metav1.UpdateOptions{})
		if err != nil || updated.Annotations["updated"] != "true" || updated.Generation != 1 {
			t.Fatalf("update: %v %+v", err, updated)
		}
		for seen := false; !seen; {
			select {
			case ev := <-w.ResultChan():
				ing, ok := ev.Object.(*networkingv1.Ingress)
				if ev.Type != watch.Modified || !ok {
					t.Fatalf("watch event %s %T", ev.Type, ev.Object)
				}
				seen = ing.Annotations["patched"] == "true"
			case <-time.After(10 * time.Second):
				t.Fatal("no watch event with the patch")
			}
		}
	})

	t.Run("status", func(t *testing.T) {
		lb := networkingv1.IngressLoadBalancerStatus{Ingress: []networkingv1.IngressLoadBalancerIngress{{IP: "169.1.1.1"}}}
		lbJSON, _ := json.Marshal(lb)
		patched, err := ings.Patch(ctx, created.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"patchedstatus":"true"}},"status":{"loadBalancer":`+string(lbJSON)+`},"spec":{"ingressClassName":"ignored"}}`),
			metav1.PatchOptions{}, "status")
		if err != nil || patched.Annotations["patchedstatus"] != "true" || len(patched.Status.LoadBalancer.Ingress) != 1 ||
			patched.Status.LoadBalancer.Ingress[0].IP != "169.1.1.1" || patched.Spec.IngressClassName != nil {
			t.Fatalf("patch status: %v %+v", err, patched)
		}
		patched.Status.LoadBalancer.Ingress[0].IP = "169.1.1.2"
		patched.Spec.Rules = nil
		updated, err := ings.UpdateStatus(ctx, patched, metav1.UpdateOptions{})
		if err != nil || updated.Status.LoadBalancer.Ingress[0].IP != "169.1.1.2" || len(updated.Spec.Rules) != 1 {
			t.Fatalf("update status: %v %+v", err, updated)
		}
		updated.Status.LoadBalancer.Ingress[0].IP = "not-an-ip"
		if _, err := ings.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			!strings.Contains(err.Error(), `status.loadBalancer.ingress[0].ip: Invalid value: "not-an-ip"`) {
			t.Errorf("invalid status: %v", err)
		}
		raw, err := cs.NetworkingV1().RESTClient().Get().Namespace(ns).Resource("ingresses").Name(created.Name).SubResource("status").DoRaw(ctx)
		if err != nil || !strings.Contains(string(raw), string(created.UID)) {
			t.Errorf("get status: %v %s", err, raw)
		}
		// The main resource keeps the status a client sends it.
		got, _ := ings.Get(ctx, created.Name, metav1.GetOptions{})
		got.Status = networkingv1.IngressStatus{}
		got.Spec.Rules[0].Host = "changed.bar.com"
		upd, err := ings.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil || len(upd.Status.LoadBalancer.Ingress) != 1 || upd.Generation != 2 {
			t.Errorf("update after status: %v %+v", err, upd)
		}
	})

	t.Run("validation", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			change func(*networkingv1.Ingress)
			want   string
		}{
			{"a path without pathType", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].HTTP.Paths[0].PathType = nil },
				"spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"},
			{"an Exact path not starting with /", func(ing *networkingv1.Ingress) {
				ing.Spec.Rules[0].HTTP.Paths[0].Path, ing.Spec.Rules[0].HTTP.Paths[0].PathType = "foo", ptr.To(networkingv1.PathTypeExact)
			}, `spec.rules[0].http.paths[0].path: Invalid value: "foo": must be an absolute path`},
			{"neither default backend nor rules", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend, ing.Spec.Rules = nil, nil },
				"either `defaultBackend` or `rules` must be specified"},
			{"a backend with both port name and number", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend.Service.Port.Name = "http" },
				`spec.defaultBackend: Invalid value: "": cannot set both port name & port number`},
		} {
			ing := conformanceIngress("bad.bar.com")
			tc.change(ing)
			_, err := ings.Create(ctx, ing, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want 422 with %q", tc.name, err, tc.want)
			}
		}
	})

	t.Run("delete and delete-collection", func(t *testing.T) {
		if err := ings.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := ings.Get(ctx, created.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after delete: %v", err)
		}
		if l, err := ings.List(ctx, selector); err != nil || len(l.Items) != 2 {
			t.Errorf("after delete: %v %+v", err, l)
		}
		if err := ings.DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
			t.Fatal(err)
		}
		if l, err := ings.List(ctx, selector); err != nil || len(l.Items) != 0 {
			t.Errorf("left: %v %+v", err, l)
		}
	})
}

// TestIngressClassesServed covers networking.k8s.io/v1 ingressclasses as the
// conformance suite's "IngressClass API should support creating IngressClass API
// operations" uses them: create, get, list and watch by label, merge patch, update,
// delete and delete-collection; the default-class annotation; an immutable
// controller; kubectl's columns.
func TestIngressClassesServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	classes := cs.NetworkingV1().IngressClasses()
	unique := metav1.ListOptions{LabelSelector: "ingressclass=ic-test"}
	newClass := func(name string, isDefault bool) *networkingv1.IngressClass {
		ic := &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ingressclass": "ic-test", "special-label": "generic"}},
			Spec:       networkingv1.IngressClassSpec{Controller: "example.com/controller"},
		}
		if isDefault {
			ic.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
		}
		return ic
	}

	first, err := classes.Create(ctx, newClass("ingressclass1", false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ingressclass2", "ingressclass3"} {
		if _, err := classes.Create(ctx, newClass(name, name == "ingressclass3"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := classes.Create(ctx, newClass("ingressclass1", false), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want 409", err)
	}
	list, err := classes.List(ctx, metav1.ListOptions{LabelSelector: "special-label=generic"})
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %v %+v", err, list)
	}
	w, err := classes.Watch(ctx, metav1.ListOptions{LabelSelector: unique.LabelSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	t.Run("get, patch, update, watch", func(t *testing.T) {
		got, err := classes.Get(ctx, "ingressclass1", metav1.GetOptions{})
		if err != nil || got.UID != first.UID || got.Spec.Controller != "example.com/controller" {
			t.Fatalf("get: %v %+v", err, got)
		}
		if def, _ := classes.Get(ctx, "ingressclass3", metav1.GetOptions{}); def.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "true" {
			t.Errorf("default class annotation: %+v", def.Annotations)
		}
		patched, err := classes.Patch(ctx, "ingressclass1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"true"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Annotations["patched"] != "true" {
			t.Fatalf("patch: %v %+v", err, patched)
		}
		patched.Annotations["updated"] = "true"
		updated, err := classes.Update(ctx, patched, metav1.UpdateOptions{})
		if err != nil || updated.Annotations["updated"] != "true" {
			t.Fatalf("update: %v %+v", err, updated)
		}
		for seen := false; !seen; {
			select {
			case ev := <-w.ResultChan():
				ic, ok := ev.Object.(*networkingv1.IngressClass)
				if ev.Type != watch.Modified || !ok {
					t.Fatalf("watch event %s %T", ev.Type, ev.Object)
				}
				seen = ic.Annotations["patched"] == "true" && ic.Annotations["updated"] == "true"
			case <-time.After(10 * time.Second):
				t.Fatal("no watch event with the update")
			}
		}
	})

	t.Run("validation", func(t *testing.T) {
		ic, err := classes.Get(ctx, "ingressclass2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ic.Spec.Controller = "example.com/other"
		if _, err := classes.Update(ctx, ic, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			err.Error() != `IngressClass.networking.k8s.io "ingressclass2" is invalid: spec.controller: Invalid value: "example.com/other": field is immutable` {
			t.Errorf("controller change: %v", err)
		}
		bad := newClass("bad", false)
		bad.Spec.Controller = "no-domain"
		if _, err := classes.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `spec.controller: Invalid value: "no-domain"`) {
			t.Errorf("controller without a domain: %v", err)
		}
		bad.Spec.Controller = "example.com/c"
		bad.Spec.Parameters = &networkingv1.IngressClassParametersReference{Kind: "K", Name: "n", Scope: ptr.To("Namespace")}
		if _, err := classes.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
			!strings.Contains(err.Error(), "spec.parameters.namespace: Required value") {
			t.Errorf("Namespace scope without a namespace: %v", err)
		}
		bad.Spec.Parameters.Scope = nil
		got, err := classes.Create(ctx, bad, metav1.CreateOptions{})
		if err != nil || ptr.Deref(got.Spec.Parameters.Scope, "") != "Cluster" {
			t.Errorf("scope defaults to Cluster: %v %+v", err, got)
		}
		_ = classes.Delete(ctx, "bad", metav1.DeleteOptions{})
	})

	t.Run("kubectl's columns", func(t *testing.T) {
		body, err := cs.NetworkingV1().RESTClient().Get().Resource("ingressclasses").Name("ingressclass1").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var table metav1.Table
		if err := json.Unmarshal(body, &table); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range table.ColumnDefinitions {
			names = append(names, c.Name)
		}
		if strings.Join(names, " ") != "Name Controller Parameters Age" || len(table.Rows) != 1 ||
			table.Rows[0].Cells[1] != "example.com/controller" || table.Rows[0].Cells[2] != "<none>" {
			t.Errorf("table %v %+v", names, table.Rows)
		}
	})

	t.Run("delete and delete-collection", func(t *testing.T) {
		if err := classes.Delete(ctx, "ingressclass1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := classes.Get(ctx, "ingressclass1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after delete: %v", err)
		}
		if err := classes.DeleteCollection(ctx, metav1.DeleteOptions{}, unique); err != nil {
			t.Fatal(err)
		}
		if l, err := classes.List(ctx, unique); err != nil || len(l.Items) != 0 {
			t.Errorf("left: %v %+v", err, l)
		}
	})
}
