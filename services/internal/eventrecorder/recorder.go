// Package eventrecorder is skiff's event recorder: components report core/v1 Events about the
// objects they act on (Scheduled, Pulling, Started, ...), and the recorder delivers them
// to the apiserver. Mirrors client-go's tools/record (EventRecorder, makeEvent), with
// skiff's own transport: each event is published to NATS JetStream
// (stream EVENTS, subject skiff.events.<namespace>.<publisher>, natsauth.EventSubject)
// and the apiserver's consumer authorizes, persists and aggregates it; with no NATS URL
// configured, the recorder POSTs the event and aggregates repeats itself, as client-go's
// EventCorrelator does.
//
// Recording never blocks the caller: events wait in a bounded buffer while NATS or the
// apiserver is unreachable; when it is full the oldest event not being delivered at that
// moment is dropped and counted in skiff_events_dropped_total.
package eventrecorder

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ref "k8s.io/client-go/tools/reference"

	"skiff.dev/services/internal/natsauth"
)

// DefaultBufferSize is how many undelivered events a recorder keeps.
const DefaultBufferSize = 1000

// Config is who records and where events go.
type Config struct {
	// Component is the reporting component, e.g. "default-scheduler" or "kubelet"; it
	// becomes source.component and reportingComponent.
	Component string
	// Host is source.host: the node name for kubelets, "" otherwise. When set it is
	// also reportingInstance, as client-go's recorder sets it; otherwise
	// reportingInstance is the component.
	Host string
	// User is the recorder's user name toward NATS, its client certificate's
	// CommonName: "system:node:<node>" for a kubelet, e.g. "system:kube-scheduler" for
	// the scheduler (pki.NATSUser reads it from a TLS configuration). Events are
	// published on its subjects (natsauth.EventSubject) and replies awaited under its
	// inbox (natsauth.InboxPrefix), the only ones NATS lets it use; the apiserver
	// persists them as created by this user. Required with NATSURL.
	User string
	// NATSURL is the NATS server to publish to ("nats://127.0.0.1:4222" or
	// "tls://..."); "" POSTs every event through Client instead.
	NATSURL string
	// TLS, when set, dials NATS over mutual TLS: the server is verified against RootCAs
	// and the component's client certificate presented (see ClientTLS). skiff's NATS
	// refuses clients without one.
	TLS *tls.Config
	// NATSOptions are extra nats.go options (TLS, credentials).
	NATSOptions []nats.Option
	// Client POSTs events when NATSURL is empty.
	Client kubernetes.Interface
	// BufferSize bounds the undelivered events kept; 0 means DefaultBufferSize.
	BufferSize int
	// Registerer receives the recorder's metrics; nil means none are registered.
	Registerer prometheus.Registerer
}

// Recorder records events and delivers them in the background once Run is called. It
// implements client-go's record.EventRecorder, so code written for kube's recorder
// works unchanged.
type Recorder struct {
	cfg      Config
	log      *slog.Logger
	dropped  prometheus.Counter
	droppedN atomic.Int64
	sent     prometheus.Counter

	mu  sync.Mutex
	buf []*corev1.Event // FIFO, oldest first
	// inFlight is how many of buf's oldest events the delivery under way is sending;
	// they are never dropped, so an event is counted either sent or dropped, not both.
	inFlight int
	wake     chan struct{}
	clock    func() time.Time
	posted   *correlator // POST mode only
}

var _ record.EventRecorder = (*Recorder)(nil)

