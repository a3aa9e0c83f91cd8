package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// runtimeClassPod is the conformance suite's NewRuntimeClassPod.
func runtimeClassPod(class string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-runtimeclass-" + class + "-"},
		Spec: corev1.PodSpec{
			RuntimeClassName:             ptr.To(class),
			Containers:                   []corev1.Container{{Name: "test", Image: "busybox", Command: []string{"true"}}},
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
}

// TestRuntimeClassesServed covers node.k8s.io/v1 runtimeclasses as the conformance
// suite's RuntimeClass tests use them: discovery, create (409 on a second create),
// watch, get, list by label, merge patch, update, delete and delete-collection; and the
// RuntimeClass admission plugin on pod create: a missing or deleted class is a 403, a
// class's overhead is set on the pod.
func TestRuntimeClassesServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	classes := cs.NodeV1().RuntimeClasses()
	selector := metav1.ListOptions{LabelSelector: "test=rc"}
	newClass := func(name, handler string) *nodev1.RuntimeClass {
		return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": "rc"}}, Handler: handler}
	}

	t.Run("discovery", func(t *testing.T) {
		resources, err := cs.Discovery().ServerResourcesForGroupVersion("node.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		if len(resources.APIResources) != 1 || resources.APIResources[0].Name != "runtimeclasses" || resources.APIResources[0].Namespaced ||
			strings.Join(resources.APIResources[0].Verbs, ",") != "create,delete,deletecollection,get,list,patch,update,watch" {
			t.Errorf("resources %+v", resources.APIResources)
		}
	})

	created, err := classes.Create(ctx, newClass("rc-1", "handler-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := classes.Create(ctx, newClass("rc-1", "handler-1"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: got %v, want 409", err)
	}
	if _, err := classes.Create(ctx, newClass("rc-2", "handler-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := classes.Watch(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := classes.Create(ctx, newClass("rc-3", "handler-3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("get, list, patch, update, watch", func(t *testing.T) {
		got, err := classes.Get(ctx, "rc-1", metav1.GetOptions{})
		if err != nil || got.UID != created.UID || got.Handler != "handler-1" {
			t.Fatalf("get: %v %+v", err, got)
		}
		list, err := classes.List(ctx, selector)
		if err != nil || len(list.Items) != 3 {
			t.Fatalf("list: %v %+v", err, list)
		}
		patched, err := classes.Patch(ctx, "rc-1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"true"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Annotations["patched"] != "true" {
			t.Fatalf("patch: %v %+v", err, patched)
		}
		toUpdate := patched.DeepCopy()
		toUpdate.Annotations["updated"] = "true"
		updated, err := classes.Update(ctx, toUpdate, metav1.UpdateOptions{})
		if err != nil || updated.Annotations["updated"] != "true" {
			t.Fatalf("update: %v %+v", err, updated)
		}
		var added, modified int
		for added < 1 || modified < 2 {
			select {
			case ev := <-w.ResultChan():
				if _, ok := ev.Object.(*nodev1.RuntimeClass); !ok {
					t.Fatalf("watch event %s %T", ev.Type, ev.Object)
				}
				switch ev.Type {
				case watch.Added:
					added++
				case watch.Modified:
					modified++
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("watch: %d added, %d modified", added, modified)
			}
		}
	})

	t.Run("the handler is immutable and an update names its resourceVersion", func(t *testing.T) {
		rc, err := classes.Get(ctx, "rc-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rc.Handler = "other"
		if _, err := classes.Update(ctx, rc, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			err.Error() != `RuntimeClass.node.k8s.io "rc-1" is invalid: handler: Invalid value: "other": field is immutable` {
			t.Errorf("handler change: %v", err)
		}
		rc.Handler, rc.ResourceVersion = "handler-1", ""
		if _, err := classes.Update(ctx, rc, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			err.Error() != `runtimeclasses.node.k8s.io "rc-1" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update` {
			t.Errorf("update without a resourceVersion: %v", err)
		}
		bad := newClass("rc-bad", "Not_A_Label")
		if _, err := classes.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `handler: Invalid value: "Not_A_Label"`) {
			t.Errorf("bad handler: %v", err)
		}
	})

	t.Run("pods of a missing or deleted class are refused", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, runtimeClassPod("default-nonexistent"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || err.Error() != `pods is forbidden: pod rejected: RuntimeClass "default-nonexistent" not found` {
			t.Errorf("missing class: %v", err)
		}
		if _, err := classes.Create(ctx, newClass("delete-me", "runc"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := classes.Delete(ctx, "delete-me", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, runtimeClassPod("delete-me"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("deleted class: %v", err)
		}
	})

	t.Run("a pod gets its class's overhead", func(t *testing.T) {
		rc := newClass("with-overhead", "test-handler")
		rc.Overhead = &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("1Mi")}}
		if _, err := classes.Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod, err := cs.CoreV1().Pods("default").Create(ctx, runtimeClassPod("with-overhead"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cpu, mem := pod.Spec.Overhead[corev1.ResourceCPU], pod.Spec.Overhead[corev1.ResourceMemory]
		if cpu.String() != "10m" || mem.String() != "1Mi" {
			t.Errorf("overhead %v", pod.Spec.Overhead)
		}
		plain, err := cs.CoreV1().Pods("default").Create(ctx, runtimeClassPod("rc-2"), metav1.CreateOptions{})
		if err != nil || len(plain.Spec.Overhead) != 0 {
			t.Errorf("class without overhead: %v %v", err, plain.Spec.Overhead)
		}
	})

	t.Run("deleted one by one and by collection", func(t *testing.T) {
		if err := classes.Delete(ctx, "rc-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := classes.Get(ctx, "rc-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after delete: %v", err)
		}
		if err := classes.DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
			t.Fatal(err)
		}
		if list, err := classes.List(ctx, selector); err != nil || len(list.Items) != 0 {
			t.Errorf("left: %v %+v", err, list)
		}
	})
}
