// Package status is the kubelet's status manager: it caches the pod statuses
// the kubelet computes and writes them to the API server (pods/NAME/status)
// when they change, and deletes a pod from the API server once its graceful
// termination has finished. Mirrors kubelet's pkg/kubelet/status.
package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"skiff.dev/services/internal/tracing"
	kubetypes "skiff.dev/services/kubelet/types"
)

// syncPeriod is how often every cached status is checked against the API
// server, repairing failed writes (kubelet: 10 s).
const syncPeriod = 10 * time.Second

// PodGetter returns the kubelet's latest copy of a pod from its config
// source, used to notice when the API server's status drifted from the
// cached one; a static pod's status lives in its mirror pod.
type PodGetter interface {
	GetPodByUID(uid types.UID) (*v1.Pod, bool)
	GetMirrorPodByPod(pod *v1.Pod) (*v1.Pod, bool)
}

// PodDeletionSafetyProvider tells whether a pod may still have running
// containers; a terminal phase is not reported until it has none. The
// Kubelet (through its pod workers) implements it.
type PodDeletionSafetyProvider interface {
	PodCouldHaveRunningContainers(uid types.UID) bool
}

// versionedPodStatus is a cached status and the version the manager gave it.
type versionedPodStatus struct {
	status v1.PodStatus
	// version increases with every change; a write succeeds for a version.
	version      uint64
	podName      string
	podNamespace string
	// podIsFinished is set by TerminatePod: the pod worker is done, and a
	// deleted pod may now be removed from the API server.
	podIsFinished bool
}

// Manager caches pod statuses and syncs them to the API server. Safe for
// concurrent use. Mirrors kubelet's status manager.
type Manager struct {
	client    kubernetes.Interface
	podGetter PodGetter
	safety    PodDeletionSafetyProvider
	logger    *slog.Logger
	// Tracer traces each status write; the kubelet sets its own, the default is
	// the global provider's.
	Tracer trace.Tracer

	mu          sync.Mutex
	podStatuses map[types.UID]versionedPodStatus
	// apiStatusVersions is the version last written for each pod; only the
	// sync goroutine touches it.
	apiStatusVersions map[types.UID]uint64
	// ownWrites is each pod's last status write, for as long as it may be needed: the
	// next write starts from the informer's copy, and while that copy still has the
	// resourceVersion the last write started from, the informer has not seen the write
	// yet, so the pod is that copy with the written status at the written version.
	// Without it a second write soon after the first (Running after Pending) failed
	// with 409 and read the pod again. Only the sync goroutine touches it.
	ownWrites map[types.UID]ownWrite
	// podStatusChannel signals that a status changed (capacity 1).
	podStatusChannel chan struct{}
}

// ownWrite is a status write the API server accepted: the resourceVersion of the pod it
// started from, and the pod's status and resourceVersion after it.
type ownWrite struct {
	from, to string
	status   v1.PodStatus
}

// NewManager returns a status manager writing through client; logger nil
// means slog.Default().
func NewManager(client kubernetes.Interface, podGetter PodGetter, safety PodDeletionSafetyProvider, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.Default()
	}
	return &Manager{
		client:            client,
		podGetter:         podGetter,
		safety:            safety,
		logger:            logger,
		Tracer:            tracing.Tracer(nil, "skiff.dev/services/kubelet/status"),
		podStatuses:       map[types.UID]versionedPodStatus{},
		apiStatusVersions: map[types.UID]uint64{},
		ownWrites:         map[types.UID]ownWrite{},
		podStatusChannel:  make(chan struct{}, 1),
	}
}

// Run syncs changed statuses as they come, and all statuses every 10 s,
// until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(syncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.podStatusChannel:
			m.syncBatch(ctx, false)
		case <-t.C:
			m.syncBatch(ctx, true)
		}
	}
}

// GetPodStatus returns the cached status of pod uid, if any.
func (m *Manager) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.podStatuses[uid]
	return *s.status.DeepCopy(), ok
}

