// Package serviceaccount is the core/v1 serviceaccounts resource and its token
// subresource (TokenRequest), which issues bound service-account tokens. Mirrors
// k8s.io/kubernetes/pkg/registry/core/serviceaccount.
package serviceaccount

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/serviceaccount"
)

// TokenConfig is what the token subresource and the authenticator share: the key that
// signs tokens, the keys that verify them, and the apiserver's audiences.
type TokenConfig struct {
	Signer    *serviceaccount.Signer
	Verifier  *serviceaccount.Verifier
	Audiences []string
}

// NewDescriptor serves serviceaccounts (short name sa) with the token subresource, which
// signs tokens as tokens says. Mirrors k8s.io/kubernetes/pkg/registry/core/serviceaccount/storage.
func NewDescriptor(tokens TokenConfig) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: corev1.SchemeGroupVersion,
		Resource:     "serviceaccounts",
		SingularName: "serviceaccount",
		Kind:         "ServiceAccount",
		ShortNames:   []string{"sa"},
		NewFunc:      func() runtime.Object { return &corev1.ServiceAccount{} },
		NewListFunc:  func() runtime.Object { return &corev1.ServiceAccountList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, stores registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			if tokens.Signer == nil {
				return nil, nil, errors.New("serviceaccounts: a token signer is required")
			}
			token := &TokenREST{
				ServiceAccounts: store,
				Pods:            stores.Store(corev1.Resource("pods")),
				Secrets:         stores.Store(corev1.Resource("secrets")),
				Nodes:           stores.Store(corev1.Resource("nodes")),
				Signer:          tokens.Signer,
				Audiences:       tokens.Audiences,
			}
			if token.Pods == nil || token.Secrets == nil {
				return nil, nil, errors.New("serviceaccounts/token: pods and secrets must be served")
			}
			return store, map[string]registry.Subresource{"token": {Kind: "TokenRequest", Storage: token}}, nil
		},
	}
}

// Strategy is the serviceaccounts strategy: a ServiceAccount is metadata plus references
// (secrets, imagePullSecrets) and automountServiceAccountToken; it has no status.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate changes nothing: every field is the client's.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate changes nothing.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks metadata (the name a DNS subdomain, as kube's
// ValidateServiceAccountName) and that every referenced secret has a name.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	sa := obj.(*corev1.ServiceAccount)
	allErrs := apivalidation.ValidateObjectMeta(&sa.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	for i, ref := range sa.ImagePullSecrets {
		if ref.Name == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("imagePullSecrets").Index(i).Child("name"), ""))
		}
	}
	return allErrs
}

// ValidateUpdate adds the metadata update rules (name, namespace and uid are fixed).
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	allErrs := s.Validate(ctx, obj)
	return append(allErrs, apivalidation.ValidateObjectMetaUpdate(&obj.(*corev1.ServiceAccount).ObjectMeta,
		&old.(*corev1.ServiceAccount).ObjectMeta, field.NewPath("metadata"))...)
}

// GetAttrs returns labels and metadata.name/namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	sa, ok := obj.(*corev1.ServiceAccount)
	if !ok {
		return nil, nil, fmt.Errorf("not a service account: %T", obj)
	}
	return labels.Set(sa.Labels), registry.ObjectMetaFieldsSet(&sa.ObjectMeta, true), nil
}

// TableColumns are NAME SECRETS AGE. Mirrors printServiceAccount.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
		registry.AgeColumn,
	}
}

// TableRow prints one service account.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	sa := obj.(*corev1.ServiceAccount)
	return []interface{}{sa.Name, int64(len(sa.Secrets)), registry.TranslateTimestampSince(sa.CreationTimestamp)}
}
