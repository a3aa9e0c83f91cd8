package namespace_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controllermanager/namespace"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// TestNamespaceIsEmptiedThenRemoved runs the controller as system:kube-controller-manager
// against an apiserver alone: without it a deleted namespace stays Terminating with its
// contents; with it the contents of every discovered resource go (a ConfigMap, a Role, a
// pod, a Deployment), then the kubernetes finalizer, then the namespace.
func TestNamespaceIsEmptiedThenRemoved(t *testing.T) {
	srv := controlplanetest.StartServerWithoutControllers(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller made a default ServiceAccount: a pod is refused, as kube's admission does.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	_, err := admin.CoreV1().Pods("doomed").Create(ctx, pod, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "error looking up service account doomed/default") {
		t.Fatalf("pod without a default ServiceAccount: %v, want Forbidden: error looking up service account", err)
	}
	pod.Spec.AutomountServiceAccountToken = new(bool)
	pod.Spec.NodeName = "n1" // bound: its delete is graceful, waiting for a kubelet
	if _, err := admin.CoreV1().ServiceAccounts("doomed").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods("doomed").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := admin.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
	if err != nil || got.Status.Phase != corev1.NamespaceTerminating || len(got.Spec.Finalizers) != 1 {
		t.Fatalf("deleted namespace = %+v, %v; want Terminating with the kubernetes finalizer", got, err)
	}

	config := srv.ClientConfig(pki.ControllerManager.CommonName, pki.ControllerManager.Organizations...)
	client := kubernetes.NewForConfigOrDie(config)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := namespace.New(factory.Core().V1().Namespaces(), client, client.Discovery(), dynamic.NewForConfigOrDie(config))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx, 2) }()
	factory.Start(runCtx.Done())
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })

	// The pod has no kubelet to confirm its graceful deletion: it stays, and so does
	// the namespace, as in kube, until the pod goes.
	waitFor(t, "the ConfigMap deleted and the pod marked", func() bool {
		_, cmErr := admin.CoreV1().ConfigMaps("doomed").Get(ctx, "cm", metav1.GetOptions{})
		p, err := admin.CoreV1().Pods("doomed").Get(ctx, "p", metav1.GetOptions{})
		return apierrors.IsNotFound(cmErr) && err == nil && p.DeletionTimestamp != nil
	})
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace gone while its pod terminates: %v", err)
	}
	if err := admin.CoreV1().Pods("doomed").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, "the namespace removed", func() bool {
		_, err := admin.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestFinalize pins namespaces/NAME/finalize: it changes only spec.finalizers, and a
// terminating namespace goes when the last one does.
func TestFinalize(t *testing.T) {
	srv := controlplanetest.StartServerWithoutControllers(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fin"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = append(ns.Spec.Finalizers, "example.com/mine")
	ns.Labels["ignored"] = "yes"
	ns, err = admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Spec.Finalizers) != 2 || ns.Labels["ignored"] != "" {
		t.Fatalf("finalize wrote %v and labels %v; want two finalizers and no label change", ns.Spec.Finalizers, ns.Labels)
	}
	ns.Spec.Finalizers = []corev1.FinalizerName{"not a qualified name!"}
	if _, err := admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("finalize with a bad finalizer: %v, want Invalid", err)
	}
	if err := admin.CoreV1().Namespaces().Delete(ctx, "fin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err = admin.CoreV1().Namespaces().Get(ctx, "fin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A label change on a terminating namespace does not remove it.
	ns.Labels["x"] = "y"
	if ns, err = admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = []corev1.FinalizerName{"example.com/mine"}
	if ns, err = admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "fin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("finalized terminating namespace: %v, want NotFound", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
