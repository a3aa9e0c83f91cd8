// Package faults is skiff's fault matrix: compose.yaml's full stack with
// simulated-runtime kubelets, and, for each fault in turn, pods created by 20 client-go
// clients while the fault strikes: kill -9 of the apiserver, etcd, the scheduler leader,
// the controller-manager leader, the csr-signer, NATS and a kubelet; etcd paused for
// 20 s; a kubelet cut off the network for 60 s. After each it checks, from etcd's own
// history of the pods' keys, that every pod a client got a 201 for exists exactly once,
// was bound at most once and runs; that no client saw a 5xx other than 503/504 with
// Retry-After; that watches started before the fault resumed from their resourceVersion
// and delivered exactly etcd's events. It prints the table README "What survives what"
// summarises.
//
// It runs only with SKIFF_FAULTS_TEST=1 (`make test-faults`). Knobs (environment):
// FAULTS_PODS pods a row (default 90: CI), FAULTS_KUBELETS (3), FAULTS_CLIENTS (20),
// FAULTS_CREATE_SECONDS over which a row's pods are created (15), FAULTS_ONLY a regular
// expression choosing rows by name. The full run is FAULTS_PODS=1000 with
// FAULTS_KUBELETS=10 (each kubelet takes 110 pods, as kube's default --max-pods).
package faults

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"skiff.dev/tests/internal/composetest"
)

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// matrix is one run of the fault matrix on one stack.
type matrix struct {
	s        *composetest.Stack
	etcd     *etcdHistory
	pods     int
	clients  int
	window   time.Duration
	kubelets int
}

// fault is one row: inject strikes and returns end, which undoes the fault (starts the
// killed container again, unpauses, reconnects) and returns once it has.
type fault struct {
	name   string
	inject func(m *matrix, t *testing.T) (end func())
}

// row is the outcome of one fault, a line of the table.
type row struct {
	fault                         string
	created, lost, dup, dblBound  int
	notRunning, badStatus, watchD int
	recovery                      time.Duration
	statuses                      string
}

func TestFaultMatrix(t *testing.T) {
	if os.Getenv("SKIFF_FAULTS_TEST") != "1" {
		t.Skip("the fault matrix runs with SKIFF_FAULTS_TEST=1 (make test-faults)")
	}
	m := &matrix{
		pods:     envInt(t, "FAULTS_PODS", 90),
		clients:  envInt(t, "FAULTS_CLIENTS", 20),
		window:   time.Duration(envInt(t, "FAULTS_CREATE_SECONDS", 15)) * time.Second,
		kubelets: envInt(t, "FAULTS_KUBELETS", 3),
	}
	only := regexp.MustCompile(os.Getenv("FAULTS_ONLY"))
	m.s = composetest.New(t, composetest.Options{Runtime: "sim", Kubelets: m.kubelets})
	m.s.Up(t)
	m.etcd = newEtcdHistory(t, m.s)

	faults := []fault{
		{"kill -9 apiserver", killService("apiserver")},
		{"kill -9 etcd", killService("etcd")},
		{"kill -9 scheduler leader", killLeader("scheduler", "kube-scheduler")},
		{"kill -9 controller-manager leader", killLeader("controller-manager", "kube-controller-manager")},
		{"kill -9 csr-signer", killService("csr-signer")},
		{"kill -9 nats", killService("nats")},
		{"kill -9 kubelet", killService("kubelet")},
		{"pause etcd 20s", pauseEtcd(20 * time.Second)},
		{"partition kubelet 60s", partitionKubelet(60 * time.Second)},
	}
	var rows []row
	for i, f := range faults {
		if !only.MatchString(f.name) {
			continue
		}
		r := row{fault: f.name}
		ok := t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) { m.run(t, i, f, &r) })
		rows = append(rows, r)
		if !ok && m.s.Ctx.Err() != nil {
			break
		}
	}
	table := formatTable(m, rows)
	fmt.Print(table)
	t.Log("\n" + table)
}

