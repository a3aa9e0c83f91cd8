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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	utilnetutils "k8s.io/utils/net"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/admission/policy"
	"skiff.dev/services/apiserver/admission/webhook"
	"skiff.dev/services/apiserver/aggregator"
	"skiff.dev/services/apiserver/apiextensions"
	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/controller/kubernetesservice"
	"skiff.dev/services/apiserver/controller/validatingadmissionpolicystatus"
	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/eventsink"
	"skiff.dev/services/apiserver/openapi"
	"skiff.dev/services/apiserver/registry"
	authenticationregistry "skiff.dev/services/apiserver/registry/authentication"
	"skiff.dev/services/apiserver/registry/core/namespace"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/core/resourcequota"
	"skiff.dev/services/apiserver/registry/core/service"
	"skiff.dev/services/apiserver/registry/core/service/ipallocator"
	"skiff.dev/services/apiserver/registry/core/service/portallocator"
	serviceaccountregistry "skiff.dev/services/apiserver/registry/core/serviceaccount"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/serviceaccount"
	"skiff.dev/services/apiserver/serviceresolver"
	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/apiserver/storage/leasekv"
	"skiff.dev/services/internal/natsauth"
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
	// NATSAuthCalloutSeedFile, with NATSURL, holds the account nkey seed (pki:
	// nats-auth-callout.nk) that signs NATS's auth callout answers: the apiserver answers
	// them (natsauth.Responder, a queue group every replica joins), granting each client
	// certificate other than its own its event subjects and inbox, after verifying it
	// again against NATSTLS.RootCAs (ClientCA without NATSTLS). "" answers none, for a
	// NATS without auth callout. ConfigFromPKI sets it.
	NATSAuthCalloutSeedFile string
	// TracerProvider traces every request (otelhttp) and its etcd calls; nil means the
	// global provider.
	TracerProvider trace.TracerProvider
	// ExecProxyURL is exec-proxy's base URL, e.g. "https://127.0.0.1:10443": pods/exec,
	// attach, portforward and log are proxied there. "" answers them 503.
	ExecProxyURL string
	// ProxyClientTLS dials exec-proxy: the front-proxy-client certificate (issued by the
	// front-proxy CA) and the cluster CA as RootCAs (kube's --proxy-client-cert-file);
	// required with ExecProxyURL. Its certificate is also what the aggregator presents to
	// extension API servers (whose certificates each APIService's caBundle verifies); nil
	// presents none, and they see the apiserver as anonymous.
	ProxyClientTLS *tls.Config
	// ClientCAFile and RequestHeaderClientCAFile are the PEM files of the cluster CA and
	// of the front-proxy CA (kube's --client-ca-file and --requestheader-client-ca-file):
	// they are published in kube-system/extension-apiserver-authentication for extension
	// API servers, with the request-header fields and the allowed name
	// front-proxy-client. "" publishes nothing. ConfigFromPKI sets them.
	ClientCAFile, RequestHeaderClientCAFile string
	// ServiceAccountSigningKeyFile is the PEM private key that signs service-account
	// tokens (pki: sa.key; kube's --service-account-signing-key-file); required.
	ServiceAccountSigningKeyFile string
	// ServiceAccountKeyFile holds the PEM public keys that verify them (pki: sa.pub;
	// --service-account-key-file); required.
	ServiceAccountKeyFile string
	// ServiceAccountIssuer is the tokens' iss (--service-account-issuer); "" means
	// serviceaccount.DefaultIssuer.
	ServiceAccountIssuer string
	// ServiceAccountJWKSURI is the jwks_uri service-account issuer discovery names
	// (--service-account-jwks-uri); "" means the issuer's URL with /openid/v1/jwks.
	ServiceAccountJWKSURI string
	// APIAudiences are the audiences a token must name one of to authenticate here, and
	// those a TokenRequest naming none gets (--api-audiences); nil means the issuer.
	APIAudiences []string
	// ServiceClusterIPRange is the CIDR Service ClusterIPs come from
	// (--service-cluster-ip-range); "" means DefaultServiceClusterIPRange. Its first
	// address is the kubernetes Service's.
	ServiceClusterIPRange string
	// ServiceNodePortRange is the range NodePorts come from (--service-node-port-range,
	// e.g. "30000-32767"); "" means DefaultServiceNodePortRange.
	ServiceNodePortRange string
	// AdvertiseAddress is the address the kubernetes Service's Endpoints point at
	// (--advertise-address); nil means the host's default-route interface address, as
	// kube-apiserver chooses it. A loopback address is not advertised (Endpoints may not
	// hold one): the Service is then written without endpoints.
	AdvertiseAddress net.IP
	// EndpointReconcilerType is how the kubernetes Service's Endpoints and
	// EndpointSlice are kept (kube's --endpoint-reconciler-type): "" or "lease", each
	// apiserver keeps a lease in etcd (/registry/masterleases/<its address>) and writes
	// the addresses of every live lease; "none" writes no endpoints. "master-count" and
	// anything else are refused by New.
	EndpointReconcilerType kubernetesservice.ReconcilerType
	// EndpointReconcilerInterval is how often the Service is reconciled and the lease
	// renewed; 0 means kubernetesservice.DefaultInterval, kube's 10 s.
	EndpointReconcilerInterval time.Duration
	// MasterEndpointReconcileTTL is the lease's time to live: how long a crashed
	// apiserver stays listed at most after its last renewal. 0 means
	// kubernetesservice.DefaultLeaseTTL, kube's 15 s.
	MasterEndpointReconcileTTL time.Duration
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight are kube's
	// --max-requests-inflight and --max-mutating-requests-inflight; ConfigFromPKI sets
	// kube's defaults, 400 and 200. With EnablePriorityAndFairness their sum is the
	// seats API Priority and Fairness shares among its priority levels (it must be
	// positive); without, they bound the read-only and the mutating requests served at
	// once (0: unlimited), beyond which requests get 429 TooManyRequests with
	// Retry-After.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// EnablePriorityAndFairness classifies and queues requests by the FlowSchemas and
	// PriorityLevelConfigurations (API Priority and Fairness, k8s.io/apiserver's
	// utilflowcontrol) in place of the max-in-flight limits, as kube-apiserver's
	// --enable-priority-and-fairness; ConfigFromPKI sets kube's default, true.
	EnablePriorityAndFairness bool
	// EtcdCompactionInterval is how often etcd's history is compacted, so it keeps one to
	// two intervals of it (kube-apiserver's --etcd-compaction-interval); 0 never
	// compacts. ConfigFromPKI sets kube's default, etcd3.DefaultCompactionInterval.
	EtcdCompactionInterval time.Duration
	// StorageDecorator, when set, wraps each resource's storage (its watch cache over
	// etcd) before the registry uses it, as kube's generic.StorageDecorator in
	// RESTOptions does; nil uses the storage as is. Tests use it to put a deliberately
	// faulty store under the real HTTP stack.
	StorageDecorator func(schema.GroupResource, storage.Interface) storage.Interface
}

