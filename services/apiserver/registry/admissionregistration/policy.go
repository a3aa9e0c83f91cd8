package admissionregistration

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	pathvalidation "k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/util/jsonpath"
	"k8s.io/utils/ptr"
)

// This file holds what the ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
// resources share with kube: their defaults (pkg/apis/admissionregistration/v1
// defaults.go) and their validation (pkg/apis/admissionregistration/validation), with
// kube's field paths and messages. Expressions are compiled in kube's admission CEL
// environment (k8s.io/apiserver's plugin/cel compilers), as kube validates them.

// SetDefaultsValidatingAdmissionPolicy fills a policy's unset fields: failurePolicy
// Fail and, in matchConstraints, matchPolicy Equivalent, namespaceSelector and
// objectSelector {} and each rule's scope "*". Mirrors
// SetDefaults_ValidatingAdmissionPolicySpec, SetDefaults_MatchResources and
// SetDefaults_Rule.
func SetDefaultsValidatingAdmissionPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	setMatchResourcesDefaults(p.Spec.MatchConstraints)
}

// SetDefaultsValidatingAdmissionPolicyBinding fills the defaults of a binding's
// matchResources, when it has some (as SetDefaultsValidatingAdmissionPolicy's
// matchConstraints).
func SetDefaultsValidatingAdmissionPolicyBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	setMatchResourcesDefaults(b.Spec.MatchResources)
}

func setMatchResourcesDefaults(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
			}
		}
	}
}

// Limits of a policy's audit annotations.
const (
	maxAuditAnnotations = 20
	// maxAuditAnnotationValueExpressionLength is 5 KiB, below the 10 KiB an annotation
	// value may have, since a concatenating expression makes a longer value.
	maxAuditAnnotationValueExpressionLength = 5 * 1024
)

var (
	supportedValidationPolicyReasons = sets.New(string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid),
		string(metav1.StatusReasonRequestEntityTooLarge))
	supportedValidationActions = sets.New(string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn),
		string(admissionregistrationv1.Audit))
	newlines       = regexp.MustCompile(`[\n\r]+`) // the newlines of CEL's grammar
	celIdentifier  = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)
	celReservedIDs = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
		"if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
)

// policyExpressions are the expressions a stored policy holds, by where they stand: an
// update compiles those it keeps in the environment of stored expressions (which may
// know more than a new expression may use). Mirrors preexistingExpressions.
type policyExpressions struct {
	matchConditions, validations, messageExpressions, auditAnnotations sets.Set[string]
}

func newPolicyExpressions() policyExpressions {
	return policyExpressions{sets.New[string](), sets.New[string](), sets.New[string](), sets.New[string]()}
}

func storedPolicyExpressions(p *admissionregistrationv1.ValidatingAdmissionPolicy) policyExpressions {
	e := newPolicyExpressions()
	for _, mc := range p.Spec.MatchConditions {
		e.matchConditions.Insert(mc.Expression)
	}
	for _, v := range p.Spec.Validations {
		e.validations.Insert(v.Expression)
		if v.MessageExpression != "" {
			e.messageExpressions.Insert(v.MessageExpression)
		}
	}
	for _, a := range p.Spec.AuditAnnotations {
		e.auditAnnotations.Insert(a.ValueExpression)
	}
	return e
}

// envType is the environment an expression compiles in: that of stored expressions when
// the stored object already holds it, that of new ones otherwise.
func envType(stored sets.Set[string], expr string) environment.Type {
	if stored.Has(expr) {
		return environment.StoredExpressions
	}
	return environment.NewExpressions
}

// statelessCompiler compiles expressions without variables; building it is costly, so
// it is built once, on first use.
var statelessCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// ValidateValidatingAdmissionPolicy checks a new policy. Mirrors
// ValidateValidatingAdmissionPolicy.
func ValidateValidatingAdmissionPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	return validatePolicy(p, false, newPolicyExpressions())
}

