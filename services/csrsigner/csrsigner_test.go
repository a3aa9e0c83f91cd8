package csrsigner

import (
	"context"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/apiservertest"
)

// signerIdentity is the csr-signer's user (DESIGN.md, "Identities").
const signerIdentity = "system:skiff:csr-signer"

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startSigner runs a csr-signer as system:skiff:csr-signer against s until the test ends.
func startSigner(t *testing.T, s *apiservertest.Server, autoApprove bool, maxDuration time.Duration) *Controller {
	t.Helper()
	c, err := New(Config{Client: clientFor(t, s.ClientConfig(signerIdentity)), CA: s.CA, AutoApprove: autoApprove, MaxDuration: maxDuration})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("Run: %v", err)
		}
	})
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.Ready() == nil, nil
	}); err != nil {
		t.Fatalf("csr-signer not ready: %v", err)
	}
	return c
}

func create(t *testing.T, client kubernetes.Interface, name, signer string, usages []certificatesv1.KeyUsage, req request, expirationSeconds *int32) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: req.pem(t), SignerName: signer, Usages: usages, ExpirationSeconds: expirationSeconds},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create csr %s: %v", name, err)
	}
	return csr
}

// waitFor polls csr name until done accepts it.
func waitFor(t *testing.T, client kubernetes.Interface, name string, done func(*certificatesv1.CertificateSigningRequest) bool) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var last *certificatesv1.CertificateSigningRequest
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = csr
		return done(csr), nil
	})
	if err != nil {
		t.Fatalf("csr %s: %v; last seen status %+v", name, err, last.Status)
	}
	return last
}

func issued(csr *certificatesv1.CertificateSigningRequest) bool {
	return len(csr.Status.Certificate) > 0
}

func setApproval(t *testing.T, client kubernetes.Interface, name string, condition certificatesv1.RequestConditionType) {
	t.Helper()
	ctx := context.Background()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: condition, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "by the test",
	})
	if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%s %s: %v", condition, name, err)
	}
}

func TestBootstrapperGetsNodeClientCertificate(t *testing.T) {
	s := apiservertest.StartServer(t)
	startSigner(t, s, true, 0)
	bootstrap := clientFor(t, s.TokenConfig(s.BootstrapToken.String()))

	create(t, bootstrap, "node-a-client", certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, nodeAClient, ptr.To[int32](3600))
	csr := waitFor(t, bootstrap, "node-a-client", issued)

	if !hasCondition(csr, certificatesv1.CertificateApproved) || csr.Status.Conditions[0].Reason != "AutoApproved" {
		t.Errorf("conditions %+v, want Approved/AutoApproved", csr.Status.Conditions)
	}
	if csr.Spec.Username != "system:bootstrap:"+s.BootstrapToken.ID {
		t.Errorf("requester %q", csr.Spec.Username)
	}
	cert := parseCertPEM(t, csr.Status.Certificate)
	if cert.Subject.CommonName != "system:node:a" || !slices.Equal(cert.Subject.Organization, []string{NodesGroup}) {
		t.Errorf("subject %v", cert.Subject)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: s.CA.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate does not chain to the cluster CA as a client certificate: %v", err)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got != time.Hour {
		t.Errorf("lifetime %v, want the requested 1h", got)
	}
}

func TestNodeAskingAnotherNodesCertificateIsNotApproved(t *testing.T) {
	s := apiservertest.StartServer(t)
	c := startSigner(t, s, true, 0)
	nodeB := clientFor(t, s.ClientConfig("system:node:b", NodesGroup))

	create(t, nodeB, "b-wants-a", certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, nodeAClient, nil)
	signer := certificatesv1.KubeAPIServerClientKubeletSignerName
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(c.metrics.leftPending.WithLabelValues(signer)) >= 1, nil
	}); err != nil {
		t.Fatalf("the approver never decided: %v", err)
	}
	csr, err := clientFor(t, s.Config).CertificatesV1().CertificateSigningRequests().Get(context.Background(), "b-wants-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isPending(csr) || issued(csr) {
		t.Fatalf("status %+v, want pending without a certificate", csr.Status)
	}
	if got := testutil.ToFloat64(c.metrics.approved.WithLabelValues(signer)); got != 0 {
		t.Fatalf("approved %v requests", got)
	}
}

