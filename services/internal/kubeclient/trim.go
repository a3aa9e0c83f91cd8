package kubeclient

import (
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
)

// TrimManagedFields is an informer transform (cache.TransformFunc) that keeps objects
// without their managedFields, which skiff's controllers and scheduler never read and
// which are a large part of every object. It returns a shallow copy and never modifies
// obj (whose maps and slices the copy shares). An update built from a trimmed object
// keeps the stored managedFields: the apiserver keeps them when an update carries
// none. Mirrors the trim transform of kube-controller-manager's informers
// (CreateControllerContext).
func TrimManagedFields(obj any) (any, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil || accessor.GetManagedFields() == nil {
		return obj, nil
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj, nil
	}
	trimmed := reflect.New(v.Elem().Type())
	trimmed.Elem().Set(v.Elem())
	out := trimmed.Interface()
	accessor, err = meta.Accessor(out)
	if err != nil {
		return obj, nil
	}
	accessor.SetManagedFields(nil)
	return out, nil
}
