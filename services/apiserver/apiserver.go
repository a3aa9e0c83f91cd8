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
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/apiserver/authorization"
	namespacecontroller "skiff.dev/services/apiserver/controller/namespace"
	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/eventsink"
	"skiff.dev/services/apiserver/registry"
	authenticationregistry "skiff.dev/services/apiserver/registry/authentication"
	authorizationregistry "skiff.dev/services/apiserver/registry/authorization"
	"skiff.dev/services/apiserver/registry/certificates/certificatesigningrequest"
	"skiff.dev/services/apiserver/registry/coordination/lease"
	"skiff.dev/services/apiserver/registry/core/event"
	"skiff.dev/services/apiserver/registry/core/namespace"
	"skiff.dev/services/apiserver/registry/core/node"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/core/secret"
	"skiff.dev/services/apiserver/scheme"
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
}

// ConfigFromPKI is a Config over etcd with the serving certificate, client CA, bootstrap
// tokens, front-proxy client certificate (for exec-proxy) and NATS client certificate
// (apiserver-nats-client, for the event sink) of a `skiff pki init` directory.
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
		Etcd: etcd, ServingCert: cert, ClientCA: ca.CertPool(),
		BootstrapTokenFile: filepath.Join(dir, pki.BootstrapTokenFile),
		ProxyClientTLS:     &tls.Config{Certificates: []tls.Certificate{proxyCert}, RootCAs: ca.CertPool(), MinVersion: tls.VersionTLS12},
		NATSTLS:            natsTLS,
	}, nil
}

