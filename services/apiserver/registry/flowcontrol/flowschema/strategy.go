// Package flowschema is the flowcontrol.apiserver.k8s.io/v1 flowschemas resource:
// cluster-scoped FlowSchemas, each classifying requests (by subject, verb, resource or
// non-resource URL) into a priority level, with flowschemas/status. Mirrors
// k8s.io/kubernetes/pkg/registry/flowcontrol/flowschema and the FlowSchema half of
// pkg/apis/flowcontrol/validation.
package flowschema

import (
	"context"
	"fmt"
	"strings"

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
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves flowcontrol.apiserver.k8s.io/v1 flowschemas (kubectl: flowschemas,
// flowschema) with flowschemas/status, at /registry/flowschemas/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: flowcontrolv1.SchemeGroupVersion,
	Resource:     "flowschemas",
	SingularName: "flowschema",
	Kind:         "FlowSchema",
	NewFunc:      func() runtime.Object { return &flowcontrolv1.FlowSchema{} },
	NewListFunc:  func() runtime.Object { return &flowcontrolv1.FlowSchemaList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "FlowSchema", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Strategy is the flowschemas strategy: defaults filled, status kept as stored, the
// generation bumped when the spec changes. Mirrors flowSchemaStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of flowschemas/status: only status changes. Mirrors
// flowSchemaStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is false: FlowSchemas are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// DefaultMatchingPrecedence is the matchingPrecedence of a FlowSchema that sets none.
const DefaultMatchingPrecedence int32 = 1000

// SetDefaults fills matchingPrecedence (1000) when unset. Mirrors
// SetDefaults_FlowSchemaSpec (flowcontrol/v1).
func SetDefaults(fs *flowcontrolv1.FlowSchema) {
	if fs.Spec.MatchingPrecedence == 0 {
		fs.Spec.MatchingPrecedence = DefaultMatchingPrecedence
	}
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	fs := obj.(*flowcontrolv1.FlowSchema)
	fs.Status = flowcontrolv1.FlowSchemaStatus{}
	fs.Generation = 1
	SetDefaults(fs)
}

// PrepareForUpdate keeps the stored status, fills defaults and bumps the generation
// when the spec changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	fs.Status = oldFS.Status
	SetDefaults(fs)
	if !apiequality.Semantic.DeepEqual(fs.Spec, oldFS.Spec) {
		fs.Generation = oldFS.Generation + 1
	}
}

// Validate checks a new FlowSchema (see ValidateFlowSchema).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateFlowSchema(obj.(*flowcontrolv1.FlowSchema))
}

// ValidateUpdate checks the updated FlowSchema as a new one, plus the metadata update
// rules. Mirrors ValidateFlowSchemaUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&fs.ObjectMeta, &oldFS.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateFlowSchema(fs)...)
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"flowcontrol.apiserver.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	fs, ok := obj.(*flowcontrolv1.FlowSchema)
	if !ok {
		return nil, nil, fmt.Errorf("not a FlowSchema: %T", obj)
	}
	return labels.Set(fs.Labels), registry.ObjectMetaFieldsSet(&fs.ObjectMeta, false), nil
}

// TableColumns are NAME PRIORITYLEVEL MATCHINGPRECEDENCE DISTINGUISHERMETHOD AGE
// MISSINGPL. Mirrors printFlowSchema's columns.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "PriorityLevel", Type: "string", Description: "`name` is the name of the priority level configuration being referenced Required."},
		{Name: "MatchingPrecedence", Type: "string", Description: "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request."},
		{Name: "DistinguisherMethod", Type: "string", Description: "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema."},
		registry.AgeColumn,
		{Name: "MissingPL", Type: "string", Description: "references a broken or non-existent PriorityLevelConfiguration"},
	}
}

// TableRow prints one FlowSchema: DISTINGUISHERMETHOD is "*" without one, MISSINGPL
// the Dangling condition's status ("?" without it).
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	fs := obj.(*flowcontrolv1.FlowSchema)
	method := "*"
	if fs.Spec.DistinguisherMethod != nil {
		method = string(fs.Spec.DistinguisherMethod.Type)
	}
	missing := "?"
	for _, c := range fs.Status.Conditions {
		if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
			missing = string(c.Status)
		}
	}
	return []interface{}{fs.Name, fs.Spec.PriorityLevelConfiguration.Name, int64(fs.Spec.MatchingPrecedence),
		method, registry.TranslateTimestampSince(fs.CreationTimestamp), missing}
}

