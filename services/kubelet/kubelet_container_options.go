package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"skiff.dev/services/kubelet/cm"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/envvars"
	"skiff.dev/services/kubelet/expansion"
	"skiff.dev/services/kubelet/fieldpath"
	kubetypes "skiff.dev/services/kubelet/types"
	"skiff.dev/services/kubelet/volumemanager"
)

// GenerateRunContainerOptions resolves container c's environment
// (makeEnvironmentVariables) and mounts (makeMounts, from the volumes the
// volume manager set up, and the kubelet-managed /etc/hosts of
// makeHostsMount). Its errors become CreateContainerConfigError.
// Implements kuberuntime.RuntimeHelper; mirrors
// Kubelet.GenerateRunContainerOptions.
func (kl *Kubelet) GenerateRunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*container.RunContainerOptions, error) {
	envs, err := kl.makeEnvironmentVariables(ctx, pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	var volumes map[string]volumemanager.MountedVolume
	if kl.volumeManager != nil {
		volumes = kl.volumeManager.GetMountedVolumesForPod(pod.UID)
	}
	mounts, err := makeMounts(c, volumes, envs)
	if err != nil {
		return nil, err
	}
	hosts, ok, err := kl.makeHostsMount(pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	if ok {
		mounts = append(mounts, hosts)
	}
	return &container.RunContainerOptions{Envs: envs, Mounts: mounts,
		PodContainerDir: filepath.Join(kl.rootDir, "pods", string(pod.UID), "containers", c.Name)}, nil
}

// GetPodCgroupParent returns the pod's cgroup in kube's QoS hierarchy, named
// by the kubelet's cgroup driver. Implements kuberuntime.RuntimeHelper.
func (kl *Kubelet) GetPodCgroupParent(pod *v1.Pod) string {
	return kl.podCgroupDriver().Name(cm.PodCgroupName(pod))
}

// makeEnvironmentVariables resolves c's environment: first every envFrom
// source (a ConfigMap's or Secret's keys, with the prefix; keys that are no
// valid variable name are skipped with an InvalidEnvironmentVariableNames
// event), then env in order, each entry replacing an earlier one of the
// same name. A value expands $(VAR) from what is defined so far; valueFrom
// reads a fieldRef (metadata, spec.nodeName, spec.serviceAccountName,
// status.hostIP(s), status.podIP(s)), a resourceFieldRef (limits a
// container does not set are the node's allocatable), or a key of a
// ConfigMap or Secret. A missing object or key is an error in kube's words
// (`couldn't find key K in ConfigMap ns/name`, `configmaps "name" not
// found`) unless the reference is optional, which drops the variable.
// Last come the service links (serviceEnvVars) the container does not define; a
// $(VAR) reference may name them. Mirrors Kubelet.makeEnvironmentVariables.
func (kl *Kubelet) makeEnvironmentVariables(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) ([]container.EnvVar, error) {
	var (
		configMaps = map[string]*v1.ConfigMap{}
		secrets    = map[string]*v1.Secret{}
		env        = newOrderedEnv()
	)
	getConfigMap := func(name string) (*v1.ConfigMap, error) {
		if cm, ok := configMaps[name]; ok {
			return cm, nil
		}
		cm, err := kl.GetConfigMap(ctx, pod.Namespace, name)
		if err != nil {
			return nil, err
		}
		configMaps[name] = cm
		return cm, nil
	}
	getSecret := func(name string) (*v1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		s, err := kl.GetSecret(ctx, pod.Namespace, name)
		if err != nil {
			return nil, err
		}
		secrets[name] = s
		return s, nil
	}

	for _, from := range c.EnvFrom {
		var (
			data       map[string]string
			kind, name string
		)
		switch {
		case from.ConfigMapRef != nil:
			kind, name = "configMap", from.ConfigMapRef.Name
			cm, err := getConfigMap(name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, err
			}
			data = cm.Data
		case from.SecretRef != nil:
			kind, name = "secret", from.SecretRef.Name
			s, err := getSecret(name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(from.SecretRef.Optional) {
					continue
				}
				return nil, err
			}
			data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				data[k] = string(v)
			}
		default:
			continue
		}
		var invalid []string
		for _, k := range sortedKeys(data) {
			name := from.Prefix + k
			if len(utilvalidation.IsRelaxedEnvVarName(name)) != 0 {
				invalid = append(invalid, name)
				continue
			}
			env.set(name, data[k])
		}
		if len(invalid) > 0 {
			kl.recorder.Eventf(pod, v1.EventTypeWarning, "InvalidEnvironmentVariableNames",
				"Keys [%s] from the EnvFrom %s %s/%s were skipped since they are considered invalid environment variable names.",
				strings.Join(invalid, ", "), kind, pod.Namespace, name)
		}
	}

	serviceEnv, err := kl.serviceEnvVars(pod)
	if err != nil {
		return nil, err
	}
	mapping := expansion.MappingFuncFor(env.values, serviceEnv)
	var defaultedPod *v1.Pod
	for _, e := range c.Env {
		value := e.Value
		switch {
		case value != "":
			value = expansion.Expand(value, mapping)
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			v, err := kl.podFieldSelectorRuntimeValue(e.ValueFrom.FieldRef, pod, podIPs)
			if err != nil {
				return nil, err
			}
			value = v
		case e.ValueFrom.ResourceFieldRef != nil:
			if defaultedPod == nil {
				defaultedPod = fieldpath.DefaultPodLimits(pod, kl.nodeAllocatable)
			}
			name := e.ValueFrom.ResourceFieldRef.ContainerName
			if name == "" {
				name = c.Name
			}
			v, err := fieldpath.ExtractResourceValueByContainerName(e.ValueFrom.ResourceFieldRef, defaultedPod, name)
			if err != nil {
				return nil, err
			}
			value = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := getConfigMap(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
					continue
				}
				return nil, err
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %v in ConfigMap %v/%v", ref.Key, pod.Namespace, ref.Name)
			}
			value = v
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := getSecret(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
					continue
				}
				return nil, err
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %v in Secret %v/%v", ref.Key, pod.Namespace, ref.Name)
			}
			value = string(v)
		default:
			return nil, fmt.Errorf("env %s: valueFrom of a kind this kubelet does not support", e.Name)
		}
		env.set(e.Name, value)
	}
	// The service links the container does not define itself come last.
	for _, k := range sortedKeys(serviceEnv) {
		if _, defined := env.values[k]; !defined {
			env.set(k, serviceEnv[k])
		}
	}
	return env.list(), nil
}

