package certificate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
)

// ClientOptions are the kubelet's credential flags.
type ClientOptions struct {
	// NodeName is the node whose identity (system:node:<NodeName>) is requested.
	NodeName string
	// KubeconfigPath is the kubelet's kubeconfig (--kubeconfig): read, or written by the
	// TLS bootstrap; required.
	KubeconfigPath string
	// BootstrapKubeconfigPath (--bootstrap-kubeconfig) holds the bootstrap token used to
	// request a client certificate when KubeconfigPath is missing or expired; "" means
	// KubeconfigPath must already be valid.
	BootstrapKubeconfigPath string
	// CertDir (--cert-dir) keeps the client and serving key pairs; "" means
	// DefaultCertDir.
	CertDir string
	// RotateCertificates (--rotate-certificates) renews the client certificate before it
	// expires, through a new request.
	RotateCertificates bool
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// NewClientConfig returns the rest.Config the kubelet reaches the apiserver with, as
// kubelet's buildKubeletClientConfig does. With BootstrapKubeconfigPath, it first runs
// LoadClientCert, blocking until the certificate is issued or ctx ends. With
// RotateCertificates, the client certificate comes from a Manager, started here and
// stopped when ctx ends, that renews it; the returned Manager is nil otherwise.
func NewClientConfig(ctx context.Context, opts ClientOptions) (*rest.Config, certificate.Manager, error) {
	if opts.KubeconfigPath == "" {
		return nil, nil, errors.New("kubelet certificate: a kubeconfig path is required")
	}
	if opts.CertDir == "" {
		opts.CertDir = DefaultCertDir
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BootstrapKubeconfigPath != "" {
		if err := LoadClientCert(ctx, opts.KubeconfigPath, opts.BootstrapKubeconfigPath, opts.CertDir, opts.NodeName, opts.Logger); err != nil {
			return nil, nil, fmt.Errorf("TLS bootstrap: %w", err)
		}
	}
	clientConfig, err := loadRESTClientConfig(opts.KubeconfigPath)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", opts.KubeconfigPath, err)
	}
	if !opts.RotateCertificates {
		return clientConfig, nil, nil
	}

	transportConfig := rest.AnonymousClientConfig(clientConfig)
	// The rotating transport takes the CA and server name from here; the client
	// certificate comes from the manager.
	transportConfig.TLSClientConfig = rest.TLSClientConfig{
		CAData: clientConfig.CAData, CAFile: clientConfig.CAFile, ServerName: clientConfig.ServerName, Insecure: clientConfig.Insecure,
	}
	var m certificate.Manager
	clientsetFn := func(current *tls.Certificate) (kubernetes.Interface, error) {
		// Renew with the kubelet's own identity; with none left (expired), fall back to
		// the bootstrap credentials when there are some.
		if current == nil && opts.BootstrapKubeconfigPath != "" {
			bootstrapConfig, err := loadRESTClientConfig(opts.BootstrapKubeconfigPath)
			if err != nil {
				return nil, err
			}
			return kubernetes.NewForConfig(bootstrapConfig)
		}
		return kubernetes.NewForConfig(transportConfig)
	}
	seedCert, seedKey := seedPEM(clientConfig)
	m, err = NewKubeletClientCertificateManager(opts.CertDir, opts.NodeName, clientsetFn, seedCert, seedKey)
	if err != nil {
		return nil, nil, err
	}
	if _, err := UpdateTransport(ctx, transportConfig, m, opts.Logger); err != nil {
		return nil, nil, err
	}
	m.Start()
	context.AfterFunc(ctx, m.Stop)
	return transportConfig, m, nil
}

// seedPEM returns the client certificate and key the kubeconfig carries, to seed an
// empty certificate store (a kubeconfig written by hand rather than by the bootstrap);
// the manager then replaces it with a certificate of its own at once.
func seedPEM(cfg *rest.Config) (certPEM, keyPEM []byte) {
	certPEM, keyPEM = cfg.CertData, cfg.KeyData
	if len(certPEM) == 0 && cfg.CertFile != "" {
		certPEM, _ = os.ReadFile(cfg.CertFile)
	}
	if len(keyPEM) == 0 && cfg.KeyFile != "" {
		keyPEM, _ = os.ReadFile(cfg.KeyFile)
	}
	return certPEM, keyPEM
}
