package execproxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"golang.org/x/net/websocket"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/execproxy"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/volumemanager"
	"skiff.dev/services/tunnel"
)

const (
	nodeName    = "node-1"
	waitTimeout = 30 * time.Second
)

// cluster is the whole chain, every part real: apiserver over etcd →
// exec-proxy → kubelet API → process runtime's streaming server.
type cluster struct {
	api       *controlplanetest.Server
	admin     *rest.Config
	client    kubernetes.Interface
	proxyAddr string
	spans     *tracetest.InMemoryExporter // exec-proxy's
	// frontProxyCA issued the apiserver's front-proxy-client certificate; exec-proxy
	// verifies client certificates against it alone.
	frontProxyCA *pki.CA
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// clusterOptions shape startCluster's chain.
type clusterOptions struct {
	// tunnelled: the node reports an address nothing routes to (TEST-NET-1) and
	// its kubelet holds a tunnel to exec-proxy, the only way to reach it.
	tunnelled bool
}

// unroutableNodeIP is in TEST-NET-1 (RFC 5737): no host has it.
const unroutableNodeIP = "192.0.2.10"

func startCluster(t *testing.T, opts ...clusterOptions) *cluster {
	t.Helper()
	var o clusterOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	nodeIP := "127.0.0.1"
	if o.tunnelled {
		nodeIP = unroutableNodeIP
	}
	proxyLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{proxyAddr: proxyLis.Addr().String()}
	var frontProxyTLS *tls.Config
	// No controllers: their informers re-watch after the restart below at times of their
	// own, which the leak checks would count; the test makes what they would have made.
	c.api = controlplanetest.StartServerWithoutControllers(t, func(cfg *apiserver.Config) {
		if frontProxyTLS != nil {
			cfg.ExecProxyURL = "https://" + c.proxyAddr
			cfg.ProxyClientTLS = frontProxyTLS
		}
	})
	ca := c.api.CA
	// The apiserver's options were read at start; give it its client certificate
	// by restarting with it (the CA only exists once the test server has made it).
	if c.frontProxyCA, err = pki.NewCA("front-proxy-ca"); err != nil {
		t.Fatal(err)
	}
	fp, err := c.frontProxyCA.IssueClient(execproxy.FrontProxyUser, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	frontProxyTLS = &tls.Config{Certificates: []tls.Certificate{keyPair(t, fp.CertPEM, fp.KeyPEM)}, RootCAs: ca.CertPool()}
	c.api.RestartAPIServer()
	c.admin = c.api.Config
	if c.client, err = kubernetes.NewForConfig(c.admin); err != nil {
		t.Fatal(err)
	}
	// What the serviceaccount and root-ca-cert-publisher controllers give a namespace.
	if _, err := c.client.CoreV1().ServiceAccounts("default").Create(context.Background(), &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().ConfigMaps("default").Create(context.Background(), &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(ca.CertPEM)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The process runtime and a kubelet serving its API with a certificate
	// from the cluster CA.
	rt, err := process.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	serving, err := ca.IssueServing(nodeName, []string{nodeIP}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Unmounted after the kubelet stops: the pods' projected token volumes are tmpfs.
	kubeletDir := t.TempDir()
	t.Cleanup(func() { _ = volumemanager.UnmountAll(filepath.Join(kubeletDir, "pods")) })
	kl, err := kubelet.New(kubelet.Config{
		NodeName: nodeName, Client: c.client, RuntimeEndpoint: cri.Socket, RootDir: kubeletDir, NodeIP: nodeIP,
		ServerAddr: "127.0.0.1:0",
		ServerTLS:  &tls.Config{Certificates: []tls.Certificate{keyPair(t, serving.CertPEM, serving.KeyPEM)}, ClientCAs: ca.CertPool()},
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, kl.Run)

	// exec-proxy, as itself toward the apiserver and the kubelets.
	epClient, err := kubernetes.NewForConfig(c.api.ClientConfig(execproxy.ExecProxyUser))
	if err != nil {
		t.Fatal(err)
	}
	epCert, err := ca.IssueClient(execproxy.ExecProxyUser, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c.spans = tracetest.NewInMemoryExporter()
	epServing, err := ca.IssueServing("exec-proxy", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	proxyCfg := execproxy.Config{
		Client:         epClient,
		KubeletTLS:     execproxy.KubeletClientTLS(keyPair(t, epCert.CertPEM, epCert.KeyPEM), ca.CertPool()),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(c.spans)),
	}
	if o.tunnelled {
		proxyCfg.Tunnels = startTunnel(t, ca, keyPair(t, epServing.CertPEM, epServing.KeyPEM), kl.ServerAddress())
	}
	p, err := execproxy.New(proxyCfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, func(ctx context.Context) error {
		return p.Serve(ctx, proxyLis, &tls.Config{Certificates: []tls.Certificate{keyPair(t, epServing.CertPEM, epServing.KeyPEM)}, ClientCAs: c.frontProxyCA.CertPool()})
	})
	return c
}

// startTunnel serves exec-proxy's tunnel port on loopback and runs the node's
// tunnel agent (with the node's client certificate) toward it, dialing the
// kubelet API at kubeletAddr; it returns once the node holds its tunnel.
func startTunnel(t *testing.T, ca *pki.CA, serving tls.Certificate, kubeletAddr string) *tunnel.Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := tunnel.NewServer(nil)
	run(t, func(ctx context.Context) error { return srv.Serve(ctx, lis, tunnel.ServerTLS(serving, ca.CertPool())) })
	nodeCert, err := ca.IssueClient("system:node:"+nodeName, []string{"system:nodes"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(t.TempDir(), "kubelet-client-current.pem")
	if err := os.WriteFile(certFile, append(nodeCert.CertPEM, nodeCert.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	agentTLS, err := tunnel.ClientTLS(ca.CertPEM, certFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := tunnel.NewAgent(tunnel.AgentConfig{Server: lis.Addr().String(), NodeName: nodeName, TLS: agentTLS,
		KubeletAddress: tunnel.KubeletAddress(kubeletAddr)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, agent.Run)
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, waitTimeout, true,
		func(context.Context) (bool, error) { return srv.Has(nodeName), nil }); err != nil {
		t.Fatalf("the node's tunnel: %v", err)
	}
	return srv
}

// run runs f until the test ends.
func run(t *testing.T, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stopped with %v", err)
		}
	})
}

// runningPod creates a pod bound to the node running argv and waits until it
// runs.
func (c *cluster) runningPod(t *testing.T, name string, argv ...string) *v1.Pod {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{NodeName: nodeName, RestartPolicy: v1.RestartPolicyAlways,
			Containers: []v1.Container{{Name: "main", Image: "busybox", Command: argv}}},
	}
	ctx := context.Background()
	if _, err := c.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		got, err := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && got.Status.Phase == v1.PodRunning {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not running: %v %v", name, got.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// execURL is the apiserver's pods/exec URL for cmd.
func (c *cluster) execURL(pod string, cmd []string, stdin, tty bool) *url.URL {
	opts := &v1.PodExecOptions{Container: "main", Command: cmd, Stdin: stdin, Stdout: true, Stderr: !tty, TTY: tty}
	client, _ := kubernetes.NewForConfig(c.admin)
	return client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL()
}

// execute runs cmd in pod through the apiserver as cfg's user, over
// transport "spdy" or "websocket" (v5, kubectl's default).
func execute(ctx context.Context, cfg *rest.Config, transport string, u *url.URL, stdin io.Reader, tty bool) (string, string, error) {
	var exec remotecommand.Executor
	var err error
	if transport == "spdy" {
		exec, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	} else {
		exec, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	}
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Tty: tty}
	if !tty {
		opts.Stderr = &stderr
	}
	err = exec.StreamWithContext(ctx, opts)
	return stdout.String(), stderr.String(), err
}

func TestExecThroughTheChain(t *testing.T) {
	c := startCluster(t)
	c.runningPod(t, "shell", "sleep", "3600")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	for _, transport := range []string{"websocket", "spdy"} {
		t.Run(transport, func(t *testing.T) {
			t.Run("echo hello", func(t *testing.T) {
				out, _, err := execute(ctx, c.admin, transport, c.execURL("shell", []string{"echo", "hello"}, false, false), nil, false)
				if err != nil || out != "hello\n" {
					t.Errorf("got %q, %v, want hello", out, err)
				}
			})
			t.Run("exit code 3", func(t *testing.T) {
				_, _, err := execute(ctx, c.admin, transport, c.execURL("shell", []string{"sh", "-c", "exit 3"}, false, false), nil, false)
				var exitErr utilexec.ExitError
				if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
					t.Errorf("err = %v, want exit code 3", err)
				}
			})
			t.Run("stdin", func(t *testing.T) {
				out, _, err := execute(ctx, c.admin, transport, c.execURL("shell", []string{"cat"}, true, false), strings.NewReader("data\n"), false)
				if err != nil || out != "data\n" {
					t.Errorf("got %q, %v, want data", out, err)
				}
			})
			t.Run("tty", func(t *testing.T) {
				out, _, err := execute(ctx, c.admin, transport, c.execURL("shell", []string{"sh", "-c", "test -t 1 && echo tty"}, false, true), nil, true)
				if err != nil || !strings.Contains(out, "tty") {
					t.Errorf("got %q, %v, want tty", out, err)
				}
			})
		})
	}
	// Every stream went through exec-proxy's traced handler, upgrades included.
	// A span ends when the handler returns, which may be just after the client
	// saw its stream end.
	var execSpans int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		execSpans = 0
		for _, sp := range c.spans.GetSpans() {
			if strings.HasSuffix(sp.Name, "/pods/shell/exec") {
				execSpans++
			}
		}
		if execSpans == 8 || time.Now().After(deadline) {
			break
		}
	}
	if execSpans != 8 {
		t.Errorf("exec-proxy recorded %d exec spans, want 8", execSpans)
	}
}

func TestErrorsBeforeTheUpgrade(t *testing.T) {
	c := startCluster(t)
	c.runningPod(t, "shell", "sleep", "3600")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// Without a node: the pod never runs.
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox", Command: []string{"true"}}}}}
	var err error
	if _, err = c.client.CoreV1().Pods("default").Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheduler := c.api.ClientConfig("system:kube-scheduler")

	// A running pod on a node whose kubelet does not answer.
	deadPort := func() int32 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return int32(l.Addr().(*net.TCPAddr).Port)
	}()
	ghost := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}}
	if ghost, err = c.client.CoreV1().Nodes().Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ghost.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}}
	ghost.Status.DaemonEndpoints.KubeletEndpoint.Port = deadPort
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, ghost, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stranded := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stranded", Namespace: "default"},
		Spec: v1.PodSpec{NodeName: "ghost", Containers: []v1.Container{{Name: "main", Image: "busybox", Command: []string{"true"}}}}}
	if stranded, err = c.client.CoreV1().Pods("default").Create(ctx, stranded, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stranded.Status.Phase = v1.PodRunning
	if _, err := c.client.CoreV1().Pods("default").UpdateStatus(ctx, stranded, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		cfg     *rest.Config
		url     *url.URL
		code    int
		message string
	}{
		{"pod not found", c.admin, c.execURL("nope", []string{"true"}, false, false), http.StatusNotFound, `pods "nope" not found`},
		{"container not found", c.admin, withQuery(c.execURL("shell", []string{"true"}, false, false), "container", "other"), http.StatusBadRequest, "container other is not valid for pod shell"},
		{"pod not running", c.admin, c.execURL("pending", []string{"true"}, false, false), http.StatusBadRequest, "pod pending does not have a host assigned"},
		{"node unreachable", c.admin, c.execURL("stranded", []string{"true"}, false, false), http.StatusBadGateway, "node ghost is unreachable"},
		{"no pods/exec permission", scheduler, c.execURL("shell", []string{"true"}, false, false), http.StatusForbidden, `cannot create resource "pods/exec"`},
		{"no create permission for a websocket GET", scheduler, c.execURL("shell", []string{"true"}, false, false), http.StatusForbidden, `pods/exec`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tlsCfg, err := rest.TLSConfigFor(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			// HTTP/1.1: upgrades do not exist in HTTP/2.
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
			// The upgrade request as kubectl sends it: SPDY POST, or WebSocket GET.
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tc.url.String(), nil)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "SPDY/3.1")
			req.Header.Set("X-Stream-Protocol-Version", "v4.channel.k8s.io")
			if i == len(tests)-1 {
				req.Method = http.MethodGet
				req.Header.Set("Upgrade", "websocket")
				req.Header.Set("Sec-WebSocket-Version", "13")
				req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
				req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var st metav1.Status
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				t.Fatalf("%d with a body that is no Status: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.code || st.Kind != "Status" || int(st.Code) != tc.code || !strings.Contains(st.Message, tc.message) {
				t.Errorf("got %d %+v, want %d with a Status saying %q", resp.StatusCode, st, tc.code, tc.message)
			}
		})
	}
}

