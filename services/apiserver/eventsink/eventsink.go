// Package eventsink is the apiserver's end of skiff's event transport: it consumes the
// core/v1 Events components publish to NATS JetStream (stream EVENTS) and persists each
// in etcd through the events registry, whose store gives every event a 1 h lease.
// Repeats of an event (same source, involved object, type, reason and message) are
// folded into the first one: count, lastTimestamp and series grow instead of a new
// object appearing, as client-go's EventCorrelator does on the reporting side in
// Kubernetes.
//
// An event arrives as a POST of it would: its subject names its publisher
// (natsauth.ParseEventSubject), whom NATS's permissions let publish there and nobody
// else; the sink authorizes that user to create it (the apiserver's authorizer), admits
// it (the apiserver's admission chain, NodeRestriction's rule on events included) and
// takes a seat of the apiserver's request limit (API Priority and Fairness, or
// max-in-flight) before writing. An event refused
// is dropped and counted in skiff_apiserver_eventsink_refused_events_total.
//
// Every apiserver replica binds to the same durable pull consumer, so JetStream hands
// each event to exactly one of them, and an event is acknowledged only once it is in
// etcd: an apiserver or NATS outage delays events but loses none JetStream accepted.
// A replica persists sinkWorkers events at once, all repeats of one event on the same
// worker. The sink alone creates the stream and the consumer: publishers may not use
// JetStream's API.
package eventsink

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/lru"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/natsauth"
)

// The JetStream layout of skiff's events.
const (
	// StreamName is the JetStream stream events are published to; its subjects are
	// natsauth.EventSubjects.
	StreamName = "EVENTS"
	// DurableName is the JetStream consumer every apiserver replica shares.
	DurableName = "skiff-apiserver"
	// StreamMaxAge is how long JetStream keeps an event nobody consumed: as long as the
	// apiserver keeps a persisted one (its lease TTL).
	StreamMaxAge = time.Hour
)

// lastMergedAnnotation names the last event folded into an aggregate, so a redelivery
// of that same message (the apiserver stopped between the write and the ack) is not
// counted twice.
const lastMergedAnnotation = "skiff.dev/last-merged-event"

// Reasons an event is refused, the reason label of
// skiff_apiserver_eventsink_refused_events_total.
const (
	// RefusedMalformed: the message is not a JSON core/v1 Event with a name.
	RefusedMalformed = "malformed"
	// RefusedSubject: the subject names no namespace or no publisher.
	RefusedSubject = "subject"
	// RefusedNamespace: the event's namespace is not the subject's.
	RefusedNamespace = "namespace"
	// RefusedNodeRestriction: a node reported the event as another (source.host or
	// reportingInstance; admission.NodeEventSource).
	RefusedNodeRestriction = "node_restriction"
	// RefusedForbidden: the authorizer does not let the publisher create events there.
	RefusedForbidden = "forbidden"
	// RefusedAdmission: the admission chain rejected it (e.g. its namespace is missing
	// or being deleted).
	RefusedAdmission = "admission"
	// RefusedInvalid: the events registry refused it (validation).
	RefusedInvalid = "invalid"
)

var refusedReasons = []string{RefusedMalformed, RefusedSubject, RefusedNamespace, RefusedNodeRestriction, RefusedForbidden, RefusedAdmission, RefusedInvalid}

// Config is where events come from and go to, and what an event must pass on the way.
type Config struct {
	// NATSURL is the NATS server, e.g. "nats://127.0.0.1:4222" or "tls://nats:4222".
	NATSURL string
	// TLS, when set, dials NATS over mutual TLS: the apiserver's NATS client certificate
	// (pki.APIServerNATSClient, natsauth.APIServerUser) and the cluster CA as RootCAs.
	TLS *tls.Config
	// NATSOptions are extra nats.go options (TLS, credentials).
	NATSOptions []nats.Option
	// Events is the events registry store events are persisted through.
	Events *registry.Store
	// Authorizer decides whether an event's publisher may create it, as it decides a
	// POST (verb create on events in the event's namespace); required.
	Authorizer authorization.Authorizer
	// Admission, when set, admits each event as a POST of it by its publisher would be
	// (the apiserver's chain: NamespaceLifecycle, NodeRestriction, ...).
	Admission admission.Interface
	// Seats, when set, is the apiserver's limit on requests served at once (API
	// Priority and Fairness, or max-in-flight): each event holds a seat, classified as
	// its publisher's POST of it would be, while it is admitted and written, and waits
	// for redelivery when it gets none.
	Seats Seats
	// Registerer receives skiff_apiserver_eventsink_refused_events_total; nil registers
	// it nowhere.
	Registerer prometheus.Registerer
}

// Seats is the apiserver's limit on requests served at once (endpoints.MaxInFlight, or
// API Priority and Fairness).
type Seats interface {
	// TakeSeat takes a seat for one request of u that info describes; ok false means
	// none is given to it now (the 429 its request would get). release gives it back.
	TakeSeat(u user.Info, info *genericapirequest.RequestInfo) (release func(), ok bool)
}

