// Package nodestatus computes the kubelet's Node object status: each Setter
// fills one part (addresses, capacity, versions, one condition) of a Node in
// place, and the kubelet runs them in order before every status update.
// Mirrors kubelet's pkg/kubelet/nodestatus.
package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Setter modifies node's status in place; an error is logged and the other
// setters still run.
type Setter func(ctx context.Context, node *v1.Node) error

// NodeAddress sets status.addresses to InternalIP nodeIP and Hostname
// hostname. Mirrors nodestatus.NodeAddress.
func NodeAddress(nodeIP, hostname string) Setter {
	return func(_ context.Context, node *v1.Node) error {
		node.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: nodeIP},
			{Type: v1.NodeHostName, Address: hostname},
		}
		return nil
	}
}

// MachineInfo sets the capacity of the resources the kubelet knows (capacity's) and
// allocatable to the whole capacity (equal: skiff reserves nothing for the system), and
// the machine's identity in nodeInfo. Other capacity entries, extended resources a
// cluster administrator advertised by patching the node's status, are kept and made
// allocatable; an extended resource gone from capacity leaves allocatable too. Mirrors
// nodestatus.MachineInfo.
func MachineInfo(machine Machine, capacity v1.ResourceList) Setter {
	return func(_ context.Context, node *v1.Node) error {
		if node.Status.Capacity == nil {
			node.Status.Capacity = v1.ResourceList{}
		}
		for name, q := range capacity {
			node.Status.Capacity[name] = q.DeepCopy()
		}
		if node.Status.Allocatable == nil {
			node.Status.Allocatable = v1.ResourceList{}
		}
		for name := range node.Status.Allocatable {
			if _, ok := node.Status.Capacity[name]; !ok && corevalidation.IsExtendedResourceName(name) {
				delete(node.Status.Allocatable, name)
			}
		}
		for name, q := range node.Status.Capacity {
			node.Status.Allocatable[name] = q.DeepCopy()
		}
		node.Status.NodeInfo.MachineID = machine.MachineID
		node.Status.NodeInfo.SystemUUID = machine.SystemUUID
		node.Status.NodeInfo.BootID = machine.BootID
		return nil
	}
}

// VersionInfo sets the kernel, OS image, kubelet version and the container
// runtime version ("<runtimeName>://<version>" from runtimeVersion, which is
// asked every time so that a runtime started after the kubelet shows up).
// Mirrors nodestatus.VersionInfo.
func VersionInfo(machine Machine, kubeletVersion string, runtimeVersion func(ctx context.Context) (string, error)) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		node.Status.NodeInfo.KernelVersion = machine.KernelVersion
		node.Status.NodeInfo.OSImage = machine.OSImage
		node.Status.NodeInfo.KubeletVersion = kubeletVersion
		v, err := runtimeVersion(ctx)
		if err != nil {
			return fmt.Errorf("container runtime version: %w", err)
		}
		node.Status.NodeInfo.ContainerRuntimeVersion = v
		return nil
	}
}

// DaemonEndpoints sets the kubelet's port (status.daemonEndpoints
// .kubeletEndpoint.port). Mirrors nodestatus.DaemonEndpoints.
func DaemonEndpoints(port int32) Setter {
	return func(_ context.Context, node *v1.Node) error {
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = port
		return nil
	}
}

// GoRuntime sets nodeInfo.operatingSystem and architecture. Mirrors
// nodestatus.GoRuntime.
func GoRuntime() Setter {
	return func(_ context.Context, node *v1.Node) error {
		node.Status.NodeInfo.OperatingSystem = runtime.GOOS
		node.Status.NodeInfo.Architecture = runtime.GOARCH
		return nil
	}
}

