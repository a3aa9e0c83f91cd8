// Package apiserver assembles skiff's Kubernetes-style API server: every resource's
// registry over etcd, admission, and the HTTP endpoints. Mirrors the wiring of
// k8s.io/kubernetes/pkg/controlplane.
package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/apiserver/authorization"
	namespacecontroller "skiff.dev/services/apiserver/controller/namespace"
	"skiff.dev/services/apiserver/controller/rootcacertpublisher"
	serviceaccountcontroller "skiff.dev/services/apiserver/controller/serviceaccount"
	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/eventsink"
	"skiff.dev/services/apiserver/openapi"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/namespace"
	"skiff.dev/services/apiserver/registry/core/pod"
	serviceaccountregistry "skiff.dev/services/apiserver/registry/core/serviceaccount"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/serviceaccount"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/apiserver/storage/leasekv"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/tracing"
)

// Config is what the apiserver needs.
type Config struct {
	// Etcd is a connected etcd client; the apiserver does not close it.
	Etcd *clientv3.Client
	// ServingCert is the apiserver's TLS certificate (pki: apiserver.crt/.key); required.
	ServingCert tls.Certificate
	// ClientCA verifies client certificates (the cluster CA); required. A verified
	// certificate authenticates as user CN in groups O.
	ClientCA *x509.CertPool
	// RootCA is the cluster CA as PEM, published in every namespace as the ConfigMap
	// kube-root-ca.crt; nil publishes nothing.
	RootCA []byte
	// BootstrapTokenFile lists the bootstrap tokens accepted as
	// `Authorization: Bearer <id>.<secret>` (pki.BootstrapTokenFile); "" accepts none.
	BootstrapTokenFile string
	// NATSURL, when set, runs the event sink: Events components publish to NATS
	// JetStream are persisted through the events registry. "" means events arrive by POST
	// only.
	NATSURL string
	// NATSTLS dials NATS over mutual TLS: the apiserver-nats-client certificate and the
	// cluster CA as RootCAs (ConfigFromPKI sets it). nil dials plain TCP, which skiff's
	// NATS refuses.
	NATSTLS *tls.Config
	// TracerProvider traces every request (otelhttp) and its etcd calls; nil means the
	// global provider.
	TracerProvider trace.TracerProvider
	// ExecProxyURL is exec-proxy's base URL, e.g. "https://127.0.0.1:10443": pods/exec,
	// attach, portforward and log are proxied there. "" answers them 503.
	ExecProxyURL string
	// ProxyClientTLS dials exec-proxy: the front-proxy-client certificate and the
	// cluster CA as RootCAs (kube's --proxy-client-cert-file); required with ExecProxyURL.
	ProxyClientTLS *tls.Config
	// ServiceAccountSigningKeyFile is the PEM private key that signs service-account
	// tokens (pki: sa.key; kube's --service-account-signing-key-file); required.
	ServiceAccountSigningKeyFile string
	// ServiceAccountKeyFile holds the PEM public keys that verify them (pki: sa.pub;
	// --service-account-key-file); required.
	ServiceAccountKeyFile string
	// ServiceAccountIssuer is the tokens' iss (--service-account-issuer); "" means
	// serviceaccount.DefaultIssuer.
	ServiceAccountIssuer string
	// APIAudiences are the audiences a token must name one of to authenticate here, and
	// those a TokenRequest naming none gets (--api-audiences); nil means the issuer.
	APIAudiences []string
}

// ConfigFromPKI is a Config over etcd with the serving certificate, client CA, bootstrap
// tokens, front-proxy client certificate (for exec-proxy), NATS client certificate
// (apiserver-nats-client, for the event sink) and service-account key (sa.key, sa.pub)
// of a `skiff pki init` directory.
func ConfigFromPKI(dir string, etcd *clientv3.Client) (Config, error) {
	certFile, keyFile := pki.KeyPairFiles(dir, pki.APIServerName)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return Config{}, fmt.Errorf("apiserver serving certificate: %w", err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		return Config{}, fmt.Errorf("cluster CA: %w", err)
	}
	proxyCertFile, proxyKeyFile := pki.KeyPairFiles(dir, pki.FrontProxyClient.Name)
	proxyCert, err := tls.LoadX509KeyPair(proxyCertFile, proxyKeyFile)
	if err != nil {
		return Config{}, fmt.Errorf("front-proxy client certificate: %w", err)
	}
	natsTLS, err := pki.ClientTLS(dir, pki.APIServerNATSClient.Name)
	if err != nil {
		return Config{}, fmt.Errorf("NATS client certificate: %w", err)
	}
	return Config{
		Etcd: etcd, ServingCert: cert, ClientCA: ca.CertPool(), RootCA: ca.CertPEM,
		BootstrapTokenFile: filepath.Join(dir, pki.BootstrapTokenFile),
		ProxyClientTLS:     &tls.Config{Certificates: []tls.Certificate{proxyCert}, RootCAs: ca.CertPool(), MinVersion: tls.VersionTLS12},
		NATSTLS:            natsTLS,

		ServiceAccountSigningKeyFile: filepath.Join(dir, pki.ServiceAccountKeyFile),
		ServiceAccountKeyFile:        filepath.Join(dir, pki.ServiceAccountPublicKeyFile),
	}, nil
}

