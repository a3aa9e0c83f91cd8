// Package linearizability checks that skiff's storage API, as clients see it over HTTP, is
// linearizable: concurrent clients create, get, update with a resourceVersion
// precondition and delete a few ConfigMaps through a real apiserver on a real embedded
// etcd, etcd restarts in the middle, and the recorded history is checked against a
// sequential model of a key-value store with porcupine
// (github.com/anishathalye/porcupine), as etcd's own robustness tests do.
package linearizability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/controlplanetest"
)

const (
	namespace = "default"
	clients   = 6
)

var keys = []string{"lin-a", "lin-b", "lin-c"}

// TestLinearizableAcrossEtcdRestart drives the workload through a correct apiserver while
// etcd is stopped and started again on the same data directory and port, and requires
// the history to be linearizable.
func TestLinearizableAcrossEtcdRestart(t *testing.T) {
	s := controlplanetest.StartServer(t)
	h := newHarness(t, s.Config)
	h.staleWrite()
	h.start()
	h.waitForWrites(150)
	before := h.okWrites.Load()
	stopped := h.now()
	s.Etcd.Close()
	// Let the clients run into the outage: their writes end with unknown outcomes.
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Etcd.Restart(ctx); err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	restarted := h.now()
	h.waitForWrites(before + 150)
	history := h.stop()

	if h.staleStatus != http.StatusConflict {
		t.Errorf("update with a stale resourceVersion: status %d, want 409", h.staleStatus)
	}
	var afterRestart, unknown int
	for _, op := range history {
		out := op.Output.(output)
		if out.unknown {
			unknown++
		} else if op.Call > restarted && op.Input.(input).op != opGet {
			afterRestart++
		}
	}
	if afterRestart == 0 {
		t.Errorf("no write completed after etcd restarted")
	}
	t.Logf("%d operations, %d with unknown outcome, %d writes completed after the restart; etcd down from %v to %v",
		len(history), unknown, afterRestart, time.Duration(stopped), time.Duration(restarted))
	check(t, history, porcupine.Ok)
}

// TestBrokenStoreFailsCheck runs the same workload with the resourceVersion precondition
// of updates dropped on the way to the apiserver: the checker must find the history not
// linearizable, which shows the check above can fail.
func TestBrokenStoreFailsCheck(t *testing.T) {
	s := controlplanetest.StartServer(t)
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return preconditionDroppingTransport{t: t, next: rt} }
	h := newHarness(t, cfg)
	h.staleWrite()
	h.start()
	h.waitForWrites(150)
	history := h.stop()
	if h.staleStatus != http.StatusOK {
		t.Errorf("update with a stale resourceVersion through the broken link: status %d, want 200", h.staleStatus)
	}
	check(t, history, porcupine.Illegal)
}

// preconditionDroppingTransport is a deliberately faulty link to the apiserver, a test
// double: it removes metadata.resourceVersion from every PUT's JSON body, so an update
// the client made conditional arrives unconditional and a stale one overwrites a newer
// state (a lost update) instead of getting 409 Conflict. The fault sits in the request
// because the registry itself, as kube's Store.Update, compares the update's
// resourceVersion with the stored one before any storage precondition: a storage layer
// that ignored preconditions would lose no update.
type preconditionDroppingTransport struct {
	t    *testing.T
	next http.RoundTripper
}

func (d preconditionDroppingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || r.Body == nil {
		return d.next.RoundTrip(r)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		d.t.Errorf("PUT body of type %q: the double rewrites JSON only", ct)
		return d.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	if m, ok := obj["metadata"].(map[string]any); ok {
		delete(m, "resourceVersion")
	}
	if body, err = json.Marshal(obj); err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return d.next.RoundTrip(r)
}

// check runs porcupine on history and fails unless the result is want; on a failure it
// writes porcupine's HTML visualization next to the test's temporary files.
func check(t *testing.T, history []porcupine.Operation, want porcupine.CheckResult) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, history, 60*time.Second)
	if res == want {
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("skiff-linearizability-%s.html", t.Name()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Logf("visualize: %v", err)
	}
	t.Errorf("porcupine: %s, want %s (%d operations; visualization in %s)", res, want, len(history), path)
}

// The model: one ConfigMap per key, whose state is whether it exists and the value of its
// data["v"]. Every write puts a value no other write puts, so a resourceVersion names
// exactly one value: an update "if resourceVersion is R" is, to the model, an update "if
// the value is the one read with R".
type state struct {
	exists bool
	value  string
}

