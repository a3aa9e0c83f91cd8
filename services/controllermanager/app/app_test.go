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
	"skiff.dev/services/internal/componentbase/flagtest"
	"skiff.dev/services/internal/componentbase/runtest"
)

// The controller manager's flags, defaults and usages are those of cmd/controller-manager
// before package app (testdata/flags.golden is its -h) plus componentbase's
// --kube-api-qps (default -1: no client-side limit, as before) and --kube-api-burst:
// scripts, compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("controller-manager", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidate(t *testing.T) {
	o := NewOptions()
	flagtest.Parse(t, o.AddFlags, "--controllers=*,-bogus")
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
	runtest.Until(t, c.Run, func(ctx context.Context) error {
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
