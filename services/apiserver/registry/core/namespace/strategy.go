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
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/storage"
)

// Descriptor serves namespaces through REST: deleting one only marks it Terminating;
// namespaces/NAME/finalize removes its spec.finalizers (the namespace controller's last
// step), upon which it goes.
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
		return &REST{Store: store}, map[string]registry.Subresource{
			"finalize": {Kind: "Namespace", Storage: &FinalizeREST{store: store.WithStrategy(FinalizeStrategy{})}},
			"status":   {Kind: "Namespace", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
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

// ShouldDeleteDuringUpdate is true for a terminating namespace with neither
// spec.finalizers nor metadata.finalizers left: the update that removed the last one
// removes the namespace. Mirrors ShouldDeleteNamespaceDuringUpdate.
func (Strategy) ShouldDeleteDuringUpdate(obj runtime.Object) bool {
	ns, ok := obj.(*corev1.Namespace)
	return ok && ns.DeletionTimestamp != nil && len(ns.Spec.Finalizers) == 0 && len(ns.Finalizers) == 0
}

// FinalizeStrategy is the strategy of namespaces/finalize: only spec.finalizers may
// change. Mirrors namespaceFinalizeStrategy.
type FinalizeStrategy struct{ Strategy }

// PrepareForUpdate keeps everything but spec.finalizers.
func (FinalizeStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	finalizers := ns.Spec.Finalizers
	ns.Status = oldNS.Status
	ns.Spec = oldNS.Spec
	ns.Spec.Finalizers = finalizers
	ns.Labels, ns.Annotations, ns.Finalizers, ns.OwnerReferences = oldNS.Labels, oldNS.Annotations, oldNS.Finalizers, oldNS.OwnerReferences
}

// ValidateUpdate checks the metadata rules and that each finalizer is a qualified name
// (kube's ValidateNamespaceFinalizeUpdate).
func (FinalizeStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	ns := obj.(*corev1.Namespace)
	errs := apivalidation.ValidateObjectMetaUpdate(&ns.ObjectMeta, &old.(*corev1.Namespace).ObjectMeta, field.NewPath("metadata"))
	path := field.NewPath("spec", "finalizers")
	for i, f := range ns.Spec.Finalizers {
		for _, msg := range validation.IsQualifiedName(string(f)) {
			errs = append(errs, field.Invalid(path.Index(i), f, msg))
		}
	}
	return errs
}

// StatusStrategy is the strategy of namespaces/status: only status (phase and
// conditions) changes. Mirrors namespaceStatusStrategy.
type StatusStrategy struct{ Strategy }

// PrepareForUpdate keeps the stored spec; metadata changes as on the main resource
// (kube's namespace status strategy keeps only the spec, and the conformance suite
// patches an annotation through namespaces/status).
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.Namespace).Spec = old.(*corev1.Namespace).Spec
}

// ValidateUpdate checks the metadata rules and the phase: Active while the namespace
// is not being deleted, Terminating once it is. Mirrors ValidateNamespaceStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	ns := obj.(*corev1.Namespace)
	errs := apivalidation.ValidateObjectMetaUpdate(&ns.ObjectMeta, &old.(*corev1.Namespace).ObjectMeta, field.NewPath("metadata"))
	phase := field.NewPath("status", "phase")
	if ns.DeletionTimestamp.IsZero() {
		if ns.Status.Phase != corev1.NamespaceActive {
			errs = append(errs, field.Invalid(phase, ns.Status.Phase, "may only be 'Active' if `deletionTimestamp` is empty"))
		}
	} else if ns.Status.Phase != corev1.NamespaceTerminating {
		errs = append(errs, field.Invalid(phase, ns.Status.Phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
	}
	return errs
}

// GetResetFields: namespaces/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// FinalizeREST is namespaces/NAME/finalize: PUT a namespace whose spec.finalizers are
// what should remain. Mirrors k8s.io/kubernetes/pkg/registry/core/namespace/storage.FinalizeREST.
type FinalizeREST struct {
	store *registry.Store
}

// New is an empty Namespace.
func (r *FinalizeREST) New() runtime.Object { return &corev1.Namespace{} }

// Update writes spec.finalizers; the namespace goes when it is terminating and none are
// left. Errors as the Store's Update.
func (r *FinalizeREST) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, namespace, name, objInfo, opts)
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
// controller-manager's namespace controller deletes its contents and then removes the
// "kubernetes" finalizer through namespaces/NAME/finalize. Mirrors
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
// delete of a terminating namespace changes nothing, unless its spec.finalizers are
// already empty: then it is removed. Preconditions in opts (uid, resourceVersion) that
// fail give 409 Conflict.
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
	if ns := out.(*corev1.Namespace); len(ns.Spec.Finalizers) == 0 && len(ns.Finalizers) == 0 {
		rv := ns.ResourceVersion
		return r.Store.Delete(ctx, "", name, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	}
	return out, false, nil
}
