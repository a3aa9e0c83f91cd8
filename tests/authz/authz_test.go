// Package authz is the authorization and authentication matrix, run against
// the real apiserver (controlplanetest: real etcd, real TLS on loopback): each row is a named
// test case that says who asks, what they ask, and the answer Kubernetes would give.
package authz

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"skiff.dev/services/controlplanetest"
)

// cluster is one apiserver with two nodes, a pod bound to each, and their leases.
type cluster struct {
	srv          *controlplanetest.Server
	admin        kubernetes.Interface
	nodeA, nodeB kubernetes.Interface
}

func setup(t *testing.T) *cluster {
	t.Helper()
	srv := controlplanetest.StartServer(t)
	c := &cluster{
		srv:   srv,
		admin: kubernetes.NewForConfigOrDie(srv.Config),
		nodeA: kubernetes.NewForConfigOrDie(srv.ClientConfig("system:node:node-a", "system:nodes")),
		nodeB: kubernetes.NewForConfigOrDie(srv.ClientConfig("system:node:node-b", "system:nodes")),
	}
	ctx := context.Background()
	for _, n := range []struct {
		name   string
		client kubernetes.Interface
	}{{"node-a", c.nodeA}, {"node-b", c.nodeB}} {
		// Each node registers itself and takes its lease, as a kubelet does.
		if _, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s registers itself: %v", n.name, err)
		}
		holder := n.name
		if _, err := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s creates its lease: %v", n.name, err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-on-" + n.name},
			Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := c.admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// wantCode fails unless err is an API status with code.
