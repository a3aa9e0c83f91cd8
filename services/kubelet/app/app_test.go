package app

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/tunnel"
)

// The kubelet's flags, defaults and usages are those of the command before package
// app (testdata/flags.golden is its -h, with the host name as node-0): scripts,
// compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	o := NewOptions()
	o.NodeName = "node-0"
	fs := flag.NewFlagSet("kubelet", flag.ContinueOnError)
	o.AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidateRefusesBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"--cgroup-driver=upstart"},
		{"--container-log-max-size=0"},
		{"--eviction-hard=memory.available>1Gi"},
		{"--tunnel-server=exec-proxy:10444", "--rotate-server-certificates=false"},
		{"--log-format=xml"},
	} {
		o := NewOptions()
		flagtest.Parse(t, o.AddFlags, args...)
		var usage componentbase.UsageError
		if err := o.Validate(); !errors.As(err, &usage) {
			t.Errorf("Validate with %v = %v, want a UsageError", args, err)
		}
	}
	// Hollow nodes take neither --eviction-hard nor the kubelet API, as before.
	o := NewOptions()
	o.HollowNodes, o.EvictionHard, o.TunnelServer, o.Port = 2, "bogus", "exec-proxy:10444", 0
	if err := o.Validate(); err != nil {
		t.Errorf("Validate of hollow nodes = %v", err)
	}
	if err := NewOptions().Validate(); err != nil {
		t.Errorf("Validate of the defaults = %v", err)
	}
}

func TestConfigRunRefusesMissingPieces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := (&Config{}).Run(ctx); err == nil || !strings.Contains(err.Error(), "create kubelet") {
		t.Errorf("Run without a kubelet configuration = %v, want create kubelet's error", err)
	}
	// A tunnel needs the kubelet API it carries.
	cfg := &Config{
		Kubelet: kubelet.Config{NodeName: "node-0", Client: fake.NewClientset(), RuntimeEndpoint: "unix:///nonexistent.sock", RootDir: t.TempDir()},
		Tunnel:  &tunnel.AgentConfig{Server: "exec-proxy:10444", NodeName: "node-0"},
	}
	if err := cfg.Run(ctx); err == nil || !strings.Contains(err.Error(), "kubelet API") {
		t.Errorf("Run with a tunnel and no kubelet API = %v, want an error naming the kubelet API", err)
	}
}
