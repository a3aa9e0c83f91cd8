package certificate

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
)

// rotationCheckPeriod is how often UpdateTransport looks for a rotated certificate.
const rotationCheckPeriod = 10 * time.Second

// UpdateTransport makes clientConfig present m's current client certificate in every TLS
// handshake, and closes every connection when the certificate changes so the next
// requests handshake with the new one. It replaces clientConfig's TLS options with a
// Transport of its own (an error if clientConfig already has a Transport or Dial). The
// checks stop when ctx ends. It returns a function closing every connection. Mirrors
// kubelet's certificate.UpdateTransport, without its exit-on-expiry.
func UpdateTransport(ctx context.Context, clientConfig *rest.Config, m certificate.Manager, logger *slog.Logger) (closeAllConns func(), err error) {
	if clientConfig.Transport != nil || clientConfig.Dial != nil {
		return nil, errors.New("there is already a transport or dialer configured")
	}
	if logger == nil {
		logger = slog.Default()
	}
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	tlsConfig, err := rest.TLSConfigFor(clientConfig)
	if err != nil {
		return nil, err
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := m.Current(); cert != nil {
			return cert, nil
		}
		// No certificate yet: send none and let the apiserver answer 401.
		return &tls.Certificate{}, nil
	}
	var mu sync.Mutex
	lastCert := m.Current()
	checkNewCertificateAndRotate := func(context.Context) {
		mu.Lock()
		defer mu.Unlock()
		current := m.Current()
		if current == nil || current == lastCert {
			return
		}
		lastCert = current
		logger.Info("client certificate rotated, closing connections to use the new credentials")
		d.CloseAll()
	}
	go wait.UntilWithContext(ctx, checkNewCertificateAndRotate, rotationCheckPeriod)

	clientConfig.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         d.DialContext,
	})
	// The transport carries the TLS options now; rest refuses both.
	clientConfig.TLSClientConfig = rest.TLSClientConfig{}
	return d.CloseAll, nil
}