func formatTable(m *matrix, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nfault matrix: %d pods a row from %d clients over %s, %d sim kubelets\n", m.pods, m.clients, m.window, m.kubelets)
	fmt.Fprintf(&b, "%-34s %8s %5s %11s %12s %11s %9s %12s %9s  %s\n", "fault", "created", "lost", "duplicated", "double bound", "not Running", "bad 5xx", "watch diffs", "recovery", "responses")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-34s %8d %5d %11d %12d %11d %9d %12d %9s  %s\n", r.fault, r.created, r.lost, r.dup, r.dblBound, r.notRunning, r.badStatus, r.watchD, r.recovery.Round(100*time.Millisecond), r.statuses)
	}
	return b.String()
}

// killService kills (SIGKILL) the first container of a compose service and, as its end,
// starts it again.
func killService(service string) func(*matrix, *testing.T) func() {
	return func(m *matrix, t *testing.T) func() {
		id := m.s.Containers(t, service)[0]
		return m.kill(t, id)
	}
}

func (m *matrix) kill(t *testing.T, id string) func() {
	m.s.Docker(t, "kill", "--signal", "KILL", id)
	return func() {
		// The restart policy (on-failure) may have started it already; start is then a no-op.
		m.s.Docker(t, "start", id)
	}
}

// killLeader kills the replica of service that holds the kube-system Lease lease
// (holderIdentity "<hostname>_<uuid>", the hostname a container's short ID).
func killLeader(service, lease string) func(*matrix, *testing.T) func() {
	return func(m *matrix, t *testing.T) func() {
		l, err := m.s.Client.CoordinationV1().Leases("kube-system").Get(m.s.Ctx, lease, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("lease %s: %v", lease, err)
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		host, _, _ := strings.Cut(holder, "_")
		for _, id := range m.s.Containers(t, service) {
			if host != "" && strings.HasPrefix(id, host) {
				t.Logf("%s leader: %s (container %.12s)", service, holder, id)
				return m.kill(t, id)
			}
		}
		t.Fatalf("lease %s holder %q is none of the %s containers", lease, holder, service)
		return nil
	}
}

func pauseEtcd(d time.Duration) func(*matrix, *testing.T) func() {
	return func(m *matrix, t *testing.T) func() {
		id := m.s.Containers(t, "etcd")[0]
		m.s.Docker(t, "pause", id)
		return func() {
			m.sleep(d)
			m.s.Docker(t, "unpause", id)
		}
	}
}

func partitionKubelet(d time.Duration) func(*matrix, *testing.T) func() {
	return func(m *matrix, t *testing.T) func() {
		ids := m.s.Containers(t, "kubelet")
		id := ids[len(ids)-1]
		m.s.Docker(t, "network", "disconnect", m.s.Network(), id)
		return func() {
			m.sleep(d)
			m.s.Docker(t, "network", "connect", m.s.Network(), id)
		}
	}
}

func (m *matrix) sleep(d time.Duration) {
	select {
	case <-m.s.Ctx.Done():
	case <-time.After(d):
	}
}

// responses counts the HTTP answers the creating clients got, by status code, and the
// ones a client must never see.
type responses struct {
	mu              sync.Mutex
	codes           map[int]int
	transportErrors int
	bad             []string
}

func (r *responses) RoundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := next.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.transportErrors++ // refused, reset, timed out: the peer is down, not a status
		return resp, err
	}
	r.codes[resp.StatusCode]++
	retryAfter := resp.Header.Get("Retry-After") != ""
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout || resp.StatusCode == http.StatusTooManyRequests:
		if !retryAfter {
			r.bad = append(r.bad, fmt.Sprintf("%s %s: %d without Retry-After", req.Method, req.URL.Path, resp.StatusCode))
		}
	case resp.StatusCode >= 500:
		r.bad = append(r.bad, fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode))
	}
	return resp, nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *responses) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var codes []int
	for c := range r.codes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", c, r.codes[c]))
	}
	if r.transportErrors > 0 {
		parts = append(parts, fmt.Sprintf("conn-err×%d", r.transportErrors))
	}
	return strings.Join(parts, " ")
}

