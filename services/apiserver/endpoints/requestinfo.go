package endpoints

import (
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RequestInfo is what a resource URL names, as kube-apiserver's
// k8s.io/apiserver/pkg/endpoints/request.RequestInfo: e.g.
// /api/v1/namespaces/default/pods/nginx/status is {Namespace: "default", Resource: "pods",
// Name: "nginx", Subresource: "status"}.
type RequestInfo struct {
	Namespace   string
	Resource    string
	Name        string
	Subresource string
}

// parseResourcePath splits the path after /api/v1 or /apis/<group>/<version> into a
// RequestInfo. A leading "namespaces/<ns>/<resource>" names a namespaced resource only
// when <resource> is one gv serves namespaced; otherwise "namespaces" is the resource
// itself (GET /api/v1/namespaces/default). A proxy subresource takes the rest of the
// path as the proxied one. Unknown shapes are 404 NotFound.
func parseResourcePath(rest string, gv *APIGroupVersion) (RequestInfo, error) {
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		return RequestInfo{}, notFoundPath(rest)
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		if res, ok := gv.resources[parts[2]]; ok && res.Namespaced {
			info := RequestInfo{Namespace: parts[1], Resource: parts[2]}
			switch len(parts) {
			case 3:
				return info, nil
			case 4:
				info.Name = parts[3]
				return info, nil
			case 5:
				info.Name, info.Subresource = parts[3], parts[4]
				return info, nil
			}
			if parts[4] == "proxy" {
				// .../pods/<name>/proxy/<path>: the path is the proxy's.
				info.Name, info.Subresource = parts[3], parts[4]
				return info, nil
			}
			return RequestInfo{}, notFoundPath(rest)
		}
	}
	info := RequestInfo{Resource: parts[0]}
	switch len(parts) {
	case 1:
	case 2:
		info.Name = parts[1]
	case 3:
		info.Name, info.Subresource = parts[1], parts[2]
	default:
		if parts[2] != "proxy" {
			return RequestInfo{}, notFoundPath(rest)
		}
		// .../nodes/<name>/proxy/<path>
		info.Name, info.Subresource = parts[1], parts[2]
	}
	return info, nil
}

// notFoundPath is the 404 for a URL that names nothing skiff serves, worded as client-go
// words a 404 without a body.
func notFoundPath(path string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource (" + path + ")",
	}}
}
