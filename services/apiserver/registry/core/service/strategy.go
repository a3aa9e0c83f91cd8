package service

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unversionedvalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// DefaultClientIPTimeoutSeconds is sessionAffinityConfig.clientIP.timeoutSeconds when
// sessionAffinity is ClientIP and no timeout is given (3 hours, kube's
// DefaultClientIPServiceAffinitySeconds); MaxClientIPTimeoutSeconds is its limit (1 day).
const (
	DefaultClientIPTimeoutSeconds int32 = 10800
	MaxClientIPTimeoutSeconds     int32 = 86400
)

// Strategy is the services strategy of a single-stack cluster whose service IPs are of
// Family. It fills kube's defaults (v1 SetDefaults_Service and the REST storage's
// ipFamily defaulting) and validates as kube's ValidateService does for what skiff
// serves. Mirrors k8s.io/kubernetes/pkg/registry/core/service/strategy.go.
type Strategy struct {
	// Family is the cluster's one service IP family, from --service-cluster-ip-range.
	Family corev1.IPFamily
}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate clears status and fills defaults.
func (s Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	svc := obj.(*corev1.Service)
	svc.Status = corev1.ServiceStatus{}
	s.setDefaults(svc)
}

// PrepareForUpdate keeps the stored status and fills defaults; a clusterIP left out of
// an update (kubectl apply of a manifest without one, a PUT of an older copy) keeps the
// allocated one, as kube's patchAllocatedValues does, and so do node ports.
func (s Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Status = oldSvc.Status
	patchAllocatedValues(svc, oldSvc)
	dropTypeDependentFields(svc, oldSvc)
	s.setDefaults(svc)
}

// dropTypeDependentFields wipes what a type change makes meaningless, where the update
// left the old (perhaps allocated) value as it was: clusterIPs and IP families when
// leaving for ExternalName, node ports when no longer NodePort or LoadBalancer, the
// health-check node port, allocateLoadBalancerNodePorts and loadBalancerClass when no
// longer LoadBalancer, externalTrafficPolicy when no longer externally accessible, and
// a LoadBalancer status. A value the update changed is kept, for validation to judge.
// Mirrors kube's dropTypeDependentFields.
func dropTypeDependentFields(svc, old *corev1.Service) {
	spec, oldSpec := &svc.Spec, &old.Spec
	if needsClusterIP(old) && !needsClusterIP(svc) {
		if spec.ClusterIP == oldSpec.ClusterIP && slices.Equal(spec.ClusterIPs, oldSpec.ClusterIPs) {
			spec.ClusterIP, spec.ClusterIPs = "", nil
		}
		if slices.Equal(spec.IPFamilies, oldSpec.IPFamilies) {
			spec.IPFamilies = nil
		}
		if ptr.Equal(spec.IPFamilyPolicy, oldSpec.IPFamilyPolicy) {
			spec.IPFamilyPolicy = nil
		}
	}
	if needsNodePort(old) && !needsNodePort(svc) && sameNodePorts(svc, old) {
		for i := range spec.Ports {
			spec.Ports[i].NodePort = 0
		}
	}
	loadBalancer := func(s *corev1.ServiceSpec) bool { return s.Type == corev1.ServiceTypeLoadBalancer }
	if loadBalancer(oldSpec) && !loadBalancer(spec) {
		if spec.HealthCheckNodePort == oldSpec.HealthCheckNodePort {
			spec.HealthCheckNodePort = 0
		}
		if ptr.Equal(spec.AllocateLoadBalancerNodePorts, oldSpec.AllocateLoadBalancerNodePorts) {
			spec.AllocateLoadBalancerNodePorts = nil
		}
		if ptr.Equal(spec.LoadBalancerClass, oldSpec.LoadBalancerClass) {
			spec.LoadBalancerClass = nil
		}
	}
	if externallyAccessible(old) && !externallyAccessible(svc) && spec.ExternalTrafficPolicy == oldSpec.ExternalTrafficPolicy {
		spec.ExternalTrafficPolicy = ""
	}
	if !loadBalancer(spec) {
		svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
}

// sameNodePorts reports whether svc's ports carry the node ports old's did, in order.
func sameNodePorts(svc, old *corev1.Service) bool {
	if len(svc.Spec.Ports) != len(old.Spec.Ports) {
		return false
	}
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].NodePort != old.Spec.Ports[i].NodePort {
			return false
		}
	}
	return true
}

