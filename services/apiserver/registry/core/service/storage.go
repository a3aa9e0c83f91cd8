// Package service is the core/v1 services resource (short name svc) with its status
// subresource: ClusterIPs from --service-cluster-ip-range and NodePorts from
// --service-node-port-range, allocated in etcd before the Service is written and
// released when it goes. Mirrors k8s.io/kubernetes/pkg/registry/core/service and its
// storage (REST with the Allocators of storage/alloc.go).
//
// A LoadBalancer Service is accepted as kube accepts one without a cloud provider: it
// gets a ClusterIP and NodePorts, and its EXTERNAL-IP stays <pending> since nothing
// writes status.loadBalancer. An ExternalName Service gets neither.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/service/ipallocator"
	"skiff.dev/services/apiserver/registry/core/service/portallocator"
	"skiff.dev/services/apiserver/registry/rest"
)

var serviceKind = schema.GroupKind{Kind: "Service"}

// Allocators are the cluster's service IP and node port ranges.
type Allocators struct {
	IPs       *ipallocator.Range
	NodePorts *portallocator.PortAllocator
}

// NewDescriptor serves services and services/status over allocs.
func NewDescriptor(allocs Allocators) registry.Descriptor {
	strategy := Strategy{Family: corev1.IPv4Protocol}
	if allocs.IPs != nil && allocs.IPs.CIDR().IP.To4() == nil {
		strategy.Family = corev1.IPv6Protocol
	}
	return registry.Descriptor{
		GroupVersion: corev1.SchemeGroupVersion,
		Resource:     "services",
		SingularName: "service",
		Kind:         "Service",
		ShortNames:   []string{"svc"},
		Categories:   []string{"all"},
		NewFunc:      func() runtime.Object { return &corev1.Service{} },
		NewListFunc:  func() runtime.Object { return &corev1.ServiceList{} },
		Strategy:     strategy,
		REST: func(store *registry.Store, stores registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			if allocs.IPs == nil || allocs.NodePorts == nil {
				return nil, nil, errors.New("services: service IP and node port allocators are required")
			}
			r := &REST{Store: store, allocs: allocs}
			// Every path that removes a Service (delete, delete-collection, namespace
			// deletion, a last finalizer going) releases what it held.
			store.AfterDelete = func(ctx context.Context, obj runtime.Object) {
				if svc, ok := obj.(*corev1.Service); ok {
					r.release(ctx, svc, nil)
				}
			}
			return r, map[string]registry.Subresource{
				"status": {Kind: "Service", Storage: store.WithStrategy(StatusStrategy{strategy}).Subresource()},
				"proxy":  {Kind: "Service", Storage: &ProxyREST{services: store, stores: stores}},
			}, nil
		},
	}
}

// REST is the services storage: the generic Store with allocation around create,
// update and delete.
type REST struct {
	*registry.Store
	allocs Allocators
}

// Create validates the Service, allocates what it needs (the clusterIP it asks for or
// a free one; the nodePorts it asks for or free ones), then stores it; the allocations
// are released if the write fails. Errors: 422 with kube's message for a requested IP
// or port that is taken or out of range, e.g. `spec.clusterIPs: Invalid value:
// []string{"10.96.0.10"}: failed to allocate IP 10.96.0.10: provided IP is already
// allocated`; 500 "range is full" when none is free; the Store's errors.
func (r *REST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Service: %T", obj))
	}
	svc.Status = corev1.ServiceStatus{}
	r.Strategy.PrepareForCreate(ctx, svc)
	if svc.Namespace == "" {
		svc.Namespace = namespace
	}
	if svc.Name == "" && svc.GenerateName != "" {
		// Named before validation and allocation, as kube's BeforeCreate does.
		svc.Name = names.SimpleNameGenerator.GenerateName(svc.GenerateName)
	}
	if errs := r.Strategy.Validate(ctx, svc); len(errs) > 0 {
		return nil, apierrors.NewInvalid(serviceKind, svc.Name, errs)
	}
	dryRun := opts != nil && len(opts.DryRun) > 0
	txn := &transaction{allocs: r.allocs, dryRun: dryRun}
	if err := txn.allocate(ctx, svc, nil); err != nil {
		txn.revert(ctx)
		return nil, err
	}
	out, err := r.Store.Create(ctx, namespace, svc, opts)
	if err != nil || dryRun {
		txn.revert(ctx)
	}
	return out, err
}