func withQuery(u *url.URL, k, v string) *url.URL {
	q := u.Query()
	q.Set(k, v)
	u2 := *u
	u2.RawQuery = q.Encode()
	return &u2
}

// TestOnlyTheAPIServerMayCallExecProxy: exec-proxy believes the identity headers
// only of the apiserver's front-proxy-client certificate, issued by the front-proxy
// CA. A node's certificate, valid as it is at the API, does not get through the TLS
// handshake as a client certificate (the TLS client sends none that the server's CA
// list does not name, and the request is 401), nor does a cluster-CA certificate that
// names itself front-proxy-client; another name from the front-proxy CA is forbidden.
func TestOnlyTheAPIServerMayCallExecProxy(t *testing.T) {
	c := startCluster(t)
	issue := func(ca *pki.CA, cn string, orgs ...string) tls.Certificate {
		t.Helper()
		kp, err := ca.IssueClient(cn, orgs, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return keyPair(t, kp.CertPEM, kp.KeyPEM)
	}
	for _, tc := range []struct {
		name string
		cert tls.Certificate
		want int
	}{
		{"a node's certificate", issue(c.api.CA, "system:node:"+nodeName, "system:nodes"), http.StatusUnauthorized},
		{"a cluster-CA certificate named front-proxy-client", issue(c.api.CA, execproxy.FrontProxyUser), http.StatusUnauthorized},
		{"a front-proxy CA certificate of another name", issue(c.frontProxyCA, "someone"), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
				Certificates: []tls.Certificate{tc.cert}, RootCAs: c.api.CA.CertPool(),
			}}}
			req, _ := http.NewRequest(http.MethodGet, "https://"+c.proxyAddr+"/api/v1/namespaces/default/pods/shell/log", nil)
			req.Header.Set(execproxy.RemoteUserHeader, "admin")
			req.Header.Set(execproxy.RemoteGroupHeader, "system:masters")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestLogs(t *testing.T) {
	c := startCluster(t)
	c.runningPod(t, "talker", "sh", "-c", "echo one; echo two; echo three; while true; do sleep 0.2; echo tick; done")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	logs := func(opts *v1.PodLogOptions) string {
		t.Helper()
		b, err := c.client.CoreV1().Pods("default").GetLogs("talker", opts).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := logs(&v1.PodLogOptions{}); !strings.HasPrefix(got, "one\ntwo\nthree\n") {
		t.Errorf("logs = %q, want one two three first", got)
	}
	if got := logs(&v1.PodLogOptions{TailLines: ptr(int64(2))}); strings.Count(got, "\n") != 2 {
		t.Errorf("tailLines=2: %q, want 2 lines", got)
	}
	if got := logs(&v1.PodLogOptions{LimitBytes: ptr(int64(5))}); got != "one\nt" {
		t.Errorf("limitBytes=5: %q, want \"one\\nt\"", got)
	}

	// follow: new lines keep arriving.
	stream, err := c.client.CoreV1().Pods("default").GetLogs("talker", &v1.PodLogOptions{Follow: true, TailLines: ptr(int64(0))}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(stream, buf, len("tick\ntick\n"))
	stream.Close()
	if err != nil || !strings.HasPrefix(string(buf[:n]), "tick\ntick\n") {
		t.Errorf("follow read %q, %v, want new ticks", buf[:n], err)
	}
}

// TestLogsOverWebSocket reads a container's log through the apiserver over a WebSocket
// (subprotocol binary.k8s.io), as Kubernetes' conformance test "should support
// retrieving logs from the container over websockets" does: the socket carries the
// log and closes at its end.
func TestLogsOverWebSocket(t *testing.T) {
	c := startCluster(t)
	c.runningPod(t, "talker", "sh", "-c", "echo container is alive; sleep 3600")
	u, err := url.Parse(c.admin.Host + "/api/v1/namespaces/default/pods/talker/log?container=main")
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "wss"
	tlsConfig, err := rest.TLSConfigFor(c.admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := websocket.NewConfig(u.String(), "https://"+u.Host)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TlsConfig, cfg.Protocol = tlsConfig, []string{"binary.k8s.io"}
	var got string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ws, err := websocket.DialConfig(cfg)
		if err != nil {
			t.Logf("dial: %v", err)
			return false, nil
		}
		defer ws.Close()
		var buf bytes.Buffer
		for {
			var msg []byte
			if err := websocket.Message.Receive(ws, &msg); err != nil {
				if err != io.EOF {
					t.Fatalf("reading the log: %v", err)
				}
				break
			}
			buf.Write(msg)
		}
		got = buf.String()
		return got != "", nil
	}); err != nil {
		t.Fatalf("log over WebSocket: %v", err)
	}
	if got != "container is alive\n" {
		t.Errorf("log over WebSocket = %q, want %q", got, "container is alive\n")
	}
}

func ptr[T any](v T) *T { return &v }

func TestPortForward(t *testing.T) {
	c := startCluster(t)
	// The pod's server: the process runtime's pods share the host network, so
	// a listener of the test stands for it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("from the pod")) })}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	podPort := lis.Addr().(*net.TCPAddr).Port
	c.runningPod(t, "web", "sleep", "3600")

	client, _ := kubernetes.NewForConfig(c.admin)
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(c.admin)
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", podPort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	defer func() { close(stop); <-done }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(waitTimeout):
		t.Fatal("port forward not ready")
	}
	ports, _ := pf.GetPorts()
	hc := &http.Client{Timeout: waitTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "from the pod" {
		t.Errorf("body = %q, want from the pod", body)
	}
}

// TestClientGoingAwayEndsTheStream: a client that disconnects mid-stream
// ends the exec'd process on the node, and no goroutine of the chain is left
// behind.
func TestClientGoingAwayEndsTheStream(t *testing.T) {
	c := startCluster(t)
	c.runningPod(t, "shell", "sleep", "3600")
	ctx := context.Background()
	// One complete exec first, so connection pools are warm before the count.
	if _, _, err := execute(ctx, c.admin, "websocket", c.execURL("shell", []string{"true"}, false, false), nil, false); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()

	for _, transport := range []string{"websocket", "spdy"} {
		pr, pw := io.Pipe()
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			exec, _ := remotecommand.NewSPDYExecutor(c.admin, http.MethodPost, c.execURL("shell", []string{"sh", "-c", "echo $$; exec sleep 3600"}, false, false))
			if transport == "websocket" {
				exec, _ = remotecommand.NewWebSocketExecutor(c.admin, http.MethodGet, c.execURL("shell", []string{"sh", "-c", "echo $$; exec sleep 3600"}, false, false).String())
			}
			_ = exec.StreamWithContext(sctx, remotecommand.StreamOptions{Stdout: pw, Stderr: io.Discard})
			pw.Close()
		}()
		var pid int
		if _, err := fmt.Fscan(pr, &pid); err != nil {
			t.Fatalf("%s: read pid: %v", transport, err)
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		cancel()
		wg.Wait()
		deadline := time.Now().Add(waitTimeout)
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: process %d still runs after the client went away", transport, pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// client-go's WebSocket heartbeat (kubectl's side, not the chain's) stops
	// on its next tick.
	verifyNoLeaks(t, ignore, goleak.IgnoreTopFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"))
}

// verifyNoLeaks fails t if goroutines beyond opts' remain after 5 s: libraries
// end some of theirs a little after a connection closes (spdystream hands a
// closed connection's error over for up to 1 s).
func verifyNoLeaks(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Error(err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestThroughTheTunnel: the node's address routes nowhere, and exec (WebSocket
// and SPDY), logs and port-forward still work, through the node's tunnel.
func TestThroughTheTunnel(t *testing.T) {
	c := startCluster(t, clusterOptions{tunnelled: true})
	c.runningPod(t, "tunnelled", "sh", "-c", "echo started; sleep 3600")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, transport := range []string{"websocket", "spdy"} {
		out, _, err := execute(ctx, c.admin, transport, c.execURL("tunnelled", []string{"echo", "hello"}, false, false), nil, false)
		if err != nil || out != "hello\n" {
			t.Errorf("exec over %s: %q, %v, want hello", transport, out, err)
		}
	}
	out, _, err := execute(ctx, c.admin, "websocket", c.execURL("tunnelled", []string{"cat"}, true, false), strings.NewReader("through the tunnel\n"), false)
	if err != nil || out != "through the tunnel\n" {
		t.Errorf("exec with stdin: %q, %v", out, err)
	}
	b, err := c.client.CoreV1().Pods("default").GetLogs("tunnelled", &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || string(b) != "started\n" {
		t.Errorf("logs: %q, %v, want started", b, err)
	}
}
