package status

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

type podGetter map[types.UID]*v1.Pod

func (g podGetter) GetPodByUID(uid types.UID) (*v1.Pod, bool) { p, ok := g[uid]; return p, ok }

func (g podGetter) GetMirrorPodByPod(*v1.Pod) (*v1.Pod, bool) { return nil, false }

// safety answers PodCouldHaveRunningContainers with its value.
type safety bool

func (s safety) PodCouldHaveRunningContainers(types.UID) bool { return bool(s) }

func apiPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c"}}},
		Status: v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue},
			{Type: "example.com/Gate", Status: v1.ConditionTrue},
		}},
	}
}

func runningStatus() v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: "10.0.0.5",
		Conditions: []v1.PodCondition{
			{Type: v1.PodReady, Status: v1.ConditionTrue},
			{Type: v1.PodScheduled, Status: v1.ConditionTrue},
		},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now())}}}},
	}
}

func succeededStatus() v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodSucceeded,
		Conditions: []v1.PodCondition{
			{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: PodCompleted},
			{Type: v1.PodScheduled, Status: v1.ConditionTrue},
		},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c",
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}},
	}
}

func newTestManager(pod *v1.Pod, couldRun bool) (*Manager, *fake.Clientset) {
	client := fake.NewClientset(pod)
	return NewManager(client, podGetter{pod.UID: pod}, safety(couldRun), nil), client
}

func getPod(t *testing.T, client *fake.Clientset) *v1.Pod {
	t.Helper()
	pod, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func countVerb(client *fake.Clientset, verb, subresource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

func TestSyncWritesStatusKeepingForeignConditions(t *testing.T) {
	pod := apiPod()
	m, client := newTestManager(pod, true)
	m.SetPodStatus(pod, runningStatus())
	m.syncBatch(context.Background(), false)

	got := getPod(t, client)
	if got.Status.Phase != v1.PodRunning || got.Status.PodIP != "10.0.0.5" || got.Status.StartTime == nil {
		t.Errorf("status = %+v", got.Status)
	}
	var gate, ready bool
	for _, c := range got.Status.Conditions {
		gate = gate || c.Type == "example.com/Gate"
		ready = ready || (c.Type == v1.PodReady && c.Status == v1.ConditionTrue)
	}
	if !gate || !ready {
		t.Errorf("conditions = %v: want the foreign gate kept and Ready=True", got.Status.Conditions)
	}
}

func TestUnchangedStatusIsNotWrittenAgain(t *testing.T) {
	pod := apiPod()
	m, client := newTestManager(pod, true)
	m.SetPodStatus(pod, runningStatus())
	m.syncBatch(context.Background(), false)
	writes := countVerb(client, "update", "status")

	// Same status, new timestamps: no new version, no write.
	m.SetPodStatus(pod, runningStatus())
	m.syncBatch(context.Background(), false)
	// A full resync against an identical API copy writes nothing either.
	m.podGetter = podGetter{pod.UID: getPod(t, client)}
	m.syncBatch(context.Background(), true)
	if got := countVerb(client, "update", "status"); got != writes {
		t.Errorf("status writes = %d, want %d", got, writes)
	}
}

// TestSetPodStatusLeavesThePodAlone: the pod comes from an informer, whose objects
// nobody may modify; the start time the status keeps from it is normalized on a copy.
func TestSetPodStatusLeavesThePodAlone(t *testing.T) {
	pod := apiPod()
	started := metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 123456789, time.Local))
	pod.Status.StartTime = &started
	before := pod.DeepCopy()
	m, _ := newTestManager(pod, true)
	m.SetPodStatus(pod, runningStatus())
	if !reflect.DeepEqual(pod, before) {
		t.Fatalf("SetPodStatus modified the pod:\n%s", cmp.Diff(before, pod))
	}
}

