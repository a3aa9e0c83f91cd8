// Package streaming serves the built-in runtimes' exec, attach and
// port-forward streams: the one-use URLs that CRI Exec, Attach and
// PortForward return. It wraps k8s.io/cri-streaming's server (the library
// containerd and CRI-O use), which speaks SPDY (remotecommand v1–v4,
// portforward v1) and WebSocket up to v4.channel.k8s.io; the kubelet proxies
// to it, and exec-proxy bridges kubectl's v5 WebSocket in front. What this
// package adds is a stream lifetime: a request's context ends when its
// connection closes or the server closes, so a command exec'd for a client
// that went away is killed instead of running on.
package streaming

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crist "k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Runtime runs the streams; see k8s.io/cri-streaming/pkg/streaming.Runtime.
// ctx ends when the client's connection closes or the Server closes.
type Runtime = crist.Runtime

// TerminalSize is a terminal's size in character cells.
type TerminalSize = remotecommand.TerminalSize

// StreamIdleTimeout closes a stream that carried no data for this long, as
// the kubelet's --streaming-connection-idle-timeout (default 4 h).
const StreamIdleTimeout = 4 * time.Hour

// Server serves stream URLs on a loopback listener until Close.
type Server struct {
	srv    crist.Server
	http   *http.Server
	lis    net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	served chan struct{}

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup
}

// Start listens on addr ("127.0.0.1:0" for a random loopback port, as
// containerd's default) and serves rt's streams. Errors: addr cannot be
// listened on.
func Start(addr string, rt Runtime) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	cfg := crist.DefaultConfig
	cfg.Addr = lis.Addr().String()
	cfg.BaseURL = &url.URL{Scheme: "http", Host: lis.Addr().String()}
	cfg.StreamIdleTimeout = StreamIdleTimeout
	srv, err := crist.NewServer(cfg, rt)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{srv: srv, lis: lis, ctx: ctx, cancel: cancel, served: make(chan struct{})}
	s.http = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.http.Serve(lis)
	}()
	return s, nil
}

// Addr is the address the server listens on (host:port).
func (s *Server) Addr() string { return s.lis.Addr().String() }

// GetExec returns the URL serving req once. Errors are gRPC statuses
// (InvalidArgument for tty with stderr, or no stream at all).
func (s *Server) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return s.srv.GetExec(req)
}

// GetAttach returns the URL serving req once.
func (s *Server) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return s.srv.GetAttach(req)
}

// GetPortForward returns the URL serving req once.
func (s *Server) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return s.srv.GetPortForward(req)
}

// serveHTTP gives each request a context that ends when its (hijacked)
// connection is closed by either side, or when the server closes.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "streaming server is shut down", http.StatusServiceUnavailable)
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()

	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	hw := &hijackWriter{ResponseWriter: w, cancel: cancel}
	stop := context.AfterFunc(ctx, hw.closeConn)
	defer stop()
	s.srv.ServeHTTP(hw, r.WithContext(ctx))
}

// Close stops listening, ends every open stream (their contexts end and
// their connections close) and waits until every handler has returned.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.http.Close()
	s.cancel()
	s.handlers.Wait()
	<-s.served
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// hijackWriter hands out connections that cancel the request's context when
// a read fails (the peer closed) or the connection is closed, because after a
// hijack net/http no longer notices the peer going away.
type hijackWriter struct {
	http.ResponseWriter
	cancel context.CancelFunc

	mu   sync.Mutex
	conn net.Conn
}

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("streaming: connection cannot be hijacked")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	c := &watchedConn{Conn: conn, cancel: h.cancel}
	h.mu.Lock()
	h.conn = c
	h.mu.Unlock()
	// Bytes net/http already buffered come first; the rest is read through c.
	buffered, _ := rw.Reader.Peek(rw.Reader.Buffered())
	rd := bufio.NewReader(io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), c))
	return c, bufio.NewReadWriter(rd, bufio.NewWriter(c)), nil
}

func (h *hijackWriter) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// closeConn closes the hijacked connection, if any, when the context ends.
func (h *hijackWriter) closeConn() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil {
		h.conn.Close()
	}
}

// watchedConn cancels on a failed read or on Close.
type watchedConn struct {
	net.Conn
	cancel context.CancelFunc
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.cancel()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.cancel()
	return c.Conn.Close()
}
