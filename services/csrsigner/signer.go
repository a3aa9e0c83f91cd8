package csrsigner

import (
	"crypto/x509"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"skiff.dev/services/internal/pki"
)

// Certificate lifetimes the signer issues.
const (
	// DefaultMaxDuration is the longest lifetime issued when --max-duration is not set:
	// one year, as kube-controller-manager's --cluster-signing-duration.
	DefaultMaxDuration = 365 * 24 * time.Hour
	// MinDuration is the shortest lifetime issued, whatever expirationSeconds asks: 10
	// minutes, twice the backdate.
	MinDuration = 10 * time.Minute
	// backdate moves NotBefore into the past so peers with a slow clock accept a fresh
	// certificate.
	backdate = 5 * time.Minute
)

// SignedBy lists the signers the csr-signer issues for.
var SignedBy = sets.New(
	certificatesv1.KubeAPIServerClientKubeletSignerName,
	certificatesv1.KubeletServingSignerName,
	certificatesv1.KubeAPIServerClientSignerName,
)

// Signer issues certificates for approved requests with the cluster CA. Mirrors
// k8s.io/kubernetes/pkg/controller/certificates/signer.
type Signer struct {
	// CA signs.
	CA *pki.CA
	// MaxDuration caps the lifetime of what is issued; 0 means DefaultMaxDuration.
	MaxDuration time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ValidationError is a request the signer will not sign, whatever its approval: it
// becomes the request's Failed condition with reason SignerValidationFailure.
type ValidationError struct{ Err error }

func (e *ValidationError) Error() string { return e.Err.Error() }
func (e *ValidationError) Unwrap() error { return e.Err }

// Duration is the lifetime issued for a request asking expirationSeconds (nil = not
// asked): the request's, clamped to [MinDuration, MaxDuration]. Mirrors signer.duration.
func (s *Signer) Duration(expirationSeconds *int32) time.Duration {
	maxDuration := s.MaxDuration
	if maxDuration <= 0 {
		maxDuration = DefaultMaxDuration
	}
	if expirationSeconds == nil {
		return maxDuration
	}
	switch d := time.Duration(*expirationSeconds) * time.Second; {
	case d > maxDuration:
		return maxDuration
	case d < MinDuration:
		return MinDuration
	default:
		return d
	}
}

// Sign returns the PEM certificate for csr, which must be approved and of a signer in
// SignedBy. The certificate carries the request's subject and SANs, the usages asked,
// NotBefore 5 minutes ago and a lifetime of Duration(spec.expirationSeconds) (never past
// the CA's own expiry). Errors: *ValidationError when the request does not fit its
// signer's rules; any other error is the CA failing.
func (s *Signer) Sign(csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	req, err := parseCSR(csr.Spec.Request)
	if err != nil {
		return nil, &ValidationError{fmt.Errorf("unable to parse csr %q: %w", csr.Name, err)}
	}
	if err := req.CheckSignature(); err != nil {
		return nil, &ValidationError{fmt.Errorf("csr %q signature: %w", csr.Name, err)}
	}
	usages := sets.New(csr.Spec.Usages...)
	switch csr.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		err = ValidateKubeletClientCSR(req, usages)
	case certificatesv1.KubeletServingSignerName:
		err = ValidateKubeletServingCSR(req, usages)
	case certificatesv1.KubeAPIServerClientSignerName:
		err = validAPIServerClientUsages(csr.Spec.Usages)
	default:
		return nil, &ValidationError{fmt.Errorf("signer %q is not signed by csr-signer", csr.Spec.SignerName)}
	}
	if err != nil {
		return nil, &ValidationError{err}
	}
	keyUsage, extKeyUsage, err := keyUsagesFromStrings(csr.Spec.Usages)
	if err != nil {
		return nil, &ValidationError{err}
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	notBefore := now().Add(-backdate)
	tmpl := &x509.Certificate{
		Subject:               req.Subject,
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPAddresses,
		EmailAddresses:        req.EmailAddresses,
		URIs:                  req.URIs,
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(s.Duration(csr.Spec.ExpirationSeconds)),
		KeyUsage:              keyUsage,
		ExtKeyUsage:           extKeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	_, certPEM, err := s.CA.Sign(tmpl, req.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("sign csr %q: %w", csr.Name, err)
	}
	return certPEM, nil
}

// validAPIServerClientUsages requires client auth and allows only digital signature and
// key encipherment besides. Mirrors the kube-apiserver-client signer's check.
func validAPIServerClientUsages(usages []certificatesv1.KeyUsage) error {
	hasClientAuth := false
	for _, u := range usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment:
		case certificatesv1.UsageClientAuth:
			hasClientAuth = true
		default:
			return fmt.Errorf("invalid usage for client certificate: %s", u)
		}
	}
	if !hasClientAuth {
		return fmt.Errorf("missing required usage for client certificate: %s", certificatesv1.UsageClientAuth)
	}
	return nil
}