type opKind string

const (
	opGet    opKind = "get"
	opCreate opKind = "create"
	opUpdate opKind = "update"
	opDelete opKind = "delete"
)

type input struct {
	op     opKind
	key    string
	expect string // update: the value read with the precondition's resourceVersion
	value  string // create, update: the value written
}

// output is an operation's result: an HTTP status (200/201 success, 404 NotFound, 409
// AlreadyExists or Conflict) and for a get the value read. unknown marks a write whose
// outcome the client cannot know (a timeout, a 5xx, a dropped connection): it may or
// may not have taken effect, and its return time is infinity.
type output struct {
	status  int
	value   string
	unknown bool
}

var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(input).key
			byKey[k] = append(byKey[k], op)
		}
		var parts [][]porcupine.Operation
		for _, k := range keys {
			if len(byKey[k]) > 0 {
				parts = append(parts, byKey[k])
			}
		}
		return parts
	},
	Init: func() interface{} { return state{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s, i, o := st.(state), in.(input), out.(output)
		switch i.op {
		case opGet:
			if o.status == http.StatusNotFound {
				return !s.exists, s
			}
			return s.exists && s.value == o.value, s
		case opCreate:
			switch {
			case o.unknown && !s.exists, o.status == http.StatusCreated && !s.exists:
				return true, state{exists: true, value: i.value}
			case o.unknown:
				return true, s
			case o.status == http.StatusConflict:
				return s.exists, s
			}
		case opUpdate:
			applies := s.exists && s.value == i.expect
			switch {
			case o.unknown && applies, o.status == http.StatusOK && applies:
				return true, state{exists: true, value: i.value}
			case o.unknown:
				return true, s
			case o.status == http.StatusConflict:
				return s.exists && !applies, s
			case o.status == http.StatusNotFound:
				return !s.exists, s
			}
		case opDelete:
			switch {
			case o.unknown, o.status == http.StatusOK && s.exists:
				return true, state{}
			case o.status == http.StatusNotFound:
				return !s.exists, s
			}
		}
		return false, s
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		res := fmt.Sprint(o.status)
		if o.unknown {
			res = "unknown"
		} else if i.op == opGet && o.status == http.StatusOK {
			res = o.value
		}
		switch i.op {
		case opUpdate:
			return fmt.Sprintf("update(%s, if %s, %s) -> %s", i.key, i.expect, i.value, res)
		case opCreate:
			return fmt.Sprintf("create(%s, %s) -> %s", i.key, i.value, res)
		}
		return fmt.Sprintf("%s(%s) -> %s", i.op, i.key, res)
	},
	DescribeState: func(st interface{}) string {
		if s := st.(state); s.exists {
			return s.value
		}
		return "<none>"
	},
}

// harness runs the clients and records the history.
type harness struct {
	t      *testing.T
	client rest.Interface
	t0     time.Time

	mu      sync.Mutex
	history []porcupine.Operation

	okWrites    atomic.Int64
	staleStatus int
	stopCh      chan struct{}
	wg          sync.WaitGroup
}

func newHarness(t *testing.T, cfg *rest.Config) *harness {
	cfg = rest.CopyConfig(cfg)
	// A request that outlives this is recorded with an unknown outcome.
	cfg.Timeout = 3 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return &harness{t: t, client: cs.CoreV1().RESTClient(), t0: time.Now(), stopCh: make(chan struct{})}
}

func (h *harness) now() int64 { return int64(time.Since(h.t0)) }

// view is what one client last learned about a key: the value and its resourceVersion.
type view struct{ value, rv string }

