// Package serviceresolver finds where the apiserver itself reaches a Service: the
// address of a ready endpoint, for webhooks and aggregated APIs.
package serviceresolver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry/rest"
)

// EndpointSlices is what EndpointResolver reads of the endpointslices Store: its watch
// cache first, a list when the cache is not ready.
type EndpointSlices interface {
	rest.Lister
	VisitCached(namespace string, opts *metainternalversion.ListOptions, visit func(runtime.Object) bool) (bool, error)
}

// EndpointResolver finds where the apiserver reaches a Service's port: a ready
// endpoint's address, from the Service's EndpointSlices, so that webhooks (admission and
// conversion) and aggregated APIs behind a Service work without a proxy on the
// apiserver's host. It implements k8s.io/apiserver/pkg/util/webhook.ServiceResolver.
// Mirrors k8s.io/apiserver/pkg/util/proxy.ResolveEndpoint (kube-apiserver's
// --enable-aggregator-routing).
type EndpointResolver struct {
	Services       rest.Getter
	EndpointSlices EndpointSlices
}

// ResolveEndpoint is https://<ip>:<port> of a ready endpoint of namespace/name serving
// the Service's port numbered port, picked at random among the ready ones. Errors (503
// statuses, as kube's): no such Service, a Service of type ExternalName, no such port,
// no ready endpoint.
func (r *EndpointResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	addr, err := r.Resolve(context.Background(), namespace, name, port)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "https", Host: addr}, nil
}

// Resolve is ResolveEndpoint's "<ip>:<port>", reading with ctx.
func (r *EndpointResolver) Resolve(ctx context.Context, namespace, name string, port int32) (string, error) {
	obj, err := rest.GetCachedFirst(ctx, r.Services, namespace, name, nil)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", apierrors.NewServiceUnavailable(fmt.Sprintf("service %q not found", name))
		}
		return "", err
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return "", fmt.Errorf("services storage returned %T", obj)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("unsupported service type %q", svc.Spec.Type))
	}
	portName, found := "", false
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
	served, err := r.EndpointSlices.VisitCached(namespace, opts, visit)
	if err != nil {
		return "", err
	}
	if !served {
		opts.ResourceVersion = "0"
		list, err := r.EndpointSlices.List(ctx, namespace, opts)
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
