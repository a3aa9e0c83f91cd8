package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"skiff.dev/services/execproxy"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/tunnel"
)

// Config is what exec-proxy runs with, built: Options.Config makes one from flags' files,
// the all-in-one from in-memory TLS material and a listener it opened itself. Proxy's
// Client and KubeletTLS, ServingTLS, and Listener or Address are required.
type Config struct {
	// Proxy is exec-proxy itself (execproxy.Config): the client reading pods and nodes
	// (system:skiff:exec-proxy), the TLS toward kubelets, logger, tracer provider
	// (which Run does not shut down) and the trusted front-proxy names. With a tunnel
	// server (TunnelListener or TunnelAddress), Run sets Proxy.Tunnels to it; without
	// one, Proxy.Tunnels is used as given (nil: every kubelet is dialed directly).
	Proxy execproxy.Config
	// Listener is where the HTTPS port is served; nil means Run listens on Address
	// (host:port). Run closes it when it returns.
	Listener net.Listener
	// Address is the HTTPS port's host:port, when Listener is nil.
	Address string
	// ServingTLS is the HTTPS port's TLS: exec-proxy's serving certificate, and the
	// front-proxy CA as ClientCAs, the only CA whose client certificates may call it
	// (execproxy.Proxy.Serve). Required.
	ServingTLS *tls.Config
	// TunnelListener is where kubelets open their node-initiated tunnels (kubelet
	// --tunnel-server); nil means Run listens on TunnelAddress, and with that "" too,
	// no tunnel server runs. Run closes it when it returns.
	TunnelListener net.Listener
	// TunnelAddress is the tunnel port's host:port, when TunnelListener is nil; ""
	// means none.
	TunnelAddress string
	// TunnelTLS is the tunnel port's TLS (tunnel.ServerTLS: the serving certificate,
	// client certificates of the cluster CA required). Required with a tunnel server.
	TunnelTLS *tls.Config
	// Serving, when set, is where /healthz and /metrics (the Go and process collectors)
	// are also served over plain HTTP (serving.Options.Start); nil serves none.
	// /healthz is always on the HTTPS port.
	Serving *serving.Options
}

// Run serves exec-proxy until ctx ends (nil then): the tunnel server when one is set,
// the plain endpoints when Serving is set, and the HTTPS port. Errors, wrapped with what
// failed: a required field missing, a port that cannot listen ("tunnel port",
// "health endpoints", "listen"), or serving failing ("tunnel server", "serve").
func (c *Config) Run(ctx context.Context) error {
	// The listeners given are Run's to close, whichever way it returns.
	for _, l := range []net.Listener{c.Listener, c.TunnelListener} {
		if l != nil {
			defer l.Close()
		}
	}
	if c.ServingTLS == nil {
		return errors.New("building exec-proxy: no ServingTLS")
	}
	logger := c.Proxy.Logger
	if logger == nil {
		logger = slog.Default()
	}
	proxyConfig := c.Proxy
	var tunnelErr func() error
	if c.TunnelListener != nil || c.TunnelAddress != "" {
		if c.TunnelTLS == nil {
			return errors.New("building exec-proxy: a tunnel server without TunnelTLS")
		}
		tl := c.TunnelListener
		if tl == nil {
			var err error
			if tl, err = net.Listen("tcp", c.TunnelAddress); err != nil {
				return fmt.Errorf("tunnel port: %w", err)
			}
		}
		tunnels := tunnel.NewServer(logger)
		proxyConfig.Tunnels = tunnels
		logger.Info("serving node tunnels", "addr", tl.Addr().String())
		// A tunnel server that fails stops exec-proxy too.
		tunnelCtx, stopTunnels := context.WithCancelCause(ctx)
		defer stopTunnels(nil)
		ctx = tunnelCtx
		go func() {
			if err := tunnels.Serve(tunnelCtx, tl, c.TunnelTLS); err != nil {
				logger.Error("tunnel server stopped", "err", err)
				stopTunnels(err)
			}
		}()
		tunnelErr = func() error {
			if err := context.Cause(tunnelCtx); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("tunnel server: %w", err)
			}
			return nil
		}
	}
	p, err := execproxy.New(proxyConfig)
	if err != nil {
		return fmt.Errorf("building exec-proxy: %w", err)
	}
	registry, err := componentbase.MetricsRegistry(nil, c.Serving != nil, nil)
	if err != nil {
		return err
	}
	if err := componentbase.StartServing(ctx, c.Serving, registry); err != nil {
		return err
	}
	l := c.Listener
	if l == nil {
		if l, err = net.Listen("tcp", c.Address); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	logger.Info("serving exec-proxy", "addr", l.Addr().String())
	if err := p.Serve(ctx, l, c.ServingTLS); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if tunnelErr != nil {
		return tunnelErr()
	}
	return nil
}
