// Package proxy is skiff's kube-proxy: it watches Services and EndpointSlices and
// programs this node's nftables so that a Service's ClusterIP, its NodePorts (on every
// non-loopback local address) and its external IPs reach the Service's ready
// endpoints, chosen at random per connection. It mirrors kube-proxy's nftables mode
// (k8s.io/kubernetes pkg/proxy/nftables) through the same library,
// sigs.k8s.io/knftables, which drives the `nft` binary: one table of its own,
// `ip skiff-proxy`, with kube's chain and map names (services, service-ips,
// service-nodeports, no-endpoint-services, mark-for-masquerade, masquerading,
// service-HASH-ns/name/proto/port, endpoint-HASH-...), DNAT on prerouting and
// output, masquerade on postrouting, and a reject for Services without endpoints.
// The rules are written by syncProxyRules through a bounded-frequency runner, as in
// kube. It needs root (CAP_NET_ADMIN) and nft ≥ 1.0.1; without them New fails with
// ErrNoDataplane.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/knftables"
)

// DefaultTable is the nftables table (family ip) the proxy owns, like kube-proxy's
// `ip kube-proxy`.
const DefaultTable = "skiff-proxy"

// ErrNoDataplane is returned by New (wrapped, with the reason) when nftables cannot be
// used here: no nft binary, nft older than 1.0.1, or no permission (not root, no
// CAP_NET_ADMIN).
var ErrNoDataplane = errors.New("cannot write nftables rules: Services will not forward on this node")

// Config is what the proxy needs.
type Config struct {
	// Client reads Services and EndpointSlices (kube's system:kube-proxy identity,
	// ClusterRole system:node-proxier).
	Client kubernetes.Interface
	// NodeName is this node, for the Local traffic policies.
	NodeName string
	// Table is the nftables table of family ip the proxy owns; "" means DefaultTable.
	Table string
	// NFTables, when set, is used instead of knftables.New (tests give knftables'
	// Fake, which renders the rules without a kernel).
	NFTables knftables.Interface
	// MinSyncPeriod is the least time between two syncs (kube's --min-sync-period);
	// 0 means 1 s.
	MinSyncPeriod time.Duration
	// SyncPeriod is the longest time between two syncs (kube's --sync-period); 0 means 30 s.
	SyncPeriod time.Duration
	// CleanupOnExit deletes the table when Run returns (the all-in-one does, so that
	// Ctrl-C leaves the host as it was); kube-proxy keeps its rules across restarts.
	CleanupOnExit bool
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Proxier is the proxy (kube's nftables Proxier).
type Proxier struct {
	cfg     Config
	nft     knftables.Interface
	log     *slog.Logger
	metrics *metrics

	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	runner    *boundedFrequencyRunner
	mu        sync.Mutex
	lastSync  time.Time
	lastError error
}

// New checks that nftables can be written here and returns the proxy. Errors: a
// missing Client, or ErrNoDataplane (wrapped with knftables' reason).
func New(cfg Config) (*Proxier, error) {
	if cfg.Client == nil {
		return nil, errors.New("proxy: a client is required")
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = time.Second
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	nft := cfg.NFTables
	if nft == nil {
		var err error
		if nft, err = NewNFTables(cfg.Table); err != nil {
			return nil, err
		}
	}
	p := &Proxier{cfg: cfg, nft: nft, log: cfg.Logger.With("component", "proxy"), metrics: newMetrics()}
	p.runner = newBoundedFrequencyRunner(p.syncProxyRules, cfg.MinSyncPeriod, cfg.SyncPeriod)
	return p, nil
}

// NewNFTables opens table (family ip) through the nft binary. Errors: ErrNoDataplane,
// wrapped with the reason (no nft, too old, no permission).
func NewNFTables(table string) (knftables.Interface, error) {
	nft, err := knftables.New(knftables.IPv4Family, table)
	if err != nil {
		return nil, fmt.Errorf("%w (needs root or CAP_NET_ADMIN and nft >= 1.0.1): %v", ErrNoDataplane, err)
	}
	return nft, nil
}

// Cleanup deletes the proxy's table, as `kube-proxy --cleanup` does; a missing table is
// not an error.
func Cleanup(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	return nft.Run(ctx, tx)
}

// Run watches Services and EndpointSlices and keeps the rules in step until ctx ends.
// A failed sync is logged and retried at the next one (ready reports it meanwhile).
func (p *Proxier) Run(ctx context.Context) error {
	// kube-proxy skips Services that name another proxy or are headless.
	factory := informers.NewSharedInformerFactoryWithOptions(p.cfg.Client, 0)
	svcInformer := factory.Core().V1().Services()
	sliceInformer := factory.Discovery().V1().EndpointSlices()
	p.services, p.slices = svcInformer.Lister(), sliceInformer.Lister()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.runner.Run() },
		UpdateFunc: func(any, any) { p.runner.Run() },
		DeleteFunc: func(any) { p.runner.Run() },
	}
	if _, err := svcInformer.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	if _, err := sliceInformer.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("proxy: %v cache did not sync", typ)
		}
	}
	p.log.Info("proxy syncing rules", "table", "ip "+p.cfg.Table, "node", p.cfg.NodeName)
	p.runner.Loop(ctx)
	if p.cfg.CleanupOnExit {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := Cleanup(cctx, p.nft); err != nil {
			p.log.Error("deleting the proxy's table", "table", p.cfg.Table, "err", err)
		}
	}
	return nil
}

