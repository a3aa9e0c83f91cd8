package endpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"skiff.dev/services/apiserver/scheme"
)

// maxRequestBodyBytes bounds request bodies, as kube-apiserver's 3 MiB limit does.
const maxRequestBodyBytes = 3 << 20

// wantsTable reports whether the Accept header asks for a meta.k8s.io Table (kubectl get's
// human output): a media range application/json with as=Table, g=meta.k8s.io and
// v=v1 or v1beta1. Mirrors the negotiation in handlers/response.go.
func wantsTable(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mediaType != "application/json" {
			continue
		}
		if params["as"] == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
			return true
		}
	}
	return false
}

// acceptsOnlyTables reports whether every media range of the Accept header asks for a
// Table (or some other "as=" form), so an object that cannot be one has no acceptable
// answer.
func acceptsOnlyTables(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		_, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && params["as"] == "" {
			return false
		}
	}
	return true
}

// notAcceptable is the 406 for a Table asked of a resource that cannot print one,
// as kube-apiserver answers it.
func notAcceptable(resource string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
		Message: fmt.Sprintf("the resource %s does not support being converted to a Table", resource),
	}}
}

// decodeBody reads the request body into into, accepting JSON, YAML or protobuf
// (client-go's typed clients send protobuf). defaultGVK fills a missing apiVersion/kind
// (kubectl's DeleteOptions body has neither). fieldValidation says what unknown or
// duplicate fields do, as kube-apiserver's server-side field validation: "Strict" fails
// with 400, "Ignore" drops them, "Warn" (the default) drops them and returns one warning
// each for the Warning header. Errors are 400/413/415 statuses.
func decodeBody(r *http.Request, defaultGVK schema.GroupVersionKind, into runtime.Object, fieldValidation string) (runtime.Object, []string, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, nil, err
	}
	if len(body) == 0 {
		return nil, nil, apierrors.NewBadRequest("request body is empty")
	}
	// As kube-apiserver's NegotiateInputSerializer: no Content-Type means JSON; a media
	// type no serializer handles (text/plain, */*) is 415.
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mediaType, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return nil, nil, unsupportedMediaType(ct)
		}
		switch mediaType {
		case "application/json", "application/yaml", "application/vnd.kubernetes.protobuf":
		default:
			return nil, nil, unsupportedMediaType(ct)
		}
	}
	var warnings []string
	decoder := scheme.Codecs.UniversalDeserializer()
	switch fieldValidation {
	case "", metav1.FieldValidationWarn, metav1.FieldValidationStrict:
		decoder = scheme.StrictCodecs.UniversalDeserializer()
	case metav1.FieldValidationIgnore:
	default:
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("fieldValidation parameter unsupported: %q, must be one of Ignore, Warn or Strict", fieldValidation))
	}
	obj, gvk, err := decoder.Decode(body, &defaultGVK, into)
	if strictErr, ok := runtime.AsStrictDecodingError(err); ok && obj != nil {
		if fieldValidation == metav1.FieldValidationStrict {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v",
				defaultGVK.Kind, defaultGVK.Version, defaultGVK.Kind, err))
		}
		for _, e := range strictErr.Errors() {
			warnings = append(warnings, e.Error())
		}
		err = nil
	}
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v",
			defaultGVK.Kind, defaultGVK.Version, defaultGVK.Kind, err))
	}
	if _, ok := into.(runtime.Unstructured); ok && gvk.GroupVersion() != defaultGVK.GroupVersion() {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)",
			gvk.GroupVersion(), defaultGVK.GroupVersion()))
	}
	if gvk.Kind != defaultGVK.Kind || obj != into {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: the object provided is unrecognized (must be of type %s)",
			gvk.Kind, gvk.Version, defaultGVK.Kind, defaultGVK.Kind))
	}
	return obj, warnings, nil
}

// readBody reads at most maxRequestBodyBytes (413 beyond).
// A declared Content-Length over the limit is refused before reading anything.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > maxRequestBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxRequestBodyBytes))
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxRequestBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxRequestBodyBytes))
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading request body: %v", err))
	}
	return body, nil
}

// addWarnings sets one Warning header per message, as kube-apiserver does
// (299 - "message"), which kubectl prints as "Warning: message".
func addWarnings(w http.ResponseWriter, warnings []string) {
	for _, msg := range warnings {
		w.Header().Add("Warning", fmt.Sprintf("299 - %s", strconv.Quote(msg)))
	}
}

