package controllermanager

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/pki"
)

func TestIsControllerEnabled(t *testing.T) {
	for _, tc := range []struct {
		name        string
		controllers []string
		want        bool
	}{
		{"star enables what is on by default", []string{"*"}, true},
		{"nothing enables nothing", nil, false},
		{"a name enables it", []string{NodeLifecycleController}, true},
		{"an old alias enables it", []string{"nodelifecycle"}, true},
		{"minus disables it despite star", []string{"*", "-" + NodeLifecycleController}, false},
		{"minus alias disables it", []string{"-nodelifecycle", "*"}, false},
		{"another name does not enable it", []string{PodGarbageCollectorController}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsControllerEnabled(NodeLifecycleController, tc.controllers); got != tc.want {
				t.Errorf("IsControllerEnabled(%v) = %v, want %v", tc.controllers, got, tc.want)
			}
		})
	}
}

// TestReplicationControllerIsKnownByKubesNames: --controllers takes kube's name of the
// replication controller and its pre-1.28 alias, and "*" enables it.
func TestReplicationControllerIsKnownByKubesNames(t *testing.T) {
	for _, name := range []string{"replicationcontroller-controller", "replicationcontroller"} {
		if got := controllerName(name); got != ReplicationControllerController {
			t.Errorf("controllerName(%q) = %q, want %q", name, got, ReplicationControllerController)
		}
	}
	if !IsControllerEnabled(ReplicationControllerController, []string{"*"}) || IsControllerEnabled(ReplicationControllerController, []string{"*", "-replicationcontroller"}) {
		t.Error("the replication controller is not enabled by * and disabled by its alias")
	}
}

// TestEndpointSliceMirroringIsKnownByKubesNames: --controllers takes kube's name of the
// endpointslice mirroring controller and its alias, and "*" enables it.
func TestEndpointSliceMirroringIsKnownByKubesNames(t *testing.T) {
	for _, name := range []string{"endpointslice-mirroring-controller", "endpointslicemirroring"} {
		if got := controllerName(name); got != EndpointSliceMirroring {
			t.Errorf("controllerName(%q) = %q, want %q", name, got, EndpointSliceMirroring)
		}
	}
	if !IsControllerEnabled(EndpointSliceMirroring, []string{"*"}) || IsControllerEnabled(EndpointSliceMirroring, []string{"*", "-endpointslicemirroring"}) {
		t.Error("the endpointslice mirroring controller is not enabled by * and disabled by its alias")
	}
}

func TestOptionsValidateRejectsUnknownController(t *testing.T) {
	o := DefaultOptions()
	o.Controllers = []string{"*", "-no-such-controller"}
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted an unknown controller")
	}
	o.Controllers = []string{"*", "-nodelifecycle"}
	if err := o.Validate(); err != nil {
		t.Errorf("Validate(-nodelifecycle) = %v, want nil", err)
	}
}

// TestLeaderElection runs two managers as system:kube-controller-manager against one
// apiserver: only the Lease holder starts its controllers, and when it stops the other
// takes over.
func TestLeaderElection(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.ClientConfig(pki.ControllerManager.CommonName))
	var mu sync.Mutex
	leading := map[string]bool{}
	started := make(chan string, 4)
	probe := func(id string) InitFunc {
		return func(ctx context.Context, cc ControllerContext) error {
			// The identity may read what its controllers watch.
			if _, err := cc.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			mu.Lock()
			leading[id] = true
			mu.Unlock()
			started <- id
			go func() {
				<-ctx.Done()
				mu.Lock()
				leading[id] = false
				mu.Unlock()
			}()
			return nil
		}
	}
	election := leaderelection.DefaultOptions(LeaseName)
	election.LeaseDuration, election.RenewDeadline, election.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	type replica struct {
		cancel context.CancelFunc
		done   chan error
	}
	replicas := map[string]*replica{}
	for _, id := range []string{"a", "b"} {
		cm, err := New(Config{Client: client, Options: DefaultOptions(), LeaderElection: election, Identity: id,
			Initializers: map[string]InitFunc{"probe": probe(id)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{cancel: cancel, done: make(chan error, 1)}
		replicas[id] = r
		go func() { r.done <- cm.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-r.done })
	}
	var first string
	select {
	case first = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no replica became leader")
	}
	lease, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != first {
		t.Errorf("Lease holder = %q, want the started replica %q", *lease.Spec.HolderIdentity, first)
	}
	second := map[string]string{"a": "b", "b": "a"}[first]
	mu.Lock()
	if leading[second] {
		t.Errorf("both replicas run their controllers")
	}
	mu.Unlock()

	// The leader stops (releasing its Lease): the other takes over.
	replicas[first].cancel()
	if err := <-replicas[first].done; err != nil {
		t.Errorf("stopped leader's Run = %v, want nil", err)
	}
	replicas[first].done <- nil // for the cleanup
	select {
	case id := <-started:
		if id != second {
			t.Errorf("replica %q started again; want %q to take over", id, second)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other replica did not take over")
	}
	mu.Lock()
	defer mu.Unlock()
	if leading[first] {
		t.Errorf("the stopped replica's controllers still run")
	}
}

// TestRunStopsWhenAControllerFailsToStart pins that a start error is Run's error.
func TestRunStopsWhenAControllerFailsToStart(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	boom := errors.New("boom")
	election := leaderelection.DefaultOptions(LeaseName)
	election.RetryPeriod = 200 * time.Millisecond
	for _, elect := range []bool{false, true} {
		election.LeaderElect = elect
		err := Run(context.Background(), Config{Client: client, Options: DefaultOptions(), LeaderElection: election,
			Initializers: map[string]InitFunc{"broken": func(context.Context, ControllerContext) error { return boom }}})
		if !errors.Is(err, boom) {
			t.Errorf("Run with leader election %v = %v, want %v", elect, err, boom)
		}
	}
}