// syncProxyRules writes the whole table for the current Services and EndpointSlices in
// one nft transaction (atomic: a packet sees the old rules or the new ones).
func (p *Proxier) syncProxyRules(ctx context.Context) {
	start := time.Now()
	err := p.sync(ctx)
	p.metrics.syncDuration.Observe(time.Since(start).Seconds())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastError = err
	if err != nil {
		p.metrics.syncFailures.Inc()
		p.log.Error("syncing proxy rules", "err", err)
		return
	}
	p.lastSync = time.Now()
	p.metrics.lastSync.SetToCurrentTime()
}

func (p *Proxier) sync(ctx context.Context) error {
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		return err
	}
	var proxied []*corev1.Service
	for _, s := range svcs {
		// kube-proxy leaves Services that name another proxy (service.kubernetes.io/service-proxy-name).
		if _, other := s.Labels["service.kubernetes.io/service-proxy-name"]; !other {
			proxied = append(proxied, s)
		}
	}
	slices, err := p.slices.List(labels.Everything())
	if err != nil {
		return err
	}
	services, endpoints := buildServicePortMap(proxied), buildEndpointsMap(slices)
	chains, sets, err := listExisting(ctx, p.nft)
	if err != nil {
		return err
	}
	tx := p.nft.NewTransaction()
	buildRules(tx, services, endpoints, p.cfg.NodeName, chains, sets)
	if err := p.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nft transaction of %d operations: %w", tx.NumOperations(), err)
	}
	p.metrics.services.Set(float64(len(services)))
	return nil
}

// Ready is nil once the rules have been written and the last sync succeeded (kube-proxy's
// /healthz turns unhealthy when syncs stop succeeding).
func (p *Proxier) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastError != nil {
		return fmt.Errorf("last sync failed: %w", p.lastError)
	}
	if p.lastSync.IsZero() {
		return errors.New("rules not written yet")
	}
	return nil
}

// Metrics is the proxy's Prometheus collector: kube-proxy's
// kubeproxy_sync_proxy_rules_duration_seconds,
// kubeproxy_sync_proxy_rules_last_timestamp_seconds,
// kubeproxy_sync_proxy_rules_nftables_sync_failures_total and
// kubeproxy_sync_proxy_rules_service_ports_total.
func (p *Proxier) Metrics() prometheus.Collector { return p.metrics }

// sortServicePortNames orders names so the rules come out in a stable order.
func sortServicePortNames(names []ServicePortName) {
	sort.Slice(names, func(i, j int) bool {
		return names[i].String()+string(names[i].Protocol) < names[j].String()+string(names[j].Protocol)
	})
}

// secondsDuration is n seconds.
func secondsDuration(n int32) time.Duration { return time.Duration(n) * time.Second }
