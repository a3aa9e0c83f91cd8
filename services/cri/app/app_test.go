package app

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
)

// The runtime command's flags, defaults and usages are those before package app
// (testdata/flags.golden is its -h): the compose stack's kubelet image relies on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("runtime", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidate(t *testing.T) {
	o := NewOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("Validate of the defaults = %v", err)
	}
	o.Runtime = "docker"
	var usage componentbase.UsageError
	if err := o.Validate(); !errors.As(err, &usage) {
		t.Errorf("Validate of --runtime=docker = %v, want a UsageError", err)
	}
}

func TestConfigRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := (&Config{Socket: "/nonexistent/cri.sock"}).Run(ctx); err == nil {
		t.Error("Run without a runtime succeeded")
	}
	rt := sim.New()
	defer rt.Close()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	if err := (&Config{Name: RuntimeSim, Runtime: rt, Socket: socket}).Run(ctx); err != nil {
		t.Errorf("Run until ctx ended = %v, want nil", err)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}
