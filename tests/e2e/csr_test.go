package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"

	"skiff.dev/tests/internal/skifftest"
)

// buildService builds skiff.dev/services/cmd/<name> into dir.
func buildService(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", out, "skiff.dev/services/cmd/"+name)
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, msg)
	}
	return out
}

// startProcess runs a service binary until the test ends (SIGTERM, then a wait of up to
// 30 s), logging its output if the test fails.
func startProcess(t *testing.T, name string, args ...string) {
	t.Helper()
	logs := &skifftest.SyncBuffer{}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within 30s of SIGTERM", filepath.Base(name))
		}
		if t.Failed() {
			t.Logf("%s logs:\n%s", filepath.Base(name), logs)
		}
	})
}

// csrRow returns the `kubectl get csr` row whose signer and requestor contain the given
// strings, as its fields (NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION).
func csrRow(out, signer, requestor string) []string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[2] == signer && strings.Contains(f[3], requestor) {
			return f
		}
	}
	return nil
}

// csrNamed returns, from "NAME BASE64-PEM-REQUEST" lines, the CSR whose subject CN is cn.
func csrNamed(t *testing.T, out, cn string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		name, request, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(request)
		if err != nil {
			continue
		}
		block, _ := pem.Decode(data)
		if block == nil {
			continue
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err == nil && req.Subject.CommonName == cn {
			return name
		}
	}
	return ""
}