// New builds a recorder; it connects nothing until Run. Errors: no Component, neither
// a NATS URL nor a Client to deliver with, or a NATS URL without a User that has NATS
// subjects (natsauth.PublisherToken).
func New(cfg Config) (*Recorder, error) {
	if cfg.Component == "" {
		return nil, errors.New("events: Config.Component is required")
	}
	if cfg.NATSURL == "" && cfg.Client == nil {
		return nil, errors.New("events: Config.NATSURL or Config.Client is required")
	}
	if cfg.NATSURL != "" {
		if _, ok := natsauth.PublisherToken(cfg.User); !ok {
			return nil, fmt.Errorf("events: Config.User %q names no NATS publisher (the CommonName of the NATS client certificate is required)", cfg.User)
		}
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	labels := prometheus.Labels{"component": cfg.Component}
	r := &Recorder{
		cfg: cfg,
		log: slog.Default().With("component", "event-recorder", "reporter", cfg.Component),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skiff_events_dropped_total", ConstLabels: labels,
			Help: "Events dropped because the recorder's buffer was full while NATS or the apiserver was unreachable.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skiff_events_sent_total", ConstLabels: labels,
			Help: "Events accepted by JetStream or the apiserver.",
		}),
		wake:   make(chan struct{}, 1),
		clock:  time.Now,
		posted: newCorrelator(4096),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.dropped, r.sent} {
			if err := cfg.Registerer.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, fmt.Errorf("events: metrics: %w", err)
				}
			}
		}
	}
	return r, nil
}

// Metrics returns the recorder's Prometheus collector (skiff_events_dropped_total,
// skiff_events_sent_total, labelled with the component) for a binary to register when
// Config.Registerer was not given.
func (r *Recorder) Metrics() prometheus.Collector { return recorderMetrics{r} }

type recorderMetrics struct{ r *Recorder }

func (m recorderMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.r.dropped.Describe(ch)
	m.r.sent.Describe(ch)
}

func (m recorderMetrics) Collect(ch chan<- prometheus.Metric) {
	m.r.dropped.Collect(ch)
	m.r.sent.Collect(ch)
}

// Dropped is the number of events dropped so far because the buffer was full.
func (r *Recorder) Dropped() int64 { return r.droppedN.Load() }

// Pending is the number of events waiting to be delivered.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buf)
}

// Event records an event about object; eventtype is corev1.EventTypeNormal or
// corev1.EventTypeWarning, reason a short UpperCamelCase word, message free text.
// object is any API object with a scheme kind (a *corev1.Pod from an informer works)
// or a *corev1.ObjectReference (with fieldPath for a container's events).
func (r *Recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.generateEvent(r.cfg.Component, object, nil, eventtype, reason, message)
}

