// Package overload floods the all-in-one skiff (the binary `make run` starts) with
// read-only requests from one service account and checks that the apiserver's API
// Priority and Fairness sheds them with 429 TooManyRequests and Retry-After from that
// user's own priority level (workload-low, by the service-accounts FlowSchema) while
// the nodes' kubelets keep renewing their Leases (node-high) and the scheduler keeps
// binding pods (workload-high): no node goes NotReady and nothing crashes.
package overload

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/tests/internal/skifftest"
)

const (
	// floodClients LISTs run at once, each sending its next as soon as one returns, for
	// floodDuration: long enough for every kubelet to renew its Lease (every 10 s, a
	// quarter of the 40 s lease) at least twice under the flood.
	floodClients  = 2000
	floodDuration = 30 * time.Second
	// baselineDuration is watched before the flood, for figures to compare with.
	baselineDuration = 25 * time.Second
	hollowNodes      = 3
	// leaseDuration is the kubelets' node Lease duration: a renewal gap beyond it lets
	// the node lifecycle controller mark the node NotReady.
	leaseDuration = 40 * time.Second
)

var skiffBinary string

func TestMain(m *testing.M) { skifftest.Main(m, &skiffBinary) }

// TestListFloodFromOneUser: 2,000 concurrent LISTs from one service account for 30 s
// against an all-in-one with a kubelet and three hollow kubelets.
func TestListFloodFromOneUser(t *testing.T) {
	c := startSkiff(t, "--runtime", "sim", "--hollow-nodes", fmt.Sprint(hollowNodes))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nodes := []string{"overload"}
	for i := range hollowNodes {
		nodes = append(nodes, fmt.Sprintf("hollow-%d", i))
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range nodes {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !nodeReady(node) {
				return false, n + " is not Ready"
			}
			if _, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})

	// The probe pods need the default ServiceAccount (the controller-manager makes it).
	eventually(t, time.Minute, func() (bool, string) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Something to list: 100 ConfigMaps of 4 KiB.
	for i := range 100 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%d", i)},
			Data: map[string]string{"v": strings.Repeat("x", 4096)}}
		if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	flooder := floodClient(t, ctx, c)

	// Watch the Leases and probe the apiserver as the admin for a baseline window, then
	// through the flood.
	mon := &leaseMonitor{client: c.Client, nodes: nodes, renewals: map[string][]time.Time{}}
	monCtx, stopMon := context.WithCancel(ctx)
	monDone := make(chan struct{})
	go func() { defer close(monDone); mon.run(monCtx) }()
	baselineStart := time.Now()
	time.Sleep(baselineDuration)

	start := time.Now()
	// The scheduler is asked to bind a pod every schedulingProbeInterval of the flood.
	scheduling := &schedulingProbe{client: c.Client, created: map[string]time.Time{}, bound: map[string]time.Time{}}
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); scheduling.run(probeCtx, start.Add(floodDuration)) }()
	res := flood(ctx, flooder, c.RESTConfig.Host+"/api/v1/configmaps")
	end := time.Now()
	stopMon()
	<-monDone
	stopProbe()
	<-probeDone

	select {
	case <-c.Exited:
		t.Fatalf("skiff exited during the flood: %v", c.ExitErr)
	default:
	}
	if _, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Errorf("readyz after the flood: %v", err)
	}

	t.Logf("flood: %d LISTs in %v from %d clients: %d OK, %d 429 (%d without Retry-After), %d other statuses %v, %d transport errors (first: %v)",
		res.total(), end.Sub(start).Round(time.Second), floodClients, res.ok.Load(), res.tooMany.Load(), res.noRetryAfter.Load(),
		res.otherCount(), res.otherStatuses(), res.transportErrors.Load(), res.firstTransportError())
	t.Logf("kubelet lease update failures logged: %d", strings.Count(c.Logs.String(), "failed to update lease"))
	for _, w := range []struct {
		name     string
		from, to time.Time
	}{{"baseline", baselineStart, start}, {"flood", start, end}} {
		p50, p99, max := mon.probeLatency(w.from, w.to)
		t.Logf("%s (%v): admin lease GET latency p50 %v, p99 %v, max %v", w.name, w.to.Sub(w.from).Round(time.Second), p50, p99, max)
		for _, n := range nodes {
			count, gap := mon.renewalsIn(n, w.from, w.to)
			t.Logf("%s: lease %s renewed %d times, largest renewTime gap %v", w.name, n, count, gap.Round(time.Millisecond))
		}
	}
	names := pfNames(t, ctx, c.Client)
	for cl, n := range res.classifiedCounts() {
		t.Logf("flood: %d responses %d classified by FlowSchema %s, priority level %s", n, cl.code, names[cl.flowSchema], names[cl.priority])
		if cl.code == http.StatusTooManyRequests && (names[cl.flowSchema] != "service-accounts" || names[cl.priority] != "workload-low") {
			t.Errorf("%d 429s classified by FlowSchema %q, priority level %q; want the flooding service account's service-accounts and workload-low", n, names[cl.flowSchema], names[cl.priority])
		}
	}
	for _, p := range scheduling.results() {
		if p.bound.IsZero() {
			t.Errorf("pod %s, created %v into the flood, was not bound by its end", p.name, p.created.Sub(start).Round(time.Second))
			continue
		}
		t.Logf("pod %s, created %v into the flood, bound in %v", p.name, p.created.Sub(start).Round(time.Second), p.bound.Sub(p.created).Round(time.Millisecond))
	}
	if res.tooMany.Load() == 0 {
		t.Errorf("the flood saw no 429")
	}
	if res.noRetryAfter.Load() > 0 {
		t.Errorf("%d 429 responses without Retry-After", res.noRetryAfter.Load())
	}
	if res.otherCount() > 0 {
		t.Errorf("statuses other than 200 and 429: %v", res.otherStatuses())
	}
	if res.ok.Load() == 0 {
		t.Errorf("no LIST of the flood succeeded")
	}
	if nr := mon.notReadyNodes(); len(nr) > 0 {
		t.Errorf("nodes went NotReady: %v", nr)
	}
	for _, n := range nodes {
		// A renewal every 10 s: at least two in the 30 s flood.
		count, gap := mon.renewalsIn(n, start, end)
		if count < 2 {
			t.Errorf("lease %s renewed %d times during the %v flood, want at least 2", n, count, end.Sub(start))
		}
		if gap >= leaseDuration {
			t.Errorf("lease %s went %v without renewal, beyond its %v duration", n, gap, leaseDuration)
		}
	}
}

