// Package clientgo drives the skiff apiserver with client-go's own machinery (shared
// informers, field-selected informers, leader election) with client-go's default
// settings, and checks that every informer converges to etcd's contents across an
// apiserver restart and across etcd compactions.
package clientgo

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

const (
	nodeCount = 50
	podCount  = 200
)

// listCounter counts the pod LISTs (and watch-lists) each informer sends, by field
// selector ("" for the shared informer): a second one is a relist. It also notes when
// the last pod watch was started.
type listCounter struct {
	mu        sync.Mutex
	lists     map[string]int
	lastWatch time.Time
	next      http.RoundTripper
}

func (c *listCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	if r.URL.Path == "/api/v1/pods" {
		c.mu.Lock()
		if q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true" {
			c.lists[q.Get("fieldSelector")]++
		}
		if q.Get("watch") == "true" {
			c.lastWatch = time.Now()
		}
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

// sinceLastWatch is the age of the youngest pod watch.
func (c *listCounter) sinceLastWatch() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.lastWatch)
}

func (c *listCounter) relisted(fieldSelector string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists[fieldSelector] > 1
}

// recorder counts an informer's notifications per object UID.
type recorder struct {
	mu      sync.Mutex
	adds    map[types.UID]int
	deletes map[types.UID]int
}

func newRecorder() *recorder {
	return &recorder{adds: map[types.UID]int{}, deletes: map[types.UID]int{}}
}

func uidOf(obj interface{}) types.UID {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		return m.GetUID()
	}
	return ""
}

func (r *recorder) handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			r.mu.Lock()
			r.adds[uidOf(obj)]++
			r.mu.Unlock()
		},
		DeleteFunc: func(obj interface{}) {
			r.mu.Lock()
			r.deletes[uidOf(obj)]++
			r.mu.Unlock()
		},
	}
}

// duplicates lists UIDs added or deleted more than once.
func (r *recorder) duplicates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var dup []string
	for uid, n := range r.adds {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("add %s ×%d", uid, n))
		}
	}
	for uid, n := range r.deletes {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("delete %s ×%d", uid, n))
		}
	}
	return dup
}

func (r *recorder) counts(uid types.UID) (adds, deletes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.adds[uid], r.deletes[uid]
}

func storeNames(store cache.Store) []string {
	var names []string
	for _, key := range store.ListKeys() {
		names = append(names, key)
	}
	sort.Strings(names)
	return names
}

