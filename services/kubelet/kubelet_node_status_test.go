package kubelet

import (
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// TestNodeStatusPatch applies the kubelet's status patch as the apiserver would and
// checks that it brings the status over, leaves spec alone (a controller's podCIDR
// written meanwhile survives) and replaces a changed address list whole.
func TestNodeStatusPatch(t *testing.T) {
	old := &v1.Node{Status: v1.NodeStatus{
		Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "n"}},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}},
	}}
	updated := old.DeepCopy()
	updated.Spec.Unschedulable = true // the kubelet does not own spec
	updated.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}}
	updated.Status.Conditions[0].Status = v1.ConditionTrue
	patch, err := nodeStatusPatch(old, updated)
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile node IPAM set the pod range.
	stored := old.DeepCopy()
	stored.Spec.PodCIDR = "10.244.1.0/24"
	storedJSON, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	patchedJSON, err := strategicpatch.StrategicMergePatch(storedJSON, patch, v1.Node{})
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	var got v1.Node
	if err := json.Unmarshal(patchedJSON, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.PodCIDR != "10.244.1.0/24" || got.Spec.Unschedulable {
		t.Errorf("spec after the patch = %+v, want the stored spec (patch %s)", got.Spec, patch)
	}
	if !equality.Semantic.DeepEqual(got.Status.Addresses, updated.Status.Addresses) {
		t.Errorf("addresses = %v, want %v (patch %s)", got.Status.Addresses, updated.Status.Addresses, patch)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Status != v1.ConditionTrue {
		t.Errorf("conditions = %v, want Ready True", got.Status.Conditions)
	}
}
