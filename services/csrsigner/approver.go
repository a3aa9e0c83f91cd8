package csrsigner

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// Identities the approver recognises.
const (
	// NodeUserPrefix starts every kubelet's user name: system:node:<node>.
	NodeUserPrefix = "system:node:"
	// NodesGroup is the group of every kubelet.
	NodesGroup = "system:nodes"
	// BootstrappersGroup is the group of bootstrap-token users.
	BootstrappersGroup = "system:bootstrappers"
)

// minRSAKeyBits is the smallest RSA key the approver accepts.
const minRSAKeyBits = 2048

// Usages Kubernetes allows for kubelet certificates: key encipherment is optional
// because only RSA keys use it. Mirrors kubeletClientRequiredUsages and
// kubeletServingRequiredUsages in k8s.io/kubernetes/pkg/apis/certificates/helpers.go.
var (
	kubeletClientUsages       = sets.New(certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth)
	kubeletClientUsagesNoRSA  = sets.New(certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth)
	kubeletServingUsages      = sets.New(certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth)
	kubeletServingUsagesNoRSA = sets.New(certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
)

// Approver decides whether a pending request is approved without a person. It approves
// only two kinds, as kube-controller-manager's csrapproving controller
// (pkg/controller/certificates/approver/sarapprove.go) does for the first, and as skiff's
// ServingPolicy allows for the second:
//
//   - kubernetes.io/kube-apiserver-client-kubelet from a bootstrapper (group
//     system:bootstrappers) or from the node itself (user system:node:<name> in
//     system:nodes), for exactly CN=system:node:<name>, O=system:nodes, no SANs, usages
//     digital signature + client auth (+ key encipherment), an ECDSA or ≥ 2048-bit RSA key;
//   - kubernetes.io/kubelet-serving, only when KubeletServing is set, from the node
//     itself, for CN=system:node:<name>, O=system:nodes, usages digital signature +
//     server auth (+ key encipherment), whose DNS and IP SANs are all the node's own and
//     none of them is one the policy reserves (see ServingPolicy).
//
// Anything else is left for a person (kubectl certificate approve|deny).
type Approver struct {
	// Nodes lists Node objects: the requester's, for its addresses, and every other one,
	// whose names and addresses no other node may put in a serving certificate.
	Nodes corelisters.NodeLister
	// KubeletServing approves kubelet-serving requests within its limits; nil leaves
	// every kubelet-serving request to a person, as kube-controller-manager does.
	KubeletServing *ServingPolicy
}

// Decision is the approver's answer for one request.
type Decision struct {
	// Approve is true when the request is approved now.
	Approve bool
	// Reason is the Approved condition's reason when Approve, e.g. "AutoApproved".
	Reason string
	// Message explains the decision: the Approved condition's message, or why the
	// request waits for a person.
	Message string
}

// leaveForPerson is a Decision that approves nothing, saying why.
func leaveForPerson(format string, args ...any) Decision {
	return Decision{Message: fmt.Sprintf(format, args...)}
}

// Decide returns the decision for csr, which must be neither approved nor denied. An
// error means no decision could be made now (a control-plane host name did not resolve)
// and the caller should ask again later; every other outcome is a Decision.
func (a Approver) Decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (Decision, error) {
	switch csr.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName:
	default:
		return leaveForPerson("signer %q is never auto-approved", csr.Spec.SignerName), nil
	}
	req, err := parseCSR(csr.Spec.Request)
	if err != nil {
		return leaveForPerson("request does not parse: %v", err), nil
	}
	if err := req.CheckSignature(); err != nil {
		return leaveForPerson("request signature is invalid: %v", err), nil
	}
	if err := checkKey(req); err != nil {
		return leaveForPerson("%v", err), nil
	}
	usages := sets.New(csr.Spec.Usages...)
	if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName {
		return a.decideKubeletClient(csr, req, usages), nil
	}
	return a.decideKubeletServing(ctx, csr, req, usages)
}

func (a Approver) decideKubeletClient(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, usages sets.Set[certificatesv1.KeyUsage]) Decision {
	if err := ValidateKubeletClientCSR(req, usages); err != nil {
		return leaveForPerson("not a kubelet client request: %v", err)
	}
	switch {
	case isSelfNode(csr, req):
		return Decision{Approve: true, Reason: "AutoApproved", Message: "Auto approving self kubelet client certificate: requested by " + csr.Spec.Username + "."}
	case slices.Contains(csr.Spec.Groups, BootstrappersGroup):
		return Decision{Approve: true, Reason: "AutoApproved", Message: "Auto approving kubelet client certificate: requested by bootstrapper " + csr.Spec.Username + "."}
	}
	return leaveForPerson("requester %q is neither a bootstrapper nor %s", csr.Spec.Username, req.Subject.CommonName)
}