func TestInformersConvergeAcrossAnAPIServerRestart(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for i := 0; i < nodeCount; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}}}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A shared informer factory over pods and nodes, with client-go's defaults.
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	// The informers' client counts their lists.
	lists := &listCounter{lists: map[string]int{}}
	informerConfig := rest.CopyConfig(srv.Config)
	informerConfig.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lists.next = rt; return lists }
	informerClient := kubernetes.NewForConfigOrDie(informerConfig)
	factory := informers.NewSharedInformerFactory(informerClient, 0)
	allPods, allNodes := newRecorder(), newRecorder()
	podInformer := factory.Core().V1().Pods().Informer()
	nodeInformer := factory.Core().V1().Nodes().Informer()
	if _, err := podInformer.AddEventHandler(allPods.handler()); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeInformer.AddEventHandler(allNodes.handler()); err != nil {
		t.Fatal(err)
	}
	factory.Start(informerCtx.Done())
	defer func() { stopInformers(); factory.Shutdown() }()

	// One field-selected informer per node, as each kubelet runs.
	nodeInformers := make([]cache.SharedIndexInformer, nodeCount)
	nodeRecorders := make([]*recorder, nodeCount)
	for i := range nodeInformers {
		selector := fields.OneTermEqualSelector("spec.nodeName", fmt.Sprintf("node-%d", i)).String()
		inf := informers.NewSharedInformerFactoryWithOptions(informerClient, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector })).Core().V1().Pods().Informer()
		nodeRecorders[i] = newRecorder()
		if _, err := inf.AddEventHandler(nodeRecorders[i].handler()); err != nil {
			t.Fatal(err)
		}
		nodeInformers[i] = inf
		go inf.RunWithContext(informerCtx)
	}
	synced := []cache.InformerSynced{podInformer.HasSynced, nodeInformer.HasSynced}
	for _, inf := range nodeInformers {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers did not sync")
	}

	// Leader election between two candidates over a Lease.
	var leaderMu sync.Mutex
	leading := map[string]bool{}
	maxLeaders := 0
	electionCtx, stopElection := context.WithCancel(ctx)
	var electionWG sync.WaitGroup
	for _, id := range []string{"candidate-a", "candidate-b"} {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: "skiff-test", Namespace: metav1.NamespaceSystem},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		electionWG.Add(1)
		go func() {
			defer electionWG.Done()
			for electionCtx.Err() == nil {
				leaderelection.RunOrDie(electionCtx, leaderelection.LeaderElectionConfig{
					Lock: lock, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
					ReleaseOnCancel: true,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(context.Context) {
							leaderMu.Lock()
							leading[id] = true
							n := 0
							for _, l := range leading {
								if l {
									n++
								}
							}
							maxLeaders = max(maxLeaders, n)
							leaderMu.Unlock()
						},
						OnStoppedLeading: func() {
							leaderMu.Lock()
							leading[id] = false
							leaderMu.Unlock()
						},
					},
				})
			}
		}()
	}
	defer func() { stopElection(); electionWG.Wait() }()

	// Writes before, across and after an apiserver restart.
	pods := client.CoreV1().Pods("default")
	created := map[string]types.UID{}
	write := func(from, to int) {
		for i := from; i < to; i++ {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i)},
				Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%nodeCount),
					Containers: []corev1.Container{{Name: "c", Image: "x"}}},
			}
			var out *corev1.Pod
			var err error
			// The apiserver may be restarting: retry for 5 s.
			_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
				out, err = pods.Create(ctx, pod, metav1.CreateOptions{})
				return err == nil, nil
			})
			if err != nil {
				t.Fatalf("create %s: %v", pod.Name, err)
			}
			created[pod.Name] = out.UID
		}
	}
	deleted := map[string]bool{}
	remove := func(from, to int) {
		for i := from; i < to; i += 4 {
			name := fmt.Sprintf("pod-%d", i)
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
				t.Fatalf("delete %s: %v", name, err)
			}
			deleted[name] = true
		}
	}
	// converge waits until every informer holds exactly what etcd holds.
	converge := func(when string) {
		t.Helper()
		truth, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[int][]string{}
		var wantAll []string
		for _, p := range truth.Items {
			var n int
			fmt.Sscanf(p.Spec.NodeName, "node-%d", &n)
			want[n] = append(want[n], "default/"+p.Name)
			wantAll = append(wantAll, "default/"+p.Name)
		}
		sort.Strings(wantAll)
		if wantLen := len(created) - len(deleted); len(wantAll) != wantLen {
			t.Fatalf("%s: etcd holds %d pods, want %d", when, len(wantAll), wantLen)
		}
		var lagging []string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			lagging = lagging[:0]
			if got := storeNames(podInformer.GetStore()); fmt.Sprint(got) != fmt.Sprint(wantAll) {
				lagging = append(lagging, fmt.Sprintf("all-pods informer has %d of %d", len(got), len(wantAll)))
			}
			for i, inf := range nodeInformers {
				sort.Strings(want[i])
				if got := storeNames(inf.GetStore()); fmt.Sprint(got) != fmt.Sprint(want[i]) {
					lagging = append(lagging, fmt.Sprintf("node-%d informer %v, want %v", i, got, want[i]))
				}
			}
			return len(lagging) == 0, nil
		}); err != nil {
			t.Fatalf("%s: informers did not converge: %v", when, lagging)
		}
	}
	write(0, podCount/2)
	remove(0, podCount/2)
	// What is under test is the resumption of watches that worked. client-go's
	// reflector takes a watch that ends within a second of its start with no event
	// for a broken one and relists, and a relist legitimately skips a pod created
	// and deleted meanwhile: so every informer has its events, and then every watch
	// (including one re-established during the burst, after the reflector's backoff:
	// the apiserver closes a watcher that falls behind) is over a second old, by the
	// start of the youngest, before the restart ends them.
	converge("before the restart")
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return lists.sinceLastWatch() > 1100*time.Millisecond, nil
	}); err != nil {
		t.Fatalf("a pod watch was started less than a second ago for a minute: %v", err)
	}
	srv.RestartAPIServer()
	write(podCount/2, podCount)
	remove(podCount/2, podCount)
	converge("after the restart")

	// No missed and no duplicate events: each pod was added once to the shared informer
	// and to its node's informer, and each deleted pod was deleted once from both; the
	// apiserver resumes each watch across its restart from the informer's last
	// resourceVersion. An informer that relisted anyway (client-go relists after a watch
	// that ended within its first second without an event, a race with the restart that
	// the pause above makes rare) rightly never hears of a pod created and deleted before
	// its list: it is excused from the count, and most informers must not need it.
	relisted := map[string]bool{}
	for name, uid := range created {
		var node int
		fmt.Sscanf(name, "pod-%d", &node)
		node %= nodeCount
		wantDeletes := 0
		if deleted[name] {
			wantDeletes = 1
		}
		for label, r := range map[string]*recorder{"": allPods, fmt.Sprintf("spec.nodeName=node-%d", node): nodeRecorders[node]} {
			if lists.relisted(label) {
				relisted[label] = true
				continue
			}
			if adds, deletes := r.counts(uid); adds != 1 || deletes != wantDeletes {
				t.Errorf("informer %q saw %s added %d times and deleted %d times, want 1 and %d", label, name, adds, deletes, wantDeletes)
			}
		}
	}
	if len(relisted) > 0 {
		t.Logf("informers that relisted instead of resuming their watch: %v", relisted)
	}
	if len(relisted) > (nodeCount+1)/5 {
		t.Errorf("%d of %d pod informers relisted: the apiserver did not resume their watches", len(relisted), nodeCount+1)
	}
	for _, r := range append([]*recorder{allPods, allNodes}, nodeRecorders...) {
		if dup := r.duplicates(); len(dup) > 0 {
			t.Errorf("duplicate notifications: %v", dup)
		}
	}
	if got := len(storeNames(nodeInformer.GetStore())); got != nodeCount {
		t.Errorf("node informer holds %d nodes, want %d", got, nodeCount)
	}

	// Exactly one leader, before and after the restart.
	var lease *coordinationv1.Lease
	var err error
	if pollErr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err = client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "skiff-test", metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	}); pollErr != nil {
		t.Fatalf("no leader: %v %+v", err, lease)
	}
	leaderMu.Lock()
	defer leaderMu.Unlock()
	if maxLeaders != 1 {
		t.Errorf("at most one candidate may lead at a time; saw %d at once", maxLeaders)
	}
	if !leading[*lease.Spec.HolderIdentity] {
		t.Errorf("the lease names %s, which does not think it leads (%v)", *lease.Spec.HolderIdentity, leading)
	}
}