// SetPodStatus caches status as pod's new status and schedules a write if it
// differs from the cached one (conditions compared without their
// timestamps). For a pod being deleted a write is always scheduled, so the
// deletion can complete. Mirrors manager.SetPodStatus.
func (m *Manager) SetPodStatus(pod *v1.Pod, status v1.PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updateStatusInternal(pod, *status.DeepCopy(), pod.DeletionTimestamp != nil, false)
}

// TerminatePod records that the pod worker has finished with pod: containers
// still not terminated in the cached status are reported terminated (exit
// 137, reason ContainerStatusUnknown), a non-terminal phase becomes Failed,
// and a pod being deleted may now be removed from the API server. Mirrors
// manager.TerminatePod.
func (m *Manager) TerminatePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := &pod.Status
	cached, isCached := m.podStatuses[pod.UID]
	if isCached {
		old = &cached.status
	}
	status := *old.DeepCopy()
	unknown := func(s *v1.ContainerStatus) {
		if s.State.Terminated != nil {
			return
		}
		s.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			Reason:   "ContainerStatusUnknown",
			Message:  "The container could not be located when the pod was terminated",
			ExitCode: 137,
		}}
	}
	if hasPodInitialized(pod) {
		for i := range status.ContainerStatuses {
			unknown(&status.ContainerStatuses[i])
		}
	}
	for i := range initializedContainers(status.InitContainerStatuses) {
		unknown(&status.InitContainerStatuses[i])
	}
	if status.Phase != v1.PodSucceeded && status.Phase != v1.PodFailed {
		status.Phase = v1.PodFailed
	}
	m.updateStatusInternal(pod, status, true, true)
}

// hasPodInitialized reports whether the pod ever got past its init
// containers; before that its regular containers never ran and are not
// reported terminated.
func hasPodInitialized(pod *v1.Pod) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.LastTerminationState.Terminated != nil || s.State.Waiting == nil {
			return true
		}
	}
	if l := len(pod.Status.InitContainerStatuses); l > 0 {
		last := pod.Status.InitContainerStatuses[l-1]
		if t := last.LastTerminationState.Terminated; t != nil && t.ExitCode == 0 {
			return true
		}
		if t := last.State.Terminated; t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// initializedContainers returns the init statuses up to the last one that
// ever started (at least the first).
func initializedContainers(statuses []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].State.Waiting == nil || statuses[i].LastTerminationState.Terminated != nil {
			return statuses[:i+1]
		}
	}
	if len(statuses) > 0 {
		return statuses[:1]
	}
	return nil
}

// RemoveOrphanedStatuses forgets the statuses of pods not in podUIDs.
func (m *Manager) RemoveOrphanedStatuses(podUIDs map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.podStatuses {
		if !podUIDs[uid] {
			delete(m.podStatuses, uid)
		}
	}
}

