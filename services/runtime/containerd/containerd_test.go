package containerd

import (
	"context"
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
