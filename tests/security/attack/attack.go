// Package attack is what an attacker who holds one credential of a skiff cluster tries:
// each Attempt knocks on one door (etcd, NATS, exec-proxy, a kubelet, the API) with one
// credential and reports whether the door held. The suites of tests/security (the
// all-in-one) and tests/compose (the full stack, from inside a node's container through
// cmd/attacker) build their attempts from what the cluster hands out and require every
// one of them refused.
package attack

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
	"regexp"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

// Door names what an Attempt knocks on.
type Door string

// The doors.
const (
	// EtcdRead lists keys under /registry/ (every Secret, every RBAC binding).
	EtcdRead Door = "etcd-read"
	// EtcdWrite writes a key under /registry/.
	EtcdWrite Door = "etcd-write"
	// HTTP sends Method to Target (a full URL) and counts 401 and 403, or a refused
	// handshake, as refused.
	HTTP Door = "http"
	// NATSSubscribe subscribes to Subject and counts a permissions violation, or a
	// refused connection, as refused.
	NATSSubscribe Door = "nats-subscribe"
	// NATSRequest sends a request to Subject (the JetStream API) and counts a
	// permissions violation, no answer or a refused connection as refused.
	NATSRequest Door = "nats-request"
	// NATSPublish publishes Body to Subject and counts a permissions violation or a
	// refused connection as refused.
	NATSPublish Door = "nats-publish"
)

// Credential is what the attacker holds: a client certificate (PEM, or files holding
// it) and/or a bearer token. Files are read when the attempt runs, so an attempt made
// inside a node's container names the node's own files.
type Credential struct {
	CertPEM, KeyPEM   []byte `json:",omitempty"`
	CertFile, KeyFile string `json:",omitempty"` // KeyFile "" means CertFile holds both
	Token, TokenFile  string `json:",omitempty"`
}

// Attempt is one knock: Name says who tries what, for the report.
type Attempt struct {
	Name   string
	Door   Door
	Target string // URL: https://etcd:2379, tls://nats:4222, https://host:port/path
	Cred   Credential
	// Method is HTTP's method (GET when empty).
	Method string `json:",omitempty"`
	// Subject is a NATS door's subject.
	Subject string `json:",omitempty"`
	// Body is what NATSPublish publishes or HTTP sends.
	Body []byte `json:",omitempty"`
}

// Verdict is how an attempt ended.
type Verdict struct {
	Name string
	// Refused is true when the door held.
	Refused bool
	// Detail is the refusal (an error, a status) or what was obtained.
	Detail string
	// Took is how long the attempt ran.
	Took time.Duration
}

// Timeout bounds one attempt.
const Timeout = 10 * time.Second

// Run makes one attempt.
func Run(ctx context.Context, a Attempt) Verdict {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	start := time.Now()
	refused, detail := run(ctx, a)
	return Verdict{Name: a.Name, Refused: refused, Detail: detail, Took: time.Since(start).Round(time.Millisecond)}
}

func run(ctx context.Context, a Attempt) (bool, string) {
	cert, token, err := a.Cred.load()
	if err != nil {
		// The attacker does not even hold what the attempt needs: a broken plan, not
		// a refusal.
		return false, "credential: " + err.Error()
	}
	switch a.Door {
	case EtcdRead, EtcdWrite:
		return etcd(ctx, a, cert)
	case HTTP:
		return httpAttempt(ctx, a, cert, token)
	case NATSSubscribe, NATSRequest, NATSPublish:
		return natsAttempt(ctx, a, cert)
	}
	return false, fmt.Sprintf("unknown door %q", a.Door)
}

// load returns the client certificate (nil without one) and the token.
func (c Credential) load() (*tls.Certificate, string, error) {
	var cert *tls.Certificate
	certPEM, keyPEM := c.CertPEM, c.KeyPEM
	if c.CertFile != "" {
		var err error
		if certPEM, err = os.ReadFile(c.CertFile); err != nil {
			return nil, "", err
		}
		keyPEM = certPEM
		if c.KeyFile != "" {
			if keyPEM, err = os.ReadFile(c.KeyFile); err != nil {
				return nil, "", err
			}
		}
	}
	if len(certPEM) > 0 {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, "", err
		}
		cert = &pair // X509KeyPair fills Leaf: the attempt knows whose certificate it holds
	}
	token := c.Token
	if c.TokenFile != "" {
		data, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, "", err
		}
		token = strings.TrimSpace(string(data))
	}
	return cert, token, nil
}

// clientTLS presents cert (when any) and, as an attacker would, does not care who the
// server is.
func clientTLS(cert *tls.Certificate) *tls.Config {
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the attacker's side
	if cert != nil {
		// Sent whatever CAs the server names: the attacker tries its luck.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// etcd reads or writes under /registry/ with cert. A refused client certificate ends
// the TLS handshake (etcd's verdict arrives with the first read in TLS 1.3), which is
// told apart from an etcd that cannot be reached at all: that is no refusal.
func etcd(ctx context.Context, a Attempt, cert *tls.Certificate) (bool, string) {
	if refused, detail := handshake(ctx, a.Target, cert); refused || detail != "" {
		return refused, detail
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{a.Target},
		TLS:         clientTLS(cert),
		DialTimeout: 3 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return true, err.Error()
	}
	defer c.Close()
	if a.Door == EtcdRead {
		resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(5))
		if err != nil {
			return true, err.Error()
		}
		keys := make([]string, 0, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		return false, fmt.Sprintf("read %d keys: %v", resp.Count, keys)
	}
	if _, err := c.Put(ctx, "/registry/attack/planted", "owned"); err != nil {
		return true, err.Error()
	}
	return false, "wrote /registry/attack/planted"
}

// handshake dials target's host over TLS with cert. It returns refused when the server
// ended the handshake over the certificate, a detail without refusal when the server
// could not be reached, and neither when the server accepted the client.
func handshake(ctx context.Context, target string, cert *tls.Certificate) (refused bool, detail string) {
	u, err := url.Parse(target)
	if err != nil {
		return false, err.Error()
	}
	d := &tls.Dialer{Config: clientTLS(cert)}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return false, "unreachable: " + err.Error()
		}
		return true, err.Error()
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false, "" // accepted: the server waits for the client to speak
		}
		return true, err.Error()
	}
	return false, ""
}