func wantCode(t *testing.T, err error, code int32) {
	t.Helper()
	var status apierrors.APIStatus
	if code == 0 {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	if !errors.As(err, &status) || status.Status().Code != code {
		t.Fatalf("want %d, got %v", code, err)
	}
}

func TestAuthorizationMatrix(t *testing.T) {
	c := setup(t)
	ctx := context.Background()

	t.Run("node A reads a pod bound to node B: 403", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Pods("default").Get(ctx, "pod-on-node-b", metav1.GetOptions{})
		wantCode(t, err, 403)
		want := `pods "pod-on-node-b" is forbidden: User "system:node:node-a" cannot get resource "pods" in API group "" in the namespace "default": no relationship found between node 'node-a' and this object`
		if err.Error() != want {
			t.Fatalf("message\n got %s\nwant %s", err, want)
		}
	})
	t.Run("node A reads a pod bound to itself", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Pods("default").Get(ctx, "pod-on-node-a", metav1.GetOptions{})
		wantCode(t, err, 0)
	})
	t.Run("node A lists pods without selecting its node: 403", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantCode(t, err, 403)
	})
	t.Run("node A lists pods bound to itself", func(t *testing.T) {
		list, err := c.nodeA.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
		wantCode(t, err, 0)
		if len(list.Items) != 1 || list.Items[0].Name != "pod-on-node-a" {
			t.Fatalf("listed %d pods", len(list.Items))
		}
	})
	t.Run("node A lists pods bound to node B: 403", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-b"})
		wantCode(t, err, 403)
	})
	t.Run("node A updates node B's status: 403", func(t *testing.T) {
		node, err := c.admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Phase = corev1.NodeRunning
		_, err = c.nodeA.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		wantCode(t, err, 403)
	})
	t.Run("node A patches node B's status: 403", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		wantCode(t, err, 403)
	})
	t.Run("node A updates its own status", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		wantCode(t, err, 0)
	})
	t.Run("node A updates node B's Lease: 403", func(t *testing.T) {
		lease, err := c.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "node-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.RenewTime = &now
		_, err = c.nodeA.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, lease, metav1.UpdateOptions{})
		wantCode(t, err, 403)
	})
	t.Run("node A creates a Lease named for node B: 403", func(t *testing.T) {
		_, err := c.nodeA.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
		wantCode(t, err, 403)
	})
	t.Run("node A registers a Node named node-c: 403", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
		wantCode(t, err, 403)
	})
	t.Run("node A updates the status of its own pod", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Pods("default").Patch(ctx, "pod-on-node-a", types.StrategicMergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		wantCode(t, err, 0)
	})
	t.Run("node A updates the status of node B's pod: 403", func(t *testing.T) {
		_, err := c.nodeA.CoreV1().Pods("default").Patch(ctx, "pod-on-node-b", types.StrategicMergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		wantCode(t, err, 403)
	})
	t.Run("node A creates a pod that is not a mirror pod: 403", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sneaky"},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		_, err := c.nodeA.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		wantCode(t, err, 403)
	})
	t.Run("node A creates its own mirror pod", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-node-a", Annotations: map[string]string{"kubernetes.io/config.mirror": "hash"}},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		_, err := c.nodeA.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		wantCode(t, err, 0)
	})
	t.Run("node A deletes a namespace: 403", func(t *testing.T) {
		wantCode(t, c.nodeA.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{}), 403)
	})

	boot := kubernetes.NewForConfigOrDie(c.srv.TokenConfig(c.srv.BootstrapToken.String()))
	t.Run("a bootstrap token lists pods: 403", func(t *testing.T) {
		_, err := boot.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantCode(t, err, 403)
		if !strings.Contains(err.Error(), `User "system:bootstrap:`+c.srv.BootstrapToken.ID+`" cannot list resource "pods"`) {
			t.Fatalf("message: %v", err)
		}
	})
	t.Run("a bootstrap token creates and reads its own CSR", func(t *testing.T) {
		csr := newCSR(t, "boot-own", "system:node:node-z", []string{"system:nodes"})
		created, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		wantCode(t, err, 0)
		if created.Spec.Username != "system:bootstrap:"+c.srv.BootstrapToken.ID {
			t.Fatalf("spec.username %q", created.Spec.Username)
		}
		_, err = boot.CertificatesV1().CertificateSigningRequests().Get(ctx, "boot-own", metav1.GetOptions{})
		wantCode(t, err, 0)
		_, err = boot.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=boot-own"})
		wantCode(t, err, 0)
	})
	t.Run("a bootstrap token reads another's CSR: 403", func(t *testing.T) {
		if _, err := c.admin.CertificatesV1().CertificateSigningRequests().Create(ctx, newCSR(t, "admins", "someone", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := boot.CertificatesV1().CertificateSigningRequests().Get(ctx, "admins", metav1.GetOptions{})
		wantCode(t, err, 403)
		_, err = boot.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		wantCode(t, err, 403)
	})
	t.Run("a bootstrap token approves a CSR: 403", func(t *testing.T) {
		csr, err := boot.CertificatesV1().CertificateSigningRequests().Get(ctx, "boot-own", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Self"})
		_, err = boot.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, "boot-own", csr, metav1.UpdateOptions{})
		wantCode(t, err, 403)
	})

	t.Run("the scheduler binds a pod, reads nodes and preempts, but creates no pod", func(t *testing.T) {
		sched := kubernetes.NewForConfigOrDie(c.srv.ClientConfig("system:kube-scheduler"))
		if _, err := c.admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, sched.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "pending"},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}, metav1.CreateOptions{}), 0)
		_, err := sched.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		wantCode(t, err, 0)
		_, err = sched.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "own"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
		wantCode(t, err, 403)
		// Preemption deletes the pods it evicts, as kube's system:kube-scheduler may.
		wantCode(t, sched.CoreV1().Pods("default").Delete(ctx, "pending", metav1.DeleteOptions{}), 0)
	})
	t.Run("csr-signer reads CSRs but not pods", func(t *testing.T) {
		signer := kubernetes.NewForConfigOrDie(c.srv.ClientConfig("system:skiff:csr-signer"))
		_, err := signer.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		wantCode(t, err, 0)
		_, err = signer.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantCode(t, err, 403)
	})
}

