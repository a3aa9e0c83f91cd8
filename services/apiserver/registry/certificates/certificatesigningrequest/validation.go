package certificatesigningrequest

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MinExpirationSeconds is the shortest lifetime a request may ask for: 600 s (10 min),
// as kube's certificates validation requires.
const MinExpirationSeconds = 600

// LegacyUnknownSignerName is the signer of requests made through certificates.k8s.io/v1beta1
// without a signer; v1 refuses to create requests with it.
const LegacyUnknownSignerName = "kubernetes.io/legacy-unknown"

// allValidUsages are the key usages certificates/v1 knows.
var allValidUsages = sets.New(
	certificatesv1.UsageSigning, certificatesv1.UsageDigitalSignature, certificatesv1.UsageContentCommitment,
	certificatesv1.UsageKeyEncipherment, certificatesv1.UsageKeyAgreement, certificatesv1.UsageDataEncipherment,
	certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageEncipherOnly,
	certificatesv1.UsageDecipherOnly, certificatesv1.UsageAny, certificatesv1.UsageServerAuth,
	certificatesv1.UsageClientAuth, certificatesv1.UsageCodeSigning, certificatesv1.UsageEmailProtection,
	certificatesv1.UsageSMIME, certificatesv1.UsageIPsecEndSystem, certificatesv1.UsageIPsecTunnel,
	certificatesv1.UsageIPsecUser, certificatesv1.UsageTimestamping, certificatesv1.UsageOCSPSigning,
	certificatesv1.UsageMicrosoftSGC, certificatesv1.UsageNetscapeSGC,
)

