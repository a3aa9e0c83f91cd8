package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// TestNamespaceStatusSubresource: namespaces/status reads and writes the status only,
// and its phase must agree with the deletion state (kube's ValidateNamespaceStatusUpdate).
func TestNamespaceStatusSubresource(t *testing.T) {
	cfg := controlplanetest.Start(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "st"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"annotations":{"patched":"yes"}},"spec":{"finalizers":["ignored"]},"status":{"conditions":[{"type":"StatusUpdate","status":"True","reason":"E2E","message":"Set from a test"}]}}`
	ns, err := client.CoreV1().Namespaces().Patch(ctx, "st", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Status.Conditions) != 1 || ns.Status.Conditions[0].Reason != "E2E" {
		t.Errorf("conditions = %v, want the patched one", ns.Status.Conditions)
	}
	if ns.Annotations["patched"] != "yes" {
		t.Error("a status patch did not apply its annotation, as kube's does")
	}
	if len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
		t.Errorf("a status patch changed spec.finalizers to %v", ns.Spec.Finalizers)
	}
	ns.Status.Phase = corev1.NamespaceTerminating
	if _, err := client.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may only be 'Active'") {
		t.Errorf("phase Terminating without deletion: %v, want 422", err)
	}
}

// TestTableOfAResourceWithoutOne: asking for only a Table of a resource that cannot
// print one (a SelfSubjectAccessReview) is 406; with a JSON fallback it is the object.
func TestTableOfAResourceWithoutOne(t *testing.T) {
	cfg := controlplanetest.Start(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}}}
	err := client.AuthorizationV1().RESTClient().Post().Resource("selfsubjectaccessreviews").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Body(sar).Do(ctx).Error()
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusNotAcceptable {
		t.Errorf("a Table of a SelfSubjectAccessReview: %v, want 406", err)
	}
	err = client.AuthorizationV1().RESTClient().Post().Resource("selfsubjectaccessreviews").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io, application/json").Body(sar).Do(ctx).Error()
	if err != nil {
		t.Errorf("with a JSON fallback: %v, want the review", err)
	}
}
