// Package aggregator is skiff's kube-aggregator: it serves the group versions of
// APIServices whose spec.service names an extension API server (metrics-server, a
// sample-apiserver...) by proxying /apis/<group>/<version>/... to a ready endpoint of
// that Service, over TLS verified with the APIService's caBundle, presenting the
// apiserver's front-proxy client certificate and the caller's identity in the
// request-header fields (X-Remote-User, X-Remote-Group, X-Remote-Extra-*). Beside the
// proxy it runs kube's availability controllers (status.conditions Available: Local,
// ServiceNotFound, ServicePortError, EndpointsNotFound, MissingEndpoints,
// FailedDiscoveryCheck, Passed; re-checked every 30 s and on every change of the
// APIService, its Service or its EndpointSlices), the autoregistration of a local
// APIService per built-in group version, and the discovery of the aggregated groups
// (legacy /apis and /apis/<group>, and aggregated discovery from each backend's). It is
// an endpoints.AggregatedAPI. Mirrors k8s.io/kube-aggregator/pkg/apiserver (proxy,
// discovery manager), pkg/controllers/status (local and remote availability) and
// pkg/controllers/autoregister.
package aggregator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"

	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/apiregistration/apiservice"
	"skiff.dev/services/internal/tracing"
)

// ServiceResolver finds a ready endpoint ("ip:port") of a Service's port
// (serviceresolver.EndpointResolver); its errors are 503 statuses.
type ServiceResolver interface {
	Resolve(ctx context.Context, namespace, name string, port int32) (string, error)
}

// Config is what the Aggregator needs.
type Config struct {
	// Stores finds the apiservices, services and endpointslices Stores, which the
	// Aggregator lists and watches in process; APIService status is written through it.
	Stores registry.Stores
	// Resolver finds the endpoint a request to an APIService's Service goes to (kube's
	// --enable-aggregator-routing: never the ClusterIP).
	Resolver ServiceResolver
	// ProxyClientTLS holds the client certificate presented to extension servers: the
	// front-proxy-client certificate, of the front-proxy CA (kube's
	// --proxy-client-cert-file). Only its Certificates and GetClientCertificate are used;
	// the server is verified with each APIService's caBundle. nil presents none.
	ProxyClientTLS *tls.Config
	// TracerProvider traces every proxied request and check (otelhttp); nil means the
	// global provider.
	TracerProvider trace.TracerProvider
	// Local are the group versions the apiserver serves itself, in its order: each gets a
	// local APIService (autoregistration, with kube's priorities), and their groups are
	// never proxied.
	Local []schema.GroupVersion
	// ClientCAFile (the CA of client certificates, kube's --client-ca-file) and
	// RequestHeaderCAFile (the front-proxy CA, --requestheader-client-ca-file) are
	// published, with RequestHeaderAllowedNames and the request-header fields, in
	// kube-system/extension-apiserver-authentication, which extension API servers read to
	// authenticate what the apiserver proxies to them. "" publishes neither.
	ClientCAFile, RequestHeaderCAFile string
	// RequestHeaderAllowedNames are the client certificate names whose request-header
	// fields extension servers should believe (--requestheader-allowed-names).
	RequestHeaderAllowedNames []string
}

// Aggregator serves the aggregated APIs; build it with New and Run it.
type Aggregator struct {
	cfg       Config
	wrap      func(http.RoundTripper) http.RoundTripper
	localSet  sets.Set[string] // the built-in groups
	informer  cache.SharedIndexInformer
	services  cache.SharedIndexInformer
	slices    cache.SharedIndexInformer
	queue     workqueue.TypedRateLimitingInterface[string]
	discovery *discoveryCache
	crds      *crdRegistration // nil: custom resources are not served

	mu         sync.Mutex
	transports map[string]*backend // by APIService name
	current    atomic.Pointer[snapshot]
}

var _ endpoints.AggregatedAPI = (*Aggregator)(nil)

