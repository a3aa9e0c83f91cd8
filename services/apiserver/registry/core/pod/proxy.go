package pod

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// PodProxyREST serves pods/proxy: /api/v1/namespaces/<ns>/pods/[<scheme>:]<name>[:<port>]/proxy/<path>
// reaches <path> on the pod's IP at <port> (the first declared container port when
// none is given) over <scheme> (http or https). Mirrors kube's pod PodProxyREST and
// ResourceLocation.
type PodProxyREST struct {
	store *registry.Store
}

var _ rest.Connecter = (*PodProxyREST)(nil)

// New returns an empty Pod.
func (r *PodProxyREST) New() runtime.Object { return &corev1.Pod{} }

// ConnectMethods are every method a proxied request may use.
func (r *PodProxyREST) ConnectMethods() []string { return rest.ProxyMethods }

// Connect returns the proxy to the pod id names. Errors: 400 for an id of another
// shape or a pod without a routable IP, 404 for a missing pod.
func (r *PodProxyREST) Connect(ctx context.Context, namespace, id string) (http.Handler, error) {
	loc, err := podLocation(ctx, r.store, namespace, id)
	if err != nil {
		return nil, err
	}
	return rest.ProxyTo(loc, id), nil
}

// podLocation is the URL id ("name", "name:port" or "scheme:name:port") names.
func podLocation(ctx context.Context, store *registry.Store, namespace, id string) (*url.URL, error) {
	scheme, name, port, ok := utilnet.SplitSchemeNamePort(id)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid pod request %q", id))
	}
	obj, err := store.Get(ctx, namespace, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	if port == "" {
		for _, c := range pod.Spec.Containers {
			if len(c.Ports) > 0 {
				port = strconv.Itoa(int(c.Ports[0].ContainerPort))
				break
			}
		}
	}
	ip := net.ParseIP(pod.Status.PodIP)
	if ip == nil || !ip.IsGlobalUnicast() {
		return nil, apierrors.NewBadRequest("address not allowed")
	}
	if scheme == "" {
		scheme = "http"
	}
	loc := &url.URL{Scheme: scheme, Host: pod.Status.PodIP}
	if port != "" {
		loc.Host = net.JoinHostPort(pod.Status.PodIP, port)
	}
	return loc, nil
}
