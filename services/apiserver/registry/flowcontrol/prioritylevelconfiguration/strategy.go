// Package prioritylevelconfiguration is the flowcontrol.apiserver.k8s.io/v1
// prioritylevelconfigurations resource: cluster-scoped priority levels, each exempt or
// limited to a share of the server's concurrency, queuing or rejecting what exceeds it,
// with prioritylevelconfigurations/status. Mirrors
// k8s.io/kubernetes/pkg/registry/flowcontrol/prioritylevelconfiguration and the
// PriorityLevelConfiguration half of pkg/apis/flowcontrol/validation.
package prioritylevelconfiguration

import (
	"context"
	"fmt"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/apiserver/pkg/util/shufflesharding"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves flowcontrol.apiserver.k8s.io/v1 prioritylevelconfigurations
// (kubectl: prioritylevelconfigurations, prioritylevelconfiguration) with
// prioritylevelconfigurations/status, at /registry/prioritylevelconfigurations/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: flowcontrolv1.SchemeGroupVersion,
	Resource:     "prioritylevelconfigurations",
	SingularName: "prioritylevelconfiguration",
	Kind:         "PriorityLevelConfiguration",
	NewFunc:      func() runtime.Object { return &flowcontrolv1.PriorityLevelConfiguration{} },
	NewListFunc:  func() runtime.Object { return &flowcontrolv1.PriorityLevelConfigurationList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "PriorityLevelConfiguration", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Strategy is the prioritylevelconfigurations strategy: defaults filled, status kept as
// stored, the generation bumped when the spec changes. Mirrors
// priorityLevelConfigurationStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of prioritylevelconfigurations/status: only status
// changes. Mirrors priorityLevelConfigurationStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// Defaults of flowcontrol/v1 (k8s.io/kubernetes/pkg/apis/flowcontrol/v1/defaults.go).
const (
	DefaultHandSize                 int32 = 8
	DefaultQueues                   int32 = 64
	DefaultQueueLengthLimit         int32 = 50
	DefaultNominalConcurrencyShares int32 = 30
)

// NamespaceScoped is false: priority levels are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// SetDefaults fills what flowcontrol/v1 defaults: a limited level's
// nominalConcurrencyShares (30, only when unset: 0 stays 0) and lendablePercent (0), an
// exempt level's nominalConcurrencyShares and lendablePercent (0), and queuing's
// handSize (8), queues (64) and queueLengthLimit (50). Mirrors
// SetDefaults_PriorityLevelConfiguration and its companions.
func SetDefaults(pl *flowcontrolv1.PriorityLevelConfiguration) {
	if l := pl.Spec.Limited; l != nil {
		if l.NominalConcurrencyShares == nil {
			l.NominalConcurrencyShares = ptr.To(DefaultNominalConcurrencyShares)
		}
		if l.LendablePercent == nil {
			l.LendablePercent = ptr.To(int32(0))
		}
		if q := l.LimitResponse.Queuing; q != nil {
			if q.HandSize == 0 {
				q.HandSize = DefaultHandSize
			}
			if q.Queues == 0 {
				q.Queues = DefaultQueues
			}
			if q.QueueLengthLimit == 0 {
				q.QueueLengthLimit = DefaultQueueLengthLimit
			}
		}
	}
	if e := pl.Spec.Exempt; e != nil {
		if e.NominalConcurrencyShares == nil {
			e.NominalConcurrencyShares = ptr.To(int32(0))
		}
		if e.LendablePercent == nil {
			e.LendablePercent = ptr.To(int32(0))
		}
	}
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	pl := obj.(*flowcontrolv1.PriorityLevelConfiguration)
	pl.Status = flowcontrolv1.PriorityLevelConfigurationStatus{}
	pl.Generation = 1
	SetDefaults(pl)
}

// PrepareForUpdate keeps the stored status, fills defaults and bumps the generation
// when the spec changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	pl.Status = oldPL.Status
	SetDefaults(pl)
	if !apiequality.Semantic.DeepEqual(pl.Spec, oldPL.Spec) {
		pl.Generation = oldPL.Generation + 1
	}
}

// Validate checks a new priority level (see ValidatePriorityLevelConfiguration).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidatePriorityLevelConfiguration(obj.(*flowcontrolv1.PriorityLevelConfiguration))
}

// ValidateUpdate checks the updated priority level as a new one, plus the metadata
// update rules. Mirrors ValidatePriorityLevelConfigurationUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&pl.ObjectMeta, &oldPL.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidatePriorityLevelConfiguration(pl)...)
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"flowcontrol.apiserver.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pl, ok := obj.(*flowcontrolv1.PriorityLevelConfiguration)
	if !ok {
		return nil, nil, fmt.Errorf("not a PriorityLevelConfiguration: %T", obj)
	}
	return labels.Set(pl.Labels), registry.ObjectMetaFieldsSet(&pl.ObjectMeta, false), nil
}

