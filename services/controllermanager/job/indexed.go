package job

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"skiff.dev/services/controllermanager/podcontrol"
)

// CompletionIndexEnvName is the environment variable through which an Indexed Job's
// containers read their completion index (from the pod's completion-index label, by
// the downward API). Mirrors completionIndexEnvName.
const CompletionIndexEnvName = "JOB_COMPLETION_INDEX"

// unknownCompletionIndex is the index of a pod without a valid completion index
// annotation.
const unknownCompletionIndex = -1

// maxGeneratedNameLength is how much of a generateName the apiserver keeps before
// appending its 5 random characters. Mirrors names.MaxGeneratedNameLength.
const maxGeneratedNameLength = 63 - 5

func isIndexedJob(job *batchv1.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
}

func hasBackoffLimitPerIndex(job *batchv1.Job) bool {
	return job.Spec.BackoffLimitPerIndex != nil
}

// interval is the closed range of indexes First..Last.
type interval struct {
	First, Last int
}

// orderedIntervals is a set of indexes as sorted, disjoint, non-adjacent intervals: the
// model of status.completedIndexes and status.failedIndexes. Mirrors orderedIntervals
// of kube's indexed_job_utils.go.
type orderedIntervals []interval

// withOrderedIndexes returns oi with the increasing indexes added.
func (oi orderedIntervals) withOrderedIndexes(indexes []int) orderedIntervals {
	add := make(orderedIntervals, len(indexes))
	for i, ix := range indexes {
		add[i] = interval{ix, ix}
	}
	return oi.merge(add)
}

// merge returns the union of oi and other.
func (oi orderedIntervals) merge(other orderedIntervals) orderedIntervals {
	var result orderedIntervals
	appendOrExtend := func(iv interval) {
		if n := len(result); n == 0 || iv.First > result[n-1].Last+1 {
			result = append(result, iv)
		} else if result[n-1].Last < iv.Last {
			result[n-1].Last = iv.Last
		}
	}
	i, j := 0, 0
	for i < len(oi) && j < len(other) {
		if oi[i].First < other[j].First {
			appendOrExtend(oi[i])
			i++
		} else {
			appendOrExtend(other[j])
			j++
		}
	}
	for ; i < len(oi); i++ {
		appendOrExtend(oi[i])
	}
	for ; j < len(other); j++ {
		appendOrExtend(other[j])
	}
	return result
}

// total is how many indexes oi holds.
func (oi orderedIntervals) total() int {
	n := 0
	for _, iv := range oi {
		n += iv.Last - iv.First + 1
	}
	return n
}

// String renders oi as kube writes completedIndexes: "1,3-5,7", a pair of adjacent
// indexes as "3,4".
func (oi orderedIntervals) String() string {
	var b strings.Builder
	for _, iv := range oi {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(iv.First))
		switch {
		case iv.Last == iv.First+1:
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(iv.Last))
		case iv.Last > iv.First:
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(iv.Last))
		}
	}
	return b.String()
}

// has reports whether ix is in oi.
func (oi *orderedIntervals) has(ix int) bool {
	if oi == nil {
		return false
	}
	k := sort.Search(len(*oi), func(i int) bool { return (*oi)[i].Last >= ix })
	return k < len(*oi) && (*oi)[k].First <= ix
}

// parseIndexesFromString reads the interval format, dropping indexes at or above
// completions and skipping fragments that do not parse. Mirrors
// parseIndexesFromString.
func parseIndexesFromString(s string, completions int) orderedIntervals {
	if s == "" {
		return nil
	}
	var result orderedIntervals
	for _, part := range strings.Split(s, ",") {
		limits := strings.Split(part, "-")
		first, err := strconv.Atoi(limits[0])
		if err != nil {
			continue
		}
		if first >= completions {
			break
		}
		last := first
		if len(limits) > 1 {
			if last, err = strconv.Atoi(limits[1]); err != nil {
				continue
			}
			last = min(last, completions-1)
		}
		if n := len(result); n > 0 && result[n-1].Last == first-1 {
			result[n-1].Last = last
		} else {
			result = append(result, interval{first, last})
		}
	}
	return result
}

// getCompletionIndex is the pod's batch.kubernetes.io/job-completion-index annotation,
// or unknownCompletionIndex.
func getCompletionIndex(annotations map[string]string) int {
	v, ok := annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return unknownCompletionIndex
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return unknownCompletionIndex
	}
	return i
}

// validIndex: the pod has a completion index below the Job's completions.
func validIndex(job *batchv1.Job, p *corev1.Pod) (int, bool) {
	ix := getCompletionIndex(p.Annotations)
	return ix, ix != unknownCompletionIndex && ix < int(*job.Spec.Completions)
}

