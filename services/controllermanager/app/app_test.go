package app

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"skiff.dev/services/controllermanager"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/componentbasetest"
)

// flagNames are the flags cmd/controller-manager had before it became Options (scripts,
// compose.yaml and deploy/ pass them), and kube's --kube-api-qps and --kube-api-burst.
var flagNames = []string{
	"allocate-node-cidrs", "authentication-token-webhook-cache-ttl", "authorization-always-allow-paths",
	"authorization-webhook-cache-authorized-ttl", "authorization-webhook-cache-unauthorized-ttl", "bind-address",
	"client-ca-file", "cluster-cidr", "concurrent-deployment-syncs", "concurrent-gc-syncs", "concurrent-job-syncs",
	"concurrent-rc-syncs", "concurrent-replicaset-syncs", "controllers", "health-address", "kube-api-burst",
	"kube-api-content-type", "kube-api-qps", "kubeconfig", "large-cluster-size-threshold", "leader-elect",
	"leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-resource-name",
	"leader-elect-resource-namespace", "leader-elect-retry-period", "log-format", "log-level", "metrics-bind-address",
	"nats-ca-file", "nats-cert-file", "nats-key-file", "nats-url", "node-cidr-mask-size", "node-cidr-mask-size-ipv4",
	"node-cidr-mask-size-ipv6", "node-eviction-rate", "node-monitor-grace-period", "node-monitor-period",
	"node-startup-grace-period", "profiling", "root-ca-file", "secondary-node-eviction-rate", "secure-port",
	"terminated-pod-gc-threshold", "tls-cert-file", "tls-private-key-file", "unhealthy-zone-threshold",
}

func TestAddFlags(t *testing.T) {
	// No client-side limit, as before the flag existed.
	componentbasetest.CheckFlags(t, NewOptions().AddFlags, flagNames, map[string]string{"kube-api-qps": "-1",
		"leader-elect-resource-name": "kube-controller-manager", "secure-port": "10257"})
}

func TestValidate(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("controller-manager", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--controllers=*,-bogus"}); err != nil {
		t.Fatal(err)
	}
	var usage componentbase.UsageError
	if err := o.Validate(); !errors.As(err, &usage) || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("Validate with --controllers=*,-bogus = %v, want a UsageError naming bogus", err)
	}
}

func TestRootCABundle(t *testing.T) {
	if _, err := rootCABundle("", &rest.Config{}); err == nil {
		t.Error("a root CA from neither a file nor the kubeconfig")
	}
	if got, err := rootCABundle("", &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte("pem")}}); err != nil || string(got) != "pem" {
		t.Errorf("root CA of the kubeconfig = %q, %v", got, err)
	}
}

func TestRunWithoutClient(t *testing.T) {
	if err := (&Config{}).Run(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "controller manager: ") {
		t.Fatalf("Run without a client = %v, want a controller manager error", err)
	}
}

// TestRunLeads runs a Config as the all-in-one builds one, with a Lease: Run takes the
// Lease, runs the enabled controller (serviceaccount makes each namespace's default
// ServiceAccount), and returns nil once ctx ends.
func TestRunLeads(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}})
	election := NewOptions().LeaderElection
	options := controllermanager.DefaultOptions()
	options.Controllers = []string{"serviceaccount"}
	c := &Config{Client: client, ControllerManager: options, LeaderElection: &election}
	componentbasetest.RunUntil(t, c.Run, func(ctx context.Context) error {
		lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, controllermanager.LeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil {
			return errors.New("the Lease has no holder")
		}
		_, err = client.CoreV1().ServiceAccounts("demo").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}
