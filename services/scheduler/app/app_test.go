package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/componentbasetest"
)

// flagNames are the flags cmd/scheduler had before it became Options; scripts,
// compose.yaml and deploy/ pass them.
var flagNames = []string{
	"authentication-token-webhook-cache-ttl", "authorization-always-allow-paths", "authorization-webhook-cache-authorized-ttl",
	"authorization-webhook-cache-unauthorized-ttl", "bind-address", "client-ca-file", "health-address", "kube-api-burst",
	"kube-api-content-type", "kube-api-qps", "kubeconfig", "leader-elect", "leader-elect-lease-duration",
	"leader-elect-renew-deadline", "leader-elect-resource-name", "leader-elect-resource-namespace", "leader-elect-retry-period",
	"log-format", "log-level", "metrics-bind-address", "nats-ca-file", "nats-cert-file", "nats-key-file", "nats-url",
	"profiling", "scheduler-name", "secure-port", "tls-cert-file", "tls-private-key-file",
}

func TestAddFlags(t *testing.T) {
	componentbasetest.CheckFlags(t, NewOptions().AddFlags, flagNames, map[string]string{"kube-api-qps": "50", "kube-api-burst": "100",
		"scheduler-name": "default-scheduler", "leader-elect": "true", "leader-elect-resource-name": "kube-scheduler", "secure-port": "10259"})
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
	componentbasetest.RunUntil(t, c.Run, func(ctx context.Context) error {
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