// Eventf is Event with a fmt.Sprintf message.
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.generateEvent(r.cfg.Component, object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the event object.
func (r *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...interface{}) {
	r.generateEvent(r.cfg.Component, object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// ForComponent is a recorder reporting as component (source.component and
// reportingController, e.g. "deployment-controller") that shares r's buffer, delivery
// and metrics: one process hosting several of kube's reporters, as kube-controller-manager
// hosts one per controller (each kube controller's EventBroadcaster.NewRecorder with its
// own EventSource). component must not be "".
func (r *Recorder) ForComponent(component string) record.EventRecorder {
	return componentRecorder{r: r, component: component}
}

// componentRecorder is a Recorder's view reporting as another component.
type componentRecorder struct {
	r         *Recorder
	component string
}

func (c componentRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	c.r.generateEvent(c.component, object, nil, eventtype, reason, message)
}

func (c componentRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	c.r.generateEvent(c.component, object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (c componentRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...interface{}) {
	c.r.generateEvent(c.component, object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// generateEvent builds the event reported by component and queues it. Mirrors
// record.recorder.generateEvent.
func (r *Recorder) generateEvent(component string, object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	objRef, err := ref.GetReference(scheme.Scheme, object)
	if err != nil {
		r.log.Error("could not reference object; event not recorded", "type", fmt.Sprintf("%T", object), "reason", reason, "err", err)
		return
	}
	r.enqueue(r.makeEvent(component, objRef, annotations, eventtype, reason, message))
}

// makeEvent mirrors record.recorder.makeEvent: the name is the object's name and the
// time in hexadecimal nanoseconds, so names are unique and sort by time.
func (r *Recorder) makeEvent(component string, objRef *corev1.ObjectReference, annotations map[string]string, eventtype, reason, message string) *corev1.Event {
	now := r.clock()
	t := metav1.NewTime(now)
	namespace := objRef.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	// client-go's recorder reports the node as the instance; a node may report no other
	// (admission.NodeRestriction).
	instance := component
	if r.cfg.Host != "" {
		instance = r.cfg.Host
	}
	return &corev1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        eventName(objRef.Name, now),
			Namespace:   namespace,
			Annotations: annotations,
		},
		InvolvedObject:      *objRef,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                eventtype,
		Source:              corev1.EventSource{Component: component, Host: r.cfg.Host},
		ReportingController: component,
		ReportingInstance:   instance,
	}
}

// eventName is "<object name>.<hex nanoseconds>" as client-go's recorder makes it. An
// Event's name must be a DNS subdomain, which some objects' names are not (a kubelet's
// CSR is node-csr-<base64url>): their names are lowercased and every other character
// becomes '-', so their events are stored rather than refused; the timestamp keeps the
// name unique.
func eventName(object string, now time.Time) string {
	suffix := fmt.Sprintf(".%x", now.UnixNano())
	if len(validation.IsDNS1123Subdomain(object+suffix)) == 0 {
		return object + suffix
	}
	b := []byte(strings.ToLower(object))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '-'
		}
	}
	prefix := strings.Trim(string(b), "-.")
	if max := validation.DNS1123SubdomainMaxLength - len(suffix); len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-.")
	}
	if prefix == "" {
		prefix = "event"
	}
	return prefix + suffix
}

// enqueue appends ev. When the buffer is full it drops the oldest event not in flight,
// or ev itself when a delivery is sending every buffered one.
func (r *Recorder) enqueue(ev *corev1.Event) {
	r.mu.Lock()
	if len(r.buf) >= r.cfg.BufferSize {
		i := r.inFlight
		if i >= len(r.buf) {
			r.mu.Unlock()
			r.drop(ev)
			return
		}
		old := r.buf[i]
		// Close the gap at i by moving the events in flight (at most a batch) one on.
		copy(r.buf[1:i+1], r.buf[:i])
		r.buf[0] = nil
		r.buf = r.buf[1:]
		r.drop(old)
	}
	r.buf = append(r.buf, ev)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// drop counts ev as dropped.
func (r *Recorder) drop(ev *corev1.Event) {
	r.dropped.Inc()
	r.droppedN.Add(1)
	r.log.Warn("event buffer full; dropped an event", "size", r.cfg.BufferSize, "dropped", ev.Namespace+"/"+ev.Name, "reason", ev.Reason)
}

// take returns up to n of the oldest buffered events, oldest first, in a slice of its
// own, and marks them in flight until finish.
func (r *Recorder) take(n int) []*corev1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := append([]*corev1.Event(nil), r.buf[:min(n, len(r.buf))]...)
	r.inFlight = len(evs)
	return evs
}

// finish ends the delivery of evs, from take: the first n were delivered, so they are
// counted as sent and leave the buffer; the rest stay at its head, no longer in flight.
func (r *Recorder) finish(evs []*corev1.Event, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs[:n] {
		r.sent.Inc()
		// Events in flight are never dropped, so ev is at the head.
		if len(r.buf) > 0 && r.buf[0] == ev {
			r.buf[0] = nil
			r.buf = r.buf[1:]
		}
	}
	r.inFlight = 0
}

// deliverFunc delivers evs, the oldest buffered events, in order, and returns how many
// from the first were delivered; an error stops at the first event not delivered.
type deliverFunc func(ctx context.Context, evs []*corev1.Event) (int, error)

// maxPublishing bounds the events published to JetStream before their
// acknowledgements are awaited. One at a time, a busy component (the scheduler at a
// few hundred pods a second) waited a round trip per event and fell behind until its
// buffer overflowed.
const maxPublishing = 128

// Run delivers buffered events until ctx ends, in order, retrying with backoff (capped
// at 5 s) while NATS or the apiserver is unreachable: to NATS up to maxPublishing at a
// time, each POST on its own. When ctx ends it tries for up to DrainTimeout to deliver
// what is still buffered (a component's last events, such as Killing on shutdown), then
// returns nil; what is left then is lost.
func (r *Recorder) Run(ctx context.Context) error {
	deliver, batch := deliverFunc(r.postOne), 1
	if r.cfg.NATSURL != "" {
		p, err := r.connect(ctx)
		if err != nil {
			return err
		}
		defer p.close()
		deliver, batch = p.publish, maxPublishing
	}
	defer r.drain(deliver, batch)
	backoff := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 5 * time.Second}
	for {
		evs := r.take(batch)
		if len(evs) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
			}
			continue
		}
		n, err := deliver(ctx, evs)
		r.finish(evs, n)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			delay := backoff.Step()
			ev := evs[n]
			r.log.Warn("delivering event failed; will retry", "event", ev.Namespace+"/"+ev.Name, "reason", ev.Reason, "retryIn", delay, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			continue
		}
		backoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 5 * time.Second}
	}
}

