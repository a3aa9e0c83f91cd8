package process

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultPath is the PATH containerd gives a container whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// containerEnv is the environment of a container's processes: what an image
// would provide (PATH, HOME), the sandbox's HOSTNAME as containerd sets it,
// then the container's own variables, which win because exec.Cmd keeps the
// last value of a duplicated key.
func containerEnv(sandbox *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env := []string{"PATH=" + path}
	if home := os.Getenv("HOME"); home != "" {
		env = append(env, "HOME="+home)
	}
	if h := sandbox.GetHostname(); h != "" {
		env = append(env, "HOSTNAME="+h)
	}
	for _, kv := range cfg.GetEnvs() {
		env = append(env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	return env
}

// lookupEnv returns the value of key in env, the last one if repeated.
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds the executable for name as a shell would with the given
// PATH; a name containing a slash is taken as a path, relative to dir.
// The error reads like runc's, which the kubelet shows in the container's
// StartError.
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("exec: %q: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if p := filepath.Join(d, name); checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: %w", name, errNotFound)
}

// errNotFound is lookPath's error for a name found in no PATH directory.
var errNotFound = errors.New("executable file not found in $PATH")

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// workingDir is config.WorkingDir when it is an existing directory given as
// an absolute path (as the kubelet passes it), else the sandbox's own directory.
func workingDir(cfg *runtimeapi.ContainerConfig, sandboxDir string) string {
	if wd := cfg.GetWorkingDir(); filepath.IsAbs(wd) {
		if fi, err := os.Stat(wd); err == nil && fi.IsDir() {
			return wd
		}
	}
	return sandboxDir
}

// hostIPv4 is the pod IP of every sandbox: the first non-loopback, non
// link-local IPv4 address of an up interface, or 127.0.0.1.
func hostIPv4() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip4 := ipn.IP.To4(); ip4 != nil && ip4.IsGlobalUnicast() {
					return ip4.String()
				}
			}
		}
	}
	return "127.0.0.1"
}