// PrepareForUpdate keeps the stored spec and metadata, but for the managed fields the
// status write changed. Mirrors flowSchemaStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	managedFields := fs.ManagedFields
	fs.ObjectMeta = *oldFS.ObjectMeta.DeepCopy()
	fs.ManagedFields = managedFields
	fs.Spec = oldFS.Spec
}

// ValidateUpdate checks the status. Mirrors ValidateFlowSchemaStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	fs, oldFS := obj.(*flowcontrolv1.FlowSchema), old.(*flowcontrolv1.FlowSchema)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&fs.ObjectMeta, &oldFS.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateStatus(&fs.Status, field.NewPath("status"))...)
}

// GetResetFields: the status subresource keeps the stored spec and metadata.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"flowcontrol.apiserver.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"))}
}

// supportedVerbs are the verbs a rule may name besides "*".
var supportedVerbs = sets.New("get", "list", "create", "update", "delete", "deletecollection", "patch", "watch", "proxy")

// mandatory are the FlowSchemas whose spec is fixed, by name.
var mandatory = func() map[string]*flowcontrolv1.FlowSchema {
	m := map[string]*flowcontrolv1.FlowSchema{}
	for _, fs := range bootstrap.MandatoryFlowSchemas {
		m[fs.Name] = fs
	}
	return m
}()

// ValidateFlowSchema checks a FlowSchema: a DNS-subdomain name; matchingPrecedence in
// [1, 10000], 1 only for "exempt"; a supported distinguisher method; a priority level
// named; each rule with subjects and at least one resource or non-resource rule; the
// spec of a mandatory FlowSchema ("exempt", "catch-all") equal to its fixed value;
// conditions of distinct, non-empty types. Field paths and messages are kube's.
// Mirrors ValidateFlowSchema.
func ValidateFlowSchema(fs *flowcontrolv1.FlowSchema) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&fs.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	allErrs = append(allErrs, validateSpec(fs.Name, &fs.Spec, specPath)...)
	if mand, ok := mandatory[fs.Name]; ok && !apiequality.Semantic.DeepEqual(fs.Spec, mand.Spec) {
		allErrs = append(allErrs, field.Invalid(specPath, fs.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", fs.Name)))
	}
	return append(allErrs, validateStatus(&fs.Status, field.NewPath("status"))...)
}

func validateSpec(name string, spec *flowcontrolv1.FlowSchemaSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	mp := fldPath.Child("matchingPrecedence")
	if spec.MatchingPrecedence <= 0 {
		allErrs = append(allErrs, field.Invalid(mp, spec.MatchingPrecedence, "must be a positive value"))
	}
	if spec.MatchingPrecedence > flowcontrolv1.FlowSchemaMaxMatchingPrecedence {
		allErrs = append(allErrs, field.Invalid(mp, spec.MatchingPrecedence, fmt.Sprintf("must not be greater than %v", flowcontrolv1.FlowSchemaMaxMatchingPrecedence)))
	}
	if spec.MatchingPrecedence == 1 && name != flowcontrolv1.FlowSchemaNameExempt {
		allErrs = append(allErrs, field.Invalid(mp, spec.MatchingPrecedence, "only the schema named 'exempt' may have matchingPrecedence 1"))
	}
	if dm := spec.DistinguisherMethod; dm != nil && dm.Type != flowcontrolv1.FlowDistinguisherMethodByNamespaceType && dm.Type != flowcontrolv1.FlowDistinguisherMethodByUserType {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("distinguisherMethod", "type"), dm,
			[]string{string(flowcontrolv1.FlowDistinguisherMethodByNamespaceType), string(flowcontrolv1.FlowDistinguisherMethodByUserType)}))
	}
	plPath := fldPath.Child("priorityLevelConfiguration", "name")
	if pl := spec.PriorityLevelConfiguration.Name; pl == "" {
		allErrs = append(allErrs, field.Required(plPath, "must reference a priority level"))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(pl, false) {
			allErrs = append(allErrs, field.Invalid(plPath, pl, msg))
		}
	}
	for i := range spec.Rules {
		allErrs = append(allErrs, validateRule(&spec.Rules[i], fldPath.Child("rules").Index(i))...)
	}
	return allErrs
}

