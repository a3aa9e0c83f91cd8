package validation

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateAppProtocol checks a port's appProtocol (of a Service, Endpoints or an
// EndpointSlice): nil, or a qualified name such as "http", "kubernetes.io/h2c" or
// "example.com/custom". Mirrors the appProtocol checks of kube's
// pkg/apis/core/validation and pkg/apis/discovery/validation (ValidateQualifiedName).
func ValidateAppProtocol(appProtocol *string, path *field.Path) field.ErrorList {
	if appProtocol == nil {
		return nil
	}
	var allErrs field.ErrorList
	for _, msg := range validation.IsQualifiedName(*appProtocol) {
		allErrs = append(allErrs, field.Invalid(path, *appProtocol, msg))
	}
	return allErrs
}
