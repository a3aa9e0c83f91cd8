package admission

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/authorization"
)

// csrResource is certificatesigningrequests' group and resource.
var csrResource = certificatesv1.Resource("certificatesigningrequests")

// CertificateApproval requires, for an update of certificatesigningrequests/approval, that
// the user may also "approve" the request's signer: verb approve on resource signers
// (group certificates.k8s.io) named the signerName, or <domain>/* for its domain. Update
// on the approval subresource alone lets one approve nothing. The signer is read from
// the stored request, so an update that also tries to change it is judged by the one
// it has. Mirrors the CertificateApproval admission plugin
// (k8s.io/kubernetes/plugin/pkg/admission/certificates/approval); its 403 reads
// `user not permitted to approve requests with signerName "<signer>"`.
type CertificateApproval struct {
	// Authorizer is the apiserver's (system:masters, Node, RBAC).
	Authorizer authorization.Authorizer
}

// Admit implements Interface.
func (p CertificateApproval) Admit(ctx context.Context, a Attributes) error {
	if a.Operation != Update || a.Subresource != "approval" || a.Resource.GroupResource() != csrResource {
		return nil
	}
	old, ok := a.OldObject.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return apierrors.NewForbidden(csrResource, a.Name, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.OldObject))
	}
	if !IsAuthorizedForSignerName(ctx, p.Authorizer, "approve", old.Spec.SignerName) {
		return apierrors.NewForbidden(csrResource, a.Name, fmt.Errorf("user not permitted to approve requests with signerName %q", old.Spec.SignerName))
	}
	return nil
}

// CertificateSigning requires, for an update of certificatesigningrequests/status that
// changes status.certificate or status.conditions, that the user may "sign" for the
// request's signer: verb sign on resource signers (group certificates.k8s.io) named the
// signerName, or <domain>/*. Mirrors the CertificateSigning admission plugin
// (k8s.io/kubernetes/plugin/pkg/admission/certificates/signing); its 403 reads
// `user not permitted to sign requests with signerName "<signer>"`.
type CertificateSigning struct {
	// Authorizer is the apiserver's (system:masters, Node, RBAC).
	Authorizer authorization.Authorizer
}

// Admit implements Interface.
func (p CertificateSigning) Admit(ctx context.Context, a Attributes) error {
	if a.Operation != Update || a.Subresource != "status" || a.Resource.GroupResource() != csrResource {
		return nil
	}
	old, ok := a.OldObject.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return apierrors.NewForbidden(csrResource, a.Name, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.OldObject))
	}
	csr, ok := a.Object.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return apierrors.NewForbidden(csrResource, a.Name, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.Object))
	}
	if bytes.Equal(old.Status.Certificate, csr.Status.Certificate) && apiequality.Semantic.DeepEqual(old.Status.Conditions, csr.Status.Conditions) {
		return nil
	}
	if !IsAuthorizedForSignerName(ctx, p.Authorizer, "sign", old.Spec.SignerName) {
		return apierrors.NewForbidden(csrResource, a.Name, fmt.Errorf("user not permitted to sign requests with signerName %q", old.Spec.SignerName))
	}
	return nil
}

// IsAuthorizedForSignerName reports whether the request's user may do verb (approve,
// sign) for signerName: on resource signers of group certificates.k8s.io, named
// signerName or, failing that, "<domain>/*" for signerName's domain part. An authorizer
// error counts as no. Mirrors k8s.io/kubernetes/pkg/certauthorization.IsAuthorizedForSignerName.
func IsAuthorizedForSignerName(ctx context.Context, authz authorization.Authorizer, verb, signerName string) bool {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || authz == nil {
		return false
	}
	domain, _, _ := strings.Cut(signerName, "/")
	for _, name := range []string{signerName, domain + "/*"} {
		decision, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{
			User: u, Verb: verb, Name: name,
			APIGroup: certificatesv1.GroupName, APIVersion: "*", Resource: "signers", ResourceRequest: true,
		})
		if err == nil && decision == authorizer.DecisionAllow {
			return true
		}
	}
	return false
}