// Defaults of the service ranges, as kube-apiserver's (kubeadm's service subnet), and
// kube-apiserver's defaults of --max-requests-inflight and --max-mutating-requests-inflight.
const (
	DefaultServiceClusterIPRange       = "10.96.0.0/12"
	DefaultServiceNodePortRange        = "30000-32767"
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200
)

// ConfigFromPKI is a Config over etcd with the serving certificate, client CA, bootstrap
// tokens, front-proxy client certificate (for exec-proxy and extension API servers) and
// CA (published for extension API servers, when present), NATS client certificate
// (apiserver-nats-client, for the event sink and the auth callout), NATS auth callout
// key (nats-auth-callout.nk) and service-account key (sa.key, sa.pub) of a `skiff pki
// init` directory.
func ConfigFromPKI(dir string, etcd *clientv3.Client) (Config, error) {
	certFile, keyFile := pki.KeyPairFiles(dir, pki.APIServerName)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return Config{}, fmt.Errorf("apiserver serving certificate: %w", err)
	}
	clusterCA, err := pki.AuthorityPool(dir, pki.ClusterCA)
	if err != nil {
		return Config{}, fmt.Errorf("cluster CA: %w", err)
	}
	clusterCAFile, _ := pki.ClusterCA.Files(dir)
	frontProxyCAFile, _ := pki.FrontProxyCA.Files(dir)
	if _, err := os.Stat(frontProxyCAFile); err != nil {
		frontProxyCAFile = "" // not handed to this apiserver: nothing to publish
	}
	// Toward exec-proxy the apiserver is front-proxy-client, of the front-proxy CA;
	// exec-proxy serves a cluster-CA certificate.
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
		Etcd: etcd, ServingCert: cert, ClientCA: clusterCA,
		BootstrapTokenFile: filepath.Join(dir, pki.BootstrapTokenFile),
		ProxyClientTLS:     &tls.Config{Certificates: []tls.Certificate{proxyCert}, RootCAs: clusterCA, MinVersion: tls.VersionTLS12},
		NATSTLS:            natsTLS,

		ClientCAFile:              clusterCAFile,
		RequestHeaderClientCAFile: frontProxyCAFile,

		NATSAuthCalloutSeedFile: filepath.Join(dir, pki.NATSAuthCalloutSeedFile),

		ServiceAccountSigningKeyFile: filepath.Join(dir, pki.ServiceAccountKeyFile),
		ServiceAccountKeyFile:        filepath.Join(dir, pki.ServiceAccountPublicKeyFile),

		MaxRequestsInFlight:         DefaultMaxRequestsInFlight,
		MaxMutatingRequestsInFlight: DefaultMaxMutatingRequestsInFlight,
		EnablePriorityAndFairness:   true,
		EtcdCompactionInterval:      etcd3.DefaultCompactionInterval,
	}, nil
}

