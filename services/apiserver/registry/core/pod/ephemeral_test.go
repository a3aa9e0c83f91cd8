package pod_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// TestEphemeralContainers adds an ephemeral container as kubectl debug and the
// conformance suite do (a strategic merge patch of pods/ephemeralcontainers), and shows
// that they come only that way and only as additions.
func TestEphemeralContainers(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := cs.CoreV1().Pods("default")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}

	withEphemeral := pod.DeepCopy()
	withEphemeral.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}}}
	if _, err := pods.Create(ctx, withEphemeral, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.ephemeralContainers: Forbidden: cannot be set on create") {
		t.Fatalf("create with an ephemeral container: %v", err)
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []map[string]any{
		{"name": "debugger", "image": "busybox", "targetContainerName": "app", "stdin": true, "tty": true}}}})
	got, err := pods.Patch(ctx, "target", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "ephemeralcontainers")
	if err != nil {
		t.Fatal(err)
	}
	if ec := got.Spec.EphemeralContainers; len(ec) != 1 || ec[0].TargetContainerName != "app" || ec[0].TerminationMessagePath != "/dev/termination-log" || ec[0].ImagePullPolicy != corev1.PullAlways {
		t.Fatalf("ephemeral containers after the patch: %+v", ec)
	}

	// Only additions: changing or removing one is refused, with kube's words.
	got.Spec.EphemeralContainers[0].Image = "other"
	if _, err := pods.UpdateEphemeralContainers(ctx, "target", got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `existing ephemeral containers "debugger" may not be changed`) {
		t.Fatalf("changing an ephemeral container: %v", err)
	}
	got.Spec.EphemeralContainers = nil
	if _, err := pods.UpdateEphemeralContainers(ctx, "target", got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `existing ephemeral containers "debugger" may not be removed`) {
		t.Fatalf("removing an ephemeral container: %v", err)
	}
	// What would make it part of the workload, and a target that does not exist.
	bad, _ := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []map[string]any{
		{"name": "debugger", "image": "busybox", "targetContainerName": "app", "stdin": true, "tty": true},
		{"name": "bad", "image": "busybox", "targetContainerName": "nope", "ports": []map[string]any{{"containerPort": 80}}}}}})
	_, err = pods.Patch(ctx, "target", types.StrategicMergePatchType, bad, metav1.PatchOptions{}, "ephemeralcontainers")
	for _, want := range []string{`spec.ephemeralContainers[1].targetContainerName: Not found: "nope"`, "spec.ephemeralContainers[1].ports: Forbidden: cannot be set for an Ephemeral Container"} {
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("a bad ephemeral container: %v; want %q", err, want)
		}
	}
	// The main resource does not take them either.
	cur, _ := pods.Get(ctx, "target", metav1.GetOptions{})
	cur.Spec.EphemeralContainers = append(cur.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "sneaky", Image: "busybox"}})
	if _, err := pods.Update(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("an ephemeral container through a pod update: %v, want 422", err)
	}
}
