package csrsigner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/internal/pki"
)

// FuzzCSR feeds arbitrary spec.request bytes (PEM, a DER request, garbage), signer names,
// usages and requesters to the approver and the signer, which read what any user
// with create on certificatesigningrequests sends. Properties: no panic; every decision
// says why; an approved request is a well-signed PKCS#10 request for system:node:<name> in
// exactly system:nodes; the signer either refuses with a *ValidationError or issues a
// certificate for the request's subject.
func FuzzCSR(f *testing.F) {
	f.Add(nodeAClient.pem(f), uint8(0), uint8(0b011), uint8(0))
	f.Add(nodeAServing.pem(f), uint8(1), uint8(0b101), uint8(1))
	f.Add(request{cn: "system:node:a", orgs: []string{NodesGroup}, dns: []string{"a"}}.pem(f), uint8(0), uint8(0b111), uint8(0))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"), uint8(2), uint8(0xff), uint8(2))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n"), uint8(3), uint8(0), uint8(3))
	signers := []string{certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName,
		certificatesv1.KubeAPIServerClientSignerName, "example.com/other"}
	allUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth,
		certificatesv1.UsageServerAuth, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageCertSign,
		certificatesv1.UsageAny, certificatesv1.KeyUsage("bogus"), certificatesv1.UsageCodeSigning}
	requesters := []requester{bootstrapper, nodeA, someone, nodeB}
	nodeAObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "a.internal"},
	}}}
	approver := Approver{Nodes: nodes(f, nodeAObj), KubeletServing: &ServingPolicy{
		ServiceCIDR: DefaultServiceClusterIPRange, ControlPlaneHosts: DefaultControlPlaneHosts(), Resolver: hosts{},
	}}
	ca, err := pki.NewCA("fuzz-ca")
	if err != nil {
		f.Fatal(err)
	}
	signer := &Signer{CA: ca}
	f.Fuzz(func(t *testing.T, request []byte, signerIdx, usageBits, requesterIdx uint8) {
		var usages []certificatesv1.KeyUsage
		for i, u := range allUsages {
			if usageBits&(1<<i) != 0 {
				usages = append(usages, u)
			}
		}
		by := requesters[int(requesterIdx)%len(requesters)]
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "fuzz"},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request: request, SignerName: signers[int(signerIdx)%len(signers)], Usages: usages, Username: by.name, Groups: by.groups,
			},
		}
		d, err := approver.Decide(context.Background(), csr)
		if err != nil {
			t.Fatalf("no decision: %v", err)
		}
		if d.Message == "" {
			t.Fatalf("decision without a message: %+v", d)
		}
		if d.Approve {
			req, err := parseCSR(request)
			if err != nil || req.CheckSignature() != nil {
				t.Fatalf("approved a request that does not parse or verify: %v", err)
			}
			if !strings.HasPrefix(req.Subject.CommonName, NodeUserPrefix) || len(req.Subject.CommonName) == len(NodeUserPrefix) ||
				!slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
				t.Fatalf("approved subject %v", req.Subject)
			}
		}
		out, err := signer.Sign(csr)
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("sign: the CA failed on bad input: %v", err)
			}
			return
		}
		req, _ := parseCSR(request)
		cert := parseCertPEM(t, out)
		if cert.Subject.CommonName != req.Subject.CommonName {
			t.Fatalf("certificate for %q from a request for %q", cert.Subject.CommonName, req.Subject.CommonName)
		}
	})
}