func TestAuthenticationMatrix(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	ctx := context.Background()

	t.Run("no client certificate and no token: 401", func(t *testing.T) {
		_, err := kubernetes.NewForConfigOrDie(srv.AnonymousConfig()).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantCode(t, err, 401)
	})
	t.Run("no credential may still read /healthz and /version", func(t *testing.T) {
		client, err := rest.HTTPClientFor(srv.AnonymousConfig())
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/healthz", "/version"} {
			resp, err := client.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
		}
	})
	t.Run("a token that is not a bootstrap token: 401", func(t *testing.T) {
		_, err := kubernetes.NewForConfigOrDie(srv.TokenConfig("not-a-token")).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantCode(t, err, 401)
	})
	t.Run("a bootstrap token with the wrong secret: 401", func(t *testing.T) {
		_, err := kubernetes.NewForConfigOrDie(srv.TokenConfig(srv.BootstrapToken.ID+".0000000000000000")).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantCode(t, err, 401)
	})
	t.Run("an expired bootstrap token: 401", func(t *testing.T) {
		const token = "expire.0123456789abcdef"
		srv.SetBootstrapTokens(map[string]time.Time{token: time.Now().Add(-time.Minute)})
		_, err := kubernetes.NewForConfigOrDie(srv.TokenConfig(token)).CertificatesV1().CertificateSigningRequests().Create(ctx, newCSR(t, "expired", "x", nil), metav1.CreateOptions{})
		wantCode(t, err, 401)
		// The same token with an expiration ahead is accepted: the 401 came from the
		// expiration, not from a file the apiserver did not read.
		srv.SetBootstrapTokens(map[string]time.Time{token: time.Now().Add(time.Hour)})
		_, err = kubernetes.NewForConfigOrDie(srv.TokenConfig(token)).CertificatesV1().CertificateSigningRequests().Create(ctx, newCSR(t, "not-expired", "x", nil), metav1.CreateOptions{})
		wantCode(t, err, 0)
	})
	t.Run("a client certificate from another CA: TLS handshake refused", func(t *testing.T) {
		cert := foreignClientCert(t, "admin", "system:masters")
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(srv.CA.CertPEM)
		// GetClientCertificate sends the certificate even though the server asked for
		// one from its own CA (with Certificates, Go's client would send none).
		conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), &tls.Config{RootCAs: roots,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }})
		if err == nil {
			// TLS 1.3 reports the server's rejection of the client certificate on the
			// first read.
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("handshake with a foreign client certificate: %v", err)
		}
	})
	t.Run("a client certificate names the user and groups", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(srv.ClientConfig("jane", "team-a", "team-b"))
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		wantCode(t, err, 0)
		got := fmt.Sprintf("%s %v", review.Status.UserInfo.Username, review.Status.UserInfo.Groups)
		if got != "jane [team-a team-b system:authenticated]" {
			t.Fatalf("whoami: %s", got)
		}
	})
}

