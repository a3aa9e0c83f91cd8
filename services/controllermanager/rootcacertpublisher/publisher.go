// Package rootcacertpublisher keeps a ConfigMap named kube-root-ca.crt, holding the
// cluster CA as ca.crt, in every namespace, so pods can verify the apiserver (the
// service-account projected volume mounts it). Mirrors kube-controller-manager's
// root-ca-cert-publisher (pkg/controller/certificates/rootcacertpublisher).
package rootcacertpublisher

import (
	"context"
	"log/slog"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "root-ca-certificate-publisher-controller"

// ConfigMapName is the published ConfigMap's name; DataKey holds the PEM CA bundle.
const (
	ConfigMapName = "kube-root-ca.crt"
	DataKey       = "ca.crt"
)

// descriptionAnnotation is the annotation kube puts on the ConfigMap.
const descriptionAnnotation = "kubernetes.io/description"

const description = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."

// Publisher writes kube-root-ca.crt into every active namespace and puts it back when
// it is changed or deleted.
type Publisher struct {
	client          kubernetes.Interface
	rootCA          []byte
	namespaceLister corelisters.NamespaceLister
	cmLister        corelisters.ConfigMapLister
	synced          []cache.InformerSynced
	queue           workqueue.TypedRateLimitingInterface[string]
	log             *slog.Logger
}

// New is the publisher of rootCA (a PEM bundle) over the namespace and ConfigMap
// informers.
func New(namespaces coreinformers.NamespaceInformer, configMaps coreinformers.ConfigMapInformer, client kubernetes.Interface, rootCA []byte) *Publisher {
	p := &Publisher{
		client: client, rootCA: rootCA,
		namespaceLister: namespaces.Lister(), cmLister: configMaps.Lister(),
		synced: []cache.InformerSynced{namespaces.Informer().HasSynced, configMaps.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "root_ca_cert_publisher"}),
		log: slog.Default().With("controller", Name),
	}
	addNamespace := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			p.queue.Add(ns.Name)
		}
	}
	_, _ = namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    addNamespace,
		UpdateFunc: func(_, obj any) { addNamespace(obj) },
	})
	configMapChanged := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == ConfigMapName {
			p.queue.Add(cm.Namespace)
		}
	}
	_, _ = configMaps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { configMapChanged(obj) },
		DeleteFunc: configMapChanged,
	})
	return p
}

// Run works the queue with workers until ctx ends.
func (p *Publisher) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, p.queue, p.synced, workers, p.log, p.sync)
}

// sync makes kube-root-ca.crt in namespace hold the root CA, unless the namespace is
// gone or terminating.
func (p *Publisher) sync(ctx context.Context, namespace string) error {
	ns, err := p.namespaceLister.Get(namespace)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		return nil
	}
	data := map[string]string{DataKey: string(p.rootCA)}
	cm, err := p.cmLister.ConfigMaps(namespace).Get(ConfigMapName)
	switch {
	case apierrors.IsNotFound(err):
		_, err = p.client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Annotations: map[string]string{descriptionAnnotation: description}},
			Data:       data,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) || (apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)) {
			return nil
		}
		return err
	case err != nil:
		return err
	}
	if reflect.DeepEqual(cm.Data, data) && len(cm.BinaryData) == 0 && cm.Annotations[descriptionAnnotation] == description {
		return nil
	}
	cm = cm.DeepCopy()
	cm.Data, cm.BinaryData = data, nil
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[descriptionAnnotation] = description
	_, err = p.client.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
