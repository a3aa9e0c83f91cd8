// Package replicationcontroller is kube-controller-manager's replication controller: the
// ReplicaSet controller itself, run over core/v1 ReplicationControllers seen as apps/v1
// ReplicaSets through an adapter that converts at the package edge, so pods are created,
// deleted, adopted and released, and status written, by the one implementation. Pods'
// controller references and events name the ReplicationController. Mirrors
// k8s.io/kubernetes/pkg/controller/replication (ReplicationManager and conversion.go).
package replicationcontroller

import (
	"context"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/replicaset"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "replicationcontroller-controller"

// EventSource is the component the controller's events report (source.component and
// reportingController), as kube's replication manager's recorder does.
const EventSource = "replication-controller"

// New builds the controller over the factory's ReplicationController and Pod informers.
// Start the factory after New and before (or while) Run waits for the caches.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *replicaset.Controller {
	a := adapter{informer: factory.Core().V1().ReplicationControllers(), client: client}
	return replicaset.NewBaseController(a, factory.Core().V1().Pods(), client, recorder, Name, "replicationmanager")
}

// adapter is the replicaset.Adapter of ReplicationControllers: what it reads it
// converts to ReplicaSets, what it writes back to ReplicationControllers.
type adapter struct {
	informer coreinformers.ReplicationControllerInformer
	client   kubernetes.Interface
}

var _ replicaset.Adapter = adapter{}

func (adapter) Kind() schema.GroupVersionKind {
	return corev1.SchemeGroupVersion.WithKind("ReplicationController")
}

func (a adapter) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return a.informer.Informer().AddEventHandler(convertingHandler{h})
}

func (a adapter) HasSynced() bool { return a.informer.Informer().HasSynced() }

func (a adapter) Get(namespace, name string) (*appsv1.ReplicaSet, error) {
	rc, err := a.informer.Lister().ReplicationControllers(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	return ToReplicaSet(rc), nil
}

func (a adapter) List(namespace string) ([]*appsv1.ReplicaSet, error) {
	rcs, err := a.informer.Lister().ReplicationControllers(namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*appsv1.ReplicaSet, len(rcs))
	for i, rc := range rcs {
		out[i] = ToReplicaSet(rc)
	}
	return out, nil
}

func (a adapter) Fetch(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error) {
	rc, err := a.client.CoreV1().ReplicationControllers(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return ToReplicaSet(rc), nil
}

func (a adapter) UpdateStatus(ctx context.Context, rs *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
	rc, err := a.client.CoreV1().ReplicationControllers(rs.Namespace).UpdateStatus(ctx, ToReplicationController(rs), metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return ToReplicaSet(rc), nil
}

func (adapter) EventObject(rs *appsv1.ReplicaSet) runtime.Object { return ToReplicationController(rs) }

// convertingHandler hands the controller's handler ReplicaSets for the
// ReplicationControllers the informer delivers. Mirrors conversionEventHandler.
type convertingHandler struct{ handler cache.ResourceEventHandler }

func (h convertingHandler) OnAdd(obj interface{}, isInInitialList bool) {
	if rc, ok := obj.(*corev1.ReplicationController); ok {
		h.handler.OnAdd(ToReplicaSet(rc), isInInitialList)
	}
}

func (h convertingHandler) OnUpdate(oldObj, newObj interface{}) {
	oldRC, ok1 := oldObj.(*corev1.ReplicationController)
	newRC, ok2 := newObj.(*corev1.ReplicationController)
	if ok1 && ok2 {
		h.handler.OnUpdate(ToReplicaSet(oldRC), ToReplicaSet(newRC))
	}
}

func (h convertingHandler) OnDelete(obj interface{}) {
	switch o := obj.(type) {
	case *corev1.ReplicationController:
		h.handler.OnDelete(ToReplicaSet(o))
	case cache.DeletedFinalStateUnknown:
		if rc, ok := o.Obj.(*corev1.ReplicationController); ok {
			h.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: o.Key, Obj: ToReplicaSet(rc)})
		}
	}
}

// ToReplicaSet is rc as a ReplicaSet: the same metadata, replicas, minReadySeconds and
// template, the selector as matchLabels, and the same status and conditions. A missing
// template becomes an empty one. Mirrors convertRCtoRS.
func ToReplicaSet(rc *corev1.ReplicationController) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: *rc.ObjectMeta.DeepCopy(),
		Spec: appsv1.ReplicaSetSpec{
			MinReadySeconds: rc.Spec.MinReadySeconds,
			Selector:        &metav1.LabelSelector{MatchLabels: maps.Clone(rc.Spec.Selector)},
		},
		Status: appsv1.ReplicaSetStatus{
			Replicas:             rc.Status.Replicas,
			FullyLabeledReplicas: rc.Status.FullyLabeledReplicas,
			ReadyReplicas:        rc.Status.ReadyReplicas,
			AvailableReplicas:    rc.Status.AvailableReplicas,
			ObservedGeneration:   rc.Status.ObservedGeneration,
		},
	}
	if rc.Spec.Replicas != nil {
		rs.Spec.Replicas = ptr.To(*rc.Spec.Replicas)
	}
	if rc.Spec.Template != nil {
		rs.Spec.Template = *rc.Spec.Template.DeepCopy()
	}
	for _, c := range rc.Status.Conditions {
		rs.Status.Conditions = append(rs.Status.Conditions, appsv1.ReplicaSetCondition{
			Type: appsv1.ReplicaSetConditionType(c.Type), Status: c.Status,
			LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message,
		})
	}
	return rs
}

// ToReplicationController is rs, made by ToReplicaSet, back as a ReplicationController:
// the selector is its matchLabels (such an rs has no matchExpressions). Mirrors
// convertRStoRC.
func ToReplicationController(rs *appsv1.ReplicaSet) *corev1.ReplicationController {
	rc := &corev1.ReplicationController{
		ObjectMeta: *rs.ObjectMeta.DeepCopy(),
		Spec: corev1.ReplicationControllerSpec{
			MinReadySeconds: rs.Spec.MinReadySeconds,
			Template:        rs.Spec.Template.DeepCopy(),
		},
		Status: corev1.ReplicationControllerStatus{
			Replicas:             rs.Status.Replicas,
			FullyLabeledReplicas: rs.Status.FullyLabeledReplicas,
			ReadyReplicas:        rs.Status.ReadyReplicas,
			AvailableReplicas:    rs.Status.AvailableReplicas,
			ObservedGeneration:   rs.Status.ObservedGeneration,
		},
	}
	if rs.Spec.Replicas != nil {
		rc.Spec.Replicas = ptr.To(*rs.Spec.Replicas)
	}
	if rs.Spec.Selector != nil {
		rc.Spec.Selector = maps.Clone(rs.Spec.Selector.MatchLabels)
	}
	for _, c := range rs.Status.Conditions {
		rc.Status.Conditions = append(rc.Status.Conditions, corev1.ReplicationControllerCondition{
			Type: corev1.ReplicationControllerConditionType(c.Type), Status: c.Status,
			LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message,
		})
	}
	return rc
}
