package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"
)

// ServeTLS serves handler on lis over TLS until ctx ends, then closes the server at once
// (long-lived streams end with it). tlsConfig must hold the serving certificate
// (Certificates or GetCertificate) and the CA that verifies clients (ClientCAs); client
// certificates are verified when given (VerifyClientCertIfGiven) unless ClientAuth asks
// for more, so a /healthz can answer without one. name prefixes errors. Errors: no
// ClientCAs (lis is closed), or serving failed. Used by exec-proxy and the kubelet API.
func ServeTLS(ctx context.Context, lis net.Listener, handler http.Handler, tlsConfig *tls.Config, name string) error {
	if tlsConfig == nil || tlsConfig.ClientCAs == nil {
		lis.Close()
		return errors.New(name + ": TLS with client CAs is required")
	}
	tlsConfig = tlsConfig.Clone()
	if tlsConfig.ClientAuth == tls.NoClientCert {
		tlsConfig.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if tlsConfig.MinVersion == 0 {
		tlsConfig.MinVersion = tls.VersionTLS12
	}
	srv := &http.Server{Handler: handler, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(lis, tlsConfig)) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	srv.Close()
	<-served
	return nil
}
