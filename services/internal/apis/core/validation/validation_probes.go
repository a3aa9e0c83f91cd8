package validation

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var supportedHTTPSchemes = sets.New(corev1.URISchemeHTTP, corev1.URISchemeHTTPS)

// validateProbesAndHooks checks what the kubelet's prober and lifecycle hooks act on, as
// kube-apiserver's ValidatePodCreate does: a probe or hook names exactly one handler, with
// a valid port (a number, or a named port for httpGet and tcpSocket probes); probe
// timings are not negative; liveness and startup probes need successThreshold 1; a
// readiness probe sets no terminationGracePeriodSeconds; a sleep hook lasts 1 s up to the
// pod's grace period; init containers have neither probes nor hooks; readiness gates name
// qualified condition types. A tcpSocket lifecycle hook, which kube accepts but never
// runs, is refused.
func validateProbesAndHooks(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i := range spec.InitContainers {
		c, idx := &spec.InitContainers[i], fldPath.Child("initContainers").Index(i)
		for name, p := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
			if p != nil {
				allErrs = append(allErrs, field.Forbidden(idx.Child(name), "may not be set for init containers"))
			}
		}
		if c.Lifecycle != nil {
			allErrs = append(allErrs, field.Forbidden(idx.Child("lifecycle"), "may not be set for init containers"))
		}
	}
	for i := range spec.Containers {
		c, idx := &spec.Containers[i], fldPath.Child("containers").Index(i)
		allErrs = append(allErrs, validateProbe(c.LivenessProbe, true, idx.Child("livenessProbe"))...)
		allErrs = append(allErrs, validateProbe(c.ReadinessProbe, false, idx.Child("readinessProbe"))...)
		allErrs = append(allErrs, validateProbe(c.StartupProbe, true, idx.Child("startupProbe"))...)
		if p := c.ReadinessProbe; p != nil && p.TerminationGracePeriodSeconds != nil {
			allErrs = append(allErrs, field.Invalid(idx.Child("readinessProbe", "terminationGracePeriodSeconds"), *p.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
		}
		if c.Lifecycle != nil {
			allErrs = append(allErrs, validateLifecycleHandler(c.Lifecycle.PostStart, spec.TerminationGracePeriodSeconds, idx.Child("lifecycle", "postStart"))...)
			allErrs = append(allErrs, validateLifecycleHandler(c.Lifecycle.PreStop, spec.TerminationGracePeriodSeconds, idx.Child("lifecycle", "preStop"))...)
		}
	}
	for i, g := range spec.ReadinessGates {
		for _, msg := range validation.IsQualifiedName(string(g.ConditionType)) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("readinessGates").Index(i).Child("conditionType"), string(g.ConditionType), msg))
		}
	}
	return allErrs
}

func validateProbe(p *corev1.Probe, successMustBeOne bool, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	allErrs := validateHandlers(fldPath, map[string]bool{
		"exec": p.Exec != nil, "httpGet": p.HTTPGet != nil, "tcpSocket": p.TCPSocket != nil, "grpc": p.GRPC != nil,
	})
	switch {
	case p.Exec != nil:
		allErrs = append(allErrs, validateExec(p.Exec, fldPath.Child("exec"))...)
	case p.HTTPGet != nil:
		allErrs = append(allErrs, validateHTTPGet(p.HTTPGet, fldPath.Child("httpGet"))...)
	case p.TCPSocket != nil:
		allErrs = append(allErrs, validatePort(p.TCPSocket.Port, fldPath.Child("tcpSocket", "port"))...)
	case p.GRPC != nil:
		for _, msg := range validation.IsValidPortNum(int(p.GRPC.Port)) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("grpc", "port"), p.GRPC.Port, msg))
		}
	}
	for name, v := range map[string]int32{"initialDelaySeconds": p.InitialDelaySeconds, "timeoutSeconds": p.TimeoutSeconds,
		"periodSeconds": p.PeriodSeconds, "successThreshold": p.SuccessThreshold, "failureThreshold": p.FailureThreshold} {
		if v < 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(name), v, "must be greater than or equal to 0"))
		}
	}
	if successMustBeOne && p.SuccessThreshold != 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	return allErrs
}

func validateLifecycleHandler(h *corev1.LifecycleHandler, gracePeriod *int64, fldPath *field.Path) field.ErrorList {
	if h == nil {
		return nil
	}
	allErrs := validateHandlers(fldPath, map[string]bool{
		"exec": h.Exec != nil, "httpGet": h.HTTPGet != nil, "tcpSocket": h.TCPSocket != nil, "sleep": h.Sleep != nil,
	})
	switch {
	case h.Exec != nil:
		allErrs = append(allErrs, validateExec(h.Exec, fldPath.Child("exec"))...)
	case h.HTTPGet != nil:
		allErrs = append(allErrs, validateHTTPGet(h.HTTPGet, fldPath.Child("httpGet"))...)
	case h.TCPSocket != nil:
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("tcpSocket"), "tcpSocket is not supported as a lifecycle handler: the kubelet never runs it"))
	case h.Sleep != nil:
		if h.Sleep.Seconds <= 0 || (gracePeriod != nil && h.Sleep.Seconds > *gracePeriod) {
			limit := int64(corev1.DefaultTerminationGracePeriodSeconds)
			if gracePeriod != nil {
				limit = *gracePeriod
			}
			allErrs = append(allErrs, field.Invalid(fldPath.Child("sleep", "seconds"), h.Sleep.Seconds,
				fmt.Sprintf("must be greater than 0 and less than terminationGracePeriodSeconds (%d)", limit)))
		}
	}
	return allErrs
}

// validateHandlers requires exactly one of the handler kinds set.
func validateHandlers(fldPath *field.Path, set map[string]bool) field.ErrorList {
	n := 0
	for _, ok := range set {
		if ok {
			n++
		}
	}
	switch {
	case n == 0:
		return field.ErrorList{field.Required(fldPath, "must specify a handler type")}
	case n > 1:
		return field.ErrorList{field.Forbidden(fldPath, "may not specify more than 1 handler type")}
	}
	return nil
}

func validateExec(e *corev1.ExecAction, fldPath *field.Path) field.ErrorList {
	if len(e.Command) == 0 {
		return field.ErrorList{field.Required(fldPath.Child("command"), "")}
	}
	return nil
}

func validateHTTPGet(h *corev1.HTTPGetAction, fldPath *field.Path) field.ErrorList {
	allErrs := validatePort(h.Port, fldPath.Child("port"))
	if h.Scheme != "" && !supportedHTTPSchemes.Has(h.Scheme) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("scheme"), h.Scheme, sets.List(supportedHTTPSchemes)))
	}
	for i, hdr := range h.HTTPHeaders {
		for _, msg := range validation.IsHTTPHeaderName(hdr.Name) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("httpHeaders").Index(i).Child("name"), hdr.Name, msg))
		}
	}
	return allErrs
}

// validatePort accepts a port number or the name of one of the container's ports (an
// IANA service name), as kube's ValidatePortNumOrName.
func validatePort(port intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	var msgs []string
	if port.Type == intstr.Int {
		msgs = validation.IsValidPortNum(port.IntValue())
	} else {
		msgs = validation.IsValidPortName(port.StrVal)
	}
	var allErrs field.ErrorList
	for _, msg := range msgs {
		allErrs = append(allErrs, field.Invalid(fldPath, port.String(), msg))
	}
	return allErrs
}
