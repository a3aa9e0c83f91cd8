// Package rootcacertpublisher keeps a ConfigMap named kube-root-ca.crt, holding the
// cluster CA as ca.crt, in every namespace, so pods can verify the apiserver (the
// service-account projected volume mounts it). Mirrors kube-controller-manager's
// root-ca-cert-publisher (pkg/controller/certificates/rootcacertpublisher), run inside
// the apiserver beside the namespace controller.
package rootcacertpublisher

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/registry/rest"
)

// Name is the published ConfigMap's name; DataKey holds the PEM CA bundle.
const (
	Name    = "kube-root-ca.crt"
	DataKey = "ca.crt"
)

// descriptionAnnotation is the annotation kube puts on the ConfigMap.
const descriptionAnnotation = "kubernetes.io/description"

const description = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."

// ConfigMaps is what the publisher needs of the configmaps resource.
type ConfigMaps interface {
	rest.Getter
	rest.Creater
	rest.Updater
	rest.Watcher
}

// Namespaces is what the publisher needs of the namespaces resource.
type Namespaces interface {
	rest.Getter
	rest.Watcher
}

// Publisher writes kube-root-ca.crt into every active namespace and puts it back when
// it is changed or deleted.
type Publisher struct {
	// RootCA is the PEM bundle published as ca.crt.
	RootCA []byte
	// Namespaces and ConfigMaps are the registry's resources (writes bypass admission,
	// as a controller's writes of its own objects would pass it).
	Namespaces Namespaces
	ConfigMaps ConfigMaps
}

// Run watches namespaces and the published ConfigMaps until ctx ends, re-watching with
// backoff when a watch breaks.
func (p *Publisher) Run(ctx context.Context) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 10 * time.Second}
	for ctx.Err() == nil {
		if err := p.watch(ctx); err != nil {
			slog.Warn("root-ca-cert-publisher: watch; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Step()):
		}
	}
}

// watch follows namespaces and kube-root-ca.crt ConfigMaps until either watch ends.
func (p *Publisher) watch(ctx context.Context) error {
	namespaces, err := p.Namespaces.Watch(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	defer namespaces.Stop()
	configMaps, err := p.ConfigMaps.Watch(ctx, "", &metainternalversion.ListOptions{
		ResourceVersion: "0", FieldSelector: fields.OneTermEqualSelector("metadata.name", Name),
	})
	if err != nil {
		return err
	}
	defer configMaps.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-namespaces.ResultChan():
			if !ok || ev.Type == watch.Error {
				return nil
			}
			if ns, isNamespace := ev.Object.(*corev1.Namespace); isNamespace && ev.Type != watch.Deleted && ns.DeletionTimestamp == nil {
				p.sync(ctx, ns.Name)
			}
		case ev, ok := <-configMaps.ResultChan():
			if !ok || ev.Type == watch.Error {
				return nil
			}
			if cm, isConfigMap := ev.Object.(*corev1.ConfigMap); isConfigMap && ev.Type != watch.Added {
				p.sync(ctx, cm.Namespace)
			}
		}
	}
}

// sync makes kube-root-ca.crt in namespace hold RootCA, unless the namespace is gone or
// terminating. Errors are logged; the next event or re-watch retries.
func (p *Publisher) sync(ctx context.Context, namespace string) {
	obj, err := p.Namespaces.Get(ctx, "", namespace, &metav1.GetOptions{})
	if err != nil || obj.(*corev1.Namespace).DeletionTimestamp != nil {
		return
	}
	obj, err = p.ConfigMaps.Get(ctx, namespace, Name, &metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: namespace, Annotations: map[string]string{descriptionAnnotation: description}},
			Data:       map[string]string{DataKey: string(p.RootCA)},
		}
		_, err = p.ConfigMaps.Create(ctx, namespace, cm, &metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	case err == nil:
		cm := obj.(*corev1.ConfigMap)
		if bytes.Equal([]byte(cm.Data[DataKey]), p.RootCA) && len(cm.Data) == 1 && len(cm.BinaryData) == 0 {
			return
		}
		cm = cm.DeepCopy()
		cm.Data, cm.BinaryData = map[string]string{DataKey: string(p.RootCA)}, nil
		_, _, err = p.ConfigMaps.Update(ctx, namespace, Name, rest.DefaultUpdatedObjectInfo(cm), &metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsConflict(err) {
		slog.Warn("root-ca-cert-publisher: sync; will retry on the next event", "namespace", namespace, "err", err)
	}
}
