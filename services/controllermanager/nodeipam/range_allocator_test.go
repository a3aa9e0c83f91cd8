package nodeipam

import (
	"context"
	"net"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/controlplanetest"
)

// TestRangeAllocator runs the controller against a real apiserver: a node that already
// holds a CIDR keeps it and nobody else gets it, new nodes each get a distinct one, and a
// deleted node's CIDR is free again.
func TestRangeAllocator(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithCancel(context.Background())
	nodes := client.CoreV1().Nodes()
	old := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: v1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}}}
	if _, err := nodes.Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	t.Cleanup(factory.Shutdown)
	t.Cleanup(cancel)
	_, cluster, _ := net.ParseCIDR("10.244.0.0/22") // four /24s
	c, err := New(factory.Core().V1().Nodes(), client, record.NewFakeRecorder(100), []*net.IPNet{cluster}, []int{24})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx)

	podCIDR := func(name string) string {
		t.Helper()
		var cidr string
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			node, err := nodes.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if len(node.Spec.PodCIDRs) > 0 {
				if node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
					t.Errorf("node %s: podCIDR %q differs from podCIDRs %v", name, node.Spec.PodCIDR, node.Spec.PodCIDRs)
				}
				cidr = node.Spec.PodCIDRs[0]
				return true, nil
			}
			return false, nil
		}); err != nil {
			t.Fatalf("node %s got no podCIDR: %v", name, err)
		}
		return cidr
	}
	seen := map[string]string{"10.244.0.0/24": "old"}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := nodes.Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cidr := podCIDR(name)
		if other, dup := seen[cidr]; dup {
			t.Fatalf("nodes %s and %s both got %s", other, name, cidr)
		}
		seen[cidr] = name
	}
	if got := podCIDR("old"); got != "10.244.0.0/24" {
		t.Errorf("existing node's podCIDR changed to %s", got)
	}

	// The range is full until a node goes.
	freed := podCIDR("b")
	if err := nodes.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "d"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := podCIDR("d"); got != freed {
		t.Errorf("new node after a deletion got %s, want the freed %s", got, freed)
	}
}
