// Package secret is the core/v1 secrets resource. skiff reads one kind of Secret itself:
// kube-system bootstrap tokens (type bootstrap.kubernetes.io/token), which authenticate
// kubelets that have nothing else yet. Mirrors k8s.io/kubernetes/pkg/registry/core/secret.
package secret

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
)

// MaxSecretSize is the largest total size of a secret's data, in bytes (kube's
// MaxSecretSize, 1 MiB).
const MaxSecretSize = 1 << 20

// Descriptor serves secrets.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "secrets",
	SingularName: "secret",
	Kind:         "Secret",
	NewFunc:      func() runtime.Object { return &corev1.Secret{} },
	NewListFunc:  func() runtime.Object { return &corev1.SecretList{} },
	Strategy:     Strategy{},
}

// Strategy is the secrets strategy.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate folds stringData into data (write-only convenience, as kube's
// conversion does) and defaults the type to Opaque.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	s := obj.(*corev1.Secret)
	foldStringData(s)
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

// PrepareForUpdate folds stringData into data and keeps an unset type as it was.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s := obj.(*corev1.Secret)
	foldStringData(s)
	if s.Type == "" {
		s.Type = old.(*corev1.Secret).Type
	}
}

func foldStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = make(map[string][]byte, len(s.StringData))
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// Validate checks metadata, data keys (as ConfigMap keys), the 1 MiB limit and what
// the type requires (validateType). Mirrors ValidateSecret.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	s := obj.(*corev1.Secret)
	allErrs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	dataPath := field.NewPath("data")
	total := 0
	for key, value := range s.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(dataPath.Key(key), key, msg))
		}
		total += len(value)
	}
	if total > MaxSecretSize {
		allErrs = append(allErrs, field.TooLong(dataPath, "", MaxSecretSize))
	}
	return append(allErrs, validateType(s, dataPath)...)
}

// validateType checks what a secret's type requires: the service account's name
// annotation (service-account-token), the docker configuration as JSON (dockercfg,
// dockerconfigjson), a username or a password (basic-auth), a private key (ssh-auth),
// a certificate and a key (tls). Other types, Opaque among them, require nothing.
// Messages and paths are kube's ValidateSecret's.
func validateType(s *corev1.Secret, dataPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	requireJSON := func(key string) {
		data, ok := s.Data[key]
		if !ok {
			allErrs = append(allErrs, field.Required(dataPath.Key(key), ""))
			return
		}
		if err := json.Unmarshal(data, &map[string]any{}); err != nil {
			allErrs = append(allErrs, field.Invalid(dataPath.Key(key), "<secret contents redacted>", err.Error()))
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("metadata", "annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg:
		requireJSON(corev1.DockerConfigKey)
	case corev1.SecretTypeDockerConfigJson:
		requireJSON(corev1.DockerConfigJsonKey)
	case corev1.SecretTypeBasicAuth:
		_, user := s.Data[corev1.BasicAuthUsernameKey]
		_, password := s.Data[corev1.BasicAuthPasswordKey]
		if !user && !password {
			allErrs = append(allErrs, field.Required(dataPath.Key(corev1.BasicAuthUsernameKey), ""),
				field.Required(dataPath.Key(corev1.BasicAuthPasswordKey), ""))
		}
	case corev1.SecretTypeSSHAuth:
		if len(s.Data[corev1.SSHAuthPrivateKey]) == 0 {
			allErrs = append(allErrs, field.Required(dataPath.Key(corev1.SSHAuthPrivateKey), ""))
		}
	case corev1.SecretTypeTLS:
		for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
			if _, ok := s.Data[key]; !ok {
				allErrs = append(allErrs, field.Required(dataPath.Key(key), ""))
			}
		}
	}
	return allErrs
}

// ValidateUpdate adds the update rules: the type is immutable, and so is the data of an
// immutable secret.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	newS, oldS := obj.(*corev1.Secret), old.(*corev1.Secret)
	allErrs := s.Validate(ctx, obj)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&newS.ObjectMeta, &oldS.ObjectMeta, field.NewPath("metadata"))...)
	if newS.Type != oldS.Type {
		allErrs = append(allErrs, field.Invalid(field.NewPath("type"), newS.Type, "field is immutable"))
	}
	if oldS.Immutable != nil && *oldS.Immutable {
		if newS.Immutable == nil || !*newS.Immutable {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(newS.Data, oldS.Data) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return allErrs
}

// GetAttrs returns labels, metadata.name/namespace and type (kube's secret field
// selectors).
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return nil, nil, fmt.Errorf("not a secret: %T", obj)
	}
	set := registry.ObjectMetaFieldsSet(&s.ObjectMeta, true)
	set["type"] = string(s.Type)
	return labels.Set(s.Labels), set, nil
}

// TableColumns are NAME TYPE DATA AGE. Mirrors printSecret.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Type", Type: "string", Description: "The type of the secret."},
		{Name: "Data", Type: "string", Description: "The number of data items."},
		registry.AgeColumn,
	}
}

// TableRow prints one secret.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	s := obj.(*corev1.Secret)
	return []interface{}{s.Name, string(s.Type), int64(len(s.Data)), registry.TranslateTimestampSince(s.CreationTimestamp)}
}
