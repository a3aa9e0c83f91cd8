// Package ensurer keeps API Priority and Fairness's bootstrap configuration stored: the
// mandatory FlowSchemas and PriorityLevelConfigurations ("exempt", "catch-all") and the
// suggested ones ("system", "node-high", "leader-election", "workload-high",
// "workload-low", "global-default" and their schemas), as k8s.io/apiserver's
// pkg/apis/flowcontrol/bootstrap defines them. Mirrors kube-apiserver's
// priority-and-fairness-config-producer post-start hook
// (k8s.io/kubernetes/pkg/registry/flowcontrol/ensurer).
package ensurer

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/client-go/util/retry"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/flowcontrol/flowschema"
	"skiff.dev/services/apiserver/registry/flowcontrol/prioritylevelconfiguration"
	"skiff.dev/services/apiserver/registry/rest"
)

// configKind is what the ensurer needs of one of the two resources.
type configKind struct {
	resource  string
	mandatory []runtime.Object
	suggested []runtime.Object
	// revise makes current's spec wanted's and reports whether it changed anything;
	// current has been defaulted as stored.
	revise func(current, wanted runtime.Object) bool
}

var kinds = []configKind{
	{
		// Priority levels first: the schemas refer to them.
		resource:  "prioritylevelconfigurations",
		mandatory: objects(bootstrap.MandatoryPriorityLevelConfigurations),
		suggested: objects(bootstrap.SuggestedPriorityLevelConfigurations),
		revise: func(current, wanted runtime.Object) bool {
			cur, want := current.(*flowcontrolv1.PriorityLevelConfiguration), wanted.(*flowcontrolv1.PriorityLevelConfiguration).DeepCopy()
			prioritylevelconfiguration.SetDefaults(want)
			if cur.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt {
				// The exempt level's own settings are the user's to change.
				want.Spec.Exempt = cur.Spec.Exempt
			}
			if apiequality.Semantic.DeepEqual(cur.Spec, want.Spec) {
				return false
			}
			cur.Spec = want.Spec
			return true
		},
	},
	{
		resource:  "flowschemas",
		mandatory: objects(bootstrap.MandatoryFlowSchemas),
		suggested: objects(bootstrap.SuggestedFlowSchemas),
		revise: func(current, wanted runtime.Object) bool {
			cur, want := current.(*flowcontrolv1.FlowSchema), wanted.(*flowcontrolv1.FlowSchema).DeepCopy()
			flowschema.SetDefaults(want)
			if apiequality.Semantic.DeepEqual(cur.Spec, want.Spec) {
				return false
			}
			cur.Spec = want.Spec
			return true
		},
	},
}

func objects[T runtime.Object](in []T) []runtime.Object {
	out := make([]runtime.Object, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

// EnsureBootstrapConfiguration stores the bootstrap configuration through stores (the
// apiserver's own loopback, as kube's hook writes as system:apiserver):
//   - a mandatory object that is missing is created, and one whose spec differs is put
//     back (for "exempt" only its type; its exempt settings stay the user's), whatever
//     its annotations say;
//   - a suggested object that is missing is created; one that exists is brought back to
//     the suggested spec only while it carries apf.kubernetes.io/autoupdate-spec: "true"
//     (as created), so a user who sets it to "false" keeps their changes;
//   - an object carrying that annotation "true" that is no longer part of the bootstrap
//     configuration is deleted.
//
// Errors: the first store error (flowcontrol not served, etcd unreachable); call it
// again to retry.
func EnsureBootstrapConfiguration(ctx context.Context, stores registry.Stores) error {
	var errs []error
	for _, k := range kinds {
		store := stores.Store(flowcontrolv1.Resource(k.resource))
		if store == nil {
			return fmt.Errorf("flowcontrol bootstrap: %s are not served", k.resource)
		}
		wanted := map[string]bool{}
		for _, o := range k.mandatory {
			wanted[name(o)] = true
			errs = append(errs, ensure(ctx, store, k, o, true))
		}
		for _, o := range k.suggested {
			wanted[name(o)] = true
			errs = append(errs, ensure(ctx, store, k, o, false))
		}
		errs = append(errs, removeUnwanted(ctx, store, wanted))
	}
	return errors.Join(errs...)
}

func name(obj runtime.Object) string {
	m, _ := meta.Accessor(obj)
	return m.GetName()
}

// autoUpdate reports whether obj asks to be kept at the bootstrap spec.
func autoUpdate(obj metav1.Object) bool {
	v, err := strconv.ParseBool(obj.GetAnnotations()[flowcontrolv1.AutoUpdateAnnotationKey])
	return err == nil && v
}

// ensure creates wanted or revises the stored object, retrying on conflicts.
func ensure(ctx context.Context, store *registry.Store, k configKind, wanted runtime.Object, mandatory bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := store.Get(ctx, "", name(wanted), &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = store.Create(ctx, "", wanted.DeepCopyObject(), &metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(flowcontrolv1.Resource(k.resource), name(wanted), err)
			}
			return err
		}
		if err != nil {
			return err
		}
		current = current.DeepCopyObject() // the store's object is shared with its cache
		m, _ := meta.Accessor(current)
		if !mandatory && !autoUpdate(m) {
			return nil
		}
		if !k.revise(current, wanted) {
			return nil
		}
		_, _, err = store.Update(ctx, "", m.GetName(), rest.DefaultUpdatedObjectInfo(current), &metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("flowcontrol bootstrap: %s %s: %w", k.resource, name(wanted), err)
	}
	return nil
}

// removeUnwanted deletes the objects marked for auto-update that the bootstrap
// configuration no longer holds.
func removeUnwanted(ctx context.Context, store *registry.Store, wanted map[string]bool) error {
	list, err := store.List(ctx, "", &metainternalversion.ListOptions{})
	if err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	var errs []error
	for _, item := range items {
		m, _ := meta.Accessor(item)
		if wanted[m.GetName()] || !autoUpdate(m) {
			continue
		}
		uid, rv := m.GetUID(), m.GetResourceVersion()
		_, _, err := store.Delete(ctx, "", m.GetName(), &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
