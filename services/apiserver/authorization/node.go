package authorization

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"skiff.dev/services/internal/podutil"
)

// authorizeNode applies the Node authorizer's rules to a node's requests: it reads
// nodes, writes only its own Node and Lease, reads only the pods bound to it (a list or
// watch must select spec.nodeName=<node>), writes those pods' status and deletes them,
// creates pods (the NodeRestriction admission plugin lets through only its own mirror
// pods), events and CertificateSigningRequests, creates tokens (serviceaccounts/token)
// for the service accounts its pods run as, reads (gets, or lists and watches by
// metadata.name) the Secrets and ConfigMaps its pods use, reads RuntimeClasses and
// CSIDrivers, writes only its own CSINode and gets the VolumeAttachments of its node.
// Anything else, and anyone else, gets no opinion (with the reason, when the object is
// another node's), as in kube, so RBAC decides next.
func (z *chain) authorizeNode(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	node, ok := NodeName(a.GetUser())
	if !ok || !a.IsResourceRequest() {
		return authorizer.DecisionNoOpinion, "", nil
	}
	verb, sub := a.GetVerb(), a.GetSubresource()
	noRelationship := fmt.Sprintf("no relationship found between node '%s' and this object", node)
	switch a.GetAPIGroup() + "/" + a.GetResource() {
	case "/nodes":
		switch {
		case sub == "" && slices.Contains(read, verb):
			return authorizer.DecisionAllow, "", nil
		case sub == "" && verb == "create":
			return authorizer.DecisionAllow, "", nil // NodeRestriction checks the name
		case (sub == "" || sub == "status") && (verb == "update" || verb == "patch" || (verb == "delete" && sub == "")):
			if a.GetName() == node {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, noRelationship, nil
		}
	case "/pods":
		switch {
		case sub == "" && (verb == "list" || verb == "watch"):
			if selected, ok := fieldValue(a, "spec.nodeName"); ok && selected == node {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, fmt.Sprintf("can only list/watch pods with spec.nodeName field selector: spec.nodeName=%s", node), nil
		case sub == "" && verb == "create":
			return authorizer.DecisionAllow, "", nil // NodeRestriction: own mirror pods only
		case (sub == "" && (verb == "get" || verb == "delete")) || (sub == "status" && (verb == "get" || verb == "update" || verb == "patch")):
			bound, found, err := z.lookup.PodNodeName(ctx, a.GetNamespace(), a.GetName(), node)
			if err != nil {
				return authorizer.DecisionNoOpinion, "", err
			}
			if found && bound == node {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, noRelationship, nil
		}
	case "/secrets", "/configmaps":
		// The kubelet reads the Secrets and ConfigMaps its pods use (volumes, env): by
		// name, or by a list or watch of that one name (metadata.name=<name>), which its
		// watch-based cache keeps each one current with (kube's Node authorizer turns
		// such a selector into the request's name).
		switch {
		case sub == "" && verb == "get":
			return z.nodePodsReference(ctx, node, a, a.GetName(), noRelationship)
		case sub == "" && (verb == "list" || verb == "watch"):
			name, _ := fieldValue(a, "metadata.name")
			return z.nodePodsReference(ctx, node, a, name, noRelationship)
		}
	case "/persistentvolumeclaims":
		// The kubelet reads the claims its pods' volumes name (kube's graph: pod → pvc).
		if sub == "" && verb == "get" {
			return z.nodePodsReference(ctx, node, a, a.GetName(), noRelationship)
		}
	case "/persistentvolumes":
		// ... and the volumes those claims are bound to (pv → pvc by the volume's
		// claimRef, as kube's graph links them).
		if sub == "" && verb == "get" {
			namespace, claim, found, err := z.lookup.PersistentVolumeClaimRef(ctx, a.GetName())
			if err != nil {
				return authorizer.DecisionNoOpinion, "", err
			}
			if !found {
				return authorizer.DecisionNoOpinion, noRelationship, nil
			}
			uses, err := z.lookup.NodePodsUse(ctx, namespace, node, func(pod *corev1.Pod) bool {
				return podReferences(pod, "persistentvolumeclaims", claim)
			})
			if err != nil || !uses {
				return authorizer.DecisionNoOpinion, noRelationship, err
			}
			return authorizer.DecisionAllow, "", nil
		}
	case "/serviceaccounts":
		// A node asks for the tokens of the service accounts its pods run as; the
		// NodeRestriction admission plugin checks that the token is bound to such a pod.
		if sub == "token" && verb == "create" {
			runs, err := z.lookup.NodeRunsServiceAccount(ctx, a.GetNamespace(), a.GetName(), node)
			if err != nil {
				return authorizer.DecisionNoOpinion, "", err
			}
			if runs {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, noRelationship, nil
		}
	case "coordination.k8s.io/leases":
		if a.GetNamespace() != corev1.NamespaceNodeLease || sub != "" {
			return authorizer.DecisionNoOpinion, "can only access node lease in the kube-node-lease namespace", nil
		}
		switch verb {
		case "create":
			return authorizer.DecisionAllow, "", nil // NodeRestriction checks the name
		case "get", "update", "patch", "delete":
			if a.GetName() == node {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, noRelationship, nil
		}
	case "/events", "events.k8s.io/events":
		if slices.Contains(write, verb) {
			return authorizer.DecisionAllow, "", nil
		}
	case "node.k8s.io/runtimeclasses":
		// The kubelet reads a pod's RuntimeClass for its runtime handler (kube's node
		// rules: get, list, watch runtimeclasses).
		if sub == "" && slices.Contains(read, verb) {
			return authorizer.DecisionAllow, "", nil
		}
	case "storage.k8s.io/csinodes":
		// A kubelet registers its CSI drivers in the CSINode named after it; create is
		// let through here and NodeRestriction checks the name in the body.
		switch {
		case verb != "get" && verb != "create" && verb != "update" && verb != "patch" && verb != "delete":
			return authorizer.DecisionNoOpinion, "can only get, create, update, patch, or delete a CSINode", nil
		case sub != "":
			return authorizer.DecisionNoOpinion, "cannot authorize CSINode subresources", nil
		case verb != "create" && a.GetName() != node:
			return authorizer.DecisionNoOpinion, "can only access CSINode with the same name as the requesting node", nil
		}
		return authorizer.DecisionAllow, "", nil
	case "storage.k8s.io/csidrivers":
		// kube's node rules: get, list, watch csidrivers.
		if sub == "" && slices.Contains(read, verb) {
			return authorizer.DecisionAllow, "", nil
		}
	case "storage.k8s.io/volumeattachments":
		// A kubelet gets the VolumeAttachments of its own node (kube's graph: va → node).
		switch {
		case verb != "get":
			return authorizer.DecisionNoOpinion, "can only get individual resources of this type", nil
		case sub != "":
			return authorizer.DecisionNoOpinion, "cannot get subresource", nil
		case a.GetName() == "":
			return authorizer.DecisionNoOpinion, "No Object name found", nil
		}
		attached, found, err := z.lookup.VolumeAttachmentNodeName(ctx, a.GetName(), node)
		if err != nil {
			return authorizer.DecisionNoOpinion, "", err
		}
		if found && attached == node {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, noRelationship, nil
	case "certificates.k8s.io/certificatesigningrequests":
		if sub == "" && (verb == "create" || slices.Contains(read, verb)) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// nodePodsReference allows the request when a pod bound to node in the request's
// namespace refers to the object named name (kube's Node authorizer graph: pod →
// secret, configmap).
func (z *chain) nodePodsReference(ctx context.Context, node string, a authorizer.Attributes, name, noRelationship string) (authorizer.Decision, string, error) {
	if name == "" {
		return authorizer.DecisionNoOpinion, "can only get individual resources of this type", nil
	}
	uses, err := z.lookup.NodePodsUse(ctx, a.GetNamespace(), node, func(pod *corev1.Pod) bool {
		return podReferences(pod, a.GetResource(), name)
	})
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if uses {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, noRelationship, nil
}

// podReferences reports whether pod uses the secret or configmap name (through volumes,
// projected ones too, env and envFrom of any container, or image pull secrets) or the
// persistentvolumeclaim name (a persistentVolumeClaim volume, or an ephemeral volume's
// <pod>-<volume> claim).
func podReferences(pod *corev1.Pod, resource, name string) bool {
	other := func(n string) bool { return n != name } // the walk stops at name
	switch resource {
	case "secrets":
		return !podutil.VisitPodSecretNames(pod, other)
	case "persistentvolumeclaims":
		for _, v := range pod.Spec.Volumes {
			if (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name) || (v.Ephemeral != nil && pod.Name+"-"+v.Name == name) {
				return true
			}
		}
		return false
	}
	return resource == "configmaps" && !podutil.VisitPodConfigmapNames(pod, other)
}