// Update allocates what the new Service needs and the old one did not have (a type
// change to NodePort, a new port, a clusterIP when leaving ExternalName), writes it, and
// then releases what only the old one had. A retried update (a lost compare-and-swap)
// first returns what its previous attempt took.
func (r *REST) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	dryRun := opts != nil && len(opts.DryRun) > 0
	var txn *transaction
	var before *corev1.Service
	out, created, err := r.Store.Update(ctx, namespace, name, rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		if txn != nil {
			txn.revert(ctx)
		}
		obj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil {
			return nil, err
		}
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Service: %T", obj))
		}
		oldSvc := old.(*corev1.Service)
		if svc.Name == "" {
			svc.Name = name
		}
		if svc.Namespace == "" {
			svc.Namespace = namespace
		}
		// Validated here, before the store's own checks: what the store keeps from
		// the old object must not fail validation first.
		if svc.UID != "" && svc.UID != oldSvc.UID {
			return nil, apierrors.NewConflict(corev1.Resource("services"), name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", svc.UID, oldSvc.UID))
		}
		registry.KeepServerManagedMetadata(svc, oldSvc)
		r.Strategy.PrepareForUpdate(ctx, svc, oldSvc)
		if errs := r.Strategy.ValidateUpdate(ctx, svc, oldSvc); len(errs) > 0 {
			return nil, apierrors.NewInvalid(serviceKind, name, errs)
		}
		txn = &transaction{allocs: r.allocs, dryRun: dryRun}
		if err := txn.allocate(ctx, svc, oldSvc); err != nil {
			txn.revert(ctx)
			txn = nil
			return nil, err
		}
		before = oldSvc
		return svc, nil
	}), opts)
	if err != nil || dryRun {
		if txn != nil {
			txn.revert(ctx)
		}
		return out, created, err
	}
	if svc, ok := out.(*corev1.Service); ok && before != nil {
		r.release(ctx, before, svc)
	}
	return out, created, nil
}

// release frees what old holds and current (nil: nothing) does not.
func (r *REST) release(ctx context.Context, old, current *corev1.Service) {
	keepIPs := map[string]bool{}
	keepPorts := map[int32]bool{}
	if current != nil {
		for _, ip := range current.Spec.ClusterIPs {
			keepIPs[ip] = true
		}
		for _, p := range current.Spec.Ports {
			keepPorts[p.NodePort] = true
		}
		if current.Spec.HealthCheckNodePort != 0 {
			keepPorts[current.Spec.HealthCheckNodePort] = true
		}
	}
	for _, ip := range old.Spec.ClusterIPs {
		if parsed := net.ParseIP(ip); parsed != nil && !keepIPs[ip] {
			if err := r.allocs.IPs.Release(ctx, parsed); err != nil {
				slog.Error("releasing service IP", "service", old.Namespace+"/"+old.Name, "ip", ip, "err", err)
			}
		}
	}
	for _, p := range old.Spec.Ports {
		if p.NodePort != 0 && !keepPorts[p.NodePort] {
			keepPorts[p.NodePort] = true // a node port shared by TCP and UDP is released once
			if err := r.allocs.NodePorts.Release(ctx, int(p.NodePort)); err != nil {
				slog.Error("releasing node port", "service", old.Namespace+"/"+old.Name, "port", p.NodePort, "err", err)
			}
		}
	}
}

// transaction is what one create or update attempt allocated, so that a failure
// returns it. Mirrors kube's metaAllocator transactions (storage/transaction.go).
type transaction struct {
	allocs    Allocators
	dryRun    bool
	ips       []net.IP
	nodePorts []int
}

// revert releases everything the transaction allocated.
func (t *transaction) revert(ctx context.Context) {
	for _, ip := range t.ips {
		if err := t.allocs.IPs.Release(ctx, ip); err != nil {
			slog.Error("returning service IP", "ip", ip, "err", err)
		}
	}
	for _, p := range t.nodePorts {
		if err := t.allocs.NodePorts.Release(ctx, p); err != nil {
			slog.Error("returning node port", "port", p, "err", err)
		}
	}
	t.ips, t.nodePorts = nil, nil
}

// allocate fills and takes svc's clusterIPs and node ports that old (nil on create)
// does not already hold. A dry run only checks that requested values are free.
func (t *transaction) allocate(ctx context.Context, svc, old *corev1.Service) error {
	if err := t.allocateClusterIP(ctx, svc, old); err != nil {
		return err
	}
	return t.allocateNodePorts(ctx, svc, old)
}

