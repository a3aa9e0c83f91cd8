package cronjob_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"skiff.dev/services/controllermanager/cronjob"
	"skiff.dev/services/controllermanager/garbagecollector"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver with the CronJob controller on a fake clock (so a test
// does not wait for the minute to turn) and the garbage collector.
func start(t *testing.T, clock *clocktesting.FakeClock) kubernetes.Interface {
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
	c := cronjob.New(factory, cs, recorder)
	c.Clock = clock
	gc := garbagecollector.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.Run(ctx, 1) }()
	go func() { defer wg.Done(); gc.Run(ctx, 1) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	return cs
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func TestCronJobStartsTheScheduledJobAndTracksIt(t *testing.T) {
	// Two minutes ahead: the minute after the CronJob's creation is already due.
	clock := clocktesting.NewFakeClock(time.Now().Add(2 * time.Minute))
	cs := start(t, clock)
	ctx := context.Background()
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "tick"},
		Spec: batchv1.CronJobSpec{
			Schedule:          "* * * * *",
			ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
			}}}},
		},
	}
	cj, err := cs.BatchV1().CronJobs("default").Create(ctx, cj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var job *batchv1.Job
	waitFor(t, "the scheduled Job", func(ctx context.Context) (bool, error) {
		got, err := cs.BatchV1().CronJobs("default").Get(ctx, "tick", metav1.GetOptions{})
		if err != nil || len(got.Status.Active) != 1 || got.Status.LastScheduleTime == nil {
			return false, nil
		}
		job, err = cs.BatchV1().Jobs("default").Get(ctx, got.Status.Active[0].Name, metav1.GetOptions{})
		return err == nil, nil
	})
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != cj.UID {
		t.Fatalf("job %s is not controlled by the CronJob: %+v", job.Name, job.OwnerReferences)
	}
	got, _ := cs.BatchV1().CronJobs("default").Get(ctx, "tick", metav1.GetOptions{})
	if want := fmt.Sprintf("tick-%d", got.Status.LastScheduleTime.Unix()/60); job.Name != want {
		t.Errorf("job name %s, want %s", job.Name, want)
	}
	if job.Annotations[cronjob.ScheduledTimestampAnnotation] == "" {
		t.Errorf("no scheduled-timestamp annotation: %v", job.Annotations)
	}

	// The Job completes: it leaves status.active and sets lastSuccessfulTime.
	now := metav1.Now()
	job.Status.StartTime, job.Status.CompletionTime = &now, &now
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
	}
	if _, err := cs.BatchV1().Jobs("default").UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the completion", func(ctx context.Context) (bool, error) {
		got, err := cs.BatchV1().CronJobs("default").Get(ctx, "tick", metav1.GetOptions{})
		return err == nil && len(got.Status.Active) == 0 && got.Status.LastSuccessfulTime != nil, nil
	})

	// Deleting the CronJob takes its Jobs with it.
	if err := cs.BatchV1().CronJobs("default").Delete(ctx, "tick", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Job to go", func(ctx context.Context) (bool, error) {
		_, err := cs.BatchV1().Jobs("default").Get(ctx, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
