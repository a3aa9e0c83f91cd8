package pki

import (
	"crypto/tls"
	"fmt"
)

// ServerTLS is the TLS configuration of a server that serves the key pair name of dir and
// requires every client to present a certificate from dir's CA (mutual TLS), as etcd's
// --client-cert-auth and NATS's verify do.
func ServerTLS(dir, name string) (*tls.Config, error) {
	certFile, keyFile := KeyPairFiles(dir, name)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s key pair: %w", name, err)
	}
	pool, err := AuthorityPool(dir, ClusterCA)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// ClientTLS is the TLS configuration of a client that presents the key pair name of dir
// and trusts only dir's cluster CA.
func ClientTLS(dir, name string) (*tls.Config, error) { return ClientTLSOf(dir, name, ClusterCA) }

// ClientTLSOf is the TLS configuration of a client that presents the key pair name of dir
// and trusts only the authority a of dir (EtcdCA toward etcd).
func ClientTLSOf(dir, name string, a Authority) (*tls.Config, error) {
	certFile, keyFile := KeyPairFiles(dir, name)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s key pair: %w", name, err)
	}
	pool, err := AuthorityPool(dir, a)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
