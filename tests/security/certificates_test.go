package security

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestCertificatesNobodyMayHave: a node asks for serving certificates of names it cannot
// own and for another node's client certificate, a bootstrap token asks for a serving
// certificate, and a node tries to approve its own request. csr-signer leaves every one
// of those requests for a person (each gets its WaitingForApproval event, and no
// certificate), and the approval is forbidden.
func TestCertificatesNobodyMayHave(t *testing.T) {
	tg := startTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := clientFor(t, tg, &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: tg.node.CertFile, KeyFile: tg.node.CertFile}})
	bootstrap := clientFor(t, tg, &rest.Config{BearerToken: tg.bootstrapToken})
	self := "system:node:" + nodeName
	cases := []struct {
		name   string
		client kubernetes.Interface
		signer string
		cn     string
		dns    []string
		ips    []string
	}{
		{"node: serving certificate for the apiserver's names", node, certificatesv1.KubeletServingSignerName, self,
			[]string{"kubernetes.default.svc", "apiserver"}, nil},
		{"node: serving certificate for the kubernetes Service IP", node, certificatesv1.KubeletServingSignerName, self,
			nil, []string{"10.96.0.1"}},
		{"node: serving certificate for etcd and NATS", node, certificatesv1.KubeletServingSignerName, self,
			[]string{"etcd", "nats", "localhost"}, []string{"127.0.0.1"}},
		{"node: another node's client certificate", node, certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:" + otherNode,
			nil, nil},
		{"bootstrap token: a serving certificate", bootstrap, certificatesv1.KubeletServingSignerName, self,
			[]string{nodeName}, nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "attack-" + string(rune('a'+i))
			csr := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: certificatesv1.CertificateSigningRequestSpec{
					Request:    csrPEM(t, tc.cn, tc.dns, tc.ips),
					SignerName: tc.signer,
					Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
				}}
			if tc.signer == certificatesv1.KubeAPIServerClientKubeletSignerName {
				csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
			}
			if _, err := tc.client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create: %v", err)
			}
			waitLeftForAPerson(ctx, t, tg, name)
			got, err := tg.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Certificate) > 0 || len(got.Status.Conditions) > 0 {
				t.Errorf("conditions %+v, certificate of %d bytes: want neither", got.Status.Conditions, len(got.Status.Certificate))
			}
		})
	}
	t.Run("node: approving its own request", func(t *testing.T) {
		csr, err := node.CertificatesV1().CertificateSigningRequests().Get(ctx, "attack-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "SelfApproved"})
		_, err = node.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("approval by the node: %v, want 403", err)
		}
	})
}

// waitLeftForAPerson waits for csr-signer's WaitingForApproval event on the request name:
// its decision not to approve it.
func waitLeftForAPerson(ctx context.Context, t *testing.T, tg *target, name string) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := tg.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",involvedObject.kind=CertificateSigningRequest"})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.Reason == "WaitingForApproval" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("csr-signer said nothing about %s: %v", name, err)
	}
}

// TestBootstrapTokensExpireAndAreRevoked: an expired bootstrap token authenticates no
// one, and deleting the token file revokes the tokens it held.
func TestBootstrapTokensExpireAndAreRevoked(t *testing.T) {
	tg := startTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokenFile := filepath.Join(tg.DataDir, "pki", "bootstrap-tokens.csv")
	data, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	const expired = "abcdef.0123456789abcdef"
	if err := os.WriteFile(tokenFile, append(data, []byte(expired+",2020-01-01T00:00:00Z\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	whoami := func(token string) error {
		_, err := clientFor(t, tg, &rest.Config{BearerToken: token}).AuthenticationV1().SelfSubjectReviews().Create(ctx,
			&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}
	if err := whoami(tg.bootstrapToken); err != nil {
		t.Fatalf("the valid token: %v", err)
	}
	if err := whoami(expired); !apierrors.IsUnauthorized(err) {
		t.Errorf("the expired token: %v, want 401", err)
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if err := whoami(tg.bootstrapToken); !apierrors.IsUnauthorized(err) {
		t.Errorf("a token of the deleted file: %v, want 401", err)
	}
}

// TestTheBootstrapTokenExpiresInADay: the token the all-in-one hands out expires within
// kubeadm's 24 h, and its kubelet no longer holds it once it has its certificate.
func TestTheBootstrapTokenExpiresInADay(t *testing.T) {
	tg := startTarget(t)
	data, err := os.ReadFile(filepath.Join(tg.DataDir, "pki", "bootstrap-tokens.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		tok, exp, found := strings.Cut(strings.TrimSpace(line), ",")
		if tok == "" || strings.HasPrefix(tok, "#") {
			continue
		}
		expiry, err := time.Parse(time.RFC3339, exp)
		if !found || err != nil || time.Until(expiry) > 24*time.Hour {
			t.Errorf("token %s… expires %q; want within 24h", tok[:6], exp)
		}
	}
	if _, err := os.Stat(filepath.Join(tg.DataDir, "kubelet", "bootstrap-kubelet.kubeconfig")); !os.IsNotExist(err) {
		t.Errorf("the kubelet still holds its bootstrap kubeconfig (%v)", err)
	}
}

// clientFor is a clientset of the target's apiserver with cfg's credentials.
func clientFor(t *testing.T, tg *target, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg.Host, cfg.TLSClientConfig.CAData = tg.RESTConfig.Host, tg.RESTConfig.CAData
	cfg.TLSClientConfig.CAFile = tg.RESTConfig.CAFile
	return kubernetes.NewForConfigOrDie(cfg)
}

// csrPEM is a PEM certificate request for cn (O system:nodes) with dns and ips as SANs.
func csrPEM(t *testing.T, cn string, dns, ips []string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
