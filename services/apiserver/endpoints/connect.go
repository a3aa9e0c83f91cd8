package endpoints

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
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
	if err := h.admitConnect(r, req); err != nil {
		writeError(w, err)
		return
	}
	handler, err := c.Connect(r.Context(), req.Namespace, req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	handler.ServeHTTP(&hijackableWriter{ResponseWriter: w, rc: http.NewResponseController(w)}, r)
}

// connectOptions are the options objects of the subresources whose connections pass
// admission as CONNECT, as kube's connecters declare them (NewConnectOptions);
// pods/log is a read, not a connection, in kube, and is not admitted.
var connectOptions = map[string]func() runtime.Object{
	"pods/attach":      func() runtime.Object { return &corev1.PodAttachOptions{} },
	"pods/exec":        func() runtime.Object { return &corev1.PodExecOptions{} },
	"pods/portforward": func() runtime.Object { return &corev1.PodPortForwardOptions{} },
	"pods/proxy":       func() runtime.Object { return &corev1.PodProxyOptions{} },
	"services/proxy":   func() runtime.Object { return &corev1.ServiceProxyOptions{} },
	"nodes/proxy":      func() runtime.Object { return &corev1.NodeProxyOptions{} },
}

// admitConnect runs admission (operation CONNECT, the options from the query as the
// object) on a connection to a subresource that has options, as kube's
// ConnectResource does before connecting: a webhook may refuse `kubectl attach`.
// Errors: 400 for options that do not decode, admission's.
func (h *resourceHandler) admitConnect(r *http.Request, req *request) error {
	newOptions, ok := connectOptions[req.gvr.Resource+"/"+req.Subresource]
	if !ok || req.gvr.Group != "" {
		return nil
	}
	opts := newOptions()
	if err := decodeQueryOptions(r.URL.Query(), opts); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	kinds, _, err := scheme.Scheme.ObjectKinds(opts)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	opts.GetObjectKind().SetGroupVersionKind(kinds[0])
	return h.admit.Admit(r.Context(), admission.Attributes{
		Operation: admission.Connect, Resource: req.gvr, Subresource: req.Subresource,
		Namespace: req.Namespace, Name: req.Name, Object: opts, Kind: kinds[0],
	})
}

// decodeQueryOptions fills the fields of into (a pointer to an options struct) from
// the query parameters named by their JSON tags: strings, booleans, string lists and
// int32 lists, what the connect options hold. kube decodes them with the generated
// url.Values conversions of pkg/apis/core/v1. Errors: a value that does not parse.
func decodeQueryOptions(query url.Values, into runtime.Object) error {
	v := reflect.ValueOf(into).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		values, ok := query[name]
		if !ok || name == "" || len(values) == 0 {
			continue
		}
		f := v.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString(values[0])
		case bool:
			b, err := strconv.ParseBool(values[0])
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			f.SetBool(b)
		case []string:
			f.Set(reflect.ValueOf(slices.Clone(values)))
		case []int32:
			var ints []int32
			for _, s := range values {
				n, err := strconv.ParseInt(s, 10, 32)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				ints = append(ints, int32(n))
			}
			f.Set(reflect.ValueOf(ints))
		}
	}
	return nil
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
