package daemon

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	intstrutil "k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Helpers on DaemonSets and their pods. Mirror k8s.io/kubernetes/pkg/controller/daemon/util
// (daemonset_util.go) and controller.ComputeHash.

// NodeFieldSelectorKeyNodeName is the node field a daemon pod's node affinity selects
// its node by. Kube's schedulerapi constant.
const NodeFieldSelectorKeyNodeName = "metadata.name"

// DaemonSetTemplateGenerationKey is the pod label carrying the template generation a
// daemon pod was made from (extensions/v1beta1's, kept for pods of old controllers).
const DaemonSetTemplateGenerationKey = "pod-template-generation"

// ComputeHash is the controller-revision-hash of a template: an FNV-32a hash of the
// template and, when set, the collision count, encoded with the alphabet of generated
// names. Mirrors controller.ComputeHash (which hashes a dump of the template; skiff
// hashes its JSON, as the deployment controller does).
func ComputeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	data, _ := json.Marshal(template)
	h.Write(data)
	if collisionCount != nil {
		fmt.Fprintf(h, "%d", *collisionCount)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// GetTemplateGeneration reads the template generation from the
// deprecated.daemonset.template.generation annotation: nil when absent, an error when
// it is not a number. Mirrors util.GetTemplateGeneration.
func GetTemplateGeneration(ds *appsv1.DaemonSet) (*int64, error) {
	annotation, found := ds.Annotations[appsv1.DeprecatedTemplateGeneration]
	if !found {
		return nil, nil
	}
	generation, err := strconv.ParseInt(annotation, 10, 64)
	if err != nil {
		return nil, err
	}
	return &generation, nil
}

// addOrUpdateToleration puts toleration in spec, replacing one that matches it (same
// key, operator, value and effect); false when an identical one was there. Mirrors
// v1helper.AddOrUpdateTolerationInPodSpec.
func addOrUpdateToleration(spec *corev1.PodSpec, toleration corev1.Toleration) bool {
	var tolerations []corev1.Toleration
	updated := false
	for i := range spec.Tolerations {
		if toleration.MatchToleration(&spec.Tolerations[i]) {
			if apiequality.Semantic.DeepEqual(toleration, spec.Tolerations[i]) {
				return false
			}
			tolerations = append(tolerations, toleration)
			updated = true
			continue
		}
		tolerations = append(tolerations, spec.Tolerations[i])
	}
	if !updated {
		tolerations = append(tolerations, toleration)
	}
	spec.Tolerations = tolerations
	return true
}

// AddOrUpdateDaemonPodTolerations adds the tolerations every daemon pod gets, so node
// problems neither evict it nor keep it off its node: node.kubernetes.io/not-ready and
// unreachable with NoExecute (no eviction by the taint manager), disk-pressure,
// memory-pressure, pid-pressure and unschedulable with NoSchedule, and
// network-unavailable with NoSchedule for hostNetwork pods. Mirrors
// util.AddOrUpdateDaemonPodTolerations.
func AddOrUpdateDaemonPodTolerations(spec *corev1.PodSpec) {
	exists := func(key string, effect corev1.TaintEffect) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect}
	}
	addOrUpdateToleration(spec, exists(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute))
	addOrUpdateToleration(spec, exists(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute))
	addOrUpdateToleration(spec, exists(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule))
	addOrUpdateToleration(spec, exists(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule))
	addOrUpdateToleration(spec, exists(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule))
	addOrUpdateToleration(spec, exists(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule))
	if spec.HostNetwork {
		addOrUpdateToleration(spec, exists(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule))
	}
}

// CreatePodTemplate is the template a DaemonSet's pods are made from: a copy of
// template with the daemon tolerations, the pod-template-generation label (when
// generation is set) and the controller-revision-hash label (when hash is set). Mirrors
// util.CreatePodTemplate.
func CreatePodTemplate(template corev1.PodTemplateSpec, generation *int64, hash string) corev1.PodTemplateSpec {
	newTemplate := *template.DeepCopy()
	AddOrUpdateDaemonPodTolerations(&newTemplate.Spec)
	if newTemplate.Labels == nil {
		newTemplate.Labels = map[string]string{}
	}
	if generation != nil {
		newTemplate.Labels[DaemonSetTemplateGenerationKey] = fmt.Sprint(*generation)
	}
	if len(hash) > 0 {
		newTemplate.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] = hash
	}
	return newTemplate
}

