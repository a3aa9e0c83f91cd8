// Package natsserver runs an embedded NATS server with JetStream
// (github.com/nats-io/nats-server/v2/server) for the all-in-one and for tests: the same
// server the compose stack runs as a container, in process, from the same configuration
// file (RenderConfig), and like it speaking mutual TLS with per-identity permissions:
// only clients with a certificate from the cluster CA get in, and each may do only what
// the apiserver's auth callout grants it (package natsauth).
package natsserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config is where the server keeps JetStream's data, where it listens, and whom it
// admits.
type Config struct {
	// StoreDir holds JetStream's streams on disk (file storage survives a restart).
	StoreDir string
	// Host is the listen address, e.g. "127.0.0.1".
	Host string
	// Port is the client port (4222); 0 picks a free one, see Server.Port.
	Port int
	// ReadyTimeout bounds the wait for the server to accept clients; 0 means 10 s.
	ReadyTimeout time.Duration
	// PKIDir, when set, is a `skiff pki init` directory the server runs from as compose's
	// nats container does, through the configuration RenderConfig makes of
	// ConfigFileFromPKI(PKIDir, ""): it serves nats-server.crt/.key, admits only clients
	// with a certificate from ca.crt, gives the apiserver's every permission and every
	// other client those the auth callout signed with nats-auth-callout.nk's key grants.
	PKIDir string
	// TLS, when set instead of PKIDir, is the server's TLS configuration
	// (pki.ServerTLS(dir, pki.NATSServerName)): every client must present a certificate
	// that verifies against TLS.ClientCAs, as nats-server's --tlsverify, and may then
	// publish and subscribe to anything: authentication without authorization, for tests
	// of the TLS layer alone. Start sets ClientAuth to tls.RequireAndVerifyClientCert on
	// its own copy whatever the caller set. With neither, the server speaks plain TCP.
	TLS *tls.Config
}

// Server is a running embedded NATS server.
type Server struct {
	srv *server.Server
}

// Start starts the server and waits until it accepts connections. Errors: both PKIDir
// and TLS set, a PKI directory without the server's key pair or the callout's key, the
// store directory is unusable, the port is in use, or the server is not ready in time.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsserver: Config.StoreDir is required")
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	var opts *server.Options
	switch {
	case cfg.PKIDir != "" && cfg.TLS != nil:
		return nil, errors.New("natsserver: Config.PKIDir and Config.TLS are exclusive")
	case cfg.PKIDir != "":
		file, err := ConfigFileFromPKI(cfg.PKIDir, "")
		if err != nil {
			return nil, err
		}
		file.Host, file.Port, file.StoreDir = cfg.Host, port, cfg.StoreDir
		if opts, err = LoadConfig(file); err != nil {
			return nil, err
		}
	default:
		opts = &server.Options{ServerName: serverName, Host: cfg.Host, Port: port, JetStream: true, StoreDir: cfg.StoreDir}
		if cfg.TLS != nil {
			if cfg.TLS.ClientCAs == nil {
				return nil, errors.New("natsserver: Config.TLS needs ClientCAs to verify clients against")
			}
			// nats-server requires verification only when ClientAuth says so (its "verify").
			opts.TLSConfig = cfg.TLS.Clone()
			opts.TLSConfig.ClientAuth = tls.RequireAndVerifyClientCert
			opts.TLS, opts.TLSVerify = true, true
			opts.TLSTimeout = tlsTimeout
		}
	}
	opts.NoSigs, opts.DisableJetStreamBanner = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	srv.SetLoggerV2(slogLogger{slog.Default().With("component", "nats-server")}, false, false, false)
	srv.Start()
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if !srv.ReadyForConnections(timeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("natsserver: not ready after %s (port %d in use?)", timeout, cfg.Port)
	}
	return &Server{srv: srv}, nil
}

// ClientURL is the URL clients connect to: "nats://127.0.0.1:4222", or
// "tls://127.0.0.1:4222" with TLS.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Port is the client port the server listens on.
func (s *Server) Port() int {
	addr, ok := s.srv.Addr().(*net.TCPAddr)
	if !ok {
		return 0
	}
	return addr.Port
}

// Shutdown stops the server, closing every client connection, and waits for it to end.
// JetStream's file store is flushed, so a server started again on the same StoreDir
// has every message it had accepted.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// slogLogger sends nats-server's log lines to slog; its notices are debug-level noise
// for skiff, warnings and errors are not.
type slogLogger struct{ l *slog.Logger }

func (l slogLogger) Noticef(format string, v ...any) { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l slogLogger) Warnf(format string, v ...any)   { l.l.Warn(fmt.Sprintf(format, v...)) }
func (l slogLogger) Fatalf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l slogLogger) Errorf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l slogLogger) Debugf(format string, v ...any)  { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l slogLogger) Tracef(format string, v ...any)  { l.l.Debug(fmt.Sprintf(format, v...)) }
