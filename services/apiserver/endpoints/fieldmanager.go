package endpoints

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"
	"sigs.k8s.io/yaml"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
)

// fieldManagers records, in metadata.managedFields, which manager (kubectl, kubelet, the
// scheduler...) last set each field, as kube-apiserver does for every create, update and
// patch, and runs server-side apply. One FieldManager per kind and subresource, built on
// first use from the served OpenAPI schemas (openAPI.TypeConverter). Mirrors the
// FieldManager in k8s.io/apiserver/pkg/endpoints/handlers.
type fieldManagers struct {
	openAPI  *openAPI
	mu       sync.Mutex
	managers map[string]*kindFieldManager
}

// kindFieldManager is the FieldManager of a kind's subresource, and what track leaves out
// of the objects it compares.
type kindFieldManager struct {
	*managedfields.FieldManager
	// reset are the indexes, in the kind's Go struct, of the top-level fields the
	// storage's strategy resets whole on this subresource (status on the main resource,
	// spec on status): the FieldManager filters them out of every manager's fields, so
	// comparing them is work without a result.
	reset []int
}

// resetFieldsStorage is storage whose strategy resets fields (registry.Store).
type resetFieldsStorage interface {
	GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
}

// get returns the FieldManager of gvk's subresource served by storage, or nil when the
// kind has no schema. Fields the storage's strategy resets (status on the main resource,
// spec on status) are never recorded as owned by a manager.
func (f *fieldManagers) get(gvk schema.GroupVersionKind, subresource string, storage rest.Storage) *kindFieldManager {
	if p, ok := storage.(FieldManagerProvider); ok {
		fm, err := p.FieldManager(subresource)
		if err != nil {
			slog.Warn("no field manager: managedFields are not tracked", "kind", gvk, "subresource", subresource, "err", err)
			return nil
		}
		return &kindFieldManager{FieldManager: fm}
	}
	key := gvk.String() + "/" + subresource
	f.mu.Lock()
	defer f.mu.Unlock()
	if fm, ok := f.managers[key]; ok {
		return fm
	}
	var fm *kindFieldManager
	tc, err := f.openAPI.TypeConverter()
	if err == nil {
		tc = &structuredTypeConverter{TypeConverter: tc}
		var resetFields map[fieldpath.APIVersion]fieldpath.Filter
		fm = &kindFieldManager{}
		if s, ok := storage.(resetFieldsStorage); ok {
			resetFields = map[fieldpath.APIVersion]fieldpath.Filter{}
			for version, set := range s.GetResetFields() {
				resetFields[version] = fieldpath.NewExcludeSetFilter(set)
			}
			fm.reset = topLevelFields(gvk, s.GetResetFields()[fieldpath.APIVersion(gvk.GroupVersion().String())])
		}
		// The unsafe convertor, as kube-apiserver's installer passes: the FieldManager only
		// reads what it converts, and skiff's objects are already in the hub version, so
		// a safe conversion would deep-copy both objects of every write.
		fm.FieldManager, err = managedfields.NewDefaultFieldManager(tc, runtime.UnsafeObjectConvertor(scheme.Scheme), scheme.Scheme, scheme.Scheme, gvk, gvk.GroupVersion(), subresource, resetFields)
	}
	if err != nil {
		slog.Warn("no field manager: managedFields are not tracked", "kind", gvk, "subresource", subresource, "err", err)
		fm = nil
	}
	if f.managers == nil {
		f.managers = map[string]*kindFieldManager{}
	}
	f.managers[key] = fm
	return fm
}

// topLevelFields returns the indexes, in gvk's Go struct, of the top-level fields set
// holds whole (a member such as .spec, not only paths below it); none for a kind that
// is not a struct.
func topLevelFields(gvk schema.GroupVersionKind, set *fieldpath.Set) []int {
	obj, err := scheme.Scheme.New(gvk)
	if set == nil || err != nil {
		return nil
	}
	t := reflect.TypeOf(obj)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	t = t.Elem()
	var indexes []int
	set.Members.Iterate(func(pe fieldpath.PathElement) {
		if pe.FieldName == nil {
			return
		}
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name == *pe.FieldName {
				indexes = append(indexes, i)
			}
		}
	})
	return indexes
}

// track returns newObj with its managedFields updated for a write by manager, liveObj
// being the state before (an empty object for a create). liveObj is only read: it may
// be the watch cache's. Tracking never fails a write.
func (f *fieldManagers) track(gvk schema.GroupVersionKind, subresource string, storage rest.Storage, liveObj, newObj runtime.Object, manager string) runtime.Object {
	fm := f.get(gvk, subresource, storage)
	if fm == nil {
		return newObj
	}
	liveObj = shallowCopy(liveObj)
	liveObj.GetObjectKind().SetGroupVersionKind(gvk)
	newObj.GetObjectKind().SetGroupVersionKind(gvk)
	if len(fm.reset) == 0 {
		return fm.UpdateNoErrors(liveObj, newObj, manager)
	}
	// Both objects without what the strategy resets (a status update's spec, most of a
	// pod); the managedFields that come out are the same, and are put on newObj.
	tracked := fm.UpdateNoErrors(withoutFields(liveObj, fm.reset), withoutFields(shallowCopy(newObj), fm.reset), manager)
	out, err1 := meta.Accessor(newObj)
	in, err2 := meta.Accessor(tracked)
	if err1 == nil && err2 == nil {
		out.SetManagedFields(in.GetManagedFields())
	}
	return newObj
}