// TableColumns are NAME TYPE NOMINALCONCURRENCYSHARES QUEUES HANDSIZE
// QUEUELENGTHLIMIT AGE. Mirrors printPriorityLevelConfiguration's columns.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Type", Type: "string", Description: "`type` indicates whether this priority level is subject to limitation on request execution."},
		{Name: "NominalConcurrencyShares", Type: "string", Description: "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level."},
		{Name: "Queues", Type: "string", Description: "`queues` is the number of queues for this priority level."},
		{Name: "HandSize", Type: "string", Description: "`handSize` is a small positive number that configures the shuffle sharding of requests into queues."},
		{Name: "QueueLengthLimit", Type: "string", Description: "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time."},
		registry.AgeColumn,
	}
}

// TableRow prints one priority level: what it does not set is "<none>".
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	pl := obj.(*flowcontrolv1.PriorityLevelConfiguration)
	var ncs, queues, handSize, queueLengthLimit interface{} = "<none>", "<none>", "<none>", "<none>"
	if l := pl.Spec.Limited; l != nil {
		ncs = int64(ptr.Deref(l.NominalConcurrencyShares, 0))
		if q := l.LimitResponse.Queuing; q != nil {
			queues, handSize, queueLengthLimit = int64(q.Queues), int64(q.HandSize), int64(q.QueueLengthLimit)
		}
	}
	return []interface{}{pl.Name, string(pl.Spec.Type), ncs, queues, handSize, queueLengthLimit,
		registry.TranslateTimestampSince(pl.CreationTimestamp)}
}

// PrepareForUpdate keeps the stored spec and metadata, but for the managed fields the
// status write changed. Mirrors priorityLevelConfigurationStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	managedFields := pl.ManagedFields
	pl.ObjectMeta = *oldPL.ObjectMeta.DeepCopy()
	pl.ManagedFields = managedFields
	pl.Spec = oldPL.Spec
}

// ValidateUpdate checks the status. Mirrors ValidatePriorityLevelConfigurationStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pl, oldPL := obj.(*flowcontrolv1.PriorityLevelConfiguration), old.(*flowcontrolv1.PriorityLevelConfiguration)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&pl.ObjectMeta, &oldPL.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateStatus(&pl.Status, field.NewPath("status"))...)
}

// GetResetFields: the status subresource keeps the stored spec and metadata.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"flowcontrol.apiserver.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"))}
}

// maxQueues is the most queues a priority level may have (10^7).
const maxQueues int32 = 10 * 1000 * 1000

// mandatory are the priority levels whose spec is fixed, by name.
var mandatory = func() map[string]*flowcontrolv1.PriorityLevelConfiguration {
	m := map[string]*flowcontrolv1.PriorityLevelConfiguration{}
	for _, pl := range bootstrap.MandatoryPriorityLevelConfigurations {
		m[pl.Name] = pl
	}
	return m
}()

// ValidatePriorityLevelConfiguration checks a priority level: a DNS-subdomain name;
// type Exempt if and only if the name is "exempt"; an exempt level without limited, a
// limited one with limited and without exempt; non-negative shares, lendablePercent in
// [0, 100], a non-negative borrowingLimitPercent; a limit response that queues (with
// positive queues ≤ 10^7, handSize ≤ queues within shuffle sharding's entropy, a
// positive queueLengthLimit) or rejects; the spec of a mandatory level ("exempt",
// "catch-all") equal to its fixed value, but for exempt's own settings; conditions of
// distinct, non-empty types. Field paths and messages are kube's (flowcontrol/v1 rules).
// Mirrors ValidatePriorityLevelConfiguration.
func ValidatePriorityLevelConfiguration(pl *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&pl.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	allErrs = append(allErrs, validateSpec(&pl.Spec, pl.Name, specPath)...)
	if mand, ok := mandatory[pl.Name]; ok {
		got, want := pl.Spec, mand.Spec
		if pl.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt {
			// The exempt level's own settings may be changed.
			got.Exempt, want.Exempt = nil, nil
		}
		if !apiequality.Semantic.DeepEqual(got, want) {
			allErrs = append(allErrs, field.Invalid(specPath, pl.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", pl.Name)))
		}
	}
	return append(allErrs, validateStatus(&pl.Status, field.NewPath("status"))...)
}

func validateSpec(spec *flowcontrolv1.PriorityLevelConfigurationSpec, name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if (name == flowcontrolv1.PriorityLevelConfigurationNameExempt) != (spec.Type == flowcontrolv1.PriorityLevelEnablementExempt) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("type"), spec.Type, "type must be 'Exempt' if and only if name is 'exempt'"))
	}
	switch spec.Type {
	case flowcontrolv1.PriorityLevelEnablementExempt:
		if spec.Limited != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("limited"), "must be nil if the type is not Limited"))
		}
		if e := spec.Exempt; e != nil {
			p := fldPath.Child("exempt")
			allErrs = append(allErrs, validateShares(e.NominalConcurrencyShares, p.Child("nominalConcurrencyShares"))...)
			allErrs = append(allErrs, validateLendablePercent(e.LendablePercent, p.Child("lendablePercent"))...)
		}
	case flowcontrolv1.PriorityLevelEnablementLimited:
		if spec.Exempt != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("exempt"), "must be nil if the type is Limited"))
		}
		l := spec.Limited
		if l == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("limited"), "must not be empty when type is Limited"))
			break
		}
		p := fldPath.Child("limited")
		allErrs = append(allErrs, validateShares(l.NominalConcurrencyShares, p.Child("nominalConcurrencyShares"))...)
		allErrs = append(allErrs, validateLimitResponse(&l.LimitResponse, p.Child("limitResponse"))...)
		allErrs = append(allErrs, validateLendablePercent(l.LendablePercent, p.Child("lendablePercent"))...)
		if b := l.BorrowingLimitPercent; b != nil && *b < 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("borrowingLimitPercent"), *b, "if specified, must be a non-negative integer"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), spec.Type,
			[]string{string(flowcontrolv1.PriorityLevelEnablementExempt), string(flowcontrolv1.PriorityLevelEnablementLimited)}))
	}
	return allErrs
}