// calculateSucceededIndexes returns the indexes of status.completedIndexes and those
// plus the indexes of succeeded pods not yet counted (still with the tracking
// finalizer).
func calculateSucceededIndexes(job *batchv1.Job, pods []*corev1.Pod) (orderedIntervals, orderedIntervals) {
	prev := parseIndexesFromString(job.Status.CompletedIndexes, int(*job.Spec.Completions))
	newSucceeded := sets.New[int]()
	for _, p := range pods {
		if ix, ok := validIndex(job, p); ok && p.Status.Phase == corev1.PodSucceeded && hasJobTrackingFinalizer(p) {
			newSucceeded.Insert(ix)
		}
	}
	return prev, prev.withOrderedIndexes(sets.List(newSucceeded))
}

// calculateFailedIndexes returns status.failedIndexes plus the indexes whose pods, not
// yet counted, failed past backoffLimitPerIndex or matched a FailIndex rule.
func calculateFailedIndexes(job *batchv1.Job, pods []*corev1.Pod) *orderedIntervals {
	var prev orderedIntervals
	if job.Status.FailedIndexes != nil {
		prev = parseIndexesFromString(*job.Status.FailedIndexes, int(*job.Spec.Completions))
	}
	newFailed := sets.New[int]()
	for _, p := range pods {
		if ix, ok := validIndex(job, p); ok && hasJobTrackingFinalizer(p) && isIndexFailed(job, p) {
			newFailed.Insert(ix)
		}
	}
	result := prev.withOrderedIndexes(sets.List(newFailed))
	return &result
}

// isIndexFailed: the pod failed and either matched a FailIndex rule or, counted, ends
// the index's backoffLimitPerIndex.
func isIndexFailed(job *batchv1.Job, p *corev1.Pod) bool {
	if !isPodFailed(p, job) {
		return false
	}
	counted := true
	if job.Spec.PodFailurePolicy != nil {
		_, countFailed, action := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p)
		if action != nil && *action == batchv1.PodFailurePolicyActionFailIndex {
			return true
		}
		counted = countFailed
	}
	return counted && indexFailureCount(p) >= *job.Spec.BackoffLimitPerIndex
}

// firstPendingIndexes returns up to count indexes below completions that no active pod
// runs, that have not succeeded and not failed; with podReplacementPolicy Failed,
// indexes of terminating pods are not pending either.
func firstPendingIndexes(jobCtx *syncJobCtx, count, completions int) []int {
	if count == 0 {
		return nil
	}
	nonPending := jobCtx.succeededIndexes.withOrderedIndexes(sets.List(getIndexes(jobCtx.activePods)))
	if onlyReplaceFailedPods(jobCtx.job) {
		var terminating []*corev1.Pod
		for _, p := range jobCtx.pods {
			if isPodTerminating(p) {
				terminating = append(terminating, p)
			}
		}
		nonPending = nonPending.withOrderedIndexes(sets.List(getIndexes(terminating)))
	}
	if jobCtx.failedIndexes != nil {
		nonPending = nonPending.merge(*jobCtx.failedIndexes)
	}
	result := make([]int, 0, count)
	candidate := 0
	for _, iv := range nonPending {
		for ; candidate < completions && len(result) < count && candidate < iv.First; candidate++ {
			result = append(result, candidate)
		}
		candidate = max(candidate, iv.Last+1)
	}
	for ; candidate < completions && len(result) < count; candidate++ {
		result = append(result, candidate)
	}
	return result
}

func getIndexes(pods []*corev1.Pod) sets.Set[int] {
	result := sets.New[int]()
	for _, p := range pods {
		if ix := getCompletionIndex(p.Annotations); ix != unknownCompletionIndex {
			result.Insert(ix)
		}
	}
	return result
}

// byCompletionIndex sorts pods by completion index.
type byCompletionIndex []*corev1.Pod

func (b byCompletionIndex) Len() int      { return len(b) }
func (b byCompletionIndex) Swap(i, j int) { b[i], b[j] = b[j], b[i] }
func (b byCompletionIndex) Less(i, j int) bool {
	return getCompletionIndex(b[i].Annotations) < getCompletionIndex(b[j].Annotations)
}

