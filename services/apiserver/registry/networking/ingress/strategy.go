// Package ingress is the networking.k8s.io/v1 ingresses resource and ingresses/status:
// the API only (skiff runs no ingress controller, so nothing acts on an Ingress and
// nothing sets its status but a client). Mirrors k8s.io/kubernetes/pkg/registry/
// networking/ingress and ValidateIngressCreate, ValidateIngressUpdate and
// ValidateIngressStatusUpdate in pkg/apis/networking/validation.
package ingress

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	pathvalidation "k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves networking.k8s.io/v1 ingresses (kubectl: ingresses, ing) with
// ingresses/status, at /registry/ingress/<namespace>/<name> (kube's key root: the
// singular, a legacy of extensions/v1beta1).
var Descriptor = registry.Descriptor{
	GroupVersion: networkingv1.SchemeGroupVersion,
	Resource:     "ingresses",
	SingularName: "ingress",
	Kind:         "Ingress",
	ShortNames:   []string{"ing"},
	KeyRoot:      "/registry/ingress",
	NewFunc:      func() runtime.Object { return &networkingv1.Ingress{} },
	NewListFunc:  func() runtime.Object { return &networkingv1.IngressList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "Ingress", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// annotationIngressClass is the deprecated annotation that named an Ingress's class
// before spec.ingressClassName.
const annotationIngressClass = "kubernetes.io/ingress.class"

var (
	supportedPathTypes   = []string{string(networkingv1.PathTypeExact), string(networkingv1.PathTypeImplementationSpecific), string(networkingv1.PathTypePrefix)}
	invalidPathSequences = []string{"//", "/./", "/../", "%2f", "%2F"}
	invalidPathSuffixes  = []string{"/..", "/."}
)

// Strategy is the ingresses strategy: status is cleared on create and kept on update,
// the generation counts spec changes. Mirrors ingressStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of ingresses/status: only metadata and status change.
// Mirrors ingressStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate clears status and sets generation 1.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	ing := obj.(*networkingv1.Ingress)
	ing.Status = networkingv1.IngressStatus{}
	ing.Generation = 1
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec
// changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ing, oldIng := obj.(*networkingv1.Ingress), old.(*networkingv1.Ingress)
	ing.Status = oldIng.Status
	if !apiequality.Semantic.DeepEqual(ing.Spec, oldIng.Spec) {
		ing.Generation = oldIng.Generation + 1
	}
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"networking.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// Validate checks a new Ingress. Mirrors ValidateIngressCreate.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	ing := obj.(*networkingv1.Ingress)
	allErrs := validateIngress(ing, options{})
	if v, ok := ing.Annotations[annotationIngressClass]; ok && ing.Spec.IngressClassName != nil && v != *ing.Spec.IngressClassName {
		allErrs = append(allErrs, field.Invalid(field.NewPath("annotations").Child(annotationIngressClass), v, "must match `ingressClassName` when both are specified"))
	}
	return allErrs
}

// ValidateUpdate checks an update; an Ingress stored with an invalid TLS secret name or
// an invalid rule under a wildcard host keeps being accepted, as kube's. Mirrors
// ValidateIngressUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	ing, oldIng := obj.(*networkingv1.Ingress), old.(*networkingv1.Ingress)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&ing.ObjectMeta, &oldIng.ObjectMeta, field.NewPath("metadata"))
	opts := options{allowInvalidSecretName: allowInvalidSecretName(oldIng), allowInvalidWildcardHostRule: allowInvalidWildcardHostRule(oldIng)}
	return append(allErrs, validateIngress(ing, opts)...)
}

// GetAttrs returns labels and metadata.name and metadata.namespace, the selectable
// fields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		return nil, nil, fmt.Errorf("not an Ingress: %T", obj)
	}
	return labels.Set(ing.Labels), registry.ObjectMetaFieldsSet(&ing.ObjectMeta, true), nil
}

