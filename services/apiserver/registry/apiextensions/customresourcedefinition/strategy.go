// Package customresourcedefinition is the apiextensions.k8s.io/v1
// customresourcedefinitions resource and its status subresource: the API that declares
// custom resources. Validation is kube's own (k8s.io/apiextensions-apiserver's
// ValidateCustomResourceDefinition, over the internal types it is written for); what a
// CRD makes served is package apiextensions. Mirrors
// k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition.
package customresourcedefinition

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
)

// Descriptor serves apiextensions.k8s.io/v1 customresourcedefinitions (kubectl: crd,
// crds; category api-extensions) with customresourcedefinitions/status, at
// /registry/apiextensions.k8s.io/customresourcedefinitions/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: apiextensionsv1.SchemeGroupVersion,
	Resource:     "customresourcedefinitions",
	SingularName: "customresourcedefinition",
	Kind:         "CustomResourceDefinition",
	ShortNames:   []string{"crd", "crds"},
	Categories:   []string{"api-extensions"},
	KeyRoot:      "/registry/apiextensions.k8s.io/customresourcedefinitions",
	NewFunc:      func() runtime.Object { return &apiextensionsv1.CustomResourceDefinition{} },
	NewListFunc:  func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return &REST{Store: store}, map[string]registry.Subresource{
			"status": {Kind: "CustomResourceDefinition", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// REST is the customresourcedefinitions storage: the generic Store, whose first delete
// of a CRD adds the customresourcecleanup finalizer and the Terminating condition, so
// that the CRD stays until package apiextensions has deleted its custom resources.
// Mirrors the CRD REST's Delete.
type REST struct {
	*registry.Store
}

// Delete marks the CRD for deletion as the generic Store does, after adding
// apiextensions.k8s.io's cleanup finalizer and the condition Terminating=True
// (InstanceDeletionPending) on the first delete. Errors: the Store's (404, 409 on a
// failed precondition).
func (r *REST) Delete(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if opts == nil || !isDryRun(opts) {
		if err := r.addCleanupFinalizer(ctx, name, opts); err != nil {
			return nil, false, err
		}
	}
	return r.Store.Delete(ctx, namespace, name, opts)
}

func isDryRun(opts *metav1.DeleteOptions) bool { return len(opts.DryRun) > 0 }

// addCleanupFinalizer writes the finalizer and the Terminating condition unless the CRD
// is already being deleted, honouring opts' preconditions.
func (r *REST) addCleanupFinalizer(ctx context.Context, name string, opts *metav1.DeleteOptions) error {
	_, _, err := r.Store.WithStrategy(finalizerStrategy{}).Update(ctx, "", name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		crd := old.DeepCopyObject().(*apiextensionsv1.CustomResourceDefinition)
		if opts != nil && opts.Preconditions != nil {
			if p := opts.Preconditions.UID; p != nil && *p != crd.UID {
				return nil, apierrors.NewConflict(apiextensionsv1.Resource("customresourcedefinitions"), name,
					fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p, crd.UID))
			}
			if p := opts.Preconditions.ResourceVersion; p != nil && *p != crd.ResourceVersion {
				return nil, apierrors.NewConflict(apiextensionsv1.Resource("customresourcedefinitions"), name,
					fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p, crd.ResourceVersion))
			}
		}
		if crd.DeletionTimestamp != nil || HasFinalizer(crd) {
			return old, nil
		}
		crd.Finalizers = append(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer)
		SetCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue, Reason: "InstanceDeletionPending",
			Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
		})
		return crd, nil
	}), &metav1.UpdateOptions{})
	return err
}

// HasFinalizer reports whether crd holds the customresourcecleanup finalizer.
func HasFinalizer(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, f := range crd.Finalizers {
		if f == apiextensionsv1.CustomResourceCleanupFinalizer {
			return true
		}
	}
	return false
}

// SetCondition sets (or replaces) the condition of cond's type, keeping its
// lastTransitionTime when the status does not change. Mirrors apiextensions'
// SetCRDCondition.
func SetCondition(crd *apiextensionsv1.CustomResourceDefinition, cond apiextensionsv1.CustomResourceDefinitionCondition) {
	cond.LastTransitionTime = metav1.Now()
	for i, existing := range crd.Status.Conditions {
		if existing.Type != cond.Type {
			continue
		}
		if existing.Status == cond.Status {
			cond.LastTransitionTime = existing.LastTransitionTime
		}
		crd.Status.Conditions[i] = cond
		return
	}
	crd.Status.Conditions = append(crd.Status.Conditions, cond)
}

