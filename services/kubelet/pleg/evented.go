package pleg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
)

// EventSource opens the runtime's container event stream (CRI GetContainerEvents); a
// runtimeapi.RuntimeServiceClient is one.
type EventSource interface {
	GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, opts ...grpc.CallOption) (runtimeapi.RuntimeService_GetContainerEventsClient, error)
}

// Timing of the Evented PLEG, Kubernetes' own (pkg/kubelet/kubelet.go and pleg).
const (
	// EventedRelistPeriod is how often the runtime is still relisted while its
	// events arrive: a safety net, not the source of changes (kubelet: 300 s).
	EventedRelistPeriod = 300 * time.Second
	// EventedRelistThreshold is how old the last relist may be, while events
	// arrive, before the node is NotReady (kubelet: 10 min).
	EventedRelistThreshold = 10 * time.Minute
	// MaxStreamRetries is how many times in a row the event stream may fail
	// before the PLEG falls back to relisting every RelistPeriod (kubelet's
	// eventedPlegMaxStreamRetries).
	MaxStreamRetries = 5
	// streamRetryDelay is the pause before the stream is opened again.
	streamRetryDelay = time.Second
)

// EventedPLEG reads the runtime's container events (KEP-3386) instead of relisting it
// every second. It sends the sync loop each event's PodLifecycleEvent — ContainerStarted
// for a started container or sandbox, ContainerDied for a stopped one, ContainerDied and
// ContainerRemoved for a deleted one, nothing for a created one: kube's mapping — after
// storing in the cache the pod's status (GetPodStatus) when the event is a stop or a
// deletion, which may be the runtime's own doing (an exit); what the kubelet itself
// created or started, its pod worker has inspected at the end of its sync. The
// generic PLEG underneath relists every EventedRelistPeriod as a safety net, once
// after each subscription (whose headers say the runtime is sending: what changed
// before them, a relist finds), and on every stream failure; after MaxStreamRetries
// failures in a row, or at once when the runtime has no event stream
// (codes.Unimplemented: containerd before 1.7), it relists every RelistPeriod for the
// rest of the kubelet's life, as kube falls back to the generic PLEG.
//
// It differs from kube's EventedPLEG in two ways. Kube stores a status built from every
// event, whose container statuses are those of one sandbox (a pod whose sandbox was
// recreated then loses its older containers' statuses); skiff inspects the pod, as the
// generic PLEG does for a pod whose relist found a change, once for the events of a pod
// that arrive together. And the pod workers' RequestRelist after each sync (see
// GenericPLEG.RequestRelist) inspects only that pod, which lets them wait for a status
// newer than their sync without kube's periodic bump of the cache's global timestamp
// (every 2 s), which vouches for statuses nobody read.
type EventedPLEG struct {
	generic *GenericPLEG
	source  EventSource
	logger  *slog.Logger

	// inUse is set while events are the source of changes; false once the PLEG
	// has fallen back to relisting.
	inUse atomic.Bool
	// subscribed is set by the first subscription (watchLoop's goroutine only).
	subscribed bool

	// received carries the stream's events to the inspecting loop.
	received chan *runtimeapi.ContainerEventResponse
	// requested holds the pods RequestRelist asked to inspect; wake has at most
	// one pending signal of new requests.
	requestMu sync.Mutex
	requested map[types.UID]struct{}
	wake      chan struct{}
}

// NewEventedPLEG returns an Evented PLEG over runtime's events from source, which uses
// generic (built over the same runtime and cache) for its relists and its event
// channel; logger nil means slog.Default().
func NewEventedPLEG(generic *GenericPLEG, source EventSource, logger *slog.Logger) *EventedPLEG {
	if logger == nil {
		logger = slog.Default()
	}
	e := &EventedPLEG{
		generic:   generic,
		source:    source,
		logger:    logger,
		received:  make(chan *runtimeapi.ContainerEventResponse, ChannelCapacity),
		requested: map[types.UID]struct{}{},
		wake:      make(chan struct{}, 1),
	}
	e.inUse.Store(true)
	generic.setRelistTiming(EventedRelistPeriod, EventedRelistThreshold)
	return e
}

