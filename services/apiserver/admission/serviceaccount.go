package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry/rest"
)

// Names the ServiceAccount plugin uses (kube's plugin/pkg/admission/serviceaccount and
// pkg/serviceaccount).
const (
	// DefaultServiceAccountName is the service account of a pod that names none.
	DefaultServiceAccountName = "default"
	// ServiceAccountVolumeName prefixes the projected token volume's name:
	// kube-api-access-<5 random characters>.
	ServiceAccountVolumeName = "kube-api-access"
	// DefaultAPITokenMountPath is where every container finds the token, CA and namespace.
	DefaultAPITokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// RootCAConfigMapName is the ConfigMap published in every namespace with the
	// cluster CA under ca.crt.
	RootCAConfigMapName = "kube-root-ca.crt"
	// WarnOnlyBoundTokenExpirationSeconds is the lifetime of the projected token: an
	// odd 3607 s, which kube-apiserver recognises as an admission-injected token.
	WarnOnlyBoundTokenExpirationSeconds = 3607
)

// ServiceAccount gives every pod an identity, as kube's ServiceAccount admission plugin
// does on pod create: it sets spec.serviceAccountName to "default" when empty, refuses a
// pod whose service account does not exist (403), and, unless automountServiceAccountToken
// is false on the pod (or, if the pod leaves it unset, on the service account), adds the
// projected volume kube-api-access-<random> (a bound token, the cluster CA from the
// kube-root-ca.crt ConfigMap and the namespace) mounted read-only at
// /var/run/secrets/kubernetes.io/serviceaccount in every container that has nothing
// mounted there. Mirror pods are only checked: they may not reference service accounts
// or mount tokens. Mirrors plugin/pkg/admission/serviceaccount.
type ServiceAccount struct {
	// ServiceAccounts reads service accounts (the registry).
	ServiceAccounts rest.Getter
	// RetryInterval is the wait between reads of a "default" service account that does
	// not exist yet (the controller creates it moments after its namespace); 0 means
	// 100-200 ms, as kube waits.
	RetryInterval time.Duration
}

// defaultServiceAccountAttempts is how often a missing "default" service account is
// read before the pod is refused (kube's getServiceAccount).
const defaultServiceAccountAttempts = 10

// Admit implements Interface.
func (s ServiceAccount) Admit(ctx context.Context, a Attributes) error {
	if a.Resource.Group != "" || a.Resource.Resource != "pods" || a.Subresource != "" || a.Operation != Create {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return nil
	}
	forbid := func(err error) error { return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name, err) }
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		return validateMirrorPod(pod, forbid)
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = DefaultServiceAccountName
	}
	// The deprecated alias follows the name, as kube's defaulting keeps them equal.
	pod.Spec.DeprecatedServiceAccount = pod.Spec.ServiceAccountName
	sa, err := s.getServiceAccount(ctx, a.Namespace, pod.Spec.ServiceAccountName)
	if err != nil {
		return forbid(fmt.Errorf("error looking up service account %s/%s: %w", a.Namespace, pod.Spec.ServiceAccountName, err))
	}
	if shouldAutomount(sa, pod) {
		mountServiceAccountToken(pod)
	}
	return nil
}

// getServiceAccount reads namespace/name, trying a missing "default" up to ten times
// since it is created in answer to its namespace. The NotFound error names the
// resource "serviceaccount", as kube's message does.
func (s ServiceAccount) getServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	attempts := 1
	if name == DefaultServiceAccountName {
		attempts = defaultServiceAccountAttempts
	}
	interval := s.RetryInterval
	if interval == 0 {
		interval = time.Duration(100+rand.IntN(100)) * time.Millisecond
	}
	for i := 0; i < attempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(interval):
			}
		}
		// The watch cache first, as kube reads its informer's lister; etcd when the
		// cache does not have it (it may lag a create by a moment).
		obj, err := rest.GetCachedFirst(ctx, s.ServiceAccounts, namespace, name, nil)
		if err == nil {
			return obj.(*corev1.ServiceAccount), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("serviceaccount"), name)
}

// shouldAutomount: the pod's automountServiceAccountToken wins, then the service
// account's; unset means mount.
func shouldAutomount(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	if sa.AutomountServiceAccountToken != nil {
		return *sa.AutomountServiceAccountToken
	}
	return true
}

// mountServiceAccountToken adds the token volume (unless one is there already) and a
// read-only mount of it to every container, init and ephemeral ones included, that has
// nothing mounted at DefaultAPITokenMountPath. Mirrors Plugin.mountServiceAccountToken.
func mountServiceAccountToken(pod *corev1.Pod) {
	volumeName := ""
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, ServiceAccountVolumeName+"-") {
			volumeName = v.Name
			break
		}
	}
	hasVolume := volumeName != ""
	if !hasVolume {
		volumeName = names.SimpleNameGenerator.GenerateName(ServiceAccountVolumeName + "-")
	}
	mount := corev1.VolumeMount{Name: volumeName, ReadOnly: true, MountPath: DefaultAPITokenMountPath}
	needsVolume := false
	addMount := func(mounts []corev1.VolumeMount) []corev1.VolumeMount {
		for _, m := range mounts {
			if m.MountPath == DefaultAPITokenMountPath {
				return mounts
			}
		}
		needsVolume = true
		return append(mounts, mount)
	}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].VolumeMounts = addMount(pod.Spec.InitContainers[i].VolumeMounts)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].VolumeMounts = addMount(pod.Spec.Containers[i].VolumeMounts)
	}
	for i := range pod.Spec.EphemeralContainers {
		pod.Spec.EphemeralContainers[i].VolumeMounts = addMount(pod.Spec.EphemeralContainers[i].VolumeMounts)
	}
	if !hasVolume && needsVolume {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name:         volumeName,
			VolumeSource: corev1.VolumeSource{Projected: TokenVolumeSource()},
		})
	}
}

// TokenVolumeSource is the projected volume that stands in for the legacy token
// Secret: a bound token (path token, 3607 s), ca.crt from the kube-root-ca.crt
// ConfigMap and the pod's namespace (path namespace), files mode 0644. Mirrors
// serviceaccount.TokenVolumeSource.
func TokenVolumeSource() *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](corev1.ProjectedVolumeSourceDefaultMode),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Path: "token", ExpirationSeconds: ptr.To[int64](WarnOnlyBoundTokenExpirationSeconds),
			}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: RootCAConfigMapName},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{
				Items: []corev1.DownwardAPIVolumeFile{{
					Path:     "namespace",
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
				}},
			}},
		},
	}
}

// validateMirrorPod refuses a mirror pod that names a service account or projects a
// token: a static pod's spec comes from a node's file, not from the API, so it may not
// borrow an API identity. Mirrors the mirror-pod branch of the plugin's Validate.
func validateMirrorPod(pod *corev1.Pod, forbid func(error) error) error {
	if pod.Spec.ServiceAccountName != "" {
		return forbid(fmt.Errorf("a mirror pod may not reference service accounts"))
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return forbid(fmt.Errorf("a mirror pod may not use ServiceAccountToken volume projections"))
			}
		}
	}
	return nil
}
