package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nkeys"
)

// NATSAuthCalloutSeedFile holds the account nkey seed (an "SA..." line, mode 0600) that
// signs the answers of NATS's auth callout: the apiserver signs with it, and nats-server
// trusts what it signs through the public key in its configuration (auth_callout's
// issuer, nats-server's server/auth_callout.go). Only the apiserver reads it; NATS needs
// the public key alone.
const NATSAuthCalloutSeedFile = "nats-auth-callout.nk"

// initNATSAuthCallout creates dir's NATSAuthCalloutSeedFile unless it exists, and returns
// written with its name added when it wrote it. Errors: the seed cannot be made or
// written.
func initNATSAuthCallout(dir string, written []string) ([]string, error) {
	path := join(dir, NATSAuthCalloutSeedFile)
	if exists(path) {
		return written, nil
	}
	kp, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("pki: NATS auth callout key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("pki: NATS auth callout key: %w", err)
	}
	if err := WriteFileAtomic(path, append(seed, '\n'), 0o600); err != nil {
		return nil, err
	}
	return append(written, NATSAuthCalloutSeedFile), nil
}

// LoadNATSAuthCalloutKey reads the account key pair from path, a NATSAuthCalloutSeedFile.
// Errors: the file cannot be read, or holds no account nkey seed.
func LoadNATSAuthCalloutKey(path string) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: NATS auth callout key: %w", err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
	if err != nil {
		return nil, fmt.Errorf("pki: NATS auth callout key %s: %w", path, err)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("pki: NATS auth callout key %s: not an account nkey seed", path)
	}
	return kp, nil
}

// NATSAuthCalloutIssuer is the public account nkey ("A...", 56 characters) of the seed in
// path: what nats-server's auth_callout names as its issuer. Errors: as
// LoadNATSAuthCalloutKey.
func NATSAuthCalloutIssuer(path string) (string, error) {
	kp, err := LoadNATSAuthCalloutKey(path)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// NATSUser is the user name NATS's authorization knows a client by: the CommonName of
// the client certificate c presents (the same name the apiserver's x509 authenticator
// gives it). Errors: c presents no certificate, or it does not parse.
func NATSUser(c *tls.Config) (string, error) {
	var cert *tls.Certificate
	switch {
	case c == nil:
		return "", errors.New("pki: no TLS configuration")
	case c.GetClientCertificate != nil:
		var err error
		if cert, err = c.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil {
			return "", err
		}
	case len(c.Certificates) > 0:
		cert = &c.Certificates[0]
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return "", errors.New("pki: the TLS configuration presents no client certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return "", fmt.Errorf("pki: client certificate: %w", err)
		}
	}
	return leaf.Subject.CommonName, nil
}