// Watch returns the channel the events are sent on (the sync loop's plegCh).
func (e *EventedPLEG) Watch() <-chan *PodLifecycleEvent { return e.generic.Watch() }

// Healthy is the generic PLEG's health, with the threshold of the mode in use.
func (e *EventedPLEG) Healthy() (bool, error) { return e.generic.Healthy() }

// InUse reports whether container events are the source of changes (false once the
// PLEG has fallen back to relisting every RelistPeriod).
func (e *EventedPLEG) InUse() bool { return e.inUse.Load() }

// RequestRelist asks for pod uid to be inspected soon (a status newer than the call
// reaches the cache), without blocking; after a fall back it asks the generic PLEG for
// a relist.
func (e *EventedPLEG) RequestRelist(uid types.UID) {
	if !e.inUse.Load() {
		e.generic.RequestRelist(uid)
		return
	}
	e.requestMu.Lock()
	e.requested[uid] = struct{}{}
	e.requestMu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run reads the events and relists as the type says until ctx ends.
func (e *EventedPLEG) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		e.generic.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		e.inspectLoop(ctx)
	}()
	e.watchLoop(ctx)
	wg.Wait()
}

// watchLoop keeps a stream open, relisting after each subscription and failure, and
// falls back to relisting every RelistPeriod when the stream cannot be kept.
func (e *EventedPLEG) watchLoop(ctx context.Context) {
	failures := 0
	for {
		delivered, err := e.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			failures = 0
		}
		failures++
		unimplemented := status.Code(err) == codes.Unimplemented
		if unimplemented || failures >= MaxStreamRetries {
			e.fallBack(err, unimplemented)
			return
		}
		e.logger.Warn("Evented PLEG: the container event stream failed; relisting and subscribing again", "err", err, "failures", failures)
		e.generic.RequestRelist("")
		select {
		case <-ctx.Done():
			return
		case <-time.After(streamRetryDelay):
		}
	}
}

// fallBack makes the generic PLEG relist every RelistPeriod from now on.
func (e *EventedPLEG) fallBack(err error, unimplemented bool) {
	e.inUse.Store(false)
	e.generic.setRelistTiming(RelistPeriod, RelistThreshold)
	e.generic.RequestRelist("")
	if unimplemented {
		e.logger.Info("Evented PLEG: the runtime sends no container events; relisting every second (Generic PLEG)", "err", err)
		return
	}
	e.logger.Error("Evented PLEG: the container event stream failed too often; relisting every second (Generic PLEG)", "err", err, "failures", MaxStreamRetries)
}

// watch subscribes, relists once the runtime confirms the subscription (its headers)
// and hands the events to the inspecting loop until the stream fails. It reports
// whether any event arrived.
func (e *EventedPLEG) watch(ctx context.Context) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := e.source.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return false, err
	}
	// A runtime that sends its headers only with its first event (containerd's
	// CRI plugin) leaves a moment after the call in which a change may go unseen:
	// relist once the headers arrive, or a relist period after subscribing.
	headers := make(chan struct{})
	go func() {
		_, _ = stream.Header()
		close(headers)
	}()
	select {
	case <-headers:
	case <-time.After(RelistPeriod):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if !e.subscribed {
		e.subscribed = true
		e.logger.Info("Evented PLEG: reading the runtime's container events", "relistPeriod", EventedRelistPeriod.String())
	}
	e.generic.Relist(ctx)
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the runtime ended the container event stream")
			}
			return delivered, err
		}
		delivered = true
		select {
		case e.received <- ev:
		case <-ctx.Done():
			return delivered, ctx.Err()
		}
	}
}