// TableColumns are NAME CLASS HOSTS ADDRESS PORTS AGE. Mirrors the printer's
// ingressColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Class", Type: "string", Description: "The name of the IngressClass resource that should be used for additional configuration"},
		{Name: "Hosts", Type: "string", Description: "Hosts that incoming requests are matched against before the ingress rule"},
		{Name: "Address", Type: "string", Description: "Address is a list containing ingress points for the load-balancer"},
		{Name: "Ports", Type: "string", Description: "Ports of TLS configurations that open"},
		registry.AgeColumn,
	}
}

// loadBalancerWidth is where kubectl cuts the ADDRESS column (the printer's, outside
// -o wide; the server prints one table for both).
const loadBalancerWidth = 16

// TableRow prints one Ingress: CLASS <none> without ingressClassName, HOSTS the first
// three rule hosts ("*" for none), ADDRESS the status's IPs or hostnames, PORTS 80 or
// "80, 443" with TLS. Mirrors printIngress.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	ing := obj.(*networkingv1.Ingress)
	class := "<none>"
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	ports := "80"
	if len(ing.Spec.TLS) != 0 {
		ports = "80, 443"
	}
	return []interface{}{ing.Name, class, formatHosts(ing.Spec.Rules), formatAddress(ing.Status.LoadBalancer), ports,
		registry.TranslateTimestampSince(ing.CreationTimestamp)}
}

// formatHosts mirrors the printer's formatHosts.
func formatHosts(rules []networkingv1.IngressRule) string {
	const max = 3
	var list []string
	more := false
	for _, rule := range rules {
		if len(list) == max {
			more = true
		}
		if !more && rule.Host != "" {
			list = append(list, rule.Host)
		}
	}
	if len(list) == 0 {
		return "*"
	}
	s := strings.Join(list, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", s, len(rules)-max)
	}
	return s
}

// formatAddress mirrors ingressLoadBalancerStatusStringer (not wide): the sorted set of
// IPs, or hostnames where no IP, cut at 16 characters.
func formatAddress(s networkingv1.IngressLoadBalancerStatus) string {
	set := map[string]bool{}
	for _, in := range s.Ingress {
		if in.IP != "" {
			set[in.IP] = true
		} else if in.Hostname != "" {
			set[in.Hostname] = true
		}
	}
	list := make([]string, 0, len(set))
	for a := range set {
		list = append(list, a)
	}
	sort.Strings(list)
	r := strings.Join(list, ",")
	if len(r) > loadBalancerWidth {
		r = r[:loadBalancerWidth-3] + "..."
	}
	return r
}

// GetResetFields: ingresses/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"networking.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec. Mirrors ingressStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*networkingv1.Ingress).Spec = old.(*networkingv1.Ingress).Spec
}

// ValidateUpdate checks the metadata update and the load balancer's IPs and hostnames.
// Mirrors ValidateIngressStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	ing, oldIng := obj.(*networkingv1.Ingress), old.(*networkingv1.Ingress)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&ing.ObjectMeta, &oldIng.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateLoadBalancerStatus(&ing.Status.LoadBalancer, field.NewPath("status", "loadBalancer"))...)
}

// ValidateLoadBalancerStatus checks each ingress point: a valid IP, a hostname that is
// a DNS subdomain and not an IP. Mirrors ValidateIngressLoadBalancerStatus.
func ValidateLoadBalancerStatus(status *networkingv1.IngressLoadBalancerStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, in := range status.Ingress {
		idxPath := fldPath.Child("ingress").Index(i)
		if in.IP != "" {
			allErrs = append(allErrs, validation.IsValidIP(idxPath.Child("ip"), in.IP)...)
		}
		if in.Hostname != "" {
			for _, msg := range validation.IsDNS1123Subdomain(in.Hostname) {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("hostname"), in.Hostname, msg))
			}
			if netutils.ParseIPSloppy(in.Hostname) != nil {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("hostname"), in.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return allErrs
}

// options are kube's IngressValidationOptions: leniency for objects already stored.
type options struct {
	allowInvalidSecretName       bool
	allowInvalidWildcardHostRule bool
}

func validateIngress(ing *networkingv1.Ingress, opts options) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&ing.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateSpec(&ing.Spec, field.NewPath("spec"), opts)...)
}

