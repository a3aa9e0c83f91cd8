package app

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/knftables"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
	"skiff.dev/services/proxy"
)

// The proxy's flags, defaults and usages are those of the command before package app
// (testdata/flags.golden is its -h) plus componentbase's --kube-api-qps and
// --kube-api-burst: scripts, compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool
	}{
		{nil, true}, // no --kubeconfig
		{[]string{"--cleanup"}, false},
		{[]string{"--kubeconfig=/etc/kube-proxy.conf"}, false},
		{[]string{"--kubeconfig=/etc/kube-proxy.conf", "--log-level=loud"}, true},
	} {
		o := NewOptions()
		flagtest.Parse(t, o.AddFlags, tc.args...)
		err := o.Validate()
		var usage componentbase.UsageError
		if errors.As(err, &usage) != tc.usage || (err != nil && !tc.usage) {
			t.Errorf("Validate with %v = %v, want a usage error: %v", tc.args, err, tc.usage)
		}
	}
}

func TestConfigRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := (&Config{}).Run(ctx); err == nil {
		t.Error("Run without a client succeeded")
	}
	// Until ctx ends, over knftables' fake: nil then.
	cfg := &Config{Proxy: proxy.Config{Client: fake.NewClientset(), NodeName: "node-0",
		NFTables: knftables.NewFake(knftables.IPv4Family, proxy.DefaultTable)}}
	if err := cfg.Run(ctx); err != nil {
		t.Errorf("Run until ctx ended = %v, want nil", err)
	}
}
