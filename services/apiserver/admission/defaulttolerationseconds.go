package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DefaultTolerationSeconds is how long, by default, a pod stays on a node that is
// not-ready or unreachable before the taint eviction controller deletes it: 300 s, as
// kube-apiserver's --default-not-ready-toleration-seconds and
// --default-unreachable-toleration-seconds.
const DefaultTolerationSeconds int64 = 300

// DefaultTolerationSecondsPlugin gives every pod that does not already tolerate them
// NoExecute tolerations of node.kubernetes.io/not-ready and
// node.kubernetes.io/unreachable for a bounded time, so a pod outlives a short node
// outage but not a long one. Mirrors kube's DefaultTolerationSeconds admission plugin
// (plugin/pkg/admission/defaulttolerationseconds).
type DefaultTolerationSecondsPlugin struct {
	// NotReadySeconds and UnreachableSeconds are the tolerations' tolerationSeconds;
	// 0 means DefaultTolerationSeconds.
	NotReadySeconds, UnreachableSeconds int64
}

// Admit adds the missing tolerations to a pod being created or updated; a toleration with
// an empty key or effect that matches the taint counts as present.
func (p DefaultTolerationSecondsPlugin) Admit(_ context.Context, a Attributes) error {
	if a.Resource.Group != "" || a.Resource.Resource != "pods" || a.Subresource != "" || (a.Operation != Create && a.Operation != Update) {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("expected a Pod, got %T", a.Object))
	}
	tolerates := func(key string) bool {
		for _, t := range pod.Spec.Tolerations {
			if (t.Key == key || t.Key == "") && (t.Effect == corev1.TaintEffectNoExecute || t.Effect == "") {
				return true
			}
		}
		return false
	}
	for _, d := range []struct {
		key     string
		seconds int64
	}{
		{corev1.TaintNodeNotReady, p.NotReadySeconds},
		{corev1.TaintNodeUnreachable, p.UnreachableSeconds},
	} {
		if tolerates(d.key) {
			continue
		}
		seconds := d.seconds
		if seconds == 0 {
			seconds = DefaultTolerationSeconds
		}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key: d.key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds,
		})
	}
	return nil
}
