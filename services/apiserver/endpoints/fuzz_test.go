package endpoints

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/apiserver/scheme"
)

var podGVK = corev1.SchemeGroupVersion.WithKind("Pod")

// requireClientError fails unless err is nil or an API status with a 4xx code: bad input
// must never become a 500 or a panic.
func requireClientError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("error is not an API status: %v", err)
	}
	if code := status.Status().Code; code < 400 || code > 499 {
		t.Fatalf("code %d for bad input: %v", code, err)
	}
}

// FuzzDecodeBody feeds arbitrary bodies in each accepted content type to the request
// decoder, under each fieldValidation mode.
func FuzzDecodeBody(f *testing.F) {
	f.Add([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}}`), uint8(0), uint8(0))
	f.Add([]byte("kind: Pod\napiVersion: v1\nmetadata:\n  name: p\n"), uint8(1), uint8(1))
	f.Add([]byte("k8s\x00\x0a\x0f\x0a\x02v1\x12\x03Pod\x12\x00"), uint8(2), uint8(2))
	f.Add([]byte(`{"kind":"Pod","apiVersion":"v1","spec":{"bogus":1,"bogus":2}}`), uint8(0), uint8(3))
	contentTypes := []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "text/html"}
	validations := []string{"", metav1.FieldValidationStrict, metav1.FieldValidationWarn, metav1.FieldValidationIgnore}
	f.Fuzz(func(t *testing.T, body []byte, ct, validation uint8) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/pods", bytes.NewReader(body))
		r.Header.Set("Content-Type", contentTypes[int(ct)%len(contentTypes)])
		_, _, err := decodeBody(r, podGVK, &corev1.Pod{}, validations[int(validation)%len(validations)])
		requireClientError(t, err)
	})
}

// FuzzListOptions feeds arbitrary query strings (selectors, resourceVersion, limit,
// watch flags) to the list-options decoder.
func FuzzListOptions(f *testing.F) {
	f.Add("labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3D&limit=500")
	f.Add("fieldSelector=status.phase!%3DSucceeded,status.phase!%3DFailed&watch=1&resourceVersion=10")
	f.Add("labelSelector=a+in+(b,c),!d&timeoutSeconds=300&allowWatchBookmarks=true")
	f.Add("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=true")
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		r.URL.RawQuery = query
		_, err := listOptions(r)
		requireClientError(t, err)
	})
}

// FuzzApplyPatch applies arbitrary patches of each type to a real pod.
func FuzzApplyPatch(f *testing.F) {
	f.Add([]byte(`[{"op":"add","path":"/metadata/labels/x","value":"y"}]`), uint8(0))
	f.Add([]byte(`{"metadata":{"labels":{"a":null}}}`), uint8(1))
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"y"}],"$setElementOrder/containers":[{"name":"c"}]}}`), uint8(2))
	f.Add([]byte(`{"spec":{"containers":[{"$patch":"delete","name":"c"}]}}`), uint8(2))
	old := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	patchTypes := []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType}
	f.Fuzz(func(t *testing.T, patch []byte, pt uint8) {
		var into runtime.Object = &corev1.Pod{}
		_, _, err := applyPatch(patchTypes[int(pt)%len(patchTypes)], patch, old.DeepCopy(), podGVK, into, metav1.FieldValidationWarn)
		requireClientError(t, err)
	})
}

// fuzzDecodeRoundTrip decodes body as contentType and, when the decoder accepts it,
// requires the JSON encoding of the result to read back as itself: once stored as JSON,
// decoding and encoding again gives the same bytes (what skiff stores is what it would
// read back). The first encoding may normalise (invalid UTF-8 in a protobuf string
// becomes U+FFFD, as encoding/json does); from then on nothing may change.
func fuzzDecodeRoundTrip(t *testing.T, body []byte, contentType string) {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/pods", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	obj, _, err := decodeBody(r, podGVK, &corev1.Pod{}, metav1.FieldValidationWarn)
	requireClientError(t, err)
	if err != nil {
		return
	}
	stored, err := runtime.Encode(scheme.EncoderFor(corev1.SchemeGroupVersion), obj)
	if err != nil {
		t.Fatalf("encode a decoded %T: %v", obj, err)
	}
	first := reencodeJSON(t, stored)
	if second := reencodeJSON(t, first); !bytes.Equal(first, second) {
		t.Fatalf("JSON round trip is not stable:\n%s\n%s", first, second)
	}
}

// reencodeJSON decodes a stored JSON pod strictly and encodes it again.
func reencodeJSON(t *testing.T, stored []byte) []byte {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/pods", bytes.NewReader(stored))
	r.Header.Set("Content-Type", "application/json")
	obj, _, err := decodeBody(r, podGVK, &corev1.Pod{}, metav1.FieldValidationStrict)
	if err != nil {
		t.Fatalf("decode the encoding of a decoded object: %v\n%s", err, stored)
	}
	out, err := runtime.Encode(scheme.EncoderFor(corev1.SchemeGroupVersion), obj)
	if err != nil {
		t.Fatalf("encode again: %v", err)
	}
	return out
}

