package allinone

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/execproxy"
	execproxyapp "skiff.dev/services/execproxy/app"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet/nodestatus"
)

// streams is what kubectl exec, attach, port-forward and logs need in the
// all-in-one: exec-proxy's listener and the TLS each hop uses, all from the
// PKI directory.
type streams struct {
	pkiDir   string
	ca       *pki.CA
	listener net.Listener
	// URL is exec-proxy's base URL, for apiserver.Config.ExecProxyURL.
	URL string
}

// listenExecProxy listens for exec-proxy on bind:port (0: a free port).
func listenExecProxy(pkiDir string, ca *pki.CA, bind string, port int) (*streams, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("exec-proxy listen: %w", err)
	}
	return &streams{pkiDir: pkiDir, ca: ca, listener: l, URL: "https://" + l.Addr().String()}, nil
}

// keyPair loads the identity name's certificate and key from the PKI directory.
func (s *streams) keyPair(name string) (tls.Certificate, error) {
	certFile, keyFile := pki.KeyPairFiles(s.pkiDir, name)
	return tls.LoadX509KeyPair(certFile, keyFile)
}

// execProxy is exec-proxy's Config (execproxy/app), reading pods and nodes as
// system:skiff:exec-proxy through client, serving on the listener.
func (s *streams) execProxy(client kubernetes.Interface) (*execproxyapp.Config, error) {
	clientCert, err := s.keyPair(pki.ExecProxy.Name)
	if err != nil {
		return nil, fmt.Errorf("exec-proxy client certificate: %w", err)
	}
	serving, err := s.keyPair(pki.ExecProxyServingName)
	if err != nil {
		return nil, fmt.Errorf("exec-proxy serving certificate: %w", err)
	}
	// Only the apiserver's front-proxy-client, of the front-proxy CA, may call it.
	frontProxyCA, err := pki.AuthorityPool(s.pkiDir, pki.FrontProxyCA)
	if err != nil {
		return nil, fmt.Errorf("exec-proxy: %w", err)
	}
	return &execproxyapp.Config{
		Proxy:      execproxy.Config{Client: client, KubeletTLS: execproxy.KubeletClientTLS(clientCert, s.ca.CertPool())},
		Listener:   s.listener,
		ServingTLS: &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: frontProxyCA},
	}, nil
}

// kubeletServer is where the kubelet API listens (bind:port, 0: a free port)
// and the node IP the kubelet reports, so that exec-proxy, which dials the
// node's InternalIP, reaches that address: bind itself unless it is a
// wildcard, the host's first non-loopback IPv4 then.
func kubeletServer(bind string, port int) (addr, nodeIP string) {
	nodeIP = nodestatus.DefaultNodeIP()
	if ip, err := netip.ParseAddr(bind); err == nil && !ip.IsUnspecified() {
		nodeIP = bind
	}
	return net.JoinHostPort(bind, strconv.Itoa(port)), nodeIP
}
