package endpoints

import (
	"bufio"
	"net"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"

	"skiff.dev/services/apiserver/registry/rest"
)

// connect serves a Connecter subresource (pods/exec, attach, portforward,
// log): the handler it returns serves the request as it came, upgrade
// included. The request has been authorized with the verb of its method (GET
// get, POST create); a GET that upgrades (kubectl's WebSocket exec, attach
// and port-forward) must also be allowed to create, as kube-apiserver's
// AuthorizePodWebsocketUpgradeCreatePermission requires, so a read-only user
// cannot run commands. Errors: 405 for a method the subresource does not
// serve, 403, and the Connecter's own. Mirrors k8s.io/apiserver's
// handlers.ConnectResource.
func (h *resourceHandler) connect(w http.ResponseWriter, r *http.Request, req *request, c rest.Connecter) {
	if req.Name == "" || !slices.Contains(c.ConnectMethods(), r.Method) {
		writeError(w, apierrors.NewMethodNotSupported(req.gvr.GroupResource(), r.Method))
		return
	}
	if r.Method == http.MethodGet && httpstream.IsUpgradeRequest(r) && h.authz != nil {
		attrs := resourceAttributes(r, req)
		attrs.Verb = "create"
		if err := authorize(r, h.authz, attrs, metav1.GroupResource{Group: req.gvr.Group, Resource: req.gvr.Resource}); err != nil {
			writeError(w, err)
			return
		}
	}
	handler, err := c.Connect(r.Context(), req.Namespace, req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	handler.ServeHTTP(&hijackableWriter{ResponseWriter: w, rc: http.NewResponseController(w)}, r)
}

// hijackableWriter lets the upgrade-aware proxy hijack the connection through
// the middleware's response writers (which unwrap, but do not hijack).
type hijackableWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (h *hijackableWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return h.rc.Hijack() }

func (h *hijackableWriter) Flush() { _ = h.rc.Flush() }

func (h *hijackableWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }
