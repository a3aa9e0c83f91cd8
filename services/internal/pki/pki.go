// Package pki is skiff's public-key infrastructure: the cluster CA, the certificates it
// issues (ECDSA P-256, crypto/x509), bootstrap tokens, and the kubeconfigs that carry
// them. `skiff pki init` lays a directory out the way kubeadm's `init phase certs` and
// `kubeconfig` phases do (k8s.io/kubernetes/cmd/kubeadm/app/phases/certs), with skiff's
// identities.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity periods of what the CA issues.
const (
	// CAValidity is the cluster CA's lifetime (kubeadm: 10 years).
	CAValidity = 10 * 365 * 24 * time.Hour
	// CertValidity is the lifetime of the certificates Init issues (kubeadm: 1 year).
	CertValidity = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so a peer whose clock is a little behind accepts a
	// fresh certificate (kube's certificate signer backdates by 5 minutes).
	clockSkew = 5 * time.Minute
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key is the CA's private key.
	Key crypto.Signer
	// CertPEM is Cert PEM-encoded, as written to ca.crt and embedded in kubeconfigs.
	CertPEM []byte
}

// NewCA makes a self-signed CA named commonName with a fresh P-256 key, valid for
// CAValidity.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: EncodeCertPEM(cert)}, nil
}

// LoadCA reads the cluster CA, ca.crt and ca.key, from dir. Errors: LoadCAFiles'.
func LoadCA(dir string) (*CA, error) { return LoadAuthority(dir, ClusterCA) }

// LoadAuthority reads the CA a (its certificate and key) from dir. Errors: LoadCAFiles'.
func LoadAuthority(dir string, a Authority) (*CA, error) {
	certFile, keyFile := a.Files(dir)
	return LoadCAFiles(certFile, keyFile)
}

// LoadCAFiles reads a CA's certificate and private key. Errors: missing files, PEM that
// does not hold a certificate or a private key, a certificate that is not a CA.
func LoadCAFiles(certFile, keyFile string) (*CA, error) {
	certPEM, cert, err := readCACert(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(keyFile), err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// AuthorityPool is a pool holding only the certificate of the CA a in dir, read without
// its key: what a peer that verifies, and never signs, needs. Errors: a missing or
// unparsable certificate, or one that is not a CA.
func AuthorityPool(dir string, a Authority) (*x509.CertPool, error) {
	certFile, _ := a.Files(dir)
	_, cert, err := readCACert(certFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool, nil
}

// readCACert reads and parses a CA certificate file.
func readCACert(certFile string) ([]byte, *x509.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Base(certFile), err)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("%s: not a CA certificate", filepath.Base(certFile))
	}
	return certPEM, cert, nil
}

// CertPool is a pool holding only the CA, for verifying peers.
func (ca *CA) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// Sign issues a certificate for pub from tmpl: the CA fills in the serial number and the
// issuer, clamps NotAfter to its own, and backdates NotBefore by 5 minutes when unset.
// It returns the certificate and its PEM.
func (ca *CA) Sign(tmpl *x509.Certificate, pub crypto.PublicKey) (*x509.Certificate, []byte, error) {
	t := *tmpl
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	t.SerialNumber = serial
	if t.NotBefore.IsZero() {
		t.NotBefore = time.Now().Add(-clockSkew)
	}
	if t.NotAfter.IsZero() {
		t.NotAfter = time.Now().Add(CertValidity)
	}
	if t.NotAfter.After(ca.Cert.NotAfter) {
		t.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, EncodeCertPEM(cert), nil
}

// KeyPair is a PEM certificate and its PEM private key, as tls.X509KeyPair takes them.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// IssueClient makes a P-256 key and a client certificate for it: CommonName cn (the user
// name the apiserver sees), Organization orgs (its groups), usage client auth, valid
// for validity (0 means CertValidity).
func (ca *CA) IssueClient(cn string, orgs []string, validity time.Duration) (KeyPair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, validity)
}

// IssueServing makes a P-256 key and a serving certificate for it, named cn, valid for
// the DNS names and IP addresses in hosts, usage server auth, valid for validity (0 means
// CertValidity). An entry of hosts that parses as an IP is an IP SAN.
func (ca *CA) IssueServing(cn string, hosts []string, validity time.Duration) (KeyPair, error) {
	return ca.issue(servingTemplate(cn, hosts), validity)
}

// servingTemplate is a serving certificate for cn valid for hosts (IPs as IP SANs).
func servingTemplate(cn string, hosts []string) *x509.Certificate {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return tmpl
}

// IssueServingAndClient is IssueServing with client auth too: a member that both serves
// and dials its peers with one certificate (kubeadm's etcd server and peer certificates).
func (ca *CA) IssueServingAndClient(cn string, hosts []string, validity time.Duration) (KeyPair, error) {
	tmpl := servingTemplate(cn, hosts)
	tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	return ca.issue(tmpl, validity)
}

func (ca *CA) issue(tmpl *x509.Certificate, validity time.Duration) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	if validity <= 0 {
		validity = CertValidity
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-clockSkew), now.Add(validity)
	_, certPEM, err := ca.Sign(tmpl, key.Public())
	if err != nil {
		return KeyPair{}, err
	}
	keyPEM, err := EncodeKeyPEM(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// EncodeCertPEM is cert as a "CERTIFICATE" PEM block.
func EncodeCertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// EncodeKeyPEM is key as a PKCS#8 "PRIVATE KEY" PEM block.
func EncodeKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// EncodePublicKeyPEM is pub as a PKIX "PUBLIC KEY" PEM block, the form of kubeadm's sa.pub.
func EncodePublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKeysPEM parses every "PUBLIC KEY" (PKIX) and "RSA PUBLIC KEY" (PKCS#1)
// block of data, as kube-apiserver reads --service-account-key-file. Errors: no public
// key block, or one that does not parse.
func ParsePublicKeysPEM(data []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		switch block.Type {
		case "PUBLIC KEY":
			key, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			keys = append(keys, key)
		case "RSA PUBLIC KEY":
			key, err := x509.ParsePKCS1PublicKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no PUBLIC KEY PEM block")
	}
	return keys, nil
}

// serviceAccountKeyBits is the size of the service-account signing key, kubeadm's.
const serviceAccountKeyBits = 2048

// newServiceAccountKey makes the service-account token signing key as kubeadm does: RSA
// 2048 in a PKCS#1 "RSA PRIVATE KEY" block, so tokens are RS256, the one algorithm every
// OIDC consumer of the issuer's keys must support. An ECDSA key dropped in its place
// works too (ES256 tokens).
func newServiceAccountKey() (keyPEM, pubPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, serviceAccountKeyBits)
	if err != nil {
		return nil, nil, err
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if pubPEM, err = EncodePublicKeyPEM(key.Public()); err != nil {
		return nil, nil, err
	}
	return keyPEM, pubPEM, nil
}

// ParseCertPEM parses the first CERTIFICATE block of data.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no CERTIFICATE PEM block")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// ParseKeyPEM parses a PKCS#8, EC or PKCS#1 RSA private key PEM block.
func ParseKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no private key PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported private key PEM block %q", block.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", key)
	}
	return signer, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
