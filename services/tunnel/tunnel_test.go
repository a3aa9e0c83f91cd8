package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	tunnelv1 "skiff.dev/proto/tunnel/v1"
	"skiff.dev/services/internal/pki"
)

// unroutable is the address the test nodes report: nothing listens there, so every
// request that reaches the kubelet went through the tunnel.
const unroutable = "10.255.0.7"

// env is a real tunnel Server on loopback over mutual TLS, with a cluster CA.
type env struct {
	t      *testing.T
	ca     *pki.CA
	dir    string
	server *Server
	addr   string
	stop   context.CancelFunc
	done   chan struct{}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ca, err := pki.NewCA("tunnel-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ca: ca, dir: t.TempDir()}
	e.start("127.0.0.1:0")
	t.Cleanup(e.shutdown)
	return e
}

// start serves a new Server on addr.
func (e *env) start(addr string) {
	e.t.Helper()
	kp, err := e.ca.IssueServing("skiff-exec-proxy", pki.DefaultExecProxyHosts, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		e.t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.addr = lis.Addr().String()
	e.server = NewServer(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	e.stop, e.done = cancel, make(chan struct{})
	go func(done chan struct{}, s *Server) {
		defer close(done)
		if err := s.Serve(ctx, lis, ServerTLS(serving, e.ca.CertPool())); err != nil {
			e.t.Errorf("Serve: %v", err)
		}
	}(e.done, e.server)
}

func (e *env) shutdown() {
	e.stop()
	<-e.done
}

// certFile writes a client key pair (certificate and key in one PEM file, as
// kubelet-client-current.pem) for cn in orgs and returns its path.
func (e *env) certFile(cn string, orgs ...string) string {
	e.t.Helper()
	kp, err := e.ca.IssueClient(cn, orgs, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.dir, strings.ReplaceAll(cn, ":", "_")+fmt.Sprint(len(orgs))+".pem")
	if err := os.WriteFile(path, append(kp.CertPEM, kp.KeyPEM...), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

func (e *env) clientTLS(certFile string) *tls.Config {
	e.t.Helper()
	cfg, err := ClientTLS(e.ca.CertPEM, certFile, "", "")
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// agent runs node's agent toward e's server until the test ends.
func (e *env) agent(node, kubeletAddr string) {
	e.t.Helper()
	a, err := NewAgent(AgentConfig{Server: e.addr, NodeName: node, TLS: e.clientTLS(e.certFile("system:node:"+node, "system:nodes")),
		KubeletAddress: kubeletAddr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
}

// waitTunnel waits until node holds a tunnel on e's current server.
func (e *env) waitTunnel(node string, want bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return e.server.Has(node) == want, nil })
	if err != nil {
		e.t.Fatalf("node %s holds a tunnel: want %v: %v", node, want, err)
	}
}

// rawClient is a gRPC client of e's server with certFile's identity ("" = none).
func (e *env) rawClient(certFile string) tunnelv1.TunnelClient {
	e.t.Helper()
	var cfg *tls.Config
	if certFile == "" {
		cfg = &tls.Config{RootCAs: e.ca.CertPool(), MinVersion: tls.VersionTLS12}
	} else {
		cfg = e.clientTLS(certFile)
	}
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cc.Close() })
	return tunnelv1.NewTunnelClient(cc)
}

// kubeletAPI is an HTTPS server standing for a node's kubelet API: its serving
// certificate names the node's unroutable address, it requires a client certificate
// from the CA, and answers with the caller's CommonName.
func (e *env) kubeletAPI() string {
	e.t.Helper()
	kp, err := e.ca.IssueServing("kubelet", []string{unroutable, "node-a"}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		e.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.VerifiedChains[0][0].Subject.CommonName)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: e.ca.CertPool()}}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	e.t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

// execProxyClient is an HTTPS client as exec-proxy's: its own client certificate, the
// cluster CA, and every connection dialed through node's tunnel.
func (e *env) execProxyClient(node string) *http.Client {
	e.t.Helper()
	kp, err := e.ca.IssueClient("system:skiff:exec-proxy", nil, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		e.t.Fatal(err)
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.ca.CertPool()},
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return e.server.Dial(ctx, node) },
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func TestHTTPSThroughTheTunnelEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.agent("node-a", e.kubeletAPI())
	e.waitTunnel("node-a", true)
	if got := e.server.Nodes(); len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("Nodes() = %v, want [node-a]", got)
	}
	client := e.execProxyClient("node-a")

	// TLS runs end to end: the kubelet sees exec-proxy's certificate, and exec-proxy
	// verified the kubelet's for the node's address, which nothing serves directly.
	resp, err := client.Get("https://" + net.JoinHostPort(unroutable, "10250") + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello system:skiff:exec-proxy" {
		t.Fatalf("body %q", body)
	}

	// Bytes arrive whole and in order, both ways, over many Data packets.
	payload := make([]byte, 3<<20+17)
	_, _ = rand.Read(payload)
	resp, err = client.Post("https://"+net.JoinHostPort(unroutable, "10250")+"/echo", "application/octet-stream", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(body, payload) {
		t.Fatalf("echo: %d bytes back of %d, equal %v, err %v", len(body), len(payload), bytes.Equal(body, payload), err)
	}
}

// rawKubelet is a plain TCP server for the agent: "flood" writes size bytes, "echo"
// copies, "bye" writes bye and closes, "wait" reads until EOF and reports it on eof.
func rawKubelet(t *testing.T, size int) (addr string, eof chan struct{}) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eof = make(chan struct{}, 4)
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				switch strings.TrimSpace(line) {
				case "flood":
					_, _ = c.Write(make([]byte, size))
				case "echo":
					_, _ = io.Copy(c, r)
				case "bye":
					_, _ = c.Write([]byte("bye"))
				case "wait":
					_, _ = io.Copy(io.Discard, r)
					eof <- struct{}{}
				}
			}()
		}
	}()
	return lis.Addr().String(), eof
}

