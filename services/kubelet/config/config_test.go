package config

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "1", Labels: map[string]string{"a": "b"}},
		Spec:       v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "c", Image: "i:1"}}},
	}
}

func TestClassifyUpdate(t *testing.T) {
	tests := []struct {
		name        string
		mutate      func(p *v1.Pod)
		wantOp      PodOperation
		wantChanged bool
	}{
		{"only resourceVersion changed: nothing", func(p *v1.Pod) { p.ResourceVersion = "2" }, 0, false},
		{"status changed: RECONCILE", func(p *v1.Pod) { p.Status.Phase = v1.PodRunning }, RECONCILE, true},
		{"image changed: UPDATE", func(p *v1.Pod) { p.Spec.Containers[0].Image = "i:2" }, UPDATE, true},
		{"labels changed: UPDATE", func(p *v1.Pod) { p.Labels["a"] = "c" }, UPDATE, true},
		{"annotations changed: UPDATE", func(p *v1.Pod) { p.Annotations = map[string]string{"x": "y"} }, UPDATE, true},
		{"annotations from none to empty: nothing", func(p *v1.Pod) { p.Annotations = map[string]string{} }, 0, false},
		{"grace period shortened: UPDATE", func(p *v1.Pod) {
			p.DeletionGracePeriodSeconds = ptr.To[int64](0)
		}, UPDATE, true},
		{"deletionTimestamp set: DELETE", func(p *v1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
		}, DELETE, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := basePod()
			updated := basePod()
			tt.mutate(updated)
			op, changed := classifyUpdate(old, updated)
			if changed != tt.wantChanged || (changed && op != tt.wantOp) {
				t.Errorf("classifyUpdate = %s, %v; want %s, %v", op, changed, tt.wantOp, tt.wantChanged)
			}
		})
	}
}

// TestPodConfigPublishesChangesOfThisNodesPods runs PodConfig against a real apiserver
// holding pods of two nodes: every update is of this node's pods (the informer's
// spec.nodeName field selector, which the apiserver applies), and a pod's changes arrive
// as ADD, UPDATE, DELETE (graceful deletion sets deletionTimestamp) and REMOVE.
func TestPodConfigPublishesChangesOfThisNodesPods(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(name, node string) {
		t.Helper()
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec:       v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "i:1"}}},
		}
		if _, err := client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label := func(name, value string) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"step":"` + value + `"}}}`)
		if _, err := client.CoreV1().Pods("ns").Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("p", "n1")
	create("other", "n2")

	c := NewPodConfig(client, "n1", nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// next returns the next update, which must be of pod p: the watch delivers changes
	// in resourceVersion order, so another node's pod changed before p would come first
	// if the selector did not filter it.
	next := func(want PodOperation) {
		t.Helper()
		select {
		case u := <-c.Updates():
			if len(u.Pods) != 1 || u.Pods[0].Name != "p" || u.Pods[0].Spec.NodeName != "n1" {
				t.Fatalf("update %s of %d pods (first %s/%s): want only pod p of node n1", u.Op, len(u.Pods), u.Pods[0].Name, u.Pods[0].Spec.NodeName)
			}
			if u.Op != want {
				t.Fatalf("update of p = %s, want %s", u.Op, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s update of p", want)
		}
	}
	next(ADD)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.SeenAllSources(), nil
	}); err != nil {
		t.Fatalf("the API source never synced: %v", err)
	}

	label("other", "1")
	create("third", "n2")
	label("p", "1")
	next(UPDATE)

	label("other", "2")
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		t.Fatal(err)
	}
	next(DELETE)
	if err := client.CoreV1().Pods("ns").Delete(ctx, "third", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	next(REMOVE)
}

// BenchmarkClassifyUpdate measures the comparison the pod config makes for every update
// of one of the node's pods that the watch delivers, here a status update (RECONCILE)
// of a pod like the bench's: the two pods are decoded apart, so they share nothing.
func BenchmarkClassifyUpdate(b *testing.B) {
	expiry := int64(3607)
	old := basePod()
	old.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	old.Spec.Volumes = []v1.Volume{{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
	}}}}}
	old.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	old.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue}}}
	updated := old.DeepCopy()
	updated.Status.Phase = v1.PodRunning
	b.ReportAllocs()
	for b.Loop() {
		if op, changed := classifyUpdate(old, updated); !changed || op != RECONCILE {
			b.Fatalf("classifyUpdate = %s, %v; want RECONCILE", op, changed)
		}
	}
}
