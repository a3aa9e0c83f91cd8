package endpoints

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestReadBodyRefusesOver3MiB covers both ways a body can be too large: a declared
// Content-Length (refused before reading) and a chunked body of unknown length (refused
// once the limit is read past).
func TestReadBodyRefusesOver3MiB(t *testing.T) {
	tests := []struct {
		name          string
		size          int
		contentLength int64 // -1: unknown (chunked)
		wantTooLarge  bool
	}{
		{"declared length over the limit", maxRequestBodyBytes + 1, maxRequestBodyBytes + 1, true},
		{"chunked body over the limit", 4 << 20, -1, true},
		{"chunked body at the limit", maxRequestBodyBytes, -1, false},
		{"declared length at the limit", maxRequestBodyBytes, maxRequestBodyBytes, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/api/v1/namespaces/default/configmaps", io.NopCloser(strings.NewReader(strings.Repeat("x", tt.size))))
			r.ContentLength = tt.contentLength
			body, err := readBody(r)
			if tt.wantTooLarge {
				if !apierrors.IsRequestEntityTooLargeError(err) {
					t.Fatalf("err %v, want 413 RequestEntityTooLarge", err)
				}
				return
			}
			if err != nil || len(body) != tt.size {
				t.Fatalf("read %d bytes, err %v; want %d", len(body), err, tt.size)
			}
		})
	}
}
