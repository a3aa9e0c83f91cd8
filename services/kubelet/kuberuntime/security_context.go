package kuberuntime

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// effectiveSecurityContext is c's security context with what it leaves unset
// taken from the pod's (user, group, runAsNonRoot, SELinux, seccomp and AppArmor
// settings); never nil. Mirrors securitycontext.DetermineEffectiveSecurityContext.
func effectiveSecurityContext(pod *v1.Pod, c *v1.Container) *v1.SecurityContext {
	sc := &v1.SecurityContext{}
	if c.SecurityContext != nil {
		sc = c.SecurityContext.DeepCopy()
	}
	ps := pod.Spec.SecurityContext
	if ps == nil {
		return sc
	}
	if sc.SELinuxOptions == nil && ps.SELinuxOptions != nil {
		sc.SELinuxOptions = ps.SELinuxOptions.DeepCopy()
	}
	if sc.WindowsOptions == nil && ps.WindowsOptions != nil {
		sc.WindowsOptions = ps.WindowsOptions.DeepCopy()
	}
	if sc.RunAsUser == nil {
		sc.RunAsUser = ps.RunAsUser
	}
	if sc.RunAsGroup == nil {
		sc.RunAsGroup = ps.RunAsGroup
	}
	if sc.RunAsNonRoot == nil {
		sc.RunAsNonRoot = ps.RunAsNonRoot
	}
	if sc.SeccompProfile == nil {
		sc.SeccompProfile = ps.SeccompProfile
	}
	if sc.AppArmorProfile == nil {
		sc.AppArmorProfile = ps.AppArmorProfile
	}
	return sc
}

// containerSecurityContext is the CRI security context of c: capabilities,
// privileged, user and group (the pod's when c sets none), supplemental groups
// (the pod's fsGroup, then its supplementalGroups), read-only root filesystem,
// no_new_privs (allowPrivilegeEscalation: false), SELinux options and the seccomp
// and AppArmor profiles asked for, and the pod's namespaces. Mirrors kuberuntime's
// determineEffectiveSecurityContext (security_context.go) with the kubelet's
// seccompDefault off (an unset seccomp profile is Unconfined), except that masked
// and read-only paths are left to the runtime: containerd's defaults are kube's
// list (/proc/kcore, /proc/sys read-only, ...); the process runtime shares the host's
// /proc as a hostPID pod does.
func containerSecurityContext(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerSecurityContext {
	sc := effectiveSecurityContext(pod, c)
	out := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: namespacesForPod(pod),
		Privileged:       sc.Privileged != nil && *sc.Privileged,
		ReadonlyRootfs:   sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		NoNewPrivs:       sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		Seccomp:          seccompProfile(sc.SeccompProfile),
		Apparmor:         appArmorProfile(sc.AppArmorProfile),
	}
	if caps := sc.Capabilities; caps != nil {
		out.Capabilities = &runtimeapi.Capability{}
		for _, a := range caps.Add {
			out.Capabilities.AddCapabilities = append(out.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range caps.Drop {
			out.Capabilities.DropCapabilities = append(out.Capabilities.DropCapabilities, string(d))
		}
	}
	if sc.RunAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
	}
	if sc.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
	}
	if o := sc.SELinuxOptions; o != nil {
		out.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	out.SupplementalGroups = supplementalGroups(pod.Spec.SecurityContext)
	if ps := pod.Spec.SecurityContext; ps != nil && ps.SupplementalGroupsPolicy != nil && *ps.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict {
		out.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
	}
	return out
}

// sandboxSecurityContext is the pod sandbox's CRI security context: the pod's
// namespaces, user, group, supplemental groups and SELinux options, privileged
// when any container is, and the RuntimeDefault seccomp profile (the sandbox runs
// only the pause process). Mirrors kuberuntime's generatePodSandboxLinuxConfig.
func sandboxSecurityContext(pod *v1.Pod) *runtimeapi.LinuxSandboxSecurityContext {
	out := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: namespacesForPod(pod),
		Privileged:       hasPrivilegedContainer(pod),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	ps := pod.Spec.SecurityContext
	if ps == nil {
		return out
	}
	if ps.RunAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *ps.RunAsUser}
	}
	if ps.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *ps.RunAsGroup}
	}
	out.SupplementalGroups = supplementalGroups(ps)
	if o := ps.SELinuxOptions; o != nil {
		out.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	return out
}

