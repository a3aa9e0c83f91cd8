package certificate

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

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
// SANs the node's host names and IPs. A person approves it, or csr-signer with
// --approve-kubelet-serving once the Node reports those addresses and none is reserved
// (csrsigner.ServingPolicy). Mirrors kubelet's NewKubeletServerCertificateManager.
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
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate:      func() *x509.CertificateRequest { return servingTemplate(nodeName, getAddresses()) },
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

// servingTemplate is the serving certificate request for nodeName's addresses, nil while
// there are none. Mirrors the kubelet's getTemplate in NewKubeletServerCertificateManager.
func servingTemplate(nodeName string, addresses []corev1.NodeAddress) *x509.CertificateRequest {
	hostnames, ips := addressesToHostnamesAndIPs(addresses)
	if len(hostnames) == 0 && len(ips) == 0 {
		return nil
	}
	return &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: nodeUserPrefix + nodeName, Organization: []string{nodesGroup}},
		DNSNames:    hostnames,
		IPAddresses: ips,
	}
}

// WriteIssuedServingCert gives a node its serving certificate without a
// CertificateSigningRequest, from whoever holds the cluster CA, as WriteIssuedClientCert
// does its client certificate: unless certDir's store (kubelet-server-current.pem)
// already holds a certificate within its validity period for exactly nodeName's
// addresses (CN system:node:<nodeName>, O system:nodes, the DNS names and IPs
// StartServing would request), it makes a P-256 key, has sign issue the certificate for
// that template (usages digital signature and server auth; NotBefore and NotAfter left
// for sign to set) and stores the pair. StartServing then serves it at once; its renewal
// goes through a CertificateSigningRequest. The all-in-one uses it for its own kubelet,
// whose addresses (loopback by default) no csr-signer approves. written reports whether a
// certificate was issued. Errors: sign's, no addresses, files.
func WriteIssuedServingCert(certDir, nodeName string, addresses []corev1.NodeAddress, sign func(template *x509.Certificate, pub crypto.PublicKey) (certPEM []byte, err error)) (written bool, err error) {
	req := servingTemplate(nodeName, addresses)
	if req == nil {
		return false, fmt.Errorf("node %s has no address to issue a serving certificate for", nodeName)
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return false, err
	}
	store, err := certificate.NewFileStore(ServerPairName, certDir, certDir, "", "")
	if err != nil {
		return false, fmt.Errorf("serving certificate store in %s: %w", certDir, err)
	}
	if current, err := store.Current(); err == nil && servesTemplate(current.Leaf, req, time.Now()) {
		return false, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	certPEM, err := sign(&x509.Certificate{
		Subject:     req.Subject,
		DNSNames:    req.DNSNames,
		IPAddresses: req.IPAddresses,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, key.Public())
	if err != nil {
		return false, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return false, err
	}
	if _, err := store.Update(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		return false, err
	}
	return true, nil
}

// servesTemplate reports whether cert is valid at now and names exactly what req asks.
func servesTemplate(cert *x509.Certificate, req *x509.CertificateRequest, now time.Time) bool {
	if cert == nil || now.Before(cert.NotBefore) || now.After(cert.NotAfter) || cert.Subject.CommonName != req.Subject.CommonName ||
		!slices.Equal(cert.Subject.Organization, req.Subject.Organization) || !sets.New(cert.DNSNames...).Equal(sets.New(req.DNSNames...)) {
		return false
	}
	certIPs, reqIPs := sets.New[string](), sets.New[string]()
	for _, ip := range cert.IPAddresses {
		certIPs.Insert(ip.String())
	}
	for _, ip := range req.IPAddresses {
		reqIPs.Insert(ip.String())
	}
	return certIPs.Equal(reqIPs)
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
// clients against clientCAPEM. It does not wait for the certificate: the kubelet runs,
// registers and runs pods meanwhile, but every TLS handshake on its API fails ("no
// serving certificate available for the kubelet", so exec, attach, port-forward and
// logs through exec-proxy get 502) until the request is approved and issued, by a
// person (kubectl certificate approve) or by csr-signer --approve-kubelet-serving. A
// request left pending is given up after 15 minutes and asked again with a new key
// (client-go's certificate manager, as the kubelet's --rotate-server-certificates).
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
