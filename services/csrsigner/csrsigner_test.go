package csrsigner

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
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

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// signerIdentity is the csr-signer's user.
const signerIdentity = "system:skiff:csr-signer"

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startSigner runs a csr-signer as system:skiff:csr-signer against s until the test ends,
// with cfg's approval settings.
func startSigner(t *testing.T, s *controlplanetest.Server, cfg Config) *Controller {
	t.Helper()
	cfg.Client, cfg.CA = clientFor(t, s.ClientConfig(signerIdentity)), s.CA
	c, err := New(cfg)
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
	s := controlplanetest.StartServer(t)
	startSigner(t, s, Config{AutoApprove: true})
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
	s := controlplanetest.StartServer(t)
	c := startSigner(t, s, Config{AutoApprove: true})
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
	s := controlplanetest.StartServer(t)
	startSigner(t, s, Config{MaxDuration: 2 * time.Hour})
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
	s := controlplanetest.StartServer(t)
	startSigner(t, s, Config{AutoApprove: true})
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

// approveServing is the csr-signer configuration that approves kubelet serving
// requests, with the control-plane names resolving as on a host without them.
var approveServing = Config{AutoApprove: true, ApproveKubeletServing: true, Resolver: hosts{}}

func TestNodeServingCertificateForItsOwnAddresses(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, approveServing)
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
	s := controlplanetest.StartServer(t)
	c := startSigner(t, s, approveServing)
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
	waitLeftPending(t, c, certificatesv1.KubeletServingSignerName, 1)

	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"})
	if _, err := nodeA.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	csr := waitFor(t, nodeA, "a-serving", issued)
	if !hasCondition(csr, certificatesv1.CertificateApproved) {
		t.Fatalf("conditions %+v", csr.Status.Conditions)
	}
}

// waitLeftPending waits until the controller has left at least n requests of signer for
// a person.
func waitLeftPending(t *testing.T, c *Controller, signer string, n float64) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(c.metrics.leftPending.WithLabelValues(signer)) >= n, nil
	}); err != nil {
		t.Fatalf("the approver never decided: %v", err)
	}
}

// waitingForApproval returns the messages of the WaitingForApproval events recorded for
// CSR name, once there is one.
func waitingForApproval(t *testing.T, admin kubernetes.Interface, name string) []string {
	t.Helper()
	var messages []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		messages = nil
		for _, e := range events.Items {
			if e.Reason == "WaitingForApproval" && e.InvolvedObject.Kind == "CertificateSigningRequest" {
				messages = append(messages, e.Message)
			}
		}
		return len(messages) > 0, nil
	})
	if err != nil {
		t.Fatalf("no WaitingForApproval event for %s: %v", name, err)
	}
	return messages
}

// startRecordingSigner is startSigner with a real event recorder that POSTs its events.
func startRecordingSigner(t *testing.T, s *controlplanetest.Server, cfg Config) *Controller {
	t.Helper()
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "csr-signer", Client: clientFor(t, s.ClientConfig(signerIdentity))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	cfg.Recorder = recorder
	return startSigner(t, s, cfg)
}

// TestServingRequestWaitsForAPersonByDefault: without ApproveKubeletServing a node's
// serving request for its very own addresses is left pending, as kube-controller-manager
// leaves it, with an event that says why; a person's approval then gets it signed.
func TestServingRequestWaitsForAPersonByDefault(t *testing.T) {
	s := controlplanetest.StartServer(t)
	c := startRecordingSigner(t, s, Config{AutoApprove: true})
	ctx := context.Background()
	admin, nodeA := clientFor(t, s.Config), clientFor(t, s.ClientConfig("system:node:a", NodesGroup))
	if _, err := nodeA.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "a.internal"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, nodeA, "a-serving", certificatesv1.KubeletServingSignerName, servingUsages, nodeAServing, nil)
	waitLeftPending(t, c, certificatesv1.KubeletServingSignerName, 1)
	if msgs := waitingForApproval(t, admin, "a-serving"); !strings.Contains(msgs[0], "--approve-kubelet-serving") {
		t.Errorf("WaitingForApproval says %q, want the reason", msgs[0])
	}
	csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "a-serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isPending(csr) || issued(csr) {
		t.Fatalf("status %+v, want pending", csr.Status)
	}
	setApproval(t, admin, "a-serving", certificatesv1.CertificateApproved)
	waitFor(t, admin, "a-serving", issued)
}

// TestServingRequestForAnotherNodesAddressWaits: a node that reports another node's
// InternalIP as its own is not approved a certificate for it, and the event says whose
// it is; once that other Node is gone, the request is looked at again and approved.
func TestServingRequestForAnotherNodesAddressWaits(t *testing.T) {
	s := controlplanetest.StartServer(t)
	c := startRecordingSigner(t, s, approveServing)
	ctx := context.Background()
	admin, nodeA, nodeB := clientFor(t, s.Config), clientFor(t, s.ClientConfig("system:node:a", NodesGroup)), clientFor(t, s.ClientConfig("system:node:b", NodesGroup))
	for _, n := range []struct {
		client kubernetes.Interface
		name   string
	}{{nodeB, "b"}, {nodeA, "a"}} {
		if _, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}, {Type: corev1.NodeHostName, Address: n.name + ".internal"},
			}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(t, nodeA, "a-serving", certificatesv1.KubeletServingSignerName, servingUsages,
		request{cn: "system:node:a", orgs: []string{NodesGroup}, dns: []string{"a.internal"}, ips: []string{"10.0.0.2"}}, nil)
	waitLeftPending(t, c, certificatesv1.KubeletServingSignerName, 1)
	if msgs := waitingForApproval(t, admin, "a-serving"); !strings.Contains(msgs[0], `also node "b"'s`) {
		t.Errorf("WaitingForApproval says %q, want whose address it is", msgs[0])
	}
	if err := admin.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, nodeA, "a-serving", issued)
}
