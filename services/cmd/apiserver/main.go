// Command apiserver serves skiff's Kubernetes API over etcd: HTTPS on --secure-port with
// the certificates of a `skiff pki init` directory, client certificates and bootstrap
// tokens for authentication. Mirrors kube-apiserver's main flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/internal/tracing"
)

func main() {
	etcdServers := flag.String("etcd-servers", "http://127.0.0.1:2379", "comma-separated etcd client URLs")
	bindAddress := flag.String("bind-address", "0.0.0.0", "address the API listens on")
	securePort := flag.Int("secure-port", 6443, "HTTPS port of the API")
	pkiDir := flag.String("pki-dir", "/var/lib/skiff/pki", "`skiff pki init` directory: CA, apiserver and front-proxy-client certificates, bootstrap tokens")
	natsURL := flag.String("nats-url", "", "NATS URL whose JetStream EVENTS stream the apiserver persists (\"\" = events arrive by POST only)")
	execProxyURL := flag.String("exec-proxy-url", "", "exec-proxy base URL for pods/exec, attach, portforward and log, e.g. https://exec-proxy:10443 (\"\" = those answer 503)")
	logLevel := flag.String("log-level", "info", "debug, info, warn or error")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "apiserver: --log-level: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *etcdServers, net.JoinHostPort(*bindAddress, strconv.Itoa(*securePort)), *pkiDir, *natsURL, *execProxyURL); err != nil {
		logger.Error("apiserver stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, etcdServers, addr, pkiDir, natsURL, execProxyURL string) error {
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "apiserver"})
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// The etcd client reconnects on its own; the watch caches retry until etcd answers.
	etcd, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(etcdServers, ","),
		DialTimeout: 5 * time.Second,
		Logger:      nil,
		DialOptions: []grpc.DialOption{tracing.GRPCClientOption(tp)},
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()
	cfg, err := apiserver.ConfigFromPKI(pkiDir, etcd)
	if err != nil {
		return err
	}
	cfg.NATSURL, cfg.ExecProxyURL = natsURL, execProxyURL
	cfg.TracerProvider = tp
	api, err := apiserver.New(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	slog.Info("serving the API", "address", "https://"+l.Addr().String(), "etcd", etcdServers)
	return api.Serve(ctx, l)
}
