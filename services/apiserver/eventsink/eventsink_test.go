package eventsink_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"skiff.dev/services/apiserver/eventsink"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/natsserver"
	"skiff.dev/services/internal/pki"
)

// natsPKI makes the PKI NATS and its clients use: the server serves its nats-server key
// pair and admits only clients with a certificate from its CA, as in the all-in-one and
// compose. (controlplanetest makes its own PKI once NATS runs; the apiserver's NATS client
// certificate comes from this one.)
func natsPKI(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nats-pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// natsTLS is identity's client TLS configuration toward NATS from pkiDir.
func natsTLS(t testing.TB, pkiDir, identity string) *tls.Config {
	t.Helper()
	c, err := pki.ClientTLS(pkiDir, identity)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// withNATS points the apiserver's event sink at url as pki.APIServerNATSClient, and has
// it answer NATS's auth callout with pkiDir's key.
func withNATS(t testing.TB, pkiDir, url string) func(*apiserver.Config) {
	tlsConfig := natsTLS(t, pkiDir, pki.APIServerNATSClient.Name)
	return func(c *apiserver.Config) {
		c.NATSURL, c.NATSTLS = url, tlsConfig
		c.NATSAuthCalloutSeedFile = filepath.Join(pkiDir, pki.NATSAuthCalloutSeedFile)
	}
}

// startNATS runs an embedded NATS server with JetStream in dir on port (0: any), from
// pkiDir as the all-in-one runs it: mutual TLS with pkiDir's CA, permissions from the
// apiserver's auth callout.
func startNATS(t testing.TB, pkiDir, dir string, port int) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.Start(natsserver.Config{StoreDir: dir, Host: "127.0.0.1", Port: port, PKIDir: pkiDir})
	if err != nil {
		t.Fatalf("start NATS: %v", err)
	}
	return ns
}

// schedulerRecorder is the Config of a recorder publishing to url as the scheduler, with
// component as its source.
func schedulerRecorder(t testing.TB, pkiDir, url, component string) eventrecorder.Config {
	return eventrecorder.Config{Component: component, NATSURL: url, TLS: natsTLS(t, pkiDir, pki.Scheduler.Name), User: pki.Scheduler.CommonName}
}

// startRecorder runs a recorder until the test ends and returns it.
func startRecorder(t testing.TB, cfg eventrecorder.Config) *eventrecorder.Recorder {
	t.Helper()
	r, err := eventrecorder.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			t.Errorf("recorder: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "uid-" + "name"}}
}

// waitForEvents polls until match finds want events about involvedObject name, and
// returns them.
func waitForEvents(t *testing.T, client kubernetes.Interface, name string, want int, timeout time.Duration) []corev1.Event {
	t.Helper()
	var items []corev1.Event
	var lastErr error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if lastErr = err; err != nil {
			return false, nil
		}
		items = list.Items
		return len(items) == want, nil
	}); err != nil {
		t.Fatalf("events about %s: got %d (last error %v), want %d", name, len(items), lastErr, want)
	}
	return items
}