// masterServices are the default namespace's Services every pod gets variables for,
// whatever its enableServiceLinks (kube's masterServices).
var masterServices = []string{"kubernetes"}

// serviceEnvVars are the service links of pod's environment: the variables of the
// kubernetes Service, and with enableServiceLinks (the default) of every Service in
// the pod's namespace that has a cluster IP. Until the kubelet has read the Services
// once, a pod from the API gets an error rather than an environment without them
// (kube's "services have not yet been read at least once"). Mirrors
// Kubelet.getServiceEnvVarMap.
func (kl *Kubelet) serviceEnvVars(pod *v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	if kl.serviceLister == nil {
		return out, nil
	}
	if !kubetypes.IsStaticPod(pod) && kl.serviceHasSynced != nil && !kl.serviceHasSynced() {
		return nil, fmt.Errorf("services have not yet been read at least once, cannot construct envvars")
	}
	services, err := kl.serviceLister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	byName := map[string]*v1.Service{}
	for _, svc := range services {
		if !envvars.IsServiceIPSet(svc) {
			continue
		}
		switch {
		case svc.Namespace == metav1.NamespaceDefault && slices.Contains(masterServices, svc.Name):
			if _, seen := byName[svc.Name]; !seen {
				byName[svc.Name] = svc
			}
		case svc.Namespace == pod.Namespace && links:
			byName[svc.Name] = svc
		}
	}
	mapped := make([]*v1.Service, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		mapped = append(mapped, byName[name])
	}
	for _, e := range envvars.FromServices(mapped) {
		out[e.Name] = e.Value
	}
	return out, nil
}

// podFieldSelectorRuntimeValue answers an env fieldRef: the fields only the
// kubelet knows (node name, service account, host and pod IPs), else the
// pod's metadata. Mirrors Kubelet.podFieldSelectorRuntimeValue.
func (kl *Kubelet) podFieldSelectorRuntimeValue(fs *v1.ObjectFieldSelector, pod *v1.Pod, podIPs []string) (string, error) {
	switch fs.FieldPath {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return kl.nodeIP, nil
	case "status.podIP":
		if len(podIPs) > 0 {
			return podIPs[0], nil
		}
		return "", nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, fs.FieldPath)
}

