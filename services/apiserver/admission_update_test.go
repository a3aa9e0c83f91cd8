package apiserver_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// TestAdmissionSeesUpdatesWithTheStoredObject pins that PUT and PATCH reach admission
// with the new object and the one it replaces: NodeRestriction's update rules, which
// compare the two, refuse what they must over real HTTP, for JSON and protobuf bodies.
func TestAdmissionSeesUpdatesWithTheStoredObject(t *testing.T) {
	s := controlplanetest.StartServer(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(s.Config)
	nodeConfig := s.ClientConfig("system:node:n1", "system:nodes")
	nodeConfig.ContentType = "application/vnd.kubernetes.protobuf"
	node := kubernetes.NewForConfigOrDie(nodeConfig)

	n1, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod("web")
	pod.Spec.NodeName = "n1"
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a node's status update that keeps its taints is admitted", func(t *testing.T) {
		n1.Status.Phase = corev1.NodeRunning
		if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, n1, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a node may not give itself taints by PUT", func(t *testing.T) {
		current, err := node.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		current.Spec.Taints = []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}
		_, err = node.CoreV1().Nodes().Update(ctx, current, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `node "n1" is not allowed to modify taints`) {
			t.Fatalf("err %v; want 403 on taints", err)
		}
	})
	t.Run("a node may not label itself a control plane by PATCH", func(t *testing.T) {
		_, err := node.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is not allowed to modify labels: node-role.kubernetes.io/control-plane") {
			t.Fatalf("err %v; want 403 on labels", err)
		}
	})
	t.Run("the admin may taint the node", func(t *testing.T) {
		_, err := admin.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType,
			[]byte(`{"spec":{"taints":[{"key":"dedicated","effect":"NoSchedule"}]}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a node may not relabel its pod through pod status", func(t *testing.T) {
		_, err := node.CoreV1().Pods("default").Patch(ctx, "web", types.StrategicMergePatchType,
			[]byte(`{"metadata":{"labels":{"app":"other"}}}`), metav1.PatchOptions{}, "status")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `node "n1" cannot update labels through pod status`) {
			t.Fatalf("err %v; want 403 on labels through status", err)
		}
	})
}
