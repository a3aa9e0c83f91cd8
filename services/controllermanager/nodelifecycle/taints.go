package nodelifecycle

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// The NoExecute taints a node gets when its Ready condition is Unknown (unreachable) or
// False (not-ready); they are mutually exclusive, as the condition is.
var (
	UnreachableTaintTemplate = &v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}
	NotReadyTaintTemplate    = &v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}
)

// nodeConditionToTaintKeyStatusMap maps a node condition's status to the NoSchedule taint
// it brings, as kube's node lifecycle controller does.
var nodeConditionToTaintKeyStatusMap = map[v1.NodeConditionType]map[v1.ConditionStatus]string{
	v1.NodeReady: {
		v1.ConditionFalse:   v1.TaintNodeNotReady,
		v1.ConditionUnknown: v1.TaintNodeUnreachable,
	},
	v1.NodeMemoryPressure:     {v1.ConditionTrue: v1.TaintNodeMemoryPressure},
	v1.NodeDiskPressure:       {v1.ConditionTrue: v1.TaintNodeDiskPressure},
	v1.NodeNetworkUnavailable: {v1.ConditionTrue: v1.TaintNodeNetworkUnavailable},
	v1.NodePIDPressure:        {v1.ConditionTrue: v1.TaintNodePIDPressure},
}

// conditionTaintKeys are the keys of the taints nodeConditionToTaintKeyStatusMap sets.
var conditionTaintKeys = func() map[string]bool {
	keys := map[string]bool{}
	for _, m := range nodeConditionToTaintKeyStatusMap {
		for _, k := range m {
			keys[k] = true
		}
	}
	return keys
}()

// noScheduleTaints are the NoSchedule taints node's conditions and spec.unschedulable call
// for (kube's doNoScheduleTaintingPass).
func noScheduleTaints(node *v1.Node) []v1.Taint {
	var taints []v1.Taint
	for _, c := range node.Status.Conditions {
		if key, ok := nodeConditionToTaintKeyStatusMap[c.Type][c.Status]; ok {
			taints = append(taints, v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule})
		}
	}
	if node.Spec.Unschedulable {
		taints = append(taints, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule})
	}
	return taints
}

// isControllerNoScheduleTaint is whether t is a NoSchedule taint this controller owns.
func isControllerNoScheduleTaint(t v1.Taint) bool {
	return t.Effect == v1.TaintEffectNoSchedule && (t.Key == v1.TaintNodeUnschedulable || conditionTaintKeys[t.Key])
}

// taintExists is whether taints hold one with t's key and effect.
func taintExists(taints []v1.Taint, t *v1.Taint) bool {
	return slices.ContainsFunc(taints, func(x v1.Taint) bool { return x.MatchTaint(t) })
}

// taintSetDiff is what turns current into want: the taints to add and to delete, by key
// and effect.
func taintSetDiff(want, current []v1.Taint) (add, del []*v1.Taint) {
	for i := range want {
		if !taintExists(current, &want[i]) {
			add = append(add, &want[i])
		}
	}
	for i := range current {
		if !taintExists(want, &current[i]) {
			del = append(del, &current[i])
		}
	}
	return add, del
}

// swapNodeControllerTaint adds add and removes del on node in one update, stamping
// added taints' timeAdded; it reads the node again on a conflict and treats a deleted
// node as done. Mirrors kube's controller.SwapNodeControllerTaint.
func swapNodeControllerTaint(ctx context.Context, client kubernetes.Interface, c clock.PassiveClock, add, del []*v1.Taint, node *v1.Node) error {
	now := metav1.NewTime(c.Now())
	first := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		current := node
		if !first {
			var err error
			if current, err = client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		taints := slices.DeleteFunc(slices.Clone(current.Spec.Taints), func(t v1.Taint) bool {
			return slices.ContainsFunc(del, func(d *v1.Taint) bool { return t.MatchTaint(d) }) ||
				slices.ContainsFunc(add, func(a *v1.Taint) bool { return t.MatchTaint(a) })
		})
		for _, a := range add {
			t := *a
			t.TimeAdded = &now
			if existing := slices.IndexFunc(current.Spec.Taints, func(x v1.Taint) bool { return x.MatchTaint(a) }); existing >= 0 {
				t = current.Spec.Taints[existing] // already there: keep its timeAdded
			}
			taints = append(taints, t)
		}
		if equalTaints(taints, current.Spec.Taints) {
			return nil
		}
		updated := current.DeepCopy()
		updated.Spec.Taints = taints
		_, err := client.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update taints of node %s: %w", node.Name, err)
	}
	return nil
}

func equalTaints(a, b []v1.Taint) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(t v1.Taint) bool { return !taintExists(b, &t) })
}
