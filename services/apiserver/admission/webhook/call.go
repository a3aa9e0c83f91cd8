package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/uuid"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	webhookerrors "k8s.io/apiserver/pkg/admission/plugin/webhook/errors"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/pkg/warning"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/internal/tracing"
)

// response is what a webhook answered, verified.
type response struct {
	allowed   bool
	patch     []byte
	patchType admissionv1.PatchType
	result    *metav1.Status
}

// encodeObject is obj as JSON with the apiVersion and kind of kind, nil for nil. A
// typed object is encoded from a shallow copy, so obj (maybe the watch cache's own) is
// never written to; an Unstructured one is encoded as it is.
func encodeObject(obj runtime.Object, kind schema.GroupVersionKind) ([]byte, error) {
	if obj == nil || (reflect.ValueOf(obj).Kind() == reflect.Pointer && reflect.ValueOf(obj).IsNil()) {
		return nil, nil
	}
	if u, ok := obj.(runtime.Unstructured); ok {
		return json.Marshal(u.UnstructuredContent())
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("cannot encode %T", obj)
	}
	shallow := reflect.New(v.Elem().Type())
	shallow.Elem().Set(v.Elem())
	out := shallow.Interface().(runtime.Object)
	out.GetObjectKind().SetGroupVersionKind(kind)
	return runtime.Encode(scheme.JSONSerializer, out)
}

// call sends inv's webhook the AdmissionReview of r (its objects already encoded as
// object and oldObject), in the first AdmissionReview version the webhook accepts, and
// returns the verified answer; its warnings are recorded for the client (Warning
// headers) and its audit annotations dropped (skiff keeps no audit log), once their
// keys are checked as kube checks them. The call is bounded by timeoutSeconds (sent to
// the webhook as ?timeout=) and traced. Errors: a 400 StatusError when the request is a
// dry run and the webhook's sideEffects are not None or NoneOnDryRun;
// *webhookutil.ErrCallingWebhook when the webhook cannot be reached or answers
// something other than a valid AdmissionReview; *webhookutil.ErrWebhookRejection when it
// denies the request, with its status (code at least 400, message prefixed `admission
// webhook "<name>" denied the request`). Mirrors the dispatchers' callHook.
func (w *Webhooks) call(ctx context.Context, inv *invocation, r *request, object, oldObject []byte) (*response, error) {
	h := inv.hook
	if r.DryRun {
		if h.sideEffects == nil {
			return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("Webhook SideEffects is nil"), Status: apierrors.NewBadRequest("Webhook SideEffects is nil")}
		}
		if s := *h.sideEffects; s != admissionregistrationv1.SideEffectClassNone && s != admissionregistrationv1.SideEffectClassNoneOnDryRun {
			return nil, webhookerrors.NewDryRunUnsupportedErr(h.name)
		}
	}
	version := reviewVersion(h.admissionReviewVersions)
	if version == "" {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name,
			Reason: fmt.Errorf("could not create admission objects: webhook does not accept known AdmissionReview versions %v", h.admissionReviewVersions),
			Status: apierrors.NewBadRequest("error creating admission objects")}
	}
	uid := uuid.NewUUID()
	body, err := reviewBody(uid, version, inv, r, object, oldObject)
	if err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("could not create admission objects: %w", err), Status: apierrors.NewBadRequest("error creating admission objects")}
	}
	client, err := w.clients.client(h.clientConfig)
	if err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("could not get REST client: %w", err), Status: apierrors.NewInternalError(err)}
	}
	spanName := "Call validating webhook"
	if h.mutating {
		spanName = "Call mutating webhook"
	}
	ctx, span := tracing.Tracer(w.cfg.TracerProvider, "skiff.dev/services/apiserver/admission/webhook").Start(ctx, spanName,
		trace.WithAttributes(attribute.String("configuration", h.configuration), attribute.String("webhook", h.name),
			attribute.Stringer("resource", r.Resource), attribute.String("subresource", r.Subresource),
			attribute.String("operation", string(r.Operation)), attribute.String("UID", string(uid))))
	defer span.End()
	if h.timeoutSeconds != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*h.timeoutSeconds)*time.Second)
		defer cancel()
	}
	req := client.Post().Body(body).SetHeader("Content-Type", runtime.ContentTypeJSON)
	if deadline, ok := ctx.Deadline(); ok {
		// The webhook is told how long it has, rounded up to a whole second.
		if timeout := time.Until(deadline); timeout > 0 {
			if truncated := timeout.Truncate(time.Second); truncated != timeout {
				timeout = truncated + time.Second
			}
			req.Timeout(timeout)
		}
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		status, ok := err.(*apierrors.StatusError)
		if !ok {
			status = apierrors.NewServiceUnavailable("error calling webhook")
		}
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("failed to call webhook: %w", err), Status: status}
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(raw, review); err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("failed to call webhook: %w", err), Status: apierrors.NewServiceUnavailable("error calling webhook")}
	}
	resp, err := verifyResponse(uid, version, h.mutating, review)
	if err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("received invalid webhook response: %w", err), Status: apierrors.NewServiceUnavailable("error validating webhook response")}
	}
	for k, v := range review.Response.AuditAnnotations {
		// skiff has no audit log to put them in; they are checked as kube checks them
		// and dropped.
		key := h.name + "/" + k
		if errs := utilvalidation.IsQualifiedName(key); len(errs) > 0 {
			slog.Warn("webhook returned an invalid audit annotation key", "webhook", h.name, "key", key, "err", errs)
			continue
		}
		slog.Debug("webhook audit annotation", "webhook", h.name, "key", key, "value", v)
	}
	for _, text := range review.Response.Warnings {
		warning.AddWarning(ctx, "", text)
	}
	if !resp.allowed {
		return nil, &webhookutil.ErrWebhookRejection{Status: webhookerrors.ToStatusErr(h.name, resp.result)}
	}
	return resp, nil
}

