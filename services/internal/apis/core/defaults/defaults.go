// Package defaults fills the fields of a pod that clients may omit, as kube-apiserver's
// defaulting does before validation. It is neutral ground: the apiserver's registry
// defaults what it stores with it, and the kubelet defaults the static pods it reads
// from disk, without linking the registry. Mirrors SetDefaults_Pod, SetDefaults_PodSpec
// and SetDefaults_Container of k8s.io/kubernetes/pkg/apis/core/v1 (defaults.go).
package defaults

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// SetDefaults fills what clients may omit, as kube-apiserver's defaulting and default
// admission plugins do: restartPolicy Always, dnsPolicy ClusterFirst,
// terminationGracePeriodSeconds 30, schedulerName default-scheduler, per-container
// imagePullPolicy, termination message path/policy and port protocol, requests copied
// from limits, priority 0, enableServiceLinks, and the not-ready/unreachable tolerations
// of the DefaultTolerationSeconds plugin (300 s). Mirrors
// k8s.io/kubernetes/pkg/apis/core/v1/defaults.go.
func SetDefaults(pod *corev1.Pod) {
	spec := &pod.Spec
	SetPodSpecDefaults(spec)
	if spec.Priority == nil {
		spec.Priority = ptr.To(int32(0))
	}
	if spec.PreemptionPolicy == nil {
		spec.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	}
	addDefaultTolerations(spec)
}

// SetPodSpecDefaults fills the defaults of a pod spec that kube's SetDefaults_PodSpec
// fills, without what admission adds to pods only (priority, preemption policy, default
// tolerations): workload controllers' pod templates are defaulted with it, so a
// Deployment's stored template reads as kube's does.
func SetPodSpecDefaults(spec *corev1.PodSpec) {
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(corev1.DefaultEnableServiceLinks)
	}
	for i := range spec.InitContainers {
		SetContainerDefaults(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		SetContainerDefaults(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		SetContainerDefaults((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
}

// SetContainerDefaults fills a container's defaults: imagePullPolicy (Always for an
// untagged or ":latest" image, else IfNotPresent), termination message path and policy,
// port protocol TCP, fieldRef apiVersion v1, requests copied from limits, and probe
// timings (timeout 1 s, period 10 s, success 1, failure 3). An ephemeral container is
// defaulted through its EphemeralContainerCommon converted to a Container. Mirrors
// SetDefaults_Container and SetDefaults_Probe.
func SetContainerDefaults(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultImagePullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	// Requests default to limits where only limits are given.
	for name, limit := range c.Resources.Limits {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		if _, ok := c.Resources.Requests[name]; !ok {
			c.Resources.Requests[name] = limit.DeepCopy()
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = 1
		}
		if p.PeriodSeconds == 0 {
			p.PeriodSeconds = 10
		}
		if p.SuccessThreshold == 0 {
			p.SuccessThreshold = 1
		}
		if p.FailureThreshold == 0 {
			p.FailureThreshold = 3
		}
	}
}

// defaultImagePullPolicy is Always for an untagged or ":latest" image, else IfNotPresent.
func defaultImagePullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.LastIndex(name, ":"); i < 0 || name[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// addDefaultTolerations mirrors the DefaultTolerationSeconds admission plugin.
func addDefaultTolerations(spec *corev1.PodSpec) {
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		tolerated := false
		for _, t := range spec.Tolerations {
			if (t.Key == key || t.Key == "") && (t.Effect == corev1.TaintEffectNoExecute || t.Effect == "") {
				tolerated = true
				break
			}
		}
		if !tolerated {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
				Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
				TolerationSeconds: ptr.To(int64(300)),
			})
		}
	}
}
