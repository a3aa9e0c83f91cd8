// Package endpointslice is the discovery.k8s.io/v1 endpointslices resource: a Service's
// endpoints in slices of at most 100 (as the endpointslice controller writes them) up to
// kube's limit of 1000. Mirrors k8s.io/kubernetes/pkg/registry/discovery/endpointslice.
package endpointslice

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Limits of one EndpointSlice (kube's maxEndpoints, maxAddresses, maxPorts).
const (
	MaxEndpoints = 1000
	MaxAddresses = 100
	MaxPorts     = 20000
)

// Descriptor serves endpointslices.
var Descriptor = registry.Descriptor{
	GroupVersion: discoveryv1.SchemeGroupVersion,
	Resource:     "endpointslices",
	SingularName: "endpointslice",
	Kind:         "EndpointSlice",
	NewFunc:      func() runtime.Object { return &discoveryv1.EndpointSlice{} },
	NewListFunc:  func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
	Strategy:     Strategy{},
}

// Strategy is the endpointslices strategy: a slice is written whole.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate changes nothing: an EndpointSlice has no status.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate changes nothing.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

var (
	supportedAddressTypes = sets.New(discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN)
	supportedProtocols    = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
)

// Validate mirrors ValidateEndpointSlice: a supported addressType; at most 1000
// endpoints, each with 1 to 100 addresses of that type; unique port names, valid
// numbers and protocols.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	slice := obj.(*discoveryv1.EndpointSlice)
	allErrs := apivalidation.ValidateObjectMeta(&slice.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if !supportedAddressTypes.Has(slice.AddressType) {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("addressType"), slice.AddressType, sets.List(supportedAddressTypes)))
	}
	epsPath := field.NewPath("endpoints")
	if len(slice.Endpoints) > MaxEndpoints {
		allErrs = append(allErrs, field.TooMany(epsPath, len(slice.Endpoints), MaxEndpoints))
	}
	for i, ep := range slice.Endpoints {
		path := epsPath.Index(i).Child("addresses")
		if len(ep.Addresses) == 0 {
			allErrs = append(allErrs, field.Required(path, "must contain at least 1 address"))
		} else if len(ep.Addresses) > MaxAddresses {
			allErrs = append(allErrs, field.TooMany(path, len(ep.Addresses), MaxAddresses))
		}
		for j, a := range ep.Addresses {
			allErrs = append(allErrs, validateAddress(slice.AddressType, a, path.Index(j))...)
		}
		if ep.Hostname != nil {
			for _, msg := range validation.IsDNS1123Label(*ep.Hostname) {
				allErrs = append(allErrs, field.Invalid(epsPath.Index(i).Child("hostname"), *ep.Hostname, msg))
			}
		}
	}
	portsPath := field.NewPath("ports")
	names := sets.New[string]()
	for i, p := range slice.Ports {
		path := portsPath.Index(i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			for _, msg := range validation.IsDNS1123Label(name) {
				allErrs = append(allErrs, field.Invalid(path.Child("name"), name, msg))
			}
		}
		if names.Has(name) {
			allErrs = append(allErrs, field.Duplicate(path.Child("name"), name))
		}
		names.Insert(name)
		if p.Port != nil {
			for _, msg := range validation.IsValidPortNum(int(*p.Port)) {
				allErrs = append(allErrs, field.Invalid(path.Child("port"), *p.Port, msg))
			}
		}
		if p.Protocol == nil {
			allErrs = append(allErrs, field.Required(path.Child("protocol"), ""))
		} else if !supportedProtocols.Has(*p.Protocol) {
			allErrs = append(allErrs, field.NotSupported(path.Child("protocol"), *p.Protocol, sets.List(supportedProtocols)))
		}
		allErrs = append(allErrs, corevalidation.ValidateAppProtocol(p.AppProtocol, path.Child("appProtocol"))...)
	}
	return allErrs
}

func validateAddress(t discoveryv1.AddressType, a string, path *field.Path) field.ErrorList {
	switch t {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		ip := net.ParseIP(a)
		if ip == nil || (t == discoveryv1.AddressTypeIPv4) != (ip.To4() != nil) {
			return field.ErrorList{field.Invalid(path, a, fmt.Sprintf("must be a valid %s address", t))}
		}
	case discoveryv1.AddressTypeFQDN:
		var errs field.ErrorList
		for _, msg := range validation.IsFullyQualifiedDomainName(path, a) {
			errs = append(errs, msg)
		}
		return errs
	}
	return nil
}

// ValidateUpdate adds the update rules: addressType is immutable.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	slice, oldSlice := obj.(*discoveryv1.EndpointSlice), old.(*discoveryv1.EndpointSlice)
	allErrs := s.Validate(ctx, obj)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&slice.ObjectMeta, &oldSlice.ObjectMeta, field.NewPath("metadata"))...)
	if slice.AddressType != oldSlice.AddressType {
		allErrs = append(allErrs, field.Invalid(field.NewPath("addressType"), slice.AddressType, "field is immutable"))
	}
	return allErrs
}

// GetAttrs returns labels and metadata.name/namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil, fmt.Errorf("not an endpoint slice: %T", obj)
	}
	return labels.Set(slice.Labels), registry.ObjectMetaFieldsSet(&slice.ObjectMeta, true), nil
}

// TableColumns are NAME ADDRESSTYPE PORTS ENDPOINTS AGE. Mirrors printEndpointSlice.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	doc := discoveryv1.EndpointSlice{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "AddressType", Type: "string", Description: doc["addressType"]},
		{Name: "Ports", Type: "string", Description: doc["ports"]},
		{Name: "Endpoints", Type: "string", Description: doc["endpoints"]},
		registry.AgeColumn,
	}
}

// TableRow prints one EndpointSlice.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	slice := obj.(*discoveryv1.EndpointSlice)
	return []interface{}{slice.Name, string(slice.AddressType), formatPorts(slice.Ports), formatEndpoints(slice.Endpoints),
		registry.TranslateTimestampSince(slice.CreationTimestamp)}
}

// formatPorts lists the first three ports (a number, else the name, else "*").
func formatPorts(ports []discoveryv1.EndpointPort) string {
	var list []string
	for _, p := range ports {
		s := "*"
		if p.Port != nil {
			s = strconv.Itoa(int(*p.Port))
		} else if p.Name != nil {
			s = *p.Name
		}
		list = append(list, s)
	}
	return withMore(list)
}

// formatEndpoints lists the first three addresses.
func formatEndpoints(endpoints []discoveryv1.Endpoint) string {
	var list []string
	for _, ep := range endpoints {
		list = append(list, ep.Addresses...)
	}
	return withMore(list)
}

// withMore is kube's listWithMoreString: three items, "+ N more...", "<unset>" for none.
func withMore(list []string) string {
	const max = 3
	if len(list) > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:max], ","), len(list)-max)
	}
	if len(list) == 0 {
		return "<unset>"
	}
	return strings.Join(list, ",")
}
