package serving_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
)

// component is a running secure port, as a component's main starts it.
type component struct {
	url string
	// reviews counts the TokenReviews and SubjectAccessReviews the component sent.
	reviews atomic.Int64
}

// startComponent runs Options.Start with a secure port on a free loopback port, its
// reviews made with a client certificate of identity (the component's own), and
// /metrics holding skiff_test_total; change adjusts the options first.
func startComponent(t *testing.T, s *controlplanetest.Server, identity pki.Identity, change func(*serving.Options)) *component {
	t.Helper()
	c := &component{}
	cfg := s.ClientConfig(identity.CommonName, identity.Organizations...)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") || strings.HasSuffix(r.URL.Path, "/subjectaccessreviews") {
				c.reviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := serving.NewOptions("")
	o.SecureServing = serving.NewSecureServingOptions(0)
	o.SecureServing.Listener = l
	if change != nil {
		change(o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "skiff_test_total", Help: "a test counter"})
	reg.MustRegister(counter)
	counter.Inc()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addrs, err := o.Start(ctx, reg, serving.WithDelegatedAuth(client, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if addrs.Secure == nil || addrs.Health != nil {
		t.Fatalf("Start served %+v, want only the secure port", addrs)
	}
	c.url = "https://" + addrs.Secure.String()
	return c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// caller is how a test reaches a secure port: a client certificate, a bearer token,
// or neither. It does not verify the serving certificate, as Prometheus scraping a
// self-signed component does not.
type caller struct {
	name  string
	cert  *tls.Certificate
	token string
}

func (c caller) get(t *testing.T, url string) (int, string) {
	t.Helper()
	tlsConfig := &tls.Config{InsecureSkipVerify: true}
	if c.cert != nil {
		tlsConfig.Certificates = []tls.Certificate{*c.cert}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 30 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: GET %s: %v", c.name, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func certificate(t *testing.T, ca *pki.CA, user string, groups ...string) *tls.Certificate {
	t.Helper()
	kp, err := ca.IssueClient(user, groups, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

// serviceAccountToken creates default/name and returns a TokenRequest token of it,
// bound to the ClusterRole role when role is not "".
func serviceAccountToken(t *testing.T, client kubernetes.Interface, name, role string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if role != "" {
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + strings.ReplaceAll(role, ":", "-")},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// status decodes a metav1.Status body.
func status(t *testing.T, body string) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" {
		t.Fatalf("body is no metav1.Status: %q (%v)", body, err)
	}
	return st
}

// TestSecurePort is the secure port of each component that has one, against a real
// apiserver: who may read /metrics and /debug/pprof, and that probes need no
// credential. Each component asks the apiserver with its own identity, so its RBAC must
// let it create TokenReviews and SubjectAccessReviews.
func TestSecurePort(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	admin, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	foreignCA, err := pki.NewCA("not-the-cluster-ca")
	if err != nil {
		t.Fatal(err)
	}
	monitoringToken := serviceAccountToken(t, admin, "prometheus", "system:monitoring")
	unboundToken := serviceAccountToken(t, admin, "unbound", "")
	var (
		anonymous  = caller{name: "anonymous"}
		jane       = caller{name: "jane, without RBAC", cert: certificate(t, s.CA, "jane", "developers")}
		monitoring = caller{name: "a member of system:monitoring", cert: certificate(t, s.CA, "scraper", "system:monitoring")}
		master     = caller{name: "a member of system:masters", cert: certificate(t, s.CA, "root", "system:masters")}
		foreign    = caller{name: "a certificate of another CA", cert: certificate(t, foreignCA, "root", "system:masters")}
		saBound    = caller{name: "a service account bound to system:monitoring", token: monitoringToken}
		saUnbound  = caller{name: "an unbound service account", token: unboundToken}
		forged     = caller{name: "a forged token", token: monitoringToken[:len(monitoringToken)-4] + "AAAA"}
		// As kube's union: one credential that proves a user is enough.
		certAndForged = caller{name: "a certificate of system:monitoring with a forged token", cert: monitoring.cert, token: forged.token}
	)
	forbidden := func(user, path string) string {
		return `forbidden: User "` + user + `" cannot get path "` + path + `"`
	}
	cases := []struct {
		caller   caller
		path     string
		wantCode int
		// wantMessage is the metav1.Status message of a refusal.
		wantMessage string
	}{
		{anonymous, "/healthz", http.StatusOK, ""},
		{anonymous, "/readyz", http.StatusOK, ""},
		{anonymous, "/livez", http.StatusOK, ""},
		// kube's components authenticate no credential as system:anonymous, whom RBAC
		// does not allow /metrics.
		{anonymous, "/metrics", http.StatusForbidden, forbidden("system:anonymous", "/metrics")},
		{forged, "/metrics", http.StatusUnauthorized, "Unauthorized"},
		{forged, "/healthz", http.StatusUnauthorized, "Unauthorized"},
		{foreign, "/metrics", http.StatusUnauthorized, "Unauthorized"},
		{certAndForged, "/metrics", http.StatusOK, ""},
		{jane, "/metrics", http.StatusForbidden, forbidden("jane", "/metrics")},
		{jane, "/healthz", http.StatusOK, ""},
		{monitoring, "/metrics", http.StatusOK, ""},
		{master, "/metrics", http.StatusOK, ""},
		{saBound, "/metrics", http.StatusOK, ""},
		{saUnbound, "/metrics", http.StatusForbidden, forbidden("system:serviceaccount:default:unbound", "/metrics")},
		// system:monitoring grants /metrics and the probes, not profiles.
		{monitoring, "/debug/pprof/cmdline", http.StatusForbidden, forbidden("scraper", "/debug/pprof/cmdline")},
		{anonymous, "/debug/pprof/cmdline", http.StatusForbidden, forbidden("system:anonymous", "/debug/pprof/cmdline")},
		{master, "/debug/pprof/cmdline", http.StatusOK, ""},
	}
	for _, identity := range []pki.Identity{pki.Scheduler, pki.ControllerManager, pki.CSRSigner} {
		t.Run(identity.Name, func(t *testing.T) {
			c := startComponent(t, s, identity, func(o *serving.Options) { o.Profiling = true })
			for _, tc := range cases {
				code, body := tc.caller.get(t, c.url+tc.path)
				if code != tc.wantCode {
					t.Errorf("%s: GET %s: %d %.300s, want %d", tc.caller.name, tc.path, code, body, tc.wantCode)
					continue
				}
				switch {
				case tc.wantMessage != "":
					if st := status(t, body); st.Message != tc.wantMessage || st.Code != int32(tc.wantCode) {
						t.Errorf("%s: GET %s: message %q code %d, want %q", tc.caller.name, tc.path, st.Message, st.Code, tc.wantMessage)
					}
				case tc.path == "/metrics":
					if !strings.Contains(body, "skiff_test_total 1") {
						t.Errorf("%s: /metrics without the component's metrics: %.300s", tc.caller.name, body)
					}
				}
			}
		})
	}
}

// TestSecurePortSpeaksOnlyTLS sends plain HTTP to the secure port, which must not
// answer it with any endpoint.
func TestSecurePortSpeaksOnlyTLS(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	c := startComponent(t, s, pki.Scheduler, nil)
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get("http://" + strings.TrimPrefix(c.url, "https://") + path)
		if err != nil {
			continue // the connection was refused outright: no plain HTTP either
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Errorf("plain HTTP GET %s: %d %q, want 400 asking for HTTPS", path, resp.StatusCode, body)
		}
	}
}

// TestSecurePortCertificate: with no --tls-cert-file the port serves a self-signed
// certificate for localhost and 127.0.0.1, as kube's components do; with one, that one.
func TestSecurePortCertificate(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	peer := func(t *testing.T, url string) *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	t.Run("self-signed in memory", func(t *testing.T) {
		cert := peer(t, startComponent(t, s, pki.Scheduler, nil).url)
		if !slices.Contains(cert.DNSNames, "localhost") || !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
			t.Errorf("serving certificate for %v %v, want localhost and 127.0.0.1", cert.DNSNames, cert.IPAddresses)
		}
		if err := cert.CheckSignatureFrom(s.CA.Cert); err == nil {
			t.Error("the self-signed certificate chains to the cluster CA")
		}
	})
	t.Run("--tls-cert-file", func(t *testing.T) {
		kp, err := s.CA.IssueServing("scheduler.example", []string{"scheduler.example"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		c := startComponent(t, s, pki.Scheduler, func(o *serving.Options) {
			o.SecureServing.CertFile, o.SecureServing.KeyFile = certFile, keyFile
		})
		if cert := peer(t, c.url); !slices.Contains(cert.DNSNames, "scheduler.example") || cert.CheckSignatureFrom(s.CA.Cert) != nil {
			t.Errorf("serving certificate for %v, want --tls-cert-file's", cert.DNSNames)
		}
	})
}

// TestSecurePortCachesReviews: one caller's repeated scrapes within the TTLs cost one
// TokenReview and one SubjectAccessReview, as kube's webhook caches make them.
func TestSecurePortCachesReviews(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	admin, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	scraper := caller{name: "a bound service account", token: serviceAccountToken(t, admin, "prometheus", "system:monitoring")}
	c := startComponent(t, s, pki.ControllerManager, nil)
	for range 5 {
		if code, body := scraper.get(t, c.url+"/metrics"); code != http.StatusOK {
			t.Fatalf("GET /metrics: %d %.300s", code, body)
		}
	}
	if n := c.reviews.Load(); n != 2 {
		t.Errorf("%d reviews for 5 scrapes, want 2 (one TokenReview, one SubjectAccessReview)", n)
	}
}

// TestSecureServingFlags parses a component's flags as its main does: kube's names and
// defaults, and --authorization-always-allow-paths opening /metrics to anyone.
func TestSecureServingFlags(t *testing.T) {
	o := serving.NewOptions("")
	o.SecureServing = serving.NewSecureServingOptions(10259)
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	o.AddFlags(fs)
	want := map[string]string{
		"bind-address": "0.0.0.0", "secure-port": "10259", "tls-cert-file": "", "tls-private-key-file": "", "client-ca-file": "",
		"authentication-token-webhook-cache-ttl": "10s", "authorization-webhook-cache-authorized-ttl": "10s",
		"authorization-webhook-cache-unauthorized-ttl": "10s", "health-address": "", "profiling": "false",
	}
	for name, def := range want {
		if f := fs.Lookup(name); f == nil || f.DefValue != def {
			t.Errorf("--%s: %+v, want default %q", name, f, def)
		}
	}
	if f := fs.Lookup("authorization-always-allow-paths"); f == nil || !strings.Contains(f.Usage, `"/healthz,/readyz,/livez"`) {
		t.Errorf("--authorization-always-allow-paths: %+v", f)
	}
	if err := fs.Parse([]string{"--profiling", "--authorization-always-allow-paths=/healthz,/metrics"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("--profiling with only the secure port: %v", err)
	}
	if !slices.Equal(o.SecureServing.AlwaysAllowPaths, []string{"/healthz", "/metrics"}) {
		t.Fatalf("always-allow paths %v", o.SecureServing.AlwaysAllowPaths)
	}

	s := controlplanetest.StartServerWithoutControllers(t)
	c := startComponent(t, s, pki.Scheduler, func(o *serving.Options) { o.SecureServing.AlwaysAllowPaths = []string{"/healthz", "/metrics"} })
	if code, body := (caller{name: "anonymous"}).get(t, c.url+"/metrics"); code != http.StatusOK {
		t.Errorf("anonymous GET of an always-allowed /metrics: %d %.300s", code, body)
	}

	for _, bad := range [][]string{{"--bind-address=localhost"}, {"--tls-cert-file=a.crt"}, {"--authorization-always-allow-paths=/a*b"}} {
		o := serving.NewOptions("")
		o.SecureServing = serving.NewSecureServingOptions(10259)
		fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err == nil {
			t.Errorf("%v: valid", bad)
		}
	}
}

// TestSecurePortNeedsTheAPIServer: a secure port without a client to ask the apiserver
// with refuses to start rather than serving unauthenticated.
func TestSecurePortNeedsTheAPIServer(t *testing.T) {
	o := serving.NewOptions("")
	o.SecureServing = serving.NewSecureServingOptions(0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	o.SecureServing.Listener = l
	if _, err := o.Start(context.Background(), prometheus.NewRegistry()); err == nil {
		t.Fatal("started without WithDelegatedAuth")
	}
}