// writeObject writes obj with its apiVersion and kind for gv, as protobuf when the
// request's Accept header prefers it (client-go's typed clients do) and as JSON
// otherwise. Tables and Statuses are always JSON.
func writeObject(w http.ResponseWriter, r *http.Request, code int, gv schema.GroupVersion, obj runtime.Object) {
	contentType, encoder := "application/json", encoderFor(obj, gv)
	if prefersProtobuf(r) {
		switch obj.(type) {
		case *metav1.Table, *metav1.Status, runtime.Unstructured:
			// Custom resources have no protobuf encoding: JSON, as kube-apiserver answers.
		default:
			contentType, encoder = protobufContentType, scheme.Codecs.EncoderForVersion(scheme.ProtobufSerializer, gv)
			if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.GroupVersion() == gv {
				encoder = scheme.ProtobufSerializer
			}
		}
	}
	// The bytes are written before the allocator goes back to the pool (a write copies
	// them into the connection's buffer), so a response costs no allocation of its size.
	// One that outgrew maxPooledResponseBuffer (a long list) is left to the collector.
	alloc := runtime.AllocatorPool.Get().(*runtime.Allocator)
	defer func() {
		if cap(alloc.Allocate(0)) <= maxPooledResponseBuffer {
			runtime.AllocatorPool.Put(alloc)
		}
	}()
	data, err := scheme.Encode(encoder, obj, alloc)
	if err != nil {
		writeError(w, apierrors.NewInternalError(fmt.Errorf("encoding response: %w", err)))
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	if contentType == "application/json" {
		data = append(data, '\n')
	}
	_, _ = w.Write(data)
}

const protobufContentType = "application/vnd.kubernetes.protobuf"

// maxPooledResponseBuffer bounds the encoding buffers writeObject keeps for reuse: 1 MiB,
// a list of a few hundred pods. Newer apimachinery releases bound the pool the same way
// (runtime.PutAllocator).
const maxPooledResponseBuffer = 1 << 20

// prefersProtobuf reports whether the first media type of the Accept header that skiff
// can produce is protobuf.
func prefersProtobuf(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mediaType, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case protobufContentType:
			return true
		case "application/json", "application/*", "*/*", "application/yaml":
			return false
		}
	}
	return false
}

// encoderFor returns the JSON encoder for obj: meta.k8s.io/v1 for Tables, gv otherwise.
// An object that already carries its kind is encoded as is: the versioning encoder
// writes the kind into the object, which objects shared by the watch cache must not see.
func encoderFor(obj runtime.Object, gv schema.GroupVersion) runtime.Encoder {
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && (gvk.GroupVersion() == gv || gvk.Group == metav1.GroupName) {
		return scheme.JSONSerializer
	}
	if _, ok := obj.(*metav1.Table); ok {
		return scheme.EncoderFor(metav1.SchemeGroupVersion)
	}
	if _, ok := obj.(*metav1.Status); ok {
		return scheme.EncoderFor(schema.GroupVersion{Version: "v1"})
	}
	return scheme.EncoderFor(gv)
}

// writeError writes err as a metav1.Status with its HTTP code. Errors that are not API
// errors become 500 InternalError, and are logged, because they are skiff's bugs.
func writeError(w http.ResponseWriter, err error) {
	status := errorToStatus(err)
	// A status that says when to retry (429, 503, 504 while etcd is unavailable) says it
	// in Retry-After too, as kube's responsewriters.ErrorNegotiated: client-go retries
	// only on that header.
	if status.Details != nil && status.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(status.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	data, _ := json.Marshal(status)
	_, _ = w.Write(append(data, '\n'))
}

func errorToStatus(err error) *metav1.Status {
	var apiStatus apierrors.APIStatus
	if !errors.As(err, &apiStatus) {
		slog.Error("internal error", "err", err)
		apiStatus = apierrors.NewInternalError(err)
	}
	status := apiStatus.Status()
	status.Kind = "Status"
	status.APIVersion = "v1"
	if status.Status == "" {
		status.Status = metav1.StatusFailure
	}
	if status.Code == 0 {
		status.Code = http.StatusInternalServerError
	}
	return &status
}

// unsupportedMediaType is the 415 for a body in a content type skiff cannot read.
func unsupportedMediaType(contentType string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got %q)", contentType),
	}}
}
