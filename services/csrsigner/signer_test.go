package csrsigner

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/internal/pki"
)

func TestSignerDuration(t *testing.T) {
	s := &Signer{MaxDuration: 24 * time.Hour}
	cases := []struct {
		name string
		asks *int32
		want time.Duration
	}{
		{"no expirationSeconds gets the maximum", nil, 24 * time.Hour},
		{"a shorter request is honoured", ptr.To[int32](3600), time.Hour},
		{"a longer request is capped at the maximum", ptr.To[int32](7 * 24 * 3600), 24 * time.Hour},
		{"below ten minutes is raised to ten minutes", ptr.To[int32](60), 10 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Duration(tc.asks); got != tc.want {
				t.Fatalf("Duration = %v, want %v", got, tc.want)
			}
		})
	}
	if got := (&Signer{}).Duration(nil); got != DefaultMaxDuration {
		t.Fatalf("default maximum = %v, want %v", got, DefaultMaxDuration)
	}
}

func parseCertPEM(t testing.TB, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestSignerSign(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s := &Signer{CA: ca, Now: func() time.Time { return now }}

	t.Run("kubelet serving certificate carries the SANs and server auth", func(t *testing.T) {
		csr := csrFor(t, nodeA, certificatesv1.KubeletServingSignerName, servingUsages, nodeAServing)
		csr.Spec.ExpirationSeconds = ptr.To[int32](3600)
		out, err := s.Sign(csr)
		if err != nil {
			t.Fatal(err)
		}
		cert := parseCertPEM(t, out)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), DNSName: "a.internal", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("verify: %v", err)
		}
		if cert.Subject.CommonName != "system:node:a" || !slices.Equal(cert.Subject.Organization, []string{NodesGroup}) {
			t.Errorf("subject %v", cert.Subject)
		}
		if len(cert.IPAddresses) != 1 || cert.IPAddresses[0].String() != "10.0.0.1" {
			t.Errorf("IP SANs %v", cert.IPAddresses)
		}
		if got := cert.NotAfter.Sub(cert.NotBefore); got != time.Hour {
			t.Errorf("lifetime %v, want 1h", got)
		}
		if cert.IsCA {
			t.Error("issued a CA certificate")
		}
	})

	t.Run("request that does not fit its signer is a ValidationError", func(t *testing.T) {
		csr := csrFor(t, someone, certificatesv1.KubeAPIServerClientSignerName, servingUsages, request{cn: "jane"})
		_, err := s.Sign(csr)
		var invalid *ValidationError
		if !errors.As(err, &invalid) {
			t.Fatalf("got %v, want a ValidationError", err)
		}
	})

	t.Run("kube-apiserver-client certificate for any subject", func(t *testing.T) {
		csr := csrFor(t, someone, certificatesv1.KubeAPIServerClientSignerName, clientUsages, request{cn: "jane", orgs: []string{"developers"}})
		out, err := s.Sign(csr)
		if err != nil {
			t.Fatal(err)
		}
		cert := parseCertPEM(t, out)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("verify: %v", err)
		}
	})
}
