package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"skiff.dev/services/apiserver/registry"
)

// TestInterpretErrorEtcdUnavailable: an etcd that cannot answer now (no leader, a request
// timed out, the connection lost, a deadline) is a 503 or 504 with Retry-After, which
// client-go retries, never a 500; other errors stay 500.
func TestInterpretErrorEtcdUnavailable(t *testing.T) {
	e := &registry.Store{}
	for _, tc := range []struct {
		name       string
		err        error
		code       int32
		retryAfter int32
	}{
		{"no leader", fmt.Errorf("create /registry/pods/a: %w", rpctypes.ErrNoLeader), http.StatusServiceUnavailable, 1},
		{"request timed out", fmt.Errorf("get /registry/pods/a: %w", rpctypes.ErrTimeout), http.StatusServiceUnavailable, 1},
		{"gRPC unavailable", fmt.Errorf("list: %w", status.Error(codes.Unavailable, "connection refused")), http.StatusServiceUnavailable, 1},
		{"gRPC deadline", fmt.Errorf("list: %w", status.Error(codes.DeadlineExceeded, "deadline")), http.StatusGatewayTimeout, 1},
		{"context deadline", fmt.Errorf("list: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, 1},
		{"anything else", errors.New("decode: garbage"), http.StatusInternalServerError, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st apierrors.APIStatus
			if !errors.As(e.InterpretError(tc.err, "a"), &st) {
				t.Fatalf("InterpretError(%v) is no API status", tc.err)
			}
			s := st.Status()
			var retryAfter int32
			if s.Details != nil {
				retryAfter = s.Details.RetryAfterSeconds
			}
			if s.Code != tc.code || retryAfter != tc.retryAfter {
				t.Errorf("InterpretError(%v) = %d with Retry-After %d, want %d with %d", tc.err, s.Code, retryAfter, tc.code, tc.retryAfter)
			}
		})
	}
}
