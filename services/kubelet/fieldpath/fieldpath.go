// Package fieldpath answers the downward API: the values of a pod's metadata
// fields (fieldRef) and of a container's requests and limits
// (resourceFieldRef), for env variables and downwardAPI volume files alike.
// Mirrors k8s.io/kubernetes pkg/fieldpath and pkg/api/v1/resource.
package fieldpath

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FormatMap renders labels or annotations as a downwardAPI file does: one
// key="value" line per entry (the value Go-quoted), sorted by key, without a
// trailing newline. Mirrors fieldpath.FormatMap.
func FormatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%v=%q\n", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ExtractFieldPathAsString returns the value of a metadata field path of
// pod: metadata.name, metadata.namespace, metadata.uid, metadata.labels and
// metadata.annotations (whole, as FormatMap), or one entry as
// metadata.labels['key'] / metadata.annotations['key'] ("" when absent).
// Other paths are an error "unsupported fieldPath: <path>". Mirrors
// fieldpath.ExtractFieldPathAsString.
func ExtractFieldPathAsString(pod *v1.Pod, fieldPath string) (string, error) {
	if path, key, ok := splitSubscript(fieldPath); ok {
		switch path {
		case "metadata.annotations":
			return pod.Annotations[key], nil
		case "metadata.labels":
			return pod.Labels[key], nil
		}
		return "", fmt.Errorf("unsupported fieldPath with subscript: %v", fieldPath)
	}
	switch fieldPath {
	case "metadata.annotations":
		return FormatMap(pod.Annotations), nil
	case "metadata.labels":
		return FormatMap(pod.Labels), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", fieldPath)
}

// splitSubscript splits "path['key']" into path and key.
func splitSubscript(fieldPath string) (path, key string, ok bool) {
	open := strings.Index(fieldPath, "['")
	if open < 0 || !strings.HasSuffix(fieldPath, "']") || open+2 > len(fieldPath)-2 {
		return "", "", false
	}
	return fieldPath[:open], fieldPath[open+2 : len(fieldPath)-2], true
}

// ExtractResourceValueByContainerName returns the resourceFieldRef value for
// the container named containerName in pod (init containers included), as
// ExtractContainerResourceValue; an unknown name is an error.
func ExtractResourceValueByContainerName(fs *v1.ResourceFieldSelector, pod *v1.Pod, containerName string) (string, error) {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == containerName {
				return ExtractContainerResourceValue(fs, &list[i])
			}
		}
	}
	return "", fmt.Errorf("container %s not found in pod %s/%s", containerName, pod.Namespace, pod.Name)
}

// ExtractContainerResourceValue returns fs.resource (limits.cpu,
// limits.memory, limits.ephemeral-storage, requests.cpu, requests.memory,
// requests.ephemeral-storage) of container in units of fs.divisor (default
// 1), rounded up: limits.cpu of 250m with divisor 1 is "1", with divisor 1m
// "250". Mirrors resource.ExtractContainerResourceValue (without hugepages).
func ExtractContainerResourceValue(fs *v1.ResourceFieldSelector, container *v1.Container) (string, error) {
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var q *resource.Quantity
	isCPU := false
	switch fs.Resource {
	case "limits.cpu":
		q, isCPU = container.Resources.Limits.Cpu(), true
	case "requests.cpu":
		q, isCPU = container.Resources.Requests.Cpu(), true
	case "limits.memory":
		q = container.Resources.Limits.Memory()
	case "requests.memory":
		q = container.Resources.Requests.Memory()
	case "limits.ephemeral-storage":
		q = container.Resources.Limits.StorageEphemeral()
	case "requests.ephemeral-storage":
		q = container.Resources.Requests.StorageEphemeral()
	default:
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	if isCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

// DefaultPodLimits returns a copy of pod whose containers' missing cpu,
// memory and ephemeral-storage limits are the node's allocatable, as the
// downward API reports them. Mirrors kubelet's
// defaultPodLimitsForDownwardAPI.
func DefaultPodLimits(pod *v1.Pod, allocatable v1.ResourceList) *v1.Pod {
	out := pod.DeepCopy()
	for _, list := range [][]v1.Container{out.Spec.Containers, out.Spec.InitContainers} {
		for i := range list {
			c := &list[i]
			for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
				if _, ok := c.Resources.Limits[name]; ok {
					continue
				}
				a, ok := allocatable[name]
				if !ok {
					continue
				}
				if c.Resources.Limits == nil {
					c.Resources.Limits = v1.ResourceList{}
				}
				c.Resources.Limits[name] = a.DeepCopy()
			}
		}
	}
	return out
}
