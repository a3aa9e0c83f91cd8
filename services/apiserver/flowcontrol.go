package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/storage"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fcmetrics "k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	flowcontrolrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/registry/flowcontrol/ensurer"
	"skiff.dev/services/apiserver/storage/cacher"
)

// flowcontrolEnsureInterval is how often the API Priority and Fairness bootstrap
// configuration is put back after the first time (a mandatory object deleted by hand
// comes back within it).
const flowcontrolEnsureInterval = time.Minute

// runFlowcontrolBootstrap stores the API Priority and Fairness bootstrap configuration,
// retrying with backoff until etcd answers, then again every flowcontrolEnsureInterval,
// until ctx ends (kube's priority-and-fairness-config-producer post-start hook).
//
// It writes specs only; the config controller of API Priority and Fairness
// (priorityAndFairness) writes their status.
func (s *APIServer) runFlowcontrolBootstrap(ctx context.Context) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
	ensure := func(ctx context.Context) (bool, error) {
		if err := ensurer.EnsureBootstrapConfiguration(ctx, s.stores); err != nil {
			if ctx.Err() == nil {
				slog.Warn("storing the API Priority and Fairness bootstrap configuration; will retry", "err", err)
			}
			return false, nil
		}
		return true, nil
	}
	if wait.ExponentialBackoffWithContext(ctx, backoff, ensure) != nil {
		return
	}
	ticker := time.NewTicker(flowcontrolEnsureInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			_, _ = ensure(ctx)
		}
	}
}

// priorityAndFairness is the apiserver's API Priority and Fairness (kube-apiserver's
// --enable-priority-and-fairness, its default): k8s.io/apiserver's flow controller,
// whose config controller follows the FlowSchemas and PriorityLevelConfigurations
// through an informer over the loopback and writes their status (the Dangling
// condition of a FlowSchema whose priority level is missing) there, as field manager
// api-priority-and-fairness-config-consumer-v1; the ensurer (runFlowcontrolBootstrap)
// writes only specs, so the two never write the same fields.
type priorityAndFairness struct {
	controller utilflowcontrol.Interface
	informers  informers.SharedInformerFactory
	// counts are the object counts and average sizes the list work estimator reads,
	// kept from the watch caches every objectCountInterval.
	counts flowcontrolrequest.StorageObjectCountTracker
}

// objectCountInterval is how often the watch caches' object counts and sizes are
// handed to the list work estimator (kube-apiserver's storage count poll period).
const objectCountInterval = time.Minute

// newPriorityAndFairness is API Priority and Fairness over the loopback config, with
// serverConcurrencyLimit seats shared by the non-exempt priority levels (kube's
// --max-requests-inflight + --max-mutating-requests-inflight). It registers the
// apiserver_flowcontrol_* metrics in component-base's registry. Errors: a limit that is
// not positive (kube-apiserver's message), a client that cannot be built.
func newPriorityAndFairness(loopback *rest.Config, serverConcurrencyLimit int) (*priorityAndFairness, error) {
	if serverConcurrencyLimit <= 0 {
		return nil, fmt.Errorf("apiserver: invalid configuration: priority and fairness requires --max-requests-inflight + --max-mutating-requests-inflight to add up to something positive, got %d", serverConcurrencyLimit)
	}
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return nil, fmt.Errorf("apiserver: loopback client: %w", err)
	}
	fcmetrics.Register()
	factory := informers.NewSharedInformerFactory(client, 0)
	return &priorityAndFairness{
		controller: utilflowcontrol.New(factory, client.FlowcontrolV1(), serverConcurrencyLimit),
		informers:  factory,
		counts:     flowcontrolrequest.NewStorageObjectCountTracker(),
	}, nil
}

// handlerConfig is what the HTTP handler applies: the controller and kube's work
// estimator (lists cost by the count of objects they may return, mutating requests by
// the watchers they will wake).
func (p *priorityAndFairness) handlerConfig() *endpoints.FlowControl {
	return &endpoints.FlowControl{
		Controller: p.controller,
		WorkEstimator: flowcontrolrequest.NewWorkEstimator(p.counts.Get, p.controller.GetInterestedWatchCount,
			flowcontrolrequest.DefaultWorkEstimatorConfig(), p.controller.GetMaxSeats),
	}
}

// countedCache is a watch cache whose stats the list work estimator reads.
type countedCache struct {
	resource schema.GroupResource
	cache    *cacher.Cacher
}

// run runs the controller (its informers, config worker and borrowing adjustment),
// kube's watermark maintenance of the filter's metrics and the caches' stats until ctx
// ends (kube's priority-and-fairness-config-consumer, priority-and-fairness-filter and
// storage-object-count-tracker-hook post-start hooks).
func (p *priorityAndFairness) run(ctx context.Context, caches []countedCache) {
	var wg sync.WaitGroup
	defer wg.Wait()
	p.informers.Start(ctx.Done())
	defer p.informers.Shutdown()
	genericfilters.StartPriorityAndFairnessWatermarkMaintenance(ctx.Done())
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := p.controller.Run(ctx.Done()); err != nil && ctx.Err() == nil {
			slog.Error("API Priority and Fairness config controller", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		p.counts.RunUntil(ctx.Done())
	}()
	wait.UntilWithContext(ctx, func(context.Context) {
		for _, c := range caches {
			if n, size, ok := c.cache.Stats(); ok {
				p.counts.Set(c.resource.String(), storage.Stats{ObjectCount: int64(n), EstimatedAverageObjectSizeBytes: size})
			}
		}
	}, objectCountInterval)
}

// eventSeatWait is how long an event from the sink may wait in its priority level's
// queue: a POST's request wait limit.
const eventSeatWait = endpoints.DefaultRequestWaitLimit

// TakeSeat implements eventsink.Seats: the event is classified as its publisher's POST
// of it would be and waits for a seat in that flow's queue (at most eventSeatWait); ok
// is false when the queue rejects it, as the POST would get 429. The seat is held until
// release is called.
func (p *priorityAndFairness) TakeSeat(u user.Info, info *genericapirequest.RequestInfo) (release func(), ok bool) {
	seated, released, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), eventSeatWait)
		defer cancel()
		digest := utilflowcontrol.RequestDigest{RequestInfo: info, User: u}
		p.controller.Handle(ctx, digest,
			func(*flowcontrolv1.FlowSchema, *flowcontrolv1.PriorityLevelConfiguration, string) {},
			func() flowcontrolrequest.WorkEstimate { return flowcontrolrequest.WorkEstimate{InitialSeats: 1} },
			func(bool) {},
			func() {
				close(seated)
				<-released
			})
	}()
	select {
	case <-seated:
		return func() {
			close(released)
			<-done
		}, true
	case <-done:
		return nil, false
	}
}
