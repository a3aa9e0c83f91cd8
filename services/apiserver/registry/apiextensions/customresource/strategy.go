// Package customresource is the strategy of the custom resources a
// CustomResourceDefinition declares: one per served version, built from that version's
// schema, over unstructured objects. What is schema work (structural schemas, pruning,
// defaulting, OpenAPI validation, CEL rules, printer columns) is kube's own code from
// k8s.io/apiextensions-apiserver; the rest is the registry's, as for built-in types.
// Mirrors k8s.io/apiextensions-apiserver/pkg/registry/customresource.
package customresource

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
)

// Strategy is one served version of a custom resource: a Kind in a group version,
// namespaced or cluster-scoped, validated by its schema. Build it with NewStrategy.
type Strategy struct {
	kind       schema.GroupVersionKind
	namespaced bool
	// structural is the version's structural schema; nil when the CRD gives none
	// (x-kubernetes-preserve-unknown-fields at the root only).
	structural      *structuralschema.Structural
	validator       apiservervalidation.SchemaValidator
	statusValidator apiservervalidation.SchemaValidator
	cel             *cel.Validator
	// status and scale are the version's subresources; nil when absent.
	status *apiextensionsv1.CustomResourceSubresourceStatus
	scale  *apiextensionsv1.CustomResourceSubresourceScale
	// preserveUnknown is spec.preserveUnknownFields, which turns pruning off.
	preserveUnknown bool
	table           tableConvertor
	selectable      []selectableField
}

// selectableField is a field of selectableFields: its path for field selectors
// ("spec.color") and the JSONPath that reads it.
type selectableField struct {
	name string
	path *jsonpath.JSONPath
}

type tableConvertor interface {
	ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error)
}

// StatusStrategy is the version's status subresource: only status (and metadata)
// change.
type StatusStrategy struct{ *Strategy }

var (
	_ registry.Strategy            = (*Strategy)(nil)
	_ registry.ResetFieldsStrategy = (*Strategy)(nil)
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NewStrategy builds the strategy of crd's version. Errors: a schema kube's
// validation would have refused (the CRD is then not served).
func NewStrategy(crd *apiextensionsv1.CustomResourceDefinition, version string) (*Strategy, error) {
	v := servedVersion(crd, version)
	if v == nil {
		return nil, fmt.Errorf("%s does not serve version %q", crd.Name, version)
	}
	s := &Strategy{
		kind:            schema.GroupVersionKind{Group: crd.Spec.Group, Version: version, Kind: crd.Spec.Names.Kind},
		namespaced:      crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		preserveUnknown: crd.Spec.PreserveUnknownFields,
	}
	if v.Subresources != nil {
		s.status, s.scale = v.Subresources.Status, v.Subresources.Scale
	}
	if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, err
		}
		var err error
		if s.structural, err = structuralschema.NewStructural(internal); err != nil {
			return nil, fmt.Errorf("structural schema of %s/%s: %w", crd.Name, version, err)
		}
		if s.validator, _, err = apiservervalidation.NewSchemaValidator(internal); err != nil {
			return nil, err
		}
		if status, ok := internal.Properties["status"]; ok {
			if s.statusValidator, _, err = apiservervalidation.NewSchemaValidator(&status); err != nil {
				return nil, err
			}
		}
		s.cel = cel.NewValidator(s.structural, true, celconfig.PerCallLimit)
	}
	columns := v.AdditionalPrinterColumns
	if len(columns) == 0 {
		// kube's default: NAME and AGE.
		columns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date",
			Description: "CreationTimestamp is a timestamp representing the server time when this object was created.", JSONPath: ".metadata.creationTimestamp"}}
	}
	table, err := tableconvertor.New(columns)
	if err != nil {
		return nil, fmt.Errorf("printer columns of %s/%s: %w", crd.Name, version, err)
	}
	s.table = table
	for _, f := range v.SelectableFields {
		p := jsonpath.New(f.JSONPath).AllowMissingKeys(true)
		if err := p.Parse("{" + f.JSONPath + "}"); err != nil {
			return nil, fmt.Errorf("selectable field %s of %s/%s: %w", f.JSONPath, crd.Name, version, err)
		}
		s.selectable = append(s.selectable, selectableField{name: strings.TrimPrefix(f.JSONPath, "."), path: p})
	}
	return s, nil
}

