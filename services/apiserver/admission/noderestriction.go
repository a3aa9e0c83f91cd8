package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
)

// mirrorPodAnnotation marks a static pod's mirror in the API (kube's
// k8s.io/kubernetes/pkg/kubelet/types.ConfigMirrorAnnotationKey).
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// NodeRestriction limits what a node (user system:node:<name> in system:nodes) may write
// to objects of its own, where the authorizer cannot see the body: it may create and
// update only its own Node, without changing its taints or setting kubernetes.io labels
// other than the kubelet's own; its own Lease; mirror pods bound to itself, owned (if at
// all) by its Node as controller, that reference no service account; the status of pods bound to itself, without changing their labels;
// tokens only for pods bound to itself; only the CSINode named after itself; and events, core/v1 or events.k8s.io/v1, only
// reported as itself (NodeEventSource). Mirrors the NodeRestriction admission plugin
// (k8s.io/kubernetes/plugin/pkg/admission/noderestriction); the rule on events is
// skiff's, the one its event sink applies to the events nodes publish to NATS.
type NodeRestriction struct {
	// Pods reads pods, for the pod a token request is bound to.
	Pods rest.Getter
}

// Admit implements Interface.
func (p NodeRestriction) Admit(ctx context.Context, a Attributes) error {
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
	case gr.Group == "" && gr.Resource == "nodes" && (a.Subresource == "" || a.Subresource == "status"):
		return admitNode(node, a, forbid)
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
		if pod.Spec.ServiceAccountName != "" {
			return forbid("node %q can not create pods that reference a service account", node)
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
	case gr.Group == "" && gr.Resource == "pods" && a.Subresource == "status" && a.Operation == Update:
		oldPod, ok := a.OldObject.(*corev1.Pod)
		newPod, ok2 := a.Object.(*corev1.Pod)
		if !ok || !ok2 {
			return nil
		}
		if oldPod.Spec.NodeName != node {
			return forbid("node %q can only update pod status for pods with spec.nodeName set to itself", node)
		}
		if !labels.Equals(oldPod.Labels, newPod.Labels) {
			return forbid("node %q cannot update labels through pod status", node)
		}
	case gr.Group == "" && gr.Resource == "serviceaccounts" && a.Subresource == "token" && a.Operation == Create:
		return p.admitToken(ctx, node, a, forbid)
	case (gr.Group == "" || gr.Group == eventsv1.GroupName) && gr.Resource == "events" && a.Subresource == "" && (a.Operation == Create || a.Operation == Update):
		ev, ok := a.Object.(*corev1.Event)
		if v1, isV1 := a.Object.(*eventsv1.Event); isV1 {
			// The same event in events.k8s.io/v1's words: source is deprecatedSource.
			ev, ok = &corev1.Event{}, true
			scheme.ConvertEventsV1ToEvent(v1, ev)
		}
		if ok {
			if err := NodeEventSource(node, ev); err != nil {
				return forbid("%v", err)
			}
		}
	case gr.Group == storagev1.GroupName && gr.Resource == "csinodes":
		// The Node authorizer checks the name of every CSINode request but a create,
		// whose name is in the body.
		name := a.Name
		if a.Operation == Create {
			n, ok := a.Object.(*storagev1.CSINode)
			if !ok {
				return forbid("unable to access the object name")
			}
			name = n.Name
		}
		if name != node {
			return forbid("can only access CSINode with the same name as the requesting node")
		}
	case gr.Group == coordinationv1.GroupName && gr.Resource == "leases" && (a.Operation == Create || a.Operation == Update):
		if l, ok := a.Object.(*coordinationv1.Lease); ok && l.Name != node {
			return forbid("can only access node lease with the same name as the requesting node")
		}
	}
	return nil
}

// NodeEventSource checks that node reports ev as itself: source.host is node, and
// reportingInstance, when set, is node too (client-go's recorder sets both to the node
// name), so a node cannot put its words in another node's mouth. Errors say which field
// names something else.
func NodeEventSource(node string, ev *corev1.Event) error {
	if ev.Source.Host != node {
		return fmt.Errorf("node %q can only report events with source.host set to itself, not %q", node, ev.Source.Host)
	}
	if ev.ReportingInstance != "" && ev.ReportingInstance != node {
		return fmt.Errorf("node %q can only report events with reportingInstance set to itself, not %q", node, ev.ReportingInstance)
	}
	return nil
}