func TestWithoutAutoApprovalAPersonDecides(t *testing.T) {
	s := apiservertest.StartServer(t)
	startSigner(t, s, false, 2*time.Hour)
	admin := clientFor(t, s.Config)
	bootstrap := clientFor(t, s.TokenConfig(s.BootstrapToken.String()))

	create(t, bootstrap, "denied", certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, nodeAClient, nil)
	create(t, bootstrap, "approved", certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, nodeAClient, ptr.To[int32](10*3600))
	setApproval(t, admin, "denied", certificatesv1.CertificateDenied)
	setApproval(t, admin, "approved", certificatesv1.CertificateApproved)

	csr := waitFor(t, admin, "approved", issued)
	if got := parseCertPEM(t, csr.Status.Certificate); got.NotAfter.Sub(got.NotBefore) != 2*time.Hour {
		t.Errorf("lifetime %v, want 10h capped to the 2h maximum", got.NotAfter.Sub(got.NotBefore))
	}
	denied, err := admin.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "denied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if issued(denied) || hasCondition(denied, certificatesv1.CertificateApproved) {
		t.Errorf("denied request: %+v", denied.Status)
	}
}

func TestApprovedRequestTheSignerRefusesFails(t *testing.T) {
	s := apiservertest.StartServer(t)
	startSigner(t, s, true, 0)
	admin := clientFor(t, s.Config)

	create(t, admin, "server-usage", certificatesv1.KubeAPIServerClientSignerName, servingUsages, request{cn: "jane"}, nil)
	setApproval(t, admin, "server-usage", certificatesv1.CertificateApproved)
	csr := waitFor(t, admin, "server-usage", func(c *certificatesv1.CertificateSigningRequest) bool {
		return hasCondition(c, certificatesv1.CertificateFailed)
	})
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateFailed && (c.Reason != "SignerValidationFailure" || c.Message == "") {
			t.Errorf("Failed condition %+v", c)
		}
	}
	if issued(csr) {
		t.Error("a certificate was issued")
	}
}

func TestNodeServingCertificateForItsOwnAddresses(t *testing.T) {
	s := apiservertest.StartServer(t)
	startSigner(t, s, true, 0)
	nodeA := clientFor(t, s.ClientConfig("system:node:a", NodesGroup))

	// The request comes before the Node exists; it is approved once the Node reports
	// the addresses it names.
	create(t, nodeA, "a-serving", certificatesv1.KubeletServingSignerName, servingUsages, nodeAServing, nil)
	_, err := nodeA.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "a.internal"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr := waitFor(t, nodeA, "a-serving", issued)
	cert := parseCertPEM(t, csr.Status.Certificate)
	if err := cert.VerifyHostname("10.0.0.1"); err != nil {
		t.Error(err)
	}
}

func TestServingRequestIsApprovedOnceTheNodeReportsItsAddress(t *testing.T) {
	s := apiservertest.StartServer(t)
	c := startSigner(t, s, true, 0)
	ctx := context.Background()
	nodeA := clientFor(t, s.ClientConfig("system:node:a", NodesGroup))
	node, err := nodeA.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "a.internal"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	create(t, nodeA, "a-serving", certificatesv1.KubeletServingSignerName, servingUsages, nodeAServing, nil)
	signer := certificatesv1.KubeletServingSignerName
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(c.metrics.leftPending.WithLabelValues(signer)) >= 1, nil
	}); err != nil {
		t.Fatalf("the approver never decided: %v", err)
	}

	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"})
	if _, err := nodeA.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	csr := waitFor(t, nodeA, "a-serving", issued)
	if !hasCondition(csr, certificatesv1.CertificateApproved) {
		t.Fatalf("conditions %+v", csr.Status.Conditions)
	}
}
