package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// mirrorPodAnnotation marks a static pod's mirror in the API (kube's
// k8s.io/kubernetes/pkg/kubelet/types.ConfigMirrorAnnotationKey).
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// NodeRestriction limits what a node (user system:node:<name> in system:nodes) may write
// to objects of its own, where the authorizer cannot see the body: it may create only its
// own Node, its own Lease, and mirror pods bound to itself (owned, if at all, by its Node
// as controller). Mirrors the NodeRestriction
// admission plugin (k8s.io/kubernetes/plugin/pkg/admission/noderestriction).
type NodeRestriction struct{}

// Admit implements Interface.
func (NodeRestriction) Admit(ctx context.Context, a Attributes) error {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil
	}
	node, ok := strings.CutPrefix(u.GetName(), "system:node:")
	if !ok || node == "" || !slices.Contains(u.GetGroups(), "system:nodes") {
		return nil
	}
	gr := a.Resource.GroupResource()
	forbid := func(format string, args ...any) error {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf(format, args...))
	}
	switch {
	case gr.Group == "" && gr.Resource == "nodes" && a.Subresource == "" && (a.Operation == Create || a.Operation == Update):
		if n, ok := a.Object.(*corev1.Node); ok && n.Name != node {
			return forbid("node %q is not allowed to modify node %q", node, n.Name)
		}
	case gr.Group == "" && gr.Resource == "pods" && a.Subresource == "" && a.Operation == Create:
		pod, ok := a.Object.(*corev1.Pod)
		if !ok {
			return nil
		}
		if _, mirror := pod.Annotations[mirrorPodAnnotation]; !mirror {
			return forbid("pod does not have %q annotation, node %q can only create mirror pods", mirrorPodAnnotation, node)
		}
		if pod.Spec.NodeName != node {
			return forbid("node %q can only create pods with spec.nodeName set to itself", node)
		}
		if len(pod.OwnerReferences) > 1 {
			return forbid("node %q can only create pods with a single owner reference set to itself", node)
		}
		if len(pod.OwnerReferences) == 1 {
			owner := pod.OwnerReferences[0]
			switch {
			case owner.APIVersion != "v1" || owner.Kind != "Node" || owner.Name != node:
				return forbid("node %q can only create pods with an owner reference set to itself", node)
			case owner.Controller == nil || !*owner.Controller:
				return forbid("node %q can only create pods with a controller owner reference set to itself", node)
			case owner.BlockOwnerDeletion != nil && *owner.BlockOwnerDeletion:
				return forbid("node %q must not set blockOwnerDeletion on an owner reference", node)
			}
		}
	case gr.Group == coordinationv1.GroupName && gr.Resource == "leases" && (a.Operation == Create || a.Operation == Update):
		if l, ok := a.Object.(*coordinationv1.Lease); ok && l.Name != node {
			return forbid("can only access node lease with the same name as the requesting node")
		}
	}
	return nil
}
