package leaderelection

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func fastOptions() Options {
	o := DefaultOptions("test-component")
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 100*time.Millisecond
	return o
}

// wantLost waits for Run's result after what and fails unless it is ErrLeaderElectionLost.
func wantLost(t *testing.T, result <-chan error, what string) {
	t.Helper()
	select {
	case err := <-result:
		if !errors.Is(err, ErrLeaderElectionLost) {
			t.Errorf("Run = %v, want ErrLeaderElectionLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return after %s", what)
	}
}

// TestRunReturnsLostWhenTheLeaseIsTaken pins the contract kube's components exit on: a
// leader whose Lease another holder takes over stops its work and gets
// ErrLeaderElectionLost, while a leader whose context ends gets nil.
func TestRunReturnsLostWhenTheLeaseIsTaken(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	e := New(client, fastOptions(), "me")
	leading := make(chan struct{})
	runEnded := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- e.Run(context.Background(), func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
			close(runEnded)
		})
	}()
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		t.Fatal("never became leader")
	}
	// Someone else takes the Lease, as a replica would once it expired.
	leases := client.CoordinationV1().Leases(metav1.NamespaceSystem)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the leader renews meanwhile
		lease, err := leases.Get(context.Background(), "test-component", metav1.GetOptions{})
		if err != nil {
			return err
		}
		lease.Spec.HolderIdentity = ptr.To("usurper")
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(time.Hour)}
		_, err = leases.Update(context.Background(), lease, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantLost(t, result, "the Lease was taken")
	select {
	case <-runEnded:
	default:
		t.Error("Run returned before the work it started ended")
	}
}

// hangingTransport stands in for an apiserver that hangs (its etcd paused): while hang
// is set, a request waits until its context ends and never reaches the server.
type hangingTransport struct {
	next http.RoundTripper
	hang *atomic.Bool
}

func (h hangingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if h.hang.Load() {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return h.next.RoundTrip(req)
}

// TestWorkStopsBeforeTheLeaseCanExpireWhileTheAPIServerHangs pins the safety the fault
// matrix's "pause etcd" row found missing: when the leader's renewals hang, its work
// stops while the Lease it last renewed is still valid, so no other replica can lead
// beside it. client-go alone ends the work only after also trying to release the
// Lease, which hangs for another RenewDeadline, past the Lease's expiry.
func TestWorkStopsBeforeTheLeaseCanExpireWhileTheAPIServerHangs(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	var hang atomic.Bool
	cfg := rest.CopyConfig(srv.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return hangingTransport{next: rt, hang: &hang} }
	o := DefaultOptions("test-component")
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	e := New(kubernetes.NewForConfigOrDie(cfg), o, "me")

	leading := make(chan struct{})
	workEnded := make(chan time.Time, 1)
	result := make(chan error, 1)
	go func() {
		result <- e.Run(context.Background(), func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
			workEnded <- time.Now()
		})
	}()
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		t.Fatal("never became leader")
	}
	hang.Store(true)
	var ended time.Time
	select {
	case ended = <-workEnded:
	case <-time.After(30 * time.Second):
		t.Fatal("the work did not stop while renewals hung")
	}
	lease, err := admin.CoordinationV1().Leases(metav1.NamespaceSystem).Get(context.Background(), "test-component", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != "me" || lease.Spec.RenewTime == nil {
		t.Fatalf("Lease holder %q renewed %v; want the hanging leader's", ptr.Deref(lease.Spec.HolderIdentity, ""), lease.Spec.RenewTime)
	}
	if expiry := lease.Spec.RenewTime.Add(o.LeaseDuration); !ended.Before(expiry) {
		t.Errorf("work stopped at %s, %s after the Lease (last renewed %s) could be taken over",
			ended.Format(time.StampMilli), ended.Sub(expiry), lease.Spec.RenewTime.Format(time.StampMilli))
	}
	wantLost(t, result, "the work stopped")
}

func TestRunWithoutElectionRunsAtOnce(t *testing.T) {
	o := fastOptions()
	o.LeaderElect = false
	ran := false
	if err := New(nil, o, "me").Run(context.Background(), func(context.Context) { ran = true }); err != nil || !ran {
		t.Errorf("Run = %v, ran = %v; want nil, true", err, ran)
	}
}
