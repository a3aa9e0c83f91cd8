package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry/rest"
)

// PriorityClassReader reads PriorityClasses (the registry's store).
type PriorityClassReader interface {
	rest.Getter
	rest.Lister
}

// Priority resolves a pod's priority when it is created: a pod naming a PriorityClass
// gets its value and preemption policy (a class that does not exist is a 403 "no
// PriorityClass with name x was found"); a pod naming none gets the global default
// class's (the highest-valued one with globalDefault), or priority 0 and
// PreemptLowerPriority when there is none. A pod that sets spec.priority or
// spec.preemptionPolicy to something else than computed is refused (403). On a pod
// update the priority set at create is kept. A PriorityClass marked globalDefault is
// refused (403) while another class is the default. Mirrors kube's Priority admission
// plugin (plugin/pkg/admission/priority).
type Priority struct {
	// PriorityClasses reads the classes: their watch cache, then etcd.
	PriorityClasses PriorityClassReader
}

// Admit implements Interface.
func (p Priority) Admit(ctx context.Context, a Attributes) error {
	switch {
	case a.Resource.Group == "" && a.Resource.Resource == "pods" && a.Subresource == "":
		return p.admitPod(ctx, a)
	case a.Resource.Group == schedulingv1.GroupName && a.Resource.Resource == "priorityclasses" && a.Subresource == "":
		if a.Operation == Create || a.Operation == Update {
			return p.validatePriorityClass(ctx, a)
		}
	}
	return nil
}

func (p Priority) admitPod(ctx context.Context, a Attributes) error {
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return nil
	}
	if a.Operation == Update {
		// The priority was set at create and is immutable: keep it when the update
		// leaves it out.
		if old, ok := a.OldObject.(*corev1.Pod); ok {
			if pod.Spec.Priority == nil {
				pod.Spec.Priority = old.Spec.Priority
			}
			if pod.Spec.PreemptionPolicy == nil {
				pod.Spec.PreemptionPolicy = old.Spec.PreemptionPolicy
			}
		}
		return nil
	}
	if a.Operation != Create {
		return nil
	}
	forbid := func(format string, args ...any) error {
		return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name, fmt.Errorf(format, args...))
	}
	priority := DefaultPriority
	policy := ptr.To(corev1.PreemptLowerPriority)
	if name := pod.Spec.PriorityClassName; name == "" {
		pc, err := p.defaultClass(ctx)
		if err != nil {
			return fmt.Errorf("failed to get default priority class: %w", err)
		}
		if pc != nil {
			pod.Spec.PriorityClassName, priority, policy = pc.Name, pc.Value, pc.PreemptionPolicy
		}
	} else {
		obj, err := p.PriorityClasses.Get(ctx, "", name, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return forbid("no PriorityClass with name %v was found", name)
		}
		if err != nil {
			return fmt.Errorf("failed to get PriorityClass with name %s: %w", name, err)
		}
		pc := obj.(*schedulingv1.PriorityClass)
		priority, policy = pc.Value, pc.PreemptionPolicy
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority != priority {
		return forbid("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *pod.Spec.Priority, priority)
	}
	pod.Spec.Priority = &priority
	if policy != nil {
		if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy != *policy {
			return forbid("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *pod.Spec.PreemptionPolicy, *policy)
		}
		pod.Spec.PreemptionPolicy = ptr.To(*policy)
	}
	return nil
}

// DefaultPriority is a pod's priority when it names no class and no class is the
// global default (kube's scheduling.DefaultPriorityWhenNoDefaultClassExists).
const DefaultPriority int32 = 0

// validatePriorityClass refuses a second global default.
func (p Priority) validatePriorityClass(ctx context.Context, a Attributes) error {
	pc, ok := a.Object.(*schedulingv1.PriorityClass)
	if !ok || !pc.GlobalDefault {
		return nil
	}
	current, err := p.defaultClass(ctx)
	if err != nil {
		return fmt.Errorf("failed to get default priority class: %w", err)
	}
	if current != nil && current.Name != pc.Name {
		return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name,
			fmt.Errorf("PriorityClass %v is already marked as default. Only one default can exist", current.Name))
	}
	return nil
}

// defaultClass is the global default class with the highest value; nil if none.
func (p Priority) defaultClass(ctx context.Context) (*schedulingv1.PriorityClass, error) {
	list, err := p.PriorityClasses.List(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var best *schedulingv1.PriorityClass
	for _, item := range items {
		pc := item.(*schedulingv1.PriorityClass)
		if pc.GlobalDefault && (best == nil || pc.Value > best.Value) {
			best = pc
		}
	}
	return best, nil
}
