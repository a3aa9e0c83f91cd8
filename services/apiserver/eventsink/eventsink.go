// Package eventsink is the apiserver's end of DESIGN.md "Events": it consumes the
// core/v1 Events components publish to NATS JetStream (stream EVENTS) and persists each
// in etcd through the events registry, whose store gives every event a 1 h lease.
// Repeats of an event (same source, involved object, type, reason and message) are
// folded into the first one: count, lastTimestamp and series grow instead of a new
// object appearing, as client-go's EventCorrelator does on the reporting side in
// Kubernetes.
//
// Every apiserver replica binds to the same durable pull consumer, so JetStream hands
// each event to exactly one of them, and an event is acknowledged only once it is in
// etcd: an apiserver or NATS outage delays events but loses none JetStream accepted.
// A replica persists sinkWorkers events at once, all repeats of one event on the same
// worker.
package eventsink

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/lru"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/internal/eventrecorder"
)

// DurableName is the JetStream consumer every apiserver replica shares.
const DurableName = "skiff-apiserver"

// lastMergedAnnotation names the last event folded into an aggregate, so a redelivery
// of that same message (the apiserver stopped between the write and the ack) is not
// counted twice.
const lastMergedAnnotation = "skiff.dev/last-merged-event"

// Config is where events come from and go to.
type Config struct {
	// NATSURL is the NATS server, e.g. "nats://127.0.0.1:4222" or "tls://nats:4222".
	NATSURL string
	// TLS, when set, dials NATS over mutual TLS: the apiserver's NATS client certificate
	// (pki.APIServerNATSClient) and the cluster CA as RootCAs.
	TLS *tls.Config
	// NATSOptions are extra nats.go options (TLS, credentials).
	NATSOptions []nats.Option
	// Events is the events registry store events are persisted through.
	Events *registry.Store
	// Admission, when set, admits each new event as a POST would be (NamespaceLifecycle:
	// no events in a namespace that is missing or being deleted); a rejected event is
	// dropped.
	Admission admission.Interface
}

// Sink consumes events from JetStream and persists them.
type Sink struct {
	cfg Config
	log *slog.Logger

	// aggregates maps an AggregateKey to the name of the stored event it folds into,
	// for the most recent keys only, as kube's EventCorrelator keeps an LRU of
	// maxRemembered entries: a key it forgot starts a new aggregate.
	aggregates *lru.Cache
}

// New builds a sink; Run connects.
func New(cfg Config) (*Sink, error) {
	if cfg.NATSURL == "" {
		return nil, errors.New("eventsink: Config.NATSURL is required")
	}
	if cfg.Events == nil {
		return nil, errors.New("eventsink: Config.Events is required")
	}
	return &Sink{cfg: cfg, log: slog.Default().With("component", "eventsink"), aggregates: lru.New(maxRemembered)}, nil
}

// Run consumes events until ctx ends, reconnecting to NATS and recreating the stream and
// consumer as needed, with backoff capped at 5 s. It returns nil when ctx ends.
func (s *Sink) Run(ctx context.Context) error {
	opts := append([]nats.Option{
		nats.Name("skiff-apiserver-eventsink"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}, s.cfg.NATSOptions...)
	if s.cfg.TLS != nil {
		opts = append(opts, nats.Secure(s.cfg.TLS))
	}
	nc, err := nats.Connect(s.cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("eventsink: connect to NATS %s: %w", s.cfg.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("eventsink: JetStream: %w", err)
	}
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 5 * time.Second}
	for ctx.Err() == nil {
		err := s.consume(ctx, js)
		if ctx.Err() != nil {
			break
		}
		delay := backoff.Step()
		s.log.Warn("consuming events stopped; will retry", "retryIn", delay, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
	return nil
}

// consume binds to the durable consumer and handles messages until ctx ends or the
// subscription fails (returned as the error).
func (s *Sink) consume(ctx context.Context, js jetstream.JetStream) error {
	setupCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := eventrecorder.EnsureStream(setupCtx, js); err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(setupCtx, eventrecorder.StreamName, jetstream.ConsumerConfig{
		Durable:       DurableName,
		Description:   "persists events in etcd; shared by every apiserver",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: eventrecorder.SubjectPrefix + ">",
		MaxAckPending: 1000,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", DurableName, err)
	}
	// Each worker persists its share of the events in order: all repeats of one event
	// (one aggregate key) go to the same worker, so they fold as they arrived.
	stop := make(chan struct{})
	work := make([]chan delivery, sinkWorkers)
	var workers sync.WaitGroup
	for i := range work {
		work[i] = make(chan delivery, workerQueue)
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				select {
				case d := <-work[i]:
					s.persist(ctx, d.ev, d.msg)
				case <-stop:
					return
				}
			}
		}()
	}
	// Deliveries still queued when consume returns are not acknowledged: JetStream
	// delivers them again after AckWait.
	defer func() { close(stop); workers.Wait() }()
	failed := make(chan error, 1)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		ev := decode(s.log, msg)
		if ev == nil {
			return
		}
		select {
		case work[shard(ev, len(work))] <- delivery{ev: ev, msg: msg}:
		case <-stop:
		}
	},
		jetstream.PullExpiry(5*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			// Missed heartbeats and disconnects resolve themselves when the client
			// reconnects; a deleted consumer or stream needs a new binding.
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				select {
				case failed <- err:
				default:
				}
			}
		}))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer cc.Stop()
	s.log.Info("consuming events", "stream", eventrecorder.StreamName, "consumer", DurableName)
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return err
	case <-cc.Closed():
		return errors.New("consumer closed")
	}
}

