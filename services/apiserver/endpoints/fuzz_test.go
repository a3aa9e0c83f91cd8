package endpoints

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
