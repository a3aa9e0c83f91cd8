// Package namespace is the namespaces resource. Mirrors
// k8s.io/kubernetes/pkg/registry/core/namespace.
package namespace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/storage"
)

// Descriptor serves namespaces through REST: deleting one only marks it Terminating.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "namespaces",
	SingularName: "namespace",
	Kind:         "Namespace",
	ShortNames:   []string{"ns"},
	NewFunc:      func() runtime.Object { return &corev1.Namespace{} },
	NewListFunc:  func() runtime.Object { return &corev1.NamespaceList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return &REST{Store: store}, nil, nil
	},
}

// Strategy is the namespaces strategy.
type Strategy struct{}

// NamespaceScoped is false: namespaces are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate sets phase Active and the kubernetes finalizer, and the
// kubernetes.io/metadata.name label kube-apiserver adds to every namespace.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	ns := obj.(*corev1.Namespace)
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	setNameLabel(ns)
}

// PrepareForUpdate keeps status and spec (finalizers change through namespaces/finalize).
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	ns.Status = oldNS.Status
	ns.Spec = oldNS.Spec
	setNameLabel(ns)
}

func setNameLabel(ns *corev1.Namespace) {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

// Validate checks that the name is a DNS label, as namespace names must be.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	ns := obj.(*corev1.Namespace)
	return apivalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apivalidation.NameIsDNSLabel, field.NewPath("metadata"))
}

// ValidateUpdate checks the metadata rules of an update.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return apivalidation.ValidateObjectMetaUpdate(&obj.(*corev1.Namespace).ObjectMeta, &old.(*corev1.Namespace).ObjectMeta, field.NewPath("metadata"))
}

// GetAttrs returns labels and the selectable fields metadata.name and status.phase.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, nil, fmt.Errorf("not a namespace: %T", obj)
	}
	f := registry.ObjectMetaFieldsSet(&ns.ObjectMeta, false)
	f["status.phase"] = string(ns.Status.Phase)
	return labels.Set(ns.Labels), f, nil
}

// TableColumns are NAME STATUS AGE. Mirrors printNamespace.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Status", Type: "string", Description: "The status of the namespace"},
		registry.AgeColumn,
	}
}

// TableRow prints one namespace.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	ns := obj.(*corev1.Namespace)
	return []interface{}{ns.Name, string(ns.Status.Phase), registry.TranslateTimestampSince(ns.CreationTimestamp)}
}

// REST is the namespaces resource. Deleting a namespace only marks it Terminating; the
// namespace controller deletes its contents and then calls Finalize. Mirrors
// k8s.io/kubernetes/pkg/registry/core/namespace/storage.REST.
type REST struct {
	*registry.Store
}

// DeleteCollection is not served for namespaces, as kube-apiserver does not serve it:
// each namespace goes through Delete and the namespace controller. Declaring it hides
// the embedded Store's, whose deletes would skip Terminating, so REST does not
// implement rest.CollectionDeleter and discovery lists no deletecollection.
func (r *REST) DeleteCollection() {}

// Delete sets deletionTimestamp and phase Terminating and returns the namespace; a second
// delete of a terminating namespace changes nothing. Preconditions in opts (uid,
// resourceVersion) that fail give 409 Conflict.
func (r *REST) Delete(ctx context.Context, _, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	key, err := r.KeyFunc("", name)
	if err != nil {
		return nil, false, err
	}
	var preconditions *storage.Preconditions
	if opts != nil && opts.Preconditions != nil {
		preconditions = &storage.Preconditions{UID: opts.Preconditions.UID, ResourceVersion: opts.Preconditions.ResourceVersion}
	}
	if opts != nil && len(opts.DryRun) > 0 {
		obj, err := r.Get(ctx, "", name, &metav1.GetOptions{})
		return obj, false, err
	}
	out := r.NewFunc()
	err = r.Storage.GuaranteedUpdate(ctx, key, out, preconditions, func(existing runtime.Object) (runtime.Object, error) {
		ns := existing.(*corev1.Namespace)
		if ns.DeletionTimestamp == nil {
			now := metav1.Now()
			ns.DeletionTimestamp = &now
		}
		ns.Status.Phase = corev1.NamespaceTerminating
		return ns, nil
	})
	if err != nil {
		return nil, false, r.InterpretError(err, name)
	}
	return out, false, nil
}

// Finalize removes a terminating namespace once the controller has emptied it.
func (r *REST) Finalize(ctx context.Context, name string) error {
	_, _, err := r.Store.Delete(ctx, "", name, &metav1.DeleteOptions{})
	return err
}
