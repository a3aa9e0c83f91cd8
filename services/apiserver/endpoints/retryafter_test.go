package endpoints

import (
	"errors"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestWriteErrorRetryAfter: a status that says when to retry says it in the Retry-After
// header too (kube's responsewriters.ErrorNegotiated), which is what client-go reads.
func TestWriteErrorRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewTimeoutError("etcd did not answer", 1), "1"},
		{apierrors.NewTooManyRequests("slow down", 3), "3"},
		{apierrors.NewInternalError(errors.New("bug")), ""},
	} {
		w := httptest.NewRecorder()
		writeError(w, tc.err)
		if got := w.Header().Get("Retry-After"); got != tc.want {
			t.Errorf("writeError(%v): Retry-After %q, want %q", tc.err, got, tc.want)
		}
	}
}
