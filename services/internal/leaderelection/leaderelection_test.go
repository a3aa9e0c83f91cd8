package leaderelection

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/apiservertest"
)

func fastOptions() Options {
	o := DefaultOptions("test-component")
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 100*time.Millisecond
	return o
}

// TestRunReturnsLostWhenTheLeaseIsTaken pins the contract kube's components exit on: a
// leader whose Lease another holder takes over stops its work and gets
// ErrLeaderElectionLost, while a leader whose context ends gets nil.
func TestRunReturnsLostWhenTheLeaseIsTaken(t *testing.T) {
	srv := apiservertest.StartServer(t)
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
	select {
	case err := <-result:
		if !errors.Is(err, ErrLeaderElectionLost) {
			t.Errorf("Run = %v, want ErrLeaderElectionLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the Lease was taken")
	}
	select {
	case <-runEnded:
	default:
		t.Error("Run returned before the work it started ended")
	}
}

func TestRunWithoutElectionRunsAtOnce(t *testing.T) {
	o := fastOptions()
	o.LeaderElect = false
	ran := false
	if err := New(nil, o, "me").Run(context.Background(), func(context.Context) { ran = true }); err != nil || !ran {
		t.Errorf("Run = %v, ran = %v; want nil, true", err, ran)
	}
}
