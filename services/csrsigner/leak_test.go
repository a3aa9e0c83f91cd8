package csrsigner

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/controlplanetest"
)

// TestRunLeavesNoGoroutines signs a certificate, cancels Run, and checks that none of the
// controller's goroutines (informers, workqueue, worker) outlive it.
func TestRunLeavesNoGoroutines(t *testing.T) {
	// Without the namespace controllers controlplanetest otherwise runs: their informers
	// would count as leaked.
	s := controlplanetest.StartServerWithoutControllers(t)
	c, err := New(Config{Client: clientFor(t, s.ClientConfig(signerIdentity)), CA: s.CA, AutoApprove: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// What runs before Run is not Run's: the apiserver's own work queues, made with it.
	before := map[string]bool{}
	for _, g := range controllerGoroutines() {
		before[goroutineID(g)] = true
	}
	go func() { done <- c.Run(ctx) }()
	bootstrap := clientFor(t, s.TokenConfig(s.BootstrapToken.String()))
	create(t, bootstrap, "leak", certificatesv1.KubeAPIServerClientKubeletSignerName, clientUsages, nodeAClient, nil)
	waitFor(t, bootstrap, "leak", issued)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	var leaked []string
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		leaked = nil
		for _, g := range controllerGoroutines() {
			if !before[goroutineID(g)] {
				leaked = append(leaked, g)
			}
		}
		return len(leaked) == 0, nil
	})
	if len(leaked) > 0 {
		t.Fatalf("%d goroutines outlived Run:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
	if c.Ready() == nil {
		t.Error("Ready after Run returned")
	}
}

// goroutineID is the id of the goroutine whose stack g is ("goroutine 42 [...]").
func goroutineID(g string) string {
	var id string
	_, _ = fmt.Sscanf(g, "goroutine %s", &id)
	return id
}

// controllerGoroutines returns the stacks of goroutines running the controller, an
// informer or a workqueue, other than this test's own and the in-process apiserver's
// (its RBAC informers run until the server stops): a goroutine descending from one
// whose stack is in the apiserver is the apiserver's.
func controllerGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	stacks := map[string]string{} // goroutine id → stack
	parent := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		var id string
		if _, err := fmt.Sscanf(g, "goroutine %s", &id); err != nil {
			continue
		}
		stacks[id] = g
		if i := strings.LastIndex(g, " in goroutine "); i >= 0 {
			parent[id] = strings.Fields(g[i+len(" in goroutine "):])[0]
		}
	}
	apiserver := func(id string) bool {
		for seen := 0; id != "" && seen < 64; seen++ {
			if strings.Contains(stacks[id], "skiff.dev/services/apiserver.") || strings.Contains(stacks[id], "skiff.dev/services/apiserver/") {
				return true
			}
			id = parent[id]
		}
		return false
	}
	var found []string
	for id, g := range stacks {
		if strings.Contains(g, "TestRunLeavesNoGoroutines") || apiserver(id) {
			continue
		}
		if strings.Contains(g, "skiff.dev/services/csrsigner.") || strings.Contains(g, "k8s.io/client-go/tools/cache.") ||
			strings.Contains(g, "k8s.io/client-go/util/workqueue.") {
			found = append(found, g)
		}
	}
	return found
}
