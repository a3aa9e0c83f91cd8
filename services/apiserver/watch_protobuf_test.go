package apiserver_test

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	"skiff.dev/services/controlplanetest"
)

// TestWatchServesProtobufToClientsThatPreferIt watches pods with client-go's Accept header
// (protobuf, then JSON) and reads the stream as client-go's protobuf StreamDecoder does:
// length-prefixed frames of protobuf WatchEvents whose objects are protobuf pods. A JSON
// Accept header still gets JSON lines.
func TestWatchServesProtobufToClientsThatPreferIt(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watchPods := func(accept string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=20", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := srv.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	pb := watchPods("application/vnd.kubernetes.protobuf,application/json")
	js := watchPods("application/json")
	if got := pb.Header.Get("Content-Type"); got != "application/vnd.kubernetes.protobuf;stream=watch" {
		t.Fatalf("Content-Type with protobuf preferred = %q", got)
	}
	if got := js.Header.Get("Content-Type"); got != "application/json" {
		t.Fatalf("Content-Type with JSON = %q", got)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("pb"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var size [4]byte
	if _, err := io.ReadFull(pb.Body, size[:]); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(pb.Body, frame); err != nil {
		t.Fatal(err)
	}
	var ev metav1.WatchEvent
	if err := ev.Unmarshal(frame); err != nil {
		t.Fatalf("frame is not a protobuf WatchEvent: %v", err)
	}
	obj, err := runtime.Decode(clientscheme.Codecs.UniversalDeserializer(), ev.Object.Raw)
	if err != nil {
		t.Fatalf("event object: %v", err)
	}
	if pod, ok := obj.(*corev1.Pod); ev.Type != "ADDED" || !ok || pod.Name != "pb" || pod.Namespace != "default" {
		t.Errorf("event = %s %T %v, want ADDED of pod default/pb", ev.Type, obj, obj)
	}

	line := make([]byte, 1)
	if _, err := io.ReadFull(js.Body, line); err != nil || line[0] != '{' {
		t.Errorf("the JSON watch starts with %q (%v), want a JSON line", line, err)
	}
}
