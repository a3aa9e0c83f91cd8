package endpoints

import (
	"encoding/binary"
	"reflect"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/scheme"
)

// watchEncodings holds the encodings of the objects the latest watch events carried, so
// an event delivered to many watchers is encoded once, not once per watcher: the watch
// cache hands every watcher of an event the same object (a pod's update goes to the
// scheduler, the controller manager's informer, its node's kubelet and any other
// watcher of pods). Mirrors kube's cachingObject (k8s.io/apiserver/pkg/storage/cacher),
// which keeps the serializations on the event's object instead.
var watchEncodings = newEncodingCache(watchEncodingCacheSize)

// watchEncodingCacheSize is how many recent (object, version) encodings are kept: events
// reach all their watchers within milliseconds, so a few hundred cover bursts of
// thousands of events a second. A watcher that falls further behind encodes for itself.
const watchEncodingCacheSize = 256

// encodingKey names one encoding: the object (compared by pointer: the watch cache's
// objects are never modified once stored) and the group version it is encoded as.
type encodingKey struct {
	obj      runtime.Object
	gv       schema.GroupVersion
	protobuf bool
}

// encodingCache is a fixed-size cache of encodings, evicting the oldest entry first.
// Entries keep their object alive, so a pointer is never reused while it is a key.
type encodingCache struct {
	mu      sync.Mutex
	entries map[encodingKey][]byte
	ring    []encodingKey
	next    int
}

func newEncodingCache(size int) *encodingCache {
	return &encodingCache{entries: make(map[encodingKey][]byte, size), ring: make([]encodingKey, size)}
}

// encode returns obj encoded as gv's JSON (encoderFor) or, with protobuf, as gv's
// protobuf (watchEncoder), from the cache when another watcher encoded the same object
// already. The result is shared: callers must not modify it. Objects that are not
// pointers are encoded and not cached.
func (c *encodingCache) encode(obj runtime.Object, gv schema.GroupVersion, protobuf bool) ([]byte, error) {
	if obj == nil || reflect.TypeOf(obj).Kind() != reflect.Pointer {
		return scheme.Encode(watchEncoder(obj, gv, protobuf), obj, &runtime.SimpleAllocator{})
	}
	key := encodingKey{obj: obj, gv: gv, protobuf: protobuf}
	c.mu.Lock()
	data, ok := c.entries[key]
	c.mu.Unlock()
	if ok {
		return data, nil
	}
	data, err := scheme.Encode(watchEncoder(obj, gv, protobuf), obj, &runtime.SimpleAllocator{})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; ok { // another watcher got there first
		return data, nil
	}
	if old := c.ring[c.next]; old.obj != nil {
		delete(c.entries, old)
	}
	c.ring[c.next] = key
	c.next = (c.next + 1) % len(c.ring)
	c.entries[key] = data
	return data, nil
}

// watchEncoder is the encoder of a watch event's object: JSON as encoderFor, or
// protobuf (with its "k8s\x00" envelope) as writeObject encodes a protobuf response.
func watchEncoder(obj runtime.Object, gv schema.GroupVersion, protobuf bool) runtime.Encoder {
	if !protobuf {
		return encoderFor(obj, gv)
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.GroupVersion() == gv || gvk.Group == metav1.GroupName {
		return scheme.ProtobufSerializer
	}
	if _, ok := obj.(*metav1.Status); ok {
		return scheme.Codecs.EncoderForVersion(scheme.ProtobufSerializer, schema.GroupVersion{Version: "v1"})
	}
	return scheme.Codecs.EncoderForVersion(scheme.ProtobufSerializer, gv)
}

// protobufWatchContentType is a protobuf watch stream's Content-Type: each event a
// length-prefixed frame (4 bytes, big-endian) holding a protobuf metav1.WatchEvent whose
// object is the protobuf encoding of the object. Mirrors kube-apiserver's protobuf
// StreamSerializer (LengthDelimitedFramer, RawSerializer for the WatchEvent).
const protobufWatchContentType = protobufContentType + ";stream=watch"

// appendProtobufWatchFrame appends to frame one encoded object framed as a protobuf
// watch event.
func appendProtobufWatchFrame(frame []byte, t watch.EventType, object []byte) ([]byte, error) {
	ev := metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: object}}
	start := len(frame)
	frame = slices.Grow(frame, 4+ev.Size())[:start+4+ev.Size()]
	n, err := ev.MarshalToSizedBuffer(frame[start+4:])
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(frame[start:start+4], uint32(n))
	return frame[:start+4+n], nil
}

// protobufWatchable reports whether storage's objects can be written as protobuf (the
// built-in types; not custom resources, which are JSON only, as in kube).
func protobufWatchable(storage any) bool {
	s, ok := storage.(interface{ New() runtime.Object })
	if !ok {
		return false
	}
	_, ok = s.New().(interface{ MarshalToSizedBuffer([]byte) (int, error) })
	return ok
}