// FindCondition returns crd's condition of type t, or nil.
func FindCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) *apiextensionsv1.CustomResourceDefinitionCondition {
	for i := range crd.Status.Conditions {
		if crd.Status.Conditions[i].Type == t {
			return &crd.Status.Conditions[i]
		}
	}
	return nil
}

// IsEstablished reports whether crd's condition Established is True.
func IsEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	c := FindCondition(crd, apiextensionsv1.Established)
	return c != nil && c.Status == apiextensionsv1.ConditionTrue
}

// Strategy is the customresourcedefinitions strategy: kube's defaults, status cleared on
// create and kept on update, the storage version recorded in status.storedVersions,
// generation counting spec changes. Mirrors the CRD strategy.
type Strategy struct{}

// StatusStrategy is customresourcedefinitions/status: only status (and metadata) change.
type StatusStrategy struct{ Strategy }

// finalizerStrategy is the Delete path's own write: status and finalizers as the
// function set them, nothing else.
type finalizerStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is false.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate applies kube's defaults, clears status, sets generation 1 and records
// the storage version as stored.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	scheme.Scheme.Default(crd)
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	crd.Generation = 1
	recordStorageVersion(crd)
}

// PrepareForUpdate applies kube's defaults, keeps the stored status (adding a new
// storage version to storedVersions) and bumps the generation on a spec change.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	scheme.Scheme.Default(crd)
	crd.Status = *oldCRD.Status.DeepCopy()
	if !apiequality.Semantic.DeepEqual(crd.Spec, oldCRD.Spec) {
		crd.Generation = oldCRD.Generation + 1
	}
	recordStorageVersion(crd)
}

// recordStorageVersion adds the version marked storage to status.storedVersions.
func recordStorageVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.Spec.Versions {
		if !v.Storage {
			continue
		}
		for _, stored := range crd.Status.StoredVersions {
			if stored == v.Name {
				return
			}
		}
		crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
		return
	}
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apiextensions.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// Validate checks a new CRD with kube's ValidateCustomResourceDefinition.
func (Strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	internal, errs := toInternal(obj)
	if len(errs) > 0 {
		return errs
	}
	return crdvalidation.ValidateCustomResourceDefinition(ctx, internal)
}

// ValidateUpdate checks an update with kube's ValidateCustomResourceDefinitionUpdate
// (names and scope are immutable once accepted, a stored version cannot be dropped...).
func (Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validateUpdate(ctx, obj, old, crdvalidation.ValidateCustomResourceDefinitionUpdate)
}

// validateUpdate runs one of kube's update validations over the internal types.
func validateUpdate(ctx context.Context, obj, old runtime.Object,
	validate func(context.Context, *apiextensions.CustomResourceDefinition, *apiextensions.CustomResourceDefinition) field.ErrorList) field.ErrorList {
	internal, errs := toInternal(obj)
	if len(errs) > 0 {
		return errs
	}
	oldInternal, errs := toInternal(old)
	if len(errs) > 0 {
		return errs
	}
	return validate(ctx, internal, oldInternal)
}

// GetAttrs returns labels and metadata.name, the one selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return nil, nil, fmt.Errorf("not a CustomResourceDefinition: %T", obj)
	}
	return labels.Set(crd.Labels), registry.ObjectMetaFieldsSet(&crd.ObjectMeta, false), nil
}

// toInternal converts a v1 CRD into the internal type kube's validation is written for.
func toInternal(obj runtime.Object) (*apiextensions.CustomResourceDefinition, field.ErrorList) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(obj.(*apiextensionsv1.CustomResourceDefinition), out, nil); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())}
	}
	return out, nil
}

// GetResetFields: customresourcedefinitions/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apiextensions.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec and metadata but for what a status write may
// change. Mirrors the CRD status strategy.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	crd.Spec = oldCRD.Spec
	metav1.ResetObjectMetaForStatus(&crd.ObjectMeta, &oldCRD.ObjectMeta)
}

// ValidateUpdate checks the status with kube's
// ValidateUpdateCustomResourceDefinitionStatus.
func (StatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validateUpdate(ctx, obj, old, crdvalidation.ValidateUpdateCustomResourceDefinitionStatus)
}

// PrepareForUpdate of the Delete path keeps what the update function wrote.
func (finalizerStrategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// ValidateUpdate of the Delete path checks nothing: it changes only finalizers and a
// condition.
func (finalizerStrategy) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