// APIServer serves the Kubernetes API over etcd.
type APIServer struct {
	etcd              *clientv3.Client
	handler           http.Handler
	namespaces        *namespace.REST
	caches            []*cacher.Cacher
	countedCaches     []countedCache       // the built-in resources' caches, by resource
	loopback          *loopback            // nil without flow control
	flowControl       *priorityAndFairness // nil: max-in-flight
	tlsConfig         *tls.Config
	eventSink         *eventsink.Sink
	authCallout       *natsauth.Responder // nil: no callout answered
	natsURL           string
	natsTLS           *tls.Config
	rbac              *rbacAuthorization
	services          *service.REST
	kubernetesService *kubernetesservice.Controller
	compactor         *etcd3.Compactor // nil: no compaction
	stores            storeSet
	customResources   *apiextensions.Server
	policyStatus      *validatingadmissionpolicystatus.Controller
	aggregator        *aggregator.Aggregator
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
	if err := kubernetesservice.ValidateReconcilerType(cfg.EndpointReconcilerType); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
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
	if cfg.EtcdCompactionInterval > 0 {
		s.compactor = etcd3.NewCompactor(cfg.Etcd, cfg.EtcdCompactionInterval)
	}
	defer func() {
		if err != nil {
			s.stopCaches()
		}
	}()
	serviceAllocators, err := newServiceAllocators(cfg)
	if err != nil {
		return nil, err
	}
	stores := storeSet{}
	s.rbac = newRBACAuthorization(stores)
	authorizer := authorization.New(storageLookup{stores: stores}, s.rbac.authorizer)
	s.rbac.guard.Authorizer = authorizer
	// Answers with the authenticator built below, once the stores it reads exist.
	tokenReviews := &authenticationregistry.TokenReviewREST{APIAudiences: tokens.Audiences}
	descriptors := resources(execProxy, authorizer, tokens, tokenReviews, s.rbac.guard, serviceAllocators)
	for i := range descriptors {
		d := &descriptors[i]
		if d.NewListFunc == nil || !d.StorageOf.Empty() {
			continue // no storage, or another resource's
		}
		st, err := s.storage(cfg.Etcd, d)
		if err != nil {
			return nil, fmt.Errorf("apiserver: storage of %s: %w", d.GroupResource(), err)
		}
		if cfg.StorageDecorator != nil {
			st = cfg.StorageDecorator(d.GroupResource(), st)
		}
		stores[d.GroupResource()] = d.NewStore(st)
	}
	s.stores = stores
	groups, err := s.install(descriptors, stores)
	if err != nil {
		return nil, err
	}
	serviceAccounts, pods := stores[corev1.Resource("serviceaccounts")], stores[corev1.Resource("pods")]
	s.kubernetesService = &kubernetesservice.Controller{
		Services:       s.services,
		Endpoints:      stores[corev1.Resource("endpoints")],
		EndpointSlices: stores[discoveryv1.Resource("endpointslices")],
		ClusterIP:      firstIP(serviceAllocators.IPs.CIDR()),
		PublicIP:       advertiseAddress(cfg.AdvertiseAddress),
		Interval:       cfg.EndpointReconcilerInterval,
		Type:           cfg.EndpointReconcilerType,
		Leases:         &kubernetesservice.EtcdLeases{Client: cfg.Etcd, Codec: scheme.StorageCodec, TTL: cfg.MasterEndpointReconcileTTL},
	}
	secrets, events := stores[corev1.Resource("secrets")], stores[corev1.Resource("events")]
	authenticator := authentication.Union{authentication.X509{}}
	if cfg.EnablePriorityAndFairness {
		// API Priority and Fairness's config controller reads and writes its objects
		// through the apiserver's own loopback, as in kube.
		s.loopback = newLoopback()
		authenticator = authentication.Union{s.loopback, authentication.X509{}}
		if s.flowControl, err = newPriorityAndFairness(s.loopback.config(), cfg.MaxRequestsInFlight+cfg.MaxMutatingRequestsInFlight); err != nil {
			return nil, err
		}
	}
	if cfg.BootstrapTokenFile != "" {
		authenticator = append(authenticator, &authentication.BootstrapTokens{Path: cfg.BootstrapTokenFile})
	}
	authenticator = append(authenticator, &authentication.SecretTokens{Secrets: secrets},
		&authentication.ServiceAccountTokens{Verifier: tokens.Verifier, ServiceAccounts: serviceAccounts, Pods: pods, Secrets: secrets})
	tokenReviews.Authenticator = authenticator
	// kube-apiserver's order: NamespaceLifecycle first, so a write into a missing or
	// terminating namespace is refused before any plugin (or webhook) works on it, then
	// LimitRanger (defaults in the mutating phase, its checks first in the validating
	// one); the in-tree mutating plugins before the mutating webhooks;
	// ValidatingAdmissionPolicy, then the validating webhooks, then ResourceQuota last,
	// so a write is charged to quota only once every other plugin has admitted it.
	equivalents := equivalentResources(descriptors)
	var admissionPolicies *policy.Plugin
	admissionPolicies, s.policyStatus = s.admissionPolicies(descriptors, stores, authorizer, equivalents)
	limitRanger := admission.NewLimitRanger(stores[corev1.Resource("limitranges")])
	quotas := stores[corev1.Resource("resourcequotas")]
	admissionChain := admission.Chain{
		Mutating: []admission.Interface{
			admission.NewNamespaceLifecycle(s.namespaces),
			limitRanger,
			admission.ServiceAccount{ServiceAccounts: serviceAccounts},
			admission.Priority{PriorityClasses: stores[schedulingv1.Resource("priorityclasses")]},
			admission.RuntimeClass{RuntimeClasses: stores[nodev1.Resource("runtimeclasses")]},
			admission.DefaultTolerationSecondsPlugin{},
			admission.DefaultStorageClass{StorageClasses: stores[storagev1.Resource("storageclasses")]},
		},
		Validating: []admission.Interface{
			limitRanger.Validating(),
			admission.NodeRestriction{Pods: pods},
			admission.PersistentVolumeClaimResize{},
			admission.CertificateApproval{Authorizer: authorizer},
			admission.CertificateSigning{Authorizer: authorizer},
			admissionPolicies,
		},
	}
	// Webhooks (admission and conversion) behind a Service are reached at its ready
	// endpoints, as kube-apiserver's --enable-aggregator-routing does.
	resolver := &serviceresolver.EndpointResolver{Services: s.services, EndpointSlices: stores[discoveryv1.Resource("endpointslices")]}
	webhooks := webhook.New(webhook.Config{
		MutatingWebhookConfigurations:   stores[admissionregistrationv1.Resource("mutatingwebhookconfigurations")],
		ValidatingWebhookConfigurations: stores[admissionregistrationv1.Resource("validatingwebhookconfigurations")],
		Namespaces:                      stores[corev1.Resource("namespaces")],
		Resolver:                        resolver,
		Authorizer:                      authorizer,
		Scheme:                          scheme.Scheme,
		Equivalents:                     equivalents,
		TracerProvider:                  cfg.TracerProvider,
	})
	admissionChain.Mutating = append(admissionChain.Mutating, webhooks.Mutating())
	admissionChain.Validating = append(admissionChain.Validating, webhooks.Validating(),
		admission.NewResourceQuota(quotas, quotas.WithStrategy(resourcequota.StatusStrategy{})))
	// Requests and the events the sink takes from NATS share one registry of metrics and
	// one limit: API Priority and Fairness, or max-in-flight.
	metrics := prometheus.NewRegistry()
	var seats eventsink.Seats
	var inFlight *endpoints.MaxInFlight
	var flowControl *endpoints.FlowControl
	if s.flowControl != nil {
		seats, flowControl = s.flowControl, s.flowControl.handlerConfig()
	} else {
		inFlight = endpoints.NewMaxInFlight(cfg.MaxRequestsInFlight, cfg.MaxMutatingRequestsInFlight, metrics)
		seats = inFlight
	}
	if s.customResources, err = apiextensions.New(apiextensions.Config{Stores: stores, NewStorage: s.customResourceStorage(cfg),
		ServiceResolver: resolver,
		TracerProvider:  cfg.TracerProvider,
	}); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	// APIServices: a local one per built-in group version; the others are proxied to
	// their Service's ready endpoints, as kube-apiserver's aggregator with
	// --enable-aggregator-routing, presenting the front-proxy client certificate.
	local := make([]schema.GroupVersion, 0, len(groups))
	for _, gv := range groups {
		local = append(local, gv.GroupVersion)
	}
	s.aggregator = aggregator.New(aggregator.Config{Stores: stores, Resolver: resolver,
		ProxyClientTLS: cfg.ProxyClientTLS, TracerProvider: cfg.TracerProvider, Local: local,
		ClientCAFile: cfg.ClientCAFile, RequestHeaderCAFile: cfg.RequestHeaderClientCAFile,
		RequestHeaderAllowedNames: []string{pki.FrontProxyClient.CommonName}})
	discovery, err := tokens.Verifier.Discovery(cfg.ServiceAccountJWKSURI)
	if err != nil {
		return nil, fmt.Errorf("apiserver: service-account issuer discovery: %w", err)
	}
	s.handler = endpoints.NewHandler(endpoints.Config{
		Authenticator: authenticator,
		Authorizer:    authorizer,
		Core:          groups[0],
		Groups:        groups[1:],
		Admission:     admissionChain,
		Ready:         s.ready,
		Metrics:       metrics,
		InFlight:      inFlight,
		FlowControl:   flowControl,
		// Service-account issuer discovery.
		ServiceAccountDiscovery: &discovery,
		// Custom resources, as their CRDs come and go.
		Dynamic: s.customResources,
		// Extension API servers behind APIServices.
		Aggregated: s.aggregator,
		// Schemas of every served kind, for /openapi/v3 and server-side apply.
		OpenAPIDefinitions: openapi.GetOpenAPIDefinitions,
	})
	s.handler = tracing.Handler(s.handler, cfg.TracerProvider, "apiserver")
	if cfg.NATSURL != "" {
		if s.eventSink, err = eventsink.New(eventsink.Config{NATSURL: cfg.NATSURL, TLS: cfg.NATSTLS, Events: events,
			Authorizer: authorizer, Admission: admissionChain, Seats: seats, Registerer: metrics}); err != nil {
			return nil, err
		}
		if s.authCallout, err = newAuthCallout(cfg); err != nil {
			return nil, err
		}
		s.natsURL, s.natsTLS = cfg.NATSURL, cfg.NATSTLS
	}
	return s, nil
}

