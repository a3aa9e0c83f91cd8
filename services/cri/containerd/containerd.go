// Package containerd runs a private containerd for skiff's all-in-one: a
// config written into its own directory (CRI plugin on, its own root, state,
// socket and CNI directories, so a system containerd is never touched), the
// daemon started from it, and on Stop every pod sandbox it holds removed
// before the daemon ends, so no container, shim, mount or veth outlives it.
//
// The CNI configuration is containerd's own mechanism: the config names a
// conf_template (bridge + host-local IPAM + portmap), and containerd writes
// the network's conflist from it when the kubelet hands it the node's pod
// CIDR through CRI UpdateRuntimeConfig (kubelet's network_config.pod_cidr).
package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Defaults of Config.
const (
	// DefaultSandboxImage is the pause image containerd 1.6 uses.
	DefaultSandboxImage = "registry.k8s.io/pause:3.6"
	// DefaultBridge is the Linux bridge pods attach to.
	DefaultBridge = "skiff0"
	// NetworkName is the CNI network's name (in the conflist).
	NetworkName = "skiff"
)

// cniBinDirs are where Debian's containernetworking-plugins and the
// upstream release tarball put the plugins.
var cniBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Config is one private containerd.
type Config struct {
	// Dir holds everything: config.toml, root/, state/, containerd.sock,
	// containerd.log and cni/ (conf_template, net.d, IPAM state). Required.
	Dir string
	// Binary is the containerd executable; "" looks "containerd" up in PATH.
	Binary string
	// SandboxImage is the pod sandbox ("pause") image; it must be present
	// in the k8s.io namespace or pullable. "" means DefaultSandboxImage.
	SandboxImage string
	// CNIBinDir holds the CNI plugins (bridge, host-local, portmap,
	// loopback); "" picks the first of /usr/lib/cni and /opt/cni/bin.
	CNIBinDir string
	// Bridge is the Linux bridge of the pod network; "" means DefaultBridge.
	Bridge string
	// Logger receives progress lines; nil means slog.Default().
	Logger *slog.Logger
}

// Daemon is a running containerd.
type Daemon struct {
	cfg    Config
	cmd    *exec.Cmd
	exited chan error
	socket string
}

// Endpoint is the CRI endpoint, "unix://<Dir>/containerd.sock".
func (d *Daemon) Endpoint() string { return "unix://" + d.socket }

// Socket is the path of containerd's socket (for ctr -a and crictl).
func (d *Daemon) Socket() string { return d.socket }

