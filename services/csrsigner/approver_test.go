package csrsigner

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// request describes a PKCS#10 request to build.
type request struct {
	cn    string
	orgs  []string
	dns   []string
	ips   []string
	key   crypto.Signer // nil = a fresh P-256 key
	email []string
}

func ecKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func rsaKey(t testing.TB, bits int) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (r request) pem(t testing.TB) []byte {
	t.Helper()
	key := r.key
	if key == nil {
		key = ecKey(t)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: r.cn, Organization: r.orgs}, DNSNames: r.dns, EmailAddresses: r.email}
	for _, ip := range r.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

var (
	clientUsages    = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	clientUsagesRSA = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	servingUsages   = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	bootstrapper    = requester{"system:bootstrap:abcdef", []string{BootstrappersGroup, "system:authenticated"}}
	nodeA           = requester{"system:node:a", []string{NodesGroup, "system:authenticated"}}
	nodeB           = requester{"system:node:b", []string{NodesGroup, "system:authenticated"}}
	someone         = requester{"jane", []string{"developers", "system:authenticated"}}
	nodeAClient     = request{cn: "system:node:a", orgs: []string{NodesGroup}}
	nodeAServing    = request{cn: "system:node:a", orgs: []string{NodesGroup}, dns: []string{"a", "a.internal"}, ips: []string{"10.0.0.1"}}
)

type requester struct {
	name   string
	groups []string
}

func csrFor(t testing.TB, by requester, signer string, usages []certificatesv1.KeyUsage, req request) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req.pem(t), SignerName: signer, Usages: usages, Username: by.name, Groups: by.groups,
		},
	}
}

// nodes is client-go's NodeLister over an indexer holding list, as the controller's
// informer fills it.
func nodes(t testing.TB, list ...*corev1.Node) corelisters.NodeLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range list {
		if err := indexer.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(indexer)
}

func TestApproverDecide(t *testing.T) {
	nodeAObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "a.internal"},
	}}}
	kubeletClient, kubeletServing := certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName
	cases := []struct {
		name    string
		csr     *certificatesv1.CertificateSigningRequest
		approve bool
	}{
		{"bootstrapper asking a node client certificate is approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, nodeAClient), true},
		{"node renewing its own client certificate is approved", csrFor(t, nodeA, kubeletClient, clientUsages, nodeAClient), true},
		{"RSA 2048 key with key encipherment is approved", csrFor(t, bootstrapper, kubeletClient, clientUsagesRSA, request{cn: "system:node:a", orgs: []string{NodesGroup}, key: rsaKey(t, 2048)}), true},
		{"CSR whose CN names another node is not approved", csrFor(t, nodeB, kubeletClient, clientUsages, nodeAClient), false},
		{"node without the system:nodes group is not approved", csrFor(t, requester{"system:node:a", []string{"system:authenticated"}}, kubeletClient, clientUsages, nodeAClient), false},
		{"user who is neither bootstrapper nor node is not approved", csrFor(t, someone, kubeletClient, clientUsages, nodeAClient), false},
		{"subject asking system:masters is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, request{cn: "system:node:a", orgs: []string{"system:masters"}}), false},
		{"subject with an extra organization is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, request{cn: "system:node:a", orgs: []string{NodesGroup, "system:masters"}}), false},
		{"CN outside system:node: is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, request{cn: "admin", orgs: []string{NodesGroup}}), false},
		{"CN system:node: without a name is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, request{cn: "system:node:", orgs: []string{NodesGroup}}), false},
		{"client request with a SAN is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, request{cn: "system:node:a", orgs: []string{NodesGroup}, dns: []string{"a"}}), false},
		{"client request with server auth usage is not approved", csrFor(t, bootstrapper, kubeletClient, append(clientUsages, certificatesv1.UsageServerAuth), nodeAClient), false},
		{"client request missing client auth is not approved", csrFor(t, bootstrapper, kubeletClient, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}, nodeAClient), false},
		{"RSA key shorter than 2048 bits is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsagesRSA, request{cn: "system:node:a", orgs: []string{NodesGroup}, key: rsaKey(t, 1024)}), false},
		{"Ed25519 key is not approved", csrFor(t, bootstrapper, kubeletClient, clientUsages, request{cn: "system:node:a", orgs: []string{NodesGroup}, key: ed25519Key(t)}), false},
		{"kube-apiserver-client signer is never auto-approved", csrFor(t, bootstrapper, certificatesv1.KubeAPIServerClientSignerName, clientUsages, nodeAClient), false},
		{"custom signer is never auto-approved", csrFor(t, nodeA, "example.com/signer", clientUsages, nodeAClient), false},
		{"node asking a serving certificate for its own names and IPs waits for a person without a serving policy", csrFor(t, nodeA, kubeletServing, servingUsages, nodeAServing), false},
	}
	approver := Approver{Nodes: nodes(t, nodeAObj)}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := approver.Decide(context.Background(), tc.csr)
			if err != nil {
				t.Fatal(err)
			}
			if d.Approve != tc.approve {
				t.Fatalf("Approve = %v (%s), want %v", d.Approve, d.Message, tc.approve)
			}
			if d.Message == "" {
				t.Fatal("decision without a message")
			}
		})
	}
}

func TestApproverRefusesForgedSignature(t *testing.T) {
	csr := csrFor(t, bootstrapper, certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, nodeAClient)
	block, _ := pem.Decode(csr.Spec.Request)
	block.Bytes[len(block.Bytes)-1] ^= 0xff
	csr.Spec.Request = pem.EncodeToMemory(block)
	if d, _ := (Approver{}).Decide(context.Background(), csr); d.Approve {
		t.Fatalf("approved a request whose signature does not verify")
	}
}

func ed25519Key(t testing.TB) crypto.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
