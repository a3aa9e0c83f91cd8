// Package priorityclass is the scheduling.k8s.io/v1 priorityclasses resource:
// cluster-scoped PriorityClasses mapping a name to the integer priority (and preemption
// policy) the Priority admission plugin writes into pods that name it, plus the two
// system classes every cluster has. Mirrors k8s.io/kubernetes/pkg/registry/scheduling
// and pkg/apis/scheduling (validation, the system classes).
package priorityclass

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Priorities and names of kube's scheduling API (k8s.io/kubernetes/pkg/apis/scheduling).
const (
	// HighestUserDefinablePriority is the highest priority a user's class may have.
	HighestUserDefinablePriority int32 = 1000000000
	// SystemCriticalPriority is the priority of system-cluster-critical; the classes
	// above it are the system's.
	SystemCriticalPriority = 2 * HighestUserDefinablePriority
	// SystemPriorityClassPrefix opens the names reserved for the system classes.
	SystemPriorityClassPrefix = "system-"
	// SystemClusterCritical is for pods that must run in the cluster but may move.
	SystemClusterCritical = SystemPriorityClassPrefix + "cluster-critical"
	// SystemNodeCritical is for pods that must not be moved from their node.
	SystemNodeCritical = SystemPriorityClassPrefix + "node-critical"
	// DefaultPriorityWhenNoDefaultClassExists is a pod's priority when it names no
	// class and no class is the global default.
	DefaultPriorityWhenNoDefaultClassExists int32 = 0
)

// SystemPriorityClasses are the classes the apiserver creates at start and refuses to
// delete. Mirrors scheduling.SystemPriorityClasses.
func SystemPriorityClasses() []*schedulingv1.PriorityClass {
	return []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: SystemNodeCritical}, Value: SystemCriticalPriority + 1000,
			Description: "Used for system critical pods that must not be moved from their current node."},
		{ObjectMeta: metav1.ObjectMeta{Name: SystemClusterCritical}, Value: SystemCriticalPriority,
			Description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."},
	}
}

// Descriptor serves scheduling.k8s.io/v1 priorityclasses (kubectl: priorityclasses, pc),
// at /registry/priorityclasses/<name>. Deleting a system class is a 403.
var Descriptor = registry.Descriptor{
	GroupVersion: schedulingv1.SchemeGroupVersion,
	Resource:     "priorityclasses",
	SingularName: "priorityclass",
	Kind:         "PriorityClass",
	ShortNames:   []string{"pc"},
	NewFunc:      func() runtime.Object { return &schedulingv1.PriorityClass{} },
	NewListFunc:  func() runtime.Object { return &schedulingv1.PriorityClassList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return &REST{Store: store}, nil, nil
	},
}

// REST is the priorityclasses storage: the Store, but for deletes of system classes.
type REST struct {
	*registry.Store
}

// Delete refuses the system classes with kube's 403, and deletes others as the Store
// does. Mirrors pkg/registry/scheduling/priorityclass/storage REST.Delete.
func (r *REST) Delete(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	for _, pc := range SystemPriorityClasses() {
		if name == pc.Name {
			return nil, false, apierrors.NewForbidden(schedulingv1.Resource("priorityclasses"), name, errors.New("this is a system priority class and cannot be deleted"))
		}
	}
	return r.Store.Delete(ctx, namespace, name, opts)
}

// Strategy is the priorityclasses strategy: preemptionPolicy defaulted, value and
// preemptionPolicy immutable. Mirrors priorityClassStrategy.
type Strategy struct{}

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is false: PriorityClasses are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// SetDefaults fills preemptionPolicy (PreemptLowerPriority). Mirrors
// SetDefaults_PriorityClass (scheduling/v1).
func SetDefaults(pc *schedulingv1.PriorityClass) {
	if pc.PreemptionPolicy == nil {
		pc.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	}
}

// PrepareForCreate fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	SetDefaults(obj.(*schedulingv1.PriorityClass))
}

