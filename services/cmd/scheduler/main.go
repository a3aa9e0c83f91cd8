// Command scheduler runs skiff's scheduler against an apiserver: it binds
// pending pods whose spec.schedulerName is --scheduler-name to nodes.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/serving"
	"skiff.dev/services/scheduler"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster config")
	schedulerName := flag.String("scheduler-name", scheduler.DefaultSchedulerName, "schedule pods whose spec.schedulerName is this")
	healthAddress := flag.String("health-address", ":10259", "where /healthz, /livez, /readyz and /metrics are served (\"\" = off)")
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
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error("building clientset", "err", err)
		os.Exit(1)
	}
	sched, err := scheduler.New(scheduler.Config{Client: client, SchedulerName: *schedulerName})
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
		registry.MustRegister(sched.Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		go func() {
			if err := serving.Serve(ctx, l, nil, registry); err != nil {
				logger.Error("health endpoints stopped", "err", err)
			}
		}()
	}
	if err := sched.Run(ctx); err != nil {
		logger.Error("scheduler stopped", "err", err)
		os.Exit(1)
	}
}
