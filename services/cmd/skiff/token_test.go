package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// skiffToken runs `skiff token args...` and returns its exit code, stdout and stderr.
func skiffToken(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := tokenMain(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestTokenCommands drives skiff token create, list and delete against the real
// apiserver with the admin's kubeconfig, and checks what each token can do afterwards.
func TestTokenCommands(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	admin := filepath.Join(s.PKIDir, pki.AdminKubeconfigFile)
	whoami := func(token string) (string, error) {
		client := kubernetes.NewForConfigOrDie(s.TokenConfig(token))
		review, err := client.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return review.Status.UserInfo.Username + " " + strings.Join(review.Status.UserInfo.Groups, ","), nil
	}

	var created string
	t.Run("create makes a token that authenticates as a bootstrapper for 24 h", func(t *testing.T) {
		code, out, errOut := skiffToken("create", "--kubeconfig", admin)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		created = strings.TrimSpace(out)
		id, _, ok := pki.ParseBootstrapToken(created)
		if !ok {
			t.Fatalf("printed %q, want a token", out)
		}
		user, err := whoami(created)
		if err != nil || user != "system:bootstrap:"+id+" system:bootstrappers,system:bootstrappers:kubeadm:default-node-token,system:authenticated" {
			t.Fatalf("authenticates as %q, %v", user, err)
		}
		sec, err := kubernetes.NewForConfigOrDie(s.Config).CoreV1().Secrets("kube-system").Get(context.Background(), "bootstrap-token-"+id, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		exp, err := time.Parse(time.RFC3339, string(sec.Data["expiration"]))
		if left := time.Until(exp); err != nil || left < 23*time.Hour || left > 24*time.Hour {
			t.Fatalf("expiration %q, want 24 h from now", sec.Data["expiration"])
		}
	})
	t.Run("create with --bootstrap-kubeconfig writes a kubeconfig a kubelet bootstraps with", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "shared", "bootstrap-kubelet.kubeconfig")
		code, out, errOut := skiffToken("create", "--kubeconfig", admin, "--ttl", "1h", "--description", "compose kubelets",
			"--bootstrap-kubeconfig", path, "--server", s.URL, "abcdef.0123456789abcdef")
		if code != 0 || strings.TrimSpace(out) != "abcdef.0123456789abcdef" {
			t.Fatalf("exit %d, printed %q: %s", code, out, errOut)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.BearerToken != "abcdef.0123456789abcdef" || cfg.Host != s.URL || !bytes.Equal(cfg.CAData, s.CA.CertPEM) {
			t.Fatalf("kubeconfig: server %s, token %q, CA %d bytes", cfg.Host, cfg.BearerToken, len(cfg.CAData))
		}
		review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil || review.Status.UserInfo.Username != "system:bootstrap:abcdef" {
			t.Fatalf("the kubeconfig authenticates as %+v, %v", review, err)
		}
	})
	t.Run("create of an existing token id fails", func(t *testing.T) {
		if code, _, errOut := skiffToken("create", "--kubeconfig", admin, "abcdef.fedcba9876543210"); code != 1 || !strings.Contains(errOut, `a token with id "abcdef" already exists`) {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	t.Run("create refuses an unknown usage and groups without authentication", func(t *testing.T) {
		for _, args := range [][]string{{"--usages", "signing,flying"}, {"--usages", "signing"}, {"--groups", "system:masters"}} {
			if code, _, errOut := skiffToken(append([]string{"create", "--kubeconfig", admin}, args...)...); code != 1 {
				t.Errorf("%v: exit %d (%s), want 1", args, code, errOut)
			}
		}
	})
	t.Run("list shows each token with its TTL, usages, description and groups", func(t *testing.T) {
		code, out, errOut := skiffToken("list", "--kubeconfig", admin)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "TOKEN TTL EXPIRES USAGES DESCRIPTION EXTRA GROUPS" {
			t.Fatalf("list:\n%s", out)
		}
		var row []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); f[0] == "abcdef.0123456789abcdef" {
				row = f
			}
		}
		if row == nil || row[1] != "59m" || row[3] != "authentication,signing" || row[4]+" "+row[5] != "compose kubelets" ||
			row[6] != "system:bootstrappers:kubeadm:default-node-token" {
			t.Fatalf("row %q in\n%s", row, out)
		}
	})
	t.Run("delete revokes the token: 401", func(t *testing.T) {
		id, _, _ := pki.ParseBootstrapToken(created)
		code, out, errOut := skiffToken("delete", "--kubeconfig", admin, created, "abcdef")
		if code != 0 || !strings.Contains(out, `bootstrap token "`+id+`" deleted`) || !strings.Contains(out, `bootstrap token "abcdef" deleted`) {
			t.Fatalf("exit %d, printed %q: %s", code, out, errOut)
		}
		for _, token := range []string{created, "abcdef.0123456789abcdef"} {
			// The apiserver reads token Secrets from its watch cache, a moment behind
			// etcd: the 401 comes within that moment.
			var err error
			_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				_, err = whoami(token)
				return apierrors.IsUnauthorized(err), nil
			})
			if !apierrors.IsUnauthorized(err) {
				t.Fatalf("%s after delete: %v, want 401", token, err)
			}
		}
		if code, out, _ := skiffToken("list", "--kubeconfig", admin); code != 0 || strings.Count(out, "\n") != 1 {
			t.Fatalf("list after delete:\n%s", out)
		}
	})
	t.Run("a token created with --ttl that has passed is 401", func(t *testing.T) {
		if code, _, errOut := skiffToken("create", "--kubeconfig", admin, "--ttl", "1s", "shortt.0123456789abcdef"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		time.Sleep(2 * time.Second)
		if _, err := whoami("shortt.0123456789abcdef"); !apierrors.IsUnauthorized(err) {
			t.Fatalf("expired token: %v, want 401", err)
		}
	})
	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{nil, {"frobnicate"}, {"delete", "--kubeconfig", admin}, {"list", "--kubeconfig", admin, "extra"}} {
			if code, _, _ := skiffToken(args...); code != 2 {
				t.Errorf("%v: exit %d, want 2", args, code)
			}
		}
	})
}