func servedVersion(crd *apiextensionsv1.CustomResourceDefinition, version string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range crd.Spec.Versions {
		if v := &crd.Spec.Versions[i]; v.Name == version && v.Served {
			return v
		}
	}
	return nil
}

// Kind is the group, version and kind served.
func (s *Strategy) Kind() schema.GroupVersionKind { return s.kind }

// HasStatus reports whether the version has a status subresource.
func (s *Strategy) HasStatus() bool { return s.status != nil }

// Scale is the version's scale subresource, nil when it has none.
func (s *Strategy) Scale() *apiextensionsv1.CustomResourceSubresourceScale { return s.scale }

// Replicas reads the scale subresource's paths: spec and status replicas (0 when
// missing) and the selector at labelSelectorPath (nil when missing or unparsable).
// It implements scale.Scalable.
func (s *Strategy) Replicas(obj runtime.Object) (spec, status int32, selector *metav1.LabelSelector) {
	u := obj.(*unstructured.Unstructured)
	spec, status = int32(nestedInt(u, s.scale.SpecReplicasPath)), int32(nestedInt(u, s.scale.StatusReplicasPath))
	if s.scale.LabelSelectorPath != nil {
		if text, found, err := unstructured.NestedString(u.Object, pathFields(*s.scale.LabelSelectorPath)...); err == nil && found {
			selector, _ = metav1.ParseToLabelSelector(text)
		}
	}
	return spec, status, selector
}

// SetReplicas writes spec replicas at specReplicasPath. It implements scale.Scalable.
func (s *Strategy) SetReplicas(obj runtime.Object, replicas int32) {
	u := obj.(*unstructured.Unstructured)
	_ = unstructured.SetNestedField(u.Object, int64(replicas), pathFields(s.scale.SpecReplicasPath)...)
}

// pathFields splits a scale path such as ".spec.replicas".
func pathFields(path string) []string { return strings.Split(strings.TrimPrefix(path, "."), ".") }

func nestedInt(u *unstructured.Unstructured, path string) int64 {
	n, _, _ := unstructured.NestedInt64(u.Object, pathFields(path)...)
	return n
}

// NamespaceScoped reports the CRD's scope.
func (s *Strategy) NamespaceScoped() bool { return s.namespaced }

// GetResetFields: with a status subresource, the main resource keeps the stored status.
func (s *Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if s.status == nil {
		return nil
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(s.kind.GroupVersion().String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PruneAndDefault drops the fields obj's schema does not know (unless the schema
// preserves them), in metadata (at the root and in embedded resources) too, and fills
// its defaults, as kube's custom resource decoder does (unstructuredSchemaCoercer). It
// returns the paths it dropped, e.g. "spec.colour" or "metadata.unknownMeta", for
// fieldValidation's warnings and errors.
func (s *Strategy) PruneAndDefault(obj runtime.Object) []string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	kind, apiVersion := u.GetKind(), u.GetAPIVersion()
	objectMeta, foundMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u.Object,
		schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return nil // metadata of the wrong shape: validation refuses it
	}
	if s.structural != nil {
		if !s.preserveUnknown {
			unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, s.structural, true,
				structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
			structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, s.structural)
		}
		if _, paths := schemaobjectmeta.CoerceWithOptions(nil, u.Object, s.structural, false,
			schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true}); len(paths) > 0 {
			unknown = append(unknown, paths...)
		}
	}
	u.SetKind(kind)
	u.SetAPIVersion(apiVersion)
	if foundMeta {
		_ = schemaobjectmeta.SetObjectMeta(u.Object, objectMeta)
	}
	if s.structural != nil {
		structuraldefaulting.Default(u.Object, s.structural)
	}
	return unknown
}

// Default fills obj's schema defaults, as kube does to what it reads from etcd.
func (s *Strategy) Default(obj *unstructured.Unstructured) {
	if s.structural != nil {
		structuraldefaulting.Default(obj.Object, s.structural)
	}
}

