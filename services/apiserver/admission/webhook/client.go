package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	restclient "k8s.io/client-go/rest"
	"k8s.io/utils/lru"

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
// serviceresolver.EndpointResolver), the certificate checked for <name>.<namespace>.svc. Every request is
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
			addr, err := m.cfg.Resolver.Resolve(ctx, svc.Namespace, svc.Name, port)
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
