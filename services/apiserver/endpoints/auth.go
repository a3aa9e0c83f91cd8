package endpoints

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/apiserver/authorization"
)

// publicPaths answer without credentials, as kube-apiserver's system:public-info-viewer
// role lets system:unauthenticated read them.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

// withAuthentication finds the request's user and puts it in the context
// (genericapirequest.WithUser). A request without a credential, or with one that does not
// prove who it claims, gets 401 Unauthorized, except on publicPaths, where it proceeds as
// system:anonymous. Mirrors k8s.io/apiserver/pkg/endpoints/filters.WithAuthentication.
func withAuthentication(authn authentication.Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, ok, err := authn.AuthenticateRequest(r)
			if !ok {
				if err != nil {
					slog.Debug("unable to authenticate the request", "uri", r.URL.RequestURI(), "err", err)
				}
				if !publicPaths[r.URL.Path] {
					writeError(w, apierrors.NewUnauthorized("Unauthorized"))
					return
				}
				info = &user.DefaultInfo{Name: authentication.AnonymousUser, Groups: []string{authentication.UnauthenticatedGroup}}
			}
			// The bearer token has done its work; it must not travel further.
			r.Header.Del("Authorization")
			next.ServeHTTP(w, r.WithContext(genericapirequest.WithUser(r.Context(), info)))
		})
	}
}

// withNonResourceAuthorization authorizes requests outside the resource URLs (discovery,
// /openapi, /metrics): the authorizer sees them as a non-resource "get" of the path.
func withNonResourceAuthorization(authz authorization.Authorizer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if publicPaths[r.URL.Path] || isResourcePath(r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			u, _ := genericapirequest.UserFrom(r.Context())
			verb := "get"
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				verb = "post"
			}
			attrs := authorizer.AttributesRecord{User: u, Verb: verb, Path: r.URL.Path}
			if err := authorize(r, authz, attrs, metav1.GroupResource{}); err != nil {
				writeError(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// isResourcePath reports whether path is under a group version (/api/v1/..., /apis/g/v/...),
// where resourceHandler authorizes with the resource's attributes.
func isResourcePath(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		return true
	case len(parts) >= 4 && parts[0] == "apis":
		return true
	}
	return false
}

// authorize asks authz about attrs and turns a denial into kube-apiserver's 403.
func authorize(r *http.Request, authz authorization.Authorizer, attrs authorizer.AttributesRecord, gr metav1.GroupResource) error {
	decision, reason, err := authz.Authorize(r.Context(), attrs)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		// The authorizer could not decide (its lookup failed, e.g. etcd is away): as
		// kube-apiserver's WithAuthorization, that is the server's failure, not a denial.
		slog.Warn("authorization error", "user", userName(attrs), "verb", attrs.Verb, "resource", attrs.Resource, "err", err)
		if r.Context().Err() != nil {
			return apierrors.NewTimeoutError("authorization did not finish in time", 1)
		}
		return apierrors.NewInternalError(fmt.Errorf("authorization: %w", err))
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Details: forbiddenDetails(attrs, gr),
		Message: forbiddenPrefix(attrs, gr) + authorization.ForbiddenMessage(attrs, reason),
	}}
}

// forbiddenPrefix is `pods "nginx" is forbidden: ` (or `pods is forbidden: ` for a list),
// as apierrors.NewForbidden words it; non-resource requests get `forbidden: `.
func forbiddenPrefix(attrs authorizer.AttributesRecord, gr metav1.GroupResource) string {
	if !attrs.ResourceRequest {
		return "forbidden: "
	}
	qualified := gr.Resource
	if gr.Group != "" {
		qualified += "." + gr.Group
	}
	if attrs.Name != "" {
		return qualified + " \"" + attrs.Name + "\" is forbidden: "
	}
	return qualified + " is forbidden: "
}

func forbiddenDetails(attrs authorizer.AttributesRecord, gr metav1.GroupResource) *metav1.StatusDetails {
	if !attrs.ResourceRequest {
		return nil
	}
	return &metav1.StatusDetails{Name: attrs.Name, Group: gr.Group, Kind: gr.Resource}
}

func userName(attrs authorizer.AttributesRecord) string {
	if attrs.User == nil {
		return ""
	}
	return attrs.User.GetName()
}

// requestVerb is the authorization verb of a resource request, as kube's
// RequestInfoFactory derives it: GET is get, list or watch; POST create; PUT update;
// PATCH patch; DELETE delete, or deletecollection without a name.
func requestVerb(r *http.Request, req *request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case isWatch(r):
			return "watch"
		case req.Name == "":
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if req.Name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return r.Method
}

// resourceAttributes are the authorization attributes of a resource request.
func resourceAttributes(r *http.Request, req *request) authorizer.AttributesRecord {
	u, _ := genericapirequest.UserFrom(r.Context())
	attrs := authorizer.AttributesRecord{
		User: u, Verb: requestVerb(r, req), Namespace: req.Namespace,
		APIGroup: req.gvr.Group, APIVersion: req.gvr.Version, Resource: req.gvr.Resource,
		Subresource: req.Subresource, Name: req.Name, ResourceRequest: true, Path: r.URL.Path,
	}
	if raw := r.URL.Query().Get("fieldSelector"); raw != "" {
		attrs.FieldSelectorRequirements, attrs.FieldSelectorParsingErr = authorization.ParseFieldSelector(raw)
		// A list or watch of one name (fieldSelector=metadata.name=NAME) is authorized
		// as that name, so a rule's resourceNames can allow it, as kube's
		// RequestInfoFactory does: an informer on one ConfigMap needs only that one.
		if sel, err := fields.ParseSelector(raw); err == nil && attrs.Name == "" && (attrs.Verb == "list" || attrs.Verb == "watch") {
			if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(path.IsValidPathSegmentName(name)) == 0 {
				attrs.Name = name
			}
		}
	}
	return attrs
}

// withImpersonation lets a user act as another (`kubectl --as USER --as-group GROUP`):
// the Impersonate-User and Impersonate-Group headers replace the request's user when
// the real user may "impersonate" those users and groups (only system:masters may, in
// skiff's authorizer); otherwise the request gets 403. Mirrors
// k8s.io/apiserver/pkg/endpoints/filters.WithImpersonation.
func withImpersonation(authz authorization.Authorizer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := r.Header.Get("Impersonate-User")
			groups := r.Header.Values("Impersonate-Group")
			if name == "" {
				if len(groups) > 0 {
					writeError(w, apierrors.NewBadRequest("requested impersonation of groups without impersonating a user"))
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			real, _ := genericapirequest.UserFrom(r.Context())
			check := func(resource, target string) error {
				attrs := authorizer.AttributesRecord{User: real, Verb: "impersonate", Resource: resource, Name: target, ResourceRequest: true, Path: r.URL.Path}
				return authorize(r, authz, attrs, metav1.GroupResource{Resource: resource})
			}
			if err := check("users", name); err != nil {
				writeError(w, err)
				return
			}
			for _, g := range groups {
				if err := check("groups", g); err != nil {
					writeError(w, err)
					return
				}
			}
			if name != authentication.AnonymousUser {
				groups = append(groups, authentication.AuthenticatedGroup)
			}
			for _, h := range []string{"Impersonate-User", "Impersonate-Group", "Impersonate-Uid"} {
				r.Header.Del(h)
			}
			as := &user.DefaultInfo{Name: name, Groups: groups}
			next.ServeHTTP(w, r.WithContext(genericapirequest.WithUser(r.Context(), as)))
		})
	}
}