// floodClient is an HTTP client authenticating as the service account default/flood,
// allowed to list ConfigMaps cluster-wide: an ordinary service account, whose requests
// the service-accounts FlowSchema puts in the workload-low priority level.
func floodClient(t *testing.T, ctx context.Context, c *skifftest.Cluster) *http.Client {
	t.Helper()
	sa, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "flood"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "flood"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flood"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flood"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: sa.Name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: c.RESTConfig.CAData, CAFile: c.RESTConfig.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	// A plain HTTP/2 transport: client-go's adds a connection health check (a ping
	// after 30 s without a frame) that would end a starved connection client-side.
	transport := &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Timeout: 60 * time.Second, Transport: bearer{token: tr.Status.Token, next: transport}}
	// The service account can list before the flood starts (RBAC is in place).
	eventually(t, 30*time.Second, func() (bool, string) {
		resp, err := client.Get(c.RESTConfig.Host + "/api/v1/configmaps?limit=1")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return client
}

// bearer adds an Authorization: Bearer header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

type floodResult struct {
	ok, tooMany, noRetryAfter, transportErrors atomic.Int64
	mu                                         sync.Mutex
	other                                      map[int]int
	firstErr                                   error
	// classified counts the responses by status and the FlowSchema and priority level
	// UIDs their X-Kubernetes-PF-* headers name.
	classified map[classification]int
}

// classification is a response's status and API Priority and Fairness headers.
type classification struct {
	code                 int
	flowSchema, priority string
}

func (r *floodResult) total() int64 {
	return r.ok.Load() + r.tooMany.Load() + int64(r.otherCount()) + r.transportErrors.Load()
}

func (r *floodResult) otherCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.other {
		n += c
	}
	return n
}