var keyUsages = map[certificatesv1.KeyUsage]x509.KeyUsage{
	certificatesv1.UsageSigning:           x509.KeyUsageDigitalSignature,
	certificatesv1.UsageDigitalSignature:  x509.KeyUsageDigitalSignature,
	certificatesv1.UsageContentCommitment: x509.KeyUsageContentCommitment,
	certificatesv1.UsageKeyEncipherment:   x509.KeyUsageKeyEncipherment,
	certificatesv1.UsageKeyAgreement:      x509.KeyUsageKeyAgreement,
	certificatesv1.UsageDataEncipherment:  x509.KeyUsageDataEncipherment,
	certificatesv1.UsageCertSign:          x509.KeyUsageCertSign,
	certificatesv1.UsageCRLSign:           x509.KeyUsageCRLSign,
	certificatesv1.UsageEncipherOnly:      x509.KeyUsageEncipherOnly,
	certificatesv1.UsageDecipherOnly:      x509.KeyUsageDecipherOnly,
}

var extKeyUsages = map[certificatesv1.KeyUsage]x509.ExtKeyUsage{
	certificatesv1.UsageAny:             x509.ExtKeyUsageAny,
	certificatesv1.UsageServerAuth:      x509.ExtKeyUsageServerAuth,
	certificatesv1.UsageClientAuth:      x509.ExtKeyUsageClientAuth,
	certificatesv1.UsageCodeSigning:     x509.ExtKeyUsageCodeSigning,
	certificatesv1.UsageEmailProtection: x509.ExtKeyUsageEmailProtection,
	certificatesv1.UsageSMIME:           x509.ExtKeyUsageEmailProtection,
	certificatesv1.UsageIPsecEndSystem:  x509.ExtKeyUsageIPSECEndSystem,
	certificatesv1.UsageIPsecTunnel:     x509.ExtKeyUsageIPSECTunnel,
	certificatesv1.UsageIPsecUser:       x509.ExtKeyUsageIPSECUser,
	certificatesv1.UsageTimestamping:    x509.ExtKeyUsageTimeStamping,
	certificatesv1.UsageOCSPSigning:     x509.ExtKeyUsageOCSPSigning,
	certificatesv1.UsageMicrosoftSGC:    x509.ExtKeyUsageMicrosoftServerGatedCrypto,
	certificatesv1.UsageNetscapeSGC:     x509.ExtKeyUsageNetscapeServerGatedCrypto,
}

// keyUsagesFromStrings maps certificates/v1 usages to x509 key and extended key usages.
// Mirrors keyUsagesFromStrings in pkg/controller/certificates/authority.
func keyUsagesFromStrings(usages []certificatesv1.KeyUsage) (x509.KeyUsage, []x509.ExtKeyUsage, error) {
	var keyUsage x509.KeyUsage
	var ext []x509.ExtKeyUsage
	var unknown []string
	for _, u := range usages {
		if ku, ok := keyUsages[u]; ok {
			keyUsage |= ku
		} else if eku, ok := extKeyUsages[u]; ok {
			ext = append(ext, eku)
		} else {
			unknown = append(unknown, string(u))
		}
	}
	if len(unknown) > 0 {
		return 0, nil, fmt.Errorf("unrecognized usages: %v", unknown)
	}
	return keyUsage, ext, nil
}
