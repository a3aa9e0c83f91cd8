package delegating

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"skiff.dev/services/internal/httpstatus"
)

// WithAuth serves next only to callers authn identifies and authz allows, treating
// every request as a non-resource request whose verb is its lower-cased method ("get"
// for GET /metrics), as kube's RequestInfoFactory does for paths outside /api and
// /apis. A request whose credential proves nothing gets 401 Unauthorized; one authz
// does not allow gets 403 with kube's message (`forbidden: User "jane" cannot get path
// "/metrics"`), both as a JSON metav1.Status; an authorizer failure gets 500. Mirrors
// k8s.io/apiserver/pkg/endpoints/filters' WithAuthentication and WithAuthorization.
func WithAuth(next http.Handler, authn authenticator.Request, authz authorizer.Authorizer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				slog.Error("Unable to authenticate the request", "path", r.URL.Path, "err", err)
			}
			httpstatus.Write(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		attrs := authorizer.AttributesRecord{User: resp.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := authz.Authorize(r.Context(), attrs)
		if decision == authorizer.DecisionAllow {
			next.ServeHTTP(w, r)
			return
		}
		if err != nil {
			slog.Error("Unable to authorize the request", "path", r.URL.Path, "user", resp.User.GetName(), "err", err)
			http.Error(w, fmt.Sprintf("Internal Server Error: %q: %v", r.URL.RequestURI(), err), http.StatusInternalServerError)
			return
		}
		httpstatus.Write(w, apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(forbiddenMessage(attrs, reason))))
	})
}

// forbiddenMessage is kube's for a non-resource request (responsewriters.Forbidden):
// `User "jane" cannot get path "/metrics"`, then ": <reason>" when the authorizer
// gave one.
func forbiddenMessage(a authorizer.Attributes, reason string) string {
	msg := fmt.Sprintf("User %q cannot %s path %q", a.GetUser().GetName(), a.GetVerb(), a.GetPath())
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}