// APIServer serves the Kubernetes API over etcd.
type APIServer struct {
	etcd                *clientv3.Client
	handler             http.Handler
	namespaces          *namespace.REST
	namespaceController *namespacecontroller.Controller
	saController        *serviceaccountcontroller.Controller
	rootCAPublisher     *rootcacertpublisher.Publisher
	caches              []*cacher.Cacher
	tlsConfig           *tls.Config
	eventSink           *eventsink.Sink
	rbac                *rbacAuthorization
}

// indexFields are the fields a strategy asks the watch cache to index by.
func indexFields(strategy registry.Strategy) []string {
	if indexed, ok := strategy.(registry.IndexedStrategy); ok {
		return indexed.IndexFields()
	}
	return nil
}

// stopCaches stops every watch cache.
func (s *APIServer) stopCaches() {
	for _, c := range s.caches {
		c.Stop()
	}
}

// storeSet is every served resource's generic Store, by group and resource.
type storeSet map[schema.GroupResource]*registry.Store

// Store implements registry.Stores.
func (s storeSet) Store(gr schema.GroupResource) *registry.Store { return s[gr] }

// New builds the apiserver from the resources it serves (resources.go): for each, an
// etcd store behind a watch cache (which lists and watches etcd, retrying until it
// answers), its REST storage, routes, discovery and OpenAPI; then authentication,
// authorization, admission and the HTTP handler. Serve stops the caches when it
// returns, so an APIServer serves once.
func New(cfg Config) (_ *APIServer, err error) {
	if cfg.Etcd == nil {
		return nil, errors.New("apiserver: Config.Etcd is required")
	}
	if len(cfg.ServingCert.Certificate) == 0 || cfg.ClientCA == nil {
		return nil, errors.New("apiserver: Config.ServingCert and Config.ClientCA are required")
	}
	tokens, err := serviceAccountTokens(cfg)
	if err != nil {
		return nil, err
	}
	var execProxy *pod.ExecProxy
	if cfg.ExecProxyURL != "" {
		u, perr := url.Parse(cfg.ExecProxyURL)
		if perr != nil || u.Scheme != "https" || u.Host == "" || cfg.ProxyClientTLS == nil {
			return nil, fmt.Errorf("apiserver: ExecProxyURL %q must be https://host:port, with ProxyClientTLS", cfg.ExecProxyURL)
		}
		execProxy = &pod.ExecProxy{URL: u, TLS: cfg.ProxyClientTLS}
	}
	s := &APIServer{etcd: cfg.Etcd, tlsConfig: &tls.Config{
		Certificates: []tls.Certificate{cfg.ServingCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    cfg.ClientCA,
		MinVersion:   tls.VersionTLS12,
	}}
	defer func() {
		if err != nil {
			s.stopCaches()
		}
	}()
	stores := storeSet{}
	s.rbac = newRBACAuthorization(stores)
	authorizer := authorization.New(storageLookup{stores: stores}, s.rbac.authorizer)
	s.rbac.guard.Authorizer = authorizer
	descriptors := resources(execProxy, authorizer, tokens, s.rbac.guard)
	for i := range descriptors {
		d := &descriptors[i]
		if d.NewListFunc == nil {
			continue
		}
		c, err := s.watchCache(cfg.Etcd, d)
		if err != nil {
			return nil, fmt.Errorf("apiserver: watch cache of %s: %w", d.GroupResource(), err)
		}
		stores[d.GroupResource()] = d.NewStore(c)
	}
	groups, contents, err := s.install(descriptors, stores)
	if err != nil {
		return nil, err
	}
	s.namespaceController = &namespacecontroller.Controller{Namespaces: s.namespaces, Contents: contents}
	serviceAccounts, pods := stores[corev1.Resource("serviceaccounts")], stores[corev1.Resource("pods")]
	s.saController = &serviceaccountcontroller.Controller{Namespaces: s.namespaces, ServiceAccounts: serviceAccounts}
	if len(cfg.RootCA) > 0 {
		s.rootCAPublisher = &rootcacertpublisher.Publisher{RootCA: cfg.RootCA, Namespaces: s.namespaces, ConfigMaps: stores[corev1.Resource("configmaps")]}
	}
	secrets, events := stores[corev1.Resource("secrets")], stores[corev1.Resource("events")]
	authenticator := authentication.Union{authentication.X509{}}
	if cfg.BootstrapTokenFile != "" {
		authenticator = append(authenticator, &authentication.BootstrapTokens{Path: cfg.BootstrapTokenFile})
	}
	authenticator = append(authenticator, &authentication.SecretTokens{Secrets: secrets},
		&authentication.ServiceAccountTokens{Verifier: tokens.Verifier, ServiceAccounts: serviceAccounts, Pods: pods, Secrets: secrets})
	s.handler = endpoints.NewHandler(endpoints.Config{
		Authenticator: authenticator,
		Authorizer:    authorizer,
		Core:          groups[0],
		Groups:        groups[1:],
		Admission: admission.Chain{
			admission.NamespaceLifecycle{Namespaces: s.namespaces},
			admission.ServiceAccount{ServiceAccounts: serviceAccounts},
			admission.NodeRestriction{Pods: pods},
			admission.DefaultTolerationSecondsPlugin{},
		},
		Ready: s.ready,
		// Schemas of every served kind, for /openapi/v3 and server-side apply.
		OpenAPIDefinitions: openapi.GetOpenAPIDefinitions,
	})
	s.handler = tracing.Handler(s.handler, cfg.TracerProvider, "apiserver")
	if cfg.NATSURL != "" {
		if s.eventSink, err = eventsink.New(eventsink.Config{NATSURL: cfg.NATSURL, TLS: cfg.NATSTLS, Events: events,
			Admission: admission.NamespaceLifecycle{Namespaces: s.namespaces}}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// serviceAccountTokens reads the service-account keys: the signer TokenRequest uses and
// the verifier the authenticator uses, with cfg's issuer and audiences.
func serviceAccountTokens(cfg Config) (serviceaccountregistry.TokenConfig, error) {
	issuer := cfg.ServiceAccountIssuer
	if issuer == "" {
		issuer = serviceaccount.DefaultIssuer
	}
	audiences := cfg.APIAudiences
	if len(audiences) == 0 {
		audiences = []string{issuer}
	}
	if cfg.ServiceAccountSigningKeyFile == "" || cfg.ServiceAccountKeyFile == "" {
		return serviceaccountregistry.TokenConfig{}, errors.New("apiserver: Config.ServiceAccountSigningKeyFile and Config.ServiceAccountKeyFile are required (skiff pki init makes sa.key and sa.pub)")
	}
	signer, err := serviceaccount.ReadSigner(issuer, cfg.ServiceAccountSigningKeyFile)
	if err != nil {
		return serviceaccountregistry.TokenConfig{}, fmt.Errorf("apiserver: %w", err)
	}
	verifier, err := serviceaccount.ReadVerifier(issuer, audiences, cfg.ServiceAccountKeyFile)
	if err != nil {
		return serviceaccountregistry.TokenConfig{}, fmt.Errorf("apiserver: %w", err)
	}
	return serviceaccountregistry.TokenConfig{Signer: signer, Verifier: verifier, Audiences: audiences}, nil
}

// watchCache is the watch cache over d's etcd store; an expiring resource
// (registry.TTLStrategy) writes through an etcd lease.
func (s *APIServer) watchCache(etcd *clientv3.Client, d *registry.Descriptor) (*cacher.Cacher, error) {
	client := etcd
	if ttl, ok := d.Strategy.(registry.TTLStrategy); ok {
		client = leasekv.NewClient(context.Background(), etcd, ttl.TTL())
	}
	store := etcd3.New(client, scheme.StorageCodec, d.NewFunc)
	kinds, _, err := scheme.Scheme.ObjectKinds(d.NewFunc())
	if err != nil {
		return nil, err
	}
	c, err := cacher.New(cacher.Config{
		Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: d.EtcdPrefix() + "/", Kind: kinds[0],
		NewFunc: d.NewFunc, NewListFunc: d.NewListFunc, GetAttrs: d.Strategy.GetAttrs, IndexFields: indexFields(d.Strategy),
	})
	if err != nil {
		return nil, err
	}
	s.caches = append(s.caches, c)
	return c, nil
}

// install builds every descriptor's REST storage and returns the group versions to route
// (core first, then the named groups in the order they first appear) and the namespaced
// resources a terminating namespace must lose. It also keeps the namespaces storage,
// which the namespace controller and admission read.
func (s *APIServer) install(descriptors []registry.Descriptor, stores storeSet) ([]*endpoints.APIGroupVersion, []namespacecontroller.Content, error) {
	groups := []*endpoints.APIGroupVersion{{GroupVersion: corev1.SchemeGroupVersion}}
	byVersion := map[schema.GroupVersion]*endpoints.APIGroupVersion{corev1.SchemeGroupVersion: groups[0]}
	var contents []namespacecontroller.Content
	for i := range descriptors {
		d := &descriptors[i]
		store := stores[d.GroupResource()]
		var storage rest.Storage = store
		var subresources map[string]registry.Subresource
		if d.REST != nil {
			var err error
			if storage, subresources, err = d.REST(store, stores); err != nil {
				return nil, nil, fmt.Errorf("apiserver: storage of %s: %w", d.GroupResource(), err)
			}
		}
		gv := byVersion[d.GroupVersion]
		if gv == nil {
			gv = &endpoints.APIGroupVersion{GroupVersion: d.GroupVersion}
			byVersion[d.GroupVersion] = gv
			groups = append(groups, gv)
		}
		gv.Resources = append(gv.Resources, endpoints.Resource{
			Name: d.Resource, SingularName: d.SingularName, Kind: d.Kind, ShortNames: d.ShortNames, Categories: d.Categories,
			Namespaced: d.Namespaced(), Storage: storage, Subresources: subresources,
		})
		if content, ok := storage.(namespacecontroller.Content); ok && d.Namespaced() && store != nil {
			contents = append(contents, content)
		}
		if d.GroupResource() == corev1.Resource("namespaces") {
			s.namespaces, _ = storage.(*namespace.REST)
		}
	}
	if s.namespaces == nil {
		return nil, nil, errors.New("apiserver: the namespaces resource is not served")
	}
	return groups, contents, nil
}

// Handler is the API's HTTP handler.
func (s *APIServer) Handler() http.Handler { return s.handler }

// ready checks that etcd answers within 2 s and the RBAC bootstrap policy is in place.
func (s *APIServer) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.etcd.Get(ctx, "/registry/health", clientv3.WithCountOnly()); err != nil {
		return err
	}
	return s.rbac.ready()
}

// systemNamespaces exist in every cluster; kube-apiserver's SystemNamespaces controller
// creates them at start.
var systemNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// EnsureSystemNamespaces creates default, kube-system, kube-public and kube-node-lease if
// missing, retrying with backoff until etcd answers or ctx ends.
func (s *APIServer) EnsureSystemNamespaces(ctx context.Context) error {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
	return wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		for _, name := range systemNamespaces {
			_, err := s.namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, &metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				slog.Warn("creating system namespace; will retry", "namespace", name, "err", err)
				return false, nil
			}
		}
		return true, nil
	})
}