// PrepareForCreate prunes and defaults, drops status when the status subresource
// exists and sets generation 1.
func (s *Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	u := obj.(*unstructured.Unstructured)
	s.PruneAndDefault(u)
	if s.status != nil {
		delete(u.Object, "status")
	}
	u.SetGeneration(1)
}

// PrepareForUpdate prunes and defaults, keeps the stored status when the status
// subresource exists and bumps the generation on any change outside metadata.
func (s *Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	u, oldU := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	s.PruneAndDefault(u)
	if s.status != nil {
		if status, ok := oldU.Object["status"]; ok {
			u.Object["status"] = status
		} else {
			delete(u.Object, "status")
		}
	}
	if !apiequality.Semantic.DeepEqual(withoutMetadata(u.Object), withoutMetadata(oldU.Object)) {
		u.SetGeneration(oldU.GetGeneration() + 1)
	}
}

func withoutMetadata(m map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		if k != "metadata" {
			out[k] = v
		}
	}
	return out
}

// Validate checks apiVersion and kind, metadata, the schema (with kube's messages, e.g.
// `spec.replicas: Invalid value: "string": spec.replicas in body must be of type
// integer: "string"`), the CEL rules and the scale paths.
func (s *Strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	u := obj.(*unstructured.Unstructured)
	if errs := s.validateTypeMeta(u); len(errs) > 0 {
		return errs
	}
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(u, s.namespaced, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, s.validateSchema(ctx, u, nil)...)
	return append(errs, s.validateScale(u)...)
}

// ValidateUpdate checks an update as Validate does, metadata against the stored object,
// and CEL transition rules (oldSelf) against the stored object.
func (s *Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	u, oldU := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	if errs := s.validateTypeMeta(u); len(errs) > 0 {
		return errs
	}
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(u, oldU, field.NewPath("metadata"))
	errs = append(errs, s.validateSchema(ctx, u, oldU)...)
	return append(errs, s.validateScale(u)...)
}

func (s *Strategy) validateTypeMeta(u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if u.GetKind() != s.kind.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), fmt.Sprintf("must be %v", s.kind.Kind)))
	}
	if want := s.kind.GroupVersion().String(); u.GetAPIVersion() != want {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), fmt.Sprintf("must be %v", want)))
	}
	return errs
}

// validateSchema runs the OpenAPI validation, embedded-resource metadata checks and CEL
// rules; old is nil on create.
func (s *Strategy) validateSchema(ctx context.Context, u, old *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if s.validator != nil {
		if old == nil {
			errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.Object, s.validator)...)
		} else {
			var opts []apiservervalidation.ValidationOption
			if s.structural != nil {
				opts = append(opts, apiservervalidation.WithRatcheting(common.NewCorrelatedObject(u.Object, old.Object, &model.Structural{Structural: s.structural})))
			}
			errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, u.Object, old.Object, s.validator, opts...)...)
		}
	}
	if s.structural == nil {
		return errs
	}
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, s.structural, false)...)
	if old == nil || len(structurallisttype.ValidateListSetsAndMaps(nil, s.structural, old.Object)) == 0 {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, u.Object)...)
	}
	var oldObj interface{}
	if old != nil {
		oldObj = old.Object
	}
	return append(errs, s.validateRules(ctx, errs, u.Object, oldObj)...)
}

// validateRules runs the CEL rules (x-kubernetes-validations) over obj, oldObj (nil on
// create) for transition rules and ratcheting, unless errs holds an error that makes
// the rules meaningless (a required, type, enum or size error): then one error says so,
// as kube's strategy does.
func (s *Strategy) validateRules(ctx context.Context, errs field.ErrorList, obj, oldObj interface{}) field.ErrorList {
	if s.cel == nil {
		return nil
	}
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeRequired, field.ErrorTypeTypeInvalid, field.ErrorTypeNotSupported, field.ErrorTypeTooLong, field.ErrorTypeTooMany:
			return field.ErrorList{field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")}
		}
	}
	var opts []cel.Option
	if oldObj != nil {
		opts = append(opts, cel.WithRatcheting(common.NewCorrelatedObject(obj, oldObj, &model.Structural{Structural: s.structural})))
	}
	celErrs, _ := s.cel.Validate(ctx, nil, s.structural, obj, oldObj, celconfig.RuntimeCELCostBudget, opts...)
	return celErrs
}