// inspectLoop inspects the pods of the events received and of RequestRelist, one
// batch at a time: every event and request queued when a batch starts is in it, and
// a pod is inspected once per batch.
func (e *EventedPLEG) inspectLoop(ctx context.Context) {
	for {
		var batch []*runtimeapi.ContainerEventResponse
		select {
		case <-ctx.Done():
			return
		case ev := <-e.received:
			batch = append(batch, ev)
		case <-e.wake:
		}
	drain:
		for len(batch) < ChannelCapacity {
			select {
			case ev := <-e.received:
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		e.requestMu.Lock()
		requested := e.requested
		e.requested = map[types.UID]struct{}{}
		e.requestMu.Unlock()
		e.processBatch(ctx, batch, requested)
	}
}

// processBatch inspects each pod that a stop or deletion event or a request names, and
// sends every pod's events after its inspection. Created and started events need no
// inspection of their own: only the kubelet creates and starts containers, and the pod
// worker that did asks for an inspection when its sync ends, whose status is the one the
// pod's next sync waits for.
func (e *EventedPLEG) processBatch(ctx context.Context, batch []*runtimeapi.ContainerEventResponse, requested map[types.UID]struct{}) {
	type podEvents struct {
		name, namespace string
		inspect         bool
		events          []*PodLifecycleEvent
	}
	pods := map[types.UID]*podEvents{}
	var order []types.UID
	podOf := func(uid types.UID) *podEvents {
		p, ok := pods[uid]
		if !ok {
			p = &podEvents{}
			pods[uid] = p
			order = append(order, uid)
		}
		return p
	}
	for _, ev := range batch {
		md := ev.GetPodSandboxStatus().GetMetadata()
		if md.GetUid() == "" {
			// containerd sends none when the sandbox is already gone; a relist
			// repairs what the event would have told.
			e.logger.Warn("Evented PLEG: container event without its sandbox; relisting", "container", ev.GetContainerId(), "type", ev.GetContainerEventType())
			e.generic.RequestRelist("")
			continue
		}
		uid := types.UID(md.GetUid())
		p := podOf(uid)
		p.name, p.namespace = md.GetName(), md.GetNamespace()
		switch ev.GetContainerEventType() {
		case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT:
			p.inspect = true
		}
		p.events = append(p.events, lifecycleEvents(uid, ev)...)
	}
	for uid := range requested {
		podOf(uid).inspect = true
	}

	for _, uid := range order {
		p := pods[uid]
		if p.inspect {
			name, namespace := p.name, p.namespace
			if name == "" {
				if cached, _ := e.generic.cache.Get(uid); cached != nil {
					name, namespace = cached.Name, cached.Namespace
				}
			}
			// As a relist inspects a pod that changed; a pod the runtime no
			// longer has is stored empty, not deleted, so a pod worker waiting
			// for a newer status gets one.
			if err := e.generic.updateCache(ctx, &container.Pod{ID: uid, Name: name, Namespace: namespace}, uid); err != nil {
				if ctx.Err() == nil {
					e.logger.Error("Evented PLEG: inspecting the pod failed; relisting", "podUID", uid, "err", err)
					e.generic.RequestRelist("")
				}
				continue
			}
		}
		for _, le := range p.events {
			e.generic.send(le)
		}
	}
}

// lifecycleEvents maps a CRI container event to the sync loop's events, as kube's
// EventedPLEG.processCRIEvent does.
func lifecycleEvents(uid types.UID, ev *runtimeapi.ContainerEventResponse) []*PodLifecycleEvent {
	id := ev.GetContainerId()
	switch ev.GetContainerEventType() {
	case runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT:
		return []*PodLifecycleEvent{{ID: uid, Type: ContainerStarted, Data: id}}
	case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT:
		return []*PodLifecycleEvent{{ID: uid, Type: ContainerDied, Data: id}}
	case runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT:
		return []*PodLifecycleEvent{{ID: uid, Type: ContainerDied, Data: id}, {ID: uid, Type: ContainerRemoved, Data: id}}
	}
	// CREATED: the status changes, but nothing acts on it (the generic PLEG
	// does not send ContainerChanged either).
	return nil
}