// ValidateValidatingAdmissionPolicyUpdate checks p replacing old: the metadata update,
// then p as new, its matchConditions left unchecked when they and the paramKind are
// unchanged, and the expressions old holds compiled as stored ones. Mirrors
// ValidateValidatingAdmissionPolicyUpdate (with the metadata check the generic
// registry adds).
func ValidateValidatingAdmissionPolicyUpdate(p, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	ignoreMatchConditions := apiequality.Semantic.DeepEqual(p.Spec.ParamKind, old.Spec.ParamKind) &&
		apiequality.Semantic.DeepEqual(p.Spec.MatchConditions, old.Spec.MatchConditions)
	return append(allErrs, validatePolicy(p, ignoreMatchConditions, storedPolicyExpressions(old))...)
}

// ValidateValidatingAdmissionPolicyStatusUpdate checks the status a status update
// writes: each typeChecking warning with a warning and a fieldRef that is a JSONPath,
// and valid conditions. Mirrors ValidateValidatingAdmissionPolicyStatusUpdate.
func ValidateValidatingAdmissionPolicyStatusUpdate(p, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	fldPath := field.NewPath("status")
	if tc := p.Status.TypeChecking; tc != nil {
		for i, w := range tc.ExpressionWarnings {
			wPath := fldPath.Child("typeChecking", "expressionWarnings").Index(i)
			if w.Warning == "" {
				allErrs = append(allErrs, field.Required(wPath.Child("warning"), ""))
			}
			allErrs = append(allErrs, validateFieldRef(w.FieldRef, wPath.Child("fieldRef"))...)
		}
	}
	return append(allErrs, metav1validation.ValidateConditions(p.Status.Conditions, fldPath.Child("conditions"))...)
}

func validateFieldRef(fieldRef string, fldPath *field.Path) field.ErrorList {
	fieldRef = strings.TrimSpace(fieldRef)
	if fieldRef == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	if err := jsonpath.New("spec").Parse(fmt.Sprintf("{%s}", fieldRef)); err != nil {
		return field.ErrorList{field.Invalid(fldPath, fieldRef, fmt.Sprintf("invalid JSONPath: %v", err))}
	}
	return nil
}

// validatePolicy checks the metadata (a DNS subdomain name) and the spec:
// failurePolicy Fail or Ignore; paramKind an apiVersion and a kind; matchConstraints
// required, with resourceRules; matchConditions (unless ignoreMatchConditions);
// variables named by CEL identifiers; validations or auditAnnotations, at least one;
// each expression compiling in kube's environment (object, oldObject, request,
// namespaceObject, authorizer, params with a paramKind, variables) to the type its
// field takes.
func validatePolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy, ignoreMatchConditions bool, stored policyExpressions) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, fldPath := &p.Spec, field.NewPath("spec")
	// The composition compiler holds the variables compiled so far: one per policy, made
	// when first needed.
	var compiler plugincel.Compiler
	getCompiler := func() plugincel.Compiler {
		if compiler == nil {
			compiler = statelessCompiler()
			if len(spec.Variables) > 0 {
				c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
				if err == nil {
					compiler = c
				}
			}
		}
		return compiler
	}
	switch {
	case spec.FailurePolicy == nil:
		allErrs = append(allErrs, field.Required(fldPath.Child("failurePolicy"), ""))
	case !supportedFailurePolicies.Has(string(*spec.FailurePolicy)):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("failurePolicy"), *spec.FailurePolicy, sets.List(supportedFailurePolicies)))
	}
	hasParams := spec.ParamKind != nil
	if hasParams {
		allErrs = append(allErrs, validateParamKind(*spec.ParamKind, fldPath.Child("paramKind"))...)
	}
	if spec.MatchConstraints == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("matchConstraints"), ""))
	} else {
		allErrs = append(allErrs, validateMatchResources(spec.MatchConstraints, fldPath.Child("matchConstraints"))...)
		// At least one resourceRule, to give the type checker types.
		if len(spec.MatchConstraints.ResourceRules) == 0 {
			allErrs = append(allErrs, field.Required(fldPath.Child("matchConstraints", "resourceRules"), ""))
		}
	}
	if !ignoreMatchConditions {
		opts := validationOptions{storedExpressions: stored.matchConditions, allowParamsInMatchConditions: hasParams}
		allErrs = append(allErrs, validateMatchConditions(spec.MatchConditions, opts, fldPath.Child("matchConditions"))...)
	}
	for i, v := range spec.Variables {
		allErrs = append(allErrs, validateVariable(getCompiler(), &v, hasParams, stored, fldPath.Child("variables").Index(i))...)
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("validations"), "validations or auditAnnotations must contain at least one item"),
			field.Required(fldPath.Child("auditAnnotations"), "validations or auditAnnotations must contain at least one item"))
		return allErrs
	}
	for i, v := range spec.Validations {
		allErrs = append(allErrs, validateValidation(getCompiler(), &v, hasParams, stored, fldPath.Child("validations").Index(i))...)
	}
	if spec.AuditAnnotations != nil {
		if len(spec.AuditAnnotations) > maxAuditAnnotations {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("auditAnnotations"), spec.AuditAnnotations,
				fmt.Sprintf("must not have more than %d auditAnnotations", maxAuditAnnotations)))
		}
		keys := sets.New[string]()
		for i, a := range spec.AuditAnnotations {
			aPath := fldPath.Child("auditAnnotations").Index(i)
			allErrs = append(allErrs, validateAuditAnnotation(getCompiler(), p.Name, &a, hasParams, stored, aPath)...)
			if keys.Has(a.Key) {
				allErrs = append(allErrs, field.Duplicate(aPath.Child("key"), a.Key))
			}
			keys.Insert(a.Key)
		}
	}
	return allErrs
}

