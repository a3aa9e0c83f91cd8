// Command scheduler runs skiff's scheduler against an apiserver: it binds
// pending pods whose spec.schedulerName is --scheduler-name to nodes.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"skiff.dev/services/internal/events"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/scheduler"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster config")
	schedulerName := flag.String("scheduler-name", scheduler.DefaultSchedulerName, "schedule pods whose spec.schedulerName is this")
	healthAddress := flag.String("health-address", ":10259", "where /healthz, /livez, /readyz and /metrics are served (\"\" = off)")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: the client certificate of --kubeconfig)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the key of --kubeconfig)")
	leaderElect := flag.Bool("leader-elect", true, "run only while holding the kube-system/kube-scheduler Lease, so replicas never bind at once")
	leaseDuration := flag.Duration("leader-elect-lease-duration", 15*time.Second, "how long a leader's Lease lasts without renewal")
	renewDeadline := flag.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up")
	retryPeriod := flag.Duration("leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease")
	profiling := flag.Bool("profiling", false, "serve Go's /debug/pprof beside /healthz and /metrics")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		logger.Error("loading kubeconfig", "err", err)
		os.Exit(1)
	}
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "scheduler"})
	if err != nil {
		logger.Error("tracing", "err", err)
		os.Exit(1)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error("building clientset", "err", err)
		os.Exit(1)
	}
	natsTLS, err := natsClientTLS(cfg, *natsURL, *natsCAFile, *natsCertFile, *natsKeyFile)
	if err != nil {
		logger.Error("NATS client TLS", "err", err)
		os.Exit(1)
	}
	recorder, err := events.New(events.Config{Component: *schedulerName, NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		logger.Error("event recorder", "err", err)
		os.Exit(1)
	}
	go func() { _ = recorder.Run(ctx) }()
	sched, err := scheduler.New(scheduler.Config{Client: client, SchedulerName: *schedulerName, Recorder: recorder, TracerProvider: tp})
	if err != nil {
		logger.Error("building scheduler", "err", err)
		os.Exit(1)
	}
	if *healthAddress != "" {
		l, err := net.Listen("tcp", *healthAddress)
		if err != nil {
			logger.Error("health endpoints", "err", err)
			os.Exit(1)
		}
		registry := prometheus.NewRegistry()
		registry.MustRegister(sched.Metrics(), recorder.Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		go func() {
			if err := serving.Serve(ctx, l, nil, registry, profilingOption(*profiling)...); err != nil {
				logger.Error("health endpoints stopped", "err", err)
			}
		}()
	}
	if !*leaderElect {
		if err := sched.Run(ctx); err != nil {
			logger.Error("scheduler stopped", "err", err)
			os.Exit(1)
		}
		return
	}
	// As kube-scheduler: replicas compete for one Lease; the holder schedules, and a
	// leader that loses the Lease exits so it never binds beside a new one.
	hostname, _ := os.Hostname()
	identity := hostname + "_" + string(uuid.NewUUID())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-scheduler"},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, Name: "kube-scheduler", ReleaseOnCancel: true,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("became leader", "identity", identity)
				if err := sched.Run(ctx); err != nil && ctx.Err() == nil {
					logger.Error("scheduler stopped", "err", err)
					os.Exit(1)
				}
			},
			OnStoppedLeading: func() {
				if ctx.Err() != nil {
					return // shutting down
				}
				logger.Error("lost the leader Lease; exiting", "identity", identity)
				os.Exit(1)
			},
			OnNewLeader: func(leader string) {
				if leader != identity {
					logger.Info("another replica leads", "leader", leader)
				}
			},
		},
	})
}

// natsClientTLS is the scheduler's mutual TLS toward NATS: the files named by the
// --nats-* flags, or else the identity and CA of its kubeconfig (system:kube-scheduler).
// nil without a NATS URL.
func natsClientTLS(kubeconfig *rest.Config, natsURL, caFile, certFile, keyFile string) (*tls.Config, error) {
	switch {
	case natsURL == "":
		return nil, nil
	case certFile == "" && caFile == "" && keyFile == "":
		return events.ClientTLSFromRESTConfig(kubeconfig)
	case certFile == "" || caFile == "":
		return nil, errors.New("--nats-cert-file and --nats-ca-file go together")
	}
	return events.ClientTLSFromFiles(caFile, certFile, keyFile)
}

// profilingOption is serving's option for --profiling.
func profilingOption(on bool) []serving.Option {
	if on {
		return []serving.Option{serving.WithProfiling()}
	}
	return nil
}