// APIServer serves the Kubernetes API over etcd.
type APIServer struct {
	etcd                *clientv3.Client
	handler             http.Handler
	namespaces          *namespace.REST
	namespaceController *namespacecontroller.Controller
	caches              []*cacher.Cacher
	tlsConfig           *tls.Config
	eventSink           *eventsink.Sink
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

// New builds the apiserver's registries, starts their watch caches (which list and watch
// etcd, retrying until it answers) and builds the HTTP handler. Serve stops the caches
// when it returns, so an APIServer serves once.
func New(cfg Config) (_ *APIServer, err error) {
	if cfg.Etcd == nil {
		return nil, errors.New("apiserver: Config.Etcd is required")
	}
	if len(cfg.ServingCert.Certificate) == 0 || cfg.ClientCA == nil {
		return nil, errors.New("apiserver: Config.ServingCert and Config.ClientCA are required")
	}
	s := &APIServer{etcd: cfg.Etcd, tlsConfig: &tls.Config{
		Certificates: []tls.Certificate{cfg.ServingCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    cfg.ClientCA,
		MinVersion:   tls.VersionTLS12,
	}}
	// Every resource is served through a watch cache over its etcd store.
	cached := func(prefix string, newFunc, newListFunc func() runtime.Object, strategy registry.Strategy) *cacher.Cacher {
		if err != nil {
			return nil
		}
		client := cfg.Etcd
		if ttl, ok := strategy.(registry.TTLStrategy); ok {
			client = leasekv.NewClient(context.Background(), cfg.Etcd, ttl.TTL())
		}
		store := etcd3.New(client, scheme.StorageCodec, newFunc)
		kinds, _, kerr := scheme.Scheme.ObjectKinds(newFunc())
		if kerr != nil {
			err = kerr
			return nil
		}
		c, cerr := cacher.New(cacher.Config{
			Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: prefix, Kind: kinds[0],
			NewFunc: newFunc, NewListFunc: newListFunc, GetAttrs: strategy.GetAttrs, IndexFields: indexFields(strategy),
		})
		if cerr != nil {
			err = cerr
			return nil
		}
		s.caches = append(s.caches, c)
		return c
	}
	podStore := cached(pod.KeyRoot+"/", func() runtime.Object { return &corev1.Pod{} }, func() runtime.Object { return &corev1.PodList{} }, pod.Strategy{})
	nodeStore := cached(node.KeyRoot+"/", func() runtime.Object { return &corev1.Node{} }, func() runtime.Object { return &corev1.NodeList{} }, node.Strategy{})
	namespaceStore := cached(namespace.KeyRoot+"/", func() runtime.Object { return &corev1.Namespace{} }, func() runtime.Object { return &corev1.NamespaceList{} }, namespace.Strategy{})
	eventStore := cached(event.KeyRoot+"/", func() runtime.Object { return &corev1.Event{} }, func() runtime.Object { return &corev1.EventList{} }, event.Strategy{})
	leaseStore := cached(lease.KeyRoot+"/", func() runtime.Object { return &coordinationv1.Lease{} }, func() runtime.Object { return &coordinationv1.LeaseList{} }, lease.Strategy{})
	secretStore := cached(secret.KeyRoot+"/", func() runtime.Object { return &corev1.Secret{} }, func() runtime.Object { return &corev1.SecretList{} }, secret.Strategy{})
	csrStore := cached(certificatesigningrequest.KeyRoot+"/", func() runtime.Object { return &certificatesv1.CertificateSigningRequest{} }, func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} }, certificatesigningrequest.Strategy{})
	if err != nil {
		s.stopCaches()
		return nil, fmt.Errorf("apiserver: watch cache: %w", err)
	}
	pods := pod.NewStorage(podStore)
	nodes := node.NewStorage(nodeStore)
	namespaces := namespace.NewREST(namespaceStore)
	events := event.NewStorage(eventStore)
	leases := lease.NewStorage(leaseStore)
	secrets := secret.NewStorage(secretStore)
	csrs := certificatesigningrequest.NewStorage(csrStore)

	var execProxy *pod.ExecProxy
	if cfg.ExecProxyURL != "" {
		u, perr := url.Parse(cfg.ExecProxyURL)
		if perr != nil || u.Scheme != "https" || u.Host == "" || cfg.ProxyClientTLS == nil {
			s.stopCaches()
			return nil, fmt.Errorf("apiserver: ExecProxyURL %q must be https://host:port, with ProxyClientTLS", cfg.ExecProxyURL)
		}
		execProxy = &pod.ExecProxy{URL: u, TLS: cfg.ProxyClientTLS}
	}
	streams := pod.NewSubresources(execProxy)

	core := &endpoints.APIGroupVersion{
		GroupVersion: corev1.SchemeGroupVersion,
		Resources: []endpoints.Resource{
			{Name: "events", SingularName: "event", Kind: "Event", ShortNames: []string{"ev"}, Namespaced: true, Storage: events},
			{Name: "namespaces", SingularName: "namespace", Kind: "Namespace", ShortNames: []string{"ns"}, Storage: namespaces},
			{Name: "nodes", SingularName: "node", Kind: "Node", ShortNames: []string{"no"}, Storage: nodes.Node,
				Subresources: map[string]endpoints.Subresource{"status": {Kind: "Node", Storage: nodes.Status}}},
			{Name: "pods", SingularName: "pod", Kind: "Pod", ShortNames: []string{"po"}, Categories: []string{"all"}, Namespaced: true, Storage: pods.Pod,
				Subresources: map[string]endpoints.Subresource{
					"status":      {Kind: "Pod", Storage: pods.Status},
					"binding":     {Kind: "Binding", Storage: pods.Binding},
					"exec":        {Kind: "PodExecOptions", Storage: streams["exec"]},
					"attach":      {Kind: "PodAttachOptions", Storage: streams["attach"]},
					"portforward": {Kind: "PodPortForwardOptions", Storage: streams["portforward"]},
					"log":         {Kind: "Pod", Storage: streams["log"]},
				}},
			{Name: "secrets", SingularName: "secret", Kind: "Secret", Namespaced: true, Storage: secrets},
		},
	}
	coordination := &endpoints.APIGroupVersion{
		GroupVersion: coordinationv1.SchemeGroupVersion,
		Resources: []endpoints.Resource{
			{Name: "leases", SingularName: "lease", Kind: "Lease", Namespaced: true, Storage: leases},
		},
	}
	certificates := &endpoints.APIGroupVersion{
		GroupVersion: certificatesv1.SchemeGroupVersion,
		Resources: []endpoints.Resource{
			{Name: "certificatesigningrequests", SingularName: "certificatesigningrequest", Kind: "CertificateSigningRequest", ShortNames: []string{"csr"}, Storage: csrs.CSR,
				Subresources: map[string]endpoints.Subresource{
					"approval": {Kind: "CertificateSigningRequest", Storage: csrs.Approval},
					"status":   {Kind: "CertificateSigningRequest", Storage: csrs.Status},
				}},
		},
	}
	s.namespaces = namespaces
	s.namespaceController = &namespacecontroller.Controller{
		Namespaces: namespaces,
		Contents:   []namespacecontroller.Content{pods.Pod, events, leases, secrets},
	}
	authenticator := authentication.Union{authentication.X509{}}
	if cfg.BootstrapTokenFile != "" {
		authenticator = append(authenticator, &authentication.BootstrapTokens{Path: cfg.BootstrapTokenFile})
	}
	authenticator = append(authenticator, &authentication.SecretTokens{Secrets: secrets})
	authorizer := authorization.New(storageLookup{pods: pods.Pod, csrs: csrs.CSR})
	authorizationGroup := &endpoints.APIGroupVersion{
		GroupVersion: authorizationv1.SchemeGroupVersion,
		Resources: []endpoints.Resource{
			{Name: "selfsubjectaccessreviews", SingularName: "selfsubjectaccessreview", Kind: "SelfSubjectAccessReview",
				Storage: &authorizationregistry.SelfSubjectAccessReviewREST{Authorizer: authorizer}},
		},
	}
	authenticationGroup := &endpoints.APIGroupVersion{
		GroupVersion: authenticationv1.SchemeGroupVersion,
		Resources: []endpoints.Resource{
			{Name: "selfsubjectreviews", SingularName: "selfsubjectreview", Kind: "SelfSubjectReview", Storage: authenticationregistry.SelfSubjectReviewREST{}},
		},
	}
	s.handler = endpoints.NewHandler(endpoints.Config{
		Authenticator: authenticator,
		Authorizer:    authorizer,
		Core:          core,
		Groups:        []*endpoints.APIGroupVersion{coordination, certificates, authenticationGroup, authorizationGroup},
		Admission:     admission.Chain{admission.NamespaceLifecycle{Namespaces: namespaces}, admission.NodeRestriction{}, admission.DefaultTolerationSecondsPlugin{}},
		Ready:         s.ready,
	})
	s.handler = tracing.Handler(s.handler, cfg.TracerProvider, "apiserver")
	if cfg.NATSURL != "" {
		if s.eventSink, err = eventsink.New(eventsink.Config{NATSURL: cfg.NATSURL, TLS: cfg.NATSTLS, Events: events,
			Admission: admission.NamespaceLifecycle{Namespaces: namespaces}}); err != nil {
			s.stopCaches()
			return nil, err
		}
	}
	return s, nil
}

// Handler is the API's HTTP handler.
func (s *APIServer) Handler() http.Handler { return s.handler }

// ready checks that etcd answers within 2 s.
func (s *APIServer) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.etcd.Get(ctx, "/registry/health", clientv3.WithCountOnly())
	return err
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
	controllerDone := make(chan struct{})
	go func() {
		defer close(controllerDone)
		s.namespaceController.Run(ctx)
	}()
	defer func() { <-controllerDone }()
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
