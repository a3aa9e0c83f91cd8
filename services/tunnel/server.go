// Package tunnel is skiff's node-initiated tunnel between kubelets and exec-proxy, after
// Kubernetes' konnectivity (sigs.k8s.io/apiserver-network-proxy): a kubelet whose
// address exec-proxy cannot route to dials out to exec-proxy's tunnel port and holds a
// gRPC stream (proto/tunnel/v1, service skiff.tunnel.v1.Tunnel), and exec-proxy asks for
// connections to that kubelet's API through it.
//
// Server is exec-proxy's side (konnectivity's proxy server): it accepts a node's tunnel
// only from that node's client certificate (CN system:node:<name>, O system:nodes) and
// gives exec-proxy a net.Conn to the node's kubelet API with Dial. Agent is the kubelet's
// side (konnectivity's agent): it holds the Connect stream, reconnecting with backoff,
// and answers each DialRequest by dialing its own kubelet API and carrying the bytes on a
// Proxy stream of their own. TLS between exec-proxy and the kubelet API runs end to end,
// inside the tunnel.
package tunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	tunnelv1 "skiff.dev/proto/tunnel/v1"
)

// DefaultPort is exec-proxy's tunnel port (gRPC over mutual TLS), beside its HTTPS 10443.
const DefaultPort = 10444

// Kubernetes' node identity: user system:node:<name> in group system:nodes.
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// DialTimeout bounds Server.Dial: the DialRequest's trip to the agent, the agent's dial
// of its kubelet API, and its Proxy stream's arrival.
const DialTimeout = 5 * time.Second

// Keepalive: both ends ping an idle connection, so a tunnel whose network silently went
// away is noticed (and the agent reconnects) within about PingInterval+PingTimeout.
const (
	PingInterval = 30 * time.Second
	PingTimeout  = 10 * time.Second
)

// ErrNoTunnel is Server.Dial's error for a node that holds no tunnel.
var ErrNoTunnel = errors.New("the node has no tunnel")

// Server is exec-proxy's end of the tunnels: the gRPC Tunnel service and a dialer of
// kubelet APIs through them. Safe for concurrent use.
type Server struct {
	tunnelv1.UnimplementedTunnelServer

	logger *slog.Logger
	nextID atomic.Uint64

	mu      sync.Mutex
	tunnels map[string]*nodeTunnel // by node name
	dials   map[uint64]*pendingDial
}

// nodeTunnel is one node's Connect stream.
type nodeTunnel struct {
	node     string
	requests chan *tunnelv1.DialRequest
	// replaced is closed when a newer Connect from the same node takes its place.
	replaced chan struct{}
	// done is closed when its Connect call has ended.
	done chan struct{}
}

// pendingDial waits for the agent's Proxy stream.
type pendingDial struct {
	node   string
	result chan dialResult // buffered 1
}

type dialResult struct {
	conn *conn
	err  error
}

// NewServer makes an empty Server; logger nil means slog.Default().
func NewServer(logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{logger: logger, tunnels: map[string]*nodeTunnel{}, dials: map[uint64]*pendingDial{}}
	return s
}

// ServerTLS is the tunnel port's TLS: exec-proxy's serving certificate, and client
// certificates required and verified against the cluster CA.
func ServerTLS(serving tls.Certificate, clusterCA *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clusterCA,
		MinVersion:   tls.VersionTLS12,
	}
}

// GRPCServer is a gRPC server for s over tlsConfig (ServerTLS's), with keepalive: it
// pings idle agents and lets them ping every PingInterval.
func (s *Server) GRPCServer(tlsConfig *tls.Config, opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tlsConfig)),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: PingInterval, Timeout: PingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: PingInterval / 2, PermitWithoutStream: true}),
	}, opts...)
	g := grpc.NewServer(opts...)
	tunnelv1.RegisterTunnelServer(g, s)
	return g
}

// Serve serves the Tunnel service on lis over tlsConfig until ctx ends, then stops,
// ending every tunnel and tunnelled connection. Errors: serving failed.
func (s *Server) Serve(ctx context.Context, lis net.Listener, tlsConfig *tls.Config) error {
	g := s.GRPCServer(tlsConfig)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			g.Stop()
		case <-stopped:
		}
	}()
	err := g.Serve(lis)
	close(stopped)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Has reports whether node holds a tunnel now.
func (s *Server) Has(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tunnels[node]
	return ok
}

// Nodes lists the nodes that hold a tunnel, sorted.
func (s *Server) Nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var nodes []string
	for n := range s.tunnels {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return nodes
}

