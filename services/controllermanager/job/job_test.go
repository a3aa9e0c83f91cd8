package job_test

import (
	"context"
	"slices"
	"strings"
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
	"k8s.io/client-go/util/retry"
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
	return finishPodsWith(ctx, t, cs, uid, func(p *corev1.Pod, _ int) { p.Status.Phase = phase })
}

// finishPodsWith is finishPods where end writes each new pod's final status; it is told
// how many pods of the same completion index (or of the Job, for a pod without one)
// came before.
func finishPodsWith(ctx context.Context, t *testing.T, cs kubernetes.Interface, uid types.UID, end func(p *corev1.Pod, earlier int)) <-chan int {
	maxActive := make(chan int, 1)
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		active, most, seen := map[string]bool{}, 0, map[string]int{}
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
			case ev.Type == watch.Deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil:
				delete(active, p.Name)
			case ev.Type == watch.Added:
				active[p.Name] = true
				most = max(most, len(active))
				ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
				end(p, seen[ix])
				seen[ix]++
				if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
					t.Errorf("finish pod %s: %v", p.Name, err)
				}
			}
		}
	}()
	return maxActive
}

// terminated gives the pod's container c a terminated state with exit code.
func terminated(p *corev1.Pod, phase corev1.PodPhase, exitCode int32) {
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "busybox:1.36", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: metav1.Now()}}}}
}

func getJob(ctx context.Context, cs kubernetes.Interface, name string) *batchv1.Job {
	j, err := cs.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return &batchv1.Job{}
	}
	return j
}

func jobPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) []corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
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

func TestIndexedJobRunsOnePodPerIndex(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("indexed")
	j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(3)), ptr.To(int32(2))
	j.Spec.Template.Spec.Subdomain = "workers"
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	maxActive := finishPods(ctx, t, cs, j.UID, corev1.PodSucceeded)
	waitFor(t, "completion", func(ctx context.Context) (bool, error) {
		got := getJob(ctx, cs, "indexed")
		return hasCondition(got, batchv1.JobComplete, "") && got.Status.Succeeded == 3 && got.Status.CompletedIndexes == "0-2", nil
	})
	got := getJob(ctx, cs, "indexed")
	if !hasCondition(got, batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached) || got.Status.CompletionTime == nil {
		t.Errorf("conditions %+v, completionTime %v", got.Status.Conditions, got.Status.CompletionTime)
	}
	pods := jobPods(ctx, t, cs, "indexed")
	if len(pods) != 3 {
		t.Fatalf("want one pod per index, got %d", len(pods))
	}
	indexes := map[string]bool{}
	for _, p := range pods {
		ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		indexes[ix] = true
		if p.Labels[batchv1.JobCompletionIndexAnnotation] != ix || p.Spec.Hostname != "indexed-"+ix || p.Spec.Subdomain != "workers" ||
			!strings.HasPrefix(p.Name, "indexed-"+ix+"-") {
			t.Errorf("pod %s: index annotation %q, label %q, hostname %q, subdomain %q", p.Name, ix,
				p.Labels[batchv1.JobCompletionIndexAnnotation], p.Spec.Hostname, p.Spec.Subdomain)
		}
		env := p.Spec.Containers[0].Env
		if len(env) != 1 || env[0].Name != "JOB_COMPLETION_INDEX" || env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef == nil ||
			env[0].ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/job-completion-index']" {
			t.Errorf("pod %s env %+v", p.Name, env)
		}
		if len(p.Finalizers) != 0 {
			t.Errorf("pod %s kept finalizers %v after it was counted", p.Name, p.Finalizers)
		}
	}
	if !indexes["0"] || !indexes["1"] || !indexes["2"] {
		t.Errorf("indexes %v, want 0, 1 and 2", indexes)
	}
	cancel()
	if most := <-maxActive; most > 2 {
		t.Errorf("%d pods ran at once, parallelism is 2", most)
	}
}

func TestBackoffLimitPerIndexFailsTheIndex(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("per-index")
	j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(3)), ptr.To(int32(3))
	j.Spec.BackoffLimitPerIndex = ptr.To(int32(1))
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Index 1 always fails; the others succeed.
	finishPodsWith(ctx, t, cs, j.UID, func(p *corev1.Pod, _ int) {
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "1" {
			terminated(p, corev1.PodFailed, 1)
		} else {
			terminated(p, corev1.PodSucceeded, 0)
		}
	})
	waitFor(t, "failure", func(ctx context.Context) (bool, error) {
		got := getJob(ctx, cs, "per-index")
		return hasCondition(got, batchv1.JobFailed, batchv1.JobReasonFailedIndexes), nil
	})
	got := getJob(ctx, cs, "per-index")
	if got.Status.CompletedIndexes != "0,2" || ptr.Deref(got.Status.FailedIndexes, "") != "1" || got.Status.Failed != 2 || got.Status.Succeeded != 2 ||
		!hasCondition(got, batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes) {
		t.Errorf("status %+v", got.Status)
	}
	counts := map[string]bool{}
	for _, p := range jobPods(ctx, t, cs, "per-index") {
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "1" {
			counts[p.Annotations[batchv1.JobIndexFailureCountAnnotation]] = true
		}
	}
	if !counts["0"] || !counts["1"] || len(counts) != 2 {
		t.Errorf("index 1 should have run twice, with failure counts 0 and 1: %v", counts)
	}
}