func TestUnreadConnectionDoesNotStallAnother(t *testing.T) {
	e := newEnv(t)
	addr, _ := rawKubelet(t, 16<<20)
	e.agent("node-a", addr)
	e.waitTunnel("node-a", true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Connection A: 16 MiB come its way and nobody reads them.
	a, err := e.server.Dial(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Write([]byte("flood\n")); err != nil {
		t.Fatal(err)
	}
	// Connection B on the same tunnel still goes both ways.
	b, err := e.server.Dial(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	msg := bytes.Repeat([]byte("ping "), 100000)
	go func() { _, _ = b.Write(append([]byte("echo\n"), msg...)) }()
	got := make([]byte, len(msg))
	if d, ok := ctx.Deadline(); ok {
		_ = b.SetReadDeadline(d)
	}
	if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("connection B while A is unread: err %v, equal %v", err, bytes.Equal(got, msg))
	}
	// And A's bytes were all kept for it.
	_ = a.SetReadDeadline(time.Time{})
	n, err := io.Copy(io.Discard, a)
	if err != nil || n != 16<<20 {
		t.Fatalf("connection A: read %d bytes, err %v; want %d", n, err, 16<<20)
	}
}

func TestEitherEndClosing(t *testing.T) {
	e := newEnv(t)
	addr, eof := rawKubelet(t, 0)
	e.agent("node-a", addr)
	e.waitTunnel("node-a", true)
	ctx := context.Background()

	// The kubelet API closes: exec-proxy reads what it wrote, then io.EOF.
	c, err := e.server.Dial(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q, err %v; want bye then EOF", got, err)
	}
	c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}

	// exec-proxy closes: the kubelet API's connection ends.
	c, err = e.server.Dial(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("wait\nsome bytes")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-eof:
	case <-time.After(20 * time.Second):
		t.Fatal("the kubelet API's connection did not end after exec-proxy closed its end")
	}

	// A read deadline in the past fails a Read at once.
	c, err = e.server.Dial(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
}

func TestDialErrors(t *testing.T) {
	e := newEnv(t)
	if _, err := e.server.Dial(context.Background(), "node-a"); !errors.Is(err, ErrNoTunnel) {
		t.Fatalf("Dial of a node without a tunnel: %v, want ErrNoTunnel", err)
	}
	// The agent cannot reach its kubelet API: its error comes back.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	e.agent("node-a", closed)
	e.waitTunnel("node-a", true)
	_, err = e.server.Dial(context.Background(), "node-a")
	if err == nil || !strings.Contains(err.Error(), "could not reach its kubelet API") {
		t.Fatalf("Dial with the kubelet API down: %v", err)
	}
}

func TestOnlyTheNodeItselfOpensItsTunnel(t *testing.T) {
	e := newEnv(t)
	connect := func(certFile, node string) error {
		stream, err := e.rawClient(certFile).Connect(context.Background(), &tunnelv1.ConnectRequest{NodeName: node})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	for _, tc := range []struct {
		name     string
		certFile string
		node     string
		want     codes.Code
	}{
		{"another node's name", e.certFile("system:node:node-b", "system:nodes"), "node-a", codes.PermissionDenied},
		{"not a node", e.certFile("system:skiff:exec-proxy"), "", codes.PermissionDenied},
		{"node user outside system:nodes", e.certFile("system:node:node-a"), "node-a", codes.PermissionDenied},
		{"no client certificate", "", "node-a", codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := connect(tc.certFile, tc.node)
			if status.Code(err) != tc.want {
				t.Fatalf("Connect: %v, want code %v", err, tc.want)
			}
			if e.server.Has("node-a") {
				t.Fatal("node-a holds a tunnel it was refused")
			}
		})
	}
}

func TestAnotherNodeCannotAnswerADial(t *testing.T) {
	e := newEnv(t)
	nodeA := e.rawClient(e.certFile("system:node:node-a", "system:nodes"))
	nodeB := e.rawClient(e.certFile("system:node:node-b", "system:nodes"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tunnelA, err := nodeA.Connect(ctx, &tunnelv1.ConnectRequest{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tunnelA.Header(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	dialed := make(chan result, 1)
	go func() { c, err := e.server.Dial(ctx, "node-a"); dialed <- result{c, err} }()
	req, err := tunnelA.Recv()
	if err != nil {
		t.Fatal(err)
	}
	answer := func(client tunnelv1.TunnelClient, id uint64) (tunnelv1.Tunnel_ProxyClient, error) {
		p, err := client.Proxy(ctx)
		if err != nil {
			return nil, err
		}
		if err := p.Send(&tunnelv1.Packet{Kind: &tunnelv1.Packet_DialResponse{DialResponse: &tunnelv1.DialResponse{Id: id}}}); err != nil {
			return nil, err
		}
		return p, nil
	}
	p, err := answer(nodeB, req.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node-b answering node-a's dial: %v, want PermissionDenied", err)
	}
	p, err = answer(nodeA, req.GetId()+1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown dial id: %v, want NotFound", err)
	}
	// node-a itself answers: the dial succeeds, and its bytes flow.
	p, err = answer(nodeA, req.GetId())
	if err != nil {
		t.Fatal(err)
	}
	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.conn.Close()
	if err := p.Send(&tunnelv1.Packet{Kind: &tunnelv1.Packet_Data{Data: &tunnelv1.Data{Data: []byte("from node-a")}}}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("from node-a"))
	if _, err := io.ReadFull(r.conn, got); err != nil || string(got) != "from node-a" {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestNewerTunnelReplacesOlder(t *testing.T) {
	e := newEnv(t)
	client := e.rawClient(e.certFile("system:node:node-a", "system:nodes"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := client.Connect(ctx, &tunnelv1.ConnectRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Header(); err != nil {
		t.Fatal(err)
	}
	second, err := client.Connect(ctx, &tunnelv1.ConnectRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Header(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); status.Code(err) != codes.Aborted {
		t.Fatalf("the older tunnel: %v, want Aborted", err)
	}
	// Dials go to the newer one.
	go func() { _, _ = e.server.Dial(ctx, "node-a") }()
	if _, err := second.Recv(); err != nil {
		t.Fatalf("the newer tunnel got no DialRequest: %v", err)
	}
}

func TestAgentReconnectsToANewServer(t *testing.T) {
	e := newEnv(t)
	kubelet := e.kubeletAPI()
	e.agent("node-a", kubelet)
	e.waitTunnel("node-a", true)
	addr := e.addr
	e.shutdown()
	// exec-proxy comes back on the same address (a restart): the agent dials again.
	e.start(addr)
	e.waitTunnel("node-a", true)
	resp, err := e.execProxyClient("node-a").Get("https://" + net.JoinHostPort(unroutable, "10250") + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestKubeletAddress(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:10250":  "127.0.0.1:10250",
		":10250":         "127.0.0.1:10250",
		"[::]:10250":     "127.0.0.1:10250",
		"[::1]:10250":    "[::1]:10250",
		"10.0.0.5:10250": "10.0.0.5:10250",
	} {
		if got := KubeletAddress(in); got != want {
			t.Errorf("KubeletAddress(%q) = %q, want %q", in, got, want)
		}
	}
}
