package endpoints

import (
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
