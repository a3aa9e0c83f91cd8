// Package certificate is the kubelet's TLS bootstrap and certificate rotation: from a
// bootstrap kubeconfig (a bootstrap token) the kubelet makes a key, asks for a client
// certificate with a CertificateSigningRequest, waits until it is approved and issued,
// and writes key, certificate and a kubeconfig into its certificate directory; it then
// renews that certificate before it expires and gets a serving certificate for its HTTPS
// port the same way. Mirrors k8s.io/kubernetes/pkg/kubelet/certificate and its bootstrap
// package, on client-go's k8s.io/client-go/util/certificate Manager.
package certificate

import (
	"context"
	"crypto"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

// Names in the certificate directory, as the kubelet lays it out.
const (
	// ClientPairName is the client certificate's store name: the store keeps
	// kubelet-client-<timestamp>.pem files and the symlink kubelet-client-current.pem.
	ClientPairName = "kubelet-client"
	// ServerPairName is the serving certificate's store name (kubelet-server-current.pem).
	ServerPairName = "kubelet-server"
	// tmpPrivateKeyFile holds the key of a request still waiting for its certificate, so
	// a restart asks again with the same key (and so the same request name).
	tmpPrivateKeyFile = "kubelet-client.key.tmp"
	// DefaultCertDir is where the kubelet keeps its certificates (--cert-dir).
	DefaultCertDir = "/var/lib/kubelet/pki"
	// bootstrapWaitTimeout bounds the wait for approval and issuance of the first
	// certificate, as kube's bootstrap does (1 h).
	bootstrapWaitTimeout = time.Hour
)

// requestBackoff spaces the attempts to create the bootstrap request: 1 s doubling to
// 30 s, with 10 % jitter, until the context ends.
var requestBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 30 * time.Second}

