package admission_test

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/registry"
)

func TestNodeRestriction(t *testing.T) {
	s := newStores()
	mine := create(t, s.pods, "nr", newPod("nr", "mine", "n1")).(*corev1.Pod)
	theirs := create(t, s.pods, "nr", newPod("nr", "theirs", "n2")).(*corev1.Pod)
	plugin := admission.NodeRestriction{Pods: s.pods}

	nodes := corev1.SchemeGroupVersion.WithResource("nodes")
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	serviceAccounts := corev1.SchemeGroupVersion.WithResource("serviceaccounts")
	node := func(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	mirror := func(name, nodeName string) *corev1.Pod {
		p := newPod("nr", name, nodeName)
		p.Annotations = map[string]string{"kubernetes.io/config.mirror": "hash"}
		return p
	}
	withLabels := func(p *corev1.Pod, labels map[string]string) *corev1.Pod {
		p = p.DeepCopy()
		p.Labels = labels
		return p
	}
	lease := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name}}
	}
	token := func(ref *authenticationv1.BoundObjectReference) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref}}
	}
	podRef := func(name string, uid types.UID) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: name, UID: uid}
	}
	csiNodes := storagev1.SchemeGroupVersion.WithResource("csinodes")
	csiNode := func(name string) *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	events := corev1.SchemeGroupVersion.WithResource("events")
	eventsV1 := eventsv1.SchemeGroupVersion.WithResource("events")
	eventV1 := func(host, instance string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "nr", Name: "mine.1"}, Reason: "Started",
			DeprecatedSource: corev1.EventSource{Component: "kubelet", Host: host}, ReportingController: "kubelet", ReportingInstance: instance}
	}
	event := func(host, instance string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "nr", Name: "mine.1"}, Reason: "Started",
			Source: corev1.EventSource{Component: "kubelet", Host: host}, ReportingController: "kubelet", ReportingInstance: instance}
	}

	for _, tc := range []struct {
		name     string
		user     []string // name, groups...; default system:node:n1 in system:nodes
		op       admission.Operation
		resource schema.GroupVersionResource
		sub      string
		ns, obj  string
		object   runtime.Object
		old      runtime.Object
		forbids  string // "" admits
	}{
		{name: "a node registers its own Node with the kubelet's labels", op: admission.Create, resource: nodes, obj: "n1",
			object: node("n1", map[string]string{corev1.LabelHostname: "n1", corev1.LabelOSStable: "linux", "beta.kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "x", "kubelet.kubernetes.io/role": "a", "skiff.dev/pool": "p"})},
		{name: "a node may not register another Node", op: admission.Create, resource: nodes, obj: "n2", object: node("n2", nil),
			forbids: `node "n1" is not allowed to modify node "n2"`},
		{name: "a node may not register with node-restriction labels", op: admission.Create, resource: nodes, obj: "n1",
			object:  node("n1", map[string]string{"node-restriction.kubernetes.io/trusted": "yes"}),
			forbids: `node "n1" is not allowed to set the following labels: node-restriction.kubernetes.io/trusted`},
		{name: "a node may not register with unknown kubernetes.io labels", op: admission.Create, resource: nodes, obj: "n1",
			object:  node("n1", map[string]string{"node-role.kubernetes.io/control-plane": ""}),
			forbids: "is not allowed to set the following labels: node-role.kubernetes.io/control-plane"},
		{name: "a node updates its own Node status", op: admission.Update, resource: nodes, sub: "status", obj: "n1",
			object: node("n1", map[string]string{"node-role.kubernetes.io/worker": ""}, unreachable), old: node("n1", map[string]string{"node-role.kubernetes.io/worker": ""}, unreachable)},
		{name: "a node may not update another Node", op: admission.Update, resource: nodes, sub: "status", obj: "n2",
			object: node("n2", nil), old: node("n2", nil), forbids: `node "n1" is not allowed to modify node "n2"`},
		{name: "a node's status write carrying taints it has not seen yet is let through (nodes/status keeps the stored spec)",
			op: admission.Update, resource: nodes, sub: "status", obj: "n1", object: node("n1", nil), old: node("n1", nil, unreachable)},
		{name: "a node may not remove its taints", op: admission.Update, resource: nodes, obj: "n1",
			object: node("n1", nil), old: node("n1", nil, unreachable), forbids: `node "n1" is not allowed to modify taints`},
		{name: "a node may not add kubernetes.io labels on update", op: admission.Update, resource: nodes, obj: "n1",
			object: node("n1", map[string]string{"node-role.kubernetes.io/control-plane": ""}), old: node("n1", nil),
			forbids: `node "n1" is not allowed to modify labels: node-role.kubernetes.io/control-plane`},
		{name: "a node may not remove node-restriction labels on update", op: admission.Update, resource: nodes, obj: "n1",
			object: node("n1", nil), old: node("n1", map[string]string{"node-restriction.kubernetes.io/trusted": "yes"}),
			forbids: "is not allowed to modify labels: node-restriction.kubernetes.io/trusted"},
		{name: "a node creates a mirror pod bound to itself", op: admission.Create, resource: pods, ns: "nr", obj: "static", object: mirror("static", "n1")},
		{name: "a node may create only mirror pods", op: admission.Create, resource: pods, ns: "nr", obj: "x", object: newPod("nr", "x", "n1"),
			forbids: `pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods`},
		{name: "a node may not create a mirror pod for another node", op: admission.Create, resource: pods, ns: "nr", obj: "static", object: mirror("static", "n2"),
			forbids: `node "n1" can only create pods with spec.nodeName set to itself`},
		{name: "a node may not create a mirror pod that names a service account", op: admission.Create, resource: pods, ns: "nr", obj: "static",
			object:  func() *corev1.Pod { p := mirror("static", "n1"); p.Spec.ServiceAccountName = "admin"; return p }(),
			forbids: `node "n1" can not create pods that reference a service account`},
		{name: "a node updates the status of its own pod", op: admission.Update, resource: pods, sub: "status", ns: "nr", obj: "mine", object: mine, old: mine},
		{name: "a node may not update the status of another node's pod", op: admission.Update, resource: pods, sub: "status", ns: "nr", obj: "theirs",
			object: theirs, old: theirs, forbids: `node "n1" can only update pod status for pods with spec.nodeName set to itself`},
		{name: "a node may not change labels through pod status", op: admission.Update, resource: pods, sub: "status", ns: "nr", obj: "mine",
			object: withLabels(mine, map[string]string{"app": "evil"}), old: mine, forbids: `node "n1" cannot update labels through pod status`},
		{name: "a node creates its own Lease", op: admission.Create, resource: leases, ns: corev1.NamespaceNodeLease, obj: "n1", object: lease("n1")},
		{name: "a node may not create another node's Lease", op: admission.Create, resource: leases, ns: corev1.NamespaceNodeLease, obj: "n2", object: lease("n2"),
			forbids: "can only access node lease with the same name as the requesting node"},
		{name: "a node may not update another node's Lease", op: admission.Update, resource: leases, ns: corev1.NamespaceNodeLease, obj: "n2",
			object: lease("n2"), old: lease("n2"), forbids: "can only access node lease with the same name as the requesting node"},
		{name: "a node gets a token bound to its own pod", op: admission.Create, resource: serviceAccounts, sub: "token", ns: "nr", obj: "default",
			object: token(podRef("mine", mine.UID))},
		{name: "a node may not get a token bound to nothing", op: admission.Create, resource: serviceAccounts, sub: "token", ns: "nr", obj: "default",
			object: token(nil), forbids: "node requested token not bound to a pod"},
		{name: "a node may not get a token bound to a secret", op: admission.Create, resource: serviceAccounts, sub: "token", ns: "nr", obj: "default",
			object: token(&authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s", UID: "u"}), forbids: "node requested token not bound to a pod"},
		{name: "a node may not get a token for a pod binding without a uid", op: admission.Create, resource: serviceAccounts, sub: "token", ns: "nr", obj: "default",
			object: token(podRef("mine", "")), forbids: "node requested token with a pod binding without a uid"},
		{name: "a node may not get a token for a pod that was recreated", op: admission.Create, resource: serviceAccounts, sub: "token", ns: "nr", obj: "default",
			object: token(podRef("mine", "old-uid")), forbids: "the UID in the bound object reference (old-uid) does not match the UID in record"},
		{name: "a node may not get a token bound to another node's pod", op: admission.Create, resource: serviceAccounts, sub: "token", ns: "nr", obj: "default",
			object: token(podRef("theirs", theirs.UID)), forbids: "node requested token bound to a pod scheduled on a different node"},
		{name: "a node reports an event as itself", op: admission.Create, resource: events, ns: "nr", obj: "mine.1", object: event("n1", "n1")},
		{name: "a node reports an event without a reporting instance", op: admission.Create, resource: events, ns: "nr", obj: "mine.1", object: event("n1", "")},
		{name: "a node may not report an event as another node's", op: admission.Create, resource: events, ns: "nr", obj: "mine.1", object: event("n2", "n2"),
			forbids: `node "n1" can only report events with source.host set to itself, not "n2"`},
		{name: "a node may not report an event with no source host", op: admission.Create, resource: events, ns: "nr", obj: "mine.1", object: event("", ""),
			forbids: `node "n1" can only report events with source.host set to itself, not ""`},
		{name: "a node may not report an event from another node's instance", op: admission.Create, resource: events, ns: "nr", obj: "mine.1", object: event("n1", "n2"),
			forbids: `node "n1" can only report events with reportingInstance set to itself, not "n2"`},
		{name: "a node may not patch an event into another node's", op: admission.Update, resource: events, ns: "nr", obj: "mine.1",
			object: event("n2", ""), old: event("n1", ""), forbids: `node "n1" can only report events with source.host set to itself`},
		{name: "a node reports an events.k8s.io/v1 event as itself", op: admission.Create, resource: eventsV1, ns: "nr", obj: "mine.1", object: eventV1("n1", "n1")},
		{name: "a node may not report an events.k8s.io/v1 event as another node's", op: admission.Create, resource: eventsV1, ns: "nr", obj: "mine.1", object: eventV1("n2", "n1"),
			forbids: `node "n1" can only report events with source.host set to itself, not "n2"`},
		{name: "a node may not update an events.k8s.io/v1 event into another instance's", op: admission.Update, resource: eventsV1, ns: "nr", obj: "mine.1",
			object: eventV1("n1", "n2"), old: eventV1("n1", "n1"), forbids: `node "n1" can only report events with reportingInstance set to itself, not "n2"`},
		{name: "the scheduler reports events without a host", user: []string{"system:kube-scheduler"}, op: admission.Create, resource: events, ns: "nr", obj: "mine.1",
			object: event("", "default-scheduler")},
		{name: "a user that is not a node is not restricted", user: []string{"admin", "system:masters"}, op: admission.Update, resource: nodes, obj: "n1",
			object: node("n1", nil), old: node("n1", nil, unreachable)},
		{name: "a node creates its own CSINode", op: admission.Create, resource: csiNodes, object: csiNode("n1")},
		{name: "a node may not create another node's CSINode", op: admission.Create, resource: csiNodes, object: csiNode("n2"),
			forbids: "can only access CSINode with the same name as the requesting node"},
		{name: "a node updates its own CSINode", op: admission.Update, resource: csiNodes, obj: "n1", object: csiNode("n1"), old: csiNode("n1")},
		{name: "a node may not update another node's CSINode", op: admission.Update, resource: csiNodes, obj: "n2", object: csiNode("n2"), old: csiNode("n2"),
			forbids: "can only access CSINode with the same name as the requesting node"},
		{name: "a node may not delete another node's CSINode", op: admission.Delete, resource: csiNodes, obj: "n2", old: csiNode("n2"),
			forbids: "can only access CSINode with the same name as the requesting node"},
		{name: "a user named like a node outside system:nodes is not a node", user: []string{"system:node:n1"}, op: admission.Create, resource: nodes, obj: "n2",
			object: node("n2", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.user
			if u == nil {
				u = []string{"system:node:n1", "system:nodes"}
			}
			err := plugin.Admit(asUser(u[0], u[1:]...), admission.Attributes{
				Operation: tc.op, Resource: tc.resource, Subresource: tc.sub, Namespace: tc.ns, Name: tc.obj,
				Object: tc.object, OldObject: tc.old,
			})
			if tc.forbids == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbids) {
				t.Fatalf("err %v; want 403 saying %q", err, tc.forbids)
			}
		})
	}
}

// stalePods is a test double for the pods registry behind a watch cache that has not yet
// seen the pod's binding: reads at resourceVersion "0" answer the pod unbound, other reads
// go to the real store.
type stalePods struct{ live *registry.Store }

func (s stalePods) Get(ctx context.Context, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	obj, err := s.live.Get(ctx, namespace, name, &metav1.GetOptions{})
	if err == nil && opts.ResourceVersion == "0" {
		obj.(*corev1.Pod).Spec.NodeName = ""
	}
	return obj, err
}

func TestNodeRestrictionTokenCheckOutlivesALaggingCache(t *testing.T) {
	s := newStores()
	pod := create(t, s.pods, "nr-stale", newPod("nr-stale", "just-bound", "n1")).(*corev1.Pod)
	tr := &authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	attrs := func() admission.Attributes {
		return admission.Attributes{Operation: admission.Create, Resource: corev1.SchemeGroupVersion.WithResource("serviceaccounts"),
			Subresource: "token", Namespace: "nr-stale", Name: "default", Object: tr}
	}
	plugin := admission.NodeRestriction{Pods: stalePods{live: s.pods}}
	if err := plugin.Admit(asUser("system:node:n1", "system:nodes"), attrs()); err != nil {
		t.Fatalf("token for a pod the cache shows unbound but etcd bound to n1: %v; want admitted", err)
	}
	if err := plugin.Admit(asUser("system:node:n2", "system:nodes"), attrs()); !apierrors.IsForbidden(err) {
		t.Fatalf("token for n1's pod asked by n2: %v; want Forbidden", err)
	}
}