func TestEventsOverJetStreamArePersistedAndAggregated(t *testing.T) {
	natsDir := natsPKI(t)
	ns := startNATS(t, natsDir, t.TempDir(), 0)
	t.Cleanup(ns.Shutdown)
	srv := controlplanetest.StartServer(t, withNATS(t, natsDir, ns.ClientURL()))
	client := kubernetes.NewForConfigOrDie(srv.Config)

	r := startRecorder(t, schedulerRecorder(t, natsDir, ns.ClientURL(), "default-scheduler"))
	p := pod("web")
	r.Eventf(p, corev1.EventTypeNormal, "Scheduled", "Successfully assigned default/web to node-a")
	r.Event(p, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container")
	r.Event(p, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container")
	r.Event(p, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container")

	got := waitForEvents(t, client, "web", 2, 20*time.Second)
	byReason := map[string]corev1.Event{}
	for _, ev := range got {
		byReason[ev.Reason] = ev
	}
	// The three BackOffs fold into one object; wait for the last merge to land.
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		for _, ev := range waitForEvents(t, client, "web", 2, time.Second) {
			byReason[ev.Reason] = ev
		}
		return byReason["BackOff"].Count == 3, nil
	})
	backOff := byReason["BackOff"]
	if backOff.Count != 3 || backOff.Series == nil || backOff.Series.Count != 3 {
		t.Fatalf("BackOff count = %d, series = %+v; want 3 and 3", backOff.Count, backOff.Series)
	}
	if !backOff.LastTimestamp.After(backOff.FirstTimestamp.Time) && !backOff.LastTimestamp.Equal(&backOff.FirstTimestamp) {
		t.Errorf("lastTimestamp %v before firstTimestamp %v", backOff.LastTimestamp, backOff.FirstTimestamp)
	}
	sched := byReason["Scheduled"]
	if sched.Count != 1 || sched.Source.Component != "default-scheduler" || sched.InvolvedObject.Kind != "Pod" || sched.Type != corev1.EventTypeNormal {
		t.Fatalf("Scheduled event = %+v", sched)
	}
}

func TestEventsArePostedWithoutNATS(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	r := startRecorder(t, eventrecorder.Config{Component: "kubelet", Host: "node-a", Client: client})
	p := pod("db")
	r.Event(p, corev1.EventTypeNormal, "Pulling", `Pulling image "busybox"`)
	r.Event(p, corev1.EventTypeNormal, "Pulling", `Pulling image "busybox"`)
	r.Event(p, corev1.EventTypeNormal, "Started", "Started container db")

	var counts map[string]int32
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		counts = map[string]int32{}
		for _, ev := range waitForEvents(t, client, "db", 2, 20*time.Second) {
			counts[ev.Reason] = ev.Count
		}
		return counts["Pulling"] == 2 && counts["Started"] == 1, nil
	}); err != nil {
		t.Fatalf("counts by reason = %v, want Pulling 2, Started 1", counts)
	}
}

// TestRecorderStopDeliversWhatItHolds: events recorded before Start's stop returns are
// stored when it has returned, so a process may exit right after it.
func TestRecorderStopDeliversWhatItHolds(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	r, err := eventrecorder.New(eventrecorder.Config{Component: "default-scheduler", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	stop := r.Start()
	p := pod("last-words")
	r.Event(p, corev1.EventTypeNormal, "Scheduled", "Successfully assigned default/last-words to node-a")
	r.Event(p, corev1.EventTypeWarning, "FailedScheduling", "binding rejected")
	stop()
	stop() // a second call returns at once
	list, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=last-words"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || r.Pending() != 0 {
		t.Fatalf("after stop: %d events stored, %d pending; want 2 and 0", len(list.Items), r.Pending())
	}
}

func TestFieldSelectorsOnEvents(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	r := startRecorder(t, eventrecorder.Config{Component: "kubelet", Client: client})
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", UID: "uid-a"}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "default", UID: "uid-b"}}
	r.Event(a, corev1.EventTypeNormal, "Started", "Started container a")
	r.Event(a, corev1.EventTypeWarning, "BackOff", "Back-off a")
	r.Event(b, corev1.EventTypeNormal, "Started", "Started container b")
	waitForEvents(t, client, "a", 2, 20*time.Second)
	waitForEvents(t, client, "b", 1, 20*time.Second)

	cases := []struct {
		selector string
		want     int
	}{
		{"involvedObject.name=a", 2},
		{"involvedObject.uid=uid-b", 1},
		{"involvedObject.kind=Pod,involvedObject.namespace=default", 3},
		{"reason=Started", 2},
		{"type=Warning", 1},
		{"involvedObject.name=a,type=Normal", 1},
	}
	for _, c := range cases {
		t.Run(c.selector, func(t *testing.T) {
			list, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: c.selector})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != c.want {
				t.Fatalf("got %d events, want %d", len(list.Items), c.want)
			}
		})
	}
}