// equivalentResources lists, for a served resource, the other served resources whose
// objects are the same ones, stored once (a descriptor's StorageOf): as kube's
// EquivalentResourceRegistry keyed by storage prefix, core/v1 events and
// events.k8s.io/v1 events.
func equivalentResources(descriptors []registry.Descriptor) func(schema.GroupVersionResource) []webhook.Equivalent {
	byStorage := map[schema.GroupResource][]webhook.Equivalent{}
	storageOf := map[schema.GroupVersionResource]schema.GroupResource{}
	for i := range descriptors {
		d := &descriptors[i]
		stored := d.GroupResource()
		if !d.StorageOf.Empty() {
			stored = d.StorageOf
		}
		gvr := d.GroupVersion.WithResource(d.Resource)
		storageOf[gvr] = stored
		byStorage[stored] = append(byStorage[stored], webhook.Equivalent{Resource: gvr, Kind: d.GroupVersion.WithKind(d.Kind)})
	}
	return func(gvr schema.GroupVersionResource) []webhook.Equivalent {
		stored, ok := storageOf[gvr]
		if !ok {
			return nil
		}
		var out []webhook.Equivalent
		for _, eq := range byStorage[stored] {
			if eq.Resource != gvr {
				out = append(out, eq)
			}
		}
		return out
	}
}

