package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
)

// NewKubeletClientCertificateManager returns a Manager that keeps the kubelet's client
// certificate (CN system:node:<nodeName>, O system:nodes) in certDir and, once started,
// renews it with a new key at 70–90 % of its lifetime (client-go's jittered deadline
// around 80 %), asking through the clientset clientsetFn returns (the kubelet's own
// identity once it has one). Mirrors kubelet's NewKubeletClientCertificateManager.
// seedCertPEM and seedKeyPEM, when the store is empty, become its first pair.
func NewKubeletClientCertificateManager(certDir, nodeName string, clientsetFn certificate.ClientsetFunc, seedCertPEM, seedKeyPEM []byte) (certificate.Manager, error) {
	store, err := certificate.NewFileStore(ClientPairName, certDir, certDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("client certificate store in %s: %w", certDir, err)
	}
	return certificate.NewManager(&certificate.Config{
		ClientsetFn: clientsetFn,
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: nodeUserPrefix + nodeName, Organization: []string{nodesGroup}},
		},
		SignerName:              certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:               certificate.DefaultKubeletClientGetUsages,
		CertificateStore:        store,
		BootstrapCertificatePEM: seedCertPEM,
		BootstrapKeyPEM:         seedKeyPEM,
		Name:                    "kubelet-client",
	})
}

// ServingCertificateManager keeps the kubelet's serving certificate for its HTTPS port
// (10250): signer kubernetes.io/kubelet-serving, CN system:node:<name>, O system:nodes,
// SANs the node's host names and IPs. The csr-signer approves it once the Node reports
// those addresses. Mirrors kubelet's NewKubeletServerCertificateManager.
type ServingCertificateManager struct {
	certificate.Manager
}

// NewServingCertificateManager returns the serving certificate manager for nodeName,
// keeping key and certificate in certDir (kubelet-server-current.pem). getAddresses
// returns the node's addresses (those it reports in status.addresses): Hostname,
// InternalDNS and ExternalDNS become DNS SANs, InternalIP and ExternalIP IP SANs; until
// it returns any, nothing is requested. Start begins requesting and renewing.
func NewServingCertificateManager(client kubernetes.Interface, nodeName, certDir string, getAddresses func() []corev1.NodeAddress) (*ServingCertificateManager, error) {
	store, err := certificate.NewFileStore(ServerPairName, certDir, certDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("serving certificate store in %s: %w", certDir, err)
	}
	getTemplate := func() *x509.CertificateRequest {
		hostnames, ips := addressesToHostnamesAndIPs(getAddresses())
		if len(hostnames) == 0 && len(ips) == 0 {
			return nil
		}
		return &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: nodeUserPrefix + nodeName, Organization: []string{nodesGroup}},
			DNSNames:    hostnames,
			IPAddresses: ips,
		}
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate:      getTemplate,
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             "kubelet-serving",
	})
	if err != nil {
		return nil, err
	}
	return &ServingCertificateManager{Manager: m}, nil
}

// errNoServingCertificate is the TLS handshake error while no certificate is issued yet.
var errNoServingCertificate = errors.New("no serving certificate available for the kubelet")

// GetCertificate serves the current certificate, for tls.Config.GetCertificate; until
// one is issued, handshakes fail.
func (m *ServingCertificateManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := m.Current(); cert != nil {
		return cert, nil
	}
	return nil, errNoServingCertificate
}

// ServingCertificate returns GetCertificate, for tls.Config.GetCertificate of the
// kubelet's server.
func (m *ServingCertificateManager) ServingCertificate() func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return m.GetCertificate
}

// addressesToHostnamesAndIPs splits node addresses into sorted, de-duplicated DNS names
// and IPs. Mirrors kubelet's addressesToHostnamesAndIPs.
func addressesToHostnamesAndIPs(addresses []corev1.NodeAddress) ([]string, []net.IP) {
	hostnames, seenIPs := sets.New[string](), sets.New[string]()
	var ips []net.IP
	for _, a := range addresses {
		if a.Address == "" {
			continue
		}
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			hostnames.Insert(a.Address)
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip := net.ParseIP(a.Address); ip != nil && !seenIPs.Has(ip.String()) {
				seenIPs.Insert(ip.String())
				ips = append(ips, ip)
			}
		}
	}
	return sets.List(hostnames), ips
}

// ServerTLSConfig is the kubelet API's TLS configuration: the serving certificate m
// holds, and client certificates verified against the PEM CA bundle clientCAPEM (kube's
// --client-ca-file; in skiff the cluster CA). Errors: no certificate in clientCAPEM.
func ServerTLSConfig(m *ServingCertificateManager, clientCAPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(clientCAPEM) {
		return nil, errors.New("kubelet API: no CA certificate in the client CA bundle")
	}
	return &tls.Config{GetCertificate: m.GetCertificate, ClientCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// StartServing requests the kubelet API's serving certificate for nodeName's addresses
// (those the node reports in status.addresses) through client, keeps and renews it in
// certDir until ctx ends, and returns the API's TLS configuration, which verifies
// clients against clientCAPEM. Handshakes fail until the certificate is issued (the
// csr-signer approves it once the Node reports those addresses).
func StartServing(ctx context.Context, client kubernetes.Interface, nodeName, certDir string, addresses []corev1.NodeAddress, clientCAPEM []byte) (*tls.Config, error) {
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	m, err := NewServingCertificateManager(client, nodeName, certDir, func() []corev1.NodeAddress { return addresses })
	if err != nil {
		return nil, err
	}
	tlsConfig, err := ServerTLSConfig(m, clientCAPEM)
	if err != nil {
		return nil, err
	}
	m.Start()
	context.AfterFunc(ctx, m.Stop)
	return tlsConfig, nil
}
