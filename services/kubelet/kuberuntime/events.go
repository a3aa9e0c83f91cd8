package kuberuntime

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// recordContainerEvent records an event about container c of pod, referenced as kubelet
// does: the pod with fieldPath spec.containers{name} (spec.initContainers{name} for an
// init container). Mirrors kubeGenericRuntimeManager.recordContainerEvent.
func (m *Manager) recordContainerEvent(pod *v1.Pod, c *v1.Container, eventType, reason, messageFmt string, args ...any) {
	ref := &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
	if c != nil {
		ref.FieldPath = fmt.Sprintf("spec.containers{%s}", c.Name)
		for i := range pod.Spec.InitContainers {
			if pod.Spec.InitContainers[i].Name == c.Name {
				ref.FieldPath = fmt.Sprintf("spec.initContainers{%s}", c.Name)
			}
		}
	}
	m.recorder.Eventf(ref, eventType, reason, messageFmt, args...)
}

// containerByName returns pod's container or init container called name, nil if none.
func containerByName(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}
