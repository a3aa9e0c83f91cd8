// Package leaderelection runs a component only while it holds a coordination.k8s.io
// Lease, so that of several replicas exactly one acts. It wraps client-go's
// tools/leaderelection the way kube-scheduler and kube-controller-manager do
// (k8s.io/component-base/config LeaderElectionConfiguration and their Run functions).
package leaderelection

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options are the --leader-elect-* flags of kube's components.
type Options struct {
	// LeaderElect runs only while holding the Lease; false runs at once, alone.
	LeaderElect bool
	// LeaseDuration is how long a leader's Lease lasts without renewal (kube: 15 s).
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader retries renewing before giving up (10 s).
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire or renew the Lease (2 s).
	RetryPeriod time.Duration
	// ResourceNamespace and ResourceName name the Lease, e.g. kube-system/kube-scheduler.
	ResourceNamespace, ResourceName string
}

// DefaultOptions are kube's defaults for the Lease kube-system/name.
func DefaultOptions(name string) Options {
	return Options{
		LeaderElect: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ResourceNamespace: metav1.NamespaceSystem, ResourceName: name,
	}
}

// AddFlags registers kube's --leader-elect* flags on fs, defaulting to o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run only while holding the Lease --leader-elect-resource-namespace/--leader-elect-resource-name, so replicas never act at once")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a leader's Lease lasts without renewal")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader retries renewing before it gives up")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often candidates try to acquire or renew the Lease")
	fs.StringVar(&o.ResourceNamespace, "leader-elect-resource-namespace", o.ResourceNamespace, "namespace of the leader-election Lease")
	fs.StringVar(&o.ResourceName, "leader-elect-resource-name", o.ResourceName, "name of the leader-election Lease")
}

// ErrLeaderElectionLost is Run's error when the Lease was lost while ctx still ran: the
// caller must stop (kube's components exit) so it never acts beside the new leader.
var ErrLeaderElectionLost = errors.New("leaderelection: lost the Lease")

// Elector campaigns for one Lease.
type Elector struct {
	opts     Options
	client   kubernetes.Interface
	identity string
	// watchdog fails /healthz when the leader has stopped renewing (kube's
	// leaderelection.HealthzAdaptor).
	watchdog *leaderelection.HealthzAdaptor
	log      *slog.Logger
}

// New builds an Elector for opts' Lease; identity "" means "<hostname>_<uuid>", as kube.
func New(client kubernetes.Interface, opts Options, identity string) *Elector {
	if identity == "" {
		host, _ := os.Hostname()
		identity = host + "_" + string(uuid.NewUUID())
	}
	return &Elector{
		opts: opts, client: client, identity: identity,
		watchdog: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second),
		log:      slog.Default().With("lease", opts.ResourceNamespace+"/"+opts.ResourceName, "identity", identity),
	}
}

// Identity is the holder identity this Elector writes into the Lease.
func (e *Elector) Identity() string { return e.identity }

// Check reports whether the leader still renews its Lease in time (nil: healthy, or
// not leading); fit for /healthz or /readyz.
func (e *Elector) Check() error { return e.watchdog.Check(nil) }

// Run calls run with a context that ends when leadership ends, once this Elector holds
// the Lease, and returns after run has returned. With LeaderElect false it calls run(ctx)
// at once. Returns nil when ctx ended (the Lease is released for the next replica),
// ErrLeaderElectionLost when the Lease was lost first.
//
// Leadership ends, for run, as soon as the renewal is overdue (see renewalOverdue):
// client-go cancels its OnStartedLeading context only after it has tried to release the
// Lease, and with the apiserver hanging (etcd paused) that try takes another
// RenewDeadline, by when the Lease has expired and another replica may lead.
func (e *Elector) Run(ctx context.Context, run func(ctx context.Context)) error {
	if !e.opts.LeaderElect {
		run(ctx)
		return nil
	}
	// electionCtx ends client-go's loop when the renewal is overdue, so it does not keep
	// (or retake) a Lease whose work has stopped.
	electionCtx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	var (
		le  *leaderelection.LeaderElector
		err error
	)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.opts.ResourceNamespace, Name: e.opts.ResourceName},
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.identity},
	}
	// client-go starts OnStartedLeading in a goroutine that may begin only after
	// le.Run has returned; stopped makes such a late start a no-op, and running tells
	// Run whether to wait for run to return.
	var (
		mu               sync.Mutex
		running, stopped bool
		done             = make(chan struct{})
	)
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: e.opts.ResourceName, ReleaseOnCancel: true, WatchDog: e.watchdog,
		LeaseDuration: e.opts.LeaseDuration, RenewDeadline: e.opts.RenewDeadline, RetryPeriod: e.opts.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				running = true
				mu.Unlock()
				defer close(done)
				e.log.Info("became leader")
				ctx, stopLeading := context.WithCancel(ctx)
				defer stopLeading()
				go func() {
					if e.renewalOverdue(ctx, le) {
						e.log.Error("renewing the Lease is overdue; stopping work before it can expire", "overdueAfter", e.overdueAfter())
						stopLeading()
						stopElection()
					}
				}()
				run(ctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(leader string) {
				if leader != e.identity {
					e.log.Info("another replica leads", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leaderelection: %w", err)
	}
	// le.Run returns when electionCtx ends or when a leader fails to renew in time.
	le.Run(electionCtx)
	mu.Lock()
	stopped = true
	wait := running
	mu.Unlock()
	if wait {
		<-done
	}
	if ctx.Err() == nil {
		e.log.Error("lost the leader Lease")
		return ErrLeaderElectionLost
	}
	return nil
}

// overdueAfter is how long after its last successful renewal a leader stops: when
// client-go's own renewal gives up (a try every RetryPeriod, for RenewDeadline), and
// never later than LeaseDuration, after which another replica may take the Lease.
func (e *Elector) overdueAfter() time.Duration {
	return min(e.opts.RenewDeadline+e.opts.RetryPeriod, e.opts.LeaseDuration)
}

// renewalOverdue waits until ctx ends (false) or le, leading, has not renewed its Lease
// for overdueAfter (true). It polls le.Check, whose tolerance is relative to
// LeaseDuration, every RetryPeriod/4.
func (e *Elector) renewalOverdue(ctx context.Context, le *leaderelection.LeaderElector) bool {
	tolerance := e.overdueAfter() - e.opts.LeaseDuration // <= 0: before the Lease expires
	tick := time.NewTicker(max(e.opts.RetryPeriod/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			if le.Check(tolerance) != nil {
				return true
			}
		}
	}
}
