// Command skiff-bench measures pod throughput and startup latency against any
// Kubernetes-compatible apiserver (skiff's, or kube-apiserver with simulated nodes) and
// prints one JSON line: see package bench.
//
//	skiff-bench --kubeconfig skiff-data/admin.kubeconfig --pods 5000 --creators 50 --pid skiff=$(pgrep -x skiff)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/tests/bench"
)

// pids collects repeated --pid name=PID flags.
type pids map[string]int

func (p pids) String() string { return fmt.Sprint(map[string]int(p)) }

func (p pids) Set(v string) error {
	name, pid, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || name == "" {
		return fmt.Errorf("want name=PID, got %q", v)
	}
	p[name] = n
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to measure")
	podCount := flag.Int("pods", 1000, "pods to create")
	creators := flag.Int("creators", 50, "concurrent creating clients")
	namespace := flag.String("namespace", "bench", "namespace of the pods (created if missing; must hold no pods)")
	image := flag.String("image", "registry.k8s.io/pause:3.10", "the pods' image")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on the whole run")
	processes := pids{}
	flag.Var(processes, "pid", "name=PID of a control-plane process whose peak RSS and CPU time to report (repeatable)")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	cfg.QPS = -1 // the benchmark measures the server, not a client-side token bucket
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := bench.Run(ctx, bench.Config{Client: client, Namespace: *namespace, Pods: *podCount, Creators: *creators,
		Image: *image, Processes: processes, Timeout: *timeout})
	if res != nil {
		_ = json.NewEncoder(os.Stdout).Encode(res)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "skiff-bench:", err)
	os.Exit(1)
}