// externallyAccessible reports whether svc is reached from outside the cluster: a
// NodePort or LoadBalancer Service, or a ClusterIP one with external IPs.
func externallyAccessible(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		return true
	case corev1.ServiceTypeClusterIP:
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

// patchAllocatedValues copies the allocated clusterIPs and node ports of old into svc
// where svc leaves them unset and still needs them. Mirrors kube's patchAllocatedValues.
func patchAllocatedValues(svc, old *corev1.Service) {
	if needsClusterIP(svc) && needsClusterIP(old) {
		if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
			svc.Spec.ClusterIP = old.Spec.ClusterIP
			svc.Spec.ClusterIPs = append([]string(nil), old.Spec.ClusterIPs...)
		}
		if svc.Spec.IPFamilyPolicy == nil {
			svc.Spec.IPFamilyPolicy = old.Spec.IPFamilyPolicy
		}
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = old.Spec.IPFamilies
		}
	}
	if needsNodePort(svc) && needsNodePort(old) {
		byKey := map[string]int32{}
		for _, p := range old.Spec.Ports {
			byKey[portKey(p)] = p.NodePort
			byKey["port:"+strconv.Itoa(int(p.Port))] = p.NodePort
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort != 0 {
				continue
			}
			if np, ok := byKey[portKey(*p)]; ok {
				p.NodePort = np
			} else if np, ok := byKey["port:"+strconv.Itoa(int(p.Port))]; ok && !usesNodePort(svc, np) {
				p.NodePort = np
			}
		}
	}
}

func portKey(p corev1.ServicePort) string {
	protocol := p.Protocol
	if protocol == "" {
		protocol = corev1.ProtocolTCP
	}
	return fmt.Sprintf("%s/%d/%s", p.Name, p.Port, protocol)
}

func usesNodePort(svc *corev1.Service, np int32) bool {
	for _, p := range svc.Spec.Ports {
		if p.NodePort == np {
			return true
		}
	}
	return false
}

// needsClusterIP reports whether svc gets a cluster IP (every type but ExternalName).
func needsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName
}

// needsNodePort reports whether svc's ports get node ports: NodePort services, and
// LoadBalancer services unless allocateLoadBalancerNodePorts is false.
func needsNodePort(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		return true
	case corev1.ServiceTypeLoadBalancer:
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return false
}

// isHeadless reports whether svc asked for no cluster IP.
func isHeadless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone
}

// setDefaults is kube's v1 SetDefaults_Service plus the registry's ipFamily defaulting
// for a single-stack cluster (initIPFamilyFields).
func (s Strategy) setDefaults(svc *corev1.Service) {
	spec := &svc.Spec
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.SessionAffinity == corev1.ServiceAffinityNone {
		spec.SessionAffinityConfig = nil
	}
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if spec.SessionAffinityConfig == nil || spec.SessionAffinityConfig.ClientIP == nil || spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(DefaultClientIPTimeoutSeconds)}}
		}
	}
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
		if spec.ExternalTrafficPolicy == "" {
			spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		spec.AllocateLoadBalancerNodePorts = ptr.To(true)
	}
	if spec.Type != corev1.ServiceTypeExternalName && spec.InternalTrafficPolicy == nil {
		spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	if spec.Type == corev1.ServiceTypeExternalName {
		// ExternalName services have no IPs and so no families (kube clears them).
		spec.IPFamilies, spec.IPFamilyPolicy = nil, nil
		return
	}
	if len(spec.IPFamilies) == 0 {
		family := s.Family
		if ip := net.ParseIP(spec.ClusterIP); ip != nil {
			family = familyOf(ip)
		}
		spec.IPFamilies = []corev1.IPFamily{family}
	}
	if spec.IPFamilyPolicy == nil {
		if isHeadless(svc) && len(spec.Selector) == 0 {
			// kube's special case: a headless, selectorless service takes every
			// family the cluster has.
			spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		} else {
			spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		}
	}
}

