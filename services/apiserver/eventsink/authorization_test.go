package eventsink_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/apiserver/eventsink"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/natsauth"
	"skiff.dev/services/internal/pki"
)

// clientTLS is a NATS client's TLS configuration presenting a fresh certificate of
// pkiDir's CA for cn in orgs.
func clientTLS(t *testing.T, pkiDir, cn string, orgs ...string) *tls.Config {
	t.Helper()
	ca, err := pki.LoadCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueClient(cn, orgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.CertPool(), MinVersion: tls.VersionTLS12}
}

// publisher publishes hand-made events to url as user, over a connection that waits for
// the apiserver's auth callout to admit it, as a recorder's does.
type publisher struct {
	user string
	js   jetstream.JetStream
}

func newPublisher(t *testing.T, url, user string, tlsConfig *tls.Config) *publisher {
	t.Helper()
	inbox, err := natsauth.InboxPrefix(user)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.Secure(tlsConfig), nats.CustomInboxPrefix(inbox),
		nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &publisher{user: user, js: js}
}

// publish sends ev on subject, retrying until JetStream stores it.
func (p *publisher) publish(t *testing.T, subject string, ev *corev1.Event) {
	t.Helper()
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, lastErr = p.js.Publish(ctx, subject, data)
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("%s publishing on %s: %v", p.user, subject, lastErr)
	}
}

// event is a Started event about pod in namespace, reported from host.
func event(namespace, pod, host, instance string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod, now.UnixNano()), Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod, UID: types.UID("uid-" + pod)},
		Reason:         "Started", Message: "Started container " + pod, Type: corev1.EventTypeNormal, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "kubelet", Host: host}, ReportingController: "kubelet", ReportingInstance: instance,
	}
}

// refusedEvents is the apiserver's skiff_apiserver_eventsink_refused_events_total for
// reason, read from its /metrics.
func refusedEvents(t *testing.T, client kubernetes.Interface, reason string) float64 {
	t.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	prefix := `skiff_apiserver_eventsink_refused_events_total{reason="` + reason + `"} `
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", strings.TrimSpace(prefix))
	return 0
}

// waitRefused waits until the sink has refused want events for reason.
func waitRefused(t *testing.T, client kubernetes.Interface, reason string, want float64) {
	t.Helper()
	var got float64
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = refusedEvents(t, client, reason)
		return got >= want, nil
	}); err != nil {
		t.Fatalf("refused events for %s: %v, want %v", reason, got, want)
	}
	if got != want {
		t.Fatalf("refused events for %s: %v, want %v", reason, got, want)
	}
}

// startCluster runs NATS from its own PKI and an apiserver whose sink and auth callout
// use it; it returns the NATS PKI directory, URL and an admin client.
func startCluster(t *testing.T) (string, string, kubernetes.Interface) {
	t.Helper()
	natsDir := natsPKI(t)
	ns := startNATS(t, natsDir, t.TempDir(), 0)
	t.Cleanup(ns.Shutdown)
	srv := controlplanetest.StartServer(t, withNATS(t, natsDir, ns.ClientURL()))
	return natsDir, ns.ClientURL(), kubernetes.NewForConfigOrDie(srv.Config)
}

// TestSinkRefusesANodeSpeakingForAnother: node-a may publish only under its own subject,
// but what it says there is checked too, as NodeRestriction checks a POST: an event it
// reports as node-b's (source.host or reportingInstance) is dropped and counted, and its
// own events are stored.
func TestSinkRefusesANodeSpeakingForAnother(t *testing.T) {
	natsDir, url, client := startCluster(t)
	nodeTLS := clientTLS(t, natsDir, "system:node:node-a", "system:nodes")
	node := newPublisher(t, url, "system:node:node-a", nodeTLS)
	subject, err := natsauth.EventSubject("default", "system:node:node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := refusedEvents(t, client, eventsink.RefusedNodeRestriction); got != 0 {
		t.Fatalf("refused before anything was published: %v", got)
	}
	node.publish(t, subject, event("default", "forged-host", "node-b", ""))
	node.publish(t, subject, event("default", "forged-instance", "node-a", "node-b"))
	waitRefused(t, client, eventsink.RefusedNodeRestriction, 2)

	// The node's recorder, as the kubelet runs it: its events are stored.
	r := startRecorder(t, eventrecorder.Config{Component: "kubelet", Host: "node-a", User: "system:node:node-a", NATSURL: url, TLS: nodeTLS})
	r.Event(pod("honest"), corev1.EventTypeNormal, "Started", "Started container honest")
	stored := waitForEvents(t, client, "honest", 1, 30*time.Second)
	if ev := stored[0]; ev.Source.Host != "node-a" || ev.ReportingInstance != "node-a" {
		t.Errorf("stored event source %+v, reportingInstance %q; want node-a's", ev.Source, ev.ReportingInstance)
	}
	for _, forged := range []string{"forged-host", "forged-instance"} {
		waitForEvents(t, client, forged, 0, time.Second)
	}
}

