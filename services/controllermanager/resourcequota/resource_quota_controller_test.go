package resourcequota

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// waitForUsed polls the quota until status.used reads want (e.g. "pods=1"), failing
// the test with the last status seen otherwise.
func waitForUsed(t *testing.T, cs kubernetes.Interface, name string, want map[corev1.ResourceName]string) {
	t.Helper()
	var last corev1.ResourceQuotaStatus
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		rq, err := cs.CoreV1().ResourceQuotas("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = rq.Status
		if len(rq.Status.Used) != len(want) {
			return false, nil
		}
		for k, v := range want {
			if q, ok := rq.Status.Used[k]; !ok || q.Cmp(resource.MustParse(v)) != 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("quota %s: status %+v, want used %v", name, last, want)
	}
}

// TestStatusFollowsCreatesAndDeletes runs the controller against a real apiserver: a
// new quota gets status.hard and its namespace's usage; admission charges creates, and
// the controller gives usage back when a pod is deleted or finishes, and counts
// count/<resource>.<group> for resources it found through discovery.
func TestStatusFollowsCreatesAndDeletes(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := cs.CoreV1().Pods("default")
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("100m")}}}}}}
	}
	// One pod exists before the quota: the first count finds it.
	if _, err := pods.Create(ctx, pod("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	factory := informers.NewSharedInformerFactory(cs, 0)
	c, err := New(factory, cs, cs.Discovery(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	factory.Start(ctx.Done())
	defer func() { cancel(); <-done; factory.Shutdown() }()

	hard := corev1.ResourceList{"pods": resource.MustParse("5"), "count/pods": resource.MustParse("5"),
		"requests.cpu": resource.MustParse("1"), "count/deployments.apps": resource.MustParse("2")}
	if _, err := cs.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForUsed(t, cs, "q", map[corev1.ResourceName]string{"pods": "1", "count/pods": "1", "requests.cpu": "100m", "count/deployments.apps": "0"})
	rq, err := cs.CoreV1().ResourceQuotas("default").Get(ctx, "q", metav1.GetOptions{})
	if err != nil || len(rq.Status.Hard) != len(hard) {
		t.Fatalf("status.hard %v (%v), want %v", rq.Status.Hard, err, hard)
	}

	for i := range 2 {
		if _, err := pods.Create(ctx, pod(fmt.Sprintf("p%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "web"}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForUsed(t, cs, "q", map[corev1.ResourceName]string{"pods": "3", "count/pods": "3", "requests.cpu": "300m", "count/deployments.apps": "1"})

	// A finished pod stops counting as a pod but is still an object.
	p0, err := pods.Get(ctx, "p0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p0.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, p0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForUsed(t, cs, "q", map[corev1.ResourceName]string{"pods": "2", "count/pods": "3", "requests.cpu": "200m", "count/deployments.apps": "1"})

	// Deletes give usage back.
	if err := pods.Delete(ctx, "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForUsed(t, cs, "q", map[corev1.ResourceName]string{"pods": "1", "count/pods": "2", "requests.cpu": "100m", "count/deployments.apps": "0"})

	// A spec change is news: status.hard follows it.
	rq, err = cs.CoreV1().ResourceQuotas("default").Get(ctx, "q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Spec.Hard = corev1.ResourceList{"pods": resource.MustParse("9")}
	if _, err := cs.CoreV1().ResourceQuotas("default").Update(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForUsed(t, cs, "q", map[corev1.ResourceName]string{"pods": "1"})
}