// validateRule mirrors ValidateFlowSchemaPolicyRulesWithSubjects.
func validateRule(rule *flowcontrolv1.PolicyRulesWithSubjects, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(rule.Subjects) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("subjects"), "subjects must contain at least one value"))
	}
	for i := range rule.Subjects {
		allErrs = append(allErrs, validateSubject(&rule.Subjects[i], fldPath.Child("subjects").Index(i))...)
	}
	if len(rule.ResourceRules) == 0 && len(rule.NonResourceRules) == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "at least one of resourceRules and nonResourceRules has to be non-empty"))
	}
	for i := range rule.ResourceRules {
		allErrs = append(allErrs, validateResourceRule(&rule.ResourceRules[i], fldPath.Child("resourceRules").Index(i))...)
	}
	for i := range rule.NonResourceRules {
		allErrs = append(allErrs, validateNonResourceRule(&rule.NonResourceRules[i], fldPath.Child("nonResourceRules").Index(i))...)
	}
	return allErrs
}

// validateSubject mirrors ValidateFlowSchemaSubject: the member its kind names is set
// and valid, the others are not.
func validateSubject(s *flowcontrolv1.Subject, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	forbidOthers := func(kind flowcontrolv1.SubjectKind) {
		if kind != flowcontrolv1.SubjectKindServiceAccount && s.ServiceAccount != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("serviceAccount"), "serviceAccount is forbidden when subject kind is not 'ServiceAccount'"))
		}
		if kind != flowcontrolv1.SubjectKindUser && s.User != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("user"), "user is forbidden when subject kind is not 'User'"))
		}
		if kind != flowcontrolv1.SubjectKindGroup && s.Group != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("group"), "group is forbidden when subject kind is not 'Group'"))
		}
	}
	switch s.Kind {
	case flowcontrolv1.SubjectKindServiceAccount:
		p := fldPath.Child("serviceAccount")
		if s.ServiceAccount == nil {
			allErrs = append(allErrs, field.Required(p, "serviceAccount is required when subject kind is 'ServiceAccount'"))
			break
		}
		if s.ServiceAccount.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), ""))
		} else if s.ServiceAccount.Name != flowcontrolv1.NameAll {
			for _, msg := range apivalidation.ValidateServiceAccountName(s.ServiceAccount.Name, false) {
				allErrs = append(allErrs, field.Invalid(p.Child("name"), s.ServiceAccount.Name, msg))
			}
		}
		if s.ServiceAccount.Namespace == "" {
			allErrs = append(allErrs, field.Required(p.Child("namespace"), "must specify namespace for service account"))
		} else {
			for _, msg := range apivalidation.ValidateNamespaceName(s.ServiceAccount.Namespace, false) {
				allErrs = append(allErrs, field.Invalid(p.Child("namespace"), s.ServiceAccount.Namespace, msg))
			}
		}
	case flowcontrolv1.SubjectKindUser:
		if s.User == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("user"), "user is required when subject kind is 'User'"))
		} else if s.User.Name == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("user", "name"), ""))
		}
	case flowcontrolv1.SubjectKindGroup:
		if s.Group == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("group"), "group is required when subject kind is 'Group'"))
		} else if s.Group.Name == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("group", "name"), ""))
		}
	default:
		return append(allErrs, field.NotSupported(fldPath.Child("kind"), s.Kind, []string{
			string(flowcontrolv1.SubjectKindGroup), string(flowcontrolv1.SubjectKindServiceAccount), string(flowcontrolv1.SubjectKindUser)}))
	}
	forbidOthers(s.Kind)
	return allErrs
}

// validateVerbs checks a rule's verbs: at least one, "*" alone, else supported ones.
func validateVerbs(verbs []string, fldPath *field.Path) field.ErrorList {
	switch {
	case len(verbs) == 0:
		return field.ErrorList{field.Required(fldPath, "verbs must contain at least one value")}
	case hasWildcard(verbs):
		if len(verbs) > 1 {
			return field.ErrorList{field.Invalid(fldPath, verbs, "if '*' is present, must not specify other verbs")}
		}
	case !supportedVerbs.HasAll(verbs...):
		return field.ErrorList{field.NotSupported(fldPath, verbs, sets.List(supportedVerbs))}
	}
	return nil
}