// TestNATSOutageLosesNoAcceptedEvent records events while first the apiserver (the
// consumer) and then NATS are down, and brings both back: every event JetStream accepted
// while nobody consumed survives the NATS restart on its file store, every event recorded
// while NATS was down waits in the recorder's buffer, all of them reach the apiserver,
// and neither the recorder nor the apiserver stops.
func TestNATSOutageLosesNoAcceptedEvent(t *testing.T) {
	natsDir := natsPKI(t)
	dir := filepath.Join(t.TempDir(), "jetstream")
	ns := startNATS(t, natsDir, dir, 0)
	port := ns.Port()
	url := ns.ClientURL()
	srv := controlplanetest.StartServer(t, withNATS(t, natsDir, url))
	client := kubernetes.NewForConfigOrDie(srv.Config)
	cfg := schedulerRecorder(t, natsDir, url, "kubelet")
	cfg.BufferSize = 10000
	r := startRecorder(t, cfg)

	const total = 300
	p := pod("outage")
	record := func(from, to int) {
		for i := from; i < to; i++ {
			r.Event(p, corev1.EventTypeNormal, "Tick", fmt.Sprintf("tick %d", i))
			time.Sleep(time.Millisecond)
		}
	}
	record(0, 100)
	waitForEvents(t, client, "outage", 100, 30*time.Second)

	srv.StopAPIServer()
	record(100, 200)
	// Wait until JetStream has acknowledged them all: nothing is left in the buffer.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.Pending() == 0, nil
	}); err != nil {
		t.Fatalf("%d events still unpublished", r.Pending())
	}

	ns.Shutdown()
	record(200, total)
	if r.Pending() == 0 {
		t.Fatal("events recorded while NATS is down should wait in the buffer")
	}
	ns = startNATS(t, natsDir, dir, port)
	t.Cleanup(func() { ns.Shutdown() })
	srv.RestartAPIServer()

	waitForEvents(t, client, "outage", total, 60*time.Second)
	if d := r.Dropped(); d != 0 {
		t.Fatalf("recorder dropped %d events", d)
	}
}

