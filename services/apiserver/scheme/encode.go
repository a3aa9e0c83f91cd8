package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// Encode returns obj encoded by enc, as runtime.Encode does, but when enc can encode into
// memory it is handed (runtime.EncoderWithAllocator: the protobuf serializer, and codecs
// over it) the bytes are the memory alloc gave, in one allocation: runtime.Encode's
// buffer grows on the way and then copies the serializer's bytes once more. Pass a
// runtime.SimpleAllocator to keep the bytes, or a pooled *runtime.Allocator when they
// are written out before the allocator is reused (the result aliases its buffer).
// Errors are enc's.
func Encode(enc runtime.Encoder, obj runtime.Object, alloc runtime.MemoryAllocator) ([]byte, error) {
	ea, ok := enc.(runtime.EncoderWithAllocator)
	if !ok {
		return runtime.Encode(enc, obj)
	}
	w := captureWriter{alloc: alloc}
	if err := ea.EncodeWithAllocator(obj, &w, &w); err != nil {
		return nil, err
	}
	return w.data, nil
}

// captureWriter hands out alloc's memory and keeps what is written to it: a first write
// of that very memory (the protobuf serializer's one write) as is, anything else copied,
// since an io.Writer must not keep what it is given (an encoder over JSON writes from
// a pooled buffer).
type captureWriter struct {
	alloc runtime.MemoryAllocator
	given []byte
	data  []byte
}

func (w *captureWriter) Allocate(n uint64) []byte {
	w.given = w.alloc.Allocate(n)
	return w.given
}

func (w *captureWriter) Write(p []byte) (int, error) {
	if w.data == nil && len(p) > 0 && len(w.given) > 0 && &p[0] == &w.given[0] {
		w.data = p
	} else {
		w.data = append(w.data[:len(w.data):len(w.data)], p...)
	}
	return len(p), nil
}
