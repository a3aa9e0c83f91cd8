package framework

import (
	"maps"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Defaults kube-scheduler assumes for a container that requests no cpu or no
// memory, when scoring only (so that request-less pods do not all pile onto
// one node). Mirrors pkg/scheduler/util DefaultMilliCPURequest and
// DefaultMemoryRequest.
const (
	DefaultMilliCPURequest int64 = 100               // 0.1 core, in millicores
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB, in bytes
)

// Resource is an amount of the resources the scheduler accounts for: cpu in
// millicores, memory in bytes, a pod count (AllowedPodNumber, only meaningful for
// allocatable), and scalar resources (extended resources such as
// "example.com/gpu", hugepages) in their units. Mirrors kube-scheduler's
// framework.Resource, without ephemeral storage.
type Resource struct {
	MilliCPU         int64
	Memory           int64
	AllowedPodNumber int64
	// ScalarResources is nil when there are none (the common case costs no map).
	ScalarResources map[v1.ResourceName]int64
}

// IsScalarResourceName reports whether name is accounted as a scalar resource: an
// extended resource, hugepages, or another kubernetes.io-prefixed resource. Mirrors
// kube-scheduler's util.IsScalarResourceName.
func IsScalarResourceName(name v1.ResourceName) bool {
	return corevalidation.IsExtendedResourceName(name) || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) ||
		strings.Contains(string(name), v1.ResourceDefaultNamespacePrefix)
}

// AddScalar adds quantity of the scalar resource name.
func (r *Resource) AddScalar(name v1.ResourceName, quantity int64) {
	if r.ScalarResources == nil {
		r.ScalarResources = map[v1.ResourceName]int64{}
	}
	r.ScalarResources[name] += quantity
}

// Clone returns a copy of r that shares no map with it.
func (r Resource) Clone() Resource {
	if r.ScalarResources != nil {
		r.ScalarResources = maps.Clone(r.ScalarResources)
	}
	return r
}

// NewResource reads cpu, memory and pods from a ResourceList (e.g. a node's
// allocatable).
func NewResource(rl v1.ResourceList) Resource {
	var r Resource
	r.Add(rl)
	return r
}

// Add adds the cpu, memory and pods of rl to r.
func (r *Resource) Add(rl v1.ResourceList) {
	for name, q := range rl {
		switch name {
		case v1.ResourceCPU:
			r.MilliCPU += q.MilliValue()
		case v1.ResourceMemory:
			r.Memory += q.Value()
		case v1.ResourcePods:
			r.AllowedPodNumber += q.Value()
		default:
			if IsScalarResourceName(name) {
				r.AddScalar(name, q.Value())
			}
		}
	}
}

// AddResource adds o to r.
func (r *Resource) AddResource(o Resource) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.AllowedPodNumber += o.AllowedPodNumber
	for name, q := range o.ScalarResources {
		r.AddScalar(name, q)
	}
}

// SubResource subtracts o from r.
func (r *Resource) SubResource(o Resource) {
	r.MilliCPU -= o.MilliCPU
	r.Memory -= o.Memory
	r.AllowedPodNumber -= o.AllowedPodNumber
	for name, q := range o.ScalarResources {
		r.AddScalar(name, -q)
	}
}

// SetMaxResource raises each of r's amounts to o's where o's is larger.
func (r *Resource) SetMaxResource(o Resource) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.Memory = max(r.Memory, o.Memory)
	r.AllowedPodNumber = max(r.AllowedPodNumber, o.AllowedPodNumber)
	for name, q := range o.ScalarResources {
		if q > r.ScalarResources[name] {
			r.AddScalar(name, q-r.ScalarResources[name])
		}
	}
}

// IsZero reports whether r asks for no cpu, no memory and no scalar resource.
func (r Resource) IsZero() bool {
	if r.MilliCPU != 0 || r.Memory != 0 {
		return false
	}
	for _, q := range r.ScalarResources {
		if q != 0 {
			return false
		}
	}
	return true
}

// PodRequests returns what pod asks the node for, computed as the kubelet
// admits it: regular containers (and restartable "sidecar" init containers)
// run together, so they are summed; ordinary init containers run one at a
// time before them, so only the largest counts (plus the sidecars started
// before it); the pod needs the larger of the two, plus spec.overhead.
// With nonZero, a container that requests no cpu or memory counts as
// DefaultMilliCPURequest / DefaultMemoryRequest, as kube-scheduler does for
// scoring. Mirrors k8s.io/component-helpers/resource.PodRequests.
func PodRequests(pod *v1.Pod, nonZero bool) Resource {
	var reqs Resource
	for i := range pod.Spec.Containers {
		reqs.AddResource(containerRequests(&pod.Spec.Containers[i], nonZero))
	}
	var initReqs, sidecarReqs Resource
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := containerRequests(c, nonZero)
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			// A sidecar keeps running alongside everything started after it.
			reqs.AddResource(r)
			sidecarReqs.AddResource(r)
			r = sidecarReqs
		} else {
			r.AddResource(sidecarReqs)
		}
		initReqs.SetMaxResource(r)
	}
	reqs.SetMaxResource(initReqs)
	reqs.Add(pod.Spec.Overhead)
	return reqs
}

// containerRequests reads a container's cpu, memory and scalar requests. A resource
// with a limit but no request counts at its limit: that is what the
// apiserver's defaulting (SetDefaults_Pod) stores, and applying it here keeps
// the accounting right even if a pod reached us undefaulted.
func containerRequests(c *v1.Container, nonZero bool) Resource {
	get := func(name v1.ResourceName) (resource.Quantity, bool) {
		if q, ok := c.Resources.Requests[name]; ok {
			return q, true
		}
		q, ok := c.Resources.Limits[name]
		return q, ok
	}
	var r Resource
	if q, ok := get(v1.ResourceCPU); ok {
		r.MilliCPU = q.MilliValue()
	} else if nonZero {
		r.MilliCPU = DefaultMilliCPURequest
	}
	if q, ok := get(v1.ResourceMemory); ok {
		r.Memory = q.Value()
	} else if nonZero {
		r.Memory = DefaultMemoryRequest
	}
	for name, q := range c.Resources.Requests {
		if IsScalarResourceName(name) {
			r.AddScalar(name, q.Value())
		}
	}
	return r
}