// Subject names of kubelet identities.
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// LoadClientCert makes sure kubeconfigPath holds a valid client identity for nodeName.
// If the kubeconfig exists and its client certificate is within its validity period,
// nothing is done (a restart reuses it). Otherwise it requests a certificate
// (signer kubernetes.io/kube-apiserver-client-kubelet, CN system:node:<nodeName>,
// O system:nodes, an ECDSA P-256 key) with the credentials of bootstrapPath, waits up to
// an hour for it to be approved and issued, stores key and certificate in certDir
// (kubelet-client-current.pem) and writes kubeconfigPath pointing at them. Creating the
// request is retried with backoff while the apiserver does not take it; ctx ends the
// waits early. Errors: an unreadable bootstrap kubeconfig, a denied or failed request, a
// timeout. Mirrors bootstrap.LoadClientCert.
func LoadClientCert(ctx context.Context, kubeconfigPath, bootstrapPath, certDir, nodeName string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	if ok, why := isClientConfigStillValid(kubeconfigPath); ok {
		logger.Info("kubeconfig exists and is valid, skipping TLS bootstrap", "path", kubeconfigPath)
		return nil
	} else if why != "" {
		logger.Info("kubeconfig cannot be reused, bootstrapping", "path", kubeconfigPath, "why", why)
	}
	bootstrapConfig, err := loadRESTClientConfig(bootstrapPath)
	if err != nil {
		return fmt.Errorf("unable to load bootstrap kubeconfig: %w", err)
	}
	bootstrapClient, err := kubernetes.NewForConfig(bootstrapConfig)
	if err != nil {
		return fmt.Errorf("bootstrap client: %w", err)
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	store, err := certificate.NewFileStore(ClientPairName, certDir, certDir, "", "")
	if err != nil {
		return fmt.Errorf("certificate store in %s: %w", certDir, err)
	}
	// The key is kept in a file of its own until the certificate arrives: the store's
	// current pair is a symlink it manages.
	keyPath := filepath.Join(certDir, tmpPrivateKeyFile)
	keyData, _, err := keyutil.LoadOrGenerateKeyFile(keyPath)
	if err != nil {
		return err
	}
	logger.Info("requesting a client certificate with the bootstrap credentials", "node", nodeName, "server", bootstrapConfig.Host)
	certData, err := requestNodeCertificate(ctx, bootstrapClient, keyData, nodeName, logger)
	if err != nil {
		return err
	}
	if _, err := store.Update(certData, keyData); err != nil {
		return err
	}
	if err := os.Remove(keyPath); err != nil && !os.IsNotExist(err) {
		logger.Warn("removing the temporary key", "path", keyPath, "err", err)
	}
	return writeKubeconfigFromBootstrapping(bootstrapConfig, kubeconfigPath, store.CurrentPath())
}

// requestNodeCertificate creates the node's client certificate request with keyData and
// waits for its certificate. The request's name is derived from the key, subject and
// usages, so asking again with the same key finds the earlier request.
func requestNodeCertificate(ctx context.Context, client kubernetes.Interface, keyData []byte, nodeName string, logger *slog.Logger) ([]byte, error) {
	subject := &pkix.Name{CommonName: nodeUserPrefix + nodeName, Organization: []string{nodesGroup}}
	privateKey, err := keyutil.ParsePrivateKeyPEM(keyData)
	if err != nil {
		return nil, fmt.Errorf("invalid private key for certificate request: %w", err)
	}
	signer, ok := privateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("private key does not implement crypto.Signer")
	}
	csrData, err := certutil.MakeCSR(privateKey, subject, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("unable to generate certificate request: %w", err)
	}
	usages := certificate.DefaultKubeletClientGetUsages(privateKey)
	name, err := digestedName(signer.Public(), subject, usages)
	if err != nil {
		return nil, err
	}
	// The apiserver may not answer yet (or the token not be known yet): ask again with
	// backoff, as every skiff service does with its peers, until ctx ends.
	var reqName string
	var reqUID types.UID
	err = wait.ExponentialBackoffWithContext(ctx, requestBackoff, func(ctx context.Context) (bool, error) {
		var err error
		reqName, reqUID, err = csr.RequestCertificateWithContext(ctx, client, csrData, name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, privateKey)
		if err != nil {
			logger.Warn("creating the certificate signing request; will retry", "csr", name, "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("create certificate signing request %s: %w", name, err)
	}
	logger.Info("waiting for the client certificate to be approved and issued", "csr", reqName)
	ctx, cancel := context.WithTimeout(ctx, bootstrapWaitTimeout)
	defer cancel()
	return csr.WaitForCertificate(ctx, client, reqName, reqUID)
}

// digestedName is "node-csr-" and a hash of the public key, subject and usages, so the
// same key asks under the same name. Mirrors bootstrap.digestedName.
func digestedName(publicKey crypto.PublicKey, subject *pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(publicKey)
	if err != nil {
		return "", err
	}
	h := sha512.New512_256()
	const delimiter = '|'
	encode := base64.RawURLEncoding.EncodeToString
	write := func(data []byte) {
		h.Write([]byte(encode(data)))
		h.Write([]byte{delimiter})
	}
	write(der)
	write([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		write([]byte(o))
	}
	for _, u := range usages {
		write([]byte(u))
	}
	return "node-csr-" + encode(h.Sum(nil)), nil
}

// isClientConfigStillValid reports whether kubeconfigPath exists and its client
// certificates are all within their validity period; when not, why says what is wrong
// ("" when the file does not exist).
func isClientConfigStillValid(kubeconfigPath string) (ok bool, why string) {
	if _, err := os.Stat(kubeconfigPath); err != nil {
		return false, ""
	}
	cfg, err := loadRESTClientConfig(kubeconfigPath)
	if err != nil {
		return false, fmt.Sprintf("unable to read existing kubeconfig: %v", err)
	}
	var certs []*x509.Certificate
	switch {
	case len(cfg.TLSClientConfig.CertData) > 0:
		certs, err = certutil.ParseCertsPEM(cfg.TLSClientConfig.CertData)
	case cfg.TLSClientConfig.CertFile != "":
		certs, err = certutil.CertsFromFile(cfg.TLSClientConfig.CertFile)
	default:
		return false, "kubeconfig has no client certificate"
	}
	if err != nil {
		return false, fmt.Sprintf("unable to load client certificate: %v", err)
	}
	if len(certs) == 0 {
		return false, "no client certificate"
	}
	now := time.Now()
	for _, c := range certs {
		if now.After(c.NotAfter) || now.Before(c.NotBefore) {
			return false, fmt.Sprintf("client certificate %q is outside %s..%s", c.Subject.CommonName, c.NotBefore, c.NotAfter)
		}
	}
	return true, ""
}

// loadRESTClientConfig reads a kubeconfig file, resolving relative paths against its
// directory.
func loadRESTClientConfig(path string) (*rest.Config, error) {
	loadingRules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loadingRules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// writeKubeconfigFromBootstrapping writes a kubeconfig that reaches the bootstrap
// kubeconfig's server, trusting its CA, with the client certificate and key in pemPath.
// Mirrors bootstrap.writeKubeconfigFromBootstrapping.
func writeKubeconfigFromBootstrapping(bootstrapConfig *rest.Config, kubeconfigPath, pemPath string) error {
	caFile, caData := bootstrapConfig.CAFile, []byte(nil)
	if caFile == "" {
		caData = bootstrapConfig.CAData
	}
	config := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server:                   bootstrapConfig.Host,
			InsecureSkipTLSVerify:    bootstrapConfig.Insecure,
			CertificateAuthority:     caFile,
			CertificateAuthorityData: caData,
			TLSServerName:            bootstrapConfig.ServerName,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfigPath), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(config, kubeconfigPath)
}

// ClusterCA returns the PEM CA bundle a kubeconfig trusts for its server (embedded or
// from its file): in skiff, the cluster CA, which also signs every client certificate.
func ClusterCA(kubeconfigPath string) ([]byte, error) {
	cfg, err := loadRESTClientConfig(kubeconfigPath)
	if err != nil {
		return nil, err
	}
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		return os.ReadFile(cfg.CAFile)
	}
	return nil, fmt.Errorf("kubeconfig %s names no certificate authority", kubeconfigPath)
}

// WriteIssuedClientCert gives a node its client certificate without a
// CertificateSigningRequest, from whoever holds the cluster CA, as kubeadm init writes
// its own node's kubelet.conf: unless kubeconfigPath already holds a usable certificate,
// issue's certificate and key (CN system:node:<name>, O system:nodes) go into certDir's
// store and kubeconfigPath is written for them with the bootstrap kubeconfig's server and
// CA, exactly as a TLS bootstrap leaves them. LoadClientCert then finds them; renewal
// goes through CertificateSigningRequests as after a bootstrap. written reports whether
// a certificate was issued. Errors: issue's, an unreadable bootstrap kubeconfig, files.
func WriteIssuedClientCert(kubeconfigPath, bootstrapPath, certDir string, issue func() (certPEM, keyPEM []byte, err error)) (written bool, err error) {
	if ok, _ := isClientConfigStillValid(kubeconfigPath); ok {
		return false, nil
	}
	bootstrapConfig, err := loadRESTClientConfig(bootstrapPath)
	if err != nil {
		return false, fmt.Errorf("unable to load bootstrap kubeconfig: %w", err)
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return false, err
	}
	store, err := certificate.NewFileStore(ClientPairName, certDir, certDir, "", "")
	if err != nil {
		return false, fmt.Errorf("certificate store in %s: %w", certDir, err)
	}
	certPEM, keyPEM, err := issue()
	if err != nil {
		return false, err
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		return false, err
	}
	return true, writeKubeconfigFromBootstrapping(bootstrapConfig, kubeconfigPath, store.CurrentPath())
}
