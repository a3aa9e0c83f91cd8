package container

import v1 "k8s.io/api/core/v1"

// RunContainerOptions is what the kubelet resolves for one container before
// the runtime creates it: its environment and its mounts. Mirrors
// kubecontainer.RunContainerOptions.
type RunContainerOptions struct {
	// Envs is the container's environment, in declaration order (envFrom
	// sources first, then env); names are unique.
	Envs []EnvVar
	// Mounts are the container's volume mounts, in volumeMounts order.
	Mounts []Mount
	// PodContainerDir is the kubelet's directory for this container of the pod
	// (<root-dir>/pods/<uid>/containers/<name>), where its termination message
	// files go; "" for none.
	PodContainerDir string
}

// EnvVar is one resolved environment variable.
type EnvVar struct {
	Name  string
	Value string
}

// Mount is one volume mount with its host side resolved.
type Mount struct {
	// Name is the volume's name.
	Name string
	// ContainerPath is where the container sees it (volumeMount.mountPath).
	ContainerPath string
	// HostPath is the volume's directory or file on the host, with the
	// subPath applied.
	HostPath string
	// ReadOnly: mounted read-only (asked by the volumeMount, or required by
	// the volume).
	ReadOnly bool
	// Propagation is the volumeMount's mountPropagation (nil: None).
	Propagation *v1.MountPropagationMode
}
