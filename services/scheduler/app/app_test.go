package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
	"skiff.dev/services/internal/componentbase/runtest"
)

// The scheduler's flags, defaults and usages are those of cmd/scheduler before package
// app (testdata/flags.golden is its -h) but for componentbase's usages of --kube-api-qps
// and --kube-api-burst: scripts, compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidate(t *testing.T) {
	o := NewOptions()
	o.Serving.LogLevel = "loud"
	var usage componentbase.UsageError
	if err := o.Validate(); !errors.As(err, &usage) {
		t.Fatalf("Validate with --log-level loud = %v, want a UsageError", err)
	}
	if err := o.Run(context.Background()); !errors.As(err, &usage) {
		t.Fatalf("Run with --log-level loud = %v, want a UsageError", err)
	}
}

func TestRunWithoutClient(t *testing.T) {
	if err := (&Config{}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "building scheduler") {
		t.Fatalf("Run without a client = %v, want a building scheduler error", err)
	}
}

// TestRunLeads runs a Config as the all-in-one builds one, with a Lease: Run takes the
// Lease, registers the scheduler's metrics with Registry, and returns nil once ctx ends.
func TestRunLeads(t *testing.T) {
	client := fake.NewClientset()
	election := NewOptions().LeaderElection
	registry := prometheus.NewRegistry()
	c := &Config{Client: client, Registry: registry, LeaderElection: &election}
	runtest.Until(t, c.Run, func(ctx context.Context) error {
		lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("kube-system/kube-scheduler has no holder")
		}
		families, err := registry.Gather()
		if err != nil {
			return err
		}
		var names []string
		for _, f := range families {
			names = append(names, f.GetName())
		}
		if !slices.Contains(names, "scheduler_pending_pods") {
			return fmt.Errorf("Registry holds %v, no scheduler_pending_pods", names)
		}
		return nil
	})
}