func TestPodFailurePolicyFailJobOnExitCode(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("fail-fast")
	j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(4)), ptr.To(int32(2))
	j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:      batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
	}}}
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The first pod exits 42; the others keep running until the Job stops them.
	var failedPod string
	finishPodsWith(ctx, t, cs, j.UID, func(p *corev1.Pod, earlier int) {
		if earlier == 0 {
			failedPod = p.Name
			terminated(p, corev1.PodFailed, 42)
		}
	})
	waitFor(t, "the Job to fail", func(ctx context.Context) (bool, error) {
		got := getJob(ctx, cs, "fail-fast")
		return hasCondition(got, batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy), nil
	})
	got := getJob(ctx, cs, "fail-fast")
	want := "Container c for pod default/" + failedPod + " failed with exit code 42 matching FailJob rule at index 0"
	for _, c := range got.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget) && c.Message != want {
			t.Errorf("%s message %q, want %q", c.Type, c.Message, want)
		}
	}
	if !hasCondition(got, batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy) || got.Status.Active != 0 || got.Status.Failed != 2 {
		t.Errorf("status %+v", got.Status)
	}
	waitFor(t, "the running pod to go", func(ctx context.Context) (bool, error) {
		return len(jobPods(ctx, t, cs, "fail-fast")) == 1, nil
	})
}

func TestPodFailurePolicyIgnoresDisruptions(t *testing.T) {
	cs := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJob("evicted")
	j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(2)), ptr.To(int32(2))
	j.Spec.BackoffLimit = ptr.To(int32(0))
	j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}},
	}}}
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.PodReplacementPolicy == nil || *j.Spec.PodReplacementPolicy != batchv1.Failed {
		t.Errorf("podReplacementPolicy %v, want Failed with a pod failure policy", j.Spec.PodReplacementPolicy)
	}
	// Each index's first pod is disrupted (backoffLimit 0 would fail the Job on a
	// counted failure); its replacement succeeds.
	finishPodsWith(ctx, t, cs, j.UID, func(p *corev1.Pod, earlier int) {
		if earlier == 0 {
			terminated(p, corev1.PodFailed, 137)
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.Now()})
			return
		}
		terminated(p, corev1.PodSucceeded, 0)
	})
	waitFor(t, "completion", func(ctx context.Context) (bool, error) {
		got := getJob(ctx, cs, "evicted")
		if hasCondition(got, batchv1.JobFailed, "") {
			t.Fatalf("the Job failed: %+v", got.Status.Conditions)
		}
		return hasCondition(got, batchv1.JobComplete, ""), nil
	})
	got := getJob(ctx, cs, "evicted")
	if got.Status.Failed != 0 || got.Status.Succeeded != 2 || got.Status.CompletedIndexes != "0,1" {
		t.Errorf("status %+v: ignored failures must not count", got.Status)
	}
	if n := len(jobPods(ctx, t, cs, "evicted")); n != 4 {
		t.Errorf("want 4 pods (2 disrupted, 2 replacements), got %d", n)
	}
}

func TestJobAdoptsOrphansAndReleasesPods(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	j := newJob("adopt-release")
	j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(4)), ptr.To(int32(2))
	j, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 pods", func(ctx context.Context) (bool, error) { return len(jobPods(ctx, t, cs, "adopt-release")) == 2, nil })
	pod := jobPods(ctx, t, cs, "adopt-release")[0]
	if !slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer) {
		t.Errorf("pod %s was created without the tracking finalizer: %v", pod.Name, pod.Finalizers)
	}
	update := func(mutate func(p *corev1.Pod)) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(p)
			_, err = cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	update(func(p *corev1.Pod) { p.OwnerReferences = nil })
	waitFor(t, "re-adoption", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(p)
		return ref != nil && ref.UID == j.UID && ref.Kind == "Job" && slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer), nil
	})

	update(func(p *corev1.Pod) { p.Labels = nil })
	waitFor(t, "release", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return metav1.GetControllerOf(p) == nil && !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer), nil
	})
	// The Job replaces the pod it let go.
	waitFor(t, "a replacement", func(ctx context.Context) (bool, error) {
		return len(jobPods(ctx, t, cs, "adopt-release")) == 2 && getJob(ctx, cs, "adopt-release").Status.Active == 2, nil
	})
}