// do sends one operation, records it and returns what the client learned: the
// ConfigMap's value and resourceVersion when the answer carries it.
func (h *harness) do(clientID int, in input, rv string) (output, *view) {
	ctx := context.Background()
	var req *rest.Request
	switch in.op {
	case opGet:
		req = h.client.Get().Namespace(namespace).Resource("configmaps").Name(in.key)
	case opCreate:
		req = h.client.Post().Namespace(namespace).Resource("configmaps").Body(configMap(in.key, in.value, ""))
	case opUpdate:
		req = h.client.Put().Namespace(namespace).Resource("configmaps").Name(in.key).Body(configMap(in.key, in.value, rv))
	case opDelete:
		req = h.client.Delete().Namespace(namespace).Resource("configmaps").Name(in.key)
	}
	// One request is one operation: client-go must not resend it on a 429/5xx with
	// Retry-After, or a write that took effect could come back as a 409.
	req = req.MaxRetries(0)
	call := h.now()
	var status int
	res := req.Do(ctx).StatusCode(&status)
	ret := h.now()
	err := res.Error()

	out := output{status: status}
	var learned *view
	switch {
	case err == nil:
		if in.op != opDelete {
			cm := &corev1.ConfigMap{}
			if err := res.Into(cm); err != nil {
				h.t.Errorf("%s %s: decode: %v", in.op, in.key, err)
				return output{unknown: true}, nil
			}
			out.value = cm.Data["v"]
			learned = &view{value: out.value, rv: cm.ResourceVersion}
		}
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		out.status = int(apiStatusCode(err))
	default:
		if code := apiStatusCode(err); code >= 400 && code < 500 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout {
			h.t.Errorf("%s %s: unexpected client error: %v", in.op, in.key, err)
		}
		out = output{unknown: true}
	}
	if out.unknown {
		if in.op == opGet {
			return out, nil // a failed read has no effect: leave it out of the history
		}
		ret = math.MaxInt64
	} else if in.op != opGet {
		h.okWrites.Add(1)
	}
	h.mu.Lock()
	h.history = append(h.history, porcupine.Operation{ClientId: clientID, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
	return out, learned
}

func apiStatusCode(err error) int32 {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Code
	}
	return 0
}

func configMap(name, value, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: rv},
		Data:       map[string]string{"v": value},
	}
}

// staleWrite is the history's fixed opening, one stale write the model must reject if it
// succeeds: client 0 creates keys[0], client 1 updates it, then client 0 updates it with
// the resourceVersion it got from its create. h.staleStatus is that last status.
func (h *harness) staleWrite() {
	k := keys[0]
	out, v0 := h.do(0, input{op: opCreate, key: k, value: "stale-0"}, "")
	if out.status != http.StatusCreated {
		h.t.Fatalf("create %s: %+v", k, out)
	}
	if out, _ := h.do(1, input{op: opUpdate, key: k, expect: v0.value, value: "stale-1"}, v0.rv); out.status != http.StatusOK {
		h.t.Fatalf("update %s: %+v", k, out)
	}
	out, _ = h.do(0, input{op: opUpdate, key: k, expect: v0.value, value: "stale-2"}, v0.rv)
	h.staleStatus = out.status
}

// start runs the clients until stop. Each picks a key and an operation at random; an
// update carries the resourceVersion the client last saw for the key (it reads first when
// it has none). After a write with an unknown outcome a client forgets what it knew and
// reads before it writes again, and after any failure it pauses briefly.
func (h *harness) start() {
	for c := range clients {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 17))
			known := map[string]view{}
			mustRead := false // after an unknown outcome, until a read succeeds
			for seq := 0; ; seq++ {
				select {
				case <-h.stopCh:
					return
				default:
				}
				k := keys[rng.IntN(len(keys))]
				value := fmt.Sprintf("c%d-%d", c, seq)
				in := input{key: k, value: value}
				v, ok := known[k]
				switch p := rng.IntN(100); {
				case mustRead || p < 30 || (p < 70 && !ok):
					in.op = opGet
				case p < 70:
					in.op, in.expect = opUpdate, v.value
				case p < 85:
					in.op = opCreate
				default:
					in.op = opDelete
				}
				out, learned := h.do(c, in, v.rv)
				switch {
				case learned != nil:
					known[k] = *learned
				case out.unknown || out.status == http.StatusNotFound || out.status == http.StatusConflict:
					delete(known, k)
				case in.op == opDelete:
					delete(known, k)
				}
				if out.unknown {
					clear(known)
					mustRead = true
					time.Sleep(50 * time.Millisecond)
				} else if in.op == opGet {
					mustRead = false
				}
			}
		}()
	}
}

// waitForWrites waits until n writes have completed with a known outcome, failing the
// test after two minutes.
func (h *harness) waitForWrites(n int64) {
	h.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for h.okWrites.Load() < n {
		if time.Now().After(deadline) {
			h.stop()
			h.t.Fatalf("only %d of %d writes completed", h.okWrites.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the clients and returns the history.
func (h *harness) stop() []porcupine.Operation {
	select {
	case <-h.stopCh:
	default:
		close(h.stopCh)
	}
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.history
}
