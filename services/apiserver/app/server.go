package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/internal/serving"
)

// Config is an apiserver ready to build, every piece built but the apiserver itself:
// kube-apiserver's completed config. Options.Config builds it from flags; the
// all-in-one fills it from apiserver.ConfigFromPKI over its embedded etcd and a
// listener of its own.
type Config struct {
	// API is the apiserver's own configuration, given to apiserver.New: Etcd (a
	// connected client, which neither New nor Run closes), the serving certificate,
	// client CA, service-account keys, NATS, exec-proxy and TracerProvider (which Run
	// does not shut down).
	API apiserver.Config
	// Listener is where the API is served over HTTPS; Serve closes it. nil means Run
	// listens on Address.
	Listener net.Listener
	// Address is host:port Run listens on when Listener is nil, e.g. "0.0.0.0:6443".
	Address string
	// Serving, when set, serves the plain-HTTP endpoints (/healthz, /metrics of Go and
	// the process, /debug/pprof with Profiling) while Run runs; nil serves none. The
	// API's own /healthz, /livez and /readyz are on the Listener either way.
	Serving *serving.Options
	// Logger receives "serving the API"; nil means slog.Default().
	Logger *slog.Logger
}

// Server is the built apiserver, not serving yet: the two steps of Config.Run, for a
// caller that uses the API while it serves (the all-in-one waits for the system
// namespaces and the bootstrap policy, and mounts Handler).
type Server struct {
	// API is the apiserver apiserver.New built from Config.API: EnsureSystemNamespaces,
	// WaitForBootstrapPolicy and Handler are for the caller; Run serves it, once.
	API *apiserver.APIServer
	cfg Config
}

// New builds the apiserver of c (apiserver.New: its storage, watch caches,
// authentication, authorization, admission and handler); nothing is served until
// Server.Run. Errors: apiserver.New's (a missing Etcd, certificate or key).
func (c *Config) New() (*Server, error) {
	api, err := apiserver.New(c.API)
	if err != nil {
		return nil, err
	}
	return &Server{API: api, cfg: *c}, nil
}

// Run builds the apiserver (New) and serves it until ctx ends (Server.Run).
func (c *Config) Run(ctx context.Context) error {
	s, err := c.New()
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Run serves the Serving endpoints and the API, on Config.Listener or a listener on
// Config.Address, until ctx ends (nil; the API shuts down as apiserver.Serve says).
// Errors: no listener nor address, a port that cannot be listened on, or the API
// failing to serve.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx) // stops the endpoints when Run returns
	defer cancel()
	if s.cfg.Serving != nil {
		if _, err := s.cfg.Serving.Start(ctx, serving.NewRegistry()); err != nil {
			return fmt.Errorf("health endpoints: %w", err)
		}
	}
	l := s.cfg.Listener
	if l == nil {
		if s.cfg.Address == "" {
			return errors.New("apiserver: Config.Listener or Config.Address is required")
		}
		var err error
		if l, err = net.Listen("tcp", s.cfg.Address); err != nil {
			return err
		}
	}
	logger := s.cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info("serving the API", "address", "https://"+l.Addr().String(), "etcd", strings.Join(s.cfg.API.Etcd.Endpoints(), ","))
	return s.API.Serve(ctx, l)
}
