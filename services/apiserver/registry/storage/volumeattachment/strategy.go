// Package volumeattachment is the storage.k8s.io/v1 volumeattachments resource:
// cluster-scoped VolumeAttachments, each the intent to attach one volume (a
// PersistentVolume, or an inline volume spec) to one node through one CSI attacher, with
// volumeattachments/status, where the attacher reports whether it is attached and any
// attach or detach error. kube's attach/detach controller writes them and a CSI driver's
// external-attacher acts on them; skiff runs neither, so the objects are served and kept
// as written. Mirrors k8s.io/kubernetes/pkg/registry/storage/volumeattachment and
// ValidateVolumeAttachment in pkg/apis/storage/validation.
package volumeattachment

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/persistentvolume"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/registry/storage/csidriver"
)

// Descriptor serves storage.k8s.io/v1 volumeattachments (kubectl: volumeattachments, no
// short name), cluster-scoped, with volumeattachments/status, at
// /registry/volumeattachments/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: storagev1.SchemeGroupVersion,
	Resource:     "volumeattachments",
	SingularName: "volumeattachment",
	Kind:         "VolumeAttachment",
	NewFunc:      func() runtime.Object { return &storagev1.VolumeAttachment{} },
	NewListFunc:  func() runtime.Object { return &storagev1.VolumeAttachmentList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "VolumeAttachment", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Limits on status: attachmentMetadata's keys and values together, and an error message.
const (
	maxAttachmentMetadataSize = 256 * (1 << 10)
	maxErrorMessageSize       = 1024
)

// Strategy is the volumeattachments strategy. Mirrors volumeAttachmentStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of volumeattachments/status: only status changes.
// Mirrors volumeAttachmentStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.ResetFieldsStrategy         = Strategy{}
	_ registry.ResetFieldsStrategy         = StatusStrategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is false: VolumeAttachments are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate clears status: only volumeattachments/status writes it.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*storagev1.VolumeAttachment).Status = storagev1.VolumeAttachmentStatus{}
}

// PrepareForUpdate keeps the stored status.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*storagev1.VolumeAttachment).Status = old.(*storagev1.VolumeAttachment).Status
}

// Validate checks a new VolumeAttachment (see ValidateVolumeAttachment), and, as kube
// does for v1 objects on create, that the attacher is a valid CSI driver name and the
// persistent volume's name a DNS subdomain. Mirrors ValidateVolumeAttachment and
// ValidateVolumeAttachmentV1.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	va := obj.(*storagev1.VolumeAttachment)
	allErrs := ValidateVolumeAttachment(va)
	allErrs = append(allErrs, csidriver.ValidateDriverName(va.Spec.Attacher, field.NewPath("spec.attacher"))...)
	if name := va.Spec.Source.PersistentVolumeName; name != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*name, false) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("spec.source.persistentVolumeName"), *name, msg))
		}
	}
	return allErrs
}

// ValidateVolumeAttachment checks a VolumeAttachment: a DNS-subdomain name; an attacher
// ("spec.attacher: Required value"); exactly one of source.persistentVolumeName (not
// empty) and source.inlineVolumeSpec ("spec.source: Required value: must specify exactly
// one of inlineVolumeSpec and persistentVolumeName", or Forbidden for both); nodeName a
// DNS subdomain; status.attachmentMetadata at most 256 KiB of keys and values and each
// error's message at most 1024 bytes. Mirrors ValidateVolumeAttachment.
func ValidateVolumeAttachment(va *storagev1.VolumeAttachment) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&va.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	if va.Spec.Attacher == "" {
		allErrs = append(allErrs, field.Required(specPath.Child("attacher"), ""))
	}
	src, srcPath := &va.Spec.Source, specPath.Child("source")
	const exactlyOne = "must specify exactly one of inlineVolumeSpec and persistentVolumeName"
	switch {
	case src.InlineVolumeSpec == nil && src.PersistentVolumeName == nil:
		allErrs = append(allErrs, field.Required(srcPath, exactlyOne))
	case src.InlineVolumeSpec != nil && src.PersistentVolumeName != nil:
		allErrs = append(allErrs, field.Forbidden(srcPath, exactlyOne))
	case src.PersistentVolumeName != nil:
		if *src.PersistentVolumeName == "" {
			allErrs = append(allErrs, field.Required(srcPath.Child("persistentVolumeName"), "must specify non empty persistentVolumeName"))
		}
	default:
		allErrs = append(allErrs, validateInlineVolumeSpec(src.InlineVolumeSpec, srcPath.Child("inlineVolumeSpec"))...)
	}
	for _, msg := range apivalidation.NameIsDNSSubdomain(va.Spec.NodeName, false) {
		allErrs = append(allErrs, field.Invalid(specPath.Child("nodeName"), va.Spec.NodeName, msg))
	}
	statusPath := field.NewPath("status")
	size := 0
	for k, v := range va.Status.AttachmentMetadata {
		size += len(k) + len(v)
	}
	if size > maxAttachmentMetadataSize {
		allErrs = append(allErrs, field.TooLong(statusPath.Child("attachmentMetadata"), "", maxAttachmentMetadataSize))
	}
	for _, e := range []struct {
		name string
		err  *storagev1.VolumeError
	}{{"attachError", va.Status.AttachError}, {"detachError", va.Status.DetachError}} {
		if e.err != nil && len(e.err.Message) > maxErrorMessageSize {
			// kube reports the metadata limit here, not the message's.
			allErrs = append(allErrs, field.TooLong(statusPath.Child(e.name, "message"), "", maxAttachmentMetadataSize))
		}
	}
	return allErrs
}