// PrepareForUpdate fills defaults.
func (Strategy) PrepareForUpdate(_ context.Context, obj, _ runtime.Object) {
	SetDefaults(obj.(*schedulingv1.PriorityClass))
}

// Validate checks a new PriorityClass (see ValidatePriorityClass).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidatePriorityClass(obj.(*schedulingv1.PriorityClass))
}

// ValidateUpdate checks the new class and that value and preemptionPolicy did not
// change. Mirrors ValidatePriorityClassUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pc, oldPC := obj.(*schedulingv1.PriorityClass), old.(*schedulingv1.PriorityClass)
	allErrs := ValidatePriorityClass(pc)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&pc.ObjectMeta, &oldPC.ObjectMeta, field.NewPath("metadata"))...)
	if pc.Value != oldPC.Value {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
	}
	return append(allErrs, apivalidation.ValidateImmutableField(pc.PreemptionPolicy, oldPC.PreemptionPolicy, field.NewPath("preemptionPolicy"))...)
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pc, ok := obj.(*schedulingv1.PriorityClass)
	if !ok {
		return nil, nil, fmt.Errorf("not a PriorityClass: %T", obj)
	}
	return labels.Set(pc.Labels), registry.ObjectMetaFieldsSet(&pc.ObjectMeta, false), nil
}

// TableColumns are NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY. Mirrors
// printPriorityClass.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Value", Type: "integer", Description: "value represents the integer value of this priority class."},
		{Name: "Global-Default", Type: "boolean", Description: "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."},
		registry.AgeColumn,
		{Name: "PreemptionPolicy", Type: "string", Description: "preemptionPolicy is the Policy for preempting pods with lower priority."},
	}
}

// TableRow prints one PriorityClass.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	pc := obj.(*schedulingv1.PriorityClass)
	policy := ""
	if pc.PreemptionPolicy != nil {
		policy = string(*pc.PreemptionPolicy)
	}
	return []interface{}{pc.Name, int64(pc.Value), pc.GlobalDefault, registry.TranslateTimestampSince(pc.CreationTimestamp), policy}
}

// ValidatePriorityClass checks a PriorityClass: a DNS-subdomain name; a name with the
// "system-" prefix only for a system class with its own value and globalDefault false;
// else a value at most HighestUserDefinablePriority; a known preemptionPolicy. Paths and
// messages are kube's. Mirrors ValidatePriorityClass.
func ValidatePriorityClass(pc *schedulingv1.PriorityClass) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&pc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if strings.HasPrefix(pc.Name, SystemPriorityClassPrefix) {
		if err := isKnownSystemPriorityClass(pc); err != nil {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "name"),
				"priority class names with '"+SystemPriorityClassPrefix+"' prefix are reserved for system use only. error: "+err.Error()))
		}
	} else if pc.Value > HighestUserDefinablePriority {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("value"), fmt.Sprintf("maximum allowed value of a user defined priority is %v", HighestUserDefinablePriority)))
	}
	if p := pc.PreemptionPolicy; p != nil && *p != corev1.PreemptLowerPriority && *p != corev1.PreemptNever {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("preemptionPolicy"), *p,
			[]string{string(corev1.PreemptLowerPriority), string(corev1.PreemptNever)}))
	}
	return allErrs
}

// isKnownSystemPriorityClass is nil when pc is one of SystemPriorityClasses with its
// value and globalDefault false. Mirrors scheduling.IsKnownSystemPriorityClass.
func isKnownSystemPriorityClass(pc *schedulingv1.PriorityClass) error {
	for _, spc := range SystemPriorityClasses() {
		if spc.Name != pc.Name {
			continue
		}
		if spc.Value != pc.Value {
			return fmt.Errorf("value of %v PriorityClass must be %v", spc.Name, spc.Value)
		}
		if pc.GlobalDefault {
			return fmt.Errorf("globalDefault of %v PriorityClass must be %v", spc.Name, spc.GlobalDefault)
		}
		return nil
	}
	return fmt.Errorf("%v is not a known system priority class", pc.Name)
}