func familyOf(ip net.IP) corev1.IPFamily {
	if ip.To4() != nil {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

var (
	supportedTypes = sets.New(corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName)
	supportedProtocols       = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
	supportedAffinities      = sets.New(corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP)
	supportedFamilyPolicies  = sets.New(corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack)
	supportedExternalTraffic = sets.New(corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)
	supportedInternalTraffic = sets.New(corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal)
)

// Validate checks a defaulted Service as kube's ValidateService does: the name a DNS-1035
// label; ports present (unless headless or ExternalName), named when several, unique,
// valid numbers, protocols and target ports; no node port on a ClusterIP service; a
// valid type, clusterIP, session affinity, selector, traffic policies and families of
// this single-stack cluster.
func (s Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	svc := obj.(*corev1.Service)
	allErrs := apivalidation.ValidateObjectMeta(&svc.ObjectMeta, true, apivalidation.NameIsDNS1035Label, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	spec := &svc.Spec

	if !supportedTypes.Has(spec.Type) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("type"), spec.Type, sets.List(supportedTypes)))
	}
	if len(spec.Ports) == 0 && !isHeadless(svc) && spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, field.Required(specPath.Child("ports"), ""))
	}
	allErrs = append(allErrs, validatePorts(svc, specPath.Child("ports"))...)

	if spec.Type == corev1.ServiceTypeExternalName {
		if spec.ClusterIP != "" || len(spec.ClusterIPs) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(spec.ExternalName) == 0 {
			allErrs = append(allErrs, field.Required(specPath.Child("externalName"), ""))
		} else {
			name := strings.TrimSuffix(spec.ExternalName, ".")
			for _, msg := range validation.IsDNS1123Subdomain(name) {
				allErrs = append(allErrs, field.Invalid(specPath.Child("externalName"), spec.ExternalName, msg))
			}
		}
	} else {
		allErrs = append(allErrs, s.validateClusterIPs(svc, specPath)...)
	}
	if isHeadless(svc) && (spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer) {
		allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIPs").Index(0), spec.ClusterIP,
			fmt.Sprintf("may not be set to 'None' for %s services", spec.Type)))
	}

	if !supportedAffinities.Has(spec.SessionAffinity) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("sessionAffinity"), spec.SessionAffinity, sets.List(supportedAffinities)))
	}
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		timeout := spec.SessionAffinityConfig.ClientIP.TimeoutSeconds
		if *timeout <= 0 || *timeout > MaxClientIPTimeoutSeconds {
			allErrs = append(allErrs, field.Invalid(specPath.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), *timeout,
				fmt.Sprintf("must be greater than 0 and less than %d", MaxClientIPTimeoutSeconds)))
		}
	} else if spec.SessionAffinityConfig != nil {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("sessionAffinityConfig"),
			fmt.Sprintf("must not be set when session affinity is %s", spec.SessionAffinity)))
	}

	allErrs = append(allErrs, unversionedvalidation.ValidateLabels(spec.Selector, specPath.Child("selector"))...)
	for i, ip := range spec.ExternalIPs {
		if net.ParseIP(ip) == nil {
			allErrs = append(allErrs, field.Invalid(specPath.Child("externalIPs").Index(i), ip, "must be a valid IP address"))
		}
	}
	if spec.ExternalTrafficPolicy != "" {
		if spec.Type != corev1.ServiceTypeNodePort && spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Invalid(specPath.Child("externalTrafficPolicy"), spec.ExternalTrafficPolicy,
				"may only be set for externally-accessible services"))
		} else if !supportedExternalTraffic.Has(spec.ExternalTrafficPolicy) {
			allErrs = append(allErrs, field.NotSupported(specPath.Child("externalTrafficPolicy"), spec.ExternalTrafficPolicy, sets.List(supportedExternalTraffic)))
		}
	}
	if p := spec.InternalTrafficPolicy; p != nil && !supportedInternalTraffic.Has(*p) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("internalTrafficPolicy"), *p, sets.List(supportedInternalTraffic)))
	}
	if spec.AllocateLoadBalancerNodePorts != nil && spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if spec.LoadBalancerIP != "" || len(spec.LoadBalancerSourceRanges) > 0 || spec.LoadBalancerClass != nil {
		if spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("loadBalancerSourceRanges"), "may only be used when `type` is 'LoadBalancer'"))
		}
	}
	return allErrs
}

