package apiserver_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// TestHostileRequestsGetAStatusAndStoreNothing sends malformed, oversized and
// nonsensical requests to a real apiserver: each is answered by the metav1.Status
// kube-apiserver gives, never a 500 or a dropped connection, and none stores an object.
func TestHostileRequestsGetAStatusAndStoreNothing(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	cms := srv.URL + "/api/v1/namespaces/default/configmaps"
	cm := func(data string) string {
		return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"hostile"},"data":{"k":"` + data + `"}}`
	}
	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	tests := []struct {
		name, method, url, contentType, body string
		wantCode                             int
		wantReason                           metav1.StatusReason
		wantMessage                          string
	}{
		{"malformed JSON", "POST", cms, "application/json", `{"kind":"ConfigMap",`, 400, metav1.StatusReasonBadRequest, "cannot be handled as a ConfigMap"},
		{"JSON of the wrong shape", "POST", cms, "application/json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"hostile"},"data":["a"]}`, 400, metav1.StatusReasonBadRequest, "cannot be handled as a ConfigMap"},
		{"malformed YAML", "POST", cms, "application/yaml", "kind: ConfigMap\napiVersion: v1\nmetadata: [name: {\n", 400, metav1.StatusReasonBadRequest, ""},
		{"malformed protobuf", "POST", cms, "application/vnd.kubernetes.protobuf", "k8s\x00\x0a\xff\xff\xff\xff\x0f garbage", 400, metav1.StatusReasonBadRequest, ""},
		{"deeply nested JSON", "POST", cms, "application/json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"hostile"},"x":` + deep + `}`, 400, metav1.StatusReasonBadRequest, ""},
		{"a 4 MiB string", "POST", cms, "application/json", cm(strings.Repeat("x", 4<<20)), 413, metav1.StatusReasonRequestEntityTooLarge, "limit is 3145728"},
		{"invalid name", "POST", cms, "application/json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"-Bad_Name-"}}`, 422, metav1.StatusReasonInvalid, "metadata.name: Invalid value"},
		{"invalid label", "POST", cms, "application/json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"hostile","labels":{"a b":"c"}}}`, 422, metav1.StatusReasonInvalid, "metadata.labels: Invalid value"},
		{"invalid label value", "POST", cms, "application/json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"hostile","labels":{"a":"` + strings.Repeat("v", 64) + `"}}}`, 422, metav1.StatusReasonInvalid, "metadata.labels: Invalid value"},
		{"invalid label selector", "GET", cms + "?labelSelector=a%3D%3D%3Db", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"invalid field selector", "GET", cms + "?fieldSelector=metadata.name%3D%3D%3Dx", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"unknown field with fieldValidation=Strict", "POST", cms + "?fieldValidation=Strict", "application/json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"hostile"},"bogus":1}`, 400, metav1.StatusReasonBadRequest, `strict decoding error: unknown field "bogus"`},
		{"unknown fieldValidation", "POST", cms + "?fieldValidation=Loose", "application/json", cm("v"), 422, metav1.StatusReasonInvalid, "fieldValidation: Unsupported value"},
		{"text/plain body", "POST", cms, "text/plain", cm("v"), 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"a wildcard content type", "POST", cms, "*/*", cm("v"), 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"malformed resourceVersion", "GET", cms + "?resourceVersion=abc", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"list at a resourceVersion from the future", "GET", cms + "?resourceVersion=999999999&resourceVersionMatch=NotOlderThan", "", "", 504, metav1.StatusReasonTimeout, "Too large resource version"},
		{"get at a resourceVersion from the future", "GET", cms + "/kube-root-ca.crt?resourceVersion=999999999", "", "", 504, metav1.StatusReasonTimeout, "Too large resource version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, status, body := do(t, srv.HTTPClient(), tt.method, tt.url, tt.contentType, tt.body)
			if code != tt.wantCode || status == nil {
				t.Fatalf("code %d, want %d; body %.300s", code, tt.wantCode, body)
			}
			if status.Code != int32(tt.wantCode) || status.Reason != tt.wantReason || status.Status != metav1.StatusFailure {
				t.Errorf("status %+v, want code %d reason %s", status, tt.wantCode, tt.wantReason)
			}
			if !strings.Contains(status.Message, tt.wantMessage) {
				t.Errorf("message %q, want it to contain %q", status.Message, tt.wantMessage)
			}
		})
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), "hostile", metav1.GetOptions{}); err == nil {
		t.Error("a hostile request stored ConfigMap hostile")
	}
}