// validateParamKind checks an apiVersion (a group that is a DNS subdomain, a version
// that is a DNS label) and a kind (a DNS label but for its case). Mirrors
// validateParamKind.
func validateParamKind(gvk admissionregistrationv1.ParamKind, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if gvk.APIVersion == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("apiVersion"), ""))
	} else if group, version, err := parseGroupVersion(gvk.APIVersion); err != nil {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("apiVersion"), gvk.APIVersion, err.Error()))
	} else {
		if group != "" {
			if errs := utilvalidation.IsDNS1123Subdomain(group); len(errs) > 0 {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("apiVersion"), group, strings.Join(errs, ",")))
			}
		}
		if version == "" {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("apiVersion"), gvk.APIVersion, "version must be specified"))
		} else if errs := utilvalidation.IsDNS1035Label(version); len(errs) > 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("apiVersion"), version, strings.Join(errs, ",")))
		}
	}
	if gvk.Kind == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), ""))
	} else if errs := utilvalidation.IsDNS1035Label(strings.ToLower(gvk.Kind)); len(errs) > 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("kind"), gvk.Kind, "may have mixed case, but should otherwise match: "+strings.Join(errs, ",")))
	}
	return allErrs
}

// parseGroupVersion splits "group/version" ("version" alone is the core group).
func parseGroupVersion(gv string) (group, version string, err error) {
	if gv == "" || gv == "/" {
		return "", "", nil
	}
	switch strings.Count(gv, "/") {
	case 0:
		return "", gv, nil
	case 1:
		group, version, _ = strings.Cut(gv, "/")
		return group, version, nil
	}
	return "", "", fmt.Errorf("unexpected GroupVersion string: %v", gv)
}

// validateMatchResources checks matchPolicy (required, Exact or Equivalent), the
// selectors (required, strictly valid) and each resource rule and exclude rule. Mirrors
// validateMatchResources.
func validateMatchResources(m *admissionregistrationv1.MatchResources, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if m == nil {
		return nil
	}
	switch {
	case m.MatchPolicy == nil:
		allErrs = append(allErrs, field.Required(fldPath.Child("matchPolicy"), ""))
	case !supportedMatchPolicies.Has(string(*m.MatchPolicy)):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("matchPolicy"), *m.MatchPolicy, sets.List(supportedMatchPolicies)))
	}
	for _, sel := range []struct {
		name     string
		selector *metav1.LabelSelector
	}{{"namespaceSelector", m.NamespaceSelector}, {"objectSelector", m.ObjectSelector}} {
		if sel.selector == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child(sel.name), ""))
		} else {
			allErrs = append(allErrs, metav1validation.ValidateLabelSelector(sel.selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child(sel.name))...)
		}
	}
	for i := range m.ResourceRules {
		allErrs = append(allErrs, validateNamedRule(&m.ResourceRules[i], fldPath.Child("resourceRules").Index(i))...)
	}
	for i := range m.ExcludeResourceRules {
		allErrs = append(allErrs, validateNamedRule(&m.ExcludeResourceRules[i], fldPath.Child("excludeResourceRules").Index(i))...)
	}
	return allErrs
}