// IsPodUpdated reports whether pod was made from the DaemonSet's current template: its
// controller-revision-hash label is hash, or its pod-template-generation label is
// dsTemplateGeneration (pods of old controllers). Mirrors util.IsPodUpdated.
func IsPodUpdated(pod *corev1.Pod, hash string, dsTemplateGeneration *int64) bool {
	templateMatches := dsTemplateGeneration != nil &&
		pod.Labels[DaemonSetTemplateGenerationKey] == fmt.Sprint(*dsTemplateGeneration)
	hashMatches := len(hash) > 0 && pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash
	return hashMatches || templateMatches
}

// ReplaceDaemonSetPodNodeNameNodeAffinity returns affinity with its required node
// affinity replaced by one term selecting the node by metadata.name, so the scheduler
// binds the pod to nodename and nowhere else; affinity may be nil. The caller's other
// terms are dropped: the node was chosen because it matches them. Mirrors
// util.ReplaceDaemonSetPodNodeNameNodeAffinity.
func ReplaceDaemonSetPodNodeNameNodeAffinity(affinity *corev1.Affinity, nodename string) *corev1.Affinity {
	nodeSelReq := corev1.NodeSelectorRequirement{
		Key:      NodeFieldSelectorKeyNodeName,
		Operator: corev1.NodeSelectorOpIn,
		Values:   []string{nodename},
	}
	nodeSelector := &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{nodeSelReq}}},
	}
	if affinity == nil {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: nodeSelector}}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: nodeSelector}
		return affinity
	}
	nodeAffinity := affinity.NodeAffinity
	if nodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		nodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nodeSelector
		return affinity
	}
	nodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = nodeSelector.NodeSelectorTerms
	return affinity
}

// GetTargetNodeName is the node a daemon pod is for: spec.nodeName once bound, else the
// single value of its metadata.name node affinity term; an error when it has neither.
// Mirrors util.GetTargetNodeName.
func GetTargetNodeName(pod *corev1.Pod) (string, error) {
	if len(pod.Spec.NodeName) != 0 {
		return pod.Spec.NodeName, nil
	}
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil ||
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "", fmt.Errorf("no spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution for pod %s/%s", pod.Namespace, pod.Name)
	}
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) < 1 {
		return "", fmt.Errorf("no nodeSelectorTerms in requiredDuringSchedulingIgnoredDuringExecution of pod %s/%s", pod.Namespace, pod.Name)
	}
	for _, term := range terms {
		for _, exp := range term.MatchFields {
			if exp.Key == NodeFieldSelectorKeyNodeName && exp.Operator == corev1.NodeSelectorOpIn {
				if len(exp.Values) != 1 {
					return "", fmt.Errorf("the matchFields value of '%s' is not unique for pod %s/%s", NodeFieldSelectorKeyNodeName, pod.Namespace, pod.Name)
				}
				return exp.Values[0], nil
			}
		}
	}
	return "", fmt.Errorf("no node name found for pod %s/%s", pod.Namespace, pod.Name)
}

// SurgeCount is how many nodes may run an extra, new pod during a rolling update:
// maxSurge scaled to numberToSchedule, rounded up; 0 for OnDelete or no maxSurge.
// Mirrors util.SurgeCount.
func SurgeCount(ds *appsv1.DaemonSet, numberToSchedule int) (int, error) {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return 0, nil
	}
	r := ds.Spec.UpdateStrategy.RollingUpdate
	if r == nil || r.MaxSurge == nil {
		return 0, nil
	}
	return intstrutil.GetScaledValueFromIntOrPercent(r.MaxSurge, numberToSchedule, true)
}

// UnavailableCount is how many nodes may be without an available pod during a rolling
// update: maxUnavailable scaled to numberToSchedule, rounded up; 0 for OnDelete.
// Mirrors util.UnavailableCount.
func UnavailableCount(ds *appsv1.DaemonSet, numberToSchedule int) (int, error) {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return 0, nil
	}
	r := ds.Spec.UpdateStrategy.RollingUpdate
	if r == nil || r.MaxUnavailable == nil {
		return 0, nil
	}
	return intstrutil.GetScaledValueFromIntOrPercent(r.MaxUnavailable, numberToSchedule, true)
}

// AllowsSurge reports whether the DaemonSet rolls by surging (maxSurge above zero).
// Mirrors util.AllowsSurge.
func AllowsSurge(ds *appsv1.DaemonSet) bool {
	maxSurge, err := SurgeCount(ds, 1)
	return err == nil && maxSurge > 0
}
