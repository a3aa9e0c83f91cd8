// Package bench measures pod throughput and startup latency against any
// Kubernetes-compatible apiserver, through client-go only: N pods created by C
// concurrent clients, followed by one watch until every pod is Running. It mirrors what
// Kubernetes' scalability tests call pod startup latency (create call → Running seen by a
// watch), so the same run against skiff and against kube-apiserver compares like with
// like.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Config is one run.
type Config struct {
	// Client reaches the apiserver; it should carry no client-side rate limit (QPS < 0).
	Client kubernetes.Interface
	// Namespace holds the pods; it is created if missing and its pods are deleted at
	// the end with one DeleteCollection.
	Namespace string
	// Pods is how many pods to create; Creators how many clients create them at once.
	Pods, Creators int
	// Image is the pods' image (any name works on simulated nodes).
	Image string
	// Processes are control-plane processes whose peak RSS and CPU time are reported,
	// by name; each PID must be readable in /proc.
	Processes map[string]int
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// Result is one run's figures, written as one JSON line. Durations are in milliseconds.
type Result struct {
	Pods     int `json:"pods"`
	Creators int `json:"creators"`
	// Errors counts failed creates.
	Errors int `json:"errors"`
	// Nodes counts the distinct nodes the pods were bound to.
	Nodes int `json:"nodes"`
	// Seconds runs from the first create call to the last pod seen Running.
	Seconds float64 `json:"seconds"`
	// PodsPerSecond is Pods / Seconds.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// StartupMs are percentiles of create call → Running seen by the watch.
	StartupMs Percentiles `json:"startupMs"`
	// SchedulingMs are percentiles of create call → bound (spec.nodeName) seen by the watch.
	SchedulingMs Percentiles `json:"schedulingMs"`
	// ListAllPodsMs is one LIST of every pod in the cluster after the run, unpaged and
	// consistent (resourceVersion ""; kube-apiserver 1.31+ and skiff answer it from the
	// watch cache once it has caught up with etcd).
	ListAllPodsMs float64 `json:"listAllPodsMs"`
	// DeleteCollectionMs is deleting the run's pods with one DeleteCollection call
	// (the pods are then terminating; their removal is the kubelets' work).
	DeleteCollectionMs float64 `json:"deleteCollectionMs"`
	// AllGoneMs is from that call until the namespace holds no pod: the kubelets have
	// stopped every pod and deleted it (polled every 200 ms).
	AllGoneMs float64 `json:"allGoneMs"`
	// SettledMs is from the last pod gone until the measured processes were quiet
	// (quietCPU): what the run left them to do, such as events still to be stored, is
	// then done. 0 without Processes.
	SettledMs float64 `json:"settledMs,omitempty"`
	// Processes are the peak RSS (MiB) and CPU seconds of each named process, read once
	// the run's pods are gone and the processes have settled: the peak is the process's
	// since it started, the CPU seconds are those of this run alone (first create until
	// settled; cpuSecondsToRunning to the last pod Running).
	Processes map[string]ProcessUsage `json:"processes,omitempty"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// ProcessUsage is one process's resource use: its peak resident set in MiB (VmHWM) and
// CPU time in seconds (user + system).
type ProcessUsage struct {
	PeakRSSMiB float64 `json:"peakRssMiB"`
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUSecondsToRunning is the CPU time from the first create until every pod was
	// seen Running: the creation alone, without the LIST and the deletion. Unset in
	// ReadProcessUsage's answer.
	CPUSecondsToRunning float64 `json:"cpuSecondsToRunning,omitempty"`
}

// Run creates cfg.Pods pods, waits until all are Running, and measures. When only the
// final DeleteCollection fails, the result so far is returned with the error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Pods <= 0 || cfg.Creators <= 0 {
		return nil, errors.New("bench: Pods and Creators must be positive")
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	pods := cfg.Client.CoreV1().Pods(cfg.Namespace)
	if _, err := cfg.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return nil, fmt.Errorf("bench: namespace: %w", err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("bench: list: %w", err)
	}
	if len(list.Items) > 0 {
		return nil, fmt.Errorf("bench: namespace %s already holds %d pods", cfg.Namespace, len(list.Items))
	}
	var mu sync.Mutex
	created := make(map[string]time.Time, cfg.Pods)
	seen := newObservations(cfg.Pods)
	watchDone := make(chan error, 1)
	go func() { watchDone <- seen.follow(ctx, pods, list.ResourceVersion, cfg.Pods) }()

	before := map[string]ProcessUsage{}
	for name, pid := range cfg.Processes {
		if before[name], err = ReadProcessUsage(pid); err != nil {
			return nil, fmt.Errorf("bench: process %s (%d): %w", name, pid, err)
		}
	}
	start := time.Now()
	names := make(chan int)
	errCount := 0
	var wg sync.WaitGroup
	for range cfg.Creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				name := fmt.Sprintf("bench-%d", i)
				t := time.Now()
				_, err := pods.Create(ctx, benchPod(name, cfg.Image), metav1.CreateOptions{})
				mu.Lock()
				if err != nil {
					errCount++
				} else {
					created[name] = t
				}
				mu.Unlock()
			}
		}()
	}
	for i := range cfg.Pods {
		names <- i
	}
	close(names)
	wg.Wait()
	if errCount == cfg.Pods {
		return nil, errors.New("bench: every create failed")
	}
	seen.expect(cfg.Pods - errCount)
	if err := <-watchDone; err != nil {
		return nil, err
	}
	atRunning := map[string]ProcessUsage{}
	for name, pid := range cfg.Processes {
		if atRunning[name], err = ReadProcessUsage(pid); err != nil {
			return nil, fmt.Errorf("bench: process %s (%d): %w", name, pid, err)
		}
	}
	res := &Result{Pods: cfg.Pods, Creators: cfg.Creators, Errors: errCount, Nodes: len(seen.nodes)}
	var startup, scheduling []float64
	last := start
	for name, t := range created {
		running, bound := seen.running[name], seen.bound[name]
		startup = append(startup, ms(running.Sub(t)))
		scheduling = append(scheduling, ms(bound.Sub(t)))
		if running.After(last) {
			last = running
		}
	}
	res.Seconds = last.Sub(start).Seconds()
	res.PodsPerSecond = float64(len(created)) / res.Seconds
	res.StartupMs, res.SchedulingMs = percentiles(startup), percentiles(scheduling)

	t := time.Now()
	if _, err := cfg.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		return nil, fmt.Errorf("bench: list all pods: %w", err)
	}
	res.ListAllPodsMs = ms(time.Since(t))
	t = time.Now()
	deleteErr := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	res.DeleteCollectionMs = ms(time.Since(t))
	if deleteErr == nil {
		if deleteErr = waitGone(ctx, pods); deleteErr == nil {
			res.AllGoneMs = ms(time.Since(t))
		}
	}
	if deleteErr == nil && len(cfg.Processes) > 0 {
		t = time.Now()
		if err := waitQuiet(ctx, cfg.Processes); err != nil {
			return nil, err
		}
		res.SettledMs = ms(time.Since(t))
	}
	res.Processes = map[string]ProcessUsage{}
	for name, pid := range cfg.Processes {
		usage, err := ReadProcessUsage(pid)
		if err != nil {
			return nil, fmt.Errorf("bench: process %s (%d): %w", name, pid, err)
		}
		usage.CPUSeconds -= before[name].CPUSeconds
		usage.CPUSecondsToRunning = atRunning[name].CPUSeconds - before[name].CPUSeconds
		res.Processes[name] = usage
	}
	if deleteErr != nil {
		res.DeleteCollectionMs = 0
		return res, fmt.Errorf("bench: delete the pods: %w", deleteErr)
	}
	return res, nil
}

// waitGone polls, every 200 ms, until pods (the run's namespace) holds no pod (a paged
// list of one, so each poll is cheap), or ctx ends.
func waitGone(ctx context.Context, pods podClient) error {
	for {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return fmt.Errorf("wait until the pods are gone: %w", err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait until the pods are gone: %d or more left: %w", len(list.Items), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// quietCPU is the CPU use, in cores, under which a process counts as quiet over a
// quietWindow; idle, skiff and 100 hollow nodes each use a few hundredths of a core
// (Leases, node status). A process not quiet after settleTimeout is read as it is.
const (
	quietCPU      = 0.1
	quietWindow   = time.Second
	settleTimeout = time.Minute
)

// waitQuiet returns once every process in pids used less than quietCPU cores over the
// same quietWindow, or after settleTimeout; an error only when one cannot be read or
// ctx ends.
func waitQuiet(ctx context.Context, pids map[string]int) error {
	read := func() (map[string]float64, error) {
		cpu := map[string]float64{}
		for name, pid := range pids {
			usage, err := ReadProcessUsage(pid)
			if err != nil {
				return nil, fmt.Errorf("bench: process %s (%d): %w", name, pid, err)
			}
			cpu[name] = usage.CPUSeconds
		}
		return cpu, nil
	}
	deadline := time.Now().Add(settleTimeout)
	prev, err := read()
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: wait until the processes are quiet: %w", ctx.Err())
		case <-time.After(quietWindow):
		}
		cur, err := read()
		if err != nil {
			return err
		}
		quiet := true
		for name := range pids {
			if cur[name]-prev[name] >= quietCPU*quietWindow.Seconds() {
				quiet = false
			}
		}
		if quiet {
			return nil
		}
		prev = cur
	}
	return nil
}

// benchPod is a pod any node can run: it tolerates every taint (kwok's simulated nodes
// are tainted) and asks for little.
func benchPod(name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "c", Image: image, Command: []string{"sleep", "3600"}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
}

// observations are the moments the watch saw each pod bound and Running.
type observations struct {
	bound, running map[string]time.Time
	nodes          map[string]bool
	want           chan int
}

func newObservations(n int) *observations {
	return &observations{bound: make(map[string]time.Time, n), running: make(map[string]time.Time, n), nodes: map[string]bool{}, want: make(chan int, 1)}
}

// expect tells follow how many pods were created, once creation is over.
func (o *observations) expect(n int) { o.want <- n }

// follow records events until as many pods as expected are Running. Like a reflector,
// it watches again from the last resourceVersion it saw when the apiserver ends the
// watch (kube-apiserver and skiff's both end a watcher that falls behind), and lists
// again when that resourceVersion is gone (410).
func (o *observations) follow(ctx context.Context, pods podClient, resourceVersion string, max int) error {
	want := max
	wantKnown, relist := false, false
	var w watch.Interface
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	for {
		if wantKnown && len(o.running) >= want {
			return nil
		}
		if w == nil && relist {
			list, err := pods.List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("bench: list again: %w", err)
			}
			for i := range list.Items {
				o.observe(&list.Items[i])
			}
			resourceVersion, relist = list.ResourceVersion, false
		}
		if w == nil {
			var err error
			w, err = pods.Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				relist = true
				continue
			}
			if err != nil {
				return fmt.Errorf("bench: watch: %w", err)
			}
		}
		select {
		case n := <-o.want:
			want, wantKnown = n, true
		case <-ctx.Done():
			return fmt.Errorf("bench: %d of %d pods Running when time ran out: %w", len(o.running), want, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				w.Stop()
				w = nil
				continue
			}
			if ev.Type == watch.Error {
				if status, isStatus := ev.Object.(*metav1.Status); isStatus && status.Code == 410 {
					relist = true
				}
				w.Stop()
				w = nil
				continue
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			resourceVersion = pod.ResourceVersion
			if ev.Type != watch.Bookmark {
				o.observe(pod)
			}
		}
	}
}

// observe records the moment pod is first seen bound and first seen Running.
func (o *observations) observe(pod *corev1.Pod) {
	now := time.Now()
	if _, ok := o.bound[pod.Name]; !ok && pod.Spec.NodeName != "" {
		o.bound[pod.Name] = now
		o.nodes[pod.Spec.NodeName] = true
	}
	if _, ok := o.running[pod.Name]; !ok && pod.Status.Phase == corev1.PodRunning {
		o.running[pod.Name] = now
	}
}

// podClient is what follow needs of a namespace's pods.
type podClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentiles of values (milliseconds), nearest rank.
func percentiles(values []float64) Percentiles {
	if len(values) == 0 {
		return Percentiles{}
	}
	sort.Float64s(values)
	at := func(p float64) float64 {
		i := int(p*float64(len(values))+0.5) - 1
		return values[max(0, min(i, len(values)-1))]
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// ReadProcessUsage reads a process's peak resident set (VmHWM in /proc/PID/status) and
// its user+system CPU time (/proc/PID/stat, in clock ticks of 1/100 s).
func ReadProcessUsage(pid int) (ProcessUsage, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcessUsage{}, err
	}
	var usage ProcessUsage
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				return ProcessUsage{}, fmt.Errorf("VmHWM %q: %w", v, err)
			}
			usage.PeakRSSMiB = kib / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcessUsage{}, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces:
	// utime and stime are fields 14 and 15 of the whole line.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return ProcessUsage{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return ProcessUsage{}, err
	}
	usage.CPUSeconds = (utime + stime) / 100
	return usage, nil
}