// httpAttempt sends the request with cert and token.
func httpAttempt(ctx context.Context, a Attempt, cert *tls.Certificate, token string) (bool, string) {
	method := a.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Target, bytes.NewReader(a.Body))
	if err != nil {
		return false, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if len(a.Body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	// What a forger would add, should the door believe headers.
	req.Header.Set("X-Remote-User", "admin")
	req.Header.Set("X-Remote-Group", "system:masters")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(cert)}}
	resp, err := client.Do(req)
	if err != nil {
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) || strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "certificate") {
			return true, err.Error()
		}
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	detail := fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	return resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden, detail
}

// RunAll makes every attempt of plan, in order.
func RunAll(ctx context.Context, plan []Attempt) []Verdict {
	out := make([]Verdict, 0, len(plan))
	for _, a := range plan {
		out = append(out, Run(ctx, a))
	}
	return out
}

// Encode and Decode carry a plan or verdicts to and from cmd/attacker as JSON.
func Encode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// Decode reads what Encode wrote.
func Decode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// Doors are where a cluster's attempts knock: the URLs and subjects of one cluster, as
// seen from where the attacker runs.
type Doors struct {
	// Etcd is etcd's client URL, e.g. https://etcd:2379.
	Etcd string
	// NATS is the NATS URL, e.g. tls://nats:4222; "" leaves NATS out.
	NATS string
	// OtherNodeSubject is an event subject of another node (a publisher the holder is
	// not), e.g. skiff.events.default.system:node:node-b.
	OtherNodeSubject string
	// ExecProxyLog is a pod's log URL on exec-proxy, reached without the apiserver.
	ExecProxyLog string
	// KubeletLog is a container's log URL on a kubelet's API.
	KubeletLog string
	// VictimSecret is the API URL of a Secret only a pod on another node uses.
	VictimSecret string
	// KubeSystemSecrets is the API URL listing kube-system's Secrets.
	KubeSystemSecrets string
}

// Holder is one credential a cluster hands out, named for the report.
type Holder struct {
	Who  string
	Cred Credential
}

// Matrix is every escalation each holder tries: etcd read and write; NATS subscribing to
// every namespace's events and to every inbox, calling the JetStream API (information,
// deleting the EVENTS stream or the apiserver's consumer) and publishing as another node;
// exec-proxy without the apiserver; a kubelet's API; another node's pod's Secret and
// kube-system's Secrets. Every attempt must be refused.
func Matrix(d Doors, holders []Holder) []Attempt {
	var plan []Attempt
	for _, h := range holders {
		add := func(what string, a Attempt) {
			a.Name, a.Cred = h.Who+" → "+what, h.Cred
			plan = append(plan, a)
		}
		add("etcd: read /registry", Attempt{Door: EtcdRead, Target: d.Etcd})
		add("etcd: write /registry", Attempt{Door: EtcdWrite, Target: d.Etcd})
		if d.NATS != "" {
			add("NATS: subscribe to every namespace's events", Attempt{Door: NATSSubscribe, Target: d.NATS, Subject: "skiff.events.>"})
			add("NATS: subscribe to every inbox", Attempt{Door: NATSSubscribe, Target: d.NATS, Subject: "_INBOX.>"})
			add("NATS: JetStream API information", Attempt{Door: NATSRequest, Target: d.NATS, Subject: "$JS.API.INFO"})
			add("NATS: delete the EVENTS stream", Attempt{Door: NATSRequest, Target: d.NATS, Subject: "$JS.API.STREAM.DELETE.EVENTS"})
			add("NATS: delete the apiserver's consumer", Attempt{Door: NATSRequest, Target: d.NATS,
				Subject: "$JS.API.CONSUMER.DELETE.EVENTS.skiff-apiserver"})
			add("NATS: publish as another node", Attempt{Door: NATSPublish, Target: d.NATS, Subject: d.OtherNodeSubject, Body: []byte(`{}`)})
		}
		add("exec-proxy, without the apiserver", Attempt{Door: HTTP, Target: d.ExecProxyLog})
		add("kubelet API: container logs", Attempt{Door: HTTP, Target: d.KubeletLog})
		add("API: another node's pod's Secret", Attempt{Door: HTTP, Target: d.VictimSecret})
		add("API: list kube-system's Secrets", Attempt{Door: HTTP, Target: d.KubeSystemSecrets})
	}
	return plan
}

// RefusedEvents is the apiserver's count of the events its sink dropped for reason
// (skiff_apiserver_eventsink_refused_events_total{reason}), read from /metrics through
// client (an identity that may read it, the admin's). Errors: /metrics cannot be read or
// holds no such count.
func RefusedEvents(ctx context.Context, client rest.Interface, reason string) (int, error) {
	body, err := client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("/metrics: %w", err)
	}
	m := regexp.MustCompile(`skiff_apiserver_eventsink_refused_events_total\{reason="` + regexp.QuoteMeta(reason) + `"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("/metrics holds no refused-events count for %s", reason)
	}
	return strconv.Atoi(string(m[1]))
}
