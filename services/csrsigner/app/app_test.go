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
	"flag"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
	"skiff.dev/services/internal/componentbase/runtest"
	"skiff.dev/services/internal/pki"
)

// csr-signer's flags, defaults and usages are those of cmd/csr-signer before package app
// (testdata/flags.golden is its -h) plus componentbase's --kube-api-* with client-go's
// defaults (JSON, 5 QPS), as before: scripts, compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("csr-signer", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestControlPlaneHostRepeats(t *testing.T) {
	o := NewOptions()
	flagtest.Parse(t, o.AddFlags, "--control-plane-host=a.example", "--control-plane-host=10.0.0.1")
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
	runtest.Until(t, (&Config{Client: client, CA: ca}).Run, func(ctx context.Context) error {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, "node-n1", metav1.GetOptions{})
		if err == nil && len(csr.Status.Certificate) == 0 {
			err = errors.New("node-n1 not signed")
		}
		return err
	})
}