// admitNode: a node writes only its own Node; it may not change its taints (the
// node lifecycle controller owns them after registration) nor set labels that steer
// workloads toward it (kube's node-restriction.kubernetes.io/ and unknown kubernetes.io
// and k8s.io labels).
func admitNode(node string, a Attributes, forbid func(string, ...any) error) error {
	n, ok := a.Object.(*corev1.Node)
	if !ok {
		return nil
	}
	switch a.Operation {
	case Create:
		if n.Name != node {
			return forbid("node %q is not allowed to modify node %q", node, n.Name)
		}
		if bad := forbiddenNodeLabels(n.Labels, nil); len(bad) > 0 {
			return forbid("node %q is not allowed to set the following labels: %s", node, strings.Join(bad, ", "))
		}
	case Update:
		if n.Name != node || a.Name != node {
			return forbid("node %q is not allowed to modify node %q", node, a.Name)
		}
		old, ok := a.OldObject.(*corev1.Node)
		if !ok || a.Subresource == "status" {
			// nodes/status keeps the stored spec and metadata whatever the body says
			// (the status strategy), so a kubelet's status write with taints it has not
			// seen yet changes no taint.
			return nil
		}
		if !apiequality.Semantic.DeepEqual(n.Spec.Taints, old.Spec.Taints) {
			return forbid("node %q is not allowed to modify taints", node)
		}
		if bad := forbiddenNodeLabels(n.Labels, old.Labels); len(bad) > 0 {
			return forbid("node %q is not allowed to modify labels: %s", node, strings.Join(bad, ", "))
		}
	}
	return nil
}

// admitToken: a node may ask for a token only bound to a pod scheduled on it, named
// with its UID, so a token never outlives the pod that justified it.
func (p NodeRestriction) admitToken(ctx context.Context, node string, a Attributes, forbid func(string, ...any) error) error {
	tr, ok := a.Object.(*authenticationv1.TokenRequest)
	if !ok {
		return nil
	}
	ref := tr.Spec.BoundObjectRef
	if ref == nil || ref.Kind != "Pod" {
		return forbid("node requested token not bound to a pod")
	}
	if ref.UID == "" {
		return forbid("node requested token with a pod binding without a uid")
	}
	if p.Pods == nil {
		return forbid("node requested token bound to a pod that cannot be checked")
	}
	// The watch cache first, as kube's plugin reads its informer's lister; etcd when the
	// cache does not have the pod or shows it otherwise than the request expects (it may
	// lag a create or a bind by a moment), so a lagging cache never refuses a token.
	obj, err := rest.GetCachedFirst(ctx, p.Pods, a.Namespace, ref.Name, func(obj runtime.Object) bool {
		return boundTo(obj.(*corev1.Pod), ref.UID, node)
	})
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	if ref.UID != pod.UID {
		return forbid("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID)
	}
	if pod.Spec.NodeName != node {
		return forbid("node requested token bound to a pod scheduled on a different node")
	}
	return nil
}

// boundTo reports whether pod is the one with uid and is scheduled on node.
func boundTo(pod *corev1.Pod, uid types.UID, node string) bool {
	return pod.UID == uid && pod.Spec.NodeName == node
}

// kubeletLabels and kubeletLabelNamespaces are the kubernetes.io labels a kubelet may
// set on its Node (k8s.io/kubelet/pkg/apis: KubeletLabels, KubeletLabelNamespaces).
var (
	kubeletLabels = sets.New(
		corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
		corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
		corev1.LabelInstanceType, corev1.LabelInstanceTypeStable,
		corev1.LabelOSStable, corev1.LabelArchStable, "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
	)
	kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}
)

// forbiddenNodeLabels lists, sorted, the labels added, changed or removed between
// oldLabels and newLabels that a node may not touch: node-restriction.kubernetes.io/
// ones, and kubernetes.io or k8s.io ones that are not the kubelet's. Mirrors
// getModifiedLabels and getForbiddenLabels.
func forbiddenNodeLabels(newLabels, oldLabels map[string]string) []string {
	modified := sets.New[string]()
	for key, value := range newLabels {
		if old, had := oldLabels[key]; !had || old != value {
			modified.Insert(key)
		}
	}
	for key := range oldLabels {
		if _, kept := newLabels[key]; !kept {
			modified.Insert(key)
		}
	}
	var bad []string
	for _, key := range sets.List(modified) {
		ns, _, found := strings.Cut(key, "/")
		if !found {
			continue
		}
		inNamespace := func(namespace string) bool { return ns == namespace || strings.HasSuffix(ns, "."+namespace) }
		switch {
		case inNamespace(corev1.LabelNamespaceNodeRestriction):
			bad = append(bad, key)
		case (inNamespace("kubernetes.io") || inNamespace("k8s.io")) && !kubeletLabels.Has(key) &&
			!slices.ContainsFunc(kubeletLabelNamespaces, inNamespace):
			bad = append(bad, key)
		}
	}
	return bad
}