// clientCSRManifest is a CertificateSigningRequest for a person's client certificate.
func clientCSRManifest(t *testing.T, name, user string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: user, Organization: []string{"developers"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	request := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	return fmt.Sprintf(`apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: %s
spec:
  request: %s
  signerName: kubernetes.io/kube-apiserver-client
  expirationSeconds: 86400
  usages: [digital signature, client auth]
`, name, request)
}

// TestCertificateSigningRequests drives the CSR flow with the real kubectl against an
// all-in-one whose csr-signer does not auto-approve: a new kubelet with only a bootstrap
// token waits until `kubectl certificate approve`, then joins; a person's requests are
// approved or denied with kubectl.
func TestCertificateSigningRequests(t *testing.T) {
	c := startSkiff(t, "sim", "--csr-auto-approve=false")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pkiDir := filepath.Join(filepath.Dir(c.Kubeconfig), "pki")
	bin := t.TempDir()
	kubeletBin, runtimeBin := buildService(t, bin, "kubelet"), buildService(t, bin, "runtime")

	const node = "e2e-joiner"
	dir := t.TempDir()
	socket := filepath.Join(dir, "cri.sock")
	startProcess(t, runtimeBin, "--runtime", "sim", "--listen", socket, "--root-dir", filepath.Join(dir, "runtime"))
	eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(socket)
		return err == nil, fmt.Sprint(err)
	})
	kubeletDir := filepath.Join(dir, "kubelet")
	startProcess(t, kubeletBin, "--node-name", node,
		"--bootstrap-kubeconfig", filepath.Join(pkiDir, "bootstrap-kubelet.kubeconfig"),
		"--kubeconfig", filepath.Join(kubeletDir, "kubelet.kubeconfig"), "--root-dir", kubeletDir,
		"--container-runtime-endpoint", "unix://"+socket,
		"--node-ip", "127.0.0.1", "--address", "127.0.0.1", "--port", strconv.Itoa(freePort(t)))

	var clientCSR string
	t.Run("the new kubelet's CSR waits for a person", func(t *testing.T) {
		// The all-in-one's own kubelet bootstraps too, with the same token: the joiner's
		// request is the one whose subject names it.
		eventually(t, 60*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "csr", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.request}{"\n"}{end}`)
			clientCSR = csrNamed(t, out, "system:node:"+node)
			return clientCSR != "", out
		})
		out := c.mustKubectl(ctx, "get", "csr")
		for _, col := range []string{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"} {
			if !strings.Contains(out, col) {
				t.Errorf("kubectl get csr lacks column %s:\n%s", col, out)
			}
		}
		row := csrRow(out, "kubernetes.io/kube-apiserver-client-kubelet", "system:bootstrap:")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 6 && f[0] == clientCSR {
				row = f
			}
		}
		if row == nil || row[0] != clientCSR || !strings.HasPrefix(row[3], "system:bootstrap:") || row[4] != "<none>" || row[5] != "Pending" {
			t.Errorf("row %v, want %s requested by system:bootstrap:<id>, REQUESTEDDURATION <none> and CONDITION Pending", row, clientCSR)
		}
		if out, err := c.kubectl(ctx, "get", "node", node); err == nil {
			t.Errorf("node %s exists before its certificate was approved:\n%s", node, out)
		}
	})
	if clientCSR == "" {
		t.FailNow()
	}

	t.Run("kubectl certificate approve lets the kubelet join", func(t *testing.T) {
		want := "certificatesigningrequest.certificates.k8s.io/" + clientCSR + " approved"
		if out := c.mustKubectl(ctx, "certificate", "approve", clientCSR); !strings.Contains(out, want) {
			t.Errorf("kubectl certificate approve printed %q, want %q", out, want)
		}
		eventually(t, 60*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return out == "True", out
		})
		out := c.mustKubectl(ctx, "get", "csr", clientCSR)
		if !strings.Contains(out, "Approved,Issued") {
			t.Errorf("kubectl get csr %s:\n%s\nwant Approved,Issued", clientCSR, out)
		}
		certs, err := certutil.CertsFromFile(filepath.Join(kubeletDir, "pki", "kubelet-client-current.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if cn := certs[0].Subject.CommonName; cn != "system:node:"+node {
			t.Errorf("kubelet client certificate CN %q, want system:node:%s", cn, node)
		}
	})

	t.Run("the all-in-one's own kubelet waits for a person as well, then joins", func(t *testing.T) {
		const own = "e2e-sim"
		if out, err := c.kubectl(ctx, "get", "node", own); err == nil {
			t.Fatalf("node %s exists before its certificate was approved:\n%s", own, out)
		}
		var name string
		eventually(t, 30*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "csr", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.request}{"\n"}{end}`)
			name = csrNamed(t, out, "system:node:"+own)
			return name != "", out
		})
		c.mustKubectl(ctx, "certificate", "approve", name)
		eventually(t, 60*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "node", own, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return out == "True", out
		})
	})

	t.Run("the kubelet's serving CSR is approved by a person too", func(t *testing.T) {
		var row []string
		eventually(t, 60*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "csr")
			row = csrRow(out, "kubernetes.io/kubelet-serving", "system:node:"+node)
			return row != nil, out
		})
		c.mustKubectl(ctx, "certificate", "approve", row[0])
		eventually(t, 30*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "csr", row[0])
			return strings.Contains(out, "Approved,Issued"), out
		})
	})

	t.Run("kubectl certificate approve and deny a person's requests", func(t *testing.T) {
		for _, name := range []string{"jane", "joe"} {
			manifest := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(manifest, []byte(clientCSRManifest(t, name, name)), 0o600); err != nil {
				t.Fatal(err)
			}
			if out := c.mustKubectl(ctx, "create", "-f", manifest); !strings.Contains(out, "certificatesigningrequest.certificates.k8s.io/"+name+" created") {
				t.Errorf("kubectl create printed %q", out)
			}
		}
		row := csrRow(c.mustKubectl(ctx, "get", "csr", "jane"), "kubernetes.io/kube-apiserver-client", "admin")
		if row == nil || row[4] != "24h" || row[5] != "Pending" {
			t.Errorf("jane's row %v, want REQUESTOR admin, REQUESTEDDURATION 24h, Pending", row)
		}
		if out := c.mustKubectl(ctx, "certificate", "approve", "jane"); !strings.Contains(out, "certificatesigningrequest.certificates.k8s.io/jane approved") {
			t.Errorf("approve printed %q", out)
		}
		if out := c.mustKubectl(ctx, "certificate", "deny", "joe"); !strings.Contains(out, "certificatesigningrequest.certificates.k8s.io/joe denied") {
			t.Errorf("deny printed %q", out)
		}
		eventually(t, 30*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "csr", "jane")
			return strings.Contains(out, "Approved,Issued"), out
		})
		out := c.mustKubectl(ctx, "get", "csr", "joe")
		if !strings.Contains(out, "Denied") || strings.Contains(out, "Issued") {
			t.Errorf("kubectl get csr joe:\n%s\nwant Denied without a certificate", out)
		}
		certPEM := c.mustKubectl(ctx, "get", "csr", "jane", "-o", "jsonpath={.status.certificate}")
		data, err := base64.StdEncoding.DecodeString(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		certs, err := certutil.ParseCertsPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		if got := certs[0].NotAfter.Sub(certs[0].NotBefore); certs[0].Subject.CommonName != "jane" || got != 24*time.Hour {
			t.Errorf("jane's certificate: CN %q, lifetime %v; want jane, the requested 24h", certs[0].Subject.CommonName, got)
		}
	})
}