// Start runs r in the background on a context of its own, not the caller's, and returns
// stop, which ends it and waits while it delivers what it still holds (at most
// DrainTimeout). A process that exits right after stop (a leader that lost its Lease, a
// fatal error before os.Exit) so loses no event it recorded before; calling stop again
// returns at once. A Run error (NATS unusable) is logged.
func (r *Recorder) Start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			r.log.Error("event recorder stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// DrainTimeout bounds the last delivery attempt when Run's context ends.
const DrainTimeout = 2 * time.Second

// drain delivers buffered events until none is left, one fails, or DrainTimeout passes.
func (r *Recorder) drain(deliver deliverFunc, batch int) {
	ctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	for evs := r.take(batch); len(evs) > 0; evs = r.take(batch) {
		n, err := deliver(ctx, evs)
		r.finish(evs, n)
		if err != nil {
			r.log.Warn("stopping with undelivered events", "pending", r.Pending(), "err", err)
			return
		}
	}
}

// publisher publishes to JetStream over one NATS connection that reconnects forever. It
// never calls JetStream's API, which NATS does not let it: the apiserver's event sink
// creates the stream, and until it has, events wait in the buffer.
type publisher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	recorder *Recorder
}

func (r *Recorder) connect(ctx context.Context) (*publisher, error) {
	inbox, err := natsauth.InboxPrefix(r.cfg.User)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	opts := append([]nats.Option{
		nats.Name("skiff-" + r.cfg.Component),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// Refused while the apiserver's auth callout is not answering yet: keep trying.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomInboxPrefix(inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.log.Warn("NATS refused an operation; events are retried", "user", r.cfg.User, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				r.log.Warn("disconnected from NATS; events are buffered", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { r.log.Info("reconnected to NATS", "url", nc.ConnectedUrl()) }),
	}, r.cfg.NATSOptions...)
	if r.cfg.TLS != nil {
		opts = append(opts, nats.Secure(r.cfg.TLS))
	}
	nc, err := nats.Connect(r.cfg.NATSURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("events: connect to NATS %s: %w", r.cfg.NATSURL, err)
	}
	// An acknowledgement not back within the publish timeout fails its future, which
	// publish is waiting on anyway; the event is published again.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("events: JetStream: %w", err)
	}
	return &publisher{nc: nc, js: js, recorder: r}, nil
}

func (p *publisher) close() { p.nc.Close() }

// publishTimeout bounds the wait for JetStream's acknowledgement of an event.
const publishTimeout = 5 * time.Second