func validateShares(v *int32, fldPath *field.Path) field.ErrorList {
	if v != nil && *v < 0 {
		return field.ErrorList{field.Invalid(fldPath, *v, "must be a non-negative integer")}
	}
	return nil
}

func validateLendablePercent(v *int32, fldPath *field.Path) field.ErrorList {
	if v != nil && (*v < 0 || *v > 100) {
		return field.ErrorList{field.Invalid(fldPath, *v, "must be between 0 and 100, inclusive")}
	}
	return nil
}

// validateLimitResponse mirrors ValidateLimitResponse and
// ValidatePriorityLevelQueuingConfiguration.
func validateLimitResponse(lr *flowcontrolv1.LimitResponse, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch lr.Type {
	case flowcontrolv1.LimitResponseTypeReject:
		if lr.Queuing != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("queuing"), "must be nil if limited.limitResponse.type is not Limited"))
		}
	case flowcontrolv1.LimitResponseTypeQueue:
		q := lr.Queuing
		if q == nil {
			return append(allErrs, field.Required(fldPath.Child("queuing"), "must not be empty if limited.limitResponse.type is Limited"))
		}
		p := fldPath.Child("queuing")
		if q.QueueLengthLimit <= 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("queueLengthLimit"), q.QueueLengthLimit, "must be positive"))
		}
		if q.Queues <= 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("queues"), q.Queues, "must be positive"))
		} else if q.Queues > maxQueues {
			allErrs = append(allErrs, field.Invalid(p.Child("queues"), q.Queues, fmt.Sprintf("must not be greater than %d", maxQueues)))
		}
		switch {
		case q.HandSize <= 0:
			allErrs = append(allErrs, field.Invalid(p.Child("handSize"), q.HandSize, "must be positive"))
		case q.HandSize > q.Queues:
			allErrs = append(allErrs, field.Invalid(p.Child("handSize"), q.HandSize, fmt.Sprintf("should not be greater than queues (%d)", q.Queues)))
		case shufflesharding.RequiredEntropyBits(int(q.Queues), int(q.HandSize)) > shufflesharding.MaxHashBits:
			allErrs = append(allErrs, field.Invalid(p.Child("handSize"), q.HandSize,
				fmt.Sprintf("required entropy bits of deckSize %d and handSize %d should not be greater than %d", q.Queues, q.HandSize, shufflesharding.MaxHashBits)))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), lr.Type,
			[]string{string(flowcontrolv1.LimitResponseTypeQueue), string(flowcontrolv1.LimitResponseTypeReject)}))
	}
	return allErrs
}

// validateStatus checks that conditions have distinct, non-empty types. Mirrors
// ValidatePriorityLevelConfigurationStatus.
func validateStatus(status *flowcontrolv1.PriorityLevelConfigurationStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[flowcontrolv1.PriorityLevelConfigurationConditionType]()
	for i, c := range status.Conditions {
		p := fldPath.Child("conditions").Index(i).Child("type")
		if seen.Has(c.Type) {
			allErrs = append(allErrs, field.Duplicate(p, c.Type))
		}
		seen.Insert(c.Type)
		if c.Type == "" {
			allErrs = append(allErrs, field.Required(p, "must not be empty"))
		}
	}
	return allErrs
}
