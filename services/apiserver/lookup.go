package apiserver

import (
	"context"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// storageLookup reads what the authorizer's node and bootstrapper rules depend on. It
// asks the watch cache first (resourceVersion "0"), as kube's Node authorizer reads its
// graph from informers; when the cache says no (the object is not there yet, or names
// someone else), it asks etcd (a consistent read), so a client that reads what it just
// wrote is not refused because the cache lags by a moment.
type storageLookup struct {
	stores registry.Stores
}

// get reads namespace/name and returns field(obj), from the cache (in place) when
// accept(value) holds for the cached object's, else from etcd (rest.GetCachedFirst).
func get(ctx context.Context, getter rest.Getter, namespace, name string, field func(runtime.Object) string, accept func(string) bool) (string, bool, error) {
	obj, err := rest.GetCachedFirst(ctx, getter, namespace, name, func(obj runtime.Object) bool { return accept(field(obj)) })
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return field(obj), true, nil
}

// PodNodeName implements authorization.Lookup; wantNode is the node asking.
func (l storageLookup) PodNodeName(ctx context.Context, namespace, name, wantNode string) (string, bool, error) {
	return get(ctx, l.stores.Store(corev1.Resource("pods")), namespace, name,
		func(obj runtime.Object) string { return obj.(*corev1.Pod).Spec.NodeName },
		func(node string) bool { return node == wantNode })
}

// CSRRequester implements authorization.Lookup; wantUser is the user asking.
func (l storageLookup) CSRRequester(ctx context.Context, name, wantUser string) (string, bool, error) {
	return get(ctx, l.stores.Store(certificatesv1.Resource("certificatesigningrequests")), "", name,
		func(obj runtime.Object) string { return obj.(*certificatesv1.CertificateSigningRequest).Spec.Username },
		func(user string) bool { return user == wantUser })
}

// NodeRunsServiceAccount implements authorization.Lookup: whether a pod bound to node
// in namespace runs as service account name. It looks through the node's pods there in
// the watch cache and, when none matches, lists them from etcd.
func (l storageLookup) NodeRunsServiceAccount(ctx context.Context, namespace, name, node string) (bool, error) {
	selector := fields.SelectorFromSet(fields.Set{"spec.nodeName": node, "spec.serviceAccountName": name})
	return l.anyPod(ctx, namespace, selector, func(*corev1.Pod) bool { return true })
}

// NodePodsUse implements authorization.Lookup: whether a pod in namespace bound to node
// satisfies uses, from the watch cache's node index and, when none does, from etcd.
func (l storageLookup) NodePodsUse(ctx context.Context, namespace, node string, uses func(*corev1.Pod) bool) (bool, error) {
	return l.anyPod(ctx, namespace, fields.OneTermEqualSelector("spec.nodeName", node), uses)
}

// anyPod reports whether a pod in namespace that selector matches satisfies match. It
// looks at the watch cache's pods in place (no copies: match only reads) and, when none
// does, lists from etcd (a consistent read), so a pod just created or bound is found
// even while the cache lags.
func (l storageLookup) anyPod(ctx context.Context, namespace string, selector fields.Selector, match func(*corev1.Pod) bool) (bool, error) {
	pods := l.stores.Store(corev1.Resource("pods"))
	opts := &metainternalversion.ListOptions{FieldSelector: selector}
	found := false
	if _, err := pods.VisitCached(namespace, opts, func(obj runtime.Object) bool {
		found = match(obj.(*corev1.Pod))
		return !found
	}); err != nil || found {
		return found, err
	}
	obj, err := pods.List(ctx, namespace, opts)
	if err != nil {
		return false, err
	}
	list := obj.(*corev1.PodList)
	for i := range list.Items {
		if match(&list.Items[i]) {
			return true, nil
		}
	}
	return false, nil
}

// PersistentVolumeClaimRef implements authorization.Lookup: the claim PersistentVolume
// name's claimRef names, from the cache when it names one, else from etcd.
func (l storageLookup) PersistentVolumeClaimRef(ctx context.Context, name string) (string, string, bool, error) {
	ref, found, err := get(ctx, l.stores.Store(corev1.Resource("persistentvolumes")), "", name,
		func(obj runtime.Object) string {
			if r := obj.(*corev1.PersistentVolume).Spec.ClaimRef; r != nil {
				return r.Namespace + "/" + r.Name
			}
			return ""
		},
		func(ref string) bool { return ref != "" })
	if err != nil || !found || ref == "" {
		return "", "", false, err
	}
	namespace, claim, _ := strings.Cut(ref, "/")
	return namespace, claim, true, nil
}

// VolumeAttachmentNodeName implements authorization.Lookup; wantNode is the node asking.
func (l storageLookup) VolumeAttachmentNodeName(ctx context.Context, name, wantNode string) (string, bool, error) {
	return get(ctx, l.stores.Store(storagev1.Resource("volumeattachments")), "", name,
		func(obj runtime.Object) string { return obj.(*storagev1.VolumeAttachment).Spec.NodeName },
		func(node string) bool { return node == wantNode })
}
