package job

import (
	"fmt"
	"sort"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

// matchPodFailurePolicy matches a failed pod against the rules in order; the first rule
// that matches decides. It returns the Job failure message when a FailJob rule matched
// (kube's wording: "Container c for pod ns/p failed with exit code 42 matching FailJob
// rule at index 0", or "Pod ns/p has condition DisruptionTarget matching FailJob rule
// at index 1"), whether the failure counts towards backoffLimit (false for Ignore), and
// the action matched (nil when none). Mirrors matchPodFailurePolicy.
func matchPodFailurePolicy(policy *batchv1.PodFailurePolicy, pod *corev1.Pod) (*string, bool, *batchv1.PodFailurePolicyAction) {
	if policy == nil {
		return nil, true, nil
	}
	for index, rule := range policy.Rules {
		action := rule.Action
		var failJobMessage string
		switch {
		case rule.OnExitCodes != nil:
			cs := matchOnExitCodes(&pod.Status, rule.OnExitCodes)
			if cs == nil {
				continue
			}
			failJobMessage = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d",
				cs.Name, pod.Namespace, pod.Name, cs.State.Terminated.ExitCode, action, index)
		case rule.OnPodConditions != nil:
			c := matchOnPodConditions(&pod.Status, rule.OnPodConditions)
			if c == nil {
				continue
			}
			failJobMessage = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d",
				pod.Namespace, pod.Name, c.Type, action, index)
		default:
			continue
		}
		switch action {
		case batchv1.PodFailurePolicyActionIgnore:
			return nil, false, &action
		case batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyActionCount:
			return nil, true, &action
		case batchv1.PodFailurePolicyActionFailJob:
			return &failJobMessage, true, &action
		}
		// An unknown action: clients skip the rule.
	}
	return nil, true, nil
}

// matchOnExitCodes returns the first terminated container (then init container) whose
// non-zero exit code meets the requirement.
func matchOnExitCodes(status *corev1.PodStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses} {
		for i := range list {
			cs := &list[i]
			t := cs.State.Terminated
			if t == nil || t.ExitCode == 0 || (req.ContainerName != nil && *req.ContainerName != cs.Name) {
				continue
			}
			if exitCodeMatches(t.ExitCode, req) {
				return cs
			}
		}
	}
	return nil
}

func exitCodeMatches(code int32, req *batchv1.PodFailurePolicyOnExitCodesRequirement) bool {
	in := false
	for _, v := range req.Values {
		if v == code {
			in = true
			break
		}
	}
	switch req.Operator {
	case batchv1.PodFailurePolicyOnExitCodesOpIn:
		return in
	case batchv1.PodFailurePolicyOnExitCodesOpNotIn:
		return !in
	}
	return false
}

func matchOnPodConditions(status *corev1.PodStatus, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		for _, p := range patterns {
			if c.Type == p.Type && c.Status == p.Status {
				return c
			}
		}
	}
	return nil
}

// matchSuccessPolicy reports whether the succeeded indexes meet a rule of the success
// policy, with kube's message "Matched rules at index N". Mirrors matchSuccessPolicy.
func matchSuccessPolicy(policy *batchv1.SuccessPolicy, completions int32, succeeded orderedIntervals) (string, bool) {
	if policy == nil || len(succeeded) == 0 {
		return "", false
	}
	for index, rule := range policy.Rules {
		if rule.SucceededIndexes != nil {
			required := parseIndexesFromString(*rule.SucceededIndexes, int(completions))
			if len(required) == 0 {
				continue
			}
			if matchSucceededIndexesRule(required, succeeded, rule.SucceededCount) {
				return fmt.Sprintf("Matched rules at index %d", index), true
			}
		} else if rule.SucceededCount != nil && succeeded.total() >= int(*rule.SucceededCount) {
			return fmt.Sprintf("Matched rules at index %d", index), true
		}
	}
	return "", false
}

// matchSucceededIndexesRule: every required index succeeded, or at least succeededCount
// of them did.
func matchSucceededIndexesRule(required, succeeded orderedIntervals, succeededCount *int32) bool {
	contains := 0
	for r, s := 0, 0; r < len(required) && s < len(succeeded); {
		if overlap := min(required[r].Last, succeeded[s].Last) - max(required[r].First, succeeded[s].First) + 1; overlap > 0 {
			contains += overlap
		}
		switch {
		case succeeded[s].Last < required[r].Last:
			s++
		case succeeded[s].Last > required[r].Last:
			r++
		default:
			s++
			r++
		}
	}
	return contains == required.total() || (succeededCount != nil && contains >= int(*succeededCount))
}