func (r *floodResult) otherStatuses() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps(r.other)
}

func (r *floodResult) classifiedCounts() map[classification]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[classification]int, len(r.classified))
	for k, v := range r.classified {
		out[k] = v
	}
	return out
}

func (r *floodResult) firstTransportError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstErr
}

func maps(m map[int]int) map[int]int {
	out := make(map[int]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// flood runs floodClients loops of GET url for floodDuration. A 429 is not retried
// after Retry-After: the flood is a client that ignores it.
func flood(ctx context.Context, client *http.Client, url string) *floodResult {
	res := &floodResult{other: map[int]int{}, classified: map[classification]int{}}
	deadline := time.Now().Add(floodDuration)
	var wg sync.WaitGroup
	for range floodClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				resp, err := client.Get(url)
				if err != nil {
					res.transportErrors.Add(1)
					res.mu.Lock()
					if res.firstErr == nil {
						res.firstErr = err
					}
					res.mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				c := classification{code: resp.StatusCode,
					flowSchema: resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID),
					priority:   resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)}
				res.mu.Lock()
				res.classified[c]++
				res.mu.Unlock()
				switch resp.StatusCode {
				case http.StatusOK:
					res.ok.Add(1)
				case http.StatusTooManyRequests:
					res.tooMany.Add(1)
					if resp.Header.Get("Retry-After") == "" {
						res.noRetryAfter.Add(1)
					}
				default:
					res.mu.Lock()
					res.other[resp.StatusCode]++
					res.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return res
}

// leaseMonitor watches the nodes' Leases as the admin (system:masters: API Priority and
// Fairness's exempt level), so it sees every renewal however slow a LIST would be;
// every 500 ms it GETs one Lease and the Nodes as the admin, recording the GET's latency
// and any node that is not Ready.
type leaseMonitor struct {
	client kubernetes.Interface
	nodes  []string

	mu       sync.Mutex
	renewals map[string][]time.Time // renewTimes seen, in order
	probes   []probe
	notReady []string
}

type probe struct {
	at      time.Time
	latency time.Duration
}

func (m *leaseMonitor) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.watchLeases(ctx)
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		at := time.Now()
		_, err := m.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, m.nodes[0], metav1.GetOptions{})
		latency := time.Since(at)
		nodes, nerr := m.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		m.mu.Lock()
		if err == nil {
			m.probes = append(m.probes, probe{at: at, latency: latency})
		}
		if nerr == nil {
			for i := range nodes.Items {
				n := &nodes.Items[i]
				if !nodeReady(n) && !slices.Contains(m.notReady, n.Name) {
					m.notReady = append(m.notReady, n.Name)
				}
			}
		}
		m.mu.Unlock()
	}
}

// watchLeases follows the kube-node-lease namespace, watching again from the last
// resourceVersion if the watch ends.
func (m *leaseMonitor) watchLeases(ctx context.Context) {
	rv := ""
	for ctx.Err() == nil {
		w, err := m.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Spec.RenewTime == nil || !slices.Contains(m.nodes, l.Name) {
				continue
			}
			rv = l.ResourceVersion
			m.mu.Lock()
			times := m.renewals[l.Name]
			if len(times) == 0 || l.Spec.RenewTime.After(times[len(times)-1]) {
				m.renewals[l.Name] = append(times, l.Spec.RenewTime.Time)
			}
			m.mu.Unlock()
		}
		w.Stop()
	}
}

