package node

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodCIDRsAreSetOnce: podCIDRs may go from unset to set, never change after.
func TestPodCIDRsAreSetOnce(t *testing.T) {
	node := func(cidrs ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"}}
		if len(cidrs) > 0 {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
		}
		return n
	}
	tests := []struct {
		name     string
		old, new *corev1.Node
		wantErr  bool
	}{
		{"unset to set", node(), node("10.244.1.0/24"), false},
		{"unchanged", node("10.244.1.0/24"), node("10.244.1.0/24"), false},
		{"changed", node("10.244.1.0/24"), node("10.244.2.0/24"), true},
		{"cleared", node("10.244.1.0/24"), node(), true},
		{"family added", node("10.244.1.0/24"), node("10.244.1.0/24", "fd00::/64"), true},
	}
	for _, tt := range tests {
		errs := Strategy{}.ValidateUpdate(context.Background(), tt.new, tt.old)
		if got := len(errs) > 0; got != tt.wantErr {
			t.Errorf("%s: errors %v, want error %v", tt.name, errs, tt.wantErr)
		}
		for _, e := range errs {
			if e.Field != "spec.podCIDRs" {
				t.Errorf("%s: error on %s", tt.name, e.Field)
			}
		}
	}
}
