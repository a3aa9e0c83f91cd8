package job_test

import (
	"context"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/garbagecollector"
	"skiff.dev/services/controllermanager/job"
	"skiff.dev/services/controllermanager/ttlafterfinished"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver with the Job and TTL-after-finished controllers and the
// garbage collector; the
// failure back-off is shortened to 10 ms so back-off limits are reached quickly.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "controller-manager", Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	jc := job.New(factory, cs, recorder)
	jc.PodFailureBackoff = 10 * time.Millisecond
	ttl := ttlafterfinished.New(factory, cs, recorder)
	gc := garbagecollector.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); gc.Run(ctx, 2) }()
	go func() { defer wg.Done(); jc.Run(ctx, 2) }()
	go func() { defer wg.Done(); ttl.Run(ctx, 1) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	return cs
}

func newJob(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox:1.36"}},
		}}},
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func hasCondition(j *batchv1.Job, t batchv1.JobConditionType, reason string) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue && (reason == "" || c.Reason == reason) {
			return true
		}
	}
	return false
}

// finishPods ends every pod of the Job with uid as it appears, with phase, through
// pods/status (there is no kubelet), and reports the most pods it saw running at once.
func finishPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, uid types.UID, phase corev1.PodPhase) <-chan int {
	maxActive := make(chan int, 1)
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		active, most := map[string]bool{}, 0
		defer func() { maxActive <- most }()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != uid {
				continue
			}
			switch {
			case ev.Type == watch.Deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
				delete(active, p.Name)
			case ev.Type == watch.Added:
				active[p.Name] = true
				most = max(most, len(active))
				p.Status.Phase = phase
				if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
					t.Errorf("finish pod %s: %v", p.Name, err)
				}
			}
		}
	}()
	return maxActive
}

func TestJobRunsCompletionsWithinParallelism(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("work")
	j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(3)), ptr.To(int32(2))
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	maxActive := finishPods(ctx, t, cs, j.UID, corev1.PodSucceeded)
	waitFor(t, "completion", func(ctx context.Context) (bool, error) {
		got, err := cs.BatchV1().Jobs("default").Get(ctx, "work", metav1.GetOptions{})
		return err == nil && hasCondition(got, batchv1.JobComplete, "") && got.Status.Succeeded == 3 &&
			got.Status.Active == 0 && got.Status.CompletionTime != nil, nil
	})
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=work"})
	if err != nil || len(pods.Items) != 3 {
		t.Errorf("want exactly 3 pods, got %d (%v)", len(pods.Items), err)
	}
	cancel()
	if most := <-maxActive; most > 2 {
		t.Errorf("%d pods ran at once, parallelism is 2", most)
	}
}

func TestJobFailsPastBackoffLimit(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("flaky")
	j.Spec.BackoffLimit = ptr.To(int32(2))
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	finishPods(ctx, t, cs, j.UID, corev1.PodFailed)
	waitFor(t, "failure", func(ctx context.Context) (bool, error) {
		got, err := cs.BatchV1().Jobs("default").Get(ctx, "flaky", metav1.GetOptions{})
		return err == nil && hasCondition(got, batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded) && got.Status.Failed == 3, nil
	})
}

func TestJobPastActiveDeadlineFailsAndStopsItsPods(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	j := newJob("slow")
	j.Spec.ActiveDeadlineSeconds = ptr.To(int64(1))
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deadline", func(ctx context.Context) (bool, error) {
		got, err := cs.BatchV1().Jobs("default").Get(ctx, "slow", metav1.GetOptions{})
		return err == nil && hasCondition(got, batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded) && got.Status.Active == 0, nil
	})
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=slow"})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left running past the deadline: %d (%v)", len(pods.Items), err)
	}
}

func TestFinishedJobIsDeletedAfterItsTTL(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("short-lived")
	j.Spec.TTLSecondsAfterFinished = ptr.To(int32(0))
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	finishPods(ctx, t, cs, j.UID, corev1.PodSucceeded)
	// Deleted in the foreground: its pods go, then the Job.
	waitFor(t, "deletion", func(ctx context.Context) (bool, error) {
		_, err := cs.BatchV1().Jobs("default").Get(ctx, "short-lived", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=short-lived"})
		if err != nil || len(pods.Items) != 0 {
			t.Fatalf("the Job went before its pods: %v %v", pods, err)
		}
		return true, nil
	})
}
