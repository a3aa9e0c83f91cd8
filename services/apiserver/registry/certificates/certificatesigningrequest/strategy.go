// Package certificatesigningrequest is the certificates.k8s.io/v1 certificatesigningrequests
// resource with its approval and status subresources: how a kubelet (or a person) asks the
// cluster for a certificate, an approver says yes or no, and a signer issues it. Mirrors
// k8s.io/kubernetes/pkg/registry/certificates/certificates.
package certificatesigningrequest

import (
	"context"
	"fmt"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves certificatesigningrequests with their approval and status
// subresources: the main resource creates, reads and deletes, and an update there
// changes only metadata; certificatesigningrequests/approval changes only the Approved
// and Denied conditions (kubectl certificate approve|deny); certificatesigningrequests/
// status carries the signer's certificate and its Failed condition, keeping approval.
var Descriptor = registry.Descriptor{
	GroupVersion: certificatesv1.SchemeGroupVersion,
	Resource:     "certificatesigningrequests",
	SingularName: "certificatesigningrequest",
	Kind:         "CertificateSigningRequest",
	ShortNames:   []string{"csr"},
	NewFunc:      func() runtime.Object { return &certificatesv1.CertificateSigningRequest{} },
	NewListFunc:  func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return &REST{Store: store}, map[string]registry.Subresource{
			"approval": {Kind: "CertificateSigningRequest", Storage: store.WithStrategy(ApprovalStrategy{}).Subresource()},
			"status":   {Kind: "CertificateSigningRequest", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Strategy is the main resource's strategy. Mirrors csrStrategy.
type Strategy struct{}

// ApprovalStrategy is the approval subresource's strategy. Mirrors csrApprovalStrategy.
type ApprovalStrategy struct{ Strategy }

// StatusStrategy is the status subresource's strategy. Mirrors csrStatusStrategy.
type StatusStrategy struct{ Strategy }

// NamespaceScoped is false: requests are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate records who asks, from the request's authenticated user
// (spec.username, uid, groups, extra; left empty when the context has no user), and
// clears status: a request is born pending.
func (Strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	csr.Spec.Username, csr.Spec.UID, csr.Spec.Groups, csr.Spec.Extra = "", "", nil, nil
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		csr.Spec.Username = user.GetName()
		csr.Spec.UID = user.GetUID()
		csr.Spec.Groups = append([]string(nil), user.GetGroups()...)
		if extra := user.GetExtra(); len(extra) > 0 {
			csr.Spec.Extra = make(map[string]certificatesv1.ExtraValue, len(extra))
			for k, v := range extra {
				csr.Spec.Extra[k] = append(certificatesv1.ExtraValue(nil), v...)
			}
		}
	}
	csr.Status = certificatesv1.CertificateSigningRequestStatus{}
}

// GetResetFields: the main resource keeps the stored spec and status. Mirrors
// csrStrategy.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"certificates.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("status"),
	)}
}

// GetResetFields: the approval subresource keeps the stored spec and certificate.
// Mirrors csrApprovalStrategy.
func (ApprovalStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"certificates.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("status", "certificate"),
	)}
}

// GetResetFields: the status subresource keeps the stored spec. Mirrors
// csrStatusStrategy.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"certificates.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec and status: the main resource changes only
// metadata (labels, annotations, finalizers).
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	csr.Spec = oldCSR.Spec
	csr.Status = oldCSR.Status
}

// Validate checks a new request (see validateCSR).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validateCreate(obj.(*certificatesv1.CertificateSigningRequest))
}

// ValidateUpdate checks the metadata update rules and the status against the stored one.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&csr.ObjectMeta, &oldCSR.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateCSR(csr)...)
	return append(allErrs, validateStatus(csr, oldCSR)...)
}

// GetAttrs returns labels and the selectable fields metadata.name and spec.signerName.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return nil, nil, fmt.Errorf("not a CertificateSigningRequest: %T", obj)
	}
	f := registry.ObjectMetaFieldsSet(&csr.ObjectMeta, false)
	f["spec.signerName"] = csr.Spec.SignerName
	return labels.Set(csr.Labels), f, nil
}

// PrepareForUpdate keeps the stored spec and certificate and takes the request's
// conditions, all of them: the approval subresource is where conditions are set (an
// approver may record others beside Approved or Denied). Removing an Approved or Denied
// condition is refused by validation. Mirrors csrApprovalStrategy.PrepareForUpdate.
func (ApprovalStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	csr.Spec = oldCSR.Spec
	csr.Status.Certificate = oldCSR.Status.Certificate
	populateConditions(csr, oldCSR)
}

// PrepareForUpdate keeps the stored spec and the stored Approved and Denied conditions
// when the request carries as many of them as the stored object (any other count is
// refused by ValidateUpdate).
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	csr.Spec = oldCSR.Spec
	for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied} {
		preserveConditionInstances(csr, oldCSR, t)
	}
	populateConditions(csr, oldCSR)
}

