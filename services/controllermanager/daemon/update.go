package daemon

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/podcontrol"
)

// rollingUpdate picks the old pods to delete, or the nodes to surge a new pod onto,
// within the update strategy's bounds; manage recreates what is deleted. Without surge,
// old pods are deleted while the nodes without an available pod stay within
// maxUnavailable (old pods that are unavailable anyway go at once). With surge, a new
// pod is created beside an old one on up to maxSurge nodes (at once where the old one is
// unavailable), and the old pod is deleted when the new one is available. Mirrors
// rollingUpdate.
func (dsc *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string) error {
	nodeToDaemonPods, err := dsc.getNodesToDaemonPods(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %v", ds.Name, err)
	}
	maxSurge, maxUnavailable, desiredNumberScheduled, err := dsc.updatedDesiredNodeCounts(ds, nodeList, nodeToDaemonPods)
	if err != nil {
		return fmt.Errorf("couldn't get unavailable numbers: %v", err)
	}
	now := dsc.now()
	available := func(pod *corev1.Pod) bool { return podcontrol.IsAvailable(pod, ds.Spec.MinReadySeconds, now) }

	if maxSurge == 0 {
		var numUnavailable int
		var allowedReplacementPods, candidatePodsToDelete []*corev1.Pod
		for _, pods := range nodeToDaemonPods {
			newPod, oldPod, ok := findUpdatedPodsOnNode(ds, pods, hash)
			if !ok {
				// Excess pods: manage prunes them; count the node unavailable meanwhile.
				numUnavailable++
				continue
			}
			switch {
			case oldPod == nil && newPod == nil, oldPod != nil && newPod != nil:
				// manage creates or deletes here; unavailable until it has.
				numUnavailable++
			case newPod != nil:
				if !available(newPod) {
					numUnavailable++
				}
			default:
				switch {
				case !available(oldPod):
					// Replacing an unavailable pod costs no availability.
					allowedReplacementPods = append(allowedReplacementPods, oldPod)
					numUnavailable++
				case numUnavailable >= maxUnavailable:
					// No room for other candidates.
				default:
					candidatePodsToDelete = append(candidatePodsToDelete, oldPod)
				}
			}
		}
		remainingUnavailable := max(maxUnavailable-numUnavailable, 0)
		remainingUnavailable = min(remainingUnavailable, len(candidatePodsToDelete))
		oldPodsToDelete := append(allowedReplacementPods, candidatePodsToDelete[:remainingUnavailable]...)
		return dsc.syncNodes(ctx, ds, oldPodsToDelete, nil, hash)
	}

	var oldPodsToDelete []*corev1.Pod          // replaced, or unavailable where they should not run
	var shouldNotRunPodsToDelete []*corev1.Pod // available old pods where they should no longer run
	var candidateNewNodes, allowedNewNodes []string
	var numSurge, numAvailable int
	for nodeName, pods := range nodeToDaemonPods {
		newPod, oldPod, ok := findUpdatedPodsOnNode(ds, pods, hash)
		if !ok {
			// Excess pods: manage prunes them; count the node as surging meanwhile.
			numSurge++
			continue
		}
		// Availability counts every node, those being left included.
		if oldPod != nil {
			if available(oldPod) {
				numAvailable++
			}
		} else if newPod != nil && available(newPod) {
			numAvailable++
		}

		switch {
		case oldPod == nil:
			// Nothing to roll here; manage creates a pod if one is missing.
		case newPod == nil:
			node, err := dsc.nodeLister.Get(nodeName)
			if err != nil {
				return fmt.Errorf("couldn't get node for nodeName %q: %v", nodeName, err)
			}
			shouldRun, _ := NodeShouldRunDaemonPod(node, ds)
			switch {
			case !available(oldPod):
				if !shouldRun {
					oldPodsToDelete = append(oldPodsToDelete, oldPod)
					continue
				}
				allowedNewNodes = append(allowedNewNodes, nodeName)
			case !shouldRun:
				shouldNotRunPodsToDelete = append(shouldNotRunPodsToDelete, oldPod)
			case numSurge >= maxSurge:
				// No room for other candidates.
			default:
				candidateNewNodes = append(candidateNewNodes, nodeName)
			}
		default:
			// Already surged here: the old pod goes once the new one is available.
			if !available(newPod) {
				numSurge++
				continue
			}
			oldPodsToDelete = append(oldPodsToDelete, oldPod)
		}
	}

	// With surge the owner expects full availability: a pod on a node the DaemonSet is
	// leaving goes only once enough pods are available elsewhere.
	if deletable := min(numAvailable-desiredNumberScheduled, len(shouldNotRunPodsToDelete)); deletable > 0 {
		for _, pod := range shouldNotRunPodsToDelete[:deletable] {
			if _, err := dsc.podLister.Pods(ds.Namespace).Get(pod.Name); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return fmt.Errorf("couldn't get pod which should be deleted due to scheduling constraints %q: %v", pod.Name, err)
			}
			oldPodsToDelete = append(oldPodsToDelete, pod)
		}
	}
	remainingSurge := min(max(maxSurge-numSurge, 0), len(candidateNewNodes))
	newNodesToCreate := append(allowedNewNodes, candidateNewNodes[:remainingSurge]...)
	return dsc.syncNodes(ctx, ds, oldPodsToDelete, newNodesToCreate, hash)
}

