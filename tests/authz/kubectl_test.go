package authz

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kubectl runs the real /usr/bin/kubectl with kubeconfig and returns its standard output
// and exit code (warnings on standard error are dropped).
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.Output()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return strings.TrimSpace(string(out)), code
}

// TestKubectlAuth drives `kubectl auth whoami` and `kubectl auth can-i` against the
// apiserver's SelfSubjectReview and SelfSubjectAccessReview, which answer from the same
// authorizer as every request.
func TestKubectlAuth(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is not installed: this suite drives the real kubectl")
	}
	c := setup(t)
	admin := filepath.Join(c.srv.PKIDir, "admin.kubeconfig")
	asNodeA := []string{"--as", "system:node:node-a", "--as-group", "system:nodes"}
	cases := []struct {
		name     string
		args     []string
		wantOut  string
		wantCode int
	}{
		{"whoami as admin", []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"}, `admin ["system:masters","system:authenticated"]`, 0},
		{"whoami as an impersonated node", append([]string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}, asNodeA...), "system:node:node-a", 0},
		{"admin can list pods", []string{"auth", "can-i", "list", "pods", "--all-namespaces"}, "yes", 0},
		{"node A cannot list every pod", append([]string{"auth", "can-i", "list", "pods", "--all-namespaces"}, asNodeA...), "no", 1},
		{"node A can get its own pod", append([]string{"auth", "can-i", "get", "pods/pod-on-node-a"}, asNodeA...), "yes", 0},
		{"node A cannot get node B's pod", append([]string{"auth", "can-i", "get", "pods/pod-on-node-b"}, asNodeA...), "no", 1},
		{"node A can patch its own node status", append([]string{"auth", "can-i", "patch", "nodes/node-a", "--subresource", "status"}, asNodeA...), "yes", 0},
		{"node A cannot patch node B's status", append([]string{"auth", "can-i", "patch", "nodes/node-b", "--subresource", "status"}, asNodeA...), "no", 1},
		{"the scheduler can create bindings", []string{"auth", "can-i", "create", "pods", "--subresource", "binding", "--as", "system:kube-scheduler"}, "yes", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := kubectl(t, admin, tc.args...)
			if code != tc.wantCode || !strings.HasPrefix(out, tc.wantOut) {
				t.Fatalf("kubectl %s: exit %d, output %q; want exit %d, output %q", strings.Join(tc.args, " "), code, out, tc.wantCode, tc.wantOut)
			}
		})
	}
	t.Run("a node cannot impersonate", func(t *testing.T) {
		cfg := c.srv.ClientConfig("system:node:node-a", "system:nodes")
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}
		_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		wantCode(t, err, 403)
		if !strings.Contains(err.Error(), `User "system:node:node-a" cannot impersonate resource "users"`) {
			t.Fatalf("message: %v", err)
		}
	})
}