// Dial opens a connection to node's kubelet API through its tunnel: the bytes of a TLS
// connection to the kubelet's server go over it. The connection's addresses are
// "tunnel" ones naming the node. Errors: ErrNoTunnel; the agent's own error when it could
// not reach its kubelet API; ctx's, or a timeout after DialTimeout; the tunnel's end.
func (s *Server) Dial(ctx context.Context, node string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	s.mu.Lock()
	t := s.tunnels[node]
	if t == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("node %s: %w", node, ErrNoTunnel)
	}
	id := s.nextID.Add(1)
	pd := &pendingDial{node: node, result: make(chan dialResult, 1)}
	s.dials[id] = pd
	s.mu.Unlock()
	// Giving up: the dial leaves the table, and a connection the agent handed over
	// meanwhile (Proxy delivers under s.mu, as it takes the dial out) is closed.
	abandon := func() {
		s.mu.Lock()
		delete(s.dials, id)
		s.mu.Unlock()
		select {
		case r := <-pd.result:
			if r.conn != nil {
				r.conn.Close()
			}
		default:
		}
	}

	select {
	case t.requests <- &tunnelv1.DialRequest{Id: id}:
	case <-t.done:
		abandon()
		return nil, fmt.Errorf("node %s: the tunnel closed", node)
	case <-ctx.Done():
		abandon()
		return nil, fmt.Errorf("node %s: dial through the tunnel: %w", node, ctx.Err())
	}
	select {
	case r := <-pd.result:
		if r.err != nil {
			return nil, fmt.Errorf("node %s: %w", node, r.err)
		}
		return r.conn, nil
	case <-t.done:
		abandon()
		return nil, fmt.Errorf("node %s: the tunnel closed", node)
	case <-ctx.Done():
		abandon()
		return nil, fmt.Errorf("node %s: dial through the tunnel: %w", node, ctx.Err())
	}
}

// Connect holds a node's tunnel (the gRPC method; see proto/tunnel/v1).
func (s *Server) Connect(req *tunnelv1.ConnectRequest, stream tunnelv1.Tunnel_ConnectServer) error {
	node, err := nodeOf(stream.Context())
	if err != nil {
		return err
	}
	if req.GetNodeName() != "" && req.GetNodeName() != node {
		return status.Errorf(codes.PermissionDenied, "node %s may not open the tunnel of node %s", node, req.GetNodeName())
	}
	t := &nodeTunnel{node: node, requests: make(chan *tunnelv1.DialRequest), replaced: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if old := s.tunnels[node]; old != nil {
		close(old.replaced)
	}
	s.tunnels[node] = t
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.tunnels[node] == t {
			delete(s.tunnels, node)
		}
		s.mu.Unlock()
		close(t.done)
	}()
	// Headers tell the agent it is registered (it then resets its backoff).
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	s.logger.Info("tunnel connected", "node", node, "peer", peerAddr(stream.Context()))
	for {
		select {
		case req := <-t.requests:
			if err := stream.Send(req); err != nil {
				s.logger.Info("tunnel lost", "node", node, "err", err)
				return err
			}
		case <-t.replaced:
			s.logger.Info("tunnel replaced by a newer one", "node", node)
			return status.Errorf(codes.Aborted, "a newer tunnel of node %s replaced this one", node)
		case <-stream.Context().Done():
			s.logger.Info("tunnel closed", "node", node, "err", context.Cause(stream.Context()))
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

// Proxy carries one tunnelled connection (the gRPC method; see proto/tunnel/v1).
func (s *Server) Proxy(stream tunnelv1.Tunnel_ProxyServer) error {
	node, err := nodeOf(stream.Context())
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	resp := first.GetDialResponse()
	if resp == nil {
		return status.Error(codes.InvalidArgument, "a Proxy stream starts with a DialResponse")
	}
	// The dial is taken out of the table and answered under s.mu, so that one stream
	// answers it at most once and a Dial that gave up meanwhile finds what to close.
	s.mu.Lock()
	pd := s.dials[resp.GetId()]
	switch {
	case pd == nil:
		s.mu.Unlock()
		return status.Errorf(codes.NotFound, "no dial %d is waiting (it may have timed out)", resp.GetId())
	case pd.node != node:
		s.mu.Unlock()
		return status.Errorf(codes.PermissionDenied, "node %s may not answer a dial to node %s", node, pd.node)
	}
	delete(s.dials, resp.GetId())
	if resp.GetError() != "" {
		pd.result <- dialResult{err: fmt.Errorf("the kubelet's tunnel agent could not reach its kubelet API: %s", resp.GetError())}
		s.mu.Unlock()
		return nil
	}
	remote := tunnelAddr(node + "/" + strconv.FormatUint(resp.GetId(), 10))
	c := newConn(stream, tunnelAddr("exec-proxy"), remote)
	pd.result <- dialResult{conn: c}
	s.mu.Unlock()
	select {
	case <-c.Done():
		return nil
	case <-stream.Context().Done():
		c.Close()
		return status.FromContextError(stream.Context().Err()).Err()
	}
}

// nodeOf is the node whose verified client certificate made the call. Errors:
// Unauthenticated without one, PermissionDenied for a certificate that is not a node's
// (CN system:node:<name>, O system:nodes).
func nodeOf(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", status.Error(codes.Unauthenticated, "a node client certificate from the cluster CA is required")
	}
	subject := info.State.VerifiedChains[0][0].Subject
	node, isNode := strings.CutPrefix(subject.CommonName, nodeUserPrefix)
	if !isNode || node == "" || !slices.Contains(subject.Organization, nodesGroup) {
		return "", status.Errorf(codes.PermissionDenied, "user %q is not a node (%s<name> in %s): only kubelets open tunnels",
			subject.CommonName, nodeUserPrefix, nodesGroup)
	}
	return node, nil
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