// findUpdatedPodsOnNode returns the node's live new pod and old pod; ok is false when
// it has more than one of either (manage prunes those first). Mirrors
// findUpdatedPodsOnNode.
func findUpdatedPodsOnNode(ds *appsv1.DaemonSet, podsOnNode []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	generation, err := GetTemplateGeneration(ds)
	if err != nil {
		generation = nil
	}
	for _, pod := range podsOnNode {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if IsPodUpdated(pod, hash, generation) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = pod
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = pod
		}
	}
	return newPod, oldPod, true
}

// updatedDesiredNodeCounts returns maxSurge, maxUnavailable and the number of nodes
// that should run a pod, and adds an empty entry to nodeToDaemonPods for each such node
// without pods. Both bounds zero (only an old apiserver allows it) means
// maxUnavailable 1. Mirrors updatedDesiredNodeCounts.
func (dsc *Controller) updatedDesiredNodeCounts(ds *appsv1.DaemonSet, nodeList []*corev1.Node, nodeToDaemonPods map[string][]*corev1.Pod) (int, int, int, error) {
	var desiredNumberScheduled int
	for _, node := range nodeList {
		if wantToRun, _ := NodeShouldRunDaemonPod(node, ds); !wantToRun {
			continue
		}
		desiredNumberScheduled++
		if _, exists := nodeToDaemonPods[node.Name]; !exists {
			nodeToDaemonPods[node.Name] = nil
		}
	}
	maxUnavailable, err := UnavailableCount(ds, desiredNumberScheduled)
	if err != nil {
		return -1, -1, -1, fmt.Errorf("invalid value for MaxUnavailable: %v", err)
	}
	maxSurge, err := SurgeCount(ds, desiredNumberScheduled)
	if err != nil {
		return -1, -1, -1, fmt.Errorf("invalid value for MaxSurge: %v", err)
	}
	if desiredNumberScheduled > 0 && maxUnavailable == 0 && maxSurge == 0 {
		maxUnavailable = 1
	}
	return maxSurge, maxUnavailable, desiredNumberScheduled, nil
}