// validateNamedRule checks resourceNames (path segments, none twice) and the rule.
// Mirrors validateNamedRuleWithOperations.
func validateNamedRule(r *admissionregistrationv1.NamedRuleWithOperations, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, name := range r.ResourceNames {
		for _, msg := range pathvalidation.ValidatePathSegmentName(name, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("resourceNames").Index(i), name, msg))
		}
		if names.Has(name) {
			allErrs = append(allErrs, field.Duplicate(fldPath.Child("resourceNames").Index(i), name))
		}
		names.Insert(name)
	}
	return append(allErrs, validateRuleWithOperations(&r.RuleWithOperations, fldPath)...)
}

// validateVariable checks a variable's name (a CEL identifier) and compiles its
// expression, storing it for the expressions after it. Mirrors validateVariable.
func validateVariable(compiler plugincel.Compiler, v *admissionregistrationv1.Variable, hasParams bool, stored policyExpressions, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if strings.TrimSpace(v.Name) == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), "name is not specified"))
	} else if !celIdentifier.MatchString(v.Name) || celReservedIDs.Has(v.Name) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), v.Name, "name is not a valid CEL identifier"))
	}
	if strings.TrimSpace(v.Expression) == "" {
		return append(allErrs, field.Required(fldPath.Child("expression"), "expression is not specified"))
	}
	composited, ok := compiler.(*plugincel.CompositedCompiler)
	if !ok {
		return append(allErrs, field.InternalError(fldPath, fmt.Errorf("variable composition is not allowed")))
	}
	result := composited.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression},
		plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, envType(stored.validations, v.Expression))
	if result.Error != nil {
		allErrs = append(allErrs, celError(fldPath.Child("expression"), v.Expression, result.Error))
	}
	return allErrs
}

// validateValidation compiles the expression (to a bool) and the messageExpression (to
// a string; no authorizer), and checks message (not blank, one line) and reason
// (Forbidden, Invalid or RequestEntityTooLarge). Mirrors validateValidation.
func validateValidation(compiler plugincel.Compiler, v *admissionregistrationv1.Validation, hasParams bool, stored policyExpressions, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	trimmedMsg := strings.TrimSpace(v.Message)
	if strings.TrimSpace(v.Expression) == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("expression"), "expression is not specified"))
	} else {
		result := compiler.CompileCELExpression(&validating.ValidationCondition{Expression: v.Expression},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, envType(stored.validations, v.Expression))
		if result.Error != nil {
			allErrs = append(allErrs, celError(fldPath.Child("expression"), v.Expression, result.Error))
		}
	}
	if v.MessageExpression != "" && strings.TrimSpace(v.MessageExpression) == "" {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
	} else if v.MessageExpression != "" {
		// kube declares params to message expressions of a policy with a paramKind
		// (its allowParamsInMatchConditions), and never the authorizer.
		result := compiler.CompileCELExpression(&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams}, envType(stored.messageExpressions, v.MessageExpression))
		if result.Error != nil {
			allErrs = append(allErrs, celError(fldPath.Child("messageExpression"), v.MessageExpression, result.Error))
		}
	}
	switch {
	case v.Message != "" && trimmedMsg == "":
		allErrs = append(allErrs, field.Invalid(fldPath.Child("message"), v.Message, "message must be non-empty if specified"))
	case newlines.MatchString(trimmedMsg):
		allErrs = append(allErrs, field.Invalid(fldPath.Child("message"), v.Message, "message must not contain line breaks"))
	}
	if v.Reason != nil && !supportedValidationPolicyReasons.Has(string(*v.Reason)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("reason"), *v.Reason, sets.List(supportedValidationPolicyReasons)))
	}
	return allErrs
}