// TestSinkRefusesAPublisherRBACForbids: exec-proxy has NATS subjects of its own (every
// identity without groups has), but RBAC does not let it create events, so what it
// publishes is dropped as a POST of it would be refused.
func TestSinkRefusesAPublisherRBACForbids(t *testing.T) {
	natsDir, url, client := startCluster(t)
	execProxy := newPublisher(t, url, pki.ExecProxy.CommonName, natsTLS(t, natsDir, pki.ExecProxy.Name))
	subject, err := natsauth.EventSubject("default", pki.ExecProxy.CommonName)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := event("default", "unauthorized", "", "")
	forbidden.Source = corev1.EventSource{Component: "exec-proxy"}
	execProxy.publish(t, subject, forbidden)
	waitRefused(t, client, eventsink.RefusedForbidden, 1)

	r := startRecorder(t, schedulerRecorder(t, natsDir, url, "default-scheduler"))
	r.Event(pod("allowed"), corev1.EventTypeNormal, "Scheduled", "Successfully assigned default/allowed to node-a")
	waitForEvents(t, client, "allowed", 1, 30*time.Second)
	waitForEvents(t, client, "unauthorized", 0, time.Second)
}

// TestSinkRefusesAnEventOutsideItsSubjectsNamespace: the namespace a publisher's subject
// names is the event's; one that claims another namespace is dropped.
func TestSinkRefusesAnEventOutsideItsSubjectsNamespace(t *testing.T) {
	natsDir, url, client := startCluster(t)
	node := newPublisher(t, url, "system:node:node-a", clientTLS(t, natsDir, "system:node:node-a", "system:nodes"))
	subject, err := natsauth.EventSubject("default", "system:node:node-a")
	if err != nil {
		t.Fatal(err)
	}
	node.publish(t, subject, event("kube-system", "elsewhere", "node-a", "node-a"))
	waitRefused(t, client, eventsink.RefusedNamespace, 1)
	list, err := client.CoreV1().Events("kube-system").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=elsewhere"})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("events stored in kube-system: %v, %v", list, err)
	}
}

// TestRecorderWaitsForTheSinkToCreateTheStream: a publisher may not use JetStream's API,
// so a recorder whose NATS has no EVENTS stream yet keeps its events buffered, retrying,
// until the apiserver's sink has made the stream; then they all arrive.
func TestRecorderWaitsForTheSinkToCreateTheStream(t *testing.T) {
	natsDir := natsPKI(t)
	ns := startNATS(t, natsDir, t.TempDir(), 0)
	t.Cleanup(ns.Shutdown)
	// The apiserver's auth callout alone, without its sink: clients get in, nobody
	// makes the stream.
	issuer, err := pki.LoadNATSAuthCalloutKey(filepath.Join(natsDir, pki.NATSAuthCalloutSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(natsDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	responded := make(chan error, 1)
	go func() {
		responded <- (&natsauth.Responder{Issuer: issuer, ClientCAs: ca.CertPool()}).Run(ctx, ns.ClientURL(), nats.Secure(natsTLS(t, natsDir, pki.APIServerNATSClient.Name)))
	}()
	r := startRecorder(t, schedulerRecorder(t, natsDir, ns.ClientURL(), "default-scheduler"))
	for i := range 3 {
		r.Event(pod("early"), corev1.EventTypeNormal, "Tick", fmt.Sprintf("tick %d", i))
	}
	api, err := nats.Connect(ns.ClientURL(), nats.Secure(natsTLS(t, natsDir, pki.APIServerNATSClient.Name)))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	js, err := jetstream.New(api)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several delivery attempts
	if _, err := js.Stream(context.Background(), eventsink.StreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream %s before the apiserver ran: %v; want none (publishers may not create it)", eventsink.StreamName, err)
	}
	if r.Pending() != 3 {
		t.Fatalf("%d events pending; want all 3 buffered while there is no stream", r.Pending())
	}
	cancel()
	<-responded

	srv := controlplanetest.StartServer(t, withNATS(t, natsDir, ns.ClientURL()))
	waitForEvents(t, kubernetes.NewForConfigOrDie(srv.Config), "early", 3, 30*time.Second)
	if r.Dropped() != 0 {
		t.Fatalf("dropped %d events", r.Dropped())
	}
}
