package events

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
)

// ClientTLS is the TLS configuration a component dials NATS with (mutual TLS, DESIGN.md
// "Events"): it trusts the CA certificates in caPEM and presents the key pair of
// certFile and keyFile, which may name the same file (a kubelet's
// kubelet-client-current.pem holds both). The pair is read again at every TLS handshake,
// that is every connect and reconnect: client-go's certificate manager replaces a
// kubelet's pair when it rotates, and the next connection presents the new one.
// Errors: caPEM holds no certificate, or the pair cannot be loaded now.
func ClientTLS(caPEM []byte, certFile, keyFile string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("events: NATS CA: no PEM certificate")
	}
	if certFile == "" {
		return nil, errors.New("events: NATS client certificate file is required")
	}
	if keyFile == "" {
		keyFile = certFile
	}
	load := func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("events: NATS client key pair: %w", err)
		}
		return &cert, nil
	}
	if _, err := load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		RootCAs:    roots,
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return load()
		},
	}, nil
}

// ClientTLSFromFiles is ClientTLS with the CA read from caFile (kube's --*-ca-file).
func ClientTLSFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("events: NATS CA: %w", err)
	}
	return ClientTLS(caPEM, certFile, keyFile)
}

// ClientTLSFromRESTConfig is the TLS configuration toward NATS of a component whose NATS
// identity is its kubeconfig's (the scheduler's system:kube-scheduler certificate): it
// trusts c's CA and presents c's client certificate, as client-go does toward the
// apiserver (rest.TLSConfigFor). Errors: c names no CA or no client certificate.
func ClientTLSFromRESTConfig(c *rest.Config) (*tls.Config, error) {
	if len(c.CAData) == 0 && c.CAFile == "" {
		return nil, errors.New("events: NATS client TLS: the kubeconfig names no certificate authority")
	}
	if len(c.CertData) == 0 && c.CertFile == "" {
		return nil, errors.New("events: NATS client TLS: the kubeconfig holds no client certificate")
	}
	tlsConfig, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, fmt.Errorf("events: NATS client TLS: %w", err)
	}
	// The kubeconfig's server name is the apiserver's, not NATS's.
	tlsConfig.ServerName = ""
	return tlsConfig, nil
}

// ServiceClientTLS is a control-plane service's mutual TLS toward NATS from its
// --nats-ca-file/--nats-cert-file/--nats-key-file flags: those files when given, else the
// identity and CA of its kubeconfig. nil without a NATS URL. Errors: only one of the
// certificate and the CA given, or files that do not load.
func ServiceClientTLS(kubeconfig *rest.Config, natsURL, caFile, certFile, keyFile string) (*tls.Config, error) {
	switch {
	case natsURL == "":
		return nil, nil
	case certFile == "" && caFile == "" && keyFile == "":
		return ClientTLSFromRESTConfig(kubeconfig)
	case certFile == "" || caFile == "":
		return nil, errors.New("--nats-cert-file and --nats-ca-file go together")
	}
	return ClientTLSFromFiles(caFile, certFile, keyFile)
}