func (a Approver) decideKubeletServing(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, usages sets.Set[certificatesv1.KeyUsage]) (Decision, error) {
	if a.KubeletServing == nil {
		return leaveForPerson("kubelet serving certificates wait for a person, as kube-controller-manager leaves them (csr-signer --approve-kubelet-serving is off)"), nil
	}
	if err := ValidateKubeletServingCSR(req, usages); err != nil {
		return leaveForPerson("not a kubelet serving request: %v", err), nil
	}
	if !isSelfNode(csr, req) {
		return leaveForPerson("requester %q is not %s", csr.Spec.Username, req.Subject.CommonName), nil
	}
	nodeName := strings.TrimPrefix(req.Subject.CommonName, NodeUserPrefix)
	if a.Nodes == nil {
		return leaveForPerson("node %q cannot be looked up", nodeName), nil
	}
	node, err := a.Nodes.Get(nodeName)
	if apierrors.IsNotFound(err) {
		return leaveForPerson("node %q does not exist (yet)", nodeName), nil
	}
	if err != nil {
		return leaveForPerson("node %q: %v", nodeName, err), nil
	}
	others, err := a.Nodes.List(labelsEverything)
	if err != nil {
		return leaveForPerson("listing nodes: %v", err), nil
	}
	why, err := a.KubeletServing.refuse(ctx, node, others, req)
	if err != nil || why != "" {
		return leaveForPerson("%s", why), err
	}
	return Decision{Approve: true, Reason: "AutoApproved", Message: "Auto approving kubelet serving certificate: the node's own names and addresses."}, nil
}

// isSelfNode reports whether the requester is the node the certificate names: user
// system:node:<name> in system:nodes, with the request's CN equal to the user name.
func isSelfNode(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) bool {
	return strings.HasPrefix(csr.Spec.Username, NodeUserPrefix) &&
		csr.Spec.Username == req.Subject.CommonName &&
		slices.Contains(csr.Spec.Groups, NodesGroup)
}

// checkKey accepts ECDSA keys and RSA keys of at least 2048 bits.
func checkKey(req *x509.CertificateRequest) error {
	switch k := req.PublicKey.(type) {
	case *ecdsa.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSAKeyBits {
			return fmt.Errorf("RSA key of %d bits is shorter than %d", k.N.BitLen(), minRSAKeyBits)
		}
		return nil
	default:
		return fmt.Errorf("key type %T is neither ECDSA nor RSA", req.PublicKey)
	}
}

// ValidateKubeletClientCSR checks a kubelet client certificate request: subject
// O=system:nodes and CN=system:node:<name>, no SANs, usages digital signature and client
// auth, with key encipherment optional. Mirrors ValidateKubeletClientCSR in
// k8s.io/kubernetes/pkg/apis/certificates/helpers.go.
func ValidateKubeletClientCSR(req *x509.CertificateRequest, usages sets.Set[certificatesv1.KeyUsage]) error {
	if !slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
		return fmt.Errorf("subject organization is not %s", NodesGroup)
	}
	if len(req.DNSNames) > 0 || len(req.EmailAddresses) > 0 || len(req.IPAddresses) > 0 || len(req.URIs) > 0 {
		return errors.New("subject alternative names are not allowed")
	}
	if err := checkNodeCommonName(req.Subject.CommonName); err != nil {
		return err
	}
	if !kubeletClientUsages.Equal(usages) && !kubeletClientUsagesNoRSA.Equal(usages) {
		return fmt.Errorf("usages did not match %v", sets.List(kubeletClientUsages))
	}
	return nil
}

// ValidateKubeletServingCSR checks a kubelet serving certificate request: subject
// O=system:nodes and CN=system:node:<name>, at least one DNS or IP SAN and no others,
// usages digital signature and server auth, with key encipherment optional. Mirrors
// ValidateKubeletServingCSR in k8s.io/kubernetes/pkg/apis/certificates/helpers.go.
func ValidateKubeletServingCSR(req *x509.CertificateRequest, usages sets.Set[certificatesv1.KeyUsage]) error {
	if !slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
		return fmt.Errorf("subject organization is not %s", NodesGroup)
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return errors.New("DNS or IP subjectAltName is required")
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return errors.New("email and URI subjectAltNames are not allowed")
	}
	if err := checkNodeCommonName(req.Subject.CommonName); err != nil {
		return err
	}
	if !kubeletServingUsages.Equal(usages) && !kubeletServingUsagesNoRSA.Equal(usages) {
		return fmt.Errorf("usages did not match %v", sets.List(kubeletServingUsages))
	}
	return nil
}

func checkNodeCommonName(cn string) error {
	if !strings.HasPrefix(cn, NodeUserPrefix) || cn == NodeUserPrefix {
		return fmt.Errorf("subject common name %q is not %s<node>", cn, NodeUserPrefix)
	}
	return nil
}

// parseCSR decodes a PEM "CERTIFICATE REQUEST".
func parseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}
