// Package validation checks pods and what carries pod specs (templates, tolerations,
// overheads) as kube-apiserver does, each problem one field.Error at its path. It is
// neutral ground: the apiserver's registry validates what it stores with it, and the
// kubelet validates the static pods it reads from disk, without linking the registry.
// Mirrors k8s.io/kubernetes/pkg/apis/core/validation.
package validation

import (
	"fmt"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"regexp"
)

var (
	supportedRestartPolicies = sets.New(corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)
	supportedPullPolicies    = sets.New(corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	supportedDNSPolicies     = sets.New(corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone)
	supportedPhases          = sets.New(corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown)
	supportedProtocols       = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
)

// ValidatePod checks a pod as kube-apiserver's ValidatePodCreate does for the fields
// skiff acts on: metadata, at least one container, container names (DNS labels, unique),
// images, pull policies, ports, requests not above limits, restart and DNS policies and a
// non-negative grace period. Each problem is one field.Error; the caller turns the list
// into a 422 Invalid status.
func ValidatePod(pod *corev1.Pod) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validatePodSpec(&pod.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidatePodTemplateSpec checks a workload's pod template (spec.template of a
// Deployment, ReplicaSet or Job) at fldPath: its labels and annotations and its pod spec,
// as ValidatePod checks a pod's. Mirrors ValidatePodTemplateSpec.
func ValidatePodTemplateSpec(t *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	metaPath := fldPath.Child("metadata")
	allErrs := metav1validation.ValidateLabels(t.Labels, metaPath.Child("labels"))
	allErrs = append(allErrs, apivalidation.ValidateAnnotations(t.Annotations, metaPath.Child("annotations"))...)
	if len(t.Spec.EphemeralContainers) > 0 {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("spec", "ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	return append(allErrs, validatePodSpec(&t.Spec, fldPath.Child("spec"))...)
}

func validatePodSpec(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	allErrs = append(allErrs, validateContainers(spec.InitContainers, names, fldPath.Child("initContainers"))...)
	if len(spec.Containers) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("containers"), ""))
	}
	allErrs = append(allErrs, validateContainers(spec.Containers, names, fldPath.Child("containers"))...)
	allErrs = append(allErrs, validateEphemeralContainers(spec, names, fldPath.Child("ephemeralContainers"))...)
	allErrs = append(allErrs, validateProbesAndHooks(spec, fldPath)...)
	if !supportedRestartPolicies.Has(spec.RestartPolicy) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("restartPolicy"), spec.RestartPolicy, sets.List(supportedRestartPolicies)))
	}
	if !supportedDNSPolicies.Has(spec.DNSPolicy) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("dnsPolicy"), spec.DNSPolicy, sets.List(supportedDNSPolicies)))
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if spec.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.NodeName) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nodeName"), spec.NodeName, msg))
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		allErrs = append(allErrs, validateSysctls(sc.Sysctls, fldPath.Child("securityContext", "sysctls"))...)
	}
	for k, v := range spec.NodeSelector {
		for _, msg := range validation.IsQualifiedName(k) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nodeSelector"), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nodeSelector").Key(k), v, msg))
		}
	}
	return allErrs
}