// validateClusterIPs checks clusterIP(s) and families for a single-stack cluster.
func (s Strategy) validateClusterIPs(svc *corev1.Service, specPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	spec := &svc.Spec
	ipsPath := specPath.Child("clusterIPs")
	if len(spec.ClusterIPs) > 0 && spec.ClusterIP != spec.ClusterIPs[0] {
		allErrs = append(allErrs, field.Invalid(specPath.Child("clusterIP"), spec.ClusterIP, "must match first value in `clusterIPs`"))
	}
	if len(spec.ClusterIPs) > 1 {
		allErrs = append(allErrs, field.Invalid(ipsPath, spec.ClusterIPs, "this cluster is not configured for dual-stack services"))
	}
	for i, ip := range spec.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			if i > 0 {
				allErrs = append(allErrs, field.Invalid(ipsPath.Index(i), ip, "'None' must be the first and only value"))
			}
			continue
		}
		parsed := net.ParseIP(ip)
		if parsed == nil {
			allErrs = append(allErrs, field.Invalid(ipsPath.Index(i), ip, "must be empty, 'None', or a valid IP address"))
			continue
		}
		if familyOf(parsed) != s.Family {
			allErrs = append(allErrs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", s.Family, i)))
		}
	}
	if p := spec.IPFamilyPolicy; p != nil {
		if !supportedFamilyPolicies.Has(*p) {
			allErrs = append(allErrs, field.NotSupported(specPath.Child("ipFamilyPolicy"), *p, sets.List(supportedFamilyPolicies)))
		} else if *p == corev1.IPFamilyPolicyRequireDualStack && !(isHeadless(svc) && len(spec.Selector) == 0) {
			allErrs = append(allErrs, field.Invalid(specPath.Child("ipFamilyPolicy"), *p, "this cluster is not configured for dual-stack services"))
		}
	}
	for i, f := range spec.IPFamilies {
		switch {
		case f != corev1.IPv4Protocol && f != corev1.IPv6Protocol:
			allErrs = append(allErrs, field.NotSupported(specPath.Child("ipFamilies").Index(i), f, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}))
		case f != s.Family || i > 0:
			allErrs = append(allErrs, field.Invalid(specPath.Child("ipFamilies").Index(i), f, "not configured on this cluster"))
		}
	}
	return allErrs
}

// validatePorts checks each port and their uniqueness. Mirrors validateServicePort.
func validatePorts(svc *corev1.Service, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	seen := sets.New[string]()
	nodePorts := sets.New[string]()
	for i, p := range svc.Spec.Ports {
		idx := path.Index(i)
		if len(svc.Spec.Ports) > 1 && p.Name == "" {
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		} else if p.Name != "" {
			for _, msg := range validation.IsDNS1123Label(p.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), p.Name, msg))
			}
			if names.Has(p.Name) {
				allErrs = append(allErrs, field.Duplicate(idx.Child("name"), p.Name))
			}
			names.Insert(p.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(p.Port)) {
			allErrs = append(allErrs, field.Invalid(idx.Child("port"), p.Port, msg))
		}
		if !supportedProtocols.Has(p.Protocol) {
			allErrs = append(allErrs, field.NotSupported(idx.Child("protocol"), p.Protocol, sets.List(supportedProtocols)))
		}
		switch p.TargetPort.Type {
		case intstr.Int:
			for _, msg := range validation.IsValidPortNum(p.TargetPort.IntValue()) {
				allErrs = append(allErrs, field.Invalid(idx.Child("targetPort"), p.TargetPort, msg))
			}
		case intstr.String:
			for _, msg := range validation.IsValidPortName(p.TargetPort.StrVal) {
				allErrs = append(allErrs, field.Invalid(idx.Child("targetPort"), p.TargetPort, msg))
			}
		}
		allErrs = append(allErrs, corevalidation.ValidateAppProtocol(p.AppProtocol, idx.Child("appProtocol"))...)
		key := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if seen.Has(key) {
			allErrs = append(allErrs, field.Duplicate(idx, key))
		}
		seen.Insert(key)
		if p.NodePort != 0 {
			if svc.Spec.Type == corev1.ServiceTypeClusterIP || svc.Spec.Type == corev1.ServiceTypeExternalName {
				allErrs = append(allErrs, field.Forbidden(idx.Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", svc.Spec.Type)))
			} else {
				for _, msg := range validation.IsValidPortNum(int(p.NodePort)) {
					allErrs = append(allErrs, field.Invalid(idx.Child("nodePort"), p.NodePort, msg))
				}
				npKey := fmt.Sprintf("%d/%s", p.NodePort, p.Protocol)
				if nodePorts.Has(npKey) {
					allErrs = append(allErrs, field.Duplicate(idx.Child("nodePort"), p.NodePort))
				}
				nodePorts.Insert(npKey)
			}
		}
	}
	return allErrs
}

