package kubeclient

import (
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ListWatchFor returns a ListerWatcher over the resource whose objects have obj's type,
// with tweak (when set) applied to the options of every list and watch, read inside the
// apiserver's own process (apiserver.APIServer.ListWatchFor), or nil where there is
// none. An informer over it holds the apiserver watch cache's objects instead of
// decoding copies of its own, so neither it nor anything it hands out may be mutated
// (client-go's rule for every informer, which KUBE_CACHE_MUTATION_DETECTOR checks in
// the tests). A nil ListWatchFor has none: components in processes of their own list
// and watch over HTTP.
type ListWatchFor func(obj runtime.Object, tweak func(*metav1.ListOptions)) cache.ListerWatcher

// ListerWatcher is f(obj, tweak), or nil when f is nil.
func (f ListWatchFor) ListerWatcher(obj runtime.Object, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	if f == nil {
		return nil
	}
	return f(obj, tweak)
}

// InformerFactory returns factory with the informers of the core, apps, batch,
// coordination, discovery and rbac groups built over f's ListerWatcher for their type
// wherever f has one (with the namespace index client-go's own informers have); every
// other informer is factory's own, over HTTP. factory must list every namespace with
// no TweakListOptionsFunc, and no transform may modify what its informers hold (see
// TrimManagedFields). A nil f returns factory unchanged.
func (f ListWatchFor) InformerFactory(factory informers.SharedInformerFactory) informers.SharedInformerFactory {
	if f == nil {
		return factory
	}
	return &inProcessFactory{SharedInformerFactory: factory, listWatchFor: f}
}

type inProcessFactory struct {
	informers.SharedInformerFactory
	listWatchFor ListWatchFor
}

// InformerFor registers, under obj's type, an informer over the in-process
// ListerWatcher when there is one, else newFunc's.
func (p *inProcessFactory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	if lw := p.listWatchFor(obj, nil); lw != nil {
		newFunc = func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(lw, obj, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		}
	}
	return p.SharedInformerFactory.InformerFor(obj, newFunc)
}

// The groups whose informers come through InformerFor above rather than the wrapped
// factory's own.
func (p *inProcessFactory) Apps() apps.Interface   { return apps.New(p, metav1.NamespaceAll, nil) }
func (p *inProcessFactory) Batch() batch.Interface { return batch.New(p, metav1.NamespaceAll, nil) }
func (p *inProcessFactory) Core() core.Interface   { return core.New(p, metav1.NamespaceAll, nil) }
func (p *inProcessFactory) Rbac() rbac.Interface   { return rbac.New(p, metav1.NamespaceAll, nil) }
func (p *inProcessFactory) Coordination() coordination.Interface {
	return coordination.New(p, metav1.NamespaceAll, nil)
}
func (p *inProcessFactory) Discovery() discovery.Interface {
	return discovery.New(p, metav1.NamespaceAll, nil)
}

// TrimManagedFields is an informer transform (cache.TransformFunc) that keeps objects
// without their managedFields, which skiff's controllers and scheduler never read and
// which are a large part of every object. It returns a shallow copy and never modifies
// obj (whose maps and slices the copy shares). An update built from a trimmed object
// keeps the stored managedFields: the apiserver keeps them when an update carries
// none. Mirrors the trim transform of kube-controller-manager's informers
// (CreateControllerContext); there is nothing to trim from an in-process informer's
// objects, which are the watch cache's.
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
