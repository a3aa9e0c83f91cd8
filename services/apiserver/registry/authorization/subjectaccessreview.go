package authorization

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	authz "skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewSubjectAccessReviewDescriptor serves subjectaccessreviews: whether a given user
// may do something, answered by authorizer (kube-apiserver's webhook-authorizer API).
func NewSubjectAccessReviewDescriptor(authorizer authz.Authorizer) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: authorizationv1.SchemeGroupVersion,
		Resource:     "subjectaccessreviews",
		SingularName: "subjectaccessreview",
		Kind:         "SubjectAccessReview",
		NewFunc:      func() runtime.Object { return &authorizationv1.SubjectAccessReview{} },
		REST: func(*registry.Store, registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &SubjectAccessReviewREST{Authorizer: authorizer}, nil, nil
		},
	}
}

// NewLocalSubjectAccessReviewDescriptor serves localsubjectaccessreviews: a
// SubjectAccessReview within one namespace, which admin of that namespace may ask.
func NewLocalSubjectAccessReviewDescriptor(authorizer authz.Authorizer) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: authorizationv1.SchemeGroupVersion,
		Resource:     "localsubjectaccessreviews",
		SingularName: "localsubjectaccessreview",
		Kind:         "LocalSubjectAccessReview",
		NewFunc:      func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} },
		Strategy:     namespaced{},
		REST: func(*registry.Store, registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &LocalSubjectAccessReviewREST{Authorizer: authorizer}, nil, nil
		},
	}
}

// SubjectAccessReviewREST answers SubjectAccessReviews; it stores nothing. Mirrors
// k8s.io/kubernetes/pkg/registry/authorization/subjectaccessreview.
type SubjectAccessReviewREST struct {
	Authorizer authz.Authorizer
}

// New implements rest.Storage.
func (r *SubjectAccessReviewREST) New() runtime.Object { return &authorizationv1.SubjectAccessReview{} }

// Create evaluates the review for spec's user and groups (as given: no
// system:authenticated is added). Errors: 422 for empty metadata not being empty,
// neither or both attribute sets, or no user and no group.
func (r *SubjectAccessReviewREST) Create(ctx context.Context, _ string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SubjectAccessReview: %T", obj))
	}
	errs := validateSpec(review.Spec, field.NewPath("spec"))
	if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, review.ObjectMeta) {
		errs = append(errs, field.Invalid(field.NewPath("metadata"), review.ObjectMeta, `must be empty`))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview").GroupKind(), "", errs)
	}
	out := review.DeepCopy()
	out.Status = evaluate(ctx, r.Authorizer, review.Spec)
	return out, nil
}

// LocalSubjectAccessReviewREST answers LocalSubjectAccessReviews; it stores nothing.
// Mirrors k8s.io/kubernetes/pkg/registry/authorization/localsubjectaccessreview.
type LocalSubjectAccessReviewREST struct {
	Authorizer authz.Authorizer
}

// New implements rest.Storage.
func (r *LocalSubjectAccessReviewREST) New() runtime.Object {
	return &authorizationv1.LocalSubjectAccessReview{}
}

// Create evaluates the review in namespace. Errors: 400 when the object's namespace is
// not the URL's; 422 as SubjectAccessReview, plus nonResourceAttributes (not allowed)
// and a resourceAttributes.namespace other than metadata.namespace.
func (r *LocalSubjectAccessReviewREST) Create(ctx context.Context, namespace string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.LocalSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a LocalSubjectAccessReview: %T", obj))
	}
	if review.Namespace == "" {
		review.Namespace = namespace
	}
	if review.Namespace != namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.resourceAttributes.namespace must match namespace: %v", namespace))
	}
	errs := validateSpec(review.Spec, field.NewPath("spec"))
	sansNamespace := review.ObjectMeta
	sansNamespace.Namespace = ""
	if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, sansNamespace) {
		errs = append(errs, field.Invalid(field.NewPath("metadata"), review.ObjectMeta, `must be empty except for namespace`))
	}
	if ra := review.Spec.ResourceAttributes; ra != nil && ra.Namespace != review.Namespace {
		errs = append(errs, field.Invalid(field.NewPath("spec", "resourceAttributes", "namespace"), ra.Namespace, `must match metadata.namespace`))
	}
	if review.Spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), review.Spec.NonResourceAttributes, `disallowed on this kind of request`))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("LocalSubjectAccessReview").GroupKind(), "", errs)
	}
	out := review.DeepCopy()
	out.Status = evaluate(ctx, r.Authorizer, review.Spec)
	return out, nil
}

// validateSpec is kube's ValidateSubjectAccessReviewSpec.
func validateSpec(spec authorizationv1.SubjectAccessReviewSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if (spec.ResourceAttributes == nil) == (spec.NonResourceAttributes == nil) {
		errs = append(errs, field.Invalid(fldPath.Child("resourceAttributes"), spec.NonResourceAttributes, `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(fldPath.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	return errs
}

// evaluate asks a about spec's attributes for spec's subject.
func evaluate(ctx context.Context, a authz.Authorizer, spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	extra := map[string][]string{}
	for k, v := range spec.Extra {
		extra[k] = v
	}
	attrs := attributesFrom(&user.DefaultInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups, Extra: extra}, spec.ResourceAttributes, spec.NonResourceAttributes)
	decision, reason, err := a.Authorize(ctx, attrs)
	status := authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		status.EvaluationError = err.Error()
	}
	return status
}

// attributesFrom are the authorization attributes a review asks about for u.
func attributesFrom(u user.Info, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) authorizer.AttributesRecord {
	attrs := authorizer.AttributesRecord{User: u}
	if ra != nil {
		attrs.Verb, attrs.Namespace, attrs.Name = ra.Verb, ra.Namespace, ra.Name
		attrs.APIGroup, attrs.APIVersion, attrs.Resource, attrs.Subresource = ra.Group, ra.Version, ra.Resource, ra.Subresource
		attrs.ResourceRequest = true
		if ra.FieldSelector != nil && ra.FieldSelector.RawSelector != "" {
			attrs.FieldSelectorRequirements, attrs.FieldSelectorParsingErr = authz.ParseFieldSelector(ra.FieldSelector.RawSelector)
		}
	} else if nra != nil {
		attrs.Verb, attrs.Path = nra.Verb, nra.Path
	}
	return attrs
}

// namespaced makes a storage-less review namespace-scoped (its URL carries the
// namespace); none of its other methods is called, as nothing is stored.
type namespaced struct{}

func (namespaced) NamespaceScoped() bool                                            { return true }
func (namespaced) PrepareForCreate(context.Context, runtime.Object)                 {}
func (namespaced) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}
func (namespaced) Validate(context.Context, runtime.Object) field.ErrorList         { return nil }
func (namespaced) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
func (namespaced) GetAttrs(runtime.Object) (labels.Set, fields.Set, error) { return nil, nil, nil }