// Start writes the config and starts containerd, returning once its CRI
// service answers (within 30 s). Errors: containerd or the CNI plugins not
// installed, an unwritable Dir, a daemon that exits or does not answer (its
// log's tail is in the error).
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Dir == "" {
		return nil, errors.New("containerd: Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	if cfg.Binary == "" {
		if cfg.Binary, err = exec.LookPath("containerd"); err != nil {
			return nil, fmt.Errorf("containerd is not installed (apt-get install containerd runc containernetworking-plugins): %w", err)
		}
	}
	if cfg.SandboxImage == "" {
		cfg.SandboxImage = DefaultSandboxImage
	}
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if cfg.CNIBinDir == "" {
		for _, d := range cniBinDirs {
			if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
				cfg.CNIBinDir = d
				break
			}
		}
		if cfg.CNIBinDir == "" {
			return nil, fmt.Errorf("containerd: no CNI bridge plugin in %s (apt-get install containernetworking-plugins)", strings.Join(cniBinDirs, " or "))
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := WriteConfig(cfg); err != nil {
		return nil, err
	}
	if err := ensureBridgeNetfilter("/proc/sys", func() error {
		out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput()
		if err != nil {
			return fmt.Errorf("modprobe br_netfilter: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}); err != nil {
		// Pods still run and reach each other; only Service traffic between pods of
		// this bridge breaks, so skiff goes on, saying so (as kubenet and kube-proxy).
		cfg.Logger.Warn("a pod reaching a Service ClusterIP whose endpoint is a pod on the same bridge will fail", "err", err)
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	d := &Daemon{cfg: cfg, exited: make(chan error, 1), socket: filepath.Join(dir, "containerd.sock")}
	d.cmd = exec.Command(cfg.Binary, "--config", filepath.Join(dir, "config.toml"))
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C to skiff's terminal must not reach
	// containerd before skiff has removed the pods; if skiff dies, so does
	// containerd.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	cfg.Logger.Info("started containerd", "pid", d.cmd.Process.Pid, "socket", d.socket, "log", logFile.Name())

	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := d.ping(ctx); err == nil {
			return d, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			d.kill()
			return nil, fmt.Errorf("containerd did not answer within 30s (%v); log:\n%s", err, tail(logFile.Name()))
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			return nil, fmt.Errorf("containerd exited: %v; log:\n%s", err, tail(logFile.Name()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bridgeNFCallIPTables is the sysctl (under /proc/sys) that passes bridged IPv4
// packets through netfilter's ip hooks, where br_netfilter is loaded.
const bridgeNFCallIPTables = "net/bridge/bridge-nf-call-iptables"

// ensureBridgeNetfilter loads br_netfilter (modprobe, when procSys has no
// bridgeNFCallIPTables) and sets bridgeNFCallIPTables to 1, as kube's kubenet does at
// Init (pkg/kubelet/dockershim/network/kubenet: modprobe br-netfilter, SetSysctl
// bridge-nf-call-iptables 1). A pod reaching a Service ClusterIP is DNATed by the
// proxy to an endpoint; when that endpoint is a pod on the same bridge its reply is
// switched straight back on the bridge, and only with br_netfilter does that reply
// meet conntrack to be un-DNATed: without it the client gets the reply from the pod
// IP instead of the ClusterIP and resets the connection. procSys is /proc/sys (a
// directory, for tests); errors name what is missing.
func ensureBridgeNetfilter(procSys string, modprobe func() error) error {
	path := filepath.Join(procSys, bridgeNFCallIPTables)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := modprobe(); err != nil {
			return fmt.Errorf("br_netfilter is not loaded (%s is missing) and cannot be: %w", path, err)
		}
	}
	v, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("br_netfilter: %w", err)
	}
	if strings.TrimSpace(string(v)) == "1" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("set %s to 1: %w", path, err)
	}
	return nil
}

func (d *Daemon) ping(ctx context.Context) error {
	conn, err := d.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(cctx, &runtimeapi.VersionRequest{})
	return err
}

func (d *Daemon) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Stop removes every pod sandbox (with its containers, network and mounts)
// through CRI, then stops containerd (SIGTERM, SIGKILL after 10 s), ends
// any shim still serving this daemon, and deletes the pod bridge. Errors
// are logged: Stop runs when skiff is ending.
func (d *Daemon) Stop() {
	log := d.cfg.Logger
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if conn, err := d.dial(); err == nil {
		rs := runtimeapi.NewRuntimeServiceClient(conn)
		if resp, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, s := range resp.GetItems() {
				if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
					log.Error("stop pod sandbox", "id", s.GetId(), "err", err)
				}
				if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
					log.Error("remove pod sandbox", "id", s.GetId(), "err", err)
				}
			}
		} else {
			log.Error("list pod sandboxes", "err", err)
		}
		conn.Close()
	}
	d.kill()
	d.killShims()
	d.unmountUnder()
	if _, err := os.Stat(filepath.Join("/sys/class/net", d.cfg.Bridge)); err == nil {
		if out, err := exec.Command("ip", "link", "delete", d.cfg.Bridge).CombinedOutput(); err != nil {
			log.Error("delete pod bridge", "bridge", d.cfg.Bridge, "err", err, "output", string(out))
		}
	}
	log.Info("stopped containerd")
}

// kill ends the daemon: SIGTERM, then SIGKILL after 10 s.
func (d *Daemon) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		d.exited <- err
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		d.exited <- <-d.exited
	}
}

// killShims ends containerd-shim processes started for this daemon (their
// command line names its socket); with every sandbox removed there are
// none, so this only acts after a failed removal.
func (d *Daemon) killShims() {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == d.socket {
				d.cfg.Logger.Info("ending a leftover shim", "pid", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// unmountUnder lazily unmounts anything still mounted under Dir (rootfs
// overlays, sandbox shm), deepest first.
func (d *Daemon) unmountUnder() {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], d.cfg.Dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			d.cfg.Logger.Error("unmount", "path", points[i], "err", err)
		}
	}
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// WriteConfig writes <Dir>/config.toml and <Dir>/cni/10-skiff.conflist.tmpl
// (the conf_template), creating the directories they name. cfg's empty
// fields must have been defaulted (Start does).
func WriteConfig(cfg Config) error {
	for _, sub := range []string{"root", "state", "cni/net.d", "cni/networks", "opt"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, sub), 0o755); err != nil {
			return fmt.Errorf("containerd dir: %w", err)
		}
	}
	data := configData{Config: cfg, RestrictOOMScoreAdj: oomScoreAdjRestricted()}
	for name, tmpl := range map[string]*template.Template{"config.toml": configTemplate, "cni/10-skiff.conflist.tmpl": cniTemplate} {
		var b strings.Builder
		if err := tmpl.Execute(&b, data); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write containerd %s: %w", name, err)
		}
	}
	return nil
}