// validateInlineVolumeSpec checks a PersistentVolume spec given inline (for a migrated
// in-tree volume): no claimRef and no capacity ("may not be specified in the context of
// inline volumes"), a csi source ("has to be specified in the context of inline
// volumes") with a valid driver name and a volumeHandle, and no other source; access
// modes as a PersistentVolume's; a reclaim policy, if any, Retain. Mirrors
// ValidatePersistentVolumeSpec with validateInlinePersistentVolumeSpec.
func validateInlineVolumeSpec(spec *corev1.PersistentVolumeSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	const inline = "in the context of inline volumes"
	if spec.ClaimRef != nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("claimRef"), "may not be specified "+inline))
	}
	if len(spec.Capacity) != 0 {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("capacity"), "may not be specified "+inline))
	}
	if spec.CSI == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("csi"), "has to be specified "+inline))
	}
	allErrs = append(allErrs, persistentvolume.ValidateAccessModes(spec.AccessModes, "", fldPath.Child("accessModes"))...)
	if p := spec.PersistentVolumeReclaimPolicy; p != "" && p != corev1.PersistentVolumeReclaimRetain {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("persistentVolumeReclaimPolicy"), "may only be Retain "+inline))
	}
	if csi := spec.CSI; csi != nil {
		allErrs = append(allErrs, csidriver.ValidateDriverName(csi.Driver, fldPath.Child("csi", "driver"))...)
		if csi.VolumeHandle == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("csi", "volumeHandle"), ""))
		}
		other := spec.PersistentVolumeSource
		other.CSI = nil
		if !apiequality.Semantic.DeepEqual(other, corev1.PersistentVolumeSource{}) {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("csi"), "may not specify more than 1 volume type"))
		}
	}
	return allErrs
}

// ValidateUpdate checks the metadata update, the new VolumeAttachment and that its spec
// did not change ("spec: Invalid value: ...: field is immutable"). Mirrors
// ValidateVolumeAttachmentUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	va, oldVA := obj.(*storagev1.VolumeAttachment), old.(*storagev1.VolumeAttachment)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&va.ObjectMeta, &oldVA.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateVolumeAttachment(va)...)
	if !apiequality.Semantic.DeepEqual(va.Spec, oldVA.Spec) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec"), va.Spec, "field is immutable"))
	}
	return allErrs
}

// AllowUnconditionalUpdate is false, as kube's: an update must name the resourceVersion
// it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"storage.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetResetFields: volumeattachments/status keeps the stored metadata and spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"storage.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("metadata"), fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec and the metadata a status write may not change
// (labels, annotations, finalizers, owner references), and drops each error's
// errorCode, which storage.k8s.io/v1 gained after Kubernetes 1.32 (skiff serves the 1.32
// API, whose apiserver keeps none). Mirrors volumeAttachmentStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	va, oldVA := obj.(*storagev1.VolumeAttachment), old.(*storagev1.VolumeAttachment)
	va.Spec = oldVA.Spec
	metav1.ResetObjectMetaForStatus(&va.ObjectMeta, &oldVA.ObjectMeta)
	for _, e := range []*storagev1.VolumeError{va.Status.AttachError, va.Status.DetachError} {
		if e != nil {
			e.ErrorCode = nil
		}
	}
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return nil, nil, fmt.Errorf("not a VolumeAttachment: %T", obj)
	}
	return labels.Set(va.Labels), registry.ObjectMetaFieldsSet(&va.ObjectMeta, false), nil
}

// TableColumns are NAME ATTACHER PV NODE ATTACHED AGE. Mirrors the printer's
// volumeAttachmentColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	spec := storagev1.VolumeAttachmentSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Attacher", Type: "string", Format: "name", Description: spec["attacher"]},
		{Name: "PV", Type: "string", Description: storagev1.VolumeAttachmentSource{}.SwaggerDoc()["persistentVolumeName"]},
		{Name: "Node", Type: "string", Description: spec["nodeName"]},
		{Name: "Attached", Type: "boolean", Description: storagev1.VolumeAttachmentStatus{}.SwaggerDoc()["attached"]},
		registry.AgeColumn,
	}
}

// TableRow prints one VolumeAttachment: PV empty for an inline volume. Mirrors
// printVolumeAttachment.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	va := obj.(*storagev1.VolumeAttachment)
	pv := ""
	if va.Spec.Source.PersistentVolumeName != nil {
		pv = *va.Spec.Source.PersistentVolumeName
	}
	return []interface{}{va.Name, va.Spec.Attacher, pv, va.Spec.NodeName, va.Status.Attached,
		registry.TranslateTimestampSince(va.CreationTimestamp)}
}