// validateSpec checks an IngressSpec: a default backend or rules, each valid; TLS
// hosts (DNS subdomains, wildcards allowed) and secret names; ingressClassName a DNS
// subdomain. Mirrors ValidateIngressSpec.
func validateSpec(spec *networkingv1.IngressSpec, fldPath *field.Path, opts options) field.ErrorList {
	var allErrs field.ErrorList
	if len(spec.Rules) == 0 && spec.DefaultBackend == nil {
		allErrs = append(allErrs, field.Invalid(fldPath, spec.Rules, "either `defaultBackend` or `rules` must be specified"))
	}
	if spec.DefaultBackend != nil {
		allErrs = append(allErrs, validateBackend(spec.DefaultBackend, fldPath.Child("defaultBackend"))...)
	}
	if len(spec.Rules) > 0 {
		allErrs = append(allErrs, validateRules(spec.Rules, fldPath.Child("rules"), opts)...)
	}
	allErrs = append(allErrs, validateTLS(spec.TLS, fldPath.Child("tls"), opts)...)
	if spec.IngressClassName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*spec.IngressClassName, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("ingressClassName"), *spec.IngressClassName, msg))
		}
	}
	return allErrs
}

func validateTLS(tls []networkingv1.IngressTLS, fldPath *field.Path, opts options) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range tls {
		for j, host := range t.Hosts {
			hostPath := fldPath.Index(i).Child("hosts").Index(j)
			check := validation.IsDNS1123Subdomain
			if strings.Contains(host, "*") {
				check = validation.IsWildcardDNS1123Subdomain
			}
			for _, msg := range check(host) {
				allErrs = append(allErrs, field.Invalid(hostPath, host, msg))
			}
		}
		if !opts.allowInvalidSecretName {
			for _, msg := range validateTLSSecretName(t.SecretName) {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("secretName"), t.SecretName, msg))
			}
		}
	}
	return allErrs
}

func validateTLSSecretName(name string) []string {
	if name == "" {
		return nil
	}
	return apivalidation.NameIsDNSSubdomain(name, false)
}

func validateRules(rules []networkingv1.IngressRule, fldPath *field.Path, opts options) field.ErrorList {
	var allErrs field.ErrorList
	for i, rule := range rules {
		hostPath := fldPath.Index(i).Child("host")
		wildcard := false
		if rule.Host != "" {
			if netutils.ParseIPSloppy(rule.Host) != nil {
				allErrs = append(allErrs, field.Invalid(hostPath, rule.Host, "must be a DNS name, not an IP address"))
			}
			check := validation.IsDNS1123Subdomain
			if strings.Contains(rule.Host, "*") {
				check, wildcard = validation.IsWildcardDNS1123Subdomain, true
			}
			for _, msg := range check(rule.Host) {
				allErrs = append(allErrs, field.Invalid(hostPath, rule.Host, msg))
			}
		}
		if !wildcard || !opts.allowInvalidWildcardHostRule {
			allErrs = append(allErrs, validateRuleValue(&rule.IngressRuleValue, fldPath.Index(i))...)
		}
	}
	return allErrs
}

func validateRuleValue(rule *networkingv1.IngressRuleValue, fldPath *field.Path) field.ErrorList {
	if rule.HTTP == nil {
		return nil
	}
	httpPath := fldPath.Child("http")
	var allErrs field.ErrorList
	if len(rule.HTTP.Paths) == 0 {
		allErrs = append(allErrs, field.Required(httpPath.Child("paths"), ""))
	}
	for i := range rule.HTTP.Paths {
		allErrs = append(allErrs, validateHTTPPath(&rule.HTTP.Paths[i], httpPath.Child("paths").Index(i))...)
	}
	return allErrs
}