// ValidateUpdate adds to the main rules that status may not add or remove approval
// conditions: those belong to the approval subresource.
func (s StatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	allErrs := s.Strategy.ValidateUpdate(ctx, obj, old)
	for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied} {
		if n, oldN := countConditions(csr, t), countConditions(oldCSR, t); n > oldN {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("status", "conditions"),
				fmt.Sprintf("updates may not add a condition of type %q", t)))
		}
	}
	return allErrs
}

func isApproval(t certificatesv1.RequestConditionType) bool {
	return t == certificatesv1.CertificateApproved || t == certificatesv1.CertificateDenied
}

// preserveConditionInstances copies the stored conditions of type t over the request's
// when both carry the same number of them.
func preserveConditionInstances(csr, oldCSR *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) {
	var oldIdx, newIdx []int
	for i, c := range oldCSR.Status.Conditions {
		if c.Type == t {
			oldIdx = append(oldIdx, i)
		}
	}
	for i, c := range csr.Status.Conditions {
		if c.Type == t {
			newIdx = append(newIdx, i)
		}
	}
	if len(oldIdx) != len(newIdx) {
		return
	}
	for i, o := range oldIdx {
		csr.Status.Conditions[newIdx[i]] = oldCSR.Status.Conditions[o]
	}
}

// populateConditions defaults an empty condition status to True (certificates/v1
// defaulting) and fills lastUpdateTime with now and lastTransitionTime with the stored
// condition's of the same type and status, or now. Mirrors populateConditionTimestamps.
func populateConditions(csr, oldCSR *certificatesv1.CertificateSigningRequest) {
	now := metav1.Now()
	for i := range csr.Status.Conditions {
		c := &csr.Status.Conditions[i]
		if c.Status == "" {
			c.Status = corev1.ConditionTrue
		}
		if c.LastUpdateTime.IsZero() {
			c.LastUpdateTime = now
		}
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
			for _, o := range oldCSR.Status.Conditions {
				if o.Type == c.Type && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
					c.LastTransitionTime = o.LastTransitionTime
					break
				}
			}
		}
	}
}

// TableColumns are NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION. Mirrors
// printCertificateSigningRequest in k8s.io/kubernetes/pkg/printers/internalversion.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		registry.AgeColumn,
		{Name: "SignerName", Type: "string", Description: "Requested signer for the request."},
		{Name: "Requestor", Type: "string", Description: "Name of the user that created the request."},
		{Name: "RequestedDuration", Type: "string", Description: "Requested duration of validity of the issued certificate."},
		{Name: "Condition", Type: "string", Description: "Conditions applied to the request: Pending, Approved or Denied, then Failed and Issued."},
	}
}

// TableRow prints one request: REQUESTEDDURATION is "<none>" without expirationSeconds;
// CONDITION is Denied, Approved or Pending, then ",Failed" and ",Issued".
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	signerName := "<none>"
	if csr.Spec.SignerName != "" {
		signerName = csr.Spec.SignerName
	}
	requested := "<none>"
	if s := csr.Spec.ExpirationSeconds; s != nil {
		requested = duration.HumanDuration(time.Duration(*s) * time.Second)
	}
	return []interface{}{csr.Name, registry.TranslateTimestampSince(csr.CreationTimestamp), signerName, csr.Spec.Username, requested, ConditionSummary(csr)}
}

// ConditionSummary is kubectl's CONDITION cell: "Denied", "Approved" or "Pending",
// then ",Failed" when signing failed and ",Issued" when a certificate is present.
// Mirrors extractCSRStatus.
func ConditionSummary(csr *certificatesv1.CertificateSigningRequest) string {
	var approved, denied, failed bool
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	status := "Pending"
	switch {
	case denied:
		status = "Denied"
	case approved:
		status = "Approved"
	}
	if failed {
		status += ",Failed"
	}
	if len(csr.Status.Certificate) > 0 {
		status += ",Issued"
	}
	return status
}

// REST is the main resource: the generic Store, plus the create-time rule of kube's
// CertificateSubjectRestriction admission plugin.
type REST struct {
	*registry.Store
}

// Create refuses, 403 Forbidden, a kubernetes.io/kube-apiserver-client request whose
// subject asks for the system:masters group: whoever approves it would mint a
// cluster-admin credential. Otherwise it is the Store's Create. Mirrors
// plugin/pkg/admission/certificates/subjectrestriction.
func (r *REST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && csr.Spec.SignerName == certificatesv1.KubeAPIServerClientSignerName {
		req, err := ParseCSR(csr.Spec.Request)
		if err != nil {
			return nil, apierrors.NewForbidden(r.Resource, csr.Name, fmt.Errorf("failed to parse CSR: %v", err))
		}
		if slices.Contains(req.Subject.Organization, systemMastersGroup) {
			return nil, apierrors.NewForbidden(r.Resource, csr.Name,
				fmt.Errorf("use of %s signer with %s group is not allowed", csr.Spec.SignerName, systemMastersGroup))
		}
	}
	return r.Store.Create(ctx, namespace, obj, opts)
}

// systemMastersGroup is the group that bypasses authorization.
const systemMastersGroup = "system:masters"
