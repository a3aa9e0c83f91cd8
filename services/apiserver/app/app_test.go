package app

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
)

// The apiserver's flags, defaults and usages are those of the command before package
// app (testdata/flags.golden is its -h): scripts, compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidate(t *testing.T) {
	if err := NewOptions().Validate(); err != nil {
		t.Errorf("Validate of the defaults = %v", err)
	}
	for _, args := range [][]string{{"--advertise-address=apiserver.local"}, {"--profiling"},
		{"--max-requests-inflight=0", "--max-mutating-requests-inflight=0"},
		{"--endpoint-reconciler-type=master-count"}, {"--endpoint-reconciler-type=leases"}} {
		o := NewOptions()
		flagtest.Parse(t, o.AddFlags, args...)
		var usage componentbase.UsageError
		if err := o.Validate(); !errors.As(err, &usage) {
			t.Errorf("Validate with %v = %v, want a UsageError", args, err)
		}
	}
}

func TestEndpointReconcilerTypes(t *testing.T) {
	for _, value := range []string{"lease", "none"} {
		o := NewOptions()
		flagtest.Parse(t, o.AddFlags, "--endpoint-reconciler-type="+value)
		if err := o.Validate(); err != nil {
			t.Errorf("Validate with --endpoint-reconciler-type=%s = %v", value, err)
		}
	}
	o := NewOptions()
	flagtest.Parse(t, o.AddFlags, "--endpoint-reconciler-type=master-count")
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "deprecated") {
		t.Errorf("Validate with master-count = %v, want its deprecation named", err)
	}
}

func TestConfigRunRefusesMissingPieces(t *testing.T) {
	if err := (&Config{}).Run(context.Background()); err == nil {
		t.Error("Run without etcd or certificates succeeded")
	}
	if _, err := (&Config{Address: "127.0.0.1:0"}).New(); err == nil {
		t.Error("New without etcd or certificates succeeded")
	}
}
