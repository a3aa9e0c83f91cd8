package config

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
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

func TestPodConfigPublishesChangesOfThisNodesPods(t *testing.T) {
	mine := basePod()
	other := basePod()
	other.Name, other.UID, other.Spec.NodeName = "other", "u2", "n2"
	client := fake.NewClientset(mine, other)
	c := NewPodConfig(client, "n1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// nextFor returns the next update of pod name. Filtering by
	// spec.nodeName is the API server's job (the fake clientset may not do
	// it), so other pods' updates are skipped: only the translation into
	// updates is checked here.
	nextFor := func(name string) PodUpdate {
		t.Helper()
		for {
			select {
			case u := <-c.Updates():
				if u.Pods[0].Name == name {
					return u
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no update for %s", name)
			}
		}
	}
	if u := nextFor("p"); u.Op != ADD {
		t.Errorf("initial update = %s, want ADD", u.Op)
	}
	for !c.SeenAllSources() {
		time.Sleep(10 * time.Millisecond)
	}

	deleting := mine.DeepCopy()
	deleting.ResourceVersion = "5"
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := client.CoreV1().Pods("ns").Update(ctx, deleting, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := nextFor("p"); u.Op != DELETE {
		t.Errorf("update = %s, want DELETE", u.Op)
	}
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := nextFor("p"); u.Op != REMOVE {
		t.Errorf("update = %s, want REMOVE", u.Op)
	}
}
