// Package controllerrevision is the apps/v1 controllerrevisions resource: immutable
// snapshots of a controller's state (a DaemonSet's or StatefulSet's pod template as a
// strategic merge patch) that the DaemonSet and StatefulSet controllers record for
// rolling updates and that kubectl rollout history and undo read. Mirrors
// k8s.io/kubernetes/pkg/registry/apps/controllerrevision and ValidateControllerRevisionCreate
// and ValidateControllerRevisionUpdate in pkg/apis/apps/validation.
package controllerrevision

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
)

// Descriptor serves apps/v1 controllerrevisions (kubectl: controllerrevisions,
// controllerrevision), namespaced, at /registry/controllerrevisions/<namespace>/<name>.
// They have no status and no subresources.
var Descriptor = registry.Descriptor{
	GroupVersion: appsv1.SchemeGroupVersion,
	Resource:     "controllerrevisions",
	SingularName: "controllerrevision",
	Kind:         "ControllerRevision",
	NewFunc:      func() runtime.Object { return &appsv1.ControllerRevision{} },
	NewListFunc:  func() runtime.Object { return &appsv1.ControllerRevisionList{} },
	Strategy:     Strategy{},
}

// Strategy is the controllerrevisions strategy: nothing is defaulted or cleared, data
// is required on create and immutable after. Mirrors kube's controllerrevision strategy.
type Strategy struct{}

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is true: a revision lives beside the controller it records.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate keeps the revision as sent: it has no status and no generation.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the revision as sent; ValidateUpdate refuses a data change.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks a new ControllerRevision (see ValidateControllerRevisionCreate).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateControllerRevisionCreate(obj.(*appsv1.ControllerRevision))
}

// ValidateUpdate checks an update (see ValidateControllerRevisionUpdate).
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return ValidateControllerRevisionUpdate(obj.(*appsv1.ControllerRevision), old.(*appsv1.ControllerRevision))
}

// ValidateControllerRevisionCreate checks a ControllerRevision's metadata (a DNS
// subdomain name), that data is set ("data: Required value: data is mandatory" when it
// is absent or null) and that revision is not negative ("revision: Invalid value: -1:
// must be greater than or equal to 0"). Mirrors ValidateControllerRevisionCreate.
func ValidateControllerRevisionCreate(revision *appsv1.ControllerRevision) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&revision.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if dataIsEmpty(revision.Data) {
		allErrs = append(allErrs, field.Required(field.NewPath("data"), "data is mandatory"))
	}
	return append(allErrs, workloadvalidation.ValidateNonnegative(revision.Revision, field.NewPath("revision"))...)
}

// ValidateControllerRevisionUpdate checks an update: a metadata update, a valid
// revision, and data unchanged ("data: Invalid value: ...: field is immutable"); labels,
// annotations, owner references and revision may change (the controllers renumber a
// revision that becomes current again). Data is compared as JSON, so a client that
// re-encodes it with other spacing or key order does not change it. Mirrors
// ValidateControllerRevisionUpdate.
func ValidateControllerRevisionUpdate(newRevision, oldRevision *appsv1.ControllerRevision) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRevision.ObjectMeta, &oldRevision.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateControllerRevisionCreate(newRevision)...)
	if !dataEqual(newRevision.Data, oldRevision.Data) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("data"), string(newRevision.Data.Raw), apivalidation.FieldImmutableErrorMsg))
	}
	return allErrs
}

// dataIsEmpty is true for data that decodes to no object: absent or JSON null, as kube's
// conversion of a RawExtension to a runtime.Object gives nil for both.
func dataIsEmpty(data runtime.RawExtension) bool {
	if data.Object != nil {
		return false
	}
	raw := bytes.TrimSpace(data.Raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// dataEqual compares two revisions' data: the same bytes, or the same JSON value.
// (Decoded from a request, data is raw JSON; Object is never set.)
func dataEqual(a, b runtime.RawExtension) bool {
	if bytes.Equal(a.Raw, b.Raw) {
		return true
	}
	var av, bv interface{}
	if json.Unmarshal(a.Raw, &av) != nil || json.Unmarshal(b.Raw, &bv) != nil {
		return false
	}
	return apiequality.Semantic.DeepEqual(av, bv)
}

// GetAttrs returns labels and metadata.name/metadata.namespace, the only selectable
// fields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	cr, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		return nil, nil, fmt.Errorf("not a ControllerRevision: %T", obj)
	}
	return labels.Set(cr.Labels), registry.ObjectMetaFieldsSet(&cr.ObjectMeta, true), nil
}

// TableColumns are NAME CONTROLLER REVISION AGE. Mirrors printControllerRevision's
// column definitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Controller", Type: "string", Description: "Controller of the object"},
		{Name: "Revision", Type: "string", Description: "Revision indicates the revision of the state represented by Data."},
		registry.AgeColumn,
	}
}

// TableRow prints one ControllerRevision: CONTROLLER is its controller as
// "<kind>.<group>/<name>" in lower case (e.g. "daemonset.apps/fluentd"), or "<none>".
// Mirrors printControllerRevision.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	cr := obj.(*appsv1.ControllerRevision)
	controller := "<none>"
	if ref := metav1.GetControllerOf(cr); ref != nil {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil {
			controller = formatResourceName(gv.WithKind(ref.Kind).GroupKind(), ref.Name)
		} else {
			controller = ref.Name
		}
	}
	return []interface{}{cr.Name, controller, cr.Revision, registry.TranslateTimestampSince(cr.CreationTimestamp)}
}

// formatResourceName mirrors the printers' formatResourceName with the kind shown.
func formatResourceName(kind schema.GroupKind, name string) string {
	if kind.Empty() {
		return name
	}
	return strings.ToLower(kind.String()) + "/" + name
}