// backoffRecord is, for one Job, how many pods failed since the last success and when
// the last of them finished. Mirrors backoffRecord of kube's backoff_utils.go.
type backoffRecord struct {
	failuresAfterLastSuccess int32
	lastFailureTime          *time.Time
}

// backoffStore holds the backoff records by Job key.
type backoffStore struct {
	mu      sync.Mutex
	records map[string]backoffRecord
}

func (s *backoffStore) update(key string, r backoffRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[key] = r
}

func (s *backoffStore) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, key)
}

// newBackoffRecord returns key's record advanced by the pods that finished since the
// last sync: a success resets the count to the failures that finished after it.
func (s *backoffStore) newBackoffRecord(key string, newSucceeded, newFailed []*corev1.Pod) backoffRecord {
	s.mu.Lock()
	r := s.records[key]
	s.mu.Unlock()
	sortByFinishedTime(newSucceeded)
	sortByFinishedTime(newFailed)
	if len(newSucceeded) == 0 {
		if len(newFailed) == 0 {
			return r
		}
		last := getFinishedTime(newFailed[len(newFailed)-1])
		return backoffRecord{failuresAfterLastSuccess: r.failuresAfterLastSuccess + int32(len(newFailed)), lastFailureTime: &last}
	}
	r = backoffRecord{}
	lastSuccess := getFinishedTime(newSucceeded[len(newSucceeded)-1])
	for i := len(newFailed) - 1; i >= 0; i-- {
		t := getFinishedTime(newFailed[i])
		if !t.After(lastSuccess) {
			break
		}
		if r.lastFailureTime == nil {
			r.lastFailureTime = &t
		}
		r.failuresAfterLastSuccess++
	}
	return r
}

func sortByFinishedTime(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool { return getFinishedTime(pods[i]).Before(getFinishedTime(pods[j])) })
}

// getFinishedTime estimates when a pod finished: the latest container finish time,
// else when Ready turned False, else its deletion time less the grace period, else its
// creation. Mirrors getFinishedTime.
func getFinishedTime(p *corev1.Pod) time.Time {
	var latest *time.Time
	complete := len(p.Status.ContainerStatuses) > 0
	for _, cs := range p.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.FinishedAt.IsZero() {
			complete = false
			break
		}
		if latest == nil || latest.Before(t.FinishedAt.Time) {
			latest = &t.FinishedAt.Time
		}
	}
	if complete && latest != nil {
		return *latest
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if p.DeletionTimestamp != nil {
		return p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
	}
	return p.CreationTimestamp.Time
}

// remainingBackoff is how long to wait before the next pod after failures, the last
// at lastFailure: base × 2^(failures-1), at most maxDelay.
func remainingBackoff(now time.Time, base, maxDelay time.Duration, failures int32, lastFailure *time.Time) time.Duration {
	if failures == 0 || lastFailure == nil {
		return 0
	}
	delay := base
	for i := 1; i < int(failures); i++ {
		delay *= 2
		if delay >= maxDelay {
			delay = maxDelay
			break
		}
	}
	elapsed := now.Sub(*lastFailure)
	if delay < elapsed {
		return 0
	}
	return delay - elapsed
}

// finalizerExpectations remembers, per Job key, the pods whose tracking finalizer the
// controller removed and the informer has not yet shown without it, so they are not
// counted twice. Mirrors uidTrackingExpectations.
type finalizerExpectations struct {
	mu   sync.Mutex
	uids map[string]sets.Set[types.UID]
}

func (e *finalizerExpectations) expectRemoved(key string, uids []types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.uids[key] == nil {
		e.uids[key] = sets.New[types.UID]()
	}
	e.uids[key].Insert(uids...)
}

func (e *finalizerExpectations) observed(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.uids[key]; s != nil {
		s.Delete(uid)
		if s.Len() == 0 {
			delete(e.uids, key)
		}
	}
}

func (e *finalizerExpectations) expected(key string) sets.Set[types.UID] {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.uids[key].Clone()
}

func (e *finalizerExpectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.uids, key)
}