// publish sends evs in order without waiting between them, then waits for JetStream's
// acknowledgements, each meaning that event is stored in the stream; it returns how
// many from the first were acknowledged before one failed. An event's name is its
// message id, so events published again after a failure (those after it may have been
// stored) are de-duplicated by JetStream. An event that cannot be encoded, or whose
// namespace is no subject token, is dropped (logged) and counts as delivered.
func (p *publisher) publish(ctx context.Context, evs []*corev1.Event) (int, error) {
	if !p.nc.IsConnected() {
		return 0, nats.ErrConnectionClosed
	}
	acks := make([]jetstream.PubAckFuture, 0, len(evs))
	var err error
	for _, ev := range evs {
		data, encErr := json.Marshal(ev)
		if encErr != nil {
			p.recorder.log.Error("encoding event; dropped", "event", ev.Namespace+"/"+ev.Name, "err", encErr)
			acks = append(acks, nil)
			continue
		}
		subject, subjErr := natsauth.EventSubject(ev.Namespace, p.recorder.cfg.User)
		if subjErr != nil {
			p.recorder.log.Error("event has no subject; dropped", "event", ev.Namespace+"/"+ev.Name, "err", subjErr)
			acks = append(acks, nil)
			continue
		}
		var ack jetstream.PubAckFuture
		if ack, err = p.js.PublishAsync(subject, data, jetstream.WithMsgID(ev.Namespace+"/"+ev.Name)); err != nil {
			break
		}
		acks = append(acks, ack)
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	for i, ack := range acks {
		if ack == nil {
			continue
		}
		select {
		case <-ack.Ok():
		case ackErr := <-ack.Err():
			// No stream yet (a new server before the apiserver's sink made it) fails
			// here too: Run retries with backoff.
			return i, ackErr
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return len(acks), err
}

// postOne posts the first of evs.
func (r *Recorder) postOne(ctx context.Context, evs []*corev1.Event) (int, error) {
	if err := r.post(ctx, evs[0]); err != nil {
		return 0, err
	}
	return 1, nil
}

// post creates ev through the API, or, when an identical event was posted before,
// updates that one's count and lastTimestamp. Mirrors record's recordToSink with the
// EventCorrelator's EventLogger (identical events only).
func (r *Recorder) post(ctx context.Context, ev *corev1.Event) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	events := r.cfg.Client.CoreV1().Events(ev.Namespace)
	key := AggregateKey(ev)
	if prev, ok := r.posted.get(key); ok {
		patch, _ := json.Marshal(map[string]any{
			"count": prev.count + 1, "lastTimestamp": ev.LastTimestamp, "message": ev.Message,
		})
		_, err := events.Patch(ctx, prev.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			r.posted.add(key, prev.name, prev.count+1)
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		// Expired (its lease ran out) or deleted: create it afresh.
	}
	created, err := events.Create(ctx, ev, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil // an earlier attempt got through
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsInvalid(err):
		// The namespace is gone or the event is refused: retrying cannot help.
		r.log.Warn("event refused by the apiserver; dropped", "event", ev.Namespace+"/"+ev.Name, "err", err)
		return nil
	case err != nil:
		return err
	}
	r.posted.add(key, created.Name, created.Count)
	return nil
}

// AggregateKey identifies events that are repeats of each other: same source, same
// involved object, type, reason and message. Mirrors client-go's getEventKey.
func AggregateKey(ev *corev1.Event) string {
	o := ev.InvolvedObject
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s",
		ev.Source.Component, ev.Source.Host, o.Kind, o.Namespace, o.Name, o.FieldPath, string(o.UID), o.APIVersion,
		ev.Type, ev.Reason, ev.Message, ev.ReportingController)
}

// Nop is a record.EventRecorder that records nothing, for components built without a
// recorder.
type Nop struct{}

var _ record.EventRecorder = Nop{}

// Event does nothing.
func (Nop) Event(runtime.Object, string, string, string) {}

// Eventf does nothing.
func (Nop) Eventf(runtime.Object, string, string, string, ...interface{}) {}

// AnnotatedEventf does nothing.
func (Nop) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...interface{}) {
}
