package ingress

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// valid is the conformance suite's Ingress: a default backend and one rule.
func valid() *networkingv1.Ingress {
	backend := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "test-backend", Port: networkingv1.ServiceBackendPort{Number: 8080}}}
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "ing", Namespace: "default", ResourceVersion: "1"},
		Spec: networkingv1.IngressSpec{
			DefaultBackend: backend.DeepCopy(),
			Rules: []networkingv1.IngressRule{{
				Host: "foo.bar.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{
					{Path: "/", PathType: ptr.To(networkingv1.PathTypeImplementationSpecific), Backend: backend},
				}}},
			}},
		},
	}
}

func path0(ing *networkingv1.Ingress) *networkingv1.HTTPIngressPath {
	return &ing.Spec.Rules[0].HTTP.Paths[0]
}

func TestValidateIngress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*networkingv1.Ingress)
		want   string // a substring of the one error expected; "" means valid
	}{
		{"the conformance suite's ingress", func(*networkingv1.Ingress) {}, ""},
		{"a default backend alone", func(ing *networkingv1.Ingress) { ing.Spec.Rules = nil }, ""},
		{"rules alone, a wildcard host, Exact and Prefix paths", func(ing *networkingv1.Ingress) {
			ing.Spec.DefaultBackend = nil
			ing.Spec.Rules[0].Host = "*.bar.com"
			p := *path0(ing)
			p.Path, p.PathType = "/exact", ptr.To(networkingv1.PathTypeExact)
			ing.Spec.Rules[0].HTTP.Paths = append(ing.Spec.Rules[0].HTTP.Paths, p)
			p.Path, p.PathType = "/prefix/", ptr.To(networkingv1.PathTypePrefix)
			ing.Spec.Rules[0].HTTP.Paths = append(ing.Spec.Rules[0].HTTP.Paths, p)
		}, ""},
		{"a backend by port name, a resource backend, TLS", func(ing *networkingv1.Ingress) {
			ing.Spec.DefaultBackend = &networkingv1.IngressBackend{Resource: &corev1Ref}
			path0(ing).Backend.Service.Port = networkingv1.ServiceBackendPort{Name: "http"}
			ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"foo.bar.com", "*.bar.com"}, SecretName: "tls"}}
			ing.Spec.IngressClassName = ptr.To("example")
		}, ""},
		{"a default backend or rules", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend, ing.Spec.Rules = nil, nil },
			"spec: Invalid value: null: either `defaultBackend` or `rules` must be specified"},
		{"pathType is required", func(ing *networkingv1.Ingress) { path0(ing).PathType = nil },
			"spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"},
		{"pathType is one of three", func(ing *networkingv1.Ingress) { path0(ing).PathType = ptr.To(networkingv1.PathType("Regex")) },
			`spec.rules[0].http.paths[0].pathType: Unsupported value: "Regex": supported values: "Exact", "ImplementationSpecific", "Prefix"`},
		{"an Exact path is absolute", func(ing *networkingv1.Ingress) {
			path0(ing).Path, path0(ing).PathType = "foo", ptr.To(networkingv1.PathTypeExact)
		},
			`spec.rules[0].http.paths[0].path: Invalid value: "foo": must be an absolute path`},
		{"an Exact path needs a path", func(ing *networkingv1.Ingress) {
			path0(ing).Path, path0(ing).PathType = "", ptr.To(networkingv1.PathTypeExact)
		},
			`spec.rules[0].http.paths[0].path: Invalid value: "": must be an absolute path`},
		{"a Prefix path has no //", func(ing *networkingv1.Ingress) {
			path0(ing).Path, path0(ing).PathType = "/a//b", ptr.To(networkingv1.PathTypePrefix)
		},
			`spec.rules[0].http.paths[0].path: Invalid value: "/a//b": must not contain '//'`},
		{"a Prefix path does not end in /..", func(ing *networkingv1.Ingress) {
			path0(ing).Path, path0(ing).PathType = "/a/..", ptr.To(networkingv1.PathTypePrefix)
		},
			`spec.rules[0].http.paths[0].path: Invalid value: "/a/..": cannot end with '/..'`},
		{"an ImplementationSpecific path is absolute when set", func(ing *networkingv1.Ingress) { path0(ing).Path = "foo" },
			`spec.rules[0].http.paths[0].path: Invalid value: "foo": must be an absolute path`},
		{"an HTTP rule has paths", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].HTTP.Paths = nil },
			"spec.rules[0].http.paths: Required value"},
		{"a host is not an IP", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "1.2.3.4" },
			`spec.rules[0].host: Invalid value: "1.2.3.4": must be a DNS name, not an IP address`},
		{"a host is a DNS subdomain", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "Foo_bar" },
			`spec.rules[0].host: Invalid value: "Foo_bar": a lowercase RFC 1123 subdomain`},
		{"a wildcard is the first label only", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "foo.*.com" },
			`spec.rules[0].host: Invalid value: "foo.*.com": a wildcard DNS-1123 subdomain`},
		{"a backend is a service or a resource", func(ing *networkingv1.Ingress) { path0(ing).Backend = networkingv1.IngressBackend{} },
			`spec.rules[0].http.paths[0].backend: Invalid value: "": resource or service backend is required`},
		{"not both", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend.Resource = &corev1Ref },
			`spec.defaultBackend: Invalid value: "": cannot set both resource and service backends`},
		{"a service backend has a name", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend.Service.Name = "" },
			"spec.defaultBackend.service.name: Required value"},
		{"a service name is a DNS-1035 label", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend.Service.Name = "1svc" },
			`spec.defaultBackend.service.name: Invalid value: "1svc": a DNS-1035 label`},
		{"a port name or number", func(ing *networkingv1.Ingress) {
			ing.Spec.DefaultBackend.Service.Port = networkingv1.ServiceBackendPort{}
		},
			"spec.defaultBackend: Required value: port name or number is required"},
		{"not both a port name and number", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend.Service.Port.Name = "http" },
			`spec.defaultBackend: Invalid value: "": cannot set both port name & port number`},
		{"a port number in range", func(ing *networkingv1.Ingress) { ing.Spec.DefaultBackend.Service.Port.Number = 70000 },
			"spec.defaultBackend.service.port.number: Invalid value: 70000: must be between 1 and 65535"},
		{"a resource backend has a kind", func(ing *networkingv1.Ingress) {
			ing.Spec.DefaultBackend = &networkingv1.IngressBackend{Resource: &corev1Ref}
			ing.Spec.DefaultBackend.Resource.Kind = ""
		}, "spec.defaultBackend.resource.kind: Required value: kind is required"},
		{"TLS hosts are DNS subdomains", func(ing *networkingv1.Ingress) {
			ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"Bad_Host"}}}
		},
			`spec.tls[0].hosts[0]: Invalid value: "Bad_Host"`},
		{"a TLS secret name is a DNS subdomain", func(ing *networkingv1.Ingress) { ing.Spec.TLS = []networkingv1.IngressTLS{{SecretName: "Bad_Secret"}} },
			`spec.tls[0].secretName: Invalid value: "Bad_Secret"`},
		{"ingressClassName is a DNS subdomain", func(ing *networkingv1.Ingress) { ing.Spec.IngressClassName = ptr.To("Bad_Class") },
			`spec.ingressClassName: Invalid value: "Bad_Class"`},
		{"the class annotation agrees with ingressClassName", func(ing *networkingv1.Ingress) {
			ing.Spec.IngressClassName = ptr.To("a")
			ing.Annotations = map[string]string{annotationIngressClass: "b"}
		}, "annotations.kubernetes.io/ingress.class: Invalid value: \"b\": must match `ingressClassName` when both are specified"},
		{"the name is a DNS subdomain", func(ing *networkingv1.Ingress) { ing.Name = "Not_A_Name" }, `metadata.name: Invalid value: "Not_A_Name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ing := valid()
			tc.change(ing)
			errs := Strategy{}.Validate(context.Background(), ing)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("want one error containing %q, got %v", tc.want, errs)
			}
		})
	}
}

var corev1Ref = corev1TypedRef()

func TestUpdateKeepsStatusAndStatusKeepsSpec(t *testing.T) {
	ctx := context.Background()
	old := valid()
	old.Generation = 1
	old.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "169.1.1.1"}}

	upd := old.DeepCopy()
	upd.Status = networkingv1.IngressStatus{}
	upd.Spec.Rules[0].Host = "other.bar.com"
	Strategy{}.PrepareForUpdate(ctx, upd, old)
	if len(upd.Status.LoadBalancer.Ingress) != 1 || upd.Status.LoadBalancer.Ingress[0].IP != "169.1.1.1" {
		t.Errorf("update changed status: %+v", upd.Status)
	}
	if upd.Generation != 2 {
		t.Errorf("a spec change: generation %d, want 2", upd.Generation)
	}

	st := old.DeepCopy()
	st.Spec.Rules = nil
	st.Status.LoadBalancer.Ingress[0].IP = "169.1.1.2"
	StatusStrategy{}.PrepareForUpdate(ctx, st, old)
	if len(st.Spec.Rules) != 1 || st.Status.LoadBalancer.Ingress[0].IP != "169.1.1.2" {
		t.Errorf("status update: spec %+v status %+v", st.Spec, st.Status)
	}
	if errs := (StatusStrategy{}).ValidateUpdate(ctx, st, old); len(errs) != 0 {
		t.Errorf("valid status update: %v", errs)
	}
	for ip, want := range map[string]string{
		"not-an-ip": `status.loadBalancer.ingress[0].ip: Invalid value: "not-an-ip"`,
	} {
		bad := st.DeepCopy()
		bad.Status.LoadBalancer.Ingress[0].IP = ip
		if errs := (StatusStrategy{}).ValidateUpdate(ctx, bad, old); len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("IP %q: got %v, want %q", ip, errs, want)
		}
	}
	bad := st.DeepCopy()
	bad.Status.LoadBalancer.Ingress[0] = networkingv1.IngressLoadBalancerIngress{Hostname: "10.0.0.1"}
	if errs := (StatusStrategy{}).ValidateUpdate(ctx, bad, old); len(errs) != 1 || !strings.Contains(errs[0].Error(), "must be a DNS name, not an IP address") {
		t.Errorf("an IP as hostname: got %v", errs)
	}

	created := valid()
	created.Status = old.Status
	Strategy{}.PrepareForCreate(ctx, created)
	if len(created.Status.LoadBalancer.Ingress) != 0 || created.Generation != 1 {
		t.Errorf("create: status %+v generation %d", created.Status, created.Generation)
	}
}

func TestUpdateToleratesStoredInvalidSecretName(t *testing.T) {
	ctx := context.Background()
	old := valid()
	old.Spec.TLS = []networkingv1.IngressTLS{{SecretName: "Bad_Secret"}}
	upd := old.DeepCopy()
	upd.Annotations = map[string]string{"updated": "true"}
	if errs := (Strategy{}).ValidateUpdate(ctx, upd, old); len(errs) != 0 {
		t.Errorf("an update of an Ingress stored with an invalid secret name: %v", errs)
	}
	if errs := (Strategy{}).ValidateUpdate(ctx, upd, valid()); len(errs) != 1 {
		t.Errorf("an update introducing an invalid secret name: got %v, want one error", errs)
	}
}

func TestTableRow(t *testing.T) {
	ing := valid()
	ing.Spec.Rules = append(ing.Spec.Rules, ing.Spec.Rules[0], ing.Spec.Rules[0], ing.Spec.Rules[0])
	ing.Spec.TLS = []networkingv1.IngressTLS{{}}
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "10.0.0.2"}, {Hostname: "lb.example.com"}}
	row := Strategy{}.TableRow(ing)
	want := []interface{}{"ing", "<none>", "foo.bar.com,foo.bar.com,foo.bar.com + 1 more...", "10.0.0.2,lb.e...", "80, 443"}
	if len(row) != len(Strategy{}.TableColumns()) {
		t.Fatalf("%d cells for %d columns", len(row), len(Strategy{}.TableColumns()))
	}
	for i, w := range want {
		if row[i] != w {
			t.Errorf("cell %d: %q, want %q", i, row[i], w)
		}
	}
	ing.Spec.Rules, ing.Spec.TLS, ing.Spec.IngressClassName = nil, nil, ptr.To("nginx")
	if row := (Strategy{}).TableRow(ing); row[1] != "nginx" || row[2] != "*" || row[4] != "80" {
		t.Errorf("row %v", row)
	}
}

func corev1TypedRef() corev1.TypedLocalObjectReference {
	return corev1.TypedLocalObjectReference{APIGroup: ptr.To("example.com"), Kind: "StorageBucket", Name: "static"}
}