// renewalsIn counts node's renewals with a renewTime in [from, to) and the largest gap
// before one of them (or from the last renewal to to).
func (m *leaseMonitor) renewalsIn(node string, from, to time.Time) (int, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var count int
	var gap time.Duration
	times := m.renewals[node]
	last := time.Time{}
	for _, r := range times {
		if !r.Before(from) && r.Before(to) {
			count++
			if !last.IsZero() {
				gap = max(gap, r.Sub(last))
			}
		}
		if r.Before(to) {
			last = r
		}
	}
	if !last.IsZero() {
		gap = max(gap, to.Sub(last))
	}
	return count, gap
}

// probeLatency is the p50, p99 and max latency of the probes sent in [from, to).
func (m *leaseMonitor) probeLatency(from, to time.Time) (p50, p99, max time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var l []time.Duration
	for _, p := range m.probes {
		if !p.at.Before(from) && p.at.Before(to) {
			l = append(l, p.latency)
		}
	}
	if len(l) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return r(l[len(l)/2]), r(l[len(l)*99/100]), r(l[len(l)-1])
}

func (m *leaseMonitor) notReadyNodes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.notReady)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pfNames maps the UIDs of the FlowSchemas and PriorityLevelConfigurations to their
// names.
func pfNames(t *testing.T, ctx context.Context, client kubernetes.Interface) map[string]string {
	t.Helper()
	names := map[string]string{}
	schemas, err := client.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range schemas.Items {
		names[string(fs.UID)] = fs.Name
	}
	levels, err := client.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range levels.Items {
		names[string(pl.UID)] = pl.Name
	}
	return names
}

// schedulingProbeInterval is how often schedulingProbe creates a pod.
const schedulingProbeInterval = 5 * time.Second

// schedulingProbe creates a pod (as the admin) every schedulingProbeInterval until
// schedulingProbeInterval before deadline and records when the scheduler binds each,
// from a watch of the probe pods.
type schedulingProbe struct {
	client kubernetes.Interface

	mu      sync.Mutex
	names   []string
	created map[string]time.Time
	bound   map[string]time.Time
}

type scheduledPod struct {
	name           string
	created, bound time.Time
}

func (p *schedulingProbe) run(ctx context.Context, deadline time.Time) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.watch(ctx)
	}()
	for i := 0; time.Now().Add(schedulingProbeInterval).Before(deadline); i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(schedulingProbeInterval):
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-probe-%d", i), Labels: map[string]string{"probe": "flood"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		at := time.Now()
		if _, err := p.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			continue
		}
		p.mu.Lock()
		p.names = append(p.names, pod.Name)
		p.created[pod.Name] = at
		p.mu.Unlock()
	}
	<-ctx.Done()
}

// watch records the first time each probe pod is seen with a node.
func (p *schedulingProbe) watch(ctx context.Context) {
	rv := ""
	for ctx.Err() == nil {
		w, err := p.client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "probe=flood", ResourceVersion: rv})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = pod.ResourceVersion
			if pod.Spec.NodeName == "" {
				continue
			}
			p.mu.Lock()
			if _, seen := p.bound[pod.Name]; !seen {
				p.bound[pod.Name] = time.Now()
			}
			p.mu.Unlock()
		}
		w.Stop()
	}
}

func (p *schedulingProbe) results() []scheduledPod {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]scheduledPod, 0, len(p.names))
	for _, n := range p.names {
		out = append(out, scheduledPod{name: n, created: p.created[n], bound: p.bound[n]})
	}
	return out
}

// startSkiff runs the skiff binary on free ports with node name "overload" and warnings
// only in its log, and stops it when the test ends.
func startSkiff(t *testing.T, extraArgs ...string) *skifftest.Cluster {
	return skifftest.Start(t, skiffBinary, append([]string{"--node-name", "overload", "--log-level", "warn"}, extraArgs...)...)
}

// eventually polls cond every 200 ms until it returns true or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("condition not met within %s: %s", timeout, why)
}
