package etcd3_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/apiserver/storage"
)

func TestGetResourceVersionIsAMinimum(t *testing.T) {
	store, prefix := newTestStore(t)
	created := createPod(t, store, prefix, newPod(t, "a", "node-1"))
	current, err := store.CurrentRevision(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, rv string
		wantErr  error
	}{
		{"zero reads the latest state", "0", nil},
		{"an older revision reads the latest state", strconv.FormatInt(rvOf(t, created)-1, 10), nil},
		{"the current revision reads the latest state", strconv.FormatInt(current, 10), nil},
		{"a revision etcd has not reached is too large", strconv.FormatInt(current+1000, 10), storage.ErrResourceVersionTooLarge},
		{"a malformed revision is invalid", "abc", storage.ErrInvalidResourceVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &corev1.Pod{}
			err := store.Get(testContext(t), prefix+"a", storage.GetOptions{ResourceVersion: tc.rv}, out)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Get at %q: error %v, want %v", tc.rv, err, tc.wantErr)
			}
			if tc.wantErr == nil && out.ResourceVersion != created.ResourceVersion {
				t.Errorf("Get at %q = rv %s, want %s", tc.rv, out.ResourceVersion, created.ResourceVersion)
			}
		})
	}
}

func TestGetListNotOlderThanReadsTheLatestState(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	old, _ := store.CurrentRevision(testContext(t))
	createPod(t, store, prefix, newPod(t, "b", ""))
	compactAll(t)

	list := &corev1.PodList{}
	opts := storage.ListOptions{ResourceVersion: strconv.FormatInt(old, 10), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	if err := store.GetList(testContext(t), prefix, opts, list); err != nil {
		t.Fatalf("NotOlderThan a compacted revision: %v, want the latest state", err)
	}
	if got := strings.Join(names(list), ","); got != "a,b" {
		t.Errorf("items = %s, want a,b", got)
	}
	if rv, _ := strconv.ParseInt(list.ResourceVersion, 10, 64); rv <= old {
		t.Errorf("list resourceVersion = %s, want newer than %d", list.ResourceVersion, old)
	}

	latest, _ := strconv.ParseInt(list.ResourceVersion, 10, 64)
	opts.ResourceVersion = strconv.FormatInt(latest+1000, 10)
	if err := store.GetList(testContext(t), prefix, opts, &corev1.PodList{}); !errors.Is(err, storage.ErrResourceVersionTooLarge) {
		t.Errorf("NotOlderThan a future revision: %v, want ErrResourceVersionTooLarge", err)
	}
}