// nsErrIntro opens the message of an invalid namespace in a resource rule.
const nsErrIntro = "each member of this list must be '*' or a DNS-1123 label; "

// validateResourceRule mirrors ValidateFlowSchemaResourcePolicyRule.
func validateResourceRule(rule *flowcontrolv1.ResourcePolicyRule, fldPath *field.Path) field.ErrorList {
	allErrs := validateVerbs(rule.Verbs, fldPath.Child("verbs"))
	if len(rule.APIGroups) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("apiGroups"), "resource rules must supply at least one api group"))
	} else if len(rule.APIGroups) > 1 && hasWildcard(rule.APIGroups) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("apiGroups"), rule.APIGroups, "if '*' is present, must not specify other api groups"))
	}
	if len(rule.Resources) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("resources"), "resource rules must supply at least one resource"))
	} else if len(rule.Resources) > 1 && hasWildcard(rule.Resources) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("resources"), rule.Resources, "if '*' is present, must not specify other resources"))
	}
	switch {
	case len(rule.Namespaces) == 0 && !rule.ClusterScope:
		allErrs = append(allErrs, field.Required(fldPath.Child("namespaces"), "resource rules that are not cluster scoped must supply at least one namespace"))
	case hasWildcard(rule.Namespaces):
		if len(rule.Namespaces) > 1 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("namespaces"), rule.Namespaces, "if '*' is present, must not specify other namespaces"))
		}
	default:
		for i, ns := range rule.Namespaces {
			for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("namespaces").Index(i), ns, nsErrIntro+msg))
			}
		}
	}
	return allErrs
}

// validateNonResourceRule mirrors ValidateFlowSchemaNonResourcePolicyRule.
func validateNonResourceRule(rule *flowcontrolv1.NonResourcePolicyRule, fldPath *field.Path) field.ErrorList {
	allErrs := validateVerbs(rule.Verbs, fldPath.Child("verbs"))
	urls := fldPath.Child("nonResourceURLs")
	switch {
	case len(rule.NonResourceURLs) == 0:
		allErrs = append(allErrs, field.Required(urls, "nonResourceURLs must contain at least one value"))
	case hasWildcard(rule.NonResourceURLs):
		if len(rule.NonResourceURLs) > 1 {
			allErrs = append(allErrs, field.Invalid(urls, rule.NonResourceURLs, "if '*' is present, must not specify other non-resource URLs"))
		}
	default:
		for i, u := range rule.NonResourceURLs {
			if err := ValidateNonResourceURLPath(u, urls.Index(i)); err != nil {
				allErrs = append(allErrs, err)
			}
		}
	}
	return allErrs
}

// ValidateNonResourceURLPath checks a non-resource URL of a rule: "/" or a path that
// starts with a slash, has no white space and no double slash, and a "*" only as its
// last segment ("/healthz/*"). Mirrors ValidateNonResourceURLPath.
func ValidateNonResourceURLPath(path string, fldPath *field.Path) *field.Error {
	switch {
	case path == "":
		return field.Invalid(fldPath, path, "must not be empty")
	case path == "/":
		return nil
	case !strings.HasPrefix(path, "/"):
		return field.Invalid(fldPath, path, "must start with slash")
	case strings.Contains(path, " "):
		return field.Invalid(fldPath, path, "must not contain white-space")
	case strings.Contains(path, "//"):
		return field.Invalid(fldPath, path, "must not contain double slash")
	}
	if n := strings.Count(path, "*"); n > 1 || (n == 1 && !strings.HasSuffix(path, "/*")) {
		return field.Invalid(fldPath, path, "wildcard can only do suffix matching")
	}
	return nil
}

// validateStatus checks that conditions have distinct, non-empty types. Mirrors
// ValidateFlowSchemaStatus.
func validateStatus(status *flowcontrolv1.FlowSchemaStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[flowcontrolv1.FlowSchemaConditionType]()
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

func hasWildcard(list []string) bool {
	for _, s := range list {
		if s == "*" {
			return true
		}
	}
	return false
}