// newAuthCallout is the responder to NATS's auth callout of cfg, nil without a seed
// file. Errors: the seed does not load.
func newAuthCallout(cfg Config) (*natsauth.Responder, error) {
	if cfg.NATSAuthCalloutSeedFile == "" {
		return nil, nil
	}
	issuer, err := pki.LoadNATSAuthCalloutKey(cfg.NATSAuthCalloutSeedFile)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	clientCAs := cfg.ClientCA
	if cfg.NATSTLS != nil && cfg.NATSTLS.RootCAs != nil {
		clientCAs = cfg.NATSTLS.RootCAs
	}
	return &natsauth.Responder{Issuer: issuer, ClientCAs: clientCAs, Log: slog.Default().With("component", "nats-auth-callout")}, nil
}

// newServiceAllocators builds the ClusterIP and NodePort allocators of cfg's ranges over
// their bitmaps in etcd.
func newServiceAllocators(cfg Config) (service.Allocators, error) {
	cidrText := cfg.ServiceClusterIPRange
	if cidrText == "" {
		cidrText = DefaultServiceClusterIPRange
	}
	_, cidr, err := net.ParseCIDR(cidrText)
	if err != nil {
		return service.Allocators{}, fmt.Errorf("apiserver: service cluster IP range %q: %w", cidrText, err)
	}
	portsText := cfg.ServiceNodePortRange
	if portsText == "" {
		portsText = DefaultServiceNodePortRange
	}
	ports, err := utilnet.ParsePortRange(portsText)
	if err != nil {
		return service.Allocators{}, fmt.Errorf("apiserver: service node port range %q: %w", portsText, err)
	}
	rangeStore := etcd3.New(cfg.Etcd, scheme.StorageCodec, func() runtime.Object { return &corev1.RangeAllocation{} })
	ips, err := ipallocator.New(cidr, rangeStore)
	if err != nil {
		return service.Allocators{}, fmt.Errorf("apiserver: %w", err)
	}
	nodePorts, err := portallocator.New(*ports, rangeStore)
	if err != nil {
		return service.Allocators{}, fmt.Errorf("apiserver: %w", err)
	}
	return service.Allocators{IPs: ips, NodePorts: nodePorts}, nil
}

