// Package envvars makes the environment variables a pod gets for Services (service
// links): FOO_SERVICE_HOST, FOO_SERVICE_PORT, FOO_SERVICE_PORT_<NAME> and Docker's link
// variables FOO_PORT, FOO_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}. Mirrors kube's
// pkg/kubelet/envvars.
package envvars

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// FromServices returns the variables of services, in order; a Service without a
// cluster IP (headless, ExternalName) has none.
func FromServices(services []*v1.Service) []v1.EnvVar {
	var out []v1.EnvVar
	for _, svc := range services {
		if !IsServiceIPSet(svc) || len(svc.Spec.Ports) == 0 {
			continue
		}
		prefix := variableName(svc.Name)
		out = append(out, v1.EnvVar{Name: prefix + "_SERVICE_HOST", Value: svc.Spec.ClusterIP})
		out = append(out, v1.EnvVar{Name: prefix + "_SERVICE_PORT", Value: strconv.Itoa(int(svc.Spec.Ports[0].Port))})
		for _, p := range svc.Spec.Ports {
			if p.Name != "" {
				out = append(out, v1.EnvVar{Name: prefix + "_SERVICE_PORT_" + variableName(p.Name), Value: strconv.Itoa(int(p.Port))})
			}
		}
		out = append(out, linkVariables(svc, prefix)...)
	}
	return out
}

// IsServiceIPSet reports whether svc has a cluster IP (not "None", not empty).
func IsServiceIPSet(svc *v1.Service) bool {
	return svc.Spec.ClusterIP != v1.ClusterIPNone && svc.Spec.ClusterIP != ""
}

// variableName is name upper-cased with '-' as '_'.
func variableName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// linkVariables are Docker's link variables, the first port's as FOO_PORT too.
func linkVariables(svc *v1.Service, prefix string) []v1.EnvVar {
	var out []v1.EnvVar
	for i, p := range svc.Spec.Ports {
		protocol := string(v1.ProtocolTCP)
		if p.Protocol != "" {
			protocol = string(p.Protocol)
		}
		url := fmt.Sprintf("%s://%s", strings.ToLower(protocol), net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(p.Port))))
		if i == 0 {
			out = append(out, v1.EnvVar{Name: prefix + "_PORT", Value: url})
		}
		portPrefix := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(protocol))
		out = append(out,
			v1.EnvVar{Name: portPrefix, Value: url},
			v1.EnvVar{Name: portPrefix + "_PROTO", Value: strings.ToLower(protocol)},
			v1.EnvVar{Name: portPrefix + "_PORT", Value: strconv.Itoa(int(p.Port))},
			v1.EnvVar{Name: portPrefix + "_ADDR", Value: svc.Spec.ClusterIP},
		)
	}
	return out
}
