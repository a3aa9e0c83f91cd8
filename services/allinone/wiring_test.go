package allinone

import (
	"context"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/internal/pki"
)

// TestComponentsPassRBAC: the all-in-one's scheduler and controller manager reach the
// apiserver through the client componentRESTConfig builds for them, as their own
// identities, so the apiserver authenticates and authorizes their requests as it does
// the standalone binaries': what kube's RBAC gives system:kube-scheduler and
// system:kube-controller-manager passes, anything else is refused with 403.
func TestComponentsPassRBAC(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dataDir := t.TempDir()
	cluster, wait, err := Start(ctx, Config{DataDir: dataDir, BindAddress: "127.0.0.1", Runtime: RuntimeSim,
		NodeName: "wiring-node", NATSPort: -1, NoProxy: true,
		EtcdOverGRPC: true}) // and the apiserver reaches etcd as it reaches a separate one
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("all-in-one stopped with %v", err)
		}
	})
	pkiDir := filepath.Join(dataDir, "pki")
	client := func(id pki.Identity) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(componentRESTConfig(cluster.APIServerURL, pkiDir, id, nil))
	}
	scheduler, controllerManager := client(pki.Scheduler), client(pki.ControllerManager)

	for _, tc := range []struct {
		client kubernetes.Interface
		user   string
	}{{scheduler, "system:kube-scheduler"}, {controllerManager, "system:kube-controller-manager"}} {
		review, err := tc.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: SelfSubjectReview: %v", tc.user, err)
		}
		if got := review.Status.UserInfo.Username; got != tc.user {
			t.Errorf("the all-in-one's client authenticates as %q, want %q", got, tc.user)
		}
	}
	// What their roles allow.
	if _, err := scheduler.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("scheduler listing pods: %v", err)
	}
	if _, err := controllerManager.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("controller manager listing service accounts: %v", err)
	}
	// What they do not.
	for name, call := range map[string]func() error{
		"scheduler listing secrets": func() error {
			_, err := scheduler.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"scheduler deleting a namespace": func() error {
			return scheduler.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{})
		},
		"scheduler reading cluster role bindings": func() error {
			_, err := scheduler.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403 Forbidden", name, err)
		}
	}
}
