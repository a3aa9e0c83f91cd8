package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ReloadingClientTLS is the TLS configuration of a client with mutual TLS whose key pair
// may be rotated under it (NATS's clients): it trusts the CA
// certificates in caPEM and presents the key pair of certFile and keyFile, which may name
// the same file (a kubelet's kubelet-client-current.pem holds both; keyFile "" means
// certFile). The pair is read again at every TLS handshake, that is every connect and
// reconnect: client-go's certificate manager replaces a kubelet's pair when it rotates,
// and the next connection presents the new one. Errors: caPEM holds no certificate, or
// the pair cannot be loaded now.
func ReloadingClientTLS(caPEM []byte, certFile, keyFile string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("pki: client TLS: the CA holds no PEM certificate")
	}
	if certFile == "" {
		return nil, errors.New("pki: client TLS: a client certificate file is required")
	}
	if keyFile == "" {
		keyFile = certFile
	}
	load := func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("pki: client key pair: %w", err)
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

// ClientTLSFromFiles is a component's mutual TLS toward a peer from its
// --*-ca-file/--*-cert-file/--*-key-file flags (kube-apiserver's --etcd-cafile,
// --etcd-certfile, --etcd-keyfile), each "" falling back to the `skiff pki init` directory
// dir: the certificate of its authority a (EtcdCA toward etcd, ClusterCA toward NATS) and
// the key pair name. The pair is read at every handshake, as ReloadingClientTLS. Errors:
// files that do not load.
func ClientTLSFromFiles(dir, name string, a Authority, caFile, certFile, keyFile string) (*tls.Config, error) {
	defCert, defKey := KeyPairFiles(dir, name)
	certFile, keyFile = orDefault(certFile, defCert), orDefault(keyFile, defKey)
	defCA, _ := a.Files(dir)
	caPEM, err := ReadCA("", caFile, defCA)
	if err != nil {
		return nil, err
	}
	return ReloadingClientTLS(caPEM, certFile, keyFile)
}

// ClientTLSFromRESTConfig is the TLS configuration toward a peer other than the apiserver
// (NATS) of a component whose identity there is its kubeconfig's (the scheduler's
// system:kube-scheduler certificate): it trusts c's CA and presents c's client
// certificate, as client-go does toward the apiserver (rest.TLSConfigFor). Errors: c
// names no CA or no client certificate.
func ClientTLSFromRESTConfig(c *rest.Config) (*tls.Config, error) {
	if len(c.CAData) == 0 && c.CAFile == "" {
		return nil, errors.New("pki: client TLS: the kubeconfig names no certificate authority")
	}
	if len(c.CertData) == 0 && c.CertFile == "" {
		return nil, errors.New("pki: client TLS: the kubeconfig holds no client certificate")
	}
	tlsConfig, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, fmt.Errorf("pki: client TLS: %w", err)
	}
	// The kubeconfig's server name is the apiserver's, not the peer's.
	tlsConfig.ServerName = ""
	return tlsConfig, nil
}

// NATSClientTLS is a control-plane service's mutual TLS toward NATS from its
// --nats-ca-file/--nats-cert-file/--nats-key-file flags: those files when given, else the
// identity and CA of its kubeconfig. nil without a NATS URL. Errors: only one of the
// certificate and the CA given, or files that do not load.
func NATSClientTLS(kubeconfig *rest.Config, natsURL, caFile, certFile, keyFile string) (*tls.Config, error) {
	switch {
	case natsURL == "":
		return nil, nil
	case certFile == "" && caFile == "" && keyFile == "":
		return ClientTLSFromRESTConfig(kubeconfig)
	case certFile == "" || caFile == "":
		return nil, errors.New("--nats-cert-file and --nats-ca-file go together")
	}
	caPEM, err := ReadCA("", caFile)
	if err != nil {
		return nil, err
	}
	return ReloadingClientTLS(caPEM, certFile, keyFile)
}

// ReadCA is the PEM CA bundle of the first non-empty of caFiles, else the certificate
// authority kubeconfigPath's current context trusts (kube's fallback from --client-ca-file
// to the kubeconfig's CA), as a kubelet verifies its clients. Errors: no source given,
// the file cannot be read, or the kubeconfig names no CA.
func ReadCA(kubeconfigPath string, caFiles ...string) ([]byte, error) {
	for _, f := range caFiles {
		if f == "" {
			continue
		}
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("pki: CA: %w", err)
		}
		return pem, nil
	}
	if kubeconfigPath == "" {
		return nil, errors.New("pki: no CA: neither a CA file nor a kubeconfig is given")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return nil, fmt.Errorf("pki: CA of kubeconfig: %w", err)
	}
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("pki: CA of kubeconfig: %w", err)
		}
		return pem, nil
	}
	return nil, fmt.Errorf("pki: kubeconfig %s names no certificate authority", kubeconfigPath)
}

// ServingTLS is the TLS configuration of an HTTPS server that serves the key pair of
// certFile and keyFile and verifies client certificates against the CA bundle clientCAPEM
// (kube's --tls-cert-file, --tls-private-key-file and --client-ca-file); whether a
// client certificate is required is the server's choice (ClientAuth is left unset).
// Errors: the pair does not load, or clientCAPEM holds no certificate.
func ServingTLS(certFile, keyFile string, clientCAPEM []byte) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: serving key pair: %w", err)
	}
	pool, err := CertPool(clientCAPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// CertPool is a pool of the PEM certificates in pem. Errors: pem holds none.
func CertPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("pki: the CA bundle holds no PEM certificate")
	}
	return pool, nil
}

// orDefault is value, or def when value is "".
func orDefault(value, def string) string {
	if value == "" {
		return def
	}
	return value
}
