package admission_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// grant gives user (or, with kind Group, the group) rules through a ClusterRole and
// binding of its own.
func grant(t *testing.T, admin kubernetes.Interface, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// csrClientRequest is a PEM request for a client certificate of cn in orgs.
func csrClientRequest(t *testing.T, cn string, orgs ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func createCSR(t *testing.T, client kubernetes.Interface, name, signer, cn string, orgs ...string) {
	t.Helper()
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrClientRequest(t, cn, orgs...), SignerName: signer,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create csr %s: %v", name, err)
	}
}

// approve adds the Approved condition through certificatesigningrequests/approval, as
// kubectl certificate approve does.
func approve(client kubernetes.Interface, name string) error {
	ctx := context.Background()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "approved by the test",
	})
	_, err = client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
	return err
}

// sign sets status.certificate through certificatesigningrequests/status, as a signer does.
func sign(client kubernetes.Interface, name string, certPEM []byte) error {
	ctx := context.Background()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	csr.Status.Certificate = certPEM
	_, err = client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{})
	return err
}

// wantForbidden fails unless err is a 403 whose message is exactly msg ("" accepts any).
func wantForbidden(t *testing.T, err error, msg string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want 403 Forbidden", err)
	}
	if msg != "" && err.Error() != msg {
		t.Fatalf("message %q\nwant    %q", err.Error(), msg)
	}
}

// TestCertificateApprovalAndSigning runs the real apiserver's admission chain: approving a
// request needs verb approve on its signer (signers, certificates.k8s.io), setting its
// certificate needs verb sign, besides update on the subresource, as kube's
// CertificateApproval and CertificateSigning plugins require.
func TestCertificateApprovalAndSigning(t *testing.T) {
	s := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(s.Config)
	client := func(user string, groups ...string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(s.ClientConfig(user, groups...))
	}
	csrRules := []rbacv1.PolicyRule{
		{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests"}},
		{Verbs: []string{"update"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}},
	}
	signers := func(verb string, names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"}, ResourceNames: names}
	}
	// jane may update the subresources but approve and sign nothing; joe may approve
	// and sign for every kubernetes.io signer; ann may approve example.com/signer only.
	grant(t, admin, "test:jane", userSubject("jane"), csrRules...)
	grant(t, admin, "test:joe", userSubject("joe"), append(csrRules, signers("approve", "kubernetes.io/*"), signers("sign", "kubernetes.io/*"))...)
	grant(t, admin, "test:ann", userSubject("ann"), append(csrRules, signers("approve", "example.com/signer"))...)
	jane, joe, ann := client("jane"), client("joe"), client("ann")
	issued, err := s.CA.IssueClient("someone", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const kubeClient, kubeletClient = certificatesv1.KubeAPIServerClientSignerName, certificatesv1.KubeAPIServerClientKubeletSignerName

	t.Run("update on approval without approve on the signer: 403", func(t *testing.T) {
		createCSR(t, admin, "jane-approves", kubeClient, "someone")
		wantForbidden(t, approve(jane, "jane-approves"),
			`certificatesigningrequests.certificates.k8s.io "jane-approves" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client"`)
	})
	t.Run("approve on kubernetes.io/* approves a kubernetes.io signer's request", func(t *testing.T) {
		createCSR(t, admin, "joe-approves", kubeClient, "someone")
		if err := approve(joe, "joe-approves"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("approve on an exact signer name approves its requests and no other's", func(t *testing.T) {
		createCSR(t, admin, "ann-approves", "example.com/signer", "someone")
		if err := approve(ann, "ann-approves"); err != nil {
			t.Fatal(err)
		}
		createCSR(t, admin, "ann-approves-other", "example.com/other", "someone")
		wantForbidden(t, approve(ann, "ann-approves-other"),
			`certificatesigningrequests.certificates.k8s.io "ann-approves-other" is forbidden: user not permitted to approve requests with signerName "example.com/other"`)
	})
	t.Run("update on status without sign on the signer cannot set the certificate: 403", func(t *testing.T) {
		createCSR(t, admin, "jane-signs", kubeClient, "someone")
		if err := approve(admin, "jane-signs"); err != nil {
			t.Fatal(err)
		}
		wantForbidden(t, sign(jane, "jane-signs", issued.CertPEM),
			`certificatesigningrequests.certificates.k8s.io "jane-signs" is forbidden: user not permitted to sign requests with signerName "kubernetes.io/kube-apiserver-client"`)
		if err := sign(joe, "jane-signs", issued.CertPEM); err != nil {
			t.Fatalf("sign on kubernetes.io/*: %v", err)
		}
	})
	t.Run("a node cannot approve its own request, even with update on approval", func(t *testing.T) {
		nodeA := client("system:node:a", "system:nodes")
		createCSR(t, nodeA, "node-a-own", kubeletClient, "system:node:a", "system:nodes")
		wantForbidden(t, approve(nodeA, "node-a-own"), "")
		grant(t, admin, "test:nodes-update-approval", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}, csrRules...)
		wantForbidden(t, approve(nodeA, "node-a-own"),
			`certificatesigningrequests.certificates.k8s.io "node-a-own" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client-kubelet"`)
	})
	t.Run("csr-signer approves and signs kubelet requests but approves no person's", func(t *testing.T) {
		signer := client("system:skiff:csr-signer")
		createCSR(t, admin, "kubelet-client", kubeletClient, "system:node:b", "system:nodes")
		if err := approve(signer, "kubelet-client"); err != nil {
			t.Fatalf("approve: %v", err)
		}
		if err := sign(signer, "kubelet-client", issued.CertPEM); err != nil {
			t.Fatalf("sign: %v", err)
		}
		createCSR(t, admin, "person-client", kubeClient, "mallory", "developers")
		wantForbidden(t, approve(signer, "person-client"),
			`certificatesigningrequests.certificates.k8s.io "person-client" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client"`)
	})
	t.Run("system:masters approves and signs for any signer", func(t *testing.T) {
		createCSR(t, admin, "admin-approves", "example.com/other", "someone")
		if err := approve(admin, "admin-approves"); err != nil {
			t.Fatal(err)
		}
		if err := sign(admin, "admin-approves", issued.CertPEM); err != nil {
			t.Fatal(err)
		}
	})
}
