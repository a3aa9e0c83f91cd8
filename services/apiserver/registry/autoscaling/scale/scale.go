// Package scale serves the scale subresource (deployments/scale, replicasets/scale,
// replicationcontrollers/scale): an autoscaling/v1 Scale view of an object's
// spec.replicas, status.replicas and selector, through which kubectl scale and
// autoscalers change the replica count without touching the rest of the spec. Mirrors
// the ScaleREST types of k8s.io/kubernetes/pkg/registry/apps/{deployment,replicaset}/storage
// and core/replicationcontroller/storage.
package scale

import (
	"context"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Scalable is how the REST reads and writes the replica count of one resource's objects.
type Scalable interface {
	// Replicas returns spec.replicas, status.replicas and the selector (nil: none).
	Replicas(obj runtime.Object) (spec, status int32, selector *metav1.LabelSelector)
	// SetReplicas sets spec.replicas.
	SetReplicas(obj runtime.Object, replicas int32)
}

// REST serves <resource>/scale over the resource's Store: get reads the Scale of the
// stored object, update writes only spec.replicas back (with the main resource's
// strategy, so the generation moves as for any spec change).
type REST struct {
	Store    *registry.Store
	Scalable Scalable
}

var (
	_ rest.Getter                   = (*REST)(nil)
	_ rest.Updater                  = (*REST)(nil)
	_ rest.GroupVersionKindProvider = (*REST)(nil)
)

// GroupVersionKind is autoscaling/v1 Scale whatever the resource's group: discovery
// reports it, so kubectl scale's scale client finds the kind it decodes.
func (r *REST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return autoscalingv1.SchemeGroupVersion.WithKind("Scale")
}

// New returns an empty Scale for request decoding.
func (r *REST) New() runtime.Object { return &autoscalingv1.Scale{} }

// Get returns the object's Scale; 404 if the object does not exist.
func (r *REST) Get(ctx context.Context, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.Store.Get(ctx, namespace, name, opts)
	if err != nil {
		return nil, err
	}
	return r.scaleOf(obj)
}

// Update applies objInfo to the object's current Scale and writes the new
// spec.replicas. A resourceVersion in the Scale is a precondition (409 Conflict when
// stale). Errors: 404, 409, 422 Invalid for a negative replica count (kind Scale, group
// autoscaling), 400 for a name mismatch.
func (r *REST) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	out, _, err := r.Store.Update(ctx, namespace, name, rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		oldScale, err := r.scaleOf(old)
		if err != nil {
			return nil, err
		}
		obj, err := objInfo.UpdatedObject(ctx, oldScale)
		if err != nil {
			return nil, err
		}
		s, ok := obj.(*autoscalingv1.Scale)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("expected input object type to be Scale, but %T", obj))
		}
		if s.Name == "" {
			s.Name = name
		}
		if s.Namespace == "" {
			s.Namespace = namespace
		}
		if s.Name != name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", s.Name, name))
		}
		if errs := ValidateScale(s); len(errs) > 0 {
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: autoscalingv1.GroupName, Kind: "Scale"}, name, errs)
		}
		if s.ResourceVersion != "" && s.ResourceVersion != oldScale.ResourceVersion {
			return nil, apierrors.NewConflict(r.Store.Resource, name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		updated := old.DeepCopyObject()
		r.Scalable.SetReplicas(updated, s.Spec.Replicas)
		return updated, nil
	}), opts)
	if err != nil {
		return nil, false, err
	}
	s, err := r.scaleOf(out)
	return s, false, err
}

// scaleOf builds the Scale of obj: its identity, spec.replicas, status.replicas and
// the selector in its string form (status.selector, as HPA reads it).
func (r *REST) scaleOf(obj runtime.Object) (*autoscalingv1.Scale, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	spec, status, selector := r.Scalable.Replicas(obj)
	sel := ""
	if selector != nil {
		s, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		sel = s.String()
	}
	return &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			ResourceVersion: m.ResourceVersion, CreationTimestamp: m.CreationTimestamp,
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: spec},
		Status: autoscalingv1.ScaleStatus{Replicas: status, Selector: sel},
	}, nil
}

// ValidateScale checks a Scale write: metadata and spec.replicas >= 0. Mirrors
// ValidateScale in pkg/apis/autoscaling/validation.
func ValidateScale(s *autoscalingv1.Scale) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if s.Spec.Replicas < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "replicas"), s.Spec.Replicas, "must be greater than or equal to 0"))
	}
	return allErrs
}

func metaOf(obj runtime.Object) (*metav1.ObjectMeta, error) {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		return a.GetObjectMeta().(*metav1.ObjectMeta), nil
	}
	a, err := meta.Accessor(obj) // custom resources
	if err != nil {
		return nil, err
	}
	return &metav1.ObjectMeta{Name: a.GetName(), Namespace: a.GetNamespace(), UID: a.GetUID(),
		ResourceVersion: a.GetResourceVersion(), CreationTimestamp: a.GetCreationTimestamp()}, nil
}
