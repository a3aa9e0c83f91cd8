// Package endpoint is the core/v1 endpoints resource (short name ep): the addresses
// behind each Service, written by the endpoints controller (and, for the kubernetes
// Service, by the apiserver). Mirrors k8s.io/kubernetes/pkg/registry/core/endpoint.
package endpoint

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// Descriptor serves endpoints.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "endpoints",
	SingularName: "endpoints",
	Kind:         "Endpoints",
	ShortNames:   []string{"ep"},
	NewFunc:      func() runtime.Object { return &corev1.Endpoints{} },
	NewListFunc:  func() runtime.Object { return &corev1.EndpointsList{} },
	Strategy:     Strategy{},
}

// Strategy is the endpoints strategy: an Endpoints object is written whole.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate fills the defaults: a port's protocol is TCP when unset (v1
// SetDefaults_EndpointPort). Endpoints have no status.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	setDefaults(obj.(*corev1.Endpoints))
}

// PrepareForUpdate fills the same defaults.
func (Strategy) PrepareForUpdate(_ context.Context, obj, _ runtime.Object) {
	setDefaults(obj.(*corev1.Endpoints))
}

func setDefaults(ep *corev1.Endpoints) {
	for i := range ep.Subsets {
		for j := range ep.Subsets[i].Ports {
			if ep.Subsets[i].Ports[j].Protocol == "" {
				ep.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

var supportedProtocols = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)

// Validate checks metadata and every subset: addresses are valid IPs that are not
// unspecified, loopback or link-local; ports are named when several, with valid numbers
// and protocols. Mirrors ValidateEndpoints.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	ep := obj.(*corev1.Endpoints)
	allErrs := apivalidation.ValidateObjectMeta(&ep.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	for i, ss := range ep.Subsets {
		path := field.NewPath("subsets").Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			allErrs = append(allErrs, field.Required(path, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j, a := range ss.Addresses {
			allErrs = append(allErrs, validateAddress(a, path.Child("addresses").Index(j))...)
		}
		for j, a := range ss.NotReadyAddresses {
			allErrs = append(allErrs, validateAddress(a, path.Child("notReadyAddresses").Index(j))...)
		}
		for j, p := range ss.Ports {
			pp := path.Child("ports").Index(j)
			if len(ss.Ports) > 1 && p.Name == "" {
				allErrs = append(allErrs, field.Required(pp.Child("name"), ""))
			} else if p.Name != "" {
				for _, msg := range validation.IsDNS1123Label(p.Name) {
					allErrs = append(allErrs, field.Invalid(pp.Child("name"), p.Name, msg))
				}
			}
			for _, msg := range validation.IsValidPortNum(int(p.Port)) {
				allErrs = append(allErrs, field.Invalid(pp.Child("port"), p.Port, msg))
			}
			if p.Protocol == "" {
				allErrs = append(allErrs, field.Required(pp.Child("protocol"), ""))
			} else if !supportedProtocols.Has(p.Protocol) {
				allErrs = append(allErrs, field.NotSupported(pp.Child("protocol"), p.Protocol, sets.List(supportedProtocols)))
			}
			allErrs = append(allErrs, corevalidation.ValidateAppProtocol(p.AppProtocol, pp.Child("appProtocol"))...)
		}
	}
	return allErrs
}

// validateAddress mirrors validateEndpointAddress and ValidateEndpointIP.
func validateAddress(a corev1.EndpointAddress, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	ip := net.ParseIP(a.IP)
	switch {
	case ip == nil:
		allErrs = append(allErrs, field.Invalid(path.Child("ip"), a.IP, "must be a valid IP address"))
	case ip.IsUnspecified():
		allErrs = append(allErrs, field.Invalid(path.Child("ip"), a.IP, "may not be unspecified (0.0.0.0)"))
	case ip.IsLoopback():
		allErrs = append(allErrs, field.Invalid(path.Child("ip"), a.IP, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	case ip.IsLinkLocalUnicast():
		allErrs = append(allErrs, field.Invalid(path.Child("ip"), a.IP, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if a.Hostname != "" {
		for _, msg := range validation.IsDNS1123Label(a.Hostname) {
			allErrs = append(allErrs, field.Invalid(path.Child("hostname"), a.Hostname, msg))
		}
	}
	if a.NodeName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*a.NodeName, false) {
			allErrs = append(allErrs, field.Invalid(path.Child("nodeName"), *a.NodeName, msg))
		}
	}
	return allErrs
}

// ValidateUpdate adds the metadata update rules.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return append(s.Validate(ctx, obj), apivalidation.ValidateObjectMetaUpdate(&obj.(*corev1.Endpoints).ObjectMeta,
		&old.(*corev1.Endpoints).ObjectMeta, field.NewPath("metadata"))...)
}

// GetAttrs returns labels and metadata.name/namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ep, ok := obj.(*corev1.Endpoints)
	if !ok {
		return nil, nil, fmt.Errorf("not an endpoints object: %T", obj)
	}
	return labels.Set(ep.Labels), registry.ObjectMetaFieldsSet(&ep.ObjectMeta, true), nil
}

// TableColumns are NAME ENDPOINTS AGE. Mirrors printEndpoints.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Endpoints", Type: "string", Description: corev1.Endpoints{}.SwaggerDoc()["subsets"]},
		registry.AgeColumn,
	}
}

// TableRow prints one Endpoints object.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	ep := obj.(*corev1.Endpoints)
	return []interface{}{ep.Name, FormatEndpoints(ep), registry.TranslateTimestampSince(ep.CreationTimestamp)}
}

// FormatEndpoints is the ENDPOINTS cell: the first three ready ip:port pairs and
// "+ N more..." (kube's formatEndpoints); "<none>" without subsets.
func FormatEndpoints(ep *corev1.Endpoints) string {
	if len(ep.Subsets) == 0 {
		return "<none>"
	}
	const max = 3
	var list []string
	more, count := false, 0
	add := func(s string) {
		if len(list) == max {
			more = true
			return
		}
		list = append(list, s)
	}
	for _, ss := range ep.Subsets {
		if len(ss.Ports) == 0 {
			count += len(ss.Addresses)
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			count += len(ss.Addresses)
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	ret := strings.Join(list, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", ret, count-max)
	}
	return ret
}
