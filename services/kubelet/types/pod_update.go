// Package types holds the kubelet's names for where a pod came from: the
// config annotations that mark static pods (from a manifest file) and their
// mirror pods (their copies in the API server). Mirrors kubelet's
// pkg/kubelet/types.
package types

import v1 "k8s.io/api/core/v1"

// The annotations the kubelet sets on the pods it reads from its sources.
const (
	// ConfigSourceAnnotationKey names a pod's source: FileSource or
	// ApiserverSource.
	ConfigSourceAnnotationKey = "kubernetes.io/config.source"
	// ConfigMirrorAnnotationKey marks a mirror pod; its value is the static
	// pod's ConfigHashAnnotationKey.
	ConfigMirrorAnnotationKey = v1.MirrorPodAnnotationKey
	// ConfigFirstSeenAnnotationKey is when the kubelet first saw the pod
	// (RFC 3339 with nanoseconds).
	ConfigFirstSeenAnnotationKey = "kubernetes.io/config.seen"
	// ConfigHashAnnotationKey is a static pod's hash (also its UID).
	ConfigHashAnnotationKey = "kubernetes.io/config.hash"
)

// The pod sources.
const (
	// FileSource is the static pod manifest directory (--pod-manifest-path).
	FileSource = "file"
	// ApiserverSource is the API server.
	ApiserverSource = "api"
)

// GetPodSource returns the pod's source annotation, "" when unset (a pod
// read from the API server carries none).
func GetPodSource(pod *v1.Pod) string {
	return pod.Annotations[ConfigSourceAnnotationKey]
}

// IsStaticPod reports whether pod came from a source other than the API
// server. Mirrors kubetypes.IsStaticPod.
func IsStaticPod(pod *v1.Pod) bool {
	source := GetPodSource(pod)
	return source != "" && source != ApiserverSource
}

// IsMirrorPod reports whether pod is the API server's copy of a static pod.
// Mirrors kubetypes.IsMirrorPod.
func IsMirrorPod(pod *v1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotationKey]
	return ok
}

// IsMirrorPodOf reports whether mirrorPod is the current mirror of the static
// pod: same name and namespace, and the static pod's hash. Mirrors
// kubepod.IsMirrorPodOf.
func IsMirrorPodOf(mirrorPod, pod *v1.Pod) bool {
	if pod.Name != mirrorPod.Name || pod.Namespace != mirrorPod.Namespace {
		return false
	}
	hash, ok := mirrorPod.Annotations[ConfigMirrorAnnotationKey]
	return ok && hash == pod.Annotations[ConfigHashAnnotationKey]
}
