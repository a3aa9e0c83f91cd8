package allinone_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/allinone"
	"skiff.dev/services/internal/pki"
)

// startAllInOne runs an all-in-one on dataDir with a sim runtime and one hollow node until
// the returned stop is called, and waits until both nodes have registered.
func startAllInOne(t *testing.T, dataDir string) (admin kubernetes.Interface, apiURL string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cluster, stopped, err := allinone.Start(ctx, allinone.Config{
		DataDir: dataDir, BindAddress: "127.0.0.1", Runtime: allinone.RuntimeSim, NodeName: "token-node", NATSPort: -1, NoProxy: true, HollowNodes: 1,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stop = func() {
		cancel()
		if err := stopped(); err != nil {
			t.Errorf("all-in-one stopped with %v", err)
		}
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	admin = kubernetes.NewForConfigOrDie(restConfig)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(nodes.Items) == 2, nil
	}); err != nil {
		stop()
		t.Fatalf("the node and the hollow node did not register: %v", err)
	}
	return admin, cluster.APIServerURL, stop
}

// bootstrapUser is who token authenticates as at apiURL, or the error.
func bootstrapUser(t *testing.T, apiURL, caFile, token string) (string, error) {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: apiURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}})
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}

// TestBootstrapTokensOfTheAllInOne: the all-in-one's bootstrap tokens expire (24 h), the
// kubelet's copy goes once it holds its certificate, and a restart drops expired tokens
// and hands out a fresh one.
func TestBootstrapTokensOfTheAllInOne(t *testing.T) {
	dataDir := t.TempDir()
	pkiDir := filepath.Join(dataDir, "pki")
	tokenFile, caFile := filepath.Join(pkiDir, pki.BootstrapTokenFile), filepath.Join(pkiDir, pki.CACertFile)
	kubeletCopy := filepath.Join(dataDir, "kubelet", pki.BootstrapKubeconfigFile)
	joinerCopy := filepath.Join(pkiDir, pki.BootstrapKubeconfigFile)
	handedOut := func() string {
		t.Helper()
		cfg, err := clientcmd.BuildConfigFromFlags("", joinerCopy)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.BearerToken
	}

	_, apiURL, stop := startAllInOne(t, dataDir)
	t.Run("tokens expire within 24 h", func(t *testing.T) {
		tokens, err := pki.ReadBootstrapTokens(tokenFile)
		if err != nil || len(tokens) == 0 {
			t.Fatalf("tokens %v, %v", tokens, err)
		}
		for _, tok := range tokens {
			if left := time.Until(tok.Expiration); tok.Expiration.IsZero() || left > pki.DefaultBootstrapTokenTTL {
				t.Errorf("token %s expires at %v", tok.ID, tok.Expiration)
			}
		}
	})
	t.Run("the kubelet's bootstrap kubeconfig is gone once it holds its certificate", func(t *testing.T) {
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, err := os.Stat(kubeletCopy)
			return os.IsNotExist(err), nil
		})
		if err != nil {
			t.Fatalf("%s still there", kubeletCopy)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "hollow", pki.BootstrapKubeconfigFile)); err != nil {
			t.Errorf("the hollow nodes' own copy: %v", err)
		}
	})
	first := handedOut()
	t.Run("the token handed out to joining kubelets authenticates as a bootstrapper", func(t *testing.T) {
		id, _, _ := pki.ParseBootstrapToken(first)
		if user, err := bootstrapUser(t, apiURL, caFile, first); err != nil || user != "system:bootstrap:"+id {
			t.Fatalf("authenticates as %q, %v", user, err)
		}
	})
	stop()

	// The token has expired by the next start.
	expired := pki.BootstrapToken{ID: "expird", Secret: "0123456789abcdef", Expiration: time.Now().Add(-time.Minute).UTC().Truncate(time.Second)}
	if err := pki.WriteFileAtomic(tokenFile, pki.FormatBootstrapTokens([]pki.BootstrapToken{expired}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, apiURL, stop = startAllInOne(t, dataDir)
	defer stop()
	t.Run("a restart drops the expired token and hands out a fresh one", func(t *testing.T) {
		tokens, err := pki.ReadBootstrapTokens(tokenFile)
		if err != nil || len(tokens) != 1 || tokens[0].ID == expired.ID {
			t.Fatalf("tokens %+v, %v; want one fresh token", tokens, err)
		}
		if got := handedOut(); got != tokens[0].String() {
			t.Fatalf("handed out %q, want the fresh %q", got, tokens[0].String())
		}
		if _, err := bootstrapUser(t, apiURL, caFile, expired.String()); !apierrors.IsUnauthorized(err) {
			t.Fatalf("the expired token: %v, want 401", err)
		}
	})
}
