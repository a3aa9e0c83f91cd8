package apiserver_test

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// TestDeletePropagationPolicy pins what each propagationPolicy leaves behind for the
// garbage collector: Orphan and Foreground keep the object, marked, with their
// finalizer; Background (and no policy) removes it at once.
func TestDeletePropagationPolicy(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		opts          metav1.DeleteOptions
		wantFinalizer string // "" means the object is gone
	}{
		{name: "orphan-adds-orphan-finalizer", opts: metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}, wantFinalizer: metav1.FinalizerOrphanDependents},
		{name: "legacy-orphan-dependents", opts: metav1.DeleteOptions{OrphanDependents: ptr.To(true)}, wantFinalizer: metav1.FinalizerOrphanDependents},
		{name: "foreground-adds-foreground-finalizer", opts: metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}, wantFinalizer: metav1.FinalizerDeleteDependents},
		{name: "background-deletes-at-once", opts: metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}},
		{name: "no-policy-is-background", opts: metav1.DeleteOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod(tc.name), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := cs.CoreV1().Pods("default").Delete(ctx, tc.name, tc.opts); err != nil {
				t.Fatal(err)
			}
			got, err := cs.CoreV1().Pods("default").Get(ctx, tc.name, metav1.GetOptions{})
			if tc.wantFinalizer == "" {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("want the pod gone, get: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("want the pod held by %s: %v", tc.wantFinalizer, err)
			}
			if got.DeletionTimestamp == nil || !slices.Equal(got.Finalizers, []string{tc.wantFinalizer}) {
				t.Fatalf("deletionTimestamp %v finalizers %v, want marked with [%s]", got.DeletionTimestamp, got.Finalizers, tc.wantFinalizer)
			}
			// The collector's last step: removing the finalizer finishes the delete.
			if _, err := cs.CoreV1().Pods("default").Patch(ctx, tc.name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Pods("default").Get(ctx, tc.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("removing the last finalizer deletes the pod; get: %v", err)
			}
		})
	}
}

func TestDeletePropagationOptionsAreValidated(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]metav1.DeleteOptions{
		"unknown-policy": {PropagationPolicy: ptr.To(metav1.DeletionPropagation("Sideways"))},
		"both-set":       {PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan), OrphanDependents: ptr.To(true)},
	} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, "p", opts); !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want 422 Invalid", name, err)
		}
	}
}