// watcher is a client-go RetryWatcher on a namespace's pods from a resourceVersion: it
// re-watches from the last resourceVersion it delivered whenever the stream breaks, as
// informers do, and fails on 410 Gone.
type watcher struct {
	rw     *watchtools.RetryWatcher
	mu     sync.Mutex
	events []keyEvent
	errs   []string
	done   chan struct{}
}

func startWatcher(client kubernetes.Interface, ns, rv string) (*watcher, error) {
	lw := &cache.ListWatch{WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
		return client.CoreV1().Pods(ns).Watch(context.Background(), o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(context.Background(), rv, lw)
	if err != nil {
		return nil, err
	}
	w := &watcher{rw: rw, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range rw.ResultChan() {
			w.mu.Lock()
			switch ev.Type {
			case watch.Error:
				w.errs = append(w.errs, fmt.Sprintf("%v", apierrors.FromObject(ev.Object)))
			case watch.Bookmark:
			default:
				pod := ev.Object.(*corev1.Pod)
				rev, _ := strconv.ParseInt(pod.ResourceVersion, 10, 64)
				e := keyEvent{Type: string(ev.Type), Name: pod.Name, Revision: rev}
				if ev.Type != watch.Deleted {
					e.NodeName, e.UID = pod.Spec.NodeName, string(pod.UID)
				}
				w.events = append(w.events, e)
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

func (w *watcher) lastRevision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 {
		return 0
	}
	return w.events[len(w.events)-1].Revision
}

func (w *watcher) stop() {
	w.rw.Stop()
	<-w.done
}

// compare is how a watcher's events differ from etcd's: "" when they are the same list.
func compareEvents(got, want []keyEvent) string {
	var diffs []string
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i].String()
		}
		if i < len(want) {
			w = want[i].String()
		}
		if g != w {
			diffs = append(diffs, fmt.Sprintf("#%d: watch %q, etcd %q", i, g, w))
			if len(diffs) == 5 {
				break
			}
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("%d events watched, %d in etcd; first differences: %s", len(got), len(want), strings.Join(diffs, "; "))
}

func podSpec(name string, labels map[string]string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}},
			}},
		},
	}
}

// recover returns once every service answers again after a fault, as a user sees it:
// a ReplicaSet created now gets its pod (apiserver, controller-manager), the pod is
// bound and Running (scheduler, a kubelet), its Scheduled event arrives (scheduler →
// NATS → apiserver), kubectl exec into it answers (apiserver → exec-proxy → kubelet),
// and a CSR approved now is signed (csr-signer). Each step retries while its peer is
// not back.
func (m *matrix) recover(t *testing.T, ns string) {
	s := m.s
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"probe": ns}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"probe": ns}}, Spec: podSpec("", nil).Spec},
		},
	}
	s.Eventually(t, 3*time.Minute, 200*time.Millisecond, "create the probe ReplicaSet", func(ctx context.Context) error {
		_, err := s.Client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	var pod string
	s.Eventually(t, 4*time.Minute, 200*time.Millisecond, "the probe ReplicaSet's pod Running", func(ctx context.Context) error {
		l, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "probe=" + ns})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p.Name
				return nil
			}
		}
		return fmt.Errorf("%d probe pods, none Running", len(l.Items))
	})
	s.Eventually(t, 2*time.Minute, 500*time.Millisecond, "the probe pod's Scheduled event through NATS", func(ctx context.Context) error {
		l, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range l.Items {
			if ev.InvolvedObject.Name == pod && ev.Reason == "Scheduled" {
				return nil
			}
		}
		return fmt.Errorf("no Scheduled event for %s among %d events", pod, len(l.Items))
	})
	s.Eventually(t, 2*time.Minute, 500*time.Millisecond, "kubectl exec into the probe pod", func(ctx context.Context) error {
		out, err := s.Kubectl(ctx, "", "exec", "-n", ns, pod, "--", "echo", "back")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "back" {
			return fmt.Errorf("kubectl exec printed %q", out)
		}
		return nil
	})
	csrName := "fault-probe-" + ns
	s.Eventually(t, 2*time.Minute, 500*time.Millisecond, "a CSR approved after the fault signed", func(ctx context.Context) error {
		return m.signedCSR(ctx, csrName)
	})
}