func TestTerminalPhaseWaitsUntilContainersCannotRun(t *testing.T) {
	pod := apiPod()
	pod.Status = runningStatus()
	m, client := newTestManager(pod, true)
	m.SetPodStatus(pod, succeededStatus())
	m.syncBatch(context.Background(), false)
	if got := getPod(t, client).Status.Phase; got != v1.PodRunning {
		t.Errorf("phase = %s while containers could run, want Running held back", got)
	}

	m.safety = safety(false)
	m.SetPodStatus(pod, succeededStatus())
	m.syncBatch(context.Background(), true)
	if got := getPod(t, client).Status.Phase; got != v1.PodSucceeded {
		t.Errorf("phase = %s, want Succeeded", got)
	}
}

func TestFinishedDeletedPodIsRemovedWithUIDPrecondition(t *testing.T) {
	pod := apiPod()
	pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pod.Status = runningStatus()
	m, client := newTestManager(pod, false)

	m.SetPodStatus(pod, succeededStatus())
	m.syncBatch(context.Background(), false)
	if countVerb(client, "delete", "") != 0 {
		t.Fatal("deleted before the pod worker finished")
	}

	m.TerminatePod(pod)
	m.syncBatch(context.Background(), false)
	var del k8stesting.DeleteAction
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			del = d
		}
	}
	if del == nil {
		t.Fatal("no delete after TerminatePod")
	}
	opts := del.GetDeleteOptions()
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != pod.UID {
		t.Errorf("delete options = %+v", opts)
	}
	if _, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still exists: %v", err)
	}
	if _, ok := m.GetPodStatus(pod.UID); ok {
		t.Error("status still cached after deletion")
	}
}

func TestTerminatePodMarksUnfinishedContainersAndFails(t *testing.T) {
	pod := apiPod()
	m, _ := newTestManager(pod, false)
	m.SetPodStatus(pod, runningStatus())
	m.TerminatePod(pod)
	s, _ := m.GetPodStatus(pod.UID)
	if s.Phase != v1.PodFailed {
		t.Errorf("phase = %s, want Failed", s.Phase)
	}
	term := s.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 137 || term.Reason != "ContainerStatusUnknown" {
		t.Errorf("container state = %+v", s.ContainerStatuses[0].State)
	}
}

func TestTerminatedContainerIsNeverResurrected(t *testing.T) {
	pod := apiPod()
	m, _ := newTestManager(pod, false)
	m.SetPodStatus(pod, succeededStatus())
	m.SetPodStatus(pod, runningStatus())
	s, _ := m.GetPodStatus(pod.UID)
	if s.Phase != v1.PodSucceeded || s.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("a Never pod's terminated container came back: %+v", s)
	}
}

func TestMergePodStatus(t *testing.T) {
	tests := []struct {
		name      string
		old, new  v1.PodStatus
		couldRun  bool
		wantPhase v1.PodPhase
		wantReady v1.ConditionStatus
	}{
		{"running stays running", runningStatus(), runningStatus(), true, v1.PodRunning, v1.ConditionTrue},
		{"terminal held back while containers may run", runningStatus(), succeededStatus(), true, v1.PodRunning, v1.ConditionFalse},
		{"terminal written once nothing runs", runningStatus(), succeededStatus(), false, v1.PodSucceeded, v1.ConditionFalse},
		{"a terminal phase never reports Ready", runningStatus(), func() v1.PodStatus {
			s := runningStatus()
			s.Phase = v1.PodFailed
			return s
		}(), false, v1.PodFailed, v1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergePodStatus(tt.old, tt.new, tt.couldRun)
			if got.Phase != tt.wantPhase {
				t.Errorf("phase = %s, want %s", got.Phase, tt.wantPhase)
			}
			for _, c := range got.Conditions {
				if c.Type == v1.PodReady && c.Status != tt.wantReady {
					t.Errorf("Ready = %s, want %s", c.Status, tt.wantReady)
				}
			}
		})
	}
}
