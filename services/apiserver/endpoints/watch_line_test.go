package endpoints

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

func TestWatchEventLineIsTheMarshalledWatchEvent(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", ResourceVersion: "7"}}
	data, err := runtime.Encode(encoderFor(pod, schema.GroupVersion{Version: "v1"}), pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		want, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: data}})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendWatchEventLine(nil, typ, data); string(got) != string(want)+"\n" {
			t.Errorf("%s:\n got %s\nwant %s", typ, got, want)
		}
	}
}

// TestWatchFramesReuseOneBuffer frames a large event and then a small one in the same
// buffer, as a watch does from event to event: each frame is exactly that event's,
// nothing of the one before left in it.
func TestWatchFramesReuseOneBuffer(t *testing.T) {
	large := []byte(`{"kind":"Pod","metadata":{"name":"a-pod-with-a-long-name","annotations":{"a":"bbbbbbbbbbbbbbbbbbbbbbbb"}}}`)
	small := []byte(`{"kind":"Pod"}`)
	var frame []byte
	for _, data := range [][]byte{large, small} {
		frame = appendWatchEventLine(frame[:0], watch.Modified, data)
		if want := `{"type":"MODIFIED","object":` + string(data) + "}\n"; string(frame) != want {
			t.Fatalf("JSON frame %q; want %q", frame, want)
		}
	}
	frame = nil
	for _, data := range [][]byte{large, small} {
		var err error
		if frame, err = appendProtobufWatchFrame(frame[:0], watch.Deleted, data); err != nil {
			t.Fatal(err)
		}
		if n := binary.BigEndian.Uint32(frame[:4]); int(n) != len(frame)-4 {
			t.Fatalf("protobuf frame of %d bytes says %d after its 4-byte length", len(frame), n)
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame[4:]); err != nil || ev.Type != string(watch.Deleted) || string(ev.Object.Raw) != string(data) {
			t.Fatalf("protobuf frame decodes to %s %q (%v); want DELETED %q", ev.Type, ev.Object.Raw, err, data)
		}
	}
	// Appended, not written over what the buffer already holds.
	prefixed, err := appendProtobufWatchFrame([]byte("x"), watch.Deleted, small)
	if err != nil || prefixed[0] != 'x' || string(prefixed[1:]) != string(frame) {
		t.Fatalf("frame appended to %q: %q (%v); want %q after it", "x", prefixed, err, frame)
	}
}
