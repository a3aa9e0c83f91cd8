package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/componentbasetest"
	"skiff.dev/services/internal/pki"
)

// flagNames are the flags cmd/csr-signer had before it became Options (scripts,
// compose.yaml and deploy/ pass them), and kube's --kube-api-*.
var flagNames = []string{
	"approve-kubelet-serving", "authentication-token-webhook-cache-ttl", "authorization-always-allow-paths",
	"authorization-webhook-cache-authorized-ttl", "authorization-webhook-cache-unauthorized-ttl", "auto-approve",
	"bind-address", "client-ca-file", "control-plane-host", "health-address", "kube-api-burst", "kube-api-content-type",
	"kube-api-qps", "kubeconfig", "log-format", "log-level", "max-duration", "metrics-bind-address", "nats-ca-file",
	"nats-cert-file", "nats-key-file", "nats-url", "pki-dir", "profiling", "secure-port", "service-cluster-ip-range",
	"tls-cert-file", "tls-private-key-file",
}

func TestAddFlags(t *testing.T) {
	o := NewOptions()
	// client-go's defaults, as before the flags existed.
	fs := componentbasetest.CheckFlags(t, o.AddFlags, flagNames, map[string]string{"kube-api-qps": "0", "kube-api-content-type": "",
		"auto-approve": "true", "secure-port": "10260"})
	if err := fs.Parse([]string{"--control-plane-host=a.example", "--control-plane-host=10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example", "10.0.0.1"}; !slices.Equal(o.ControlPlaneHosts, want) {
		t.Errorf("--control-plane-host twice = %v, want %v", o.ControlPlaneHosts, want)
	}
}

func TestValidate(t *testing.T) {
	var usage componentbase.UsageError
	o := NewOptions()
	if err := o.Run(context.Background()); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--pki-dir") {
		t.Errorf("Run without --pki-dir = %v, want a UsageError", err)
	}
	o.PKIDir = t.TempDir()
	o.ServiceClusterIPRange = "10.96.0.0"
	if err := o.Validate(); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--service-cluster-ip-range") {
		t.Errorf("Validate with --service-cluster-ip-range 10.96.0.0 = %v, want a UsageError", err)
	}
}

func TestRunWithoutCA(t *testing.T) {
	err := (&Config{Client: fake.NewClientset()}).Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "building csr-signer: ") {
		t.Fatalf("Run without a CA = %v, want a building csr-signer error", err)
	}
}

// TestRunSigns runs a Config as the all-in-one builds one: an approved kubelet client
// request is signed with CA.
func TestRunSigns(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-n1"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
		Status: certificatesv1.CertificateSigningRequestStatus{Conditions: []certificatesv1.CertificateSigningRequestCondition{
			{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test"},
		}},
	})
	componentbasetest.RunUntil(t, (&Config{Client: client, CA: ca}).Run, func(ctx context.Context) error {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, "node-n1", metav1.GetOptions{})
		if err == nil && len(csr.Status.Certificate) == 0 {
			err = errors.New("node-n1 not signed")
		}
		return err
	})
}
