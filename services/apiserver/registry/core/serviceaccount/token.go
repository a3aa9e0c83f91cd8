package serviceaccount

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/serviceaccount"
)

// Token lifetimes a TokenRequest may ask for (kube's TokenRequest validation and
// defaulting): expirationSeconds defaults to one hour and must be at least ten minutes
// and at most 2^32 seconds.
const (
	DefaultExpirationSeconds = 3600
	MinExpirationSeconds     = 600
	MaxExpirationSeconds     = 1 << 32
)

// TokenREST serves serviceaccounts/token: POST a TokenRequest (authentication.k8s.io/v1)
// and get it back with status.token, a JWT for the service account, bound to the Pod or
// Secret in spec.boundObjectRef if any. Mirrors
// k8s.io/kubernetes/pkg/registry/core/serviceaccount/storage.TokenREST.
type TokenREST struct {
	// ServiceAccounts, Pods, Secrets and Nodes read from storage.
	ServiceAccounts, Pods, Secrets, Nodes rest.Getter
	// Signer signs the tokens.
	Signer *serviceaccount.Signer
	// Audiences are the audiences of a request that names none (kube-apiserver's
	// --api-audiences, which default to the issuer).
	Audiences []string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

var (
	_ rest.Creater                  = (*TokenREST)(nil)
	_ rest.GroupVersionKindProvider = (*TokenREST)(nil)
)

// New returns an empty TokenRequest for request decoding.
func (r *TokenREST) New() runtime.Object { return &authenticationv1.TokenRequest{} }

// GroupVersionKind is authentication.k8s.io/v1 TokenRequest, though the subresource is
// served under core v1.
func (r *TokenREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")
}

// Create issues a token for service account namespace/<obj's name> (the handler names
// the TokenRequest after the URL). Errors: 422 for a lifetime outside [600 s, 2^32 s];
// 404 for a service account or bound object that does not exist; 400 for a bound object
// of another kind than Pod or Secret, or a pod that runs as another service account;
// 409 when boundObjectRef.uid is not the bound object's.
func (r *TokenREST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*authenticationv1.TokenRequest)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenRequest: %T", obj))
	}
	name := req.Name
	if req.Spec.ExpirationSeconds == nil {
		seconds := int64(DefaultExpirationSeconds)
		req.Spec.ExpirationSeconds = &seconds
	}
	if len(req.Spec.Audiences) == 0 {
		req.Spec.Audiences = append([]string(nil), r.Audiences...)
	}
	if errs := validateTokenRequest(req); len(errs) > 0 {
		return nil, apierrors.NewInvalid(authenticationv1.SchemeGroupVersion.WithKind("TokenRequest").GroupKind(), name, errs)
	}
	// The service account and the bound object from the watch cache when it shows the
	// object the request names (kube reads both from etcd): a token minted for an
	// object deleted a moment ago fails authentication, which checks each one's UID.
	saObj, err := rest.GetCachedFirst(ctx, r.ServiceAccounts, namespace, name, nil)
	if err != nil {
		return nil, err
	}
	sa := saObj.(*corev1.ServiceAccount)

	var binding serviceaccount.Binding
	if ref := req.Spec.BoundObjectRef; ref != nil {
		var uid string
		gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
		switch {
		case gvk.Group == "" && gvk.Kind == "Pod":
			podObj, err := rest.GetCachedFirst(ctx, r.Pods, namespace, ref.Name, uidIs(ref.UID))
			if err != nil {
				return nil, err
			}
			pod := podObj.(*corev1.Pod)
			if pod.Spec.ServiceAccountName != name {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", name))
			}
			binding.Pod, uid = pod, string(pod.UID)
			if pod.Spec.NodeName != "" && r.Nodes != nil {
				// The node is information only: a token is not refused for want of it.
				if nodeObj, err := r.Nodes.Get(ctx, "", pod.Spec.NodeName, &metav1.GetOptions{ResourceVersion: "0"}); err == nil {
					binding.Node = nodeObj.(*corev1.Node)
				}
			}
		case gvk.Group == "" && gvk.Kind == "Secret":
			secretObj, err := rest.GetCachedFirst(ctx, r.Secrets, namespace, ref.Name, uidIs(ref.UID))
			if err != nil {
				return nil, err
			}
			binding.Secret = secretObj.(*corev1.Secret)
			uid = string(binding.Secret.UID)
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
		}
		if ref.UID != "" && string(ref.UID) != uid {
			return nil, apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, ref.Name,
				fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
		}
	}

	out := req.DeepCopy()
	out.Namespace = namespace
	if len(opts.DryRun) > 0 {
		return out, nil
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	issued := now().Truncate(time.Second)
	expiration := time.Duration(*req.Spec.ExpirationSeconds) * time.Second
	token, err := r.Signer.Sign(serviceaccount.NewClaims(sa, binding, req.Spec.Audiences, issued, expiration))
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("sign token: %w", err))
	}
	out.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(issued.Add(expiration))}
	return out, nil
}

// uidIs accepts a cached object whose UID is uid, or any when uid is "" (the request
// names none: only etcd's current object will do).
func uidIs(uid types.UID) func(runtime.Object) bool {
	return func(obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		return uid != "" && err == nil && m.GetUID() == uid
	}
}

// validateTokenRequest mirrors kube's ValidateTokenRequest.
func validateTokenRequest(req *authenticationv1.TokenRequest) field.ErrorList {
	var allErrs field.ErrorList
	specPath := field.NewPath("spec")
	switch seconds := *req.Spec.ExpirationSeconds; {
	case seconds < MinExpirationSeconds:
		allErrs = append(allErrs, field.Invalid(specPath.Child("expirationSeconds"), seconds, "may not specify a duration less than 10 minutes"))
	case seconds > MaxExpirationSeconds:
		allErrs = append(allErrs, field.Invalid(specPath.Child("expirationSeconds"), seconds, "may not specify a duration larger than 2^32 seconds"))
	}
	if ref := req.Spec.BoundObjectRef; ref != nil && ref.Name == "" {
		allErrs = append(allErrs, field.Required(specPath.Child("boundObjectRef", "name"), ""))
	}
	return allErrs
}
