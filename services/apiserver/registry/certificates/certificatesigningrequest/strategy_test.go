package certificatesigningrequest

import (
	"context"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"
)

func TestPrepareForCreateRecordsRequester(t *testing.T) {
	csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Username: "forged", Groups: []string{"system:masters"}}}
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{
		Name: "system:bootstrap:abcdef", UID: "u1", Groups: []string{"system:bootstrappers", "system:authenticated"},
		Extra: map[string][]string{"k": {"v"}},
	})
	Strategy{}.PrepareForCreate(ctx, csr)
	if csr.Spec.Username != "system:bootstrap:abcdef" || csr.Spec.UID != "u1" || len(csr.Spec.Groups) != 2 || csr.Spec.Groups[0] != "system:bootstrappers" || csr.Spec.Extra["k"][0] != "v" {
		t.Fatalf("spec %+v", csr.Spec)
	}

	anonymous := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Username: "forged", Groups: []string{"g"}}}
	Strategy{}.PrepareForCreate(context.Background(), anonymous)
	if anonymous.Spec.Username != "" || anonymous.Spec.Groups != nil {
		t.Fatalf("no user in context: spec %+v, want requester fields empty", anonymous.Spec)
	}
}

func TestTableRow(t *testing.T) {
	cond := func(t certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue}
	}
	cases := []struct {
		name       string
		conditions []certificatesv1.CertificateSigningRequestCondition
		cert       []byte
		expiration *int32
		wantCond   string
		wantDur    string
	}{
		{"no conditions is Pending", nil, nil, nil, "Pending", "<none>"},
		{"approved and issued", []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateApproved)}, []byte("x"), ptr.To[int32](86400), "Approved,Issued", "24h"},
		{"denied", []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateDenied)}, nil, ptr.To[int32](600), "Denied", "10m"},
		{"approved then failed", []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateApproved), cond(certificatesv1.CertificateFailed)}, nil, nil, "Approved,Failed", "<none>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			csr := &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "c", CreationTimestamp: metav1.NewTime(time.Now().Add(-3 * time.Minute))},
				Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: "kubernetes.io/kubelet-serving", Username: "system:node:n1", ExpirationSeconds: tc.expiration},
				Status:     certificatesv1.CertificateSigningRequestStatus{Conditions: tc.conditions, Certificate: tc.cert},
			}
			row := Strategy{}.TableRow(csr)
			if len(row) != len(Strategy{}.TableColumns()) {
				t.Fatalf("%d cells for %d columns", len(row), len(Strategy{}.TableColumns()))
			}
			want := []interface{}{"c", "3m", "kubernetes.io/kubelet-serving", "system:node:n1", tc.wantDur, tc.wantCond}
			for i := range want {
				if row[i] != want[i] {
					t.Errorf("cell %d = %v, want %v", i, row[i], want[i])
				}
			}
		})
	}
}