type configData struct {
	Config
	RestrictOOMScoreAdj bool
}

// oomScoreAdjRestricted reports whether this process may not lower an
// oom_score_adj (no CAP_SYS_RESOURCE, as in some VMs and user namespaces);
// containerd must then not try to give sandboxes a negative one
// (restrict_oom_score_adj). It tries one step lower and restores the value.
func oomScoreAdjRestricted() bool {
	const path = "/proc/self/oom_score_adj"
	cur, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(cur)))
	if err != nil || v <= -1000 {
		return true
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(v-1)), 0); err != nil {
		return true
	}
	_ = os.WriteFile(path, cur, 0)
	return false
}

var configTemplate = template.Must(template.New("config.toml").Parse(`# Written by skiff: a private containerd for one all-in-one (root, state and
# socket under its data dir; a system containerd is never touched).
version = 2
root = "{{.Dir}}/root"
state = "{{.Dir}}/state"

[grpc]
  address = "{{.Dir}}/containerd.sock"

[ttrpc]
  address = "{{.Dir}}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  restrict_oom_score_adj = {{.RestrictOOMScoreAdj}}
  # exec, attach and port-forward: one-use URLs on loopback, proxied by the kubelet.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.Dir}}/cni/net.d"
    conf_template = "{{.Dir}}/cni/10-skiff.conflist.tmpl"
`))

// cniTemplate is containerd's conf_template: PodCIDRRanges and Routes are
// filled in by containerd from the pod CIDR the kubelet gives. The firewall
// plugin accepts the pods' traffic in FORWARD (chain CNI-FORWARD): a host
// whose FORWARD policy is DROP (as Docker sets it) would otherwise drop
// bridged pod-to-pod packets when bridge-nf-call-iptables is on. hairpinMode lets
// the bridge send a frame back out of the port it came in on: a pod reaching its
// own Service's ClusterIP, DNATed by the proxy back to itself (kube's kubenet sets
// it too; the proxy masquerades such traffic so that the reply goes back through
// the bridge's gateway to be un-DNATed). The bridge is the gateway (isGateway, which
// also enables ip_forward) so ClusterIP traffic leaves the pod through the host's
// netfilter; ensureBridgeNetfilter makes the replies of same-bridge endpoints meet
// it too.
var cniTemplate = template.Must(template.New("cni").Delims("[[", "]]").Parse(`{
  "cniVersion": "0.4.0",
  "name": "skiff",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "[[.Config.Bridge]]",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "[[.Config.Dir]]/cni/networks",
        "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}],
        "routes": [{{range $i, $r := .Routes}}{{if $i}}, {{end}}{"dst": "{{$r}}"}{{end}}]
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    },
    {
      "type": "firewall"
    }
  ]
}
`))