// signedCSR creates (once) a kubernetes.io/kube-apiserver-client CSR, approves it as
// the admin, and says whether the csr-signer has issued its certificate.
func (m *matrix) signedCSR(ctx context.Context, name string) error {
	csrs := m.s.Client.CertificatesV1().CertificateSigningRequests()
	csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
		if err != nil {
			return err
		}
		csr, err = csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certificatesv1.KubeAPIServerClientSignerName,
				Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		approved = approved || c.Type == certificatesv1.CertificateApproved
	}
	if !approved {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "FaultMatrix", Message: "approved by the fault matrix",
		})
		if _, err := csrs.UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return errors.New("approved; not signed yet")
	}
	if len(csr.Status.Certificate) == 0 {
		return errors.New("approved; not signed yet")
	}
	return nil
}

// run is one row: a namespace of its own, watchers from its resourceVersion, creators
// paced over the window, the fault a third of the way in, its end, a probe ReplicaSet
// timed to Running, then the audit.
func (m *matrix) run(t *testing.T, index int, f fault, r *row) {
	s := m.s
	ctx := s.Ctx
	ns := fmt.Sprintf("fault-%d", index)
	s.Eventually(t, 2*time.Minute, time.Second, "namespace "+ns, func(ctx context.Context) error {
		_, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	// The watchers' start: the pods collection's resourceVersion now (etcd's revision).
	var startRV string
	s.Eventually(t, time.Minute, time.Second, "list "+ns, func(ctx context.Context) error {
		l, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			startRV = l.ResourceVersion
		}
		return err
	})
	start, _ := strconv.ParseInt(startRV, 10, 64)
	var watchers []*watcher
	for i := 0; i < 2; i++ {
		w, err := startWatcher(s.Client, ns, startRV)
		if err != nil {
			t.Fatal(err)
		}
		watchers = append(watchers, w)
	}
	defer func() {
		for _, w := range watchers {
			w.stop()
		}
	}()

	// Creators: m.clients clientsets, each with its own connections, pacing shared.
	resp := &responses{codes: map[int]int{}}
	limiter := flowcontrol.NewTokenBucketRateLimiter(float32(m.pods)/float32(m.window.Seconds()), 1)
	var (
		wg        sync.WaitGroup
		attempted atomic.Int64
		mu        sync.Mutex
		got201    = map[string]bool{}
		ambiguous = map[string]bool{} // created, but the 201 was lost: AlreadyExists on retry
		failed    []string
	)
	createCtx, stopCreating := context.WithTimeout(ctx, m.window+5*time.Minute)
	defer stopCreating()
	labels := map[string]string{"fault-row": strconv.Itoa(index)}
	for c := 0; c < m.clients; c++ {
		cfg := rest.CopyConfig(s.Config)
		cfg.QPS, cfg.Burst = 100, 200
		cfg.Timeout = 30 * time.Second
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return resp.RoundTrip(rt, req) })
		}
		client := kubernetes.NewForConfigOrDie(cfg)
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for k := c; k < m.pods; k += m.clients {
				name := fmt.Sprintf("p-%04d", k)
				pod := podSpec(name, labels)
				if limiter.Wait(createCtx) != nil {
					return
				}
				attempted.Add(1)
				tried := false
				for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
					_, err := client.CoreV1().Pods(ns).Create(createCtx, &pod, metav1.CreateOptions{})
					mu.Lock()
					switch {
					case err == nil:
						got201[name] = true
					case apierrors.IsAlreadyExists(err) && tried:
						ambiguous[name] = true
					case createCtx.Err() != nil:
						failed = append(failed, fmt.Sprintf("%s: %v", name, err))
					}
					mu.Unlock()
					if err == nil || (apierrors.IsAlreadyExists(err) && tried) || createCtx.Err() != nil {
						break
					}
					if apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("%s: %v", name, err))
						mu.Unlock()
						break
					}
					tried = true
					select {
					case <-createCtx.Done():
					case <-time.After(backoff):
					}
				}
			}
		}(c)
	}

	// The fault, a third of the way into the creations.
	for attempted.Load() < int64(m.pods/3) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: %d creations under way", f.name, attempted.Load())
	end := f.inject(m, t)
	end()
	ended := time.Now()
	// Recovery: from the fault's end until every service works again (see recover).
	m.recover(t, ns)
	r.recovery = time.Since(ended)

	wg.Wait()
	mu.Lock()
	r.created = len(got201) + len(ambiguous)
	if len(failed) > 0 {
		t.Errorf("%d pods never created: %v", len(failed), failed[:min(5, len(failed))])
	}
	mu.Unlock()

	// Every pod Running (the partitioned or killed kubelet's too, once back).
	var notRunning []string
	deadline := time.Now().Add(4 * time.Minute)
	for {
		l, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "fault-row=" + strconv.Itoa(index)})
		if err == nil {
			names := map[string]bool{}
			notRunning = nil
			for _, p := range l.Items {
				names[p.Name] = true
				if p.Status.Phase != corev1.PodRunning {
					notRunning = append(notRunning, p.Name+"="+string(p.Status.Phase))
				}
			}
			r.lost = 0
			for name := range got201 {
				if !names[name] {
					r.lost++
				}
			}
			if len(notRunning) == 0 {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	r.notRunning = len(notRunning)
	if r.lost > 0 {
		t.Errorf("%d pods created with a 201 are gone", r.lost)
	}
	if len(notRunning) > 0 {
		t.Errorf("%d pods not Running: %v", len(notRunning), notRunning[:min(5, len(notRunning))])
	}

	// etcd's history of the namespace's pods: created once, bound once.
	prefix := "/registry/pods/" + ns + "/"
	events := m.etcd.history(t, prefix, start)
	audit := auditPods(events)
	r.dup, r.dblBound = len(audit.duplicated), len(audit.doubleBound)
	if r.dup > 0 {
		t.Errorf("duplicated pods: %v", audit.duplicated)
	}
	if r.dblBound > 0 {
		t.Errorf("pods bound more than once: %v", audit.doubleBound)
	}
	for name := range got201 {
		if audit.created[name] != 1 {
			t.Errorf("pod %s: got a 201, its key created %d times in etcd", name, audit.created[name])
		}
	}

	// Each watcher must reach etcd's last revision and have delivered exactly its events.
	var last int64
	if len(events) > 0 {
		last = events[len(events)-1].Revision
	}
	for i, w := range watchers {
		waitUntil := time.Now().Add(time.Minute)
		for w.lastRevision() < last && time.Now().Before(waitUntil) {
			time.Sleep(200 * time.Millisecond)
		}
		w.mu.Lock()
		if len(w.errs) > 0 {
			t.Errorf("watcher %d: errors %v", i, w.errs)
			r.watchD++
		}
		if d := compareEvents(w.events, events); d != "" {
			t.Errorf("watcher %d from resourceVersion %d: %s", i, start, d)
			r.watchD++
		}
		w.mu.Unlock()
	}

	resp.mu.Lock()
	r.badStatus = len(resp.bad)
	if len(resp.bad) > 0 {
		t.Errorf("%d responses a client must not see: %v", len(resp.bad), resp.bad[:min(10, len(resp.bad))])
	}
	resp.mu.Unlock()
	r.statuses = resp.summary()
	t.Logf("%s: %d created, %d events in etcd, responses %s, recovery %s", f.name, r.created, len(events), r.statuses, r.recovery)

	// Clear the row: the ReplicaSet, then the pods at once (grace 0), so the next row
	// has the nodes' capacity.
	cleanup(t, s, ns)
}

func cleanup(t *testing.T, s *composetest.Stack, ns string) {
	s.Eventually(t, 2*time.Minute, time.Second, "delete "+ns, func(ctx context.Context) error {
		err := s.Client.AppsV1().ReplicaSets(ns).Delete(ctx, "probe", metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = s.Client.CertificatesV1().CertificateSigningRequests().Delete(ctx, "fault-probe-"+ns, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = s.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		if err != nil {
			return err
		}
		l, err := s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d pods left", len(l.Items))
		}
		return nil
	})
}
