package authz

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/csrsigner"
)

// TestCSRApprovalMatrix runs the real csr-signer (auto-approval on) against the real
// apiserver: only a request for the requester's own node identity is approved.
func TestCSRApprovalMatrix(t *testing.T) {
	c := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signer, err := csrsigner.New(csrsigner.Config{
		Client:      kubernetes.NewForConfigOrDie(c.srv.ClientConfig("system:skiff:csr-signer")),
		CA:          c.srv.CA,
		AutoApprove: true,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = signer.Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	// Both are created before either is checked, so the signer has seen the bad one by
	// the time the good one is issued: the CSRs are handled in one queue.
	own := newCSR(t, "node-a-own", "system:node:node-a", []string{"system:nodes"})
	other := newCSR(t, "node-a-for-node-b", "system:node:node-b", []string{"system:nodes"})
	for _, csr := range []*certificatesv1.CertificateSigningRequest{other, own} {
		if _, err := c.nodeA.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	issued := func(name string) (*certificatesv1.CertificateSigningRequest, error) {
		var got *certificatesv1.CertificateSigningRequest
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = c.admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(got.Status.Certificate) > 0, nil
		})
		return got, err
	}

	t.Run("a node's CSR for its own identity is approved and issued", func(t *testing.T) {
		if _, err := issued("node-a-own"); err != nil {
			t.Fatalf("not issued: %v", err)
		}
	})
	t.Run("a CSR whose CN names another node is not approved", func(t *testing.T) {
		// The signer counts each request its approver leaves for a person: once the
		// count is 1 it has decided on the bad one (the good one is approved).
		reg := prometheus.NewRegistry()
		reg.MustRegister(signer.Metrics())
		leftPending := func() float64 {
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var n float64
			for _, f := range families {
				if f.GetName() == "csrsigner_left_pending_total" {
					for _, m := range f.GetMetric() {
						n += m.GetCounter().GetValue()
					}
				}
			}
			return n
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return leftPending() > 0, nil
		}); err != nil {
			t.Fatalf("the signer never decided on the CSR for another node: %v", err)
		}
		got, err := c.admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "node-a-for-node-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == certificatesv1.CertificateApproved {
				t.Fatalf("approved: %+v", cond)
			}
		}
		if len(got.Status.Certificate) > 0 {
			t.Fatal("a certificate was issued")
		}
	})
}
