package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"skiff.dev/services/internal/apis/core/defaults"
)

func TestValidateProbesAndHooks(t *testing.T) {
	exec := corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}
	for _, tc := range []struct {
		name    string
		mutate  func(c *corev1.Container, spec *corev1.PodSpec)
		wantErr string // "" means valid
	}{
		{name: "probes and hooks of every kind", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTPS}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090}}}
			c.Lifecycle = &corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
				PreStop:   &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}},
			}
		}},
		{name: "a probe without a handler", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.ReadinessProbe = &corev1.Probe{}
		}, wantErr: "spec.containers[0].readinessProbe: Required value: must specify a handler type"},
		{name: "two handlers", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec.Exec, TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}}
		}, wantErr: "may not specify more than 1 handler type"},
		{name: "liveness successThreshold above 1", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: exec, SuccessThreshold: 2}
		}, wantErr: "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"},
		{name: "negative period", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: exec, PeriodSeconds: -1}
		}, wantErr: "periodSeconds: Invalid value: -1"},
		{name: "readiness probe grace period", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: exec, TerminationGracePeriodSeconds: ptr.To[int64](5)}
		}, wantErr: "must not be set for readinessProbes"},
		{name: "httpGet port out of range", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(70000)}}}
		}, wantErr: "readinessProbe.httpGet.port"},
		{name: "exec without command", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{}}}
		}, wantErr: "lifecycle.postStart.exec.command: Required value"},
		{name: "tcpSocket hook", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}}
		}, wantErr: "tcpSocket is not supported as a lifecycle handler"},
		{name: "sleep longer than the grace period", mutate: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 31}}}
		}, wantErr: "must be greater than 0 and less than terminationGracePeriodSeconds (30)"},
		{name: "probe on an init container", mutate: func(_ *corev1.Container, spec *corev1.PodSpec) {
			spec.InitContainers = []corev1.Container{{Name: "init", Image: "i", ImagePullPolicy: corev1.PullIfNotPresent,
				ReadinessProbe: &corev1.Probe{ProbeHandler: exec}}}
		}, wantErr: "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers"},
		{name: "readiness gate not a qualified name", mutate: func(_ *corev1.Container, spec *corev1.PodSpec) {
			spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "not a name"}}
		}, wantErr: "spec.readinessGates[0].conditionType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
			}
			tc.mutate(&pod.Spec.Containers[0], &pod.Spec)
			defaults.SetDefaults(pod)
			errs := ValidatePod(pod).ToAggregate()
			switch {
			case tc.wantErr == "" && errs != nil:
				t.Errorf("refused: %v", errs)
			case tc.wantErr != "" && (errs == nil || !strings.Contains(errs.Error(), tc.wantErr)):
				t.Errorf("errors %v, want %q", errs, tc.wantErr)
			}
		})
	}
}