// updateStatusInternal caches status and signals the sync goroutine.
// Callers hold mu.
func (m *Manager) updateStatusInternal(pod *v1.Pod, status v1.PodStatus, forceUpdate, podIsFinished bool) {
	var old v1.PodStatus
	cached, isCached := m.podStatuses[pod.UID]
	if isCached {
		old = cached.status
		// Finished stays finished.
		podIsFinished = podIsFinished || cached.podIsFinished
	} else {
		old = pod.Status
	}
	if err := checkContainerStateTransition(old.ContainerStatuses, status.ContainerStatuses, pod.Spec.RestartPolicy); err != nil {
		m.logger.Error("status update on pod aborted", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	if err := checkContainerStateTransition(old.InitContainerStatuses, status.InitContainerStatuses, pod.Spec.RestartPolicy); err != nil {
		m.logger.Error("status update on pod aborted", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady, v1.PodInitialized, v1.PodReadyToStartContainers, v1.PodScheduled} {
		updateLastTransitionTime(&status, &old, t)
	}
	// The start time is set once, when the kubelet first reports the pod. It is copied:
	// old may be the informer's pod, which normalizeStatus must not write to.
	if old.StartTime != nil && !old.StartTime.IsZero() {
		startTime := *old.StartTime
		status.StartTime = &startTime
	} else if status.StartTime.IsZero() {
		now := metav1.Now()
		status.StartTime = &now
	}
	normalizeStatus(pod, &status)

	if isCached && isPodStatusByKubeletEqual(&cached.status, &status) && !forceUpdate && podIsFinished == cached.podIsFinished {
		return
	}
	m.podStatuses[pod.UID] = versionedPodStatus{
		status:        status,
		version:       cached.version + 1,
		podName:       pod.Name,
		podNamespace:  pod.Namespace,
		podIsFinished: podIsFinished,
	}
	select {
	case m.podStatusChannel <- struct{}{}:
	default:
	}
}

// checkContainerStateTransition refuses to move a container out of a
// terminated state the restart policy will not restart it from: a kubelet bug
// must not resurrect a finished container in the API.
func checkContainerStateTransition(oldStatuses, newStatuses []v1.ContainerStatus, restartPolicy v1.RestartPolicy) error {
	if restartPolicy == v1.RestartPolicyAlways {
		return nil
	}
	for _, o := range oldStatuses {
		if o.State.Terminated == nil {
			continue
		}
		if o.State.Terminated.ExitCode != 0 && restartPolicy == v1.RestartPolicyOnFailure {
			continue
		}
		for _, n := range newStatuses {
			if o.Name == n.Name && n.State.Terminated == nil {
				return fmt.Errorf("terminated container %v attempted illegal transition to non-terminated state", n.Name)
			}
		}
	}
	return nil
}

// updateLastTransitionTime keeps a condition's transition time while its
// status is unchanged.
func updateLastTransitionTime(status, old *v1.PodStatus, t v1.PodConditionType) {
	i := slices.IndexFunc(status.Conditions, func(c v1.PodCondition) bool { return c.Type == t })
	if i < 0 {
		return
	}
	c := &status.Conditions[i]
	c.LastTransitionTime = metav1.Now()
	if j := slices.IndexFunc(old.Conditions, func(c v1.PodCondition) bool { return c.Type == t }); j >= 0 && old.Conditions[j].Status == c.Status {
		c.LastTransitionTime = old.Conditions[j].LastTransitionTime
	}
}

// normalizeStatus truncates every timestamp to whole seconds, as the API
// serializes them, and orders container statuses by name (init containers
// by spec order), so that a cached status compares equal to the one read
// back from the API server.
func normalizeStatus(pod *v1.Pod, status *v1.PodStatus) {
	norm := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	if status.StartTime != nil {
		norm(status.StartTime)
	}
	for i := range status.Conditions {
		norm(&status.Conditions[i].LastProbeTime)
		norm(&status.Conditions[i].LastTransitionTime)
	}
	normState := func(s *v1.ContainerState) {
		if s.Running != nil {
			norm(&s.Running.StartedAt)
		}
		if s.Terminated != nil {
			norm(&s.Terminated.StartedAt)
			norm(&s.Terminated.FinishedAt)
		}
	}
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range list {
			normState(&list[i].State)
			normState(&list[i].LastTerminationState)
		}
	}
	slices.SortStableFunc(status.ContainerStatuses, func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	order := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i
	}
	slices.SortStableFunc(status.InitContainerStatuses, func(a, b v1.ContainerStatus) int { return order[a.Name] - order[b.Name] })
	slices.SortStableFunc(status.EphemeralContainerStatuses, func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
}

// isPodStatusByKubeletEqual compares two statuses on what the kubelet owns:
// its conditions by type, status, reason and message (not timestamps), and
// every other field exactly.
func isPodStatusByKubeletEqual(oldStatus, status *v1.PodStatus) bool {
	owned := func(cs []v1.PodCondition) map[v1.PodConditionType]v1.PodCondition {
		out := map[v1.PodConditionType]v1.PodCondition{}
		for _, c := range cs {
			if PodConditionByKubelet(c.Type) || c.Type == v1.DisruptionTarget {
				out[c.Type] = c
			}
		}
		return out
	}
	oldC, newC := owned(oldStatus.Conditions), owned(status.Conditions)
	if len(oldC) != len(newC) {
		return false
	}
	for t, n := range newC {
		o, ok := oldC[t]
		if !ok || o.Status != n.Status || o.Reason != n.Reason || o.Message != n.Message {
			return false
		}
	}
	oldCopy := oldStatus.DeepCopy()
	oldCopy.Conditions = status.Conditions
	return apiequality.Semantic.DeepEqual(oldCopy, status)
}

// syncBatch writes the statuses that changed since their last write; with
// all, also those that drifted from the API server's copy and those whose
// deletion is pending.
func (m *Manager) syncBatch(ctx context.Context, all bool) {
	type podSync struct {
		uid    types.UID
		status versionedPodStatus
	}
	var updates []podSync
	m.mu.Lock()
	if all {
		for uid := range m.apiStatusVersions {
			if _, ok := m.podStatuses[uid]; !ok {
				delete(m.apiStatusVersions, uid)
			}
		}
		// A write the informer has seen (or that a later change overtook) is no
		// longer needed; dropping it here bounds what is kept to the pods whose
		// last write is still in flight to the informer.
		for uid, w := range m.ownWrites {
			pod, ok := m.podGetter.GetPodByUID(uid)
			if _, tracked := m.podStatuses[uid]; !tracked || !ok || pod.ResourceVersion != w.from {
				delete(m.ownWrites, uid)
			}
		}
	}
	for uid, s := range m.podStatuses {
		switch {
		case m.apiStatusVersions[uid] < s.version:
			updates = append(updates, podSync{uid, s})
		case !all:
		case m.needsUpdate(uid, s):
			updates = append(updates, podSync{uid, s})
		case m.needsReconcile(uid, s.status):
			delete(m.apiStatusVersions, uid)
			updates = append(updates, podSync{uid, s})
		}
	}
	m.mu.Unlock()
	for _, u := range updates {
		if ctx.Err() != nil {
			return
		}
		m.syncPod(ctx, u.uid, u.status)
	}
}

// needsUpdate reports whether a written status must be synced again because
// the pod can now be deleted. Callers hold mu.
func (m *Manager) needsUpdate(uid types.UID, s versionedPodStatus) bool {
	pod, ok := m.podGetter.GetPodByUID(uid)
	return ok && m.canBeDeleted(pod, s.podIsFinished)
}

// needsReconcile reports whether the API server's status (as last seen by
// the config source) differs from the cached one. Callers hold mu.
func (m *Manager) needsReconcile(uid types.UID, status v1.PodStatus) bool {
	pod, ok := m.podGetter.GetPodByUID(uid)
	if !ok {
		return false
	}
	if kubetypes.IsStaticPod(pod) {
		if pod, ok = m.podGetter.GetMirrorPodByPod(pod); !ok {
			return false
		}
	}
	apiStatus := pod.Status.DeepCopy()
	normalizeStatus(pod, apiStatus)
	return !isPodStatusByKubeletEqual(apiStatus, &status)
}

// errPodRecreated stops a sync whose pod name now belongs to another UID.
var errPodRecreated = errors.New("pod was deleted and recreated")

// errMirrorPodOutdated stops a static pod's sync while its mirror pod is not
// (yet) the current one; the kubelet recreates it, and a later sync writes.
var errMirrorPodOutdated = errors.New("mirror pod is outdated")

// syncPod writes one status: it reads the pod (see currentPod), merges the cached status into
// the API's (keeping conditions the kubelet does not own, and holding back a
// terminal phase while containers may run), writes it with UpdateStatus on
// that resourceVersion if it changed (retrying on conflict), and then deletes
// the pod if it is being deleted and the pod worker has finished with it.
// Mirrors manager.syncPod (which uses a strategic merge patch instead).
func (m *Manager) syncPod(ctx context.Context, uid types.UID, s versionedPodStatus) {
	logger := m.logger.With("pod", s.podNamespace+"/"+s.podName, "podUID", uid)
	if _, known := m.podGetter.GetPodByUID(uid); !known {
		// The pod is gone from the API server (the pod manager forgets a pod on its
		// DELETE): there is no object to write to, and a GET would be refused by the
		// Node authorizer, which relates no node to a pod that does not exist.
		// RemoveOrphanedStatuses forgets the status at housekeeping.
		logger.Debug("pod deleted from the API server; its status is not written")
		return
	}
	ctx, span := m.startSpan(ctx, uid, s)
	defer span.End()
	pods := m.client.CoreV1().Pods(s.podNamespace)
	var pod *v1.Pod
	// The first attempt starts from the kubelet's own copy of the pod (its
	// informer's), which is almost always current: only the kubelet writes
	// a bound pod's status. A stale copy fails the resourceVersion
	// precondition with 409, and every retry reads the pod from the API
	// server, as kube's status manager always does. This saves a read per
	// status write. A copy never decides that nothing needs writing: it may
	// lag another writer's change (the node lifecycle controller setting
	// Ready=False), so that answer comes from a read.
	fromInformer := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		for {
			current, fromCopy, err := m.currentPod(ctx, uid, s, fromInformer)
			fromInformer = false
			if err != nil {
				return err
			}
			if current.UID != uid {
				// A static pod's status goes to its current mirror pod.
				static, ok := m.podGetter.GetPodByUID(uid)
				if !ok || !kubetypes.IsStaticPod(static) {
					return errPodRecreated
				}
				if !kubetypes.IsMirrorPodOf(current, static) {
					return errMirrorPodOutdated
				}
			}
			merged := mergePodStatus(current.Status, s.status, m.safety.PodCouldHaveRunningContainers(uid))
			apiStatus := current.Status.DeepCopy()
			normalizeStatus(current, apiStatus)
			if isPodStatusByKubeletEqual(apiStatus, &merged) {
				if fromCopy {
					continue
				}
				pod = current
				return nil
			}
			// The pod as read with the merged status. A shallow copy: the client only
			// encodes it, and current (often the informer's pod) is never written to.
			update := *current
			update.Status = merged
			updated, err := pods.UpdateStatus(ctx, &update, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
			logger.Debug("pod status updated", "phase", merged.Phase, "version", s.version)
			m.ownWrites[uid] = ownWrite{from: current.ResourceVersion, to: updated.ResourceVersion, status: updated.Status}
			pod = updated
			return nil
		}
	})
	switch {
	case apierrors.IsNotFound(err):
		// Deleted: RemoveOrphanedStatuses forgets it at housekeeping.
		return
	case errors.Is(err, errMirrorPodOutdated):
		return
	case errors.Is(err, errPodRecreated):
		m.mu.Lock()
		delete(m.podStatuses, uid)
		m.mu.Unlock()
		delete(m.ownWrites, uid)
		return
	case err != nil:
		tracing.RecordError(span, err)
		if ctx.Err() == nil {
			logger.Error("failed to update pod status", "err", err)
		}
		return
	}
	m.mu.Lock()
	m.apiStatusVersions[uid] = s.version
	m.mu.Unlock()

	if !m.canBeDeleted(pod, s.podIsFinished) {
		return
	}
	// The UID precondition keeps a new pod of the same name safe.
	err = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		if ctx.Err() == nil {
			logger.Error("failed to delete pod", "err", err)
		}
		return
	}
	logger.Info("pod fully terminated and removed from the API server")
	m.mu.Lock()
	delete(m.podStatuses, uid)
	m.mu.Unlock()
}

// currentPod is the base of a status write: with fromInformer, the kubelet's
// copy of pod uid when it has one with a resourceVersion (never for a static
// pod, whose status goes to its mirror pod), and fromCopy is true; otherwise a
// GET.
func (m *Manager) currentPod(ctx context.Context, uid types.UID, s versionedPodStatus, fromInformer bool) (pod *v1.Pod, fromCopy bool, err error) {
	if fromInformer {
		if pod, ok := m.podGetter.GetPodByUID(uid); ok && pod.ResourceVersion != "" && !kubetypes.IsStaticPod(pod) {
			w, written := m.ownWrites[uid]
			if !written || pod.ResourceVersion != w.from {
				delete(m.ownWrites, uid) // the informer has seen it, or a later write
				return pod, true, nil
			}
			// The informer lags this manager's last write: the pod is its copy with
			// the written status (a shallow copy; callers copy before changing it).
			lagging := *pod
			lagging.ResourceVersion, lagging.Status = w.to, w.status
			return &lagging, true, nil
		}
	}
	pod, err = m.client.CoreV1().Pods(s.podNamespace).Get(ctx, s.podName, metav1.GetOptions{})
	return pod, false, err
}

// canBeDeleted reports whether a pod being deleted may now be removed from
// the API server: its API phase is terminal and the pod worker has finished.
// Mirrors manager.canBeDeleted.
func (m *Manager) canBeDeleted(pod *v1.Pod, podIsFinished bool) bool {
	// A mirror pod is deleted by the kubelet's mirror client, never here.
	if pod.DeletionTimestamp == nil || kubetypes.IsMirrorPod(pod) || kubetypes.IsStaticPod(pod) {
		return false
	}
	if pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
		return false
	}
	return podIsFinished
}