// duplicatedIndexPodsForRemoval splits active pods of an Indexed Job: pods without an
// index or with one at or above completions, and all but the best pod of a repeated
// index, go to rm; the rest to left.
func duplicatedIndexPodsForRemoval(pods []*corev1.Pod, completions int) (rm, left []*corev1.Pod) {
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.Stable(byCompletionIndex(sorted))
	for start := 0; start < len(sorted); {
		ix := getCompletionIndex(sorted[start].Annotations)
		end := start + 1
		for end < len(sorted) && getCompletionIndex(sorted[end].Annotations) == ix {
			end++
		}
		group := sorted[start:end]
		switch {
		case ix == unknownCompletionIndex || ix >= completions:
			rm = append(rm, group...)
		case len(group) == 1:
			left = append(left, group[0])
		default:
			group = append([]*corev1.Pod(nil), group...)
			sort.Sort(podcontrol.RankedForDeletion{Pods: group, Ranks: make([]int, len(group))})
			rm = append(rm, group[:len(group)-1]...)
			left = append(left, group[len(group)-1])
		}
		start = end
	}
	return rm, left
}

// podsWithDelayedDeletionPerIndex returns, per index that is neither finished nor
// running, the last failed pod: its tracking finalizer stays until its replacement is
// created, so the replacement can inherit its failure count.
func podsWithDelayedDeletionPerIndex(jobCtx *syncJobCtx) map[int]*corev1.Pod {
	active := getIndexes(jobCtx.activePods)
	result := map[int]*corev1.Pod{}
	for _, p := range validPodsWithFilter(jobCtx, nil, func(p *corev1.Pod) bool { return isPodFailed(p, jobCtx.job) }) {
		ix := getCompletionIndex(p.Annotations)
		if jobCtx.succeededIndexes.has(ix) || jobCtx.failedIndexes.has(ix) || active.Has(ix) {
			continue
		}
		if last, ok := result[ix]; ok {
			if absoluteIndexFailureCount(last) <= absoluteIndexFailureCount(p) && !getFinishedTime(p).Before(getFinishedTime(last)) {
				result[ix] = p
			}
		} else {
			result[ix] = p
		}
	}
	return result
}

// newIndexFailureCounts is the failure counts a pod replacing podBeingReplaced starts
// with: its counts, plus one counted (or, matched by an Ignore rule, ignored) failure.
func newIndexFailureCounts(job *batchv1.Job, podBeingReplaced *corev1.Pod) (failed, ignored int32) {
	if podBeingReplaced == nil {
		return 0, 0
	}
	failed, ignored = indexFailureCount(podBeingReplaced), indexIgnoredFailureCount(podBeingReplaced)
	countFailed := true
	if job.Spec.PodFailurePolicy != nil {
		_, countFailed, _ = matchPodFailurePolicy(job.Spec.PodFailurePolicy, podBeingReplaced)
	}
	if countFailed {
		failed++
	} else {
		ignored++
	}
	return failed, ignored
}

func indexFailureCount(p *corev1.Pod) int32 {
	return parseCount(p.Annotations[batchv1.JobIndexFailureCountAnnotation])
}

func indexIgnoredFailureCount(p *corev1.Pod) int32 {
	return parseCount(p.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation])
}

func absoluteIndexFailureCount(p *corev1.Pod) int32 {
	return indexFailureCount(p) + indexIgnoredFailureCount(p)
}

// parseCount reads a non-negative int32 annotation; anything else counts as 0.
func parseCount(v string) int32 {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0
	}
	return int32(n)
}

// addCompletionIndexEnvVariables gives every container JOB_COMPLETION_INDEX from the
// pod's completion-index label (kube 1.32's PodIndexLabel), unless it sets it itself.
func addCompletionIndexEnvVariables(template *corev1.PodTemplateSpec) {
	add := func(c *corev1.Container) {
		for _, e := range c.Env {
			if e.Name == CompletionIndexEnvName {
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: CompletionIndexEnvName, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.labels['%s']", batchv1.JobCompletionIndexAnnotation)},
		}})
	}
	for i := range template.Spec.InitContainers {
		add(&template.Spec.InitContainers[i])
	}
	for i := range template.Spec.Containers {
		add(&template.Spec.Containers[i])
	}
}

// setCompletionIndex stamps one index on a pod template: the completion-index
// annotation and label, hostname <job>-<index>.
func setCompletionIndex(template *corev1.PodTemplateSpec, jobName string, index int) {
	if template.Annotations == nil {
		template.Annotations = map[string]string{}
	}
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	template.Annotations[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(index)
	template.Labels[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(index)
	template.Spec.Hostname = fmt.Sprintf("%s-%d", jobName, index)
}

// podGenerateNameWithIndex is "<job>-<index>-", the job name cut so the whole fits the
// generated-name limit.
func podGenerateNameWithIndex(jobName string, index int) string {
	suffix := "-" + strconv.Itoa(index) + "-"
	prefix := jobName + suffix
	if len(prefix) > maxGeneratedNameLength {
		prefix = prefix[:maxGeneratedNameLength-len(suffix)] + suffix
	}
	return prefix
}
