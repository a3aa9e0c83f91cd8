package admission_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/admission"
)

// laggingNamespaces is a test double for the namespaces registry behind a watch cache
// that lags etcd: reads at resourceVersion "0" answer from cached, other reads from
// live, and reads counts the live ones. A real cache's lag cannot be held still for a
// test.
type laggingNamespaces struct {
	cached, live map[string]*corev1.Namespace
	liveReads    int
}

func (l *laggingNamespaces) Get(_ context.Context, _, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	from := l.live
	if opts.ResourceVersion == "0" {
		from = l.cached
	} else {
		l.liveReads++
	}
	if ns, ok := from[name]; ok {
		return ns.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

func namespaceIn(name string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
}

func TestNamespaceLifecycleReadsTheCacheFirst(t *testing.T) {
	ctx := context.Background()
	createPod := func(namespace string) admission.Attributes {
		return admission.Attributes{Operation: admission.Create, Resource: corev1.SchemeGroupVersion.WithResource("pods"),
			Namespace: namespace, Name: "p", Object: newPod(namespace, "p", "")}
	}
	active, terminating := corev1.NamespaceActive, corev1.NamespaceTerminating

	t.Run("cached and Active: no etcd read", func(t *testing.T) {
		ns := &laggingNamespaces{cached: map[string]*corev1.Namespace{"a": namespaceIn("a", active)},
			live: map[string]*corev1.Namespace{"a": namespaceIn("a", active)}}
		if err := admission.NewNamespaceLifecycle(ns).Admit(ctx, createPod("a")); err != nil || ns.liveReads != 0 {
			t.Fatalf("Admit = %v with %d etcd reads; want admitted from the cache", err, ns.liveReads)
		}
	})
	t.Run("not cached yet: etcd has it", func(t *testing.T) {
		ns := &laggingNamespaces{live: map[string]*corev1.Namespace{"new": namespaceIn("new", active)}}
		if err := admission.NewNamespaceLifecycle(ns).Admit(ctx, createPod("new")); err != nil || ns.liveReads != 1 {
			t.Fatalf("Admit = %v with %d etcd reads; want admitted after one etcd read", err, ns.liveReads)
		}
	})
	t.Run("nowhere: 404", func(t *testing.T) {
		ns := &laggingNamespaces{}
		if err := admission.NewNamespaceLifecycle(ns).Admit(ctx, createPod("gone")); !apierrors.IsNotFound(err) {
			t.Fatalf("Admit = %v; want NotFound", err)
		}
	})
	t.Run("cached Terminating: 403", func(t *testing.T) {
		ns := &laggingNamespaces{cached: map[string]*corev1.Namespace{"t": namespaceIn("t", terminating)}}
		if err := admission.NewNamespaceLifecycle(ns).Admit(ctx, createPod("t")); !apierrors.IsForbidden(err) {
			t.Fatalf("Admit = %v; want Forbidden", err)
		}
	})
	t.Run("deletion admitted, cache still Active: etcd decides", func(t *testing.T) {
		ns := &laggingNamespaces{cached: map[string]*corev1.Namespace{"d": namespaceIn("d", active)},
			live: map[string]*corev1.Namespace{"d": namespaceIn("d", terminating)}}
		plugin := admission.NewNamespaceLifecycle(ns)
		if err := plugin.Admit(ctx, createPod("d")); err != nil {
			t.Fatalf("Admit before the deletion = %v; want admitted from the cache", err)
		}
		deleteNamespace := admission.Attributes{Operation: admission.Delete,
			Resource: corev1.SchemeGroupVersion.WithResource("namespaces"), Name: "d"}
		if err := plugin.Admit(ctx, deleteNamespace); err != nil {
			t.Fatalf("Admit of the namespace's deletion = %v", err)
		}
		if err := plugin.Admit(ctx, createPod("d")); !apierrors.IsForbidden(err) || ns.liveReads != 1 {
			t.Fatalf("Admit after the deletion = %v with %d etcd reads; want Forbidden from one etcd read", err, ns.liveReads)
		}
	})
}