func validateContainers(containers []corev1.Container, names sets.Set[string], fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i := range containers {
		c := &containers[i]
		idx := fldPath.Index(i)
		switch {
		case c.Name == "":
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		case names.Has(c.Name):
			allErrs = append(allErrs, field.Duplicate(idx.Child("name"), c.Name))
		default:
			for _, msg := range validation.IsDNS1123Label(c.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), c.Name, msg))
			}
		}
		names.Insert(c.Name)
		if c.Image == "" {
			allErrs = append(allErrs, field.Required(idx.Child("image"), ""))
		}
		if !supportedPullPolicies.Has(c.ImagePullPolicy) {
			allErrs = append(allErrs, field.NotSupported(idx.Child("imagePullPolicy"), c.ImagePullPolicy, sets.List(supportedPullPolicies)))
		}
		for j, p := range c.Ports {
			pIdx := idx.Child("ports").Index(j)
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				allErrs = append(allErrs, field.Invalid(pIdx.Child("containerPort"), p.ContainerPort, msg))
			}
			if !supportedProtocols.Has(p.Protocol) {
				allErrs = append(allErrs, field.NotSupported(pIdx.Child("protocol"), p.Protocol, sets.List(supportedProtocols)))
			}
		}
		for name, q := range c.Resources.Requests {
			if q.Sign() < 0 {
				allErrs = append(allErrs, field.Invalid(idx.Child("resources", "requests").Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
			if lim, ok := c.Resources.Limits[name]; ok && q.Cmp(lim) > 0 {
				allErrs = append(allErrs, field.Invalid(idx.Child("resources", "requests").Key(string(name)), q.String(), "must be less than or equal to "+string(name)+" limit of "+lim.String()))
			}
		}
		for name, q := range c.Resources.Limits {
			if q.Sign() < 0 {
				allErrs = append(allErrs, field.Invalid(idx.Child("resources", "limits").Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	return allErrs
}

// ValidatePodUpdate checks an update of the main resource: metadata rules, and a spec
// that changes only container images, activeDeadlineSeconds and tolerations. Mirrors
// ValidatePodUpdate.
func ValidatePodUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidatePod(newPod)...)
	if !specEqualIgnoringMutable(&newPod.Spec, &oldPod.Spec) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec"), podSpecMutableFieldsMessage))
	}
	return allErrs
}

// ValidatePodStatusUpdate checks a pods/status write: a known phase, no way back from a
// terminal phase, and a node name that does not change. Mirrors ValidatePodStatusUpdate.
func ValidatePodStatusUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta, field.NewPath("metadata"))
	fldPath := field.NewPath("status")
	if newPod.Status.Phase != "" && !supportedPhases.Has(newPod.Status.Phase) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("phase"), newPod.Status.Phase, sets.List(supportedPhases)))
	}
	if isTerminal(oldPod.Status.Phase) && newPod.Status.Phase != oldPod.Status.Phase {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("phase"), "cannot transition from a terminal phase to a non-terminal phase"))
	}
	return allErrs
}

func isTerminal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// sysctlNameRegexp is what a sysctl name looks like, with dots or slashes between its
// segments (kube's SysctlContainSlashFmt); sysctlMaxLength its longest.
var sysctlNameRegexp = regexp.MustCompile("^" + sysctlContainSlashFmt + "$")

const (
	sysctlSegmentFmt      = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
	sysctlContainSlashFmt = "(" + sysctlSegmentFmt + "[\\./])*" + sysctlSegmentFmt
	sysctlMaxLength       = 253
)

// validateSysctls checks the pod's sysctls: each named, validly, and once. Whether a
// node allows one is the kubelet's business. Mirrors validateSysctls.
func validateSysctls(sysctls []corev1.Sysctl, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, s := range sysctls {
		namePath := fldPath.Index(i).Child("name")
		switch {
		case s.Name == "":
			allErrs = append(allErrs, field.Required(namePath, ""))
		case len(s.Name) > sysctlMaxLength || !sysctlNameRegexp.MatchString(s.Name):
			allErrs = append(allErrs, field.Invalid(namePath, s.Name,
				fmt.Sprintf("must have at most %d characters and match regex %s", sysctlMaxLength, sysctlNameRegexp)))
		case names.Has(s.Name):
			allErrs = append(allErrs, field.Duplicate(namePath, s.Name))
		}
		names.Insert(s.Name)
	}
	return allErrs
}

// ephemeralForbidden is kube's reason for a field an ephemeral container may not set.
const ephemeralForbidden = "cannot be set for an Ephemeral Container"