// resyncPeriod is how often every APIService is checked again though nothing changed:
// an extension server can go away without its Service or endpoints changing. Kube's.
const resyncPeriod = 30 * time.Second

// New builds an Aggregator over cfg; nothing is proxied until Run has synced the
// APIServices.
func New(cfg Config) *Aggregator {
	a := &Aggregator{
		cfg: cfg, wrap: tracing.WrapTransport(cfg.TracerProvider), localSet: sets.New[string](),
		transports: map[string]*backend{}, discovery: newDiscoveryCache(),
		// A tight requeue after a failed check, as kube's: availability depends on the
		// network too, which sends no events.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "apiservice_availability"}),
	}
	for _, gv := range cfg.Local {
		a.localSet.Insert(gv.Group)
	}
	a.current.Store(&snapshot{})
	a.crds = newCRDRegistration(a)
	a.informer = cache.NewSharedIndexInformer(&registry.ListWatch{Stores: cfg.Stores, Resource: apiservice.Resource},
		&apiregistrationv1.APIService{}, resyncPeriod, cache.Indexers{})
	_, _ = a.informer.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { a.apiServiceChanged(obj) },
		UpdateFunc: func(_, obj interface{}) { a.apiServiceChanged(obj) },
		DeleteFunc: func(obj interface{}) { a.apiServiceChanged(obj) },
	}, resyncPeriod)
	a.services = cache.NewSharedIndexInformer(&registry.ListWatch{Stores: cfg.Stores, Resource: corev1.Resource("services")},
		&corev1.Service{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_, _ = a.services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { a.serviceChanged(obj) },
		UpdateFunc: func(_, obj interface{}) { a.serviceChanged(obj) },
		DeleteFunc: func(obj interface{}) { a.serviceChanged(obj) },
	})
	a.slices = cache.NewSharedIndexInformer(&registry.ListWatch{Stores: cfg.Stores, Resource: discoveryv1.Resource("endpointslices")},
		&discoveryv1.EndpointSlice{}, 0, cache.Indexers{serviceIndex: sliceServiceIndex})
	_, _ = a.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { a.sliceChanged(obj) },
		UpdateFunc: func(_, obj interface{}) { a.sliceChanged(obj) },
		DeleteFunc: func(obj interface{}) { a.sliceChanged(obj) },
	})
	return a
}

// serviceIndex indexes EndpointSlices by "<namespace>/<service>".
const serviceIndex = "service"

func sliceServiceIndex(obj interface{}) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
}

// Run watches APIServices, Services and EndpointSlices, registers the local
// APIServices (of built-in and custom resource group versions), checks availability and
// publishes the extension-apiserver-authentication ConfigMap until ctx ends.
func (a *Aggregator) Run(ctx context.Context) {
	defer a.queue.ShutDown()
	var wg sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{a.informer, a.services, a.slices} {
		wg.Add(1)
		go func() { defer wg.Done(); inf.Run(ctx.Done()) }()
	}
	defer wg.Wait()
	if !cache.WaitForCacheSync(ctx.Done(), a.informer.HasSynced, a.services.HasSynced, a.slices.HasSynced) {
		return
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.publishAuthentication(ctx) }()
	if a.crds != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.crds.run(ctx) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
		_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			if err := a.autoregister(ctx); err != nil {
				if ctx.Err() == nil {
					slog.Warn("registering the local APIServices; will retry", "err", err)
				}
				return false, nil
			}
			return true, nil
		})
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	a.mu.Lock()
	for name, b := range a.transports {
		b.close()
		delete(a.transports, name)
	}
	a.mu.Unlock()
}

func (a *Aggregator) processNext(ctx context.Context) bool {
	name, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(name)
	if err := a.sync(ctx, name); err != nil {
		if ctx.Err() == nil {
			slog.Debug("checking APIService availability; will retry", "apiservice", name, "err", err)
		}
		a.queue.AddRateLimited(name)
		return true
	}
	a.queue.Forget(name)
	return true
}