// firstIP is the first address after cidr's network address: the kubernetes Service's
// ClusterIP (kube's ServiceIPRange first IP, 10.96.0.1 by default).
func firstIP(cidr *net.IPNet) net.IP {
	return utilnetutils.AddIPOffset(utilnetutils.BigForIP(cidr.IP), 1)
}

// advertiseAddress is ip, or the host's default-route address as kube-apiserver picks
// it; nil when ip is loopback or unspecified, or no address is found.
func advertiseAddress(ip net.IP) net.IP {
	if ip == nil || ip.IsUnspecified() {
		chosen, err := utilnet.ChooseHostInterface()
		if err != nil {
			slog.Warn("no advertise address: the kubernetes Service will have no endpoints", "err", err)
			return nil
		}
		ip = chosen
	}
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() {
		return nil
	}
	return ip
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

// storage is a resource's etcd store (with a lease per write for a TTLStrategy's
// resource) behind its watch cache, or alone for a resource with NoWatchCache.
func (s *APIServer) storage(etcd *clientv3.Client, d *registry.Descriptor) (storage.Interface, error) {
	client := etcd
	if ttl, ok := d.Strategy.(registry.TTLStrategy); ok {
		client = leasekv.NewClient(context.Background(), etcd, ttl.TTL())
	}
	store := etcd3.New(client, scheme.StorageCodec, d.NewFunc)
	if d.NoWatchCache {
		return store, nil
	}
	kinds, _, err := scheme.Scheme.ObjectKinds(d.NewFunc())
	if err != nil {
		return nil, err
	}
	c, err := cacher.New(cacher.Config{
		Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: d.EtcdPrefix() + "/", Kind: kinds[0],
		NewFunc: d.NewFunc, NewListFunc: d.NewListFunc, GetAttrs: d.Strategy.GetAttrs, IndexFields: indexFields(d.Strategy),
	})
	if err != nil {
		return nil, fmt.Errorf("watch cache: %w", err)
	}
	s.caches = append(s.caches, c)
	s.countedCaches = append(s.countedCaches, countedCache{resource: d.GroupResource(), cache: c})
	return c, nil
}

// customResourceStorage builds a custom resource version's storage as storage builds a
// built-in resource's: its etcd store behind a watch cache (decorated as cfg says).
func (s *APIServer) customResourceStorage(cfg Config) apiextensions.StorageFunc {
	return func(prefix string, codec runtime.Codec, newFunc, newListFunc func() runtime.Object, kind schema.GroupVersionKind, getAttrs storage.AttrFunc) (storage.Interface, func(), error) {
		store := etcd3.New(cfg.Etcd, codec, newFunc)
		c, err := cacher.New(cacher.Config{
			Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: prefix, Kind: kind,
			NewFunc: newFunc, NewListFunc: newListFunc, GetAttrs: getAttrs,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("watch cache: %w", err)
		}
		var st storage.Interface = c
		if cfg.StorageDecorator != nil {
			st = cfg.StorageDecorator(schema.GroupResource{Group: kind.Group, Resource: strings.TrimSuffix(prefix[strings.LastIndex(strings.TrimSuffix(prefix, "/"), "/")+1:], "/")}, st)
		}
		return st, c.Stop, nil
	}
}

// install builds every descriptor's REST storage and returns the group versions to route
// (core first, then the named groups in the order they first appear). It also keeps the
// namespaces storage, which admission reads, and the services storage.
func (s *APIServer) install(descriptors []registry.Descriptor, stores storeSet) ([]*endpoints.APIGroupVersion, error) {
	groups := []*endpoints.APIGroupVersion{{GroupVersion: corev1.SchemeGroupVersion}}
	byVersion := map[schema.GroupVersion]*endpoints.APIGroupVersion{corev1.SchemeGroupVersion: groups[0]}
	for i := range descriptors {
		d := &descriptors[i]
		store := stores[d.GroupResource()]
		var storage rest.Storage = store
		var subresources map[string]registry.Subresource
		if !d.StorageOf.Empty() {
			stored := stores[d.StorageOf]
			if stored == nil || d.REST != nil {
				return nil, fmt.Errorf("apiserver: %s is stored as %s, which must be served, and has no REST of its own", d.GroupResource(), d.StorageOf)
			}
			view := d.NewView(stored, scheme.Scheme)
			storage = view
			if d.ViewREST != nil {
				var err error
				if storage, subresources, err = d.ViewREST(view); err != nil {
					return nil, fmt.Errorf("apiserver: storage of %s %s: %w", d.GroupVersion, d.Resource, err)
				}
			}
		} else if d.REST != nil {
			var err error
			if storage, subresources, err = d.REST(store, stores); err != nil {
				return nil, fmt.Errorf("apiserver: storage of %s: %w", d.GroupResource(), err)
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
		switch d.GroupResource() {
		case corev1.Resource("namespaces"):
			s.namespaces, _ = storage.(*namespace.REST)
		case corev1.Resource("services"):
			s.services, _ = storage.(*service.REST)
		}
	}
	if s.namespaces == nil {
		return nil, errors.New("apiserver: the namespaces resource is not served")
	}
	if s.services == nil {
		return nil, errors.New("apiserver: the services resource is not served")
	}
	return groups, nil
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

// Serve serves the API on l until ctx ends, then shuts down: first this apiserver's
// lease is deleted and its address removed from the kubernetes Service's endpoints
// (kube's RemoveEndpoints on shutdown; at most 5 s), so clients stop choosing it; from
// then on new requests get 429 with Retry-After (endpoints.WithRetryAfter), the
// requests in flight, open watches among them, are cancelled, and the server closes
// once they have returned (at most 5 s).
func (s *APIServer) Serve(ctx context.Context, l net.Listener) error {
	// Requests run in a context of their own, cancelled only once shuttingDown is closed,
	// so that a client re-watching after its watch ended meets a 429, not a server whose
	// requests end at once.
	shuttingDown := make(chan struct{})
	requestCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           endpoints.WithRetryAfter(s.handler, shuttingDown),
		TLSConfig:         s.tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return requestCtx },
	}
	if _, port, err := net.SplitHostPort(l.Addr().String()); err == nil {
		s.kubernetesService.Port, _ = strconv.Atoi(port)
	}
	kubernetesServiceDone := make(chan struct{})
	go func() {
		defer close(kubernetesServiceDone)
		if err := s.EnsureSystemNamespaces(ctx); err != nil {
			if ctx.Err() == nil {
				slog.Error("creating system namespaces", "err", err)
			}
			return
		}
		if err := s.services.Repair(ctx); err != nil && ctx.Err() == nil {
			slog.Error("repairing service IP and node port allocations", "err", err)
		}
		s.kubernetesService.Run(ctx)
	}()
	defer func() { <-kubernetesServiceDone }()
	defer s.stopCaches()
	customResourcesDone := make(chan struct{})
	go func() {
		defer close(customResourcesDone)
		s.customResources.Run(ctx)
	}()
	defer func() { <-customResourcesDone }()
	aggregatorDone := make(chan struct{})
	go func() {
		defer close(aggregatorDone)
		s.aggregator.Run(ctx)
	}()
	defer func() { <-aggregatorDone }()
	rbacDone := make(chan struct{})
	go func() {
		defer close(rbacDone)
		s.rbac.run(ctx)
	}()
	defer func() { <-rbacDone }()
	priorityClassesDone := make(chan struct{})
	go func() {
		defer close(priorityClassesDone)
		s.ensureSystemPriorityClasses(ctx)
	}()
	defer func() { <-priorityClassesDone }()
	flowcontrolDone := make(chan struct{})
	go func() {
		defer close(flowcontrolDone)
		s.runFlowcontrolBootstrap(ctx)
	}()
	defer func() { <-flowcontrolDone }()
	if s.flowControl != nil {
		loopbackDone := make(chan struct{})
		go func() {
			defer close(loopbackDone)
			s.loopback.serve(ctx, s.handler)
		}()
		defer func() { <-loopbackDone }()
		flowControlDone := make(chan struct{})
		go func() {
			defer close(flowControlDone)
			s.flowControl.run(ctx, s.countedCaches)
		}()
		defer func() { <-flowControlDone }()
	}
	policyStatusDone := make(chan struct{})
	go func() {
		defer close(policyStatusDone)
		s.policyStatus.Run(ctx)
	}()
	defer func() { <-policyStatusDone }()
	if s.compactor != nil {
		compactorDone := make(chan struct{})
		go func() {
			defer close(compactorDone)
			s.compactor.Run(ctx)
		}()
		defer func() { <-compactorDone }()
	}
	if s.authCallout != nil {
		calloutDone := make(chan struct{})
		go func() {
			defer close(calloutDone)
			var opts []nats.Option
			if s.natsTLS != nil {
				opts = append(opts, nats.Secure(s.natsTLS))
			}
			if err := s.authCallout.Run(ctx, s.natsURL, opts...); err != nil {
				slog.Error("NATS auth callout", "err", err)
			}
		}()
		defer func() { <-calloutDone }()
	}
	if s.eventSink != nil {
		sinkDone := make(chan struct{})
		go func() {
			defer close(sinkDone)
			// Events are authorized as they are consumed: not before RBAC is in force,
			// or every one would be refused as forbidden.
			if s.WaitForBootstrapPolicy(ctx) == nil {
				_ = s.eventSink.Run(ctx)
			}
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
	removeCtx, cancelRemove := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := s.kubernetesService.RemoveEndpoints(removeCtx); err != nil {
		slog.Warn("kubernetes service: removing this apiserver's endpoints; its lease expires by itself", "err", err)
	}
	cancelRemove()
	close(shuttingDown)
	cancelRequests()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	return nil
}
