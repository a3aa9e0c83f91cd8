package aggregator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"skiff.dev/services/apiserver/registry"
)

// fixedResolver resolves every Service to one address.
type fixedResolver string

func (f fixedResolver) Resolve(context.Context, string, string, int32) (string, error) {
	return string(f), nil
}

// noStores serves nothing.
type noStores struct{}

func (noStores) Store(schema.GroupResource) *registry.Store { return nil }

// discoveryServer answers /apis with aggregated discovery when v2 is true, and the
// group version's APIResourceList; status, when set, answers everything.
func discoveryServer(t *testing.T, v2 bool, status int) (*Aggregator, *apiregistrationv1.APIService) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		if r.Header.Get("X-Remote-User") != "system:kube-aggregator" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		switch {
		case r.URL.Path == "/apis" && v2 && strings.Contains(r.Header.Get("Accept"), "as=APIGroupDiscoveryList"):
			w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
			_ = json.NewEncoder(w).Encode(&apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{
				{ObjectMeta: metav1.ObjectMeta{Name: "other.example.com"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1"}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "metrics.k8s.io"}, Versions: []apidiscoveryv2.APIVersionDiscovery{
					{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "wrong"}}},
					{Version: "v1beta1", Resources: []apidiscoveryv2.APIResourceDiscovery{
						{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"},
							Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "usage"}}},
					}},
				}},
			}})
		case r.URL.Path == "/apis/metrics.k8s.io/v1beta1":
			_ = json.NewEncoder(w).Encode(&metav1.APIResourceList{GroupVersion: "metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{
				{Name: "nodes", Kind: "NodeMetrics", Verbs: metav1.Verbs{"get", "list"}},
				{Name: "pods/usage", Namespaced: true, Kind: "PodUsage", Verbs: metav1.Verbs{"get"}},
				{Name: "pods", Namespaced: true, Kind: "PodMetrics", SingularName: "pod", Verbs: metav1.Verbs{"get", "list"}, ShortNames: []string{"pm"}},
			}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	s := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1",
			Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}},
	}
	a := New(Config{Stores: noStores{}, Resolver: fixedResolver(srv.Listener.Addr().String())})
	b := a.newBackend(keyOf(s))
	b.transport = srv.Client().Transport.(*http.Transport) // trusts the test server
	a.transports[s.Name] = b
	return a, s
}

func TestFetchAggregatedDiscovery(t *testing.T) {
	a, s := discoveryServer(t, true, 0)
	got, err := a.fetchDiscovery(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Resource != "pods" || got[0].ResponseKind == nil ||
		len(got[0].Subresources) != 1 || got[0].Subresources[0].ResponseKind == nil {
		t.Fatalf("resources %+v, want v1beta1's pods with usage, responseKinds filled", got)
	}
}

func TestFetchLegacyDiscovery(t *testing.T) {
	a, s := discoveryServer(t, false, 0)
	got, err := a.fetchDiscovery(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Resource != "nodes" || got[0].Scope != apidiscoveryv2.ScopeCluster ||
		got[1].Resource != "pods" || got[1].Scope != apidiscoveryv2.ScopeNamespace || got[1].SingularResource != "pod" ||
		got[1].ResponseKind.Kind != "PodMetrics" || got[1].ShortNames[0] != "pm" ||
		len(got[1].Subresources) != 1 || got[1].Subresources[0].Subresource != "usage" || got[1].Subresources[0].ResponseKind.Kind != "PodUsage" {
		t.Fatalf("resources %+v", got)
	}
	a.discovery.set(s.Name, got)
	if v := a.discovery.version(s); v.Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent || len(v.Resources) != 2 {
		t.Errorf("cached %+v, want Current", v)
	}
	a.discovery.markStale(s.Name)
	if v := a.discovery.version(s); v.Freshness != apidiscoveryv2.DiscoveryFreshnessStale || len(v.Resources) != 2 || v.Version != "v1beta1" {
		t.Errorf("after a failure %+v, want the same resources, Stale", v)
	}
}

func TestFetchDiscoveryFails(t *testing.T) {
	a, s := discoveryServer(t, false, http.StatusServiceUnavailable)
	if _, err := a.fetchDiscovery(context.Background(), s); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("err %v, want the 503", err)
	}
	a, s = discoveryServer(t, false, http.StatusForbidden)
	if _, err := a.fetchDiscovery(context.Background(), s); err == nil || !strings.Contains(err.Error(), "failed to download legacy discovery") {
		t.Errorf("err %v, want the legacy discovery's failure", err)
	}
}