// newCSR is a CertificateSigningRequest for a fresh P-256 key with subject CN=cn, O=orgs,
// for the kubelet client signer.
func newCSR(t *testing.T, name, cn string, orgs []string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := certutil.MakeCSR(key, &pkix.Name{CommonName: cn, Organization: orgs}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrPEM,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

// foreignClientCert is a client certificate for user in group from a self-signed CA the
// apiserver has never seen.
func foreignClientCert(t *testing.T, user, group string) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: user, Organization: []string{group}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestBootstrapTokenSecrets authenticates bootstrap tokens stored as kube-system Secrets
// of type bootstrap.kubernetes.io/token, as kubeadm creates them.
func TestBootstrapTokenSecrets(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	create := func(id, secret string, data map[string]string) {
		t.Helper()
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
			Type:       "bootstrap.kubernetes.io/token",
			StringData: map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true"}}
		for k, v := range data {
			sec.StringData[k] = v
		}
		if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("secret", "0123456789abcdef", nil)
	create("expird", "0123456789abcdef", map[string]string{"expiration": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
	create("nouse0", "0123456789abcdef", map[string]string{"usage-bootstrap-authentication": "false"})
	whoami := func(token string) (string, error) {
		review, err := kubernetes.NewForConfigOrDie(srv.TokenConfig(token)).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %v", review.Status.UserInfo.Username, review.Status.UserInfo.Groups), nil
	}
	t.Run("a token Secret authenticates as system:bootstrap:<id>", func(t *testing.T) {
		got, err := whoami("secret.0123456789abcdef")
		wantCode(t, err, 0)
		if got != "system:bootstrap:secret [system:bootstrappers system:authenticated]" {
			t.Fatalf("whoami: %s", got)
		}
	})
	t.Run("a token Secret with the wrong secret: 401", func(t *testing.T) {
		_, err := whoami("secret.fedcba9876543210")
		wantCode(t, err, 401)
	})
	t.Run("an expired token Secret: 401", func(t *testing.T) {
		_, err := whoami("expird.0123456789abcdef")
		wantCode(t, err, 401)
	})
	t.Run("a token Secret not meant for authentication: 401", func(t *testing.T) {
		_, err := whoami("nouse0.0123456789abcdef")
		wantCode(t, err, 401)
	})
	t.Run("kubectl lists the Secrets with TYPE and DATA", func(t *testing.T) {
		out, code := kubectl(t, filepath.Join(srv.PKIDir, "admin.kubeconfig"), "get", "secrets", "-n", "kube-system", "bootstrap-token-secret")
		if code != 0 || !strings.Contains(out, "bootstrap.kubernetes.io/token") || !strings.Contains(out, "3") {
			t.Fatalf("kubectl get secrets: %d %s", code, out)
		}
	})
}

// TestEtcdRequiresClientCertificate: etcd, under the apiserver, accepts only clients
// with a certificate from the etcd CA, as kubeadm's etcd does; the cluster CA, which
// vouches for every node, is worth nothing there.
func TestEtcdRequiresClientCertificate(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	roots := srv.EtcdCA.CertPool()
	addr := strings.TrimPrefix(srv.Etcd.Endpoint(), "https://")
	handshake := func(cert *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
		if cert != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3: the server's verdict on the client certificate arrives with the
		// first read; an accepted client hears nothing until it speaks.
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil
		}
		return err
	}
	t.Run("the apiserver's etcd client certificate: accepted", func(t *testing.T) {
		kp, err := srv.EtcdCA.IssueClient("kube-apiserver-etcd-client", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(&cert); err != nil {
			t.Fatalf("etcd refused the apiserver's own name from its CA: %v", err)
		}
	})
	t.Run("etcd speaks only TLS", func(t *testing.T) {
		if !strings.HasPrefix(srv.Etcd.Endpoint(), "https://") {
			t.Fatalf("etcd endpoint %s", srv.Etcd.Endpoint())
		}
	})
	t.Run("no client certificate: refused", func(t *testing.T) {
		if err := handshake(nil); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("handshake without a client certificate: %v", err)
		}
	})
	t.Run("a client certificate from another CA: refused", func(t *testing.T) {
		cert := foreignClientCert(t, "kube-apiserver-etcd-client", "")
		if err := handshake(&cert); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("handshake with a foreign client certificate: %v", err)
		}
	})
	pair := func(certPEM, keyPEM []byte, err error) tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	for _, tc := range []struct{ name, cn, org string }{
		{"a node's certificate from the cluster CA: refused", "system:node:node-a", "system:nodes"},
		{"the apiserver's etcd client name from the cluster CA: refused", "kube-apiserver-etcd-client", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var orgs []string
			if tc.org != "" {
				orgs = []string{tc.org}
			}
			kp, err := srv.CA.IssueClient(tc.cn, orgs, time.Hour)
			cert := pair(kp.CertPEM, kp.KeyPEM, err)
			if err := handshake(&cert); err == nil {
				t.Fatal("etcd accepted a certificate of the cluster CA")
			}
		})
	}
	t.Run("another name from the etcd CA: refused (allowed-cn)", func(t *testing.T) {
		kp, err := srv.EtcdCA.IssueClient("someone-else", nil, time.Hour)
		cert := pair(kp.CertPEM, kp.KeyPEM, err)
		if err := handshake(&cert); err == nil {
			t.Fatal("etcd accepted a client name outside its allowed CNs")
		}
	})
}
