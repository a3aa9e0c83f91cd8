package apiserver

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

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

var (
	cached     = &metav1.GetOptions{ResourceVersion: "0"}
	consistent = &metav1.GetOptions{}
)

// get reads namespace/name and returns field(obj), trying the cache and then, unless
// accept(value) holds, etcd.
func get(ctx context.Context, getter rest.Getter, namespace, name string, field func(any) string, accept func(string) bool) (string, bool, error) {
	var value string
	var found bool
	for _, opts := range []*metav1.GetOptions{cached, consistent} {
		obj, err := getter.Get(ctx, namespace, name, opts)
		switch {
		case apierrors.IsNotFound(err):
			value, found = "", false
		case err != nil:
			return "", false, err
		default:
			value, found = field(obj), true
		}
		if found && accept(value) {
			break
		}
	}
	return value, found, nil
}

// PodNodeName implements authorization.Lookup; wantNode is the node asking.
func (l storageLookup) PodNodeName(ctx context.Context, namespace, name, wantNode string) (string, bool, error) {
	return get(ctx, l.stores.Store(corev1.Resource("pods")), namespace, name,
		func(obj any) string { return obj.(*corev1.Pod).Spec.NodeName },
		func(node string) bool { return node == wantNode })
}

// CSRRequester implements authorization.Lookup; wantUser is the user asking.
func (l storageLookup) CSRRequester(ctx context.Context, name, wantUser string) (string, bool, error) {
	return get(ctx, l.stores.Store(certificatesv1.Resource("certificatesigningrequests")), "", name,
		func(obj any) string { return obj.(*certificatesv1.CertificateSigningRequest).Spec.Username },
		func(user string) bool { return user == wantUser })
}

// NodeRunsServiceAccount implements authorization.Lookup: whether a pod bound to node
// in namespace runs as service account name. It lists the node's pods there from the
// watch cache and, when none matches, from etcd.
func (l storageLookup) NodeRunsServiceAccount(ctx context.Context, namespace, name, node string) (bool, error) {
	pods := l.stores.Store(corev1.Resource("pods"))
	selector := fields.SelectorFromSet(fields.Set{"spec.nodeName": node, "spec.serviceAccountName": name})
	for _, rv := range []string{"0", ""} {
		obj, err := pods.List(ctx, namespace, &metainternalversion.ListOptions{FieldSelector: selector, ResourceVersion: rv})
		if err != nil {
			return false, err
		}
		if len(obj.(*corev1.PodList).Items) > 0 {
			return true, nil
		}
	}
	return false, nil
}
