package apiextensions

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/apiextensions/customresource"
	"skiff.dev/services/apiserver/registry/rest"
)

// customResourceCodec is how custom resources of one served version are kept in etcd:
// JSON, as kube-apiserver keeps them, in the CRD's storage version, converted on the
// way in and out by the CRD's converter (None: apiVersion changes; Webhook: a
// ConversionReview). Decoded objects get their schema's defaults, as kube defaults what
// it reads.
type customResourceCodec struct {
	storage, served schema.GroupVersion
	strategy        *customresource.Strategy
	converter       runtime.ObjectConvertor
}

var _ runtime.Codec = customResourceCodec{}

// Encode writes obj in the storage version. Errors: the conversion's.
func (c customResourceCodec) Encode(obj runtime.Object, w io.Writer) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("custom resource storage: %T is not unstructured", obj)
	}
	if u.GetAPIVersion() != c.storage.String() {
		converted, err := c.converter.ConvertToVersion(u.DeepCopy(), c.storage)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if u, ok = converted.(*unstructured.Unstructured); !ok {
			return fmt.Errorf("custom resource storage: conversion returned %T", converted)
		}
	}
	return json.NewEncoder(w).Encode(u.Object)
}

// Identifier names the codec for encoders' caches.
func (c customResourceCodec) Identifier() runtime.Identifier {
	return runtime.Identifier("customresource-json-" + c.storage.String() + "-" + c.served.String())
}

// Decode reads a stored object into into (an *unstructured.Unstructured) in the served
// version. Errors: malformed JSON, the conversion's.
func (c customResourceCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	u, ok := into.(*unstructured.Unstructured)
	if !ok {
		return nil, nil, fmt.Errorf("custom resource storage: cannot decode into %T", into)
	}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, nil, err
	}
	if u.GetAPIVersion() != c.served.String() {
		converted, err := c.converter.ConvertToVersion(u, c.served)
		if err != nil {
			return nil, nil, apierrors.NewInternalError(err)
		}
		cu, ok := converted.(*unstructured.Unstructured)
		if !ok {
			return nil, nil, fmt.Errorf("custom resource storage: conversion returned %T", converted)
		}
		u.Object = cu.Object
	}
	if c.strategy != nil {
		c.strategy.Default(u)
	}
	gvk := u.GroupVersionKind()
	return u, &gvk, nil
}

// customResourceREST serves one version of a custom resource: the generic Store over
// that version's storage, printing the CRD's columns, pruning unknown fields and
// tracking managed fields by the CRD's schema. Creates are refused while the CRD is
// being deleted, as kube's crdHandler refuses them.
type customResourceREST struct {
	*registry.Store
	strategy    *customresource.Strategy
	terminating func() bool
	fields      *fieldManagers
}

var (
	_ endpoints.FieldManagerProvider = (*customResourceREST)(nil)
	_ endpoints.UnknownFieldPruner   = (*customResourceREST)(nil)
)

// Create refuses a create while the CRD is terminating (405), and otherwise creates.
func (r *customResourceREST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	if r.terminating() {
		err := apierrors.NewMethodNotSupported(r.Store.Resource, "create")
		err.ErrStatus.Message = "create not allowed while custom resource definition is terminating"
		return nil, err
	}
	return r.Store.Create(ctx, namespace, obj, opts)
}

// ConvertToTable prints the CRD's additionalPrinterColumns.
func (r *customResourceREST) ConvertToTable(ctx context.Context, obj runtime.Object, opts *metav1.TableOptions) (*metav1.Table, error) {
	return r.strategy.ConvertToTable(ctx, obj, opts)
}

// PruneUnknownFields drops the fields the version's schema does not know.
func (r *customResourceREST) PruneUnknownFields(obj runtime.Object) []string {
	return r.strategy.PruneAndDefault(obj)
}

// FieldManager is the version's FieldManager of subresource.
func (r *customResourceREST) FieldManager(subresource string) (*managedfields.FieldManager, error) {
	return r.fields.get(subresource, r.GetResetFields())
}