// ValidateUpdate adds the update rules: metadata identity, and clusterIPs fixed once
// set unless the type changes to or from ExternalName (kube's ValidateServiceUpdate).
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	allErrs := s.Validate(ctx, obj)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&svc.ObjectMeta, &oldSvc.ObjectMeta, field.NewPath("metadata"))...)
	if needsClusterIP(svc) && needsClusterIP(oldSvc) && len(oldSvc.Spec.ClusterIPs) > 0 &&
		!apiequality.Semantic.DeepEqual(svc.Spec.ClusterIPs, oldSvc.Spec.ClusterIPs) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIP, "may not change once set"))
	}
	if needsClusterIP(svc) && needsClusterIP(oldSvc) && len(oldSvc.Spec.IPFamilies) > 0 &&
		!apiequality.Semantic.DeepEqual(svc.Spec.IPFamilies, oldSvc.Spec.IPFamilies) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "ipFamilies"), svc.Spec.IPFamilies, "may not change once set"))
	}
	return allErrs
}

// GetAttrs returns labels and metadata.name/namespace, kube's service field selectors.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil, fmt.Errorf("not a service: %T", obj)
	}
	return labels.Set(svc.Labels), registry.ObjectMetaFieldsSet(&svc.ObjectMeta, true), nil
}

// TableColumns are NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE, wide SELECTOR. Mirrors
// printService.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	spec := corev1.ServiceSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Type", Type: "string", Description: spec["type"]},
		{Name: "Cluster-IP", Type: "string", Description: spec["clusterIP"]},
		{Name: "External-IP", Type: "string", Description: spec["externalIPs"]},
		{Name: "Port(s)", Type: "string", Description: spec["ports"]},
		registry.AgeColumn,
		{Name: "Selector", Type: "string", Priority: 1, Description: spec["selector"]},
	}
}

// TableRow prints one Service.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	svc := obj.(*corev1.Service)
	clusterIP := svc.Spec.ClusterIP
	if clusterIP == "" {
		clusterIP = "<none>"
	}
	return []interface{}{svc.Name, string(svc.Spec.Type), clusterIP, externalIP(svc), portsString(svc.Spec.Ports),
		registry.TranslateTimestampSince(svc.CreationTimestamp), labels.FormatLabels(svc.Spec.Selector)}
}

// externalIP is the EXTERNAL-IP cell (kube's getServiceExternalIP): the external IPs,
// the load balancer's ingress or <pending> while it has none, the external name.
func externalIP(svc *corev1.Service) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return "<none>"
	case corev1.ServiceTypeLoadBalancer:
		var ips []string
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				ips = append(ips, ing.IP)
			} else if ing.Hostname != "" {
				ips = append(ips, ing.Hostname)
			}
		}
		ips = append(ips, svc.Spec.ExternalIPs...)
		if len(ips) > 0 {
			return strings.Join(ips, ",")
		}
		return "<pending>"
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return "<unknown>"
}

// portsString is the PORT(S) cell: port[:nodePort]/protocol, comma-separated (kube's
// makePortString).
func portsString(ports []corev1.ServicePort) string {
	if len(ports) == 0 {
		return "<none>"
	}
	pieces := make([]string, len(ports))
	for i, p := range ports {
		pieces[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort > 0 {
			pieces[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
	}
	return strings.Join(pieces, ",")
}

// StatusStrategy is the strategy for services/status: only status may change (a load
// balancer controller writes status.loadBalancer there).
type StatusStrategy struct{ Strategy }

// PrepareForUpdate keeps the stored spec.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Spec = oldSvc.Spec
}

// ValidateUpdate checks metadata identity only: the spec is the stored one.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return apivalidation.ValidateObjectMetaUpdate(&obj.(*corev1.Service).ObjectMeta, &old.(*corev1.Service).ObjectMeta, field.NewPath("metadata"))
}