func (t *transaction) allocateClusterIP(ctx context.Context, svc, old *corev1.Service) error {
	if !needsClusterIP(svc) || isHeadless(svc) {
		return nil
	}
	if old != nil && needsClusterIP(old) && len(old.Spec.ClusterIPs) > 0 {
		return nil // unchanged: ValidateUpdate keeps clusterIPs fixed
	}
	ipsPath := field.NewPath("spec", "clusterIPs")
	if svc.Spec.ClusterIP == "" {
		if t.dryRun {
			return nil
		}
		ip, err := t.allocs.IPs.AllocateNext(ctx)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: %w", err))
		}
		t.ips = append(t.ips, ip)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip.String(), []string{ip.String()}
		return nil
	}
	ip := net.ParseIP(svc.Spec.ClusterIP)
	err := t.take(ctx, ip)
	if err == nil {
		return nil
	}
	var notInRange *ipallocator.ErrNotInRange
	if errors.Is(err, ipallocator.ErrAllocated) || errors.As(err, &notInRange) {
		return apierrors.NewInvalid(serviceKind, svc.Name, field.ErrorList{
			field.Invalid(ipsPath, svc.Spec.ClusterIPs, fmt.Sprintf("failed to allocate IP %v: %v", svc.Spec.ClusterIP, err))})
	}
	return apierrors.NewInternalError(fmt.Errorf("failed to allocate IP %v: %w", svc.Spec.ClusterIP, err))
}

// take allocates ip, or in a dry run checks it is free.
func (t *transaction) take(ctx context.Context, ip net.IP) error {
	if !t.dryRun {
		if err := t.allocs.IPs.Allocate(ctx, ip); err != nil {
			return err
		}
		t.ips = append(t.ips, ip)
		return nil
	}
	if !t.allocs.IPs.Contains(ip) {
		return &ipallocator.ErrNotInRange{IP: ip, ValidRange: t.allocs.IPs.CIDR().String()}
	}
	taken, err := t.allocs.IPs.Has(ctx, ip)
	if err == nil && taken {
		err = ipallocator.ErrAllocated
	}
	return err
}

func (t *transaction) allocateNodePorts(ctx context.Context, svc, old *corev1.Service) error {
	if !needsNodePort(svc) {
		return nil
	}
	held := map[int32]bool{}
	if old != nil && needsNodePort(old) {
		for _, p := range old.Spec.Ports {
			held[p.NodePort] = true
		}
	}
	taken := map[int32]bool{} // this service's own ports: TCP and UDP may share one
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		path := field.NewPath("spec", "ports").Index(i).Child("nodePort")
		switch {
		case p.NodePort == 0:
			if t.dryRun {
				continue
			}
			port, err := t.allocs.NodePorts.AllocateNext(ctx)
			if err != nil {
				return apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %w", err))
			}
			t.nodePorts = append(t.nodePorts, port)
			p.NodePort = int32(port)
		case held[p.NodePort] || taken[p.NodePort]:
		default:
			if err := t.takePort(ctx, int(p.NodePort)); err != nil {
				var notInRange *portallocator.ErrNotInRange
				if errors.Is(err, portallocator.ErrAllocated) || errors.As(err, &notInRange) {
					return apierrors.NewInvalid(serviceKind, svc.Name, field.ErrorList{field.Invalid(path, p.NodePort, err.Error())})
				}
				return apierrors.NewInternalError(fmt.Errorf("failed to allocate port %d: %w", p.NodePort, err))
			}
		}
		taken[p.NodePort] = true
	}
	return nil
}

// takePort allocates port, or in a dry run checks it is free.
func (t *transaction) takePort(ctx context.Context, port int) error {
	if !t.dryRun {
		if err := t.allocs.NodePorts.Allocate(ctx, port); err != nil {
			return err
		}
		t.nodePorts = append(t.nodePorts, port)
		return nil
	}
	if pr := t.allocs.NodePorts.Range(); !pr.Contains(port) {
		return &portallocator.ErrNotInRange{ValidPorts: pr.String()}
	}
	taken, err := t.allocs.NodePorts.Has(ctx, port)
	if err == nil && taken {
		err = portallocator.ErrAllocated
	}
	return err
}

// Repair marks every existing Service's clusterIPs and node ports in the bitmaps, so a
// range key that was lost or reset (a new --service-cluster-ip-range) cannot hand them
// out again. It runs at apiserver start; it never frees (see allocator.Etcd.Mark).
// Mirrors the allocating half of kube's ipallocator and portallocator repair controllers.
func (r *REST) Repair(ctx context.Context) error {
	list, err := r.Store.List(ctx, "", &metainternalversion.ListOptions{})
	if err != nil {
		return err
	}
	var ips []net.IP
	var ports []int
	for _, svc := range list.(*corev1.ServiceList).Items {
		for _, ip := range svc.Spec.ClusterIPs {
			if parsed := net.ParseIP(ip); parsed != nil {
				ips = append(ips, parsed)
			}
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				ports = append(ports, int(p.NodePort))
			}
		}
	}
	if err := r.allocs.IPs.Mark(ctx, ips); err != nil {
		return fmt.Errorf("repair service IPs: %w", err)
	}
	if err := r.allocs.NodePorts.Mark(ctx, ports); err != nil {
		return fmt.Errorf("repair node ports: %w", err)
	}
	return nil
}
