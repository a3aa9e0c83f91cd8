package kuberuntime

import (
	"encoding/json"
	"maps"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubetypes "k8s.io/kubelet/pkg/types"

	"skiff.dev/services/kubelet/container"
)

// Annotations the kubelet puts on containers, with kuberuntime/labels.go's names, so
// that crictl and other tools read them as usual; the labels that map what the runtime
// lists back to pods are k8s.io/kubelet/pkg/types' (io.kubernetes.pod.name, …).
const (
	podTerminationGracePeriodLabel         = "io.kubernetes.pod.terminationGracePeriod"
	containerHashLabel                     = "io.kubernetes.container.hash"
	containerRestartCountLabel             = "io.kubernetes.container.restartCount"
	containerTerminationMessagePathLabel   = "io.kubernetes.container.terminationMessagePath"
	containerTerminationMessagePolicyLabel = "io.kubernetes.container.terminationMessagePolicy"
	containerPortsLabel                    = "io.kubernetes.container.ports"
)

// newPodLabels returns the sandbox labels: the pod's own labels plus the
// three that identify the pod.
func newPodLabels(pod *v1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	maps.Copy(labels, pod.Labels)
	labels[kubetypes.KubernetesPodNameLabel] = pod.Name
	labels[kubetypes.KubernetesPodNamespaceLabel] = pod.Namespace
	labels[kubetypes.KubernetesPodUIDLabel] = string(pod.UID)
	return labels
}

// newPodAnnotations returns the sandbox annotations: the pod's annotations,
// which is how runtimes (and skiff's sim runtime) read per-pod settings.
func newPodAnnotations(pod *v1.Pod) map[string]string {
	return maps.Clone(pod.Annotations)
}

func newContainerLabels(c *v1.Container, pod *v1.Pod) map[string]string {
	return map[string]string{
		kubetypes.KubernetesPodNameLabel:       pod.Name,
		kubetypes.KubernetesPodNamespaceLabel:  pod.Namespace,
		kubetypes.KubernetesPodUIDLabel:        string(pod.UID),
		kubetypes.KubernetesContainerNameLabel: c.Name,
	}
}

func newContainerAnnotations(c *v1.Container, pod *v1.Pod, restartCount int) map[string]string {
	a := map[string]string{
		containerHashLabel:                     strconv.FormatUint(container.HashContainer(c), 16),
		containerRestartCountLabel:             strconv.Itoa(restartCount),
		containerTerminationMessagePathLabel:   c.TerminationMessagePath,
		containerTerminationMessagePolicyLabel: string(c.TerminationMessagePolicy),
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a["io.kubernetes.pod.deletionGracePeriod"] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[podTerminationGracePeriodLabel] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if len(c.Ports) > 0 {
		if data, err := json.Marshal(c.Ports); err == nil {
			a[containerPortsLabel] = string(data)
		}
	}
	return a
}

// labeledPodInfo is what a sandbox's or container's labels say about its pod.
type labeledPodInfo struct {
	PodName, PodNamespace string
	PodUID                types.UID
	ContainerName         string
}

func getContainerInfoFromLabels(labels map[string]string) labeledPodInfo {
	return labeledPodInfo{
		PodName:       labels[kubetypes.KubernetesPodNameLabel],
		PodNamespace:  labels[kubetypes.KubernetesPodNamespaceLabel],
		PodUID:        types.UID(labels[kubetypes.KubernetesPodUIDLabel]),
		ContainerName: labels[kubetypes.KubernetesContainerNameLabel],
	}
}

// annotatedContainerInfo is what a container's annotations record about the
// spec it was created from.
type annotatedContainerInfo struct {
	Hash         uint64
	RestartCount int
}

func getContainerInfoFromAnnotations(annotations map[string]string) annotatedContainerInfo {
	var info annotatedContainerInfo
	// Containers created by other tools carry no annotations; they count as
	// hash 0 and restart count 0, as in kubelet.
	info.Hash, _ = strconv.ParseUint(annotations[containerHashLabel], 16, 64)
	info.RestartCount, _ = strconv.Atoi(annotations[containerRestartCountLabel])
	return info
}
