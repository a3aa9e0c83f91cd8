package nodelease

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestSyncCreatesThenRenewsTheLease(t *testing.T) {
	ctx := context.Background()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
	client := fake.NewClientset(node)
	c := NewController(client, "n1", 40*time.Second, 10*time.Second, nil)
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	c.clock = clock

	c.sync(ctx)
	lease, err := client.CoordinationV1().Leases(NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != "n1" || ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 40 || lease.Spec.RenewTime == nil {
		t.Errorf("lease spec = %+v", lease.Spec)
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Kind != "Node" || lease.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("owner references = %+v", lease.OwnerReferences)
	}
	if !lease.Spec.RenewTime.Time.Equal(clock.Now()) {
		t.Errorf("renewTime %v, want the clock's %v", lease.Spec.RenewTime, clock.Now())
	}

	clock.Step(10 * time.Second)
	c.sync(ctx)
	lease, err = client.CoordinationV1().Leases(NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Spec.RenewTime.Time.Equal(clock.Now()) {
		t.Errorf("renewed renewTime %v, want the clock's %v", lease.Spec.RenewTime, clock.Now())
	}
}

func TestLeaseWaitsForTheNode(t *testing.T) {
	client := fake.NewClientset()
	c := NewController(client, "n1", 40*time.Second, 10*time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Without the Node the lease is not created; sync gives up with ctx.
	c.sync(ctx)
	if _, err := client.CoordinationV1().Leases(NamespaceNodeLease).Get(context.Background(), "n1", metav1.GetOptions{}); err == nil {
		t.Error("lease created before its Node existed")
	}
}
