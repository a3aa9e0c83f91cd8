package runtimeclass

import (
	"context"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestLookupRuntimeHandler(t *testing.T) {
	m := NewManager(fake.NewClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}))
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		class     *string
		want      string
		wantError func(error) bool
	}{
		{"no class is the default handler", nil, "", nil},
		{"an empty class is the default handler", ptr.To(""), "", nil},
		{"a class is its handler", ptr.To("gvisor"), "runsc", nil},
		{"a missing class is NotFound", ptr.To("missing"), "", apierrors.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.LookupRuntimeHandler(ctx, tc.class)
			if tc.wantError != nil {
				if !tc.wantError(err) {
					t.Errorf("got %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q %v, want %q", got, err, tc.want)
			}
		})
	}
}