// validateAuditAnnotation checks the key (with the policy's name, "<policy>/<key>" must
// be a qualified name) and compiles valueExpression (at most 5 KiB, to a string or
// null). Mirrors validateAuditAnnotation.
func validateAuditAnnotation(compiler plugincel.Compiler, policyName string, a *admissionregistrationv1.AuditAnnotation, hasParams bool, stored policyExpressions, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if policyName != "" {
		for _, msg := range utilvalidation.IsQualifiedName(policyName + "/" + a.Key) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("key"), policyName+"/"+a.Key, msg))
		}
	} else {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("key"), a.Key, "requires metadata.name be non-empty"))
	}
	trimmed := strings.TrimSpace(a.ValueExpression)
	switch {
	case trimmed == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("valueExpression"), "valueExpression is not specified"))
	case len(trimmed) > maxAuditAnnotationValueExpressionLength:
		allErrs = append(allErrs, field.Required(fldPath.Child("valueExpression"), fmt.Sprintf("must not exceed %d bytes in length", maxAuditAnnotationValueExpressionLength)))
	default:
		result := compiler.CompileCELExpression(&validating.AuditAnnotationCondition{ValueExpression: trimmed},
			plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, envType(stored.auditAnnotations, a.ValueExpression))
		if result.Error != nil {
			allErrs = append(allErrs, celError(fldPath.Child("valueExpression"), a.ValueExpression, result.Error))
		}
	}
	return allErrs
}

// ValidateValidatingAdmissionPolicyBinding checks a binding: the metadata (a DNS
// subdomain name), policyName (required, a DNS subdomain), paramRef, matchResources and
// validationActions. Mirrors ValidateValidatingAdmissionPolicyBinding.
func ValidateValidatingAdmissionPolicyBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, fldPath := &b.Spec, field.NewPath("spec")
	if spec.PolicyName == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("policyName"), ""))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(spec.PolicyName, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("policyName"), spec.PolicyName, msg))
		}
	}
	allErrs = append(allErrs, validateParamRef(spec.ParamRef, fldPath.Child("paramRef"))...)
	allErrs = append(allErrs, validateMatchResources(spec.MatchResources, fldPath.Child("matchResources"))...)
	return append(allErrs, validateValidationActions(spec.ValidationActions, fldPath.Child("validationActions"))...)
}

// ValidateValidatingAdmissionPolicyBindingUpdate checks b replacing old: the metadata
// update, then b as new. Mirrors ValidateValidatingAdmissionPolicyBindingUpdate.
func ValidateValidatingAdmissionPolicyBindingUpdate(b, old *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateValidatingAdmissionPolicyBinding(b)...)
}

// validateParamRef checks exactly one of name (a path segment) and selector (valid),
// and parameterNotFoundAction (required, Deny or Allow). Mirrors validateParamRef.
func validateParamRef(pr *admissionregistrationv1.ParamRef, fldPath *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var allErrs field.ErrorList
	if pr.Name != "" {
		for _, msg := range pathvalidation.ValidatePathSegmentName(pr.Name, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), pr.Name, msg))
		}
		if pr.Selector != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("name"), `name and selector are mutually exclusive`))
		}
	}
	if pr.Selector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(pr.Selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("selector"))...)
		if pr.Name != "" {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("selector"), `name and selector are mutually exclusive`))
		}
	}
	if pr.Name == "" && pr.Selector == nil {
		allErrs = append(allErrs, field.Required(fldPath, `one of name or selector must be specified`))
	}
	switch {
	case pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("parameterNotFoundAction"), ""))
	case *pr.ParameterNotFoundAction != admissionregistrationv1.DenyAction && *pr.ParameterNotFoundAction != admissionregistrationv1.AllowAction:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("parameterNotFoundAction"), pr.ParameterNotFoundAction,
			[]string{string(admissionregistrationv1.DenyAction), string(admissionregistrationv1.AllowAction)}))
	}
	return allErrs
}

// validateValidationActions checks the actions: each Deny, Warn or Audit, none twice,
// not both Deny and Warn, at least one. Mirrors validateValidationActions.
func validateValidationActions(actions []admissionregistrationv1.ValidationAction, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for i, a := range actions {
		if !supportedValidationActions.Has(string(a)) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Index(i), a, sets.List(supportedValidationActions)))
		}
		if seen.Has(string(a)) {
			allErrs = append(allErrs, field.Duplicate(fldPath.Index(i), a))
		}
		seen.Insert(string(a))
	}
	if seen.Has(string(admissionregistrationv1.Deny)) && seen.Has(string(admissionregistrationv1.Warn)) {
		allErrs = append(allErrs, field.Invalid(fldPath, actions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if seen.Len() == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "at least one validation action is required"))
	}
	return allErrs
}
