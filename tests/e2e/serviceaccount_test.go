package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestServiceAccounts drives service accounts and their tokens with the real kubectl:
// every namespace gets its default ServiceAccount, `kubectl create token` prints a token
// that `kubectl --token` authenticates with, and a token bound to a pod dies with it.
func TestServiceAccounts(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// tokenKubeconfig is a kubeconfig that reaches the cluster with token alone: no
	// client certificate, which would authenticate first.
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	tokenKubeconfig := func(t *testing.T, token string) string {
		t.Helper()
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["skiff"] = cluster
		cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
		cfg.Contexts["skiff"] = &clientcmdapi.Context{Cluster: "skiff", AuthInfo: "sa", Namespace: "default"}
		cfg.CurrentContext = "skiff"
		path := filepath.Join(t.TempDir(), "token.kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	whoami := func(t *testing.T, token string) (string, error) {
		t.Helper()
		return c.kubectl(ctx, "--kubeconfig", tokenKubeconfig(t, token), "auth", "whoami")
	}
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}

	t.Run("get sa shows default in a new namespace", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "namespace", "team-a"), "namespace/team-a created")
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "sa", "-n", "team-a")
			return err == nil && strings.Contains(out, "default"), out
		})
		out := c.mustKubectl(ctx, "get", "serviceaccounts", "-n", "team-a")
		expect(t, out, "NAME", "SECRETS", "AGE", "default")
		expect(t, c.mustKubectl(ctx, "describe", "sa", "default", "-n", "team-a"), "Name:", "default", "Namespace:", "team-a", "Tokens:")
		expect(t, c.mustKubectl(ctx, "create", "serviceaccount", "builder", "-n", "team-a"), "serviceaccount/builder created")
		expect(t, c.mustKubectl(ctx, "get", "sa", "builder", "-n", "team-a", "-o", "jsonpath={.metadata.name}"), "builder")
	})

	t.Run("create token then auth whoami with it", func(t *testing.T) {
		token := strings.TrimSpace(c.mustKubectl(ctx, "create", "token", "default"))
		if strings.Count(token, ".") != 2 {
			t.Fatalf("kubectl create token printed %q, not a JWT", token)
		}
		out, err := whoami(t, token)
		if err != nil {
			t.Fatalf("auth whoami with the token: %v\n%s", err, out)
		}
		expect(t, out, "system:serviceaccount:default:default", "system:serviceaccounts:default", "system:authenticated",
			"authentication.kubernetes.io/credential-id")
		// With the token alone the service account may do nothing else yet.
		if out, err := c.kubectl(ctx, "--kubeconfig", tokenKubeconfig(t, token), "get", "nodes"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("get nodes as the service account: %v\n%s", err, out)
		}
	})

	t.Run("a pod runs as default with the projected token volume", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "run", "holder", "--image=busybox", "--restart=Never"), "pod/holder created")
		expect(t, c.mustKubectl(ctx, "get", "pod", "holder", "-o", "jsonpath={.spec.serviceAccountName} {.spec.volumes[0].name} {.spec.containers[0].volumeMounts[0].mountPath}"),
			"default kube-api-access-", " /var/run/secrets/kubernetes.io/serviceaccount")
	})

	t.Run("a token bound to a pod stops working once the pod is deleted", func(t *testing.T) {
		token := strings.TrimSpace(c.mustKubectl(ctx, "create", "token", "default", "--bound-object-kind", "Pod", "--bound-object-name", "holder"))
		out, err := whoami(t, token)
		if err != nil {
			t.Fatalf("auth whoami with the pod-bound token: %v\n%s", err, out)
		}
		expect(t, out, "system:serviceaccount:default:default", "authentication.kubernetes.io/pod-name", "holder")
		expect(t, c.mustKubectl(ctx, "delete", "pod", "holder", "--wait=true"), `pod "holder" deleted`)
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := whoami(t, token)
			return err != nil && strings.Contains(out, "Unauthorized"), out
		})
	})
}