// ParseCSR decodes the first PEM block of pemBytes as a PKCS#10 certificate request.
// Errors: no PEM block, a block that is not "CERTIFICATE REQUEST", DER that does not parse.
// It does not check the request's signature. Mirrors kube's certificates.ParseCSR.
func ParseCSR(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// validateCSR checks a request as created: metadata, a parseable PEM request, a known
// signer name, known and unique usages, and expirationSeconds ≥ 600. Mirrors
// ValidateCertificateSigningRequestCreate in k8s.io/kubernetes/pkg/apis/certificates/validation.
func validateCSR(csr *certificatesv1.CertificateSigningRequest) field.ErrorList {
	// CSR names are free-form: any name that is a valid path segment (checked by the Store).
	allErrs := apivalidation.ValidateObjectMeta(&csr.ObjectMeta, false, func(string, bool) []string { return nil }, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	if _, err := ParseCSR(csr.Spec.Request); err != nil {
		allErrs = append(allErrs, field.Invalid(specPath.Child("request"), string(csr.Spec.Request), err.Error()))
	}
	if len(csr.Spec.Usages) == 0 {
		allErrs = append(allErrs, field.Required(specPath.Child("usages"), "usages must be provided"))
	}
	seen := sets.New[certificatesv1.KeyUsage]()
	for i, usage := range csr.Spec.Usages {
		if !allValidUsages.Has(usage) {
			allErrs = append(allErrs, field.NotSupported(specPath.Child("usages").Index(i), usage, sets.List(allValidUsages)))
		}
		if seen.Has(usage) {
			allErrs = append(allErrs, field.Duplicate(specPath.Child("usages").Index(i), usage))
		}
		seen.Insert(usage)
	}
	allErrs = append(allErrs, ValidateSignerName(specPath.Child("signerName"), csr.Spec.SignerName)...)
	if s := csr.Spec.ExpirationSeconds; s != nil && *s < MinExpirationSeconds {
		allErrs = append(allErrs, field.Invalid(specPath.Child("expirationSeconds"), *s, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	return allErrs
}

// validateCreate adds what only a create forbids: the legacy signer.
func validateCreate(csr *certificatesv1.CertificateSigningRequest) field.ErrorList {
	allErrs := validateCSR(csr)
	if csr.Spec.SignerName == LegacyUnknownSignerName {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "signerName"), csr.Spec.SignerName, "the legacy signerName is not allowed via this API version"))
	}
	return append(allErrs, validateStatus(csr, nil)...)
}

// ValidateSignerName checks that signerName has the form "<domain>/<path>": the domain
// DNS-1123 labels joined by at least one dot, the path a DNS-1123 subdomain. Mirrors
// kube's certificates validation.ValidateSignerName.
func ValidateSignerName(fldPath *field.Path, signerName string) field.ErrorList {
	if signerName == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	segments := strings.Split(signerName, "/")
	if len(segments) != 2 {
		return field.ErrorList{field.Invalid(fldPath, signerName, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var allErrs field.ErrorList
	domain, path := segments[0], segments[1]
	if len(domain) > validation.DNS1123SubdomainMaxLength {
		allErrs = append(allErrs, field.TooLong(fldPath, domain, validation.DNS1123SubdomainMaxLength))
	}
	labels := strings.Split(domain, ".")
	for _, label := range labels {
		if errs := validation.IsDNS1123Label(label); len(errs) > 0 {
			for _, e := range errs {
				allErrs = append(allErrs, field.Invalid(fldPath, domain, fmt.Sprintf("validating label %q: %s", label, e)))
			}
			break
		}
	}
	if len(labels) < 2 {
		allErrs = append(allErrs, field.Invalid(fldPath, domain, "should be a domain with at least two segments separated by dots"))
	}
	for _, e := range validation.IsDNS1123Subdomain(path) {
		allErrs = append(allErrs, field.Invalid(fldPath, path, e))
	}
	return allErrs
}

// validateStatus checks conditions and the certificate, and, given the stored object,
// that no Approved, Denied or Failed condition is removed and that an issued certificate
// does not change. Mirrors validateConditions and validateCertificate in kube's
// certificates validation.
func validateStatus(csr, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
	var allErrs field.ErrorList
	condPath := field.NewPath("status", "conditions")
	seen := sets.New[certificatesv1.RequestConditionType]()
	for i, c := range csr.Status.Conditions {
		p := condPath.Index(i)
		switch {
		case c.Type == "":
			allErrs = append(allErrs, field.Required(p.Child("type"), ""))
		case isTrueOnly(c.Type):
			if c.Status != corev1.ConditionTrue {
				allErrs = append(allErrs, field.NotSupported(p.Child("status"), c.Status, []corev1.ConditionStatus{corev1.ConditionTrue}))
			}
			if seen.Has(c.Type) {
				allErrs = append(allErrs, field.Duplicate(p.Child("type"), c.Type))
			}
		default:
			switch c.Status {
			case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			case "":
				allErrs = append(allErrs, field.Required(p.Child("status"), ""))
			default:
				allErrs = append(allErrs, field.NotSupported(p.Child("status"), c.Status,
					[]corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}))
			}
		}
		seen.Insert(c.Type)
	}
	if seen.Has(certificatesv1.CertificateApproved) && seen.Has(certificatesv1.CertificateDenied) {
		allErrs = append(allErrs, field.Invalid(condPath, csr.Status.Conditions, "Approved and Denied conditions are mutually exclusive"))
	}
	if old != nil {
		for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed} {
			if HasCondition(old, t) && !seen.Has(t) {
				allErrs = append(allErrs, field.Forbidden(condPath, fmt.Sprintf("updates may not remove a condition of type %q", t)))
			}
		}
	}
	certPath := field.NewPath("status", "certificate")
	if len(csr.Status.Certificate) > 0 {
		if err := validateCertificate(csr.Status.Certificate); err != nil {
			allErrs = append(allErrs, field.Invalid(certPath, "<certificate data>", err.Error()))
		}
	}
	if old != nil && len(old.Status.Certificate) > 0 && string(old.Status.Certificate) != string(csr.Status.Certificate) {
		allErrs = append(allErrs, field.Invalid(certPath, "<certificate data>", "updates may not modify existing certificate content"))
	}
	return allErrs
}

// isTrueOnly reports whether a condition type may only have status True, and at most
// one instance.
func isTrueOnly(t certificatesv1.RequestConditionType) bool {
	return t == certificatesv1.CertificateApproved || t == certificatesv1.CertificateDenied || t == certificatesv1.CertificateFailed
}

// validateCertificate checks that data holds at least one PEM block, that every block is
// an unheadered CERTIFICATE, and that each parses as X.509. Text around the blocks is allowed.
func validateCertificate(data []byte) error {
	blocks := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("only CERTIFICATE PEM blocks are allowed, found %q", block.Type)
		}
		if len(block.Headers) > 0 {
			return errors.New("no PEM block headers are permitted")
		}
		blocks++
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return err
		}
	}
	if blocks == 0 {
		return errors.New("must contain at least one CERTIFICATE PEM block")
	}
	return nil
}

// HasCondition reports whether csr carries a condition of type t with status True.
func HasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// countConditions counts csr's conditions of type t, whatever their status.
func countConditions(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) int {
	n := 0
	for _, c := range csr.Status.Conditions {
		if c.Type == t {
			n++
		}
	}
	return n
}