// Sink consumes events from JetStream and persists them.
type Sink struct {
	cfg     Config
	log     *slog.Logger
	refused *prometheus.CounterVec

	// aggregates maps an AggregateKey to the name of the stored event it folds into,
	// for the most recent keys only, as kube's EventCorrelator keeps an LRU of
	// maxRemembered entries: a key it forgot starts a new aggregate.
	aggregates *lru.Cache
}

// New builds a sink; Run connects. Errors: no NATSURL, Events or Authorizer, or the
// metric is already registered with Registerer.
func New(cfg Config) (*Sink, error) {
	if cfg.NATSURL == "" {
		return nil, errors.New("eventsink: Config.NATSURL is required")
	}
	if cfg.Events == nil {
		return nil, errors.New("eventsink: Config.Events is required")
	}
	if cfg.Authorizer == nil {
		return nil, errors.New("eventsink: Config.Authorizer is required")
	}
	s := &Sink{cfg: cfg, log: slog.Default().With("component", "eventsink"), aggregates: lru.New(maxRemembered),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skiff_apiserver_eventsink_refused_events_total",
			Help: "Events consumed from NATS that the apiserver dropped instead of persisting, by reason: malformed, subject (no publisher), namespace (not the subject's), node_restriction (a node reporting as another), forbidden (authorization), admission, invalid.",
		}, []string{"reason"})}
	for _, reason := range refusedReasons {
		s.refused.WithLabelValues(reason)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.refused); err != nil {
			return nil, fmt.Errorf("eventsink: metrics: %w", err)
		}
	}
	return s, nil
}

// EnsureStream creates the EVENTS stream (file storage, subjects
// natsauth.EventSubjects, messages kept up to StreamMaxAge, a 2 minute de-duplication
// window on the message id) or updates it to that configuration. Only the apiserver
// calls it: NATS lets no publisher use JetStream's API, and their events wait in their
// recorders until the stream exists.
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "core/v1 Events from skiff's components, consumed by the apiserver",
		Subjects:    []string{natsauth.EventSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      StreamMaxAge,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamName, err)
	}
	return s, nil
}

