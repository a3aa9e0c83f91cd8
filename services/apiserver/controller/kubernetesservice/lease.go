package kubernetesservice

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// LeasePrefix is where each apiserver keeps its lease: one key per advertised IP,
// /registry/masterleases/<ip>, kube-apiserver's "/masterleases/" under the storage
// prefix (skiff's is /registry, kube's default).
const LeasePrefix = "/registry/masterleases/"

// DefaultLeaseTTL is how long an apiserver's lease outlives its last renewal: kube's
// DefaultEndpointReconcilerTTL (MasterEndpointReconcileTTL), 15 s.
const DefaultLeaseTTL = 15 * time.Second

// Leases is the set of live apiservers' IPs, kube's reconcilers.Leases.
type Leases interface {
	// ListLeases returns the IPs of every apiserver whose lease has not expired.
	ListLeases(ctx context.Context) ([]string, error)
	// UpdateLease writes ip's lease, or renews it for another TTL.
	UpdateLease(ctx context.Context, ip string) error
	// RemoveLease deletes ip's lease at once; deleting a missing one is no error.
	RemoveLease(ctx context.Context, ip string) error
}

// EtcdLeases keeps the leases in etcd, as kube's storageLeases do: each is the key
// LeasePrefix+ip holding a v1 Endpoints named ip with the one address ip (the record
// kube stores), attached to an etcd lease of TTL, so that etcd itself deletes the key
// when its apiserver stops renewing it.
type EtcdLeases struct {
	// Client is the apiserver's etcd client.
	Client *clientv3.Client
	// Codec encodes the records (the apiserver's storage codec).
	Codec runtime.Codec
	// TTL is each lease's time to live, rounded up to whole seconds; 0 means
	// DefaultLeaseTTL.
	TTL time.Duration
}

// ListLeases reads every key under LeasePrefix and returns the IP each record holds;
// a record that does not decode, or holds no address, is skipped (and logged). Errors:
// etcd's.
func (l *EtcdLeases) ListLeases(ctx context.Context) ([]string, error) {
	resp, err := l.Client.Get(ctx, LeasePrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", LeasePrefix, err)
	}
	ips := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var ep corev1.Endpoints
		if _, _, err := l.Codec.Decode(kv.Value, nil, &ep); err != nil {
			slog.Warn("kubernetes service: skipping an undecodable apiserver lease", "key", string(kv.Key), "err", err)
			continue
		}
		if len(ep.Subsets) == 0 || len(ep.Subsets[0].Addresses) == 0 || net.ParseIP(ep.Subsets[0].Addresses[0].IP) == nil {
			slog.Warn("kubernetes service: skipping an apiserver lease without an address", "key", string(kv.Key))
			continue
		}
		ips = append(ips, ep.Subsets[0].Addresses[0].IP)
	}
	return ips, nil
}

// UpdateLease grants an etcd lease of TTL and writes ip's record attached to it, as
// kube's UpdateLease does at every reconcile; the lease the record held before then has
// no key and expires by itself. Errors: etcd's.
func (l *EtcdLeases) UpdateLease(ctx context.Context, ip string) error {
	ttl := l.TTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	seconds := int64((ttl + time.Second - 1) / time.Second)
	data, err := runtime.Encode(l.Codec, &corev1.Endpoints{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"},
		ObjectMeta: metav1.ObjectMeta{Name: ip},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: ip}}}},
	})
	if err != nil {
		return fmt.Errorf("encode the lease of %s: %w", ip, err)
	}
	lease, err := l.Client.Grant(ctx, seconds)
	if err != nil {
		return fmt.Errorf("grant a lease of %d s: %w", seconds, err)
	}
	if _, err := l.Client.Put(ctx, LeasePrefix+ip, string(data), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("write %s%s: %w", LeasePrefix, ip, err)
	}
	return nil
}

// RemoveLease deletes ip's key. Errors: etcd's.
func (l *EtcdLeases) RemoveLease(ctx context.Context, ip string) error {
	if _, err := l.Client.Delete(ctx, LeasePrefix+ip); err != nil {
		return fmt.Errorf("delete %s%s: %w", LeasePrefix, ip, err)
	}
	return nil
}

// ReconcilerType is kube-apiserver's --endpoint-reconciler-type (reconcilers.Type).
type ReconcilerType string

// The reconciler types: lease (kube's default since 1.11) and none. kube's deprecated
// master-count (which trusts --apiserver-count instead of leases) is refused.
const (
	LeaseEndpointReconcilerType ReconcilerType = "lease"
	NoneEndpointReconcilerType  ReconcilerType = "none"
	MasterCountReconcilerType   ReconcilerType = "master-count"
)

// ValidateReconcilerType returns nil for lease, none and "" (lease), and an error
// naming the accepted values otherwise; master-count's says it is not served.
func ValidateReconcilerType(t ReconcilerType) error {
	switch t {
	case "", LeaseEndpointReconcilerType, NoneEndpointReconcilerType:
		return nil
	case MasterCountReconcilerType:
		return fmt.Errorf("--endpoint-reconciler-type %q is not supported: it is deprecated in kube-apiserver in favour of %q, which skiff serves", t, LeaseEndpointReconcilerType)
	}
	return fmt.Errorf("--endpoint-reconciler-type %q: Reconciler not implemented; one of %s", t,
		strings.Join([]string{string(LeaseEndpointReconcilerType), string(NoneEndpointReconcilerType)}, ", "))
}
