package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// refuseUnsupported returns why the process runtime cannot honour cfg, or nil.
// It runs containers as host processes, in the runtime's namespaces (except
// a mount namespace for volumes) with the runtime's capabilities, so it
// refuses what would ask otherwise rather than ignore it. (Masked and
// read-only paths are honoured in the container's mount namespace; see
// maskPaths.) Namespace options
// are the exception: every sandbox shares the host's network, PID and IPC
// namespaces, as hostNetwork/hostPID/hostIPC pods do (documented).
func refuseUnsupported(cfg *runtimeapi.ContainerConfig) error {
	var why []string
	sc := cfg.GetLinux().GetSecurityContext()
	if sc.GetPrivileged() {
		why = append(why, "privileged (its processes already run with the runtime's privileges, but not in a privileged container's namespaces)")
	}
	if c := sc.GetCapabilities(); len(c.GetAddCapabilities()) > 0 || len(c.GetDropCapabilities()) > 0 || len(c.GetAddAmbientCapabilities()) > 0 {
		why = append(why, "capabilities (processes keep the runtime's capabilities)")
	}
	if p := sc.GetSeccomp(); p != nil && p.GetProfileType() != runtimeapi.SecurityProfile_Unconfined {
		why = append(why, "seccomp profile "+p.GetProfileType().String())
	}
	if p := sc.GetSeccompProfilePath(); p != "" && p != "unconfined" {
		why = append(why, "seccomp profile "+p)
	}
	if p := sc.GetApparmor(); p != nil && p.GetProfileType() != runtimeapi.SecurityProfile_Unconfined {
		why = append(why, "AppArmor profile "+p.GetProfileType().String())
	}
	if p := sc.GetApparmorProfile(); p != "" && p != "unconfined" {
		why = append(why, "AppArmor profile "+p)
	}
	if o := sc.GetSelinuxOptions(); o.GetUser() != "" || o.GetRole() != "" || o.GetType() != "" || o.GetLevel() != "" {
		why = append(why, "SELinux options")
	}
	if sc.GetRunAsUsername() != "" {
		why = append(why, "runAsUser by name "+strconv.Quote(sc.GetRunAsUsername())+" (give a numeric runAsUser)")
	}
	if sc.GetReadonlyRootfs() {
		why = append(why, "readOnlyRootFilesystem (the container's root filesystem is the host's)")
	}
	if sc.GetSupplementalGroupsPolicy() == runtimeapi.SupplementalGroupsPolicy_Strict {
		// Merge (the default) adds the image's groups for the user: there is no image.
		why = append(why, "supplementalGroupsPolicy Strict")
	}
	if len(cfg.GetDevices()) > 0 || len(cfg.GetCDIDevices()) > 0 {
		why = append(why, "devices")
	}
	if cfg.GetWindows() != nil {
		why = append(why, "Windows settings")
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}

// refuseUnsupportedSandbox returns why the process runtime cannot honour a
// sandbox config, or nil.
func refuseUnsupportedSandbox(cfg *runtimeapi.PodSandboxConfig) error {
	var why []string
	l := cfg.GetLinux()
	if len(l.GetSysctls()) > 0 {
		why = append(why, "sysctls (they would change the host's)")
	}
	if l.GetSecurityContext().GetPrivileged() {
		why = append(why, "privileged")
	}
	if u := l.GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u != nil && u.GetMode() == runtimeapi.NamespaceMode_POD {
		why = append(why, "user namespaces (hostUsers: false)")
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}

// containerUser is the identity the security context asks for, nil for the
// runtime's own: run_as_user (else the runtime's user), run_as_group (else
// group 0 with run_as_user, as runc does without an image's /etc/passwd, or
// the runtime's group), supplemental_groups.
func containerUser(sc *runtimeapi.LinuxContainerSecurityContext) *initUser {
	if sc.GetRunAsUser() == nil && sc.GetRunAsGroup() == nil && len(sc.GetSupplementalGroups()) == 0 {
		return nil
	}
	u := &initUser{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if r := sc.GetRunAsUser(); r != nil {
		u.UID, u.GID = uint32(r.GetValue()), 0
	}
	if g := sc.GetRunAsGroup(); g != nil {
		u.GID = uint32(g.GetValue())
	}
	for _, g := range sc.GetSupplementalGroups() {
		u.Groups = append(u.Groups, uint32(g))
	}
	return u
}

// checkUser refuses an identity the runtime cannot switch to: only root can.
func checkUser(u *initUser) error {
	if u == nil || os.Geteuid() == 0 {
		return nil
	}
	if u.UID == uint32(os.Geteuid()) && u.GID == uint32(os.Getegid()) && len(u.Groups) == 0 {
		return nil
	}
	return fmt.Errorf("runAsUser %d, runAsGroup %d and supplementalGroups %v: the process runtime must run as root to switch user", u.UID, u.GID, u.Groups)
}