// statusREST is the status subresource of a version: its Store with the status
// strategy, sharing the FieldManagers.
type statusREST struct {
	subresource
	fields *fieldManagers
}

// subresource is what registry.Store.Subresource serves.
type subresource interface {
	rest.Getter
	rest.Updater
	rest.TableConvertor
	New() runtime.Object
	GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
}

// FieldManager is the status subresource's FieldManager.
func (r *statusREST) FieldManager(subresource string) (*managedfields.FieldManager, error) {
	return r.fields.get(subresource, r.GetResetFields())
}

// fieldManagers builds, on first use, the FieldManagers of one CRD version from the
// OpenAPI models of its schema, as kube's crdHandler builds them for server-side apply.
type fieldManagers struct {
	crd  *apiextensionsv1.CustomResourceDefinition
	kind schema.GroupVersionKind

	mu       sync.Mutex
	tc       managedfields.TypeConverter
	tcErr    error
	tcDone   bool
	managers map[string]*managedfields.FieldManager
}

func (f *fieldManagers) get(subresource string, reset map[fieldpath.APIVersion]*fieldpath.Set) (*managedfields.FieldManager, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fm, ok := f.managers[subresource]; ok {
		return fm, nil
	}
	if !f.tcDone {
		f.tc, f.tcErr = f.typeConverter()
		f.tcDone = true
	}
	if f.tcErr != nil {
		return nil, f.tcErr
	}
	filters := map[fieldpath.APIVersion]fieldpath.Filter{}
	for v, set := range reset {
		filters[v] = fieldpath.NewExcludeSetFilter(set)
	}
	fm, err := managedfields.NewDefaultCRDFieldManager(f.tc, unstructuredConvertor{}, unstructuredDefaulter{}, unstructuredCreator{},
		f.kind, f.kind.GroupVersion(), subresource, filters)
	if err != nil {
		return nil, err
	}
	if f.managers == nil {
		f.managers = map[string]*managedfields.FieldManager{}
	}
	f.managers[subresource] = fm
	return fm, nil
}

// typeConverter is the structured-merge-diff type information of every version of the
// CRD (x-kubernetes-list-type, map-keys and the like decide how apply merges).
func (f *fieldManagers) typeConverter() (managedfields.TypeConverter, error) {
	models, err := openAPIModels(f.crd)
	if err != nil {
		return nil, err
	}
	return managedfields.NewTypeConverter(models, f.crd.Spec.PreserveUnknownFields)
}

// openAPIModels are the OpenAPI v3 schemas of every version of crd, with the metadata
// models they reference.
func openAPIModels(crd *apiextensionsv1.CustomResourceDefinition) (map[string]*spec.Schema, error) {
	var specs []*spec3.OpenAPI
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, err
	}
	return merged.Components.Schemas, nil
}

// unstructuredConvertor converts custom resources between versions of one group with
// the None strategy (apiVersion changes, nothing else), for the FieldManager.
type unstructuredConvertor struct{}

func (unstructuredConvertor) Convert(in, out, context interface{}) error {
	u, ok := in.(*unstructured.Unstructured)
	o, ok2 := out.(*unstructured.Unstructured)
	if !ok || !ok2 {
		return fmt.Errorf("cannot convert %T into %T", in, out)
	}
	o.Object = runtime.DeepCopyJSON(u.Object)
	return nil
}

func (unstructuredConvertor) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("cannot convert %T", in)
	}
	target, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()})
	if !ok {
		return nil, fmt.Errorf("no version of %s in %v", u.GroupVersionKind(), gv)
	}
	if target == u.GroupVersionKind() {
		return u, nil
	}
	out := u.DeepCopy()
	out.SetGroupVersionKind(target)
	return out, nil
}

func (unstructuredConvertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

type unstructuredDefaulter struct{}

func (unstructuredDefaulter) Default(runtime.Object) {}

type unstructuredCreator struct{}

func (unstructuredCreator) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}