// apiServiceChanged rebuilds what is served and queues the APIService's check.
func (a *Aggregator) apiServiceChanged(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if s, ok := obj.(*apiregistrationv1.APIService); ok {
		a.rebuild()
		a.queue.Add(s.Name)
		if a.crds != nil {
			a.crds.queue.Add(crdKey)
		}
	}
}

// serviceChanged queues the APIServices that name the Service.
func (a *Aggregator) serviceChanged(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if s, ok := obj.(*corev1.Service); ok {
		for _, name := range a.current.Load().byService[s.Namespace+"/"+s.Name] {
			a.queue.Add(name)
		}
	}
}

// sliceChanged queues the APIServices that name the slice's Service.
func (a *Aggregator) sliceChanged(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
		for _, name := range a.current.Load().byService[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]] {
			a.queue.Add(name)
		}
	}
}

// snapshot is what the request path reads, rebuilt on every change.
type snapshot struct {
	// remote are the proxied group versions, by "<group>/<version>".
	remote map[string]*route
	// groups are the groups that have a remote APIService, each with all its
	// APIServices in kube's order (local ones included), in priority order.
	groups [][]*apiregistrationv1.APIService
	// byGroup indexes groups by name.
	byGroup map[string]int
	// byService lists the remote APIServices by "<namespace>/<service>".
	byService map[string][]string
}

// route is one proxied group version: its APIService and what reaches its Service.
type route struct {
	apiService *apiregistrationv1.APIService
	available  bool
	backend    *backend
}

// backend reaches one APIService's Service: a transport verifying the Service's
// certificate with the caBundle (ServerName <service>.<namespace>.svc) and presenting
// the front-proxy client certificate.
type backend struct {
	key       backendKey
	transport *http.Transport
	err       error // the transport could not be built (a caBundle that does not parse)
}

// backendKey is what a backend is built from; a change builds a new one.
type backendKey struct {
	namespace, name string
	port            int32
	caBundle        string
	insecure        bool
}

func keyOf(s *apiregistrationv1.APIService) backendKey {
	k := backendKey{namespace: s.Spec.Service.Namespace, name: s.Spec.Service.Name, port: 443,
		caBundle: string(s.Spec.CABundle), insecure: s.Spec.InsecureSkipTLSVerify}
	if s.Spec.Service.Port != nil {
		k.port = *s.Spec.Service.Port
	}
	return k
}

func (b *backend) close() {
	if b.transport != nil {
		b.transport.CloseIdleConnections()
	}
}

// newBackend builds the transport of k. Mirrors remote.BuildTransportConfig.
func (a *Aggregator) newBackend(k backendKey) *backend {
	b := &backend{key: k}
	tlsConfig := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         k.name + "." + k.namespace + ".svc",
		InsecureSkipVerify: k.insecure, //nolint:gosec // the APIService asks for it (spec.insecureSkipTLSVerify), as in kube
	}
	if k.caBundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(k.caBundle)) {
			b.err = fmt.Errorf("unable to load root certificates: unable to parse bytes as PEM block")
			return b
		}
		tlsConfig.RootCAs = pool
	}
	if p := a.cfg.ProxyClientTLS; p != nil {
		tlsConfig.Certificates, tlsConfig.GetClientCertificate = p.Certificates, p.GetClientCertificate
	}
	b.transport = &http.Transport{
		TLSClientConfig:     tlsConfig,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
	}
	return b
}

