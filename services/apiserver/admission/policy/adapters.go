package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeadmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"skiff.dev/services/apiserver/registry/rest"
)

// This file adapts skiff's registries to what kube's policy code reads through
// client-go: listers (of namespaces, of params), an informer's HasSynced, a client's
// namespace Get, and the ObjectInterfaces of admission. Each reads the registry as
// rest.GetCachedFirst does: the watch cache first, etcd when the cache lacks the
// object, so "not found" is never a lagging cache's answer.

// list lists l's objects in namespace that selector matches: the watch cache's own
// when it serves (read only), else a List at resourceVersion "0".
func list(ctx context.Context, l Lister, namespace string, selector labels.Selector) ([]runtime.Object, error) {
	opts := &metainternalversion.ListOptions{LabelSelector: selector}
	var out []runtime.Object
	served, err := l.VisitCached(namespace, opts, func(obj runtime.Object) bool {
		out = append(out, obj)
		return true
	})
	if err != nil || served {
		return out, err
	}
	opts.ResourceVersion = "0"
	objs, err := l.List(ctx, namespace, opts)
	if err != nil {
		return nil, err
	}
	return meta.ExtractList(objs)
}

// namespaceLister is a corelisters.NamespaceLister over the namespaces registry, for
// kube's namespace matcher and namespaceObject, bound to one request's context.
type namespaceLister struct {
	ctx        context.Context
	namespaces Lister
}

var _ corelisters.NamespaceLister = (*namespaceLister)(nil)

// List implements corelisters.NamespaceLister.
func (l *namespaceLister) List(selector labels.Selector) ([]*corev1.Namespace, error) {
	objs, err := list(l.ctx, l.namespaces, "", selector)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Namespace, 0, len(objs))
	for _, obj := range objs {
		if ns, ok := obj.(*corev1.Namespace); ok {
			out = append(out, ns)
		}
	}
	return out, nil
}

// Get implements corelisters.NamespaceLister: 404 NotFound when etcd has no such
// namespace either.
func (l *namespaceLister) Get(name string) (*corev1.Namespace, error) {
	obj, err := rest.GetCachedFirst(l.ctx, l.namespaces, "", name, nil)
	if err != nil {
		return nil, err
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("namespace storage returned %T", obj))
	}
	return ns, nil
}

// namespaceClient is the client kube's namespace matcher falls back on when its lister
// does not find a namespace (a lagging informer): its only call is
// CoreV1().Namespaces().Get, answered by the lister, which already read etcd. The
// embedded interfaces are nil: any other call would panic, and kube's matcher makes
// none.
type namespaceClient struct {
	kubernetes.Interface
	lister *namespaceLister
}

func (c namespaceClient) CoreV1() corev1client.CoreV1Interface {
	return namespaceCoreV1{lister: c.lister}
}

type namespaceCoreV1 struct {
	corev1client.CoreV1Interface
	lister *namespaceLister
}

func (c namespaceCoreV1) Namespaces() corev1client.NamespaceInterface {
	return namespaceGetter{lister: c.lister}
}

type namespaceGetter struct {
	corev1client.NamespaceInterface
	lister *namespaceLister
}

func (n namespaceGetter) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return n.lister.Get(name)
}

// paramInformer is the informers.GenericInformer kube's CollectParams reads params
// through: its Lister reads the paramKind's registry, its Informer is always synced.
type paramInformer struct{ lister paramLister }

func (i paramInformer) Informer() cache.SharedIndexInformer { return syncedInformer{} }
func (i paramInformer) Lister() cache.GenericLister         { return i.lister }

// syncedInformer answers HasSynced, the only informer method CollectParams calls (the
// registry needs no sync: it reads etcd when its cache is not ready). The embedded
// interface is nil: any other call would panic.
type syncedInformer struct{ cache.SharedIndexInformer }

func (syncedInformer) HasSynced() bool { return true }

// paramLister is a cache.GenericLister (and, with a namespace, a
// GenericNamespaceLister) over the paramKind's registry, bound to one request's
// context. Its objects are the watch cache's own: CEL reads them, nothing writes them.
type paramLister struct {
	ctx       context.Context
	objects   Lister
	namespace string
}

var _ cache.GenericLister = paramLister{}

// List implements cache.GenericLister.
func (l paramLister) List(selector labels.Selector) ([]runtime.Object, error) {
	return list(l.ctx, l.objects, l.namespace, selector)
}

// Get implements cache.GenericLister: 404 NotFound when etcd has no such object.
func (l paramLister) Get(name string) (runtime.Object, error) {
	return rest.GetCachedFirst(l.ctx, l.objects, l.namespace, name, nil)
}

// ByNamespace implements cache.GenericLister.
func (l paramLister) ByNamespace(namespace string) cache.GenericNamespaceLister {
	l.namespace = namespace
	return l
}

// objectInterfaces are admission's ObjectInterfaces over the scheme, with skiff's
// equivalent resources for matchPolicy Equivalent.
func (p *Plugin) objectInterfaces() kubeadmission.ObjectInterfaces {
	return &kubeadmission.RuntimeObjectInterfaces{
		ObjectCreater:            p.cfg.Scheme,
		ObjectTyper:              p.cfg.Scheme,
		ObjectDefaulter:          p.cfg.Scheme,
		ObjectConvertor:          p.cfg.Scheme,
		EquivalentResourceMapper: &equivalents{plugin: p, kinds: map[schema.GroupVersionResource]schema.GroupVersionKind{}},
	}
}

// equivalents is a runtime.EquivalentResourceMapper over Config.Equivalents: a
// resource and those serving its objects in another group or version (subresources
// have none), for one request.
type equivalents struct {
	plugin *Plugin
	kinds  map[schema.GroupVersionResource]schema.GroupVersionKind
}

func (e *equivalents) EquivalentResourcesFor(resource schema.GroupVersionResource, subresource string) []schema.GroupVersionResource {
	out := []schema.GroupVersionResource{resource}
	if subresource != "" || e.plugin.cfg.Equivalents == nil {
		return out
	}
	for _, eq := range e.plugin.cfg.Equivalents(resource) {
		e.kinds[eq.Resource] = eq.Kind
		out = append(out, eq.Resource)
	}
	return out
}

func (e *equivalents) KindFor(resource schema.GroupVersionResource, subresource string) schema.GroupVersionKind {
	if subresource != "" {
		return schema.GroupVersionKind{}
	}
	return e.kinds[resource]
}