// Serve serves the API on l until ctx ends, then shuts down gracefully: in-flight
// requests get up to 5 s, and open watches are closed.
func (s *APIServer) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         s.tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		if err := s.EnsureSystemNamespaces(ctx); err != nil && ctx.Err() == nil {
			slog.Error("creating system namespaces", "err", err)
		}
	}()
	defer s.stopCaches()
	rbacDone := make(chan struct{})
	go func() {
		defer close(rbacDone)
		s.rbac.run(ctx)
	}()
	defer func() { <-rbacDone }()
	controllerDone := make(chan struct{})
	go func() {
		defer close(controllerDone)
		s.namespaceController.Run(ctx)
	}()
	defer func() { <-controllerDone }()
	saControllerDone := make(chan struct{})
	go func() {
		defer close(saControllerDone)
		s.saController.Run(ctx)
	}()
	defer func() { <-saControllerDone }()
	if s.rootCAPublisher != nil {
		publisherDone := make(chan struct{})
		go func() {
			defer close(publisherDone)
			s.rootCAPublisher.Run(ctx)
		}()
		defer func() { <-publisherDone }()
	}
	if s.eventSink != nil {
		sinkDone := make(chan struct{})
		go func() {
			defer close(sinkDone)
			_ = s.eventSink.Run(ctx)
		}()
		defer func() { <-sinkDone }()
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-errCh:
		return fmt.Errorf("apiserver: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	return nil
}
