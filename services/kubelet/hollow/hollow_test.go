package hollow

import (
	"context"
	"strings"
	"testing"
)

func TestRunRefusesAnIncompleteConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no nodes", Config{BootstrapKubeconfig: "b", RootDir: "r"}, "Nodes must be at least 1"},
		{"no bootstrap kubeconfig", Config{Nodes: 1, RootDir: "r"}, "BootstrapKubeconfig is required"},
		{"no root dir", Config{Nodes: 1, BootstrapKubeconfig: "b"}, "RootDir is required"},
		{"NATS without its CA", Config{Nodes: 1, BootstrapKubeconfig: "b", RootDir: "r", NATSURL: "tls://127.0.0.1:4222"}, "NATSCA is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := Run(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestNodeName(t *testing.T) {
	for _, c := range []struct {
		prefix string
		i      int
		want   string
	}{
		{"", 0, "hollow-0"},
		{"", 99, "hollow-99"},
		{"kubemark-", 7, "kubemark-7"},
	} {
		if got := NodeName(c.prefix, c.i); got != c.want {
			t.Errorf("NodeName(%q, %d) = %q, want %q", c.prefix, c.i, got, c.want)
		}
	}
}

func TestRunEndsEveryNodeWhenOneCannotJoin(t *testing.T) {
	dir := t.TempDir()
	err := Run(context.Background(), Config{Nodes: 3, BootstrapKubeconfig: dir + "/missing.kubeconfig", RootDir: dir})
	if err == nil || !strings.Contains(err.Error(), "hollow node hollow-") || !strings.Contains(err.Error(), "missing.kubeconfig") {
		t.Fatalf("Run: %v, want the failing node and its bootstrap kubeconfig named", err)
	}
}
