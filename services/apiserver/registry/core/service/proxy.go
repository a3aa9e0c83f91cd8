package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// ProxyREST serves services/proxy:
// /api/v1/namespaces/<ns>/services/[<scheme>:]<name>[:<port>]/proxy/<path> reaches
// <path> on one of the Service's ready endpoints (picked at random) for the service
// port <port> names (its name, or its number; the unnamed port when none is given),
// over <scheme> (http or https). Mirrors kube's service ProxyREST and
// ResourceLocation.
type ProxyREST struct {
	services *registry.Store
	stores   registry.Stores
}

var _ rest.Connecter = (*ProxyREST)(nil)

// New returns an empty Service.
func (r *ProxyREST) New() runtime.Object { return &corev1.Service{} }

// ConnectMethods are every method a proxied request may use.
func (r *ProxyREST) ConnectMethods() []string { return rest.ProxyMethods }

// Connect returns the proxy to an endpoint of the Service id names. Errors: 400 for an
// id of another shape, 404 for a missing Service or Endpoints, 503 when no ready
// endpoint serves the port (kube's messages).
func (r *ProxyREST) Connect(ctx context.Context, namespace, id string) (http.Handler, error) {
	scheme, name, port, ok := utilnet.SplitSchemeNamePort(id)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid service request %q", id))
	}
	if n, err := strconv.ParseInt(port, 10, 32); err == nil {
		// A port number names the service port that has it.
		obj, err := r.services.Get(ctx, namespace, name, &metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		found := false
		for _, p := range obj.(*corev1.Service).Spec.Ports {
			if int64(p.Port) == n {
				port, found = p.Name, true
				break
			}
		}
		if !found {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no service port %d found for service %q", n, name))
		}
	}
	endpoints := r.stores.Store(schema.GroupResource{Resource: "endpoints"})
	if endpoints == nil {
		return nil, apierrors.NewServiceUnavailable("endpoints are not served")
	}
	obj, err := endpoints.Get(ctx, namespace, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	eps := obj.(*corev1.Endpoints)
	if len(eps.Subsets) == 0 {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	}
	if scheme == "" {
		scheme = "http"
	}
	start := rand.IntN(len(eps.Subsets))
	for i := range eps.Subsets {
		ss := eps.Subsets[(start+i)%len(eps.Subsets)]
		if len(ss.Addresses) == 0 {
			continue
		}
		for _, p := range ss.Ports {
			if p.Name != port {
				continue
			}
			addr := ss.Addresses[rand.IntN(len(ss.Addresses))]
			loc := &url.URL{Scheme: scheme, Host: net.JoinHostPort(addr.IP, strconv.Itoa(int(p.Port)))}
			return rest.ProxyTo(loc, id), nil
		}
	}
	return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", id))
}
