package certificatesigningrequest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// csrPEM returns a PEM certificate request for cn/orgs with a fresh P-256 key.
func csrPEM(t *testing.T, cn string, orgs ...string) []byte {
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

// certPEM returns a self-signed certificate in PEM, standing in for a signer's answer.
func certPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newCSR(t *testing.T, name string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrPEM(t, "system:node:n1", "system:nodes"),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

// clients returns a JSON client and a protobuf one (kubectl's approval PUT is protobuf).
func clients(t *testing.T) (jsonClient, protoClient kubernetes.Interface) {
	cfg := controlplanetest.Start(t)
	j, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	p, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	return j, p
}

func TestCreateValidation(t *testing.T) {
	client, _ := clients(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(*certificatesv1.CertificateSigningRequest)
		field  string // "" = accepted
	}{
		{"valid request is accepted", func(*certificatesv1.CertificateSigningRequest) {}, ""},
		{"request that is not PEM is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") }, "spec.request"},
		{"PEM of another type is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = certPEM(t) }, "spec.request"},
		{"missing signerName is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "" }, "spec.signerName"},
		{"signerName without a path is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com" }, "spec.signerName"},
		{"signerName whose domain has one label is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example/signer" }, "spec.signerName"},
		{"legacy-unknown signer is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/legacy-unknown" }, "spec.signerName"},
		{"custom signer is accepted", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com/my-signer" }, ""},
		{"no usages are refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil }, "spec.usages"},
		{"unknown usage is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = []certificatesv1.KeyUsage{"flying"} }, "spec.usages[0]"},
		{"duplicate usage is refused", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageClientAuth}
		}, "spec.usages[1]"},
		{"expirationSeconds below 600 is refused", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To[int32](599) }, "spec.expirationSeconds"},
		{"expirationSeconds of 600 is accepted", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To[int32](600) }, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			csr := newCSR(t, "csr-"+string(rune('a'+i)))
			tc.mutate(csr)
			_, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: got %v, want 422 Invalid on %s", err, tc.field)
			}
			causes := err.(apierrors.APIStatus).Status().Details.Causes
			found := false
			for _, c := range causes {
				found = found || c.Field == tc.field
			}
			if !found {
				t.Fatalf("causes %+v do not name %s", causes, tc.field)
			}
		})
	}
}

func TestCreateClearsStatusAndRequester(t *testing.T) {
	client, _ := clients(t)
	ctx := context.Background()
	csr := newCSR(t, "c1")
	csr.Spec.Username, csr.Spec.Groups = "system:masters-impostor", []string{"system:masters"}
	csr.Status.Certificate = certPEM(t)
	csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
	got, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Certificate) != 0 || len(got.Status.Conditions) != 0 {
		t.Errorf("status kept on create: %+v", got.Status)
	}
	// The requester comes from the authenticated user, never from the body.
	if got.Spec.Username == "system:masters-impostor" || got.Spec.Username == "" && len(got.Spec.Groups) > 0 {
		t.Errorf("requester taken from the body: username %q groups %v", got.Spec.Username, got.Spec.Groups)
	}
}

