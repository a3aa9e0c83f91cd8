// Package resourcequota is the v1 resourcequotas resource: namespaced ResourceQuotas
// whose spec.hard caps what a namespace may hold, and whose status (hard and used) the
// resource quota controller and the ResourceQuota admission plugin keep through
// resourcequotas/status. Mirrors k8s.io/kubernetes/pkg/registry/core/resourcequota.
package resourcequota

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Descriptor serves v1 resourcequotas (kubectl: resourcequotas, quota) with
// resourcequotas/status, at /registry/resourcequotas/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "resourcequotas",
	SingularName: "resourcequota",
	Kind:         "ResourceQuota",
	ShortNames:   []string{"quota"},
	NewFunc:      func() runtime.Object { return &corev1.ResourceQuota{} },
	NewListFunc:  func() runtime.Object { return &corev1.ResourceQuotaList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "ResourceQuota", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Strategy is the resourcequotas strategy: status is cleared on create and kept on
// update of the main resource. Mirrors resourcequotaStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of resourcequotas/status: only status changes. Mirrors
// resourcequotaStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate clears status: the controller computes it.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*corev1.ResourceQuota).Status = corev1.ResourceQuotaStatus{}
}

// PrepareForUpdate keeps the stored status.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.ResourceQuota).Status = old.(*corev1.ResourceQuota).Status
}

// Validate checks a new ResourceQuota (corevalidation.ValidateResourceQuota).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return corevalidation.ValidateResourceQuota(obj.(*corev1.ResourceQuota))
}

// ValidateUpdate checks an update (corevalidation.ValidateResourceQuotaUpdate): scopes
// are immutable.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return corevalidation.ValidateResourceQuotaUpdate(obj.(*corev1.ResourceQuota), old.(*corev1.ResourceQuota))
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	rq, ok := obj.(*corev1.ResourceQuota)
	if !ok {
		return nil, nil, fmt.Errorf("not a ResourceQuota: %T", obj)
	}
	return labels.Set(rq.Labels), registry.ObjectMetaFieldsSet(&rq.ObjectMeta, true), nil
}

// TableColumns are NAME AGE REQUEST LIMIT. Mirrors printResourceQuota's columns.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		registry.AgeColumn,
		{Name: "Request", Type: "string", Description: "Request represents a minimum amount of cpu/memory that a container may consume."},
		{Name: "Limit", Type: "string", Description: "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."},
	}
}

// TableRow prints one ResourceQuota: every resource of status.hard, sorted, as
// "<name>: <used>/<hard>", those named limits.* under LIMIT and the others under
// REQUEST, each list joined with ", ". Mirrors printResourceQuota.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	rq := obj.(*corev1.ResourceQuota)
	names := make([]string, 0, len(rq.Status.Hard))
	for name := range rq.Status.Hard {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var requests, limits []string
	for _, name := range names {
		used, hard := rq.Status.Used[corev1.ResourceName(name)], rq.Status.Hard[corev1.ResourceName(name)]
		cell := fmt.Sprintf("%s: %s/%s", name, used.String(), hard.String())
		if pieces := strings.Split(name, "."); len(pieces) > 1 && pieces[0] == "limits" {
			limits = append(limits, cell)
		} else {
			requests = append(requests, cell)
		}
	}
	return []interface{}{rq.Name, registry.TranslateTimestampSince(rq.CreationTimestamp), strings.Join(requests, ", "), strings.Join(limits, ", ")}
}

// PrepareForUpdate keeps the stored spec.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.ResourceQuota).Spec = old.(*corev1.ResourceQuota).Spec
}

// ValidateUpdate checks status (corevalidation.ValidateResourceQuotaStatusUpdate).
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return corevalidation.ValidateResourceQuotaStatusUpdate(obj.(*corev1.ResourceQuota), old.(*corev1.ResourceQuota))
}

// GetResetFields: the main resource keeps the stored status. Mirrors
// resourcequotaStrategy.GetResetFields.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetResetFields: resourcequotas/status keeps the stored spec. Mirrors
// resourcequotaStatusStrategy.GetResetFields.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}