// reviewVersion is the first of versions the apiserver can send, "" when none.
func reviewVersion(versions []string) string {
	for _, v := range versions {
		if v == "v1" || v == "v1beta1" {
			return v
		}
	}
	return ""
}

// reviewBody is the AdmissionReview of r for inv, as JSON of admission.k8s.io/<version>
// (v1 and v1beta1 requests have the same shape). Mirrors CreateV1AdmissionReview.
func reviewBody(uid types.UID, version string, inv *invocation, r *request, object, oldObject []byte) ([]byte, error) {
	var options []byte
	if r.Options != nil {
		var err error
		if options, err = json.Marshal(r.Options); err != nil {
			return nil, err
		}
	}
	userInfo := authenticationv1.UserInfo{Username: r.user.GetName(), UID: r.user.GetUID(), Groups: r.user.GetGroups(),
		Extra: map[string]authenticationv1.ExtraValue{}}
	for k, v := range r.user.GetExtra() {
		userInfo.Extra[k] = v
	}
	dryRun := r.DryRun
	return json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.GroupName + "/" + version, Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:                uid,
			Kind:               metav1.GroupVersionKind(inv.kind),
			Resource:           metav1.GroupVersionResource(inv.resource),
			SubResource:        inv.subresource,
			RequestKind:        &metav1.GroupVersionKind{Group: r.Kind.Group, Version: r.Kind.Version, Kind: r.Kind.Kind},
			RequestResource:    &metav1.GroupVersionResource{Group: r.Resource.Group, Version: r.Resource.Version, Resource: r.Resource.Resource},
			RequestSubResource: r.Subresource,
			Name:               r.Name,
			Namespace:          r.namespace,
			Operation:          admissionv1.Operation(r.Operation),
			UserInfo:           userInfo,
			Object:             runtime.RawExtension{Raw: object},
			OldObject:          runtime.RawExtension{Raw: oldObject},
			DryRun:             &dryRun,
			Options:            runtime.RawExtension{Raw: options},
		},
	})
}