// constructHistory returns the revision of the DaemonSet's current template, creating it
// (numbered one above the others) when none matches, renumbering it when an older one
// matches again (a rollback), and keeping one when several match; old are the other
// revisions. Revisions without the controller-revision-hash label get their name as
// one. Mirrors constructHistory.
func (dsc *Controller) constructHistory(ctx context.Context, ds *appsv1.DaemonSet) (cur *appsv1.ControllerRevision, old []*appsv1.ControllerRevision, err error) {
	histories, err := dsc.controlledHistories(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	var currentHistories []*appsv1.ControllerRevision
	for _, history := range histories {
		if _, ok := history.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]; !ok {
			toUpdate := history.DeepCopy()
			if toUpdate.Labels == nil {
				toUpdate.Labels = map[string]string{}
			}
			// The name, not a fresh hash: no collision to worry about.
			toUpdate.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] = toUpdate.Name
			if history, err = dsc.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
				return nil, nil, err
			}
		}
		found, err := Match(ds, history)
		if err != nil {
			return nil, nil, err
		}
		if found {
			currentHistories = append(currentHistories, history)
		} else {
			old = append(old, history)
		}
	}

	currRevision := maxRevision(old) + 1
	switch len(currentHistories) {
	case 0:
		if cur, err = dsc.snapshot(ctx, ds, currRevision); err != nil {
			return nil, nil, err
		}
	default:
		if cur, err = dsc.dedupCurHistories(ctx, ds, currentHistories); err != nil {
			return nil, nil, err
		}
		if cur.Revision < currRevision {
			toUpdate := cur.DeepCopy()
			toUpdate.Revision = currRevision
			if _, err = dsc.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
				return nil, nil, err
			}
		}
	}
	return cur, old, nil
}

// cleanupHistory deletes the oldest old revisions beyond revisionHistoryLimit, sparing
// those some pod (terminal ones included) still carries the hash of. Mirrors
// cleanupHistory.
func (dsc *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision) error {
	nodesToDaemonPods, err := dsc.getNodesToDaemonPods(ctx, ds, true)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %v", ds.Name, err)
	}
	toKill := len(old)
	if ds.Spec.RevisionHistoryLimit != nil {
		toKill -= int(*ds.Spec.RevisionHistoryLimit)
	}
	if toKill <= 0 {
		return nil
	}
	liveHashes := map[string]bool{}
	for _, pods := range nodesToDaemonPods {
		for _, pod := range pods {
			if hash := pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]; len(hash) > 0 {
				liveHashes[hash] = true
			}
		}
	}
	sort.Sort(historiesByRevision(old))
	for _, history := range old {
		if toKill <= 0 {
			break
		}
		if liveHashes[history.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] {
			continue
		}
		if err := dsc.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, history.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		toKill--
	}
	return nil
}

// maxRevision is the highest revision number among histories, 0 for none.
func maxRevision(histories []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, history := range histories {
		m = max(m, history.Revision)
	}
	return m
}

