// Package validation checks rbac.authorization.k8s.io/v1 objects as kube-apiserver does.
// Mirrors k8s.io/kubernetes/pkg/apis/rbac/validation.
package validation

import (
	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateRBACName is the name rule of every RBAC object: any name that fits in one URL
// path segment, so "system:node-bootstrapper" is valid. Mirrors ValidateRBACName.
func ValidateRBACName(name string, _ bool) []string {
	return path.IsValidPathSegmentName(name)
}

// ValidateRole checks a Role: metadata and each rule (namespaced: no nonResourceURLs).
func ValidateRole(role *rbacv1.Role) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&role.ObjectMeta, true, ValidateRBACName, field.NewPath("metadata"))
	for i, rule := range role.Rules {
		allErrs = append(allErrs, ValidatePolicyRule(rule, true, field.NewPath("rules").Index(i))...)
	}
	return allErrs
}

// ValidateRoleUpdate checks an updated Role, plus the metadata update rules.
func ValidateRoleUpdate(role, old *rbacv1.Role) field.ErrorList {
	allErrs := ValidateRole(role)
	return append(allErrs, apivalidation.ValidateObjectMetaUpdate(&role.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))...)
}

// ValidateClusterRole checks a ClusterRole: metadata, each rule, and an aggregationRule's
// selectors (at least one when the rule is set).
func ValidateClusterRole(role *rbacv1.ClusterRole) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&role.ObjectMeta, false, ValidateRBACName, field.NewPath("metadata"))
	for i, rule := range role.Rules {
		allErrs = append(allErrs, ValidatePolicyRule(rule, false, field.NewPath("rules").Index(i))...)
	}
	if role.AggregationRule != nil {
		selectors := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(role.AggregationRule.ClusterRoleSelectors) == 0 {
			allErrs = append(allErrs, field.Required(selectors, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		for i := range role.AggregationRule.ClusterRoleSelectors {
			allErrs = append(allErrs, metav1validation.ValidateLabelSelector(&role.AggregationRule.ClusterRoleSelectors[i],
				metav1validation.LabelSelectorValidationOptions{}, selectors.Index(i))...)
		}
	}
	return allErrs
}

// ValidateClusterRoleUpdate checks an updated ClusterRole, plus the metadata update rules.
func ValidateClusterRoleUpdate(role, old *rbacv1.ClusterRole) field.ErrorList {
	allErrs := ValidateClusterRole(role)
	return append(allErrs, apivalidation.ValidateObjectMetaUpdate(&role.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))...)
}

// ValidatePolicyRule checks one rule: it names verbs, and either nonResourceURLs (only in
// cluster roles, and then nothing else) or API groups and resources.
func ValidatePolicyRule(rule rbacv1.PolicyRule, isNamespaced bool, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if len(rule.Verbs) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("verbs"), "verbs must contain at least one value"))
	}
	if len(rule.NonResourceURLs) > 0 {
		if isNamespaced {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
		}
		if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
		}
		return allErrs
	}
	if len(rule.APIGroups) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	if len(rule.Resources) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("resources"), "resource rules must supply at least one resource"))
	}
	return allErrs
}

// ValidateRoleBinding checks a RoleBinding: metadata, a roleRef to a Role or ClusterRole
// of rbac.authorization.k8s.io, and each subject.
func ValidateRoleBinding(b *rbacv1.RoleBinding) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, true, ValidateRBACName, field.NewPath("metadata"))
	allErrs = append(allErrs, validateRoleRef(b.RoleRef, []string{"Role", "ClusterRole"})...)
	for i, s := range b.Subjects {
		allErrs = append(allErrs, ValidateRoleBindingSubject(s, true, field.NewPath("subjects").Index(i))...)
	}
	return allErrs
}

// ValidateRoleBindingUpdate checks an updated RoleBinding: roleRef cannot change.
func ValidateRoleBindingUpdate(b, old *rbacv1.RoleBinding) field.ErrorList {
	allErrs := ValidateRoleBinding(b)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))...)
	if old.RoleRef != b.RoleRef {
		allErrs = append(allErrs, field.Invalid(field.NewPath("roleRef"), b.RoleRef, "cannot change roleRef"))
	}
	return allErrs
}

// ValidateClusterRoleBinding checks a ClusterRoleBinding: metadata, a roleRef to a
// ClusterRole, and each subject (a ServiceAccount must name its namespace).
func ValidateClusterRoleBinding(b *rbacv1.ClusterRoleBinding) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, ValidateRBACName, field.NewPath("metadata"))
	allErrs = append(allErrs, validateRoleRef(b.RoleRef, []string{"ClusterRole"})...)
	for i, s := range b.Subjects {
		allErrs = append(allErrs, ValidateRoleBindingSubject(s, false, field.NewPath("subjects").Index(i))...)
	}
	return allErrs
}

// ValidateClusterRoleBindingUpdate checks an updated ClusterRoleBinding: roleRef cannot
// change.
func ValidateClusterRoleBindingUpdate(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
	allErrs := ValidateClusterRoleBinding(b)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))...)
	if old.RoleRef != b.RoleRef {
		allErrs = append(allErrs, field.Invalid(field.NewPath("roleRef"), b.RoleRef, "cannot change roleRef"))
	}
	return allErrs
}

func validateRoleRef(ref rbacv1.RoleRef, kinds []string) field.ErrorList {
	allErrs := field.ErrorList{}
	fldPath := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	known := false
	for _, k := range kinds {
		known = known || ref.Kind == k
	}
	if !known {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("kind"), ref.Kind, kinds))
	}
	if len(ref.Name) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	} else {
		for _, msg := range ValidateRBACName(ref.Name, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), ref.Name, msg))
		}
	}
	return allErrs
}

// ValidateRoleBindingSubject checks one subject: a User or Group of
// rbac.authorization.k8s.io, or a ServiceAccount of the core group with a valid name (and
// a namespace, in cluster-scoped bindings).
func ValidateRoleBindingSubject(s rbacv1.Subject, isNamespaced bool, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if len(s.Name) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if len(s.Name) > 0 {
			for _, msg := range apivalidation.ValidateServiceAccountName(s.Name, false) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), s.Name, msg))
			}
		}
		if len(s.APIGroup) > 0 {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !isNamespaced && len(s.Namespace) == 0 {
			allErrs = append(allErrs, field.Required(fldPath.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return allErrs
}

// DefaultRoleRef and DefaultSubjects fill the API groups a v1 client may leave out, as
// kube's v1 defaulting does (SetDefaults_RoleBinding, SetDefaults_Subject): the roleRef's
// group and User/Group subjects' group are rbac.authorization.k8s.io.
func DefaultRoleRef(ref *rbacv1.RoleRef) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
}

// DefaultSubjects: see DefaultRoleRef.
func DefaultSubjects(subjects []rbacv1.Subject) {
	for i := range subjects {
		if subjects[i].APIGroup == "" && (subjects[i].Kind == rbacv1.UserKind || subjects[i].Kind == rbacv1.GroupKind) {
			subjects[i].APIGroup = rbacv1.GroupName
		}
	}
}