// sandboxSysctls are the pod's sysctls (spec.securityContext.sysctls), name to
// value, for the sandbox's namespaces; nil without any.
func sandboxSysctls(pod *v1.Pod) map[string]string {
	if pod.Spec.SecurityContext == nil || len(pod.Spec.SecurityContext.Sysctls) == 0 {
		return nil
	}
	out := make(map[string]string, len(pod.Spec.SecurityContext.Sysctls))
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		out[s.Name] = s.Value
	}
	return out
}

// supplementalGroups are the pod's fsGroup, then its supplementalGroups.
func supplementalGroups(ps *v1.PodSecurityContext) []int64 {
	if ps == nil {
		return nil
	}
	var groups []int64
	if ps.FSGroup != nil {
		groups = append(groups, *ps.FSGroup)
	}
	return append(groups, ps.SupplementalGroups...)
}

func hasPrivilegedContainer(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if isPrivileged(&list[i]) {
				return true
			}
		}
	}
	return false
}

// seccompProfile is the CRI form of p; nil (no profile asked for) is Unconfined.
func seccompProfile(p *v1.SeccompProfile) *runtimeapi.SecurityProfile {
	if p == nil {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	}
	return securityProfile(p.Type == v1.SeccompProfileTypeRuntimeDefault, p.Type == v1.SeccompProfileTypeLocalhost, p.LocalhostProfile)
}

// appArmorProfile is the CRI form of p; nil when none is asked for (the runtime's
// default then applies, as kube leaves it).
func appArmorProfile(p *v1.AppArmorProfile) *runtimeapi.SecurityProfile {
	if p == nil {
		return nil
	}
	return securityProfile(p.Type == v1.AppArmorProfileTypeRuntimeDefault, p.Type == v1.AppArmorProfileTypeLocalhost, p.LocalhostProfile)
}

// securityProfile is a seccomp or AppArmor profile in CRI's terms: the runtime's
// default, a profile on the node (localhostRef), or Unconfined.
func securityProfile(runtimeDefault, localhost bool, localhostRef *string) *runtimeapi.SecurityProfile {
	switch {
	case runtimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case localhost:
		ref := ""
		if localhostRef != nil {
			ref = *localhostRef
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
}

// verifyRunAsNonRoot refuses to start c when its effective runAsNonRoot is true
// and it would run as root: runAsUser 0, or no runAsUser and an image whose user
// is root (uid 0, or none) or a name that cannot be checked. imageUID and
// imageUser are the image's user (ImageStatus uid or username). The messages are
// kube's. Mirrors kuberuntime's verifyRunAsNonRoot.
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, imageUID *int64, imageUser string) error {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	ref := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", ref, c.Name)
		}
		return nil
	}
	switch {
	case imageUID != nil && *imageUID == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", ref, c.Name)
	case imageUID == nil && imageUser != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", imageUser, ref, c.Name)
	}
	return nil
}

// imageUser is the user image runs as, from the runtime's ImageStatus: its uid,
// else its user name; uid 0 when the image names none (root, as kube counts it).
// Mirrors kuberuntime's getImageUser.
func (m *Manager) imageUser(ctx context.Context, image string) (*int64, string, error) {
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	resp, err := m.imageService.ImageStatus(cctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	if err != nil {
		return nil, "", fmt.Errorf("CRI ImageStatus %s: %w", image, err)
	}
	if s := resp.GetImage(); s != nil {
		if s.GetUid() != nil {
			uid := s.GetUid().GetValue()
			return &uid, "", nil
		}
		if s.GetUsername() != "" {
			return nil, s.GetUsername(), nil
		}
	}
	return new(int64), "", nil
}