func TestApprovalAndStatusSubresources(t *testing.T) {
	client, protoClient := clients(t)
	ctx := context.Background()
	csrs := client.CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, newCSR(t, "node-csr"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("main resource ignores status", func(t *testing.T) {
		c := created.DeepCopy()
		c.Labels = map[string]string{"a": "b"}
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		got, err := csrs.Update(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels["a"] != "b" || len(got.Status.Conditions) != 0 {
			t.Fatalf("labels %v conditions %v; want label kept, status ignored", got.Labels, got.Status.Conditions)
		}
		created = got
	})

	t.Run("status may not add an Approved condition", func(t *testing.T) {
		c := created.DeepCopy()
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		if _, err := csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("got %v, want 422", err)
		}
	})

	t.Run("approval may not both approve and deny", func(t *testing.T) {
		c := created.DeepCopy()
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{
			{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue},
			{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue},
		}
		_, err := protoClient.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "mutually exclusive") {
			t.Fatalf("got %v, want 422 mutually exclusive", err)
		}
	})

	t.Run("approval takes the conditions it is given, others than Approved too", func(t *testing.T) {
		// Kubernetes' conformance test patches /approval with a condition of its own.
		c, err := csrs.Create(ctx, newCSR(t, "approval-patch"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := csrs.Patch(ctx, c.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"patchedapproval":"true"}},"status":{"conditions":[{"type":"ApprovalPatch","status":"True","reason":"e2e"}]}}`),
			metav1.PatchOptions{}, "approval")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != "ApprovalPatch" || got.Annotations["patchedapproval"] != "true" {
			t.Fatalf("conditions %+v, annotations %v; want the patch's", got.Status.Conditions, got.Annotations)
		}
		got.Status.Conditions = append(got.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "E2E"})
		if got, err = csrs.UpdateApproval(ctx, got.Name, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 2 || got.Status.Conditions[1].Type != certificatesv1.CertificateApproved {
			t.Fatalf("conditions %+v; want ApprovalPatch then Approved", got.Status.Conditions)
		}
		if err := csrs.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("approval sets Approved and nothing else", func(t *testing.T) {
		c := created.DeepCopy()
		c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}
		c.Status.Certificate = certPEM(t)
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "This CSR was approved by kubectl certificate approve.",
		}}
		got, err := protoClient.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Reason != "KubectlApprove" || got.Status.Conditions[0].LastTransitionTime.IsZero() {
			t.Fatalf("conditions %+v", got.Status.Conditions)
		}
		if len(got.Status.Certificate) != 0 || len(got.Spec.Usages) != 2 {
			t.Fatalf("approval changed certificate or spec: usages %v, cert %d bytes", got.Spec.Usages, len(got.Status.Certificate))
		}
		created = got
	})

	t.Run("status sets the certificate and keeps approval", func(t *testing.T) {
		c := created.DeepCopy()
		c.Status.Conditions = nil
		c.Status.Certificate = certPEM(t)
		if _, err := csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("removing Approved: got %v, want 422", err)
		}
		c = created.DeepCopy()
		c.Status.Certificate = certPEM(t)
		got, err := csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Certificate) == 0 || got.Status.Conditions[0].Type != certificatesv1.CertificateApproved {
			t.Fatalf("status %+v", got.Status)
		}
		created = got
	})

	t.Run("issued certificate is immutable", func(t *testing.T) {
		c := created.DeepCopy()
		c.Status.Certificate = certPEM(t)
		if _, err := csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("got %v, want 422", err)
		}
	})

	t.Run("status certificate must be PEM certificates", func(t *testing.T) {
		c, err := csrs.Create(ctx, newCSR(t, "bad-cert"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Certificate = []byte("not a certificate")
		if _, err := csrs.UpdateStatus(ctx, c, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("got %v, want 422", err)
		}
	})

	t.Run("Approved may not be removed by the approval subresource", func(t *testing.T) {
		c := created.DeepCopy()
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue}}
		if _, err := csrs.UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("got %v, want 422", err)
		}
	})

	t.Run("signerName field selector", func(t *testing.T) {
		list, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + certificatesv1.KubeAPIServerClientKubeletSignerName})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 2 {
			t.Fatalf("got %d items, want 2", len(list.Items))
		}
		list, err = csrs.List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=example.com/none"})
		if err != nil || len(list.Items) != 0 {
			t.Fatalf("got %v items, err %v; want none", len(list.Items), err)
		}
	})
}

func TestSubjectRestriction(t *testing.T) {
	client, _ := clients(t)
	ctx := context.Background()
	cases := []struct {
		name      string
		signer    string
		orgs      []string
		forbidden bool
	}{
		{"kube-apiserver-client for system:masters is forbidden", certificatesv1.KubeAPIServerClientSignerName, []string{"devs", "system:masters"}, true},
		{"kube-apiserver-client for another group is accepted", certificatesv1.KubeAPIServerClientSignerName, []string{"devs"}, false},
		{"another signer is not restricted", "example.com/signer", []string{"system:masters"}, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			csr := newCSR(t, "restricted-"+string(rune('a'+i)))
			csr.Spec.SignerName = tc.signer
			csr.Spec.Request = csrPEM(t, "jane", tc.orgs...)
			_, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
			if tc.forbidden {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed") {
					t.Fatalf("got %v, want 403 naming the system:masters restriction", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
