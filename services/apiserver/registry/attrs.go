package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// ObjectMetaFieldsSet returns the field set every object supports in field selectors:
// metadata.name, plus metadata.namespace for namespaced resources. Mirrors
// k8s.io/apiserver/pkg/registry/generic.ObjectMetaFieldsSet.
func ObjectMetaFieldsSet(meta *metav1.ObjectMeta, namespaced bool) fields.Set {
	if !namespaced {
		return fields.Set{"metadata.name": meta.Name}
	}
	return fields.Set{"metadata.name": meta.Name, "metadata.namespace": meta.Namespace}
}

// MergeFieldsSets adds source's fields to target and returns target.
func MergeFieldsSets(target, source fields.Set) fields.Set {
	for k, v := range source {
		target[k] = v
	}
	return target
}
