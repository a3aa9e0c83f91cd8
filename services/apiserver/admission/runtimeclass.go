package admission

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/apiserver/registry/rest"
)

// RuntimeClass applies a pod's RuntimeClass when the pod is created: a pod naming a
// RuntimeClass that does not exist is refused (403 "pod rejected: RuntimeClass "x" not
// found"); the class's overhead becomes the pod's spec.overhead, and a pod that sets an
// overhead of its own other than the class's (or any overhead without a class that
// defines one) is refused; the class's scheduling.nodeSelector is merged into the pod's
// (a key the pod sets to another value is refused as a conflict) and its tolerations are
// merged into the pod's, a toleration another one covers dropped. Updates are not
// looked at (the fields it sets are immutable). Mirrors kube's RuntimeClass admission
// plugin (plugin/pkg/admission/runtimeclass), its mutating and validating halves in one.
type RuntimeClass struct {
	// RuntimeClasses reads RuntimeClasses (the registry): from the watch cache first,
	// then, for one the cache does not hold (yet), from etcd, as kube's plugin reads its
	// informer and then the API.
	RuntimeClasses rest.Getter
}

// Admit implements Interface.
func (p RuntimeClass) Admit(ctx context.Context, a Attributes) error {
	if a.Resource.Group != "" || a.Resource.Resource != "pods" || a.Subresource != "" || a.Operation != Create {
		return nil
	}
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest("Resource was marked with kind Pod but was unable to be converted")
	}
	forbid := func(format string, args ...any) error {
		return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name, fmt.Errorf(format, args...))
	}
	var rc *nodev1.RuntimeClass
	if name := pod.Spec.RuntimeClassName; name != nil {
		var err error
		if rc, err = p.get(ctx, *name); apierrors.IsNotFound(err) {
			return forbid("pod rejected: RuntimeClass %q not found", *name)
		} else if err != nil {
			return err
		}
	}
	const overheadMismatch = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
	if rc != nil && rc.Overhead != nil {
		if len(pod.Spec.Overhead) > 0 && !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return forbid(overheadMismatch)
		}
		pod.Spec.Overhead = rc.Overhead.PodFixed.DeepCopy()
	} else if pod.Spec.Overhead != nil {
		return forbid("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
	}
	if rc != nil && rc.Scheduling != nil {
		selector := pod.Spec.NodeSelector
		if selector == nil {
			selector = maps.Clone(rc.Scheduling.NodeSelector)
		} else {
			for key, value := range rc.Scheduling.NodeSelector {
				if podValue, ok := selector[key]; ok && podValue != value {
					return forbid("conflict: runtimeClass.scheduling.nodeSelector[%s] = %s; pod.spec.nodeSelector[%s] = %s", key, value, key, podValue)
				}
				selector[key] = value
			}
		}
		pod.Spec.NodeSelector = selector
		pod.Spec.Tolerations = MergeTolerations(pod.Spec.Tolerations, rc.Scheduling.Tolerations)
	}
	return nil
}

// get reads RuntimeClass name from the watch cache, then from etcd when the cache does
// not have it.
func (p RuntimeClass) get(ctx context.Context, name string) (*nodev1.RuntimeClass, error) {
	obj, err := p.RuntimeClasses.Get(ctx, "", name, &metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		obj, err = p.RuntimeClasses.Get(ctx, "", name, &metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	rc, ok := obj.(*nodev1.RuntimeClass)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("runtimeclasses storage returned a %T", obj))
	}
	return rc, nil
}

// MergeTolerations returns first and second's tolerations, in order, without those
// another one tolerates a superset of (of two equal ones, the first stays). Mirrors
// MergeTolerations in k8s.io/kubernetes/pkg/util/tolerations.
func MergeTolerations(first, second []corev1.Toleration) []corev1.Toleration {
	all := append(append([]corev1.Toleration(nil), first...), second...)
	var merged []corev1.Toleration
next:
	for i, t := range all {
		for _, m := range merged {
			if isSuperset(m, t) {
				continue next
			}
		}
		for _, later := range all[i+1:] {
			if !apiequality.Semantic.DeepEqual(&t, &later) && isSuperset(later, t) {
				continue next
			}
		}
		merged = append(merged, t)
	}
	return merged
}

// isSuperset reports whether ss tolerates every taint t tolerates. Mirrors kube's.
func isSuperset(ss, t corev1.Toleration) bool {
	if apiequality.Semantic.DeepEqual(&t, &ss) {
		return true
	}
	if t.Key != ss.Key && (ss.Key != "" || ss.Operator != corev1.TolerationOpExists) {
		return false // only an empty key with Exists matches every key
	}
	if t.Effect != ss.Effect && ss.Effect != "" {
		return false // an empty effect matches every effect
	}
	if ss.Effect == corev1.TaintEffectNoExecute && ss.TolerationSeconds != nil &&
		(t.TolerationSeconds == nil || *t.TolerationSeconds > *ss.TolerationSeconds) {
		return false
	}
	switch ss.Operator {
	case corev1.TolerationOpEqual, "":
		return t.Operator == corev1.TolerationOpEqual && t.Value == ss.Value
	case corev1.TolerationOpExists:
		return true
	}
	return false
}