// validateHTTPPath: pathType is required; an Exact or Prefix path is absolute and
// clean (no //, /./, /../, %2f, no trailing /. or /..); an ImplementationSpecific one
// is empty or absolute. Mirrors validateHTTPIngressPath.
func validateHTTPPath(path *networkingv1.HTTPIngressPath, fldPath *field.Path) field.ErrorList {
	if path.PathType == nil {
		return field.ErrorList{field.Required(fldPath.Child("pathType"), "pathType must be specified")}
	}
	var allErrs field.ErrorList
	p := fldPath.Child("path")
	switch *path.PathType {
	case networkingv1.PathTypeExact, networkingv1.PathTypePrefix:
		if !strings.HasPrefix(path.Path, "/") {
			allErrs = append(allErrs, field.Invalid(p, path.Path, "must be an absolute path"))
		}
		for _, seq := range invalidPathSequences {
			if strings.Contains(path.Path, seq) {
				allErrs = append(allErrs, field.Invalid(p, path.Path, fmt.Sprintf("must not contain '%s'", seq)))
			}
		}
		for _, suffix := range invalidPathSuffixes {
			if strings.HasSuffix(path.Path, suffix) {
				allErrs = append(allErrs, field.Invalid(p, path.Path, fmt.Sprintf("cannot end with '%s'", suffix)))
			}
		}
	case networkingv1.PathTypeImplementationSpecific:
		if path.Path != "" && !strings.HasPrefix(path.Path, "/") {
			allErrs = append(allErrs, field.Invalid(p, path.Path, "must be an absolute path"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("pathType"), *path.PathType, supportedPathTypes))
	}
	return append(allErrs, validateBackend(&path.Backend, fldPath.Child("backend"))...)
}

// validateBackend: exactly one of a service (a DNS-1035 name and exactly one of a port
// name or number) or a resource (kind and name). Mirrors validateIngressBackend.
func validateBackend(backend *networkingv1.IngressBackend, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case backend.Resource != nil && backend.Service != nil:
		return field.ErrorList{field.Invalid(fldPath, "", "cannot set both resource and service backends")}
	case backend.Resource != nil:
		allErrs = append(allErrs, ValidateTypedLocalObjectReference(backend.Resource, fldPath.Child("resource"))...)
	case backend.Service != nil:
		svc := backend.Service
		if svc.Name == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("service", "name"), ""))
		} else {
			for _, msg := range apivalidation.NameIsDNS1035Label(svc.Name, false) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("service", "name"), svc.Name, msg))
			}
		}
		hasName, hasNumber := svc.Port.Name != "", svc.Port.Number != 0
		switch {
		case hasName && hasNumber:
			allErrs = append(allErrs, field.Invalid(fldPath, "", "cannot set both port name & port number"))
		case hasName:
			for _, msg := range validation.IsValidPortName(svc.Port.Name) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("service", "port", "name"), svc.Port.Name, msg))
			}
		case hasNumber:
			for _, msg := range validation.IsValidPortNum(int(svc.Port.Number)) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("service", "port", "number"), svc.Port.Number, msg))
			}
		default:
			allErrs = append(allErrs, field.Required(fldPath, "port name or number is required"))
		}
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, "", "resource or service backend is required"))
	}
	return allErrs
}

// ValidateTypedLocalObjectReference checks a resource backend (also an IngressClass's
// parameters): apiGroup a DNS subdomain when set, kind and name required and valid path
// segments. Mirrors validateIngressTypedLocalObjectReference.
func ValidateTypedLocalObjectReference(ref *corev1.TypedLocalObjectReference, fldPath *field.Path) field.ErrorList {
	if ref == nil {
		return nil
	}
	var allErrs field.ErrorList
	if ref.APIGroup != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*ref.APIGroup) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("apiGroup"), *ref.APIGroup, msg))
		}
	}
	if ref.Kind == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), "kind is required"))
	} else {
		for _, msg := range pathvalidation.IsValidPathSegmentName(ref.Kind) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("kind"), ref.Kind, msg))
		}
	}
	if ref.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), "name is required"))
	} else {
		for _, msg := range pathvalidation.IsValidPathSegmentName(ref.Name) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), ref.Name, msg))
		}
	}
	return allErrs
}

func allowInvalidSecretName(old *networkingv1.Ingress) bool {
	for _, t := range old.Spec.TLS {
		if len(validateTLSSecretName(t.SecretName)) > 0 {
			return true
		}
	}
	return false
}

func allowInvalidWildcardHostRule(old *networkingv1.Ingress) bool {
	for _, rule := range old.Spec.Rules {
		if strings.Contains(rule.Host, "*") && len(validateRuleValue(&rule.IngressRuleValue, field.NewPath("spec"))) > 0 {
			return true
		}
	}
	return false
}