// rebuild makes the snapshot from the informer's APIServices, reusing the transports
// whose APIService's Service and TLS settings did not change.
func (a *Aggregator) rebuild() {
	a.mu.Lock()
	defer a.mu.Unlock()
	var all []*apiregistrationv1.APIService
	for _, obj := range a.informer.GetStore().List() {
		all = append(all, obj.(*apiregistrationv1.APIService))
	}
	next := &snapshot{remote: map[string]*route{}, byGroup: map[string]int{}, byService: map[string][]string{}}
	hasRemote := sets.New[string]()
	keep := map[string]bool{}
	for _, s := range all {
		if s.Spec.Service == nil {
			continue
		}
		k := keyOf(s)
		b := a.transports[s.Name]
		if b == nil || !reflect.DeepEqual(b.key, k) {
			if b != nil {
				b.close()
			}
			b = a.newBackend(k)
			a.transports[s.Name] = b
		}
		keep[s.Name] = true
		svc := s.Spec.Service.Namespace + "/" + s.Spec.Service.Name
		next.byService[svc] = append(next.byService[svc], s.Name)
		// A built-in group stays skiff's: its APIService is checked, never routed.
		if a.localSet.Has(s.Spec.Group) {
			continue
		}
		hasRemote.Insert(s.Spec.Group)
		next.remote[s.Spec.Group+"/"+s.Spec.Version] = &route{apiService: s, backend: b,
			available: helper.IsAPIServiceConditionTrue(s, apiregistrationv1.Available)}
	}
	for name, b := range a.transports {
		if !keep[name] {
			b.close()
			delete(a.transports, name)
		}
	}
	for _, group := range helper.SortedByGroupAndVersion(all) {
		if hasRemote.Has(group[0].Spec.Group) {
			next.byGroup[group[0].Spec.Group] = len(next.groups)
			next.groups = append(next.groups, group)
		}
	}
	a.current.Store(next)
}

// Handler implements endpoints.AggregatedAPI: the group document of a group with an
// APIService of a Service, or the proxy of such an APIService's group version.
func (a *Aggregator) Handler(group, version string) http.Handler {
	snap := a.current.Load()
	if version == "" {
		i, ok := snap.byGroup[group]
		if !ok {
			return nil
		}
		return groupHandler(apiGroup(snap.groups[i]))
	}
	r := snap.remote[group+"/"+version]
	if r == nil {
		return nil
	}
	return &proxyHandler{a: a, route: r}
}

// Groups implements endpoints.AggregatedAPI: every group with an APIService of a
// Service, available or not (as kube: a client that reads an unavailable one's
// discovery gets the 503 and says so).
func (a *Aggregator) Groups() []metav1.APIGroup {
	snap := a.current.Load()
	out := make([]metav1.APIGroup, 0, len(snap.groups))
	for _, g := range snap.groups {
		out = append(out, apiGroup(g))
	}
	return out
}

// Discovery implements endpoints.AggregatedAPI: each remote APIService's group version
// with the resources its server last listed, Stale when that listing failed or the
// APIService is not available.
func (a *Aggregator) Discovery() []apidiscoveryv2.APIGroupDiscovery {
	snap := a.current.Load()
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(snap.groups))
	for _, g := range snap.groups {
		item := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g[0].Spec.Group}}
		for _, s := range g {
			if s.Spec.Service == nil {
				continue // served here: custom resources list it
			}
			item.Versions = append(item.Versions, a.discovery.version(s))
		}
		out = append(out, item)
	}
	return out
}

// OpenAPIV3 is the OpenAPI v3 document each remote APIService's server serves for its
// group version, by path ("apis/<group>/<version>"), as last read by the availability
// checks; /openapi/v3 merges them into its index.
func (a *Aggregator) OpenAPIV3() map[string][]byte {
	snap := a.current.Load()
	var names []string
	for _, g := range snap.groups {
		for _, s := range g {
			if s.Spec.Service != nil {
				names = append(names, s.Name)
			}
		}
	}
	return a.discovery.openAPI(names)
}

// apiGroup is the APIGroup of one group's APIServices, sorted as kube sorts them: the
// first is the preferred version. Mirrors convertToDiscoveryAPIGroup.
func apiGroup(services []*apiregistrationv1.APIService) metav1.APIGroup {
	g := metav1.APIGroup{Name: services[0].Spec.Group}
	for _, s := range services {
		v := metav1.GroupVersionForDiscovery{GroupVersion: s.Spec.Group + "/" + s.Spec.Version, Version: s.Spec.Version}
		if len(g.Versions) == 0 {
			g.PreferredVersion = v
		}
		g.Versions = append(g.Versions, v)
	}
	return g
}
