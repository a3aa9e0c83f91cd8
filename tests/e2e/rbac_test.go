package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRBAC drives RBAC with the real kubectl as a cluster admin would: kubectl create
// role/rolebinding/clusterrole/clusterrolebinding, a user bound to view in one
// namespace, the escalation check, `auth can-i --list`, `auth reconcile`, aggregation
// and the bootstrap policy. Users are impersonated (--as), which the admin may do.
func TestRBAC(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	// refused runs kubectl expecting it to fail, and returns what it printed.
	refused := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := c.kubectl(ctx, args...)
		if err == nil {
			t.Fatalf("kubectl %s succeeded:\n%s", strings.Join(args, " "), out)
		}
		return out
	}
	dir := t.TempDir() // kubectl -f splits on commas, which subtests' names hold
	c.mustKubectl(ctx, "create", "namespace", "team-a")
	c.mustKubectl(ctx, "create", "namespace", "team-b")
	c.mustKubectl(ctx, "run", "web", "--image=nginx", "-n", "team-a")

	t.Run("the bootstrap policy prints as a kubeadm cluster's", func(t *testing.T) {
		out := c.mustKubectl(ctx, "get", "clusterrole", "system:node-bootstrapper", "-o", "yaml")
		expect(t, out, "rbac.authorization.kubernetes.io/autoupdate: \"true\"", "kubernetes.io/bootstrapping: rbac-defaults",
			"- certificates.k8s.io", "- certificatesigningrequests", "- create\n  - get\n  - list\n  - watch")
		expect(t, c.mustKubectl(ctx, "get", "clusterrolebinding", "cluster-admin", "kubeadm:kubelet-bootstrap", "-o", "wide"),
			"ClusterRole/cluster-admin", "system:masters", "ClusterRole/system:node-bootstrapper", "system:bootstrappers")
	})

	t.Run("create rolebinding: a user bound to view lists pods in its namespace", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "rolebinding", "jane-view", "--clusterrole=view", "--user=jane", "-n", "team-a"),
			"rolebinding.rbac.authorization.k8s.io/jane-view created")
		expect(t, c.mustKubectl(ctx, "--as", "jane", "get", "pods", "-n", "team-a"), "web")
	})

	t.Run("the same user gets kube's 403 in another namespace", func(t *testing.T) {
		expect(t, refused(t, "--as", "jane", "get", "pods", "-n", "team-b"),
			`Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "team-b"`)
	})

	t.Run("a rolebinding to a service account lets its token in", func(t *testing.T) {
		c.mustKubectl(ctx, "create", "serviceaccount", "robot", "-n", "team-a")
		c.mustKubectl(ctx, "create", "rolebinding", "robot-view", "--clusterrole=view", "--serviceaccount=team-a:robot", "-n", "team-a")
		token := strings.TrimSpace(c.mustKubectl(ctx, "create", "token", "robot", "-n", "team-a"))
		server := c.mustKubectl(ctx, "config", "view", "-o", "jsonpath={.clusters[0].cluster.server}")
		asRobot := []string{"--kubeconfig", os.DevNull, "--server", server, "--token", token,
			"--certificate-authority", filepath.Join(filepath.Dir(c.Kubeconfig), "pki", "ca.crt")}
		expect(t, c.mustKubectl(ctx, append(asRobot, "get", "pods", "-n", "team-a")...), "web")
		expect(t, refused(t, append(asRobot, "get", "pods", "-n", "team-b")...),
			`User "system:serviceaccount:team-a:robot" cannot list resource "pods" in API group "" in the namespace "team-b"`)
	})

	t.Run("create clusterrole and clusterrolebinding: cluster-wide grants", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes"),
			"clusterrole.rbac.authorization.k8s.io/node-reader created")
		expect(t, c.mustKubectl(ctx, "create", "clusterrolebinding", "jane-nodes", "--clusterrole=node-reader", "--user=jane"),
			"clusterrolebinding.rbac.authorization.k8s.io/jane-nodes created")
		expect(t, c.mustKubectl(ctx, "get", "clusterrolebinding", "jane-nodes", "-o", "wide"), "ClusterRole/node-reader", "jane")
		expect(t, c.mustKubectl(ctx, "--as", "jane", "get", "nodes"), "e2e-sim")
	})

	t.Run("create role: a user grants what it holds", func(t *testing.T) {
		c.mustKubectl(ctx, "create", "clusterrole", "role-writer", "--verb=create,get", "--resource=roles,rolebindings")
		c.mustKubectl(ctx, "create", "rolebinding", "jane-role-writer", "--clusterrole=role-writer", "--user=jane", "-n", "team-a")
		expect(t, c.mustKubectl(ctx, "--as", "jane", "create", "role", "pod-lister", "--verb=list", "--resource=pods", "-n", "team-a"),
			"role.rbac.authorization.k8s.io/pod-lister created")
	})

	t.Run("escalation refused: a role granting more than the user holds", func(t *testing.T) {
		expect(t, refused(t, "--as", "jane", "create", "role", "secrets-deleter", "--verb=delete", "--resource=secrets", "-n", "team-a"),
			`roles.rbac.authorization.k8s.io "secrets-deleter" is forbidden: user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`,
			`{APIGroups:[""], Resources:["secrets"], Verbs:["delete"]}`)
	})

	t.Run("escalation refused: a binding to a role the user does not hold", func(t *testing.T) {
		expect(t, refused(t, "--as", "jane", "create", "rolebinding", "jane-admin", "--clusterrole=admin", "--user=jane", "-n", "team-a"),
			`rolebindings.rbac.authorization.k8s.io "jane-admin" is forbidden: user "jane"`)
	})

	t.Run("auth can-i --list shows the user's rules in the namespace", func(t *testing.T) {
		out := c.mustKubectl(ctx, "--as", "jane", "auth", "can-i", "--list", "-n", "team-a")
		expect(t, out, "Resources", "Non-Resource URLs", "Verbs", "selfsubjectaccessreviews.authorization.k8s.io",
			"roles.rbac.authorization.k8s.io", "[create get]", "[/api/*]")
		var podsLine string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "pods ") {
				podsLine = line
			}
		}
		if !strings.Contains(podsLine, "[get list watch]") {
			t.Errorf("pods line %q, want [get list watch]:\n%s", podsLine, out)
		}
		expect(t, c.mustKubectl(ctx, "--as", "jane", "auth", "can-i", "--list", "-n", "team-b"), "nodes")
		if out := c.mustKubectl(ctx, "--as", "jane", "auth", "can-i", "--list", "-n", "team-b"); strings.Contains(out, "\npods ") {
			t.Errorf("team-b lists pods:\n%s", out)
		}
	})

	t.Run("auth reconcile creates, then adds to, roles and bindings; aggregation follows", func(t *testing.T) {
		manifest := filepath.Join(dir, "rbac.yaml")
		write := func(verbs string) {
			doc := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widget-viewer
  labels:
    rbac.authorization.k8s.io/aggregate-to-view: "true"
rules:
- apiGroups: ["example.com"]
  resources: ["widgets"]
  verbs: ` + verbs + `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cm-reader
  namespace: team-b
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: jane-cm-reader
  namespace: team-b
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: cm-reader
subjects:
- kind: User
  name: jane
  apiGroup: rbac.authorization.k8s.io
`
			if err := os.WriteFile(manifest, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(`["get"]`)
		expect(t, c.mustKubectl(ctx, "auth", "reconcile", "-f", manifest),
			"clusterrole.rbac.authorization.k8s.io/widget-viewer reconciled", "role.rbac.authorization.k8s.io/cm-reader reconciled",
			"rolebinding.rbac.authorization.k8s.io/jane-cm-reader reconciled", "reconciliation required create")
		expect(t, c.mustKubectl(ctx, "--as", "jane", "auth", "can-i", "get", "configmaps", "-n", "team-b"), "yes")
		write(`["get", "watch"]`)
		expect(t, c.mustKubectl(ctx, "auth", "reconcile", "-f", manifest), "reconciliation required update", "missing rules added")
		expect(t, c.mustKubectl(ctx, "get", "clusterrole", "widget-viewer", "-o", "jsonpath={.rules[*].verbs}"), `["get"] ["watch"]`)
		eventually(t, 10*time.Second, func() (bool, string) {
			out := c.mustKubectl(ctx, "get", "clusterrole", "view", "-o", "jsonpath={.rules[*].resources}")
			return strings.Contains(out, "widgets"), "view does not aggregate widget-viewer: " + out
		})
	})

	t.Run("deleting the binding takes the permission away", func(t *testing.T) {
		c.mustKubectl(ctx, "delete", "rolebinding", "jane-view", "-n", "team-a")
		eventually(t, 10*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "--as", "jane", "get", "pods", "-n", "team-a")
			return err != nil && strings.Contains(out, `User "jane" cannot list resource "pods"`), "jane still lists pods: " + out
		})
	})
}
