package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteConfigKeepsEverythingUnderDir(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, SandboxImage: "example.test/pause:1", CNIBinDir: "/usr/lib/cni", Bridge: "skiff9"}
	if err := WriteConfig(cfg); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	config := string(data)
	for _, want := range []string{
		`root = "` + dir + `/root"`,
		`state = "` + dir + `/state"`,
		`address = "` + dir + `/containerd.sock"`,
		`sandbox_image = "example.test/pause:1"`,
		`conf_dir = "` + dir + `/cni/net.d"`,
		`conf_template = "` + dir + `/cni/10-skiff.conflist.tmpl"`,
		`bin_dir = "/usr/lib/cni"`,
		`restrict_oom_score_adj = `,
	} {
		if !strings.Contains(config, want) {
			t.Errorf("config.toml lacks %q:\n%s", want, config)
		}
	}
	// Every path the config names is under Dir: a system containerd's
	// /var/lib/containerd, /run/containerd and /opt/containerd are untouched.
	for _, system := range []string{"/var/lib/containerd", "/run/containerd", "/opt/containerd", "/etc/cni"} {
		if strings.Contains(config, system) {
			t.Errorf("config.toml names %s", system)
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, "cni", "10-skiff.conflist.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"bridge": "skiff9"`, `"type": "host-local"`, `"dataDir": "` + dir + `/cni/networks"`,
		`{{range $i, $r := .PodCIDRRanges}}`, `"type": "portmap"`, `"type": "firewall"`} {
		if !strings.Contains(string(tmpl), want) {
			t.Errorf("CNI template lacks %q:\n%s", want, tmpl)
		}
	}
}

func TestStartWithoutContainerdSaysWhy(t *testing.T) {
	_, err := Start(context.Background(), Config{Dir: t.TempDir(), Binary: filepath.Join(t.TempDir(), "no-containerd"), CNIBinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "start containerd") {
		t.Errorf("Start with a missing binary: %v, want an error naming it", err)
	}
}

func TestEnsureBridgeNetfilter(t *testing.T) {
	sysctl := func(dir string) string { return filepath.Join(dir, "net", "bridge", "bridge-nf-call-iptables") }
	write := func(t *testing.T, dir, v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(sysctl(dir)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sysctl(dir), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(t *testing.T, dir string) string {
		t.Helper()
		v, err := os.ReadFile(sysctl(dir))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(v))
	}
	noModprobe := func(t *testing.T) func() error {
		return func() error { t.Error("modprobe called while br_netfilter is loaded"); return nil }
	}

	t.Run("loaded and on: left alone", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "1\n")
		if err := ensureBridgeNetfilter(dir, noModprobe(t)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("loaded and off: turned on", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "0\n")
		if err := ensureBridgeNetfilter(dir, noModprobe(t)); err != nil {
			t.Fatal(err)
		}
		if v := read(t, dir); v != "1" {
			t.Errorf("bridge-nf-call-iptables = %q, want 1", v)
		}
	})
	t.Run("not loaded: modprobe, then on", func(t *testing.T) {
		dir := t.TempDir()
		loaded := false
		if err := ensureBridgeNetfilter(dir, func() error { loaded = true; write(t, dir, "0\n"); return nil }); err != nil {
			t.Fatal(err)
		}
		if v := read(t, dir); !loaded || v != "1" {
			t.Errorf("modprobe called %v, bridge-nf-call-iptables = %q, want true, 1", loaded, v)
		}
	})
	t.Run("not loadable: the error says so", func(t *testing.T) {
		err := ensureBridgeNetfilter(t.TempDir(), func() error { return errors.New("modprobe: not found") })
		if err == nil || !strings.Contains(err.Error(), "br_netfilter is not loaded") || !strings.Contains(err.Error(), "modprobe: not found") {
			t.Errorf("err = %v, want br_netfilter is not loaded ... modprobe: not found", err)
		}
	})
}
