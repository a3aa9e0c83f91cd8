package endpoints

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"

	"skiff.dev/services/apiserver/scheme"
)

// fieldManagers records, in metadata.managedFields, which manager (kubectl, kubelet, the
// scheduler...) last set each field, as kube-apiserver does for every create, update and
// patch. One FieldManager per kind and subresource, built on first use from the type
// information of k8s.io/api (client-go's applyconfigurations). Mirrors the FieldManager
// in k8s.io/apiserver/pkg/endpoints/handlers.
type fieldManagers struct {
	once     sync.Once
	tc       managedfields.TypeConverter
	mu       sync.Mutex
	managers map[string]*managedfields.FieldManager
}

func (f *fieldManagers) get(gvk schema.GroupVersionKind, subresource string) *managedfields.FieldManager {
	f.once.Do(func() { f.tc = applyconfigurations.NewTypeConverter(scheme.Scheme) })
	key := gvk.String() + "/" + subresource
	f.mu.Lock()
	defer f.mu.Unlock()
	if fm, ok := f.managers[key]; ok {
		return fm
	}
	fm, err := managedfields.NewDefaultFieldManager(f.tc, scheme.Scheme, scheme.Scheme, scheme.Scheme, gvk, gvk.GroupVersion(), subresource, nil)
	if err != nil {
		fm = nil // a kind without type information keeps no managedFields
	}
	if f.managers == nil {
		f.managers = map[string]*managedfields.FieldManager{}
	}
	f.managers[key] = fm
	return fm
}

// track returns newObj with its managedFields updated for a write by manager, liveObj
// being the state before (an empty object for a create). Tracking never fails a write.
func (f *fieldManagers) track(gvk schema.GroupVersionKind, subresource string, liveObj, newObj runtime.Object, manager string) runtime.Object {
	fm := f.get(gvk, subresource)
	if fm == nil {
		return newObj
	}
	liveObj.GetObjectKind().SetGroupVersionKind(gvk)
	newObj.GetObjectKind().SetGroupVersionKind(gvk)
	return fm.UpdateNoErrors(liveObj, newObj, manager)
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
