// Package runtimeclass resolves a pod's RuntimeClass (spec.runtimeClassName) to the CRI
// runtime handler its sandbox runs with (RunPodSandboxRequest.runtime_handler). Mirrors
// k8s.io/kubernetes/pkg/kubelet/runtimeclass.
package runtimeclass

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Manager looks RuntimeClasses up in the API server. kube's keeps an informer over every
// RuntimeClass, a watch per node; this one reads the class a pod names when the pod's
// sandbox is created, which is seldom: nothing is read for the pods that name none (most
// of them, and every hollow node's), and a class created or deleted a moment ago is seen
// as it is now.
type Manager struct {
	client kubernetes.Interface
}

// NewManager returns a Manager reading RuntimeClasses through client (the node may get
// them: the Node authorizer's rule).
func NewManager(client kubernetes.Interface) *Manager {
	return &Manager{client: client}
}

// LookupRuntimeHandler returns the handler of the RuntimeClass runtimeClassName names,
// and "" (the runtime's default handler) when it names none (nil or ""). Errors: the
// API's NotFound (runtimeclasses.node.k8s.io "x" not found) for a class that does not
// exist; any other failure wrapped with the class's name. Mirrors
// Manager.LookupRuntimeHandler.
func (m *Manager) LookupRuntimeHandler(ctx context.Context, runtimeClassName *string) (string, error) {
	if runtimeClassName == nil || *runtimeClassName == "" {
		return "", nil
	}
	name := *runtimeClassName
	rc, err := m.client.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", err
		}
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", name, err)
	}
	return rc.Handler, nil
}