// ReadyCondition sets the Ready condition: True (KubeletReady, "kubelet is
// posting ready status") when runtimeErrors returns nil and the capacity is
// known, else False (KubeletNotReady) with the errors as message. It keeps
// the transition time while the status holds and stamps the heartbeat. Run
// it last, after the capacity setter. Mirrors nodestatus.ReadyCondition.
func ReadyCondition(now func() time.Time, runtimeErrors func() error) Setter {
	return func(_ context.Context, node *v1.Node) error {
		currentTime := metav1.NewTime(now())
		cond := v1.NodeCondition{
			Type:              v1.NodeReady,
			Status:            v1.ConditionTrue,
			Reason:            "KubeletReady",
			Message:           "kubelet is posting ready status",
			LastHeartbeatTime: currentTime,
		}
		errs := []error{runtimeErrors()}
		var missing []string
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods} {
			if _, ok := node.Status.Capacity[r]; !ok {
				missing = append(missing, string(r))
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
		}
		if err := errors.Join(errs...); err != nil {
			cond.Status = v1.ConditionFalse
			cond.Reason = "KubeletNotReady"
			cond.Message = strings.ReplaceAll(err.Error(), "\n", ", ")
		}
		setCondition(node, cond, currentTime)
		return nil
	}
}

// MemoryPressureCondition sets MemoryPressure from pressure (the eviction
// manager's IsUnderMemoryPressure): True "KubeletHasInsufficientMemory" or
// False "KubeletHasSufficientMemory". Mirrors nodestatus.MemoryPressureCondition.
func MemoryPressureCondition(now func() time.Time, pressure func() bool) Setter {
	return pressureCondition(now, pressure, v1.NodeMemoryPressure,
		"KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
		"KubeletHasSufficientMemory", "kubelet has sufficient memory available")
}

// DiskPressureCondition sets DiskPressure from pressure (nodefs or imagefs
// below its threshold). Mirrors nodestatus.DiskPressureCondition.
func DiskPressureCondition(now func() time.Time, pressure func() bool) Setter {
	return pressureCondition(now, pressure, v1.NodeDiskPressure,
		"KubeletHasDiskPressure", "kubelet has disk pressure",
		"KubeletHasNoDiskPressure", "kubelet has no disk pressure")
}

// PIDPressureCondition sets PIDPressure from pressure (pid.available below
// its threshold). Mirrors nodestatus.PIDPressureCondition.
func PIDPressureCondition(now func() time.Time, pressure func() bool) Setter {
	return pressureCondition(now, pressure, v1.NodePIDPressure,
		"KubeletHasInsufficientPID", "kubelet has insufficient PID available",
		"KubeletHasSufficientPID", "kubelet has sufficient PID available")
}

func pressureCondition(now func() time.Time, pressure func() bool, t v1.NodeConditionType, trueReason, trueMessage, falseReason, falseMessage string) Setter {
	return func(_ context.Context, node *v1.Node) error {
		currentTime := metav1.NewTime(now())
		cond := v1.NodeCondition{Type: t, Status: v1.ConditionFalse, Reason: falseReason, Message: falseMessage, LastHeartbeatTime: currentTime}
		if pressure() {
			cond.Status, cond.Reason, cond.Message = v1.ConditionTrue, trueReason, trueMessage
		}
		setCondition(node, cond, currentTime)
		return nil
	}
}

// setCondition replaces or appends cond, keeping the old transition time if
// the status did not change.
func setCondition(node *v1.Node, cond v1.NodeCondition, now metav1.Time) {
	i := slices.IndexFunc(node.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == cond.Type })
	if i < 0 {
		cond.LastTransitionTime = now
		node.Status.Conditions = append(node.Status.Conditions, cond)
		return
	}
	cond.LastTransitionTime = now
	if old := node.Status.Conditions[i]; old.Status == cond.Status && !old.LastTransitionTime.IsZero() {
		cond.LastTransitionTime = old.LastTransitionTime
	}
	node.Status.Conditions[i] = cond
}

// DefaultNodeIP returns the first non-loopback IPv4 address of the machine,
// or 127.0.0.1 when there is none.
func DefaultNodeIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			ipnet, ok := a.(*net.IPNet)
			if !ok || ipnet.IP.IsLoopback() || ipnet.IP.IsLinkLocalUnicast() {
				continue
			}
			if ip4 := ipnet.IP.To4(); ip4 != nil {
				return ip4.String()
			}
		}
	}
	return "127.0.0.1"
}
