// Package defaultbinder holds the Bind plugin DefaultBinder.
package defaultbinder

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

// DefaultBinder records the decision by POSTing a Binding to the pod's
// pods/binding subresource; the apiserver then sets spec.nodeName and the
// PodScheduled=True condition. The pod's UID is sent as a precondition so a
// pod deleted and recreated under the same name is not bound by mistake.
// Mirrors kube-scheduler's defaultbinder plugin.
type DefaultBinder struct {
	handle framework.Handle
}

var _ framework.BindPlugin = (*DefaultBinder)(nil)

// New builds the plugin.
func New(_ context.Context, h framework.Handle) (framework.Plugin, error) {
	return &DefaultBinder{handle: h}, nil
}

// Name returns "DefaultBinder".
func (*DefaultBinder) Name() string { return names.DefaultBinder }

// Bind binds pod to nodeName; an API error becomes an Error status.
func (b *DefaultBinder) Bind(ctx context.Context, _ *framework.CycleState, pod *v1.Pod, nodeName string) *framework.Status {
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if err := b.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return framework.AsStatus(fmt.Errorf("bind pod %s/%s to node %q: %w", pod.Namespace, pod.Name, nodeName, err))
	}
	return nil
}