// makeMounts resolves c's volumeMounts against the pod's mounted volumes:
// the host path is the volume's, joined with the subPath (or the subPathExpr
// expanded from envs) and resolved through symlinks; a subPath that is
// absolute, has ".." elements or resolves outside the volume is refused. A
// missing subPath is created as a directory. The mount is read-only when the
// volumeMount or the volume says so. Mirrors kubelet_pods.go makeMounts
// (the subPath checked here instead of bind-mounted).
func makeMounts(c *v1.Container, volumes map[string]volumemanager.MountedVolume, envs []container.EnvVar) ([]container.Mount, error) {
	var mounts []container.Mount
	for _, vm := range c.VolumeMounts {
		vol, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		if vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly == v1.RecursiveReadOnlyEnabled {
			return nil, fmt.Errorf("volumeMount %q of container %q: recursiveReadOnly Enabled is not supported by this kubelet", vm.Name, c.Name)
		}
		hostPath := vol.Path
		subPath := vm.SubPath
		if vm.SubPathExpr != "" {
			var err error
			if subPath, err = expandSubPathExpr(vm.SubPathExpr, envs); err != nil {
				return nil, fmt.Errorf("volumeMount %q of container %q: subPathExpr: %w", vm.Name, c.Name, err)
			}
		}
		if subPath != "" {
			var err error
			if hostPath, err = resolveSubPath(vol.Path, subPath); err != nil {
				return nil, fmt.Errorf("volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
		}
		mounts = append(mounts, container.Mount{
			Name:          vm.Name,
			ContainerPath: vm.MountPath,
			HostPath:      hostPath,
			ReadOnly:      vm.ReadOnly || vol.ReadOnly,
			Propagation:   vm.MountPropagation,
		})
	}
	return mounts, nil
}

// expandSubPathExpr expands $(VAR) in a subPathExpr; a variable that is
// undefined or empty is an error. Mirrors
// kubecontainer.ExpandContainerVolumeMounts.
func expandSubPathExpr(expr string, envs []container.EnvVar) (string, error) {
	vars := make(map[string]string, len(envs))
	for _, e := range envs {
		vars[e.Name] = e.Value
	}
	var missing []string
	out := expansion.Expand(expr, func(name string) string {
		v := vars[name]
		if v == "" && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// resolveSubPath returns volumePath/subPath with symlinks resolved, creating
// it as a directory (with the volume's mode) when it does not exist, and
// refuses one that leaves the volume.
func resolveSubPath(volumePath, subPath string) (string, error) {
	if filepath.IsAbs(subPath) {
		return "", fmt.Errorf("subPath %q must not be an absolute path", subPath)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(subPath), "/"), "..") {
		return "", fmt.Errorf("subPath %q must not contain '..'", subPath)
	}
	root, err := filepath.EvalSymlinks(volumePath)
	if err != nil {
		return "", fmt.Errorf("resolve volume path: %w", err)
	}
	path := filepath.Join(volumePath, subPath)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		info, err := os.Stat(root)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(path, info.Mode().Perm()); err != nil {
			return "", fmt.Errorf("failed to create subPath directory %q: %w", subPath, err)
		}
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("resolve subPath %q: %w", subPath, err)
	}
	if resolved != root && !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
		return "", fmt.Errorf("subPath %q resolves to %s, outside the volume", subPath, resolved)
	}
	return resolved, nil
}

// orderedEnv is an environment in declaration order whose later entries
// replace earlier ones of the same name in place.
type orderedEnv struct {
	names  []string
	values map[string]string
}

func newOrderedEnv() *orderedEnv { return &orderedEnv{values: map[string]string{}} }

func (e *orderedEnv) set(name, value string) {
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *orderedEnv) list() []container.EnvVar {
	out := make([]container.EnvVar, len(e.names))
	for i, n := range e.names {
		out[i] = container.EnvVar{Name: n, Value: e.values[n]}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func isTrue(b *bool) bool { return b != nil && *b }