// sinkWorkers is how many events the sink persists at once, and workerQueue how many
// wait for each worker. One at a time, each waiting for its etcd write and for the
// server to confirm its acknowledgement, the sink fell behind a cluster starting a few
// hundred pods a second (four or five events each) by tens of thousands of events.
const (
	sinkWorkers = 8
	workerQueue = 64
)

// delivery is an event and the message that brought it.
type delivery struct {
	ev  *corev1.Event
	msg jetstream.Msg
}

// decode returns msg's event, or nil for a message that is not an event, which it
// drops (terminates).
func decode(log *slog.Logger, msg jetstream.Msg) *corev1.Event {
	ev := &corev1.Event{}
	if err := json.Unmarshal(msg.Data(), ev); err != nil || ev.Name == "" {
		log.Warn("dropping a message that is not an event", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return nil
	}
	return ev
}

// shard is the worker of ev among n: the same for every repeat of ev (its namespace
// and AggregateKey), so Record sees them in order.
func shard(ev *corev1.Event, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ev.Namespace))
	_, _ = h.Write([]byte(eventrecorder.AggregateKey(ev)))
	return int(h.Sum32() % uint32(n))
}

// persist records ev and acknowledges msg; a failure asks JetStream to deliver it again
// after a delay, and an event a retry cannot help is dropped (terminated).
func (s *Sink) persist(ctx context.Context, ev *corev1.Event, msg jetstream.Msg) {
	writeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Record(writeCtx, ev); err != nil {
		if permanent(err) {
			s.log.Warn("event refused; dropped", "event", ev.Namespace+"/"+ev.Name, "err", err)
			_ = msg.Term()
			return
		}
		s.log.Warn("persisting event failed; redelivery later", "event", ev.Namespace+"/"+ev.Name, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	// Not waiting for the server to confirm the acknowledgement: should it be lost, the
	// redelivered event is recognised (same name, or the last merged one) and does not
	// count twice.
	if err := msg.Ack(); err != nil {
		s.log.Debug("acknowledging event", "err", err)
	}
}

// permanent reports errors a retry cannot fix: an invalid event, or one admission
// refused (its namespace is missing or being deleted).
func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// Record persists ev: it creates it, or, when this sink recently stored an event with
// the same AggregateKey in ev's namespace, folds ev into that one (count += ev.count,
// lastTimestamp and series advance, the message is ev's). The lookup is one LRU hit,
// never a list, so recording costs the same however many events there are; a key the
// LRU forgot (or another replica saw) starts a new aggregate, as with kube's
// EventCorrelator. Recording the same event twice changes nothing the second time.
// Errors are the events registry's (metav1.Status errors).
func (s *Sink) Record(ctx context.Context, ev *corev1.Event) error {
	key := aggregateKey{namespace: ev.Namespace, key: eventrecorder.AggregateKey(ev)}
	name, _ := s.aggregates.Get(key)
	if name != nil && name.(string) != ev.Name {
		err := s.merge(ctx, name.(string), ev)
		if err == nil || !apierrors.IsNotFound(err) {
			return err
		}
		// The aggregate expired meanwhile: ev starts a new one.
	}
	ev = ev.DeepCopy()
	ev.ResourceVersion, ev.UID = "", ""
	if ev.Count == 0 {
		ev.Count = 1
	}
	if s.cfg.Admission != nil {
		if err := s.cfg.Admission.Admit(ctx, admission.Attributes{
			Operation: admission.Create, Resource: corev1.SchemeGroupVersion.WithResource("events"),
			Namespace: ev.Namespace, Name: ev.Name, Object: ev,
		}); err != nil {
			return err
		}
	}
	_, err := s.cfg.Events.Create(ctx, ev.Namespace, ev, &metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil // a redelivery of an event already stored
	}
	if err == nil {
		s.aggregates.Add(key, ev.Name)
	}
	return err
}

// merge folds ev into the stored aggregate name.
func (s *Sink) merge(ctx context.Context, name string, ev *corev1.Event) error {
	_, _, err := s.cfg.Events.Update(ctx, ev.Namespace, name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		agg := old.(*corev1.Event).DeepCopy()
		if agg.Annotations[lastMergedAnnotation] == ev.Name {
			return agg, nil // redelivered
		}
		count := ev.Count
		if count == 0 {
			count = 1
		}
		if agg.Count == 0 {
			agg.Count = 1
		}
		agg.Count += count
		last := ev.LastTimestamp
		if last.IsZero() {
			last = metav1.NewTime(ev.EventTime.Time)
		}
		if last.After(agg.LastTimestamp.Time) {
			agg.LastTimestamp = last
		}
		agg.Message = ev.Message
		agg.Series = &corev1.EventSeries{Count: agg.Count, LastObservedTime: metav1.NewMicroTime(agg.LastTimestamp.Time)}
		if agg.Annotations == nil {
			agg.Annotations = map[string]string{}
		}
		agg.Annotations[lastMergedAnnotation] = ev.Name
		return agg, nil
	}), &metav1.UpdateOptions{})
	return err
}

// aggregateKey identifies the events folded into one stored event.
type aggregateKey struct {
	namespace, key string
}

// maxRemembered bounds the aggregates remembered (kube's maxLruCacheEntries).
const maxRemembered = 4096