// mergePodStatus returns the status to write: the kubelet's status, with the
// API's conditions that the kubelet does not own, and with the API's phase
// kept while a transition to a terminal phase would come too early (the pod
// could still have running containers). A terminal status never reports
// Ready. Mirrors status manager's mergePodStatus.
func mergePodStatus(oldStatus, newStatus v1.PodStatus, couldHaveRunningContainers bool) v1.PodStatus {
	conditions := make([]v1.PodCondition, 0, len(oldStatus.Conditions)+len(newStatus.Conditions))
	for _, c := range oldStatus.Conditions {
		if !PodConditionByKubelet(c.Type) && c.Type != v1.DisruptionTarget {
			conditions = append(conditions, c)
		}
	}
	for _, c := range newStatus.Conditions {
		if PodConditionByKubelet(c.Type) {
			conditions = append(conditions, c)
		} else if c.Type == v1.DisruptionTarget {
			conditions = replaceOrAppend(conditions, c)
		}
	}
	newStatus.Conditions = conditions
	// Fields other components own.
	newStatus.ResourceClaimStatuses = oldStatus.ResourceClaimStatuses
	newStatus.NominatedNodeName = oldStatus.NominatedNodeName

	isTerminal := func(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
	if !isTerminal(oldStatus.Phase) && isTerminal(newStatus.Phase) && couldHaveRunningContainers {
		newStatus.Phase, newStatus.Reason, newStatus.Message = oldStatus.Phase, oldStatus.Reason, oldStatus.Message
	}
	if isTerminal(newStatus.Phase) {
		for i := range newStatus.Conditions {
			c := &newStatus.Conditions[i]
			if (c.Type == v1.PodReady || c.Type == v1.ContainersReady) && c.Status == v1.ConditionTrue {
				c.Status = v1.ConditionFalse
				c.Reason = PodCompleted
				if newStatus.Phase == v1.PodFailed {
					c.Reason = "PodFailed"
				}
				c.LastTransitionTime = metav1.Now().Rfc3339Copy()
			}
		}
	}
	return newStatus
}

func replaceOrAppend(conditions []v1.PodCondition, c v1.PodCondition) []v1.PodCondition {
	if i := slices.IndexFunc(conditions, func(x v1.PodCondition) bool { return x.Type == c.Type }); i >= 0 {
		conditions[i] = c
		return conditions
	}
	return append(conditions, c)
}

// startSpan starts the span of one status write. While the pod is still Pending in the
// API the write is part of the pod's creation and continues the pod's trace
// (skiff.dev/traceparent); later writes (restarts, termination) start their own trace
// linked to it.
func (m *Manager) startSpan(ctx context.Context, uid types.UID, s versionedPodStatus) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		semconv.K8SPodName(s.podName), semconv.K8SPodUID(string(uid)), semconv.K8SNamespaceName(s.podNamespace),
		attribute.String("skiff.pod.phase", string(s.status.Phase)),
	}
	pod, ok := m.podGetter.GetPodByUID(uid)
	if !ok {
		return m.Tracer.Start(ctx, "UpdatePodStatus", trace.WithAttributes(attrs...))
	}
	if pod.Spec.NodeName != "" {
		attrs = append(attrs, semconv.K8SNodeName(pod.Spec.NodeName))
	}
	if pod.Status.Phase == "" || pod.Status.Phase == v1.PodPending {
		return m.Tracer.Start(tracing.ContextWithObjectTrace(ctx, pod), "UpdatePodStatus", trace.WithAttributes(attrs...))
	}
	return m.Tracer.Start(ctx, "UpdatePodStatus", trace.WithAttributes(attrs...), tracing.LinkToObjectTrace(pod))
}
