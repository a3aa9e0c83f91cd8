package eventsink

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/internal/natsauth"
	"skiff.dev/services/internal/natsserver"
	"skiff.dev/services/internal/pki"
)

// noSeats is a request limit that never gives a seat.
type noSeats struct{ asked atomic.Int32 }

func (n *noSeats) TakeSeat(user.Info, *genericapirequest.RequestInfo) (func(), bool) {
	n.asked.Add(1)
	return nil, false
}

// mustNotAuthorize fails the test when anything is authorized.
type mustNotAuthorize struct{ t *testing.T }

func (a mustNotAuthorize) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	a.t.Error("authorized an event that holds no seat")
	return authorizer.DecisionDeny, "", nil
}

// TestAnEventWithoutASeatIsRedeliveredNotRefused: when the publisher gets no seat, as a
// POST would get 429, the sink neither writes nor drops the event: JetStream delivers it
// again after a delay, and nothing is counted as refused.
func TestAnEventWithoutASeatIsRedeliveredNotRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	apiTLS, err := pki.ClientTLS(dir, pki.APIServerNATSClient.Name)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(apiTLS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := EnsureStream(ctx, js); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{Durable: "test", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p.1"}, Reason: "Started",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"}}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := natsauth.EventSubject("default", "system:kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subject, data); err != nil {
		t.Fatal(err)
	}

	seats := &noSeats{}
	s, err := New(Config{NATSURL: ns.ClientURL(), Events: &registry.Store{}, Authorizer: mustNotAuthorize{t}, Seats: seats})
	if err != nil {
		t.Fatal(err)
	}
	next := func() jetstream.Msg {
		t.Helper()
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("no delivery: %v", err)
		}
		return msg
	}
	d, ok := s.receive(next())
	if !ok {
		t.Fatal("receive refused a well-formed event")
	}
	start := time.Now()
	s.persist(ctx, d)
	again := next()
	meta, err := again.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if meta.NumDelivered != 2 || time.Since(start) < redeliveryDelay/2 {
		t.Fatalf("redelivery %d after %v; want the second, after about %v", meta.NumDelivered, time.Since(start), redeliveryDelay)
	}
	if seats.asked.Load() != 1 {
		t.Errorf("asked for %d seats, want 1", seats.asked.Load())
	}
	for _, reason := range refusedReasons {
		if got := testutil.ToFloat64(s.refused.WithLabelValues(reason)); got != 0 {
			t.Errorf("refused{reason=%s} = %v, want 0", reason, got)
		}
	}
}
