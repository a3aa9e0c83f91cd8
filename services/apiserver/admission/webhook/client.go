package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	restclient "k8s.io/client-go/rest"
	"k8s.io/utils/lru"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/internal/tracing"
)

// clientCacheSize is how many webhook clients are kept (kube keeps 512).
const clientCacheSize = 512

// clientManager builds, and keeps, the REST client of each webhook clientConfig.
// Mirrors webhookutil.ClientManager.
type clientManager struct {
	cfg    Config
	dialer net.Dialer

	mu      sync.Mutex
	clients *lru.Cache
}

func newClientManager(cfg Config) *clientManager {
	return &clientManager{cfg: cfg, clients: lru.New(clientCacheSize)}
}

// client is the REST client posting to cc: for a url, that URL with caBundle as its
// root CAs (the host's when empty); for a service, https://<name>.<namespace>.svc:<port>
// <path>, each connection dialled to a ready endpoint of the Service (see
// resolveService), the certificate checked for <name>.<namespace>.svc. Every request is
// traced (tracing.WrapTransport). Errors: a clientConfig that cannot make a client (a
// caBundle that is not PEM).
func (m *clientManager) client(cc admissionregistrationv1.WebhookClientConfig) (*restclient.RESTClient, error) {
	keyJSON, err := json.Marshal(cc)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256(keyJSON)
	m.mu.Lock()
	cached, ok := m.clients.Get(key)
	m.mu.Unlock()
	if ok {
		return cached.(*restclient.RESTClient), nil
	}
	cfg := &restclient.Config{
		ContentConfig: restclient.ContentConfig{
			NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
			ContentType:          runtime.ContentTypeJSON,
		},
		TLSClientConfig: restclient.TLSClientConfig{CAData: cc.CABundle},
		WrapTransport:   tracing.WrapTransport(m.cfg.TracerProvider),
		QPS:             -1, // webhooks are not rate limited by their caller
	}
	switch {
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return nil, fmt.Errorf("invalid url %q: %w", *cc.URL, err)
		}
		cfg.Host, cfg.APIPath = u.Scheme+"://"+u.Host, u.Path
	case cc.Service != nil:
		svc := *cc.Service
		port := int32(443)
		if svc.Port != nil {
			port = *svc.Port
		}
		serverName := svc.Name + "." + svc.Namespace + ".svc"
		cfg.Host = "https://" + net.JoinHostPort(serverName, strconv.Itoa(int(port)))
		if svc.Path != nil {
			cfg.APIPath = *svc.Path
		}
		cfg.TLSClientConfig.ServerName = serverName
		cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr, err := m.resolveService(ctx, svc.Namespace, svc.Name, port)
			if err != nil {
				return nil, err
			}
			return m.dialer.DialContext(ctx, network, addr)
		}
	default:
		return nil, fmt.Errorf("neither service nor url set")
	}
	client, err := restclient.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.clients.Add(key, client)
	m.mu.Unlock()
	return client, nil
}

// resolveService is "<ip>:<port>" of a ready endpoint of namespace/name serving the
// Service's port numbered port, picked at random among the ready ones of its
// EndpointSlices. Errors (503 statuses, as kube's): no such Service, a Service of an
// unsupported type (ExternalName), no such port, no ready endpoint. Mirrors
// proxy.ResolveEndpoint.
func (m *clientManager) resolveService(ctx context.Context, namespace, name string, port int32) (string, error) {
	obj, err := rest.GetCachedFirst(ctx, m.cfg.Services, namespace, name, nil)
	if err != nil {
		return "", err
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return "", fmt.Errorf("services storage returned %T", obj)
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, "":
	default:
		return "", fmt.Errorf("unsupported service type %q", svc.Spec.Type)
	}
	var portName string
	found := false
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			portName, found = p.Name, true
			break
		}
	}
	if !found {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no service port %d found for service %q", port, name))
	}
	var candidates []string
	visit := func(obj runtime.Object) bool {
		slice, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return true
		}
		for _, p := range slice.Ports {
			if p.Port == nil || (p.Name == nil && portName != "") || (p.Name != nil && *p.Name != portName) {
				continue
			}
			for _, ep := range slice.Endpoints {
				if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || len(ep.Addresses) == 0 {
					continue
				}
				candidates = append(candidates, net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(*p.Port))))
			}
		}
		return true
	}
	opts := &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})}
	served, err := m.cfg.EndpointSlices.VisitCached(namespace, opts, visit)
	if err != nil {
		return "", err
	}
	if !served {
		opts.ResourceVersion = "0"
		list, err := m.cfg.EndpointSlices.List(ctx, namespace, opts)
		if err != nil {
			return "", err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return "", err
		}
		for _, item := range items {
			visit(item)
		}
	}
	if len(candidates) == 0 {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	}
	return candidates[rand.IntN(len(candidates))], nil
}
