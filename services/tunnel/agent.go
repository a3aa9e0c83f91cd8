package tunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apimachinery/pkg/util/wait"

	tunnelv1 "skiff.dev/proto/tunnel/v1"
)

// Reconnect backoff of the agent's Connect: 1 s doubling to 30 s, with 10% jitter; back
// to 1 s once a Connect was accepted.
const (
	initialBackoff = time.Second
	maxBackoff     = 30 * time.Second
)

// AgentConfig is what a kubelet's tunnel agent needs.
type AgentConfig struct {
	// Server is exec-proxy's tunnel address, host:port (port DefaultPort); required.
	Server string
	// NodeName is the kubelet's node, which TLS's client certificate must name; required.
	NodeName string
	// TLS is the agent's mutual TLS toward exec-proxy: RootCAs is the cluster CA (which
	// verifies exec-proxy's serving certificate, for ServerName or Server's host), and
	// the client certificate is the node's (system:node:<name>), best through
	// GetClientCertificate so that a rotated one is used at the next connect; required.
	TLS *tls.Config
	// KubeletAddress is the kubelet API the agent dials for each DialRequest, host:port
	// (its own server: loopback where it listens on every address); required.
	KubeletAddress string
	// Logger receives the tunnel's state changes; nil means slog.Default().
	Logger *slog.Logger
}

// Agent is a kubelet's end of its tunnel (konnectivity's agent).
type Agent struct {
	cfg    AgentConfig
	logger *slog.Logger
	dialer net.Dialer
}

// NewAgent checks cfg. Errors: a required field is missing.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Server == "" || cfg.NodeName == "" || cfg.TLS == nil || cfg.KubeletAddress == "" {
		return nil, errors.New("tunnel agent: Server, NodeName, TLS and KubeletAddress are required")
	}
	a := &Agent{cfg: cfg, logger: cfg.Logger, dialer: net.Dialer{Timeout: DialTimeout}}
	if a.logger == nil {
		a.logger = slog.Default()
	}
	a.logger = a.logger.With("tunnel-server", cfg.Server)
	return a, nil
}

// Run holds the tunnel until ctx ends: it opens Connect, answers every DialRequest, and
// when the stream ends opens it again after a backoff. Connections already tunnelled
// keep going while the gRPC connection lives. Errors: none but a bad configuration (it
// returns nil when ctx ends).
func (a *Agent) Run(ctx context.Context) error {
	cc, err := grpc.NewClient(a.cfg.Server,
		grpc.WithTransportCredentials(credentials.NewTLS(a.cfg.TLS)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: PingInterval, Timeout: PingTimeout, PermitWithoutStream: true}),
	)
	if err != nil {
		return fmt.Errorf("tunnel agent: %w", err)
	}
	defer cc.Close()
	client := tunnelv1.NewTunnelClient(cc)
	var conns sync.WaitGroup
	defer conns.Wait()

	backoff := newBackoff()
	for ctx.Err() == nil {
		accepted, err := a.connect(ctx, client, &conns)
		if ctx.Err() != nil {
			break
		}
		if accepted {
			backoff = newBackoff()
		}
		d := backoff.Step()
		a.logger.Info("tunnel down, reconnecting", "err", err, "after", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	return nil
}

func newBackoff() wait.Backoff {
	return wait.Backoff{Duration: initialBackoff, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: maxBackoff}
}

// connect holds one Connect call until it ends; accepted tells whether exec-proxy had
// registered the tunnel.
func (a *Agent) connect(ctx context.Context, client tunnelv1.TunnelClient, conns *sync.WaitGroup) (accepted bool, err error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Connect(cctx, &tunnelv1.ConnectRequest{NodeName: a.cfg.NodeName})
	if err != nil {
		return false, err
	}
	// exec-proxy sends its headers once the tunnel is registered; a refusal comes
	// without them (a trailers-only answer), its status then from Recv.
	md, err := stream.Header()
	if err != nil {
		return false, err
	}
	if md == nil {
		_, err := stream.Recv()
		return false, err
	}
	a.logger.Info("tunnel connected")
	for {
		req, err := stream.Recv()
		if err != nil {
			return true, err
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			a.serveDial(ctx, client, req.GetId())
		}()
	}
}

// serveDial dials the kubelet API for DialRequest id and carries the connection on a
// Proxy stream of its own until either end closes.
func (a *Agent) serveDial(ctx context.Context, client tunnelv1.TunnelClient, id uint64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	local, dialErr := a.dialer.DialContext(ctx, "tcp", a.cfg.KubeletAddress)
	stream, err := client.Proxy(ctx)
	if err != nil {
		if local != nil {
			local.Close()
		}
		a.logger.Warn("tunnel: open a Proxy stream", "id", id, "err", err)
		return
	}
	resp := &tunnelv1.DialResponse{Id: id}
	if dialErr != nil {
		resp.Error = dialErr.Error()
	}
	if err := stream.Send(&tunnelv1.Packet{Kind: &tunnelv1.Packet_DialResponse{DialResponse: resp}}); err != nil || dialErr != nil {
		if local != nil {
			local.Close()
		}
		_ = stream.CloseSend()
		// Wait for exec-proxy to end the call, so the stream is not left half-open.
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}
	defer local.Close()

	// exec-proxy → kubelet API: until exec-proxy ends the call, which ends the connection.
	toKubelet := make(chan struct{})
	go func() {
		defer close(toKubelet)
		for {
			p, err := stream.Recv()
			if err != nil {
				return
			}
			if data := p.GetData().GetData(); len(data) > 0 {
				if _, err := local.Write(data); err != nil {
					return
				}
			}
		}
	}()
	// kubelet API → exec-proxy: until the kubelet closes its side (CloseSend: exec-proxy
	// reads io.EOF) or the stream fails.
	go func() {
		buf := make([]byte, maxDataSize)
		for {
			n, err := local.Read(buf)
			if n > 0 {
				if serr := stream.Send(&tunnelv1.Packet{Kind: &tunnelv1.Packet_Data{Data: &tunnelv1.Data{Data: buf[:n]}}}); serr != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = stream.CloseSend()
				} else {
					cancel()
				}
				return
			}
		}
	}()
	<-toKubelet
}

// ClientTLS is the agent's TLS toward exec-proxy: the cluster CA in caPEM, and the
// node's client certificate read from certFile (and keyFile; empty means certFile holds
// both, as kubelet-client-current.pem does) at every handshake, so a rotated one is used
// at the next connect. serverName overrides the name exec-proxy's certificate must carry
// (default: the host of AgentConfig.Server). Errors: no certificate in caPEM, or the key
// pair cannot be loaded now.
func ClientTLS(caPEM []byte, certFile, keyFile, serverName string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("tunnel: the CA holds no PEM certificate")
	}
	if keyFile == "" {
		keyFile = certFile
	}
	load := func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tunnel: node client key pair: %w", err)
		}
		return &cert, nil
	}
	if _, err := load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		RootCAs:              roots,
		ServerName:           serverName,
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return load() },
	}, nil
}

// KubeletAddress is where the agent reaches a kubelet API that listens on listen
// (host:port): 127.0.0.1 in place of an unspecified host (0.0.0.0, ::, empty), since a
// listener on every address takes IPv4 loopback too (Go reports one on 0.0.0.0 as [::],
// and a node may have no ::1). A listen that is not host:port is returned as it is.
func KubeletAddress(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