// Run consumes events until ctx ends, reconnecting to NATS and recreating the stream and
// consumer as needed, with backoff capped at 5 s. It returns nil when ctx ends.
func (s *Sink) Run(ctx context.Context) error {
	opts := append([]nats.Option{
		nats.Name("skiff-apiserver-eventsink"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A NATS whose configuration does not know the apiserver yet refuses it as any
		// other: keep trying rather than give up after two refusals.
		nats.IgnoreAuthErrorAbort(),
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
	if _, err := EnsureStream(setupCtx, js); err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(setupCtx, StreamName, jetstream.ConsumerConfig{
		Durable:       DurableName,
		Description:   "persists events in etcd; shared by every apiserver",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: natsauth.EventSubjects,
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
					s.persist(ctx, d)
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
		d, ok := s.receive(msg)
		if !ok {
			return
		}
		select {
		case work[shard(d.ev, len(work))] <- d:
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
	s.log.Info("consuming events", "stream", StreamName, "consumer", DurableName)
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

// delivery is an event, the message that brought it and the user who published it.
type delivery struct {
	ev        *corev1.Event
	msg       jetstream.Msg
	publisher user.Info
}

// receive returns msg's event and publisher, or refuses msg (terminates it, counted) when
// it is no event, its subject names no publisher, the event's namespace is not the
// subject's, or a node publisher reports it as another (admission.NodeEventSource).
func (s *Sink) receive(msg jetstream.Msg) (delivery, bool) {
	ev := &corev1.Event{}
	if err := json.Unmarshal(msg.Data(), ev); err != nil || ev.Name == "" {
		s.refuse(msg, RefusedMalformed, "", ev, fmt.Errorf("not an event: %v", err))
		return delivery{}, false
	}
	namespace, name, err := natsauth.ParseEventSubject(msg.Subject())
	if err != nil {
		s.refuse(msg, RefusedSubject, "", ev, err)
		return delivery{}, false
	}
	if ev.Namespace != namespace {
		s.refuse(msg, RefusedNamespace, name, ev, fmt.Errorf("event in namespace %q published on subject %s", ev.Namespace, msg.Subject()))
		return delivery{}, false
	}
	publisher := publisherUser(name)
	if node, ok := authorization.NodeName(publisher); ok {
		if err := admission.NodeEventSource(node, ev); err != nil {
			s.refuse(msg, RefusedNodeRestriction, name, ev, err)
			return delivery{}, false
		}
	}
	return delivery{ev: ev, msg: msg, publisher: publisher}, true
}

// publisherUser is the user an event published by the NATS user name arrives as: name, in
// system:nodes when it is a node's (system:node:<node>), and in system:authenticated, as
// the x509 authenticator sees the same certificate. The auth callout grants event
// subjects only to nodes in exactly system:nodes and to identities with no groups
// (natsauth.Authorize), so the name tells the groups.
func publisherUser(name string) user.Info {
	groups := []string{user.AllAuthenticated}
	if node, isNode := strings.CutPrefix(name, authorization.NodeUserPrefix); isNode && node != "" {
		groups = []string{user.NodesGroup, user.AllAuthenticated}
	}
	return &user.DefaultInfo{Name: name, Groups: groups}
}

// refuse terminates msg, whose event JetStream will never deliver again, and counts it.
func (s *Sink) refuse(msg jetstream.Msg, reason, publisher string, ev *corev1.Event, err error) {
	s.refused.WithLabelValues(reason).Inc()
	s.log.Warn("event refused; dropped", "reason", reason, "subject", msg.Subject(), "publisher", publisher,
		"event", ev.Namespace+"/"+ev.Name, "err", err)
	_ = msg.Term()
}

// shard is the worker of ev among n: the same for every repeat of ev (its namespace
// and AggregateKey), so Record sees them in order.
func shard(ev *corev1.Event, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ev.Namespace))
	_, _ = h.Write([]byte(eventrecorder.AggregateKey(ev)))
	return int(h.Sum32() % uint32(n))
}

// redeliveryDelay is how long a failed event waits before JetStream delivers it again.
const redeliveryDelay = time.Second

// persist handles d as the apiserver handles a POST of its event by its publisher: a
// seat (Seats), authorization, admission, then Record; it acknowledges d.msg once
// the event is stored. An event refused (forbidden, rejected by admission, invalid) is
// terminated and counted; one that met no seat or a failure a retry may cure is
// delivered again after a delay.
func (s *Sink) persist(ctx context.Context, d delivery) {
	ev, name := d.ev, d.ev.Namespace+"/"+d.ev.Name
	if s.cfg.Seats != nil {
		release, ok := s.cfg.Seats.TakeSeat(d.publisher, &genericapirequest.RequestInfo{
			IsResourceRequest: true, Verb: "create", APIPrefix: "api", APIVersion: "v1",
			Resource: "events", Namespace: ev.Namespace, Path: "/api/v1/namespaces/" + ev.Namespace + "/events",
		})
		if !ok {
			s.log.Debug("no seat for an event; redelivery later", "event", name, "publisher", d.publisher.GetName())
			_ = d.msg.NakWithDelay(redeliveryDelay)
			return
		}
		defer release()
	}
	writeCtx, cancel := context.WithTimeout(genericapirequest.WithUser(ctx, d.publisher), 10*time.Second)
	defer cancel()
	reason, err := s.admit(writeCtx, d.publisher, ev)
	if err == nil {
		reason = RefusedInvalid
		err = s.Record(writeCtx, ev)
	}
	switch {
	case err == nil:
		// Not waiting for the server to confirm the acknowledgement: should it be lost,
		// the redelivered event is recognised (same name, or the last merged one) and
		// does not count twice.
		if err := d.msg.Ack(); err != nil {
			s.log.Debug("acknowledging event", "err", err)
		}
	case permanent(err):
		s.refuse(d.msg, reason, d.publisher.GetName(), ev, err)
	default:
		s.log.Warn("persisting event failed; redelivery later", "event", name, "err", err)
		_ = d.msg.NakWithDelay(redeliveryDelay)
	}
}

// admit authorizes publisher to create ev and runs the admission chain on it, as for a
// POST; reason is the refusal's label when err is permanent. Errors: Forbidden (403)
// from the authorizer, the admission chain's, or an internal error when the authorizer
// could not decide.
func (s *Sink) admit(ctx context.Context, publisher user.Info, ev *corev1.Event) (reason string, err error) {
	attrs := authorizer.AttributesRecord{
		User: publisher, Verb: "create", Namespace: ev.Namespace, APIVersion: "v1", Resource: "events", ResourceRequest: true,
	}
	decision, why, err := s.cfg.Authorizer.Authorize(ctx, attrs)
	switch {
	case decision == authorizer.DecisionAllow:
	case err != nil:
		return "", apierrors.NewInternalError(fmt.Errorf("authorization: %w", err))
	default:
		return RefusedForbidden, apierrors.NewForbidden(corev1.Resource("events"), "", errors.New(authorization.ForbiddenMessage(attrs, why)))
	}
	if s.cfg.Admission == nil {
		return "", nil
	}
	return RefusedAdmission, s.cfg.Admission.Admit(ctx, admission.Attributes{
		Operation: admission.Create, Resource: corev1.SchemeGroupVersion.WithResource("events"),
		Kind: corev1.SchemeGroupVersion.WithKind("Event"), Namespace: ev.Namespace, Name: ev.Name, Object: ev,
		UserInfo: publisher, Options: &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}},
	})
}

// permanent reports errors a retry cannot fix: a forbidden or invalid event, or one
// admission refused (its namespace is missing or being deleted).
func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// Record persists ev, already authorized and admitted: it creates it, or, when this sink
// recently stored an event with the same AggregateKey in ev's namespace, folds ev into
// that one (count += ev.count, lastTimestamp and series advance, the message is ev's).
// The lookup is one LRU hit, never a list, so recording costs the same however many
// events there are; a key the LRU forgot (or another replica saw) starts a new
// aggregate, as with kube's EventCorrelator. Recording the same event twice changes
// nothing the second time. Errors are the events registry's (metav1.Status errors).
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