// withoutFields zeroes the top-level fields of obj, a shallow copy, at indexes.
func withoutFields(obj runtime.Object, indexes []int) runtime.Object {
	v := reflect.ValueOf(obj).Elem()
	for _, i := range indexes {
		v.Field(i).SetZero()
	}
	return obj
}

// shallowCopy returns a copy of obj, a pointer to a struct (k8s.io/api's kinds), that
// shares everything below its top-level fields with obj; any other object is deep-copied.
// The FieldManager sets the kind on the live object and reads the rest, so a shallow
// copy keeps the original as it was.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj.DeepCopyObject()
	}
	c := reflect.New(v.Type().Elem())
	c.Elem().Set(v.Elem())
	return c.Interface().(runtime.Object)
}

// apply merges the apply configuration patch (YAML or JSON) into liveObj (an empty object
// when the apply creates it) as manager, and returns the result as a typed object, into's
// type, with managedFields updated. Errors: 400 for a malformed patch or one that does
// not fit the schema, 409 "Apply failed with N conflicts: ..." when another manager owns
// a field the patch changes and force is false. Mirrors applyPatcher in
// k8s.io/apiserver/pkg/endpoints/handlers/patch.go.
func (f *fieldManagers) apply(gvk schema.GroupVersionKind, subresource string, storage rest.Storage, liveObj runtime.Object, patch []byte, manager string, force bool, into runtime.Object) (runtime.Object, error) {
	fm := f.get(gvk, subresource, storage)
	if fm == nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("server-side apply is not supported for %s", gvk.Kind))
	}
	patchObj := &unstructured.Unstructured{Object: map[string]interface{}{}}
	if err := yaml.Unmarshal(patch, &patchObj.Object); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	liveObj.GetObjectKind().SetGroupVersionKind(gvk)
	out, err := fm.Apply(liveObj, patchObj, manager, force)
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, err
		}
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if _, ok := into.(runtime.Unstructured); ok {
		return out, nil
	}
	if u, ok := out.(*unstructured.Unstructured); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		out = into
	}
	return out, nil
}

// structuredTypeConverter turns typed objects (k8s.io/api's Go structs) into
// structured-merge-diff values without its validation walk, and defers everything else
// (unstructured objects: apply configurations, and TypedToObject) to TypeConverter.
//
// Validation checks that a value fits its schema: a Go struct fits the schema generated
// from it by construction, and the FieldManager validates with AllowDuplicates, so keys
// that are empty or repeated pass it too (the registry's validation refuses them
// afterwards); the test compares both conversions' managedFields over such writes.
// Validating both objects of every update was half the CPU of managed-fields tracking,
// the largest single cost of a pod status update (docs/performance.md).
// kube-apiserver's typeConverter (k8s.io/apimachinery/pkg/util/managedfields/internal)
// validates every conversion.
type structuredTypeConverter struct {
	managedfields.TypeConverter

	mu    sync.RWMutex
	types map[schema.GroupVersionKind]*typed.TypedValue // an empty value of each kind: its schema and type
}

// ObjectToTyped implements managedfields.TypeConverter. Errors are TypeConverter's for a
// kind without a schema.
func (c *structuredTypeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if _, ok := obj.(runtime.Unstructured); ok {
		return c.TypeConverter.ObjectToTyped(obj, opts...)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	c.mu.RLock()
	t := c.types[gvk]
	c.mu.RUnlock()
	if t == nil {
		empty := &unstructured.Unstructured{}
		empty.SetGroupVersionKind(gvk)
		var err error
		if t, err = c.TypeConverter.ObjectToTyped(empty); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.types == nil {
			c.types = map[schema.GroupVersionKind]*typed.TypedValue{}
		}
		c.types[gvk] = t
		c.mu.Unlock()
	}
	v, err := value.NewValueReflect(obj)
	if err != nil {
		return nil, fmt.Errorf("%s as a structured value: %w", gvk.Kind, err)
	}
	return typed.AsTypedUnvalidated(v, t.Schema(), t.TypeRef()), nil
}

// managerName is the fieldManager parameter, or the user agent's first word ("kubectl"
// for kubectl/v1.32.4), as kube-apiserver's managerOrUserAgent picks it.
func managerName(fieldManager, userAgent string) string {
	if fieldManager != "" {
		return fieldManager
	}
	name := strings.Split(userAgent, "/")[0]
	if len(name) > 128 {
		name = name[:128]
	}
	return name
}