// verifyResponse checks a webhook's answer: a response is there; in v1, its uid is the
// request's and the review is an admission.k8s.io/v1 AdmissionReview; a mutating
// webhook's patch comes with its patchType (v1beta1 implies JSONPatch); a validating
// webhook returns no patch. Mirrors VerifyAdmissionResponse.
func verifyResponse(uid types.UID, version string, mutating bool, review *admissionv1.AdmissionReview) (*response, error) {
	r := review.Response
	if r == nil {
		return nil, fmt.Errorf("webhook response was absent")
	}
	resp := &response{allowed: r.Allowed, result: r.Result}
	if version == "v1beta1" {
		if mutating && len(r.Patch) > 0 {
			resp.patch, resp.patchType = r.Patch, admissionv1.PatchTypeJSONPatch
		}
		return resp, nil
	}
	if r.UID != uid {
		return nil, fmt.Errorf("expected response.uid=%q, got %q", uid, r.UID)
	}
	if gvk, want := review.GroupVersionKind(), admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"); gvk != want {
		return nil, fmt.Errorf("expected webhook response of %v, got %v", want.String(), gvk.String())
	}
	if !mutating {
		if len(r.Patch) > 0 {
			return nil, fmt.Errorf("validating webhook may not return response.patch")
		}
		if r.PatchType != nil {
			return nil, fmt.Errorf("validating webhook may not return response.patchType")
		}
		return resp, nil
	}
	if len(r.Patch) > 0 && r.PatchType == nil {
		return nil, fmt.Errorf("webhook returned response.patch but not response.patchType")
	}
	if len(r.Patch) == 0 && r.PatchType != nil {
		return nil, fmt.Errorf("webhook returned response.patchType but not response.patch")
	}
	if r.PatchType != nil {
		if *r.PatchType == "" {
			return nil, fmt.Errorf("webhook returned invalid response.patchType of %q", *r.PatchType)
		}
		resp.patchType = *r.PatchType
	}
	resp.patch = r.Patch
	return resp, nil
}

// decodeObject decodes a patched object of kind into a new object shaped as like (an
// Unstructured for an Unstructured, the typed object of kind otherwise). Errors: JSON
// that is not such an object.
func (w *Webhooks) decodeObject(data []byte, kind schema.GroupVersionKind, like runtime.Object) (runtime.Object, error) {
	if _, ok := like.(runtime.Unstructured); ok {
		content := map[string]interface{}{}
		if err := utiljson.Unmarshal(data, &content); err != nil {
			return nil, err
		}
		return &unstructured.Unstructured{Object: content}, nil
	}
	into, err := w.cfg.Scheme.New(kind)
	if err != nil {
		return nil, err
	}
	out, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, &kind, into)
	if err != nil {
		return nil, err
	}
	if out != into {
		return nil, fmt.Errorf("the patched object is a %s, not a %s", out.GetObjectKind().GroupVersionKind().Kind, kind.Kind)
	}
	return out, nil
}

// replaceObject makes dst, in place, the object src is (same Go type, or both
// Unstructured), keeping dst's apiVersion and kind.
func replaceObject(dst, src runtime.Object) error {
	if u, ok := dst.(runtime.Unstructured); ok {
		su, ok := src.(runtime.Unstructured)
		if !ok {
			return fmt.Errorf("cannot replace an Unstructured with %T", src)
		}
		u.SetUnstructuredContent(su.UnstructuredContent())
		return nil
	}
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() != sv.Type() || dv.Kind() != reflect.Pointer {
		return fmt.Errorf("cannot replace %T with %T", dst, src)
	}
	gvk := dst.GetObjectKind().GroupVersionKind()
	dv.Elem().Set(sv.Elem())
	dst.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}
