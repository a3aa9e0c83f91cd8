// Package kubernetesservice keeps the `kubernetes` Service in the default namespace,
// with its Endpoints and EndpointSlice, pointing at every live apiserver: ClusterIP the
// first address of --service-cluster-ip-range, port 443 (https) to the apiservers' port
// at their advertised addresses. Mirrors kube-apiserver's controlplane "kubernetes
// service" controller (pkg/controlplane/controller/kubernetesservice) and its lease
// endpoint reconciler (pkg/controlplane/reconcilers/lease.go), which writes both
// Endpoints and the EndpointSlice from the apiservers' leases in etcd.
package kubernetesservice

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry/rest"
)

// Name is the Service's, Endpoints' and EndpointSlice's name; PortName its port's.
const (
	Name     = "kubernetes"
	PortName = "https"
	// ServicePort is the port the Service exposes (kube's default).
	ServicePort = 443
)

// DefaultInterval is how often the objects are reconciled and this apiserver's lease
// renewed: kube's DefaultEndpointReconcilerInterval, 10 s.
const DefaultInterval = 10 * time.Second

// Storage is what the controller needs of a resource.
type Storage interface {
	rest.Getter
	rest.Creater
	rest.Updater
}

// Controller reconciles the kubernetes Service, Endpoints and EndpointSlice.
type Controller struct {
	// Services, Endpoints and EndpointSlices are the registry's resources; writes bypass
	// admission, as kube's controller does.
	Services, Endpoints, EndpointSlices Storage
	// ClusterIP is the Service's address: the first IP of the service range.
	ClusterIP net.IP
	// PublicIP is the apiserver's advertised address (--advertise-address); nil writes
	// the Service only (an address the Endpoints may not hold, such as loopback, is
	// never advertised).
	PublicIP net.IP
	// Port is the apiserver's secure port, the Service's targetPort and the endpoints'
	// port.
	Port int
	// Interval is how often the objects are reconciled; 0 means DefaultInterval.
	Interval time.Duration
	// Type is the endpoint reconciler (--endpoint-reconciler-type): lease ("" too)
	// keeps this apiserver's lease in Leases and writes the endpoints of every live
	// lease; none leaves the Endpoints and EndpointSlice to someone else.
	Type ReconcilerType
	// Leases holds the apiservers' leases; required with type lease and a PublicIP.
	Leases Leases

	// mu makes reconciles and RemoveEndpoints exclusive; once stopped (by
	// RemoveEndpoints) Reconcile writes nothing more, as kube's StopReconciling.
	mu      sync.Mutex
	stopped bool
}

// errNoLeases is doReconcile's refusal to leave the Service without endpoints.
var errNoLeases = errors.New("no API server IP addresses were listed in storage, refusing to erase all endpoints for the kubernetes Service")

// Run reconciles now and every Interval until ctx ends, logging failures and retrying.
func (c *Controller) Run(ctx context.Context) {
	interval := c.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("kubernetes service: reconcile; will retry", "err", err)
		}
	}, interval)
}

// Reconcile creates or repairs the Service once and, with the lease reconciler and a
// PublicIP, renews this apiserver's lease and writes the Endpoints and EndpointSlice
// to the live leases' IPs (this apiserver's included). After RemoveEndpoints it does
// nothing. Errors: the registry's and etcd's.
func (c *Controller) Reconcile(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	if err := c.reconcileService(ctx); err != nil {
		return err
	}
	if !c.writesEndpoints() {
		return nil
	}
	if err := c.Leases.UpdateLease(ctx, c.PublicIP.String()); err != nil {
		return err
	}
	err := c.reconcileEndpoints(ctx, false)
	if apierrors.IsAlreadyExists(err) {
		return nil // another apiserver created them meanwhile; the next interval reconciles
	}
	return err
}

// RemoveEndpoints is a graceful shutdown's, kube's RemoveEndpoints after
// StopReconciling: Reconcile stops for good, this apiserver's lease is deleted and the
// Endpoints and EndpointSlice are rewritten without its IP (retried on conflicts with
// another apiserver's reconcile), so clients stop using it at once rather than after
// its lease's TTL. The last apiserver's IP stays: the endpoints are never emptied.
// Errors: the registry's and etcd's.
func (c *Controller) RemoveEndpoints(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if !c.writesEndpoints() {
		return nil
	}
	if err := c.Leases.RemoveLease(ctx, c.PublicIP.String()); err != nil {
		return err
	}
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) },
		func() error { return c.reconcileEndpoints(ctx, true) })
	if errors.Is(err, errNoLeases) {
		slog.Info("kubernetes service: the last apiserver keeps its endpoints", "ip", c.PublicIP.String())
		return nil
	}
	return err
}

// writesEndpoints says whether this apiserver keeps a lease and writes the endpoints.
func (c *Controller) writesEndpoints() bool {
	return c.PublicIP != nil && (c.Type == "" || c.Type == LeaseEndpointReconcilerType)
}