// FuzzDecodeJSON fuzzes application/json request bodies, with the round-trip property.
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"cpu":"100m"}}}]}}`))
	f.Add([]byte(`{"metadata":{"name":"p"}}`))
	f.Add([]byte(`{"kind":"Pod","apiVersion":"v1","spec":{"containers":[{"ports":[{"containerPort":"80"}]}]}}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecodeRoundTrip(t, body, "application/json") })
}

// FuzzDecodeYAML fuzzes application/yaml request bodies (anchors, aliases, multi-document
// streams, tags), with the round-trip property.
func FuzzDecodeYAML(f *testing.F) {
	f.Add([]byte("kind: Pod\napiVersion: v1\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: x\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("---\nkind: Pod\n---\nkind: Pod\n"))
	f.Add([]byte("metadata: !!binary aGVsbG8=\n"))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecodeRoundTrip(t, body, "application/yaml") })
}

// FuzzDecodeProtobuf fuzzes application/vnd.kubernetes.protobuf request bodies (the "k8s\0"
// envelope around a runtime.Unknown), with the round-trip property.
func FuzzDecodeProtobuf(f *testing.F) {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	data, err := runtime.Encode(scheme.ProtobufSerializer, pod)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("k8s\x00\x0a\x0f\x0a\x02v1\x12\x03Pod\x12\x00"))
	f.Add([]byte("k8s\x00"))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecodeRoundTrip(t, body, protobufContentType) })
}

// FuzzDeleteOptions fuzzes a DELETE's query and body (kubectl sends DeleteOptions in the
// body, without kind).
func FuzzDeleteOptions(f *testing.F) {
	f.Add("gracePeriodSeconds=0", []byte(`{"propagationPolicy":"Foreground"}`))
	f.Add("dryRun=All", []byte(`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"x","resourceVersion":"1"}}`))
	f.Add("propagationPolicy=Orphan&orphanDependents=true", []byte(nil))
	f.Add("", []byte(`{"gracePeriodSeconds":-1}`))
	f.Fuzz(func(t *testing.T, query string, body []byte) {
		r := httptest.NewRequest(http.MethodDelete, "/api/v1/namespaces/default/pods/p", bytes.NewReader(body))
		r.URL.RawQuery = query
		opts, err := deleteOptions(r)
		requireClientError(t, err)
		if err == nil && opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
			t.Fatalf("negative grace period accepted: %d", *opts.GracePeriodSeconds)
		}
	})
}

// FuzzResourcePath fuzzes the URL path after the group version: a 404 Status or a
// RequestInfo whose parts are path segments of it.
func FuzzResourcePath(f *testing.F) {
	f.Add("namespaces/default/pods/p/status")
	f.Add("namespaces/default")
	f.Add("nodes/n/proxy")
	f.Add("//namespaces//pods/")
	gv := &APIGroupVersion{GroupVersion: corev1.SchemeGroupVersion, Resources: []Resource{
		{Name: "pods", Namespaced: true}, {Name: "nodes"}, {Name: "namespaces"},
	}}
	gv.index()
	f.Fuzz(func(t *testing.T, path string) {
		info, err := parseResourcePath(path, gv)
		if err != nil {
			if !apierrors.IsNotFound(err) {
				t.Fatalf("error is not a 404 Status: %v", err)
			}
			return
		}
		for _, part := range []string{info.Namespace, info.Resource, info.Name, info.Subresource} {
			if strings.Contains(part, "/") {
				t.Fatalf("%q: part %q holds a slash: %+v", path, part, info)
			}
		}
		if info.Namespace != "" && !gv.resources[info.Resource].Namespaced {
			t.Fatalf("%q: namespace on a cluster-scoped resource: %+v", path, info)
		}
	})
}

// FuzzAccept fuzzes the Accept header of a response: whatever it says, the response is
// the object in JSON or protobuf with the code asked for, never a 500.
func FuzzAccept(f *testing.F) {
	f.Add("application/json;as=Table;g=meta.k8s.io;v=v1, application/json")
	f.Add("application/vnd.kubernetes.protobuf, */*")
	f.Add("application/json;q=0.5;;;=")
	f.Add("text/html")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	f.Fuzz(func(t *testing.T, accept string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods/p", nil)
		r.Header.Set("Accept", accept)
		_ = wantsTable(r)
		w := httptest.NewRecorder()
		writeObject(w, r, http.StatusOK, corev1.SchemeGroupVersion, pod.DeepCopy())
		if w.Code != http.StatusOK {
			t.Fatalf("Accept %q: code %d: %s", accept, w.Code, w.Body)
		}
		switch ct := w.Header().Get("Content-Type"); ct {
		case "application/json", protobufContentType:
		default:
			t.Fatalf("Accept %q: Content-Type %q", accept, ct)
		}
	})
}
