package scheme

import (
	"bytes"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// storageCodec is StorageCodec: the codec it wraps encodes, and decodes anything but the
// common case, which Decode reads itself.
type storageCodec struct {
	runtime.Codec
}

// EncodeWithAllocator encodes with the wrapped codec into alloc's memory (see Encode).
func (c storageCodec) EncodeWithAllocator(obj runtime.Object, w io.Writer, alloc runtime.MemoryAllocator) error {
	if ea, ok := c.Codec.(runtime.EncoderWithAllocator); ok {
		return ea.EncodeWithAllocator(obj, w, alloc)
	}
	return c.Codec.Encode(obj, w)
}

// protobufPrefix opens every object the protobuf serializer writes ("k8s" and a zero
// byte), before the runtime.Unknown envelope that holds it.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Fields of the runtime.Unknown envelope and of its TypeMeta
// (k8s.io/apimachinery/pkg/runtime/generated.proto).
const (
	unknownTypeMeta        protowire.Number = 1
	unknownRaw             protowire.Number = 2
	unknownContentEncoding protowire.Number = 3
	unknownContentType     protowire.Number = 4
	typeMetaAPIVersion     protowire.Number = 1
	typeMetaKind           protowire.Number = 2
)

// protoUnmarshaler is what the k8s.io/api types generate: Unmarshal decodes a protobuf
// message into the object (merging into what it holds: Reset first), copying what it
// keeps (strings, bytes) out of the data.
type protoUnmarshaler interface {
	Reset()
	Unmarshal(data []byte) error
}

// Decode decodes a stored object. When into is an object of the very kind the data
// holds in the protobuf envelope (what the store writes), the object's bytes are
// unmarshalled into it where they lie in data, and into is returned; the protobuf
// serializer first copies them out of the envelope (runtime.Unknown.Unmarshal), a
// stored object's worth of garbage for every object the store decodes: 4 % of the
// control plane's allocations in the 5,000-pod benchmark (docs/performance.md). Anything
// else (JSON, another kind, into nil or with nested objects to decode, an envelope with
// a content encoding) goes to the wrapped codec, as does the error of malformed data.
// The result is the object the wrapped codec decodes
// (TestStorageDecodeGivesWhatTheCodecGives).
func (c storageCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into == nil || !bytes.HasPrefix(data, protobufPrefix) {
		return c.Codec.Decode(data, defaults, into)
	}
	pb, ok := into.(protoUnmarshaler)
	if _, nested := into.(runtime.NestedObjectDecoder); !ok || nested {
		return c.Codec.Decode(data, defaults, into)
	}
	kinds, _, err := Scheme.ObjectKinds(into)
	if err != nil || len(kinds) != 1 {
		return c.Codec.Decode(data, defaults, into)
	}
	raw, ok := envelopeOf(data[len(protobufPrefix):], kinds[0])
	if !ok {
		return c.Codec.Decode(data, defaults, into)
	}
	pb.Reset()
	if err := pb.Unmarshal(raw); err != nil {
		return c.Codec.Decode(data, defaults, into)
	}
	into.GetObjectKind().SetGroupVersionKind(kinds[0])
	Scheme.Default(into) // as the wrapped codec does after decoding
	return into, &kinds[0], nil
}

// envelopeOf reads a runtime.Unknown and returns its raw bytes (a slice of b) when it
// holds an object of kind gvk in plain protobuf; ok is false otherwise, or when b is not
// a well-formed envelope.
func envelopeOf(b []byte, gvk schema.GroupVersionKind) (raw []byte, ok bool) {
	var typeMetaOK bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case unknownTypeMeta:
			typeMetaOK = typeMetaIs(v, gvk)
		case unknownRaw:
			raw = v
		case unknownContentEncoding:
			if len(v) > 0 {
				return nil, false
			}
		case unknownContentType:
			// The serializer leaves it empty; anything else is not plain protobuf.
			if len(v) > 0 {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return raw, typeMetaOK
}

// typeMetaIs reports whether the TypeMeta message b names gvk.
func typeMetaIs(b []byte, gvk schema.GroupVersionKind) bool {
	var apiVersion, kind []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case typeMetaAPIVersion:
			apiVersion = v
		case typeMetaKind:
			kind = v
		}
	}
	if string(kind) != gvk.Kind {
		return false
	}
	if gvk.Group == "" { // the core group's apiVersion is its version alone
		return string(apiVersion) == gvk.Version
	}
	// "group/version", compared without building it
	return len(apiVersion) == len(gvk.Group)+1+len(gvk.Version) &&
		string(apiVersion[:len(gvk.Group)]) == gvk.Group && apiVersion[len(gvk.Group)] == '/' &&
		string(apiVersion[len(gvk.Group)+1:]) == gvk.Version
}