// reconcileEndpoints is kube's doReconcile: it reads both objects first, then the
// leases, and writes each object conditionally on the resourceVersion it read, so a
// concurrent reconcile of another apiserver, which may have read the leases before a
// removal, costs a conflict rather than bringing the removed IP back. removing leaves
// this apiserver's IP out; otherwise it is listed even if its lease was not read back.
func (c *Controller) reconcileEndpoints(ctx context.Context, removing bool) error {
	ep, err := c.get(ctx, c.Endpoints)
	if err != nil {
		return err
	}
	slice, err := c.get(ctx, c.EndpointSlices)
	if err != nil {
		return err
	}
	leased, err := c.Leases.ListLeases(ctx)
	if err != nil {
		return err
	}
	own := c.PublicIP.String()
	ipv6 := c.PublicIP.To4() == nil
	var ips []string
	for _, ip := range leased {
		// One EndpointSlice holds one family: this apiserver's.
		if parsed := net.ParseIP(ip); parsed != nil && (parsed.To4() == nil) == ipv6 && ip != own {
			ips = append(ips, ip)
		}
	}
	if !removing {
		ips = append(ips, own)
	}
	if len(ips) == 0 {
		return errNoLeases
	}
	slices.Sort(ips)
	ips = slices.Compact(ips)
	if err := c.reconcile(ctx, c.Endpoints, ep, c.endpoints(ips)); err != nil {
		return err
	}
	return c.reconcile(ctx, c.EndpointSlices, slice, c.endpointSlice(ips))
}

// reconcileService creates the Service, or puts its ports back if they were changed; its
// clusterIP cannot change once set, as for any Service.
func (c *Controller) reconcileService(ctx context.Context) error {
	want := c.service()
	existing, err := c.Services.Get(ctx, metav1.NamespaceDefault, Name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Services.Create(ctx, metav1.NamespaceDefault, want, &metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	svc := existing.(*corev1.Service)
	if apiequality.Semantic.DeepEqual(svc.Spec.Ports, want.Spec.Ports) && svc.Spec.Type == corev1.ServiceTypeClusterIP {
		return nil
	}
	svc = svc.DeepCopy()
	svc.Spec.Ports, svc.Spec.Type = want.Spec.Ports, corev1.ServiceTypeClusterIP
	_, _, err = c.Services.Update(ctx, metav1.NamespaceDefault, Name, rest.DefaultUpdatedObjectInfo(svc), &metav1.UpdateOptions{})
	return err
}

// object is an API object with metadata.
type object interface {
	metav1.Object
	runtime.Object
}

// get reads the object of s named Name; nil when there is none.
func (c *Controller) get(ctx context.Context, s Storage) (runtime.Object, error) {
	obj, err := s.Get(ctx, metav1.NamespaceDefault, Name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// reconcile creates want when existing is nil (AlreadyExists when another apiserver
// created it meanwhile), or rewrites existing when its content differs, conditionally
// on existing's resourceVersion (Conflict when it changed meanwhile).
func (c *Controller) reconcile(ctx context.Context, s Storage, existing runtime.Object, want object) error {
	if existing == nil {
		_, err := s.Create(ctx, metav1.NamespaceDefault, want, &metav1.CreateOptions{})
		return err
	}
	m := existing.(metav1.Object)
	switch got := existing.(type) {
	case *corev1.Endpoints:
		w := want.(*corev1.Endpoints)
		if apiequality.Semantic.DeepEqual(got.Subsets, w.Subsets) && got.Labels["endpointslice.kubernetes.io/skip-mirror"] == "true" {
			return nil
		}
	case *discoveryv1.EndpointSlice:
		w := want.(*discoveryv1.EndpointSlice)
		if apiequality.Semantic.DeepEqual(got.Endpoints, w.Endpoints) && apiequality.Semantic.DeepEqual(got.Ports, w.Ports) &&
			got.AddressType == w.AddressType && got.Labels[discoveryv1.LabelServiceName] == Name {
			return nil
		}
	}
	want.SetResourceVersion(m.GetResourceVersion())
	_, _, err := s.Update(ctx, metav1.NamespaceDefault, Name, rest.DefaultUpdatedObjectInfo(want), &metav1.UpdateOptions{})
	return err
}

func (c *Controller) service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"provider": "kubernetes", "component": "apiserver"}},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       c.ClusterIP.String(),
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []corev1.ServicePort{{Name: PortName, Protocol: corev1.ProtocolTCP, Port: ServicePort,
				TargetPort: intstr.FromInt32(int32(c.Port))}},
		},
	}
}

// endpoints is the Endpoints of ips (sorted): one subset, as kube's reconciler packs it.
func (c *Controller) endpoints(ips []string) *corev1.Endpoints {
	addresses := make([]corev1.EndpointAddress, len(ips))
	for i, ip := range ips {
		addresses[i] = corev1.EndpointAddress{IP: ip}
	}
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: metav1.NamespaceDefault,
			// kube's reconciler writes the slice itself, so the mirroring controller skips it.
			Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: addresses,
			Ports:     []corev1.EndpointPort{{Name: PortName, Port: int32(c.Port), Protocol: corev1.ProtocolTCP}},
		}},
	}
}

// endpointSlice is the EndpointSlice of ips: one ready endpoint per address, as kube's
// EndpointsAdapter derives it from the Endpoints.
func (c *Controller) endpointSlice(ips []string) *discoveryv1.EndpointSlice {
	addressType := discoveryv1.AddressTypeIPv4
	if c.PublicIP.To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	endpoints := make([]discoveryv1.Endpoint, len(ips))
	for i, ip := range ips {
		endpoints[i] = discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: Name}},
		AddressType: addressType,
		Endpoints:   endpoints,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(PortName), Port: ptr.To(int32(c.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}