// validateEphemeralContainers checks spec's ephemeral containers: each a valid container
// named uniquely among all the pod's (names holds the others'), targeting one of the
// pod's other containers if any, and setting none of what would make it part of the
// workload (ports, resources, lifecycle hooks, probes, a restart policy, subPaths).
// Mirrors validateEphemeralContainers.
func validateEphemeralContainers(spec *corev1.PodSpec, names sets.Set[string], fldPath *field.Path) field.ErrorList {
	if len(spec.EphemeralContainers) == 0 {
		return nil
	}
	others := names.Clone()
	containers := make([]corev1.Container, len(spec.EphemeralContainers))
	for i := range spec.EphemeralContainers {
		containers[i] = corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
	}
	allErrs := validateContainers(containers, names, fldPath)
	for i, ec := range spec.EphemeralContainers {
		idx := fldPath.Index(i)
		if ec.TargetContainerName != "" && !others.Has(ec.TargetContainerName) {
			allErrs = append(allErrs, field.NotFound(idx.Child("targetContainerName"), ec.TargetContainerName))
		}
		set := map[string]bool{
			"ports": len(ec.Ports) > 0, "resources": len(ec.Resources.Limits) > 0 || len(ec.Resources.Requests) > 0 || len(ec.Resources.Claims) > 0,
			"resizePolicy": len(ec.ResizePolicy) > 0, "restartPolicy": ec.RestartPolicy != nil, "lifecycle": ec.Lifecycle != nil,
			"livenessProbe": ec.LivenessProbe != nil, "readinessProbe": ec.ReadinessProbe != nil, "startupProbe": ec.StartupProbe != nil,
		}
		for _, f := range []string{"ports", "resources", "resizePolicy", "restartPolicy", "lifecycle", "livenessProbe", "readinessProbe", "startupProbe"} {
			if set[f] {
				allErrs = append(allErrs, field.Forbidden(idx.Child(f), ephemeralForbidden))
			}
		}
		for j, vm := range ec.VolumeMounts {
			if vm.SubPath != "" {
				allErrs = append(allErrs, field.Forbidden(idx.Child("volumeMounts").Index(j).Child("subPath"), ephemeralForbidden))
			}
			if vm.SubPathExpr != "" {
				allErrs = append(allErrs, field.Forbidden(idx.Child("volumeMounts").Index(j).Child("subPathExpr"), ephemeralForbidden))
			}
		}
	}
	return allErrs
}

// ValidatePodEphemeralContainersUpdate checks a pods/ephemeralcontainers write: the pod
// stays valid, and its existing ephemeral containers are neither removed nor changed
// (only new ones may come); a static pod's mirror takes none. Mirrors
// ValidatePodEphemeralContainersUpdate.
func ValidatePodEphemeralContainersUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	if _, ok := oldPod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return field.ErrorList{field.Forbidden(field.NewPath(""), "static pods do not support ephemeral containers")}
	}
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidatePod(newPod)...)
	specPath := field.NewPath("spec", "ephemeralContainers")
	byName := map[string]*corev1.EphemeralContainer{}
	for i := range newPod.Spec.EphemeralContainers {
		byName[newPod.Spec.EphemeralContainers[i].Name] = &newPod.Spec.EphemeralContainers[i]
	}
	for _, old := range oldPod.Spec.EphemeralContainers {
		switch cur, ok := byName[old.Name]; {
		case !ok:
			allErrs = append(allErrs, field.Forbidden(specPath, fmt.Sprintf("existing ephemeral containers %q may not be removed\n", old.Name)))
		case !apiequality.Semantic.DeepEqual(old, *cur):
			allErrs = append(allErrs, field.Forbidden(specPath, fmt.Sprintf("existing ephemeral containers %q may not be changed\n", old.Name)))
		}
	}
	return allErrs
}

// podSpecMutableFieldsMessage is kube's wording for a forbidden spec change.
const podSpecMutableFieldsMessage = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"

// specEqualIgnoringMutable reports whether two pod specs differ only in fields an update
// may change.
func specEqualIgnoringMutable(newSpec, oldSpec *corev1.PodSpec) bool {
	mungedNew := newSpec.DeepCopy()
	if len(mungedNew.Containers) == len(oldSpec.Containers) {
		for i := range mungedNew.Containers {
			mungedNew.Containers[i].Image = oldSpec.Containers[i].Image
		}
	}
	if len(mungedNew.InitContainers) == len(oldSpec.InitContainers) {
		for i := range mungedNew.InitContainers {
			mungedNew.InitContainers[i].Image = oldSpec.InitContainers[i].Image
		}
	}
	mungedNew.ActiveDeadlineSeconds = oldSpec.ActiveDeadlineSeconds
	mungedNew.Tolerations = oldSpec.Tolerations
	return apiequality.Semantic.DeepEqual(mungedNew, oldSpec)
}