// validateScale checks the replicas paths of the scale subresource hold
// non-negative int32 values.
func (s *Strategy) validateScale(u *unstructured.Unstructured) field.ErrorList {
	if s.scale == nil {
		return nil
	}
	var errs field.ErrorList
	for _, p := range []string{s.scale.SpecReplicasPath, s.scale.StatusReplicasPath} {
		v, found, err := unstructured.NestedFieldNoCopy(u.Object, pathFields(p)...)
		if err != nil || !found {
			continue
		}
		n, ok := v.(int64)
		switch {
		case !ok:
			errs = append(errs, field.Invalid(field.NewPath(p), v, "should be an integer"))
		case n < 0:
			errs = append(errs, field.Invalid(field.NewPath(p), n, "should be a non-negative integer"))
		case n > 1<<31-1:
			errs = append(errs, field.Invalid(field.NewPath(p), n, fmt.Sprintf("should be less than or equal to %v", 1<<31-1)))
		}
	}
	return errs
}

// GetAttrs returns labels, metadata.name, metadata.namespace (namespaced resources) and
// each selectable field as a string.
func (s *Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	set := fields.Set{"metadata.name": accessor.GetName()}
	if s.namespaced {
		set["metadata.namespace"] = accessor.GetNamespace()
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		for _, f := range s.selectable {
			set[f.name] = selectableValue(f.path, u.Object)
		}
	} else {
		for _, f := range s.selectable {
			set[f.name] = ""
		}
	}
	return labels.Set(accessor.GetLabels()), set, nil
}

// selectableValue is the field's value as field selectors compare it: strings as they
// are, integers and booleans printed, "" when missing.
func selectableValue(p *jsonpath.JSONPath, obj map[string]interface{}) string {
	results, err := p.FindResults(obj)
	if err != nil || len(results) == 0 || len(results[0]) == 0 {
		return ""
	}
	return fmt.Sprint(results[0][0].Interface())
}

// ConvertToTable prints the version's additionalPrinterColumns (NAME and AGE without
// any), with kube's formatting of each column type.
func (s *Strategy) ConvertToTable(ctx context.Context, obj runtime.Object, opts *metav1.TableOptions) (*metav1.Table, error) {
	var tableOptions runtime.Object
	if opts != nil {
		tableOptions = opts
	}
	return s.table.ConvertToTable(ctx, obj, tableOptions)
}

// GetResetFields: the status subresource keeps everything but status.
func (s StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(s.kind.GroupVersion().String()): fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps everything but status and metadata from the stored object.
func (s StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	u, oldU := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	status, hasStatus := u.Object["status"]
	metadata := u.Object["metadata"]
	u.Object = runtime.DeepCopyJSON(oldU.Object)
	u.Object["metadata"] = metadata
	if hasStatus {
		u.Object["status"] = status
	} else {
		delete(u.Object, "status")
	}
	if s.structural != nil {
		structuraldefaulting.Default(u.Object, s.structural)
	}
	// Status writes change no metadata but labels, annotations and the like a client
	// may write anyway; generation and deletion state stay.
	metav1.ResetObjectMetaForStatus(u, oldU)
}

// ValidateUpdate checks metadata and status against the status schema.
func (s StatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	u, oldU := obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured)
	if errs := s.validateTypeMeta(u); len(errs) > 0 {
		return errs
	}
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(u, oldU, field.NewPath("metadata"))
	if status, ok := u.Object["status"]; ok && s.statusValidator != nil {
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(field.NewPath("status"), status, oldU.Object["status"], s.statusValidator)...)
	}
	errs = append(errs, s.validateRules(ctx, errs, u.Object, oldU.Object)...)
	return append(errs, s.validateScale(u)...)
}