// dedupCurHistories keeps the highest-numbered of several revisions of the current
// template, relabels the pods carrying another's hash and deletes the others. Mirrors
// dedupCurHistories.
func (dsc *Controller) dedupCurHistories(ctx context.Context, ds *appsv1.DaemonSet, curHistories []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if len(curHistories) == 1 {
		return curHistories[0], nil
	}
	var keepCur *appsv1.ControllerRevision
	var maxRev int64
	for _, cur := range curHistories {
		if cur.Revision >= maxRev {
			keepCur, maxRev = cur, cur.Revision
		}
	}
	keepHash := keepCur.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	pods, err := dsc.getDaemonPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	for _, pod := range pods {
		if pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == keepHash {
			continue
		}
		patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
			"labels": map[string]interface{}{appsv1.DefaultDaemonSetUniqueLabelKey: keepHash}}})
		if err != nil {
			return nil, err
		}
		if _, err := dsc.client.CoreV1().Pods(ds.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	for _, cur := range curHistories {
		if cur.Name == keepCur.Name {
			continue
		}
		if err := dsc.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return keepCur, nil
}

// controlledHistories returns the revisions ds owns, adopting matching orphans and
// releasing owned revisions that stopped matching. Mirrors controlledHistories.
func (dsc *Controller) controlledHistories(ctx context.Context, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	histories, err := dsc.historyLister.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &controllerref.Manager{
		Controller: ds, Kind: controllerKind, Selector: selector,
		CanAdopt: dsc.recheckDeletionTimestamp(ds),
		Patch: func(ctx context.Context, ns, name string, patch []byte) error {
			_, err := dsc.client.AppsV1().ControllerRevisions(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return controllerref.Claim(ctx, m, histories)
}

// Match reports whether history records ds's current template: its data is the patch
// getPatch makes of ds. kubectl rollout undo makes the same comparison. Mirrors Match.
func Match(ds *appsv1.DaemonSet, history *appsv1.ControllerRevision) (bool, error) {
	patch, err := getPatch(ds)
	if err != nil {
		return false, err
	}
	return bytes.Equal(patch, history.Data.Raw), nil
}

// getPatch is the strategic merge patch that restores ds's template:
// {"spec":{"template":{...,"$patch":"replace"}}}, keys sorted. Mirrors getPatch (and
// kubectl's getDaemonSetPatch: Match compares bytes, so kubectl rollout undo and the
// conformance suite compute the same patch). The template's zero creationTimestamp is
// written as null, as the Kubernetes 1.32 types encode it (newer ones omit it), so the
// bytes are those kube 1.32's controller and clients make.
func getPatch(ds *appsv1.DaemonSet) ([]byte, error) {
	dsBytes, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	var raw map[string]interface{}
	if err := json.Unmarshal(dsBytes, &raw); err != nil {
		return nil, err
	}
	spec := raw["spec"].(map[string]interface{})
	template := spec["template"].(map[string]interface{})
	metadata, ok := template["metadata"].(map[string]interface{})
	if !ok {
		metadata = map[string]interface{}{}
		template["metadata"] = metadata
	}
	if _, set := metadata["creationTimestamp"]; !set {
		metadata["creationTimestamp"] = nil
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"template": template}})
}

// snapshot creates the revision of ds's current template, named "<ds>-<hash>" and
// labelled with the template's labels and the hash, carrying ds's annotations. When the
// name is taken by a revision of another template, status.collisionCount is bumped (so
// the next hash differs) and the conflict returned, to retry. Mirrors snapshot.
func (dsc *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, revision int64) (*appsv1.ControllerRevision, error) {
	patch, err := getPatch(ds)
	if err != nil {
		return nil, err
	}
	hash := ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
	name := ds.Name + "-" + hash
	templateLabels := make(map[string]string, len(ds.Spec.Template.Labels)+1)
	for k, v := range ds.Spec.Template.Labels {
		templateLabels[k] = v
	}
	templateLabels[appsv1.DefaultDaemonSetUniqueLabelKey] = hash
	history := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       ds.Namespace,
			Labels:          templateLabels,
			Annotations:     ds.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: revision,
	}
	created, err := dsc.client.AppsV1().ControllerRevisions(ds.Namespace).Create(ctx, history, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return created, err
	}
	outerErr := err
	existing, err := dsc.client.AppsV1().ControllerRevisions(ds.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if done, err := Match(ds, existing); err != nil {
		return nil, err
	} else if done {
		return existing, nil
	}
	// A hash collision with another template's revision. Read the DaemonSet fresh so the
	// count is bumped only once for this collision.
	currDS, err := dsc.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(currDS.Status.CollisionCount, ds.Status.CollisionCount) {
		return nil, fmt.Errorf("found a stale collision count (%v, expected %v) of DaemonSet %q while processing; will retry until it is updated",
			ptrString(ds.Status.CollisionCount), ptrString(currDS.Status.CollisionCount), ds.Name)
	}
	if currDS.Status.CollisionCount == nil {
		currDS.Status.CollisionCount = new(int32)
	}
	*currDS.Status.CollisionCount++
	if _, err := dsc.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, currDS, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	dsc.log.Info("found a hash collision for DaemonSet; bumped collisionCount to resolve it", "daemonset", ds.Namespace+"/"+ds.Name,
		"collisionCount", *currDS.Status.CollisionCount)
	return nil, outerErr
}

func ptrString(p *int32) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// historiesByRevision sorts revisions oldest (lowest revision) first.
type historiesByRevision []*appsv1.ControllerRevision

func (h historiesByRevision) Len() int           { return len(h) }
func (h historiesByRevision) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h historiesByRevision) Less(i, j int) bool { return h[i].Revision < h[j].Revision }
