package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewDescriptor serves pods with their status, ephemeralcontainers, binding, eviction, exec,
// attach, portforward, log and proxy subresources; the streaming ones are proxied to ep (nil answers them 503),
// proxy to the pod itself.
// Mirrors k8s.io/kubernetes/pkg/registry/core/pod/storage.PodStorage.
func NewDescriptor(ep *ExecProxy) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: corev1.SchemeGroupVersion,
		Resource:     "pods",
		SingularName: "pod",
		Kind:         "Pod",
		ShortNames:   []string{"po"},
		Categories:   []string{"all"},
		NewFunc:      func() runtime.Object { return &corev1.Pod{} },
		NewListFunc:  func() runtime.Object { return &corev1.PodList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, stores registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			streams := NewSubresources(ep)
			var pdbs *registry.Store
			if stores != nil {
				pdbs = stores.Store(policyv1.Resource("poddisruptionbudgets"))
			}
			return store, map[string]registry.Subresource{
				"status":  {Kind: "Pod", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
				"binding": {Kind: "Binding", Storage: &BindingREST{store: store.WithStrategy(bindingStrategy{})}},
				// kubectl drain evicts here, within the pods' PodDisruptionBudgets.
				"eviction":    {Kind: "Eviction", Storage: NewEvictionREST(store, pdbs)},
				"exec":        {Kind: "PodExecOptions", Storage: streams["exec"]},
				"attach":      {Kind: "PodAttachOptions", Storage: streams["attach"]},
				"portforward": {Kind: "PodPortForwardOptions", Storage: streams["portforward"]},
				"log":         {Kind: "Pod", Storage: streams["log"]},
				"proxy":       {Kind: "Pod", Storage: &PodProxyREST{store: store}},
				// kubectl debug adds ephemeral containers here.
				"ephemeralcontainers": {Kind: "Pod", Storage: store.WithStrategy(EphemeralContainersStrategy{}).Subresource()},
			}, nil
		},
	}
}

// BindingREST serves pods/binding: the scheduler's way to assign a pod to a node.
// Mirrors BindingREST in pkg/registry/core/pod/storage/storage.go.
type BindingREST struct {
	store *registry.Store
}

var _ rest.Creater = (*BindingREST)(nil)

// New returns an empty Binding for request decoding.
func (r *BindingREST) New() runtime.Object { return &corev1.Binding{} }

// Create assigns the pod named by the binding to binding.Target.Name: it sets
// spec.nodeName, merges the binding's annotations and sets PodScheduled=True, all in one
// GuaranteedUpdate. The binding's uid and resourceVersion, when set, are preconditions.
// Errors: 400 for a name mismatch or an empty target, 404 for a missing pod, 409 Conflict
// when the pod is already bound, being deleted or gated. Returns a Success Status with
// code 201, as kube-apiserver does.
func (r *BindingREST) Create(ctx context.Context, namespace string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	binding, ok := obj.(*corev1.Binding)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Binding object: %T", obj))
	}
	if binding.Namespace != "" && binding.Namespace != namespace {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if binding.Target.Name == "" {
		return nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), binding.Name,
			field.ErrorList{field.Required(field.NewPath("target", "name"), "")})
	}
	name := binding.Name
	_, _, err := r.store.Update(ctx, namespace, name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		pod := old.(*corev1.Pod)
		if binding.UID != "" && binding.UID != pod.UID {
			return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", binding.UID, pod.UID))
		}
		if binding.ResourceVersion != "" && binding.ResourceVersion != pod.ResourceVersion {
			return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), name,
				fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", binding.ResourceVersion, pod.ResourceVersion))
		}
		if pod.DeletionTimestamp != nil {
			return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), name, fmt.Errorf("pod %v is being deleted, cannot be assigned to a host", name))
		}
		if pod.Spec.NodeName != "" {
			return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), name, fmt.Errorf("pod %v is already assigned to node %q", name, pod.Spec.NodeName))
		}
		if len(pod.Spec.SchedulingGates) > 0 {
			return nil, apierrors.NewConflict(corev1.Resource("pods/binding"), name, fmt.Errorf("pod %v has non-empty .spec.schedulingGates", name))
		}
		pod.Spec.NodeName = binding.Target.Name
		for k, v := range binding.Annotations {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[k] = v
		}
		setCondition(&pod.Status, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
		})
		return pod, nil
	}), nil)
	if err != nil {
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}, nil
}

// bindingStrategy lets a binding write spec.nodeName and the PodScheduled condition,
// which neither the main resource nor pods/status may change.
type bindingStrategy struct{ Strategy }

// PrepareForUpdate keeps everything the binding computed.
func (bindingStrategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// ValidateUpdate checks only the metadata rules; the binding itself was checked above.
func (bindingStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	return apivalidation.ValidateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta, field.NewPath("metadata"))
}

// setCondition replaces the condition of the same type, or appends it. The transition
// time is kept when the status does not change.
func setCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	for i := range status.Conditions {
		if status.Conditions[i].Type == c.Type {
			if status.Conditions[i].Status == c.Status {
				c.LastTransitionTime = status.Conditions[i].LastTransitionTime
			}
			status.Conditions[i] = c
			return
		}
	}
	status.Conditions = append(status.Conditions, c)
}