func TestRecorderBufferDropsOldestWhenFull(t *testing.T) {
	// Nothing listens on the URL and Run is never called: every event stays buffered.
	r, err := eventrecorder.New(eventrecorder.Config{Component: "kubelet", User: "system:node:node-a", NATSURL: "nats://127.0.0.1:1", BufferSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r.Event(pod("full"), corev1.EventTypeNormal, "Tick", fmt.Sprintf("tick %d", i))
	}
	if r.Dropped() != 2 || r.Pending() != 3 {
		t.Fatalf("dropped %d, pending %d; want 2 and 3", r.Dropped(), r.Pending())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Metrics())
	const want = `
# HELP skiff_events_dropped_total Events dropped because the recorder's buffer was full while NATS or the apiserver was unreachable.
# TYPE skiff_events_dropped_total counter
skiff_events_dropped_total{component="kubelet"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skiff_events_dropped_total"); err != nil {
		t.Fatal(err)
	}
}

func TestEventsLiveOneHourInEtcd(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "ttl.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "ttl", Namespace: "default"},
		Reason:         "Started", Message: "x", Type: corev1.EventTypeNormal,
	}
	if _, err := client.CoreV1().Events("default").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, err := srv.Etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	resp, err := raw.Get(context.Background(), "/registry/events/default/ttl.1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("event in etcd: %v %v", resp, err)
	}
	if resp.Kvs[0].Lease == 0 {
		t.Fatal("event stored without a lease")
	}
	ttl, err := raw.TimeToLive(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL < 3600-5 {
		t.Fatalf("lease TTL %d s, want at least an hour", ttl.TTL)
	}
}

func TestEventsInAMissingNamespaceAreDropped(t *testing.T) {
	natsDir := natsPKI(t)
	ns := startNATS(t, natsDir, t.TempDir(), 0)
	t.Cleanup(ns.Shutdown)
	srv := controlplanetest.StartServer(t, withNATS(t, natsDir, ns.ClientURL()))
	client := kubernetes.NewForConfigOrDie(srv.Config)
	r := startRecorder(t, schedulerRecorder(t, natsDir, ns.ClientURL(), "kubelet"))

	r.Event(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: "nope", UID: "uid-ghost"}}, corev1.EventTypeNormal, "Started", "x")
	// Events are consumed in order: once this one is stored, the first was handled.
	r.Event(pod("after"), corev1.EventTypeNormal, "Started", "x")
	waitForEvents(t, client, "after", 1, 20*time.Second)
	list, err := client.CoreV1().Events("nope").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d events stored in a namespace that does not exist", len(list.Items))
	}
}

func TestRecorderDeliversWhatIsBufferedWhenItStops(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	r, err := eventrecorder.New(eventrecorder.Config{Component: "kubelet", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	r.Event(pod("last"), corev1.EventTypeNormal, "Killing", "Stopping container last")
	r.Event(pod("last"), corev1.EventTypeNormal, "Started", "x")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stopping already: Run only drains
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Pending() != 0 {
		t.Fatalf("%d events left after Run", r.Pending())
	}
	waitForEvents(t, client, "last", 2, 5*time.Second)
}

// TestReplicasShareTheConsumer runs a second apiserver over the same etcd: both bind to
// the durable consumer, and every event is stored exactly once.
func TestReplicasShareTheConsumer(t *testing.T) {
	natsDir := natsPKI(t)
	ns := startNATS(t, natsDir, t.TempDir(), 0)
	t.Cleanup(ns.Shutdown)
	srv := controlplanetest.StartServer(t, withNATS(t, natsDir, ns.ClientURL()))
	client := kubernetes.NewForConfigOrDie(srv.Config)

	etcdClient, err := srv.Etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcdClient.Close() })
	cfg, err := apiserver.ConfigFromPKI(srv.PKIDir, etcdClient)
	if err != nil {
		t.Fatal(err)
	}
	withNATS(t, natsDir, ns.ClientURL())(&cfg)
	second, err := apiserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = second.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })

	r := startRecorder(t, schedulerRecorder(t, natsDir, ns.ClientURL(), "kubelet"))
	const total = 200
	for i := range total {
		r.Event(pod("shared"), corev1.EventTypeNormal, "Tick", fmt.Sprintf("tick %d", i))
	}
	waitForEvents(t, client, "shared", total, 30*time.Second)
	// No duplicate can still come: the shared consumer has delivered every message once,
	// and every delivery is acknowledged, so none will be redelivered.
	// Only the apiserver's identity may use JetStream's API.
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(natsTLS(t, natsDir, pki.APIServerNATSClient.Name)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cons, err := js.Consumer(ctx, eventsink.StreamName, eventsink.DurableName)
		if err != nil {
			return false, err
		}
		if info, err = cons.Info(ctx); err != nil {
			return false, err
		}
		return info.NumPending == 0 && info.NumAckPending == 0, nil
	}); err != nil {
		t.Fatalf("consumer %s never drained: %v (%+v)", eventsink.DurableName, err, info)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("%d messages redelivered", info.NumRedelivered)
	}
	waitForEvents(t, client, "shared", total, time.Second)
}

// BenchmarkEventsThroughNATS measures an event's way from a recorder to etcd: published
// to JetStream, consumed by the apiserver's sink and stored, events about distinct pods
// (nothing folds). The recorder is fed no faster than it keeps its buffer half empty, so
// none is dropped; the figure is the time per event until the consumer has
// acknowledged every one.
func BenchmarkEventsThroughNATS(b *testing.B) {
	natsDir := natsPKI(b)
	ns := startNATS(b, natsDir, b.TempDir(), 0)
	b.Cleanup(ns.Shutdown)
	controlplanetest.StartServer(b, withNATS(b, natsDir, ns.ClientURL()))
	r := startRecorder(b, schedulerRecorder(b, natsDir, ns.ClientURL(), "kubelet"))
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(natsTLS(b, natsDir, pki.APIServerNATSClient.Name)))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	drained := func(ctx context.Context) (bool, error) {
		cons, err := js.Consumer(ctx, eventsink.StreamName, eventsink.DurableName)
		if err != nil {
			return false, nil // not bound yet
		}
		info, err := cons.Info(ctx)
		return err == nil && r.Pending() == 0 && info.NumPending == 0 && info.NumAckPending == 0, nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, drained); err != nil {
		b.Fatalf("the sink's consumer never appeared: %v", err)
	}
	b.ResetTimer()
	for i := range b.N {
		for r.Pending() >= eventrecorder.DefaultBufferSize/2 {
			time.Sleep(100 * time.Microsecond)
		}
		r.Event(pod(fmt.Sprintf("p-%d", i)), corev1.EventTypeNormal, "Started", "Started container c")
	}
	// Until the last is stored: the timer runs through the wait.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Minute, true, drained); err != nil {
		b.Fatalf("events not all stored: %v", err)
	}
	if d := r.Dropped(); d != 0 {
		b.Fatalf("recorder dropped %d events", d)
	}
}
