// Package podutil walks the objects a pod refers to by name, for the apiserver's Node
// authorizer and the kubelet's object caches alike. Mirrors VisitPodSecretNames and
// VisitPodConfigmapNames of k8s.io/kubernetes/pkg/api/v1/pod.
package podutil

import corev1 "k8s.io/api/core/v1"

// Visitor is called with each name a pod refers to; returning false stops the walk.
type Visitor func(name string) bool

// VisitPodSecretNames calls visitor with every Secret pod refers to: image pull secrets,
// secret volumes and projected sources, and the env and envFrom of every container
// (init and ephemeral ones too). Names may repeat. It returns false if the visitor
// stopped the walk.
func VisitPodSecretNames(pod *corev1.Pod, visitor Visitor) bool {
	for _, s := range pod.Spec.ImagePullSecrets {
		if !visitor(s.Name) {
			return false
		}
	}
	return visit(pod, visitor, func(v *corev1.Volume) string {
		if v.Secret != nil {
			return v.Secret.SecretName
		}
		return ""
	}, func(p *corev1.VolumeProjection) string {
		if p.Secret != nil {
			return p.Secret.Name
		}
		return ""
	}, func(from *corev1.EnvFromSource) string {
		if from.SecretRef != nil {
			return from.SecretRef.Name
		}
		return ""
	}, func(env *corev1.EnvVarSource) string {
		if env.SecretKeyRef != nil {
			return env.SecretKeyRef.Name
		}
		return ""
	})
}

// VisitPodConfigmapNames calls visitor with every ConfigMap pod refers to: configMap
// volumes and projected sources, and the env and envFrom of every container (init and
// ephemeral ones too). Names may repeat. It returns false if the visitor stopped the
// walk.
func VisitPodConfigmapNames(pod *corev1.Pod, visitor Visitor) bool {
	return visit(pod, visitor, func(v *corev1.Volume) string {
		if v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
		return ""
	}, func(p *corev1.VolumeProjection) string {
		if p.ConfigMap != nil {
			return p.ConfigMap.Name
		}
		return ""
	}, func(from *corev1.EnvFromSource) string {
		if from.ConfigMapRef != nil {
			return from.ConfigMapRef.Name
		}
		return ""
	}, func(env *corev1.EnvVarSource) string {
		if env.ConfigMapKeyRef != nil {
			return env.ConfigMapKeyRef.Name
		}
		return ""
	})
}

// visit walks pod's volumes, projected sources, envFrom and env with one name getter
// each ("" where the item refers to no object of the kind).
func visit(pod *corev1.Pod, visitor Visitor, volume func(*corev1.Volume) string, projection func(*corev1.VolumeProjection) string,
	envFrom func(*corev1.EnvFromSource) string, env func(*corev1.EnvVarSource) string) bool {
	named := func(name string) bool { return name == "" || visitor(name) }
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !named(volume(v)) {
			return false
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				if !named(projection(&v.Projected.Sources[j])) {
					return false
				}
			}
		}
	}
	containers := func(envFroms []corev1.EnvFromSource, envs []corev1.EnvVar) bool {
		for i := range envFroms {
			if !named(envFrom(&envFroms[i])) {
				return false
			}
		}
		for i := range envs {
			if envs[i].ValueFrom != nil && !named(env(envs[i].ValueFrom)) {
				return false
			}
		}
		return true
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if !containers(list[i].EnvFrom, list[i].Env) {
				return false
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if !containers(pod.Spec.EphemeralContainers[i].EnvFrom, pod.Spec.EphemeralContainers[i].Env) {
			return false
		}
	}
	return true
}
