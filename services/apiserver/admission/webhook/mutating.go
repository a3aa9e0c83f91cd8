package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	webhookerrors "k8s.io/apiserver/pkg/admission/plugin/webhook/errors"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"

	"skiff.dev/services/apiserver/admission"
)

// MutatingPluginName names the mutating webhooks' state in a ReinvocationContext.
const MutatingPluginName = "MutatingAdmissionWebhook"

// mutatingDispatcher is the MutatingAdmissionWebhook plugin.
type mutatingDispatcher struct{ w *Webhooks }

// reinvocationState is what the mutating webhooks remember between the two rounds of
// one request's mutating phase. Mirrors webhookReinvokeContext.
type reinvocationState struct {
	// lastOutput is the object as the webhooks last left it.
	lastOutput runtime.Object
	// previouslyInvoked are the webhooks (uids) with reinvocationPolicy IfNeeded called
	// since the object last changed; they are reinvoked if it changes again.
	previouslyInvoked sets.Set[string]
	// reinvoke are the webhooks to call in the second round.
	reinvoke sets.Set[string]
}

func (s *reinvocationState) requireReinvokingPreviouslyInvoked() {
	if s.reinvoke == nil {
		s.reinvoke = sets.New[string]()
	}
	s.reinvoke = s.reinvoke.Union(s.previouslyInvoked)
	s.previouslyInvoked = sets.New[string]()
}

// Admit calls, one after the other, every mutating webhook that matches the request,
// each seeing the object as the ones before it patched it, and changes a.Object in place
// to the result: its typed object decoded anew from the patched JSON, or its
// Unstructured content. When a webhook changes the object, the chain runs its mutating
// phase again and the webhooks with reinvocationPolicy IfNeeded already called are
// called once more (never a webhook that was not called the first time). A webhook that
// cannot be called (unreachable, timed out, an invalid answer) refuses the request with
// 500 `failed calling webhook "<name>": ...` under failurePolicy Fail and is skipped
// under Ignore; one that denies refuses it with its own status. Mirrors
// mutatingDispatcher.Dispatch.
func (d *mutatingDispatcher) Admit(ctx context.Context, a admission.Attributes) error {
	if exempt(a) {
		return nil
	}
	hooks, err := d.w.mutating.hooks(ctx)
	if err != nil || len(hooks) == 0 {
		return err
	}
	state, _ := a.Reinvocation.Value(MutatingPluginName).(*reinvocationState)
	if state == nil {
		state = &reinvocationState{previouslyInvoked: sets.New[string]()}
		a.Reinvocation.SetValue(MutatingPluginName, state)
	}
	reinvoke := a.Reinvocation.IsReinvoke()
	if reinvoke && !apiequality.Semantic.DeepEqual(state.lastOutput, a.Object) {
		// The in-tree plugins changed the object in the second round: every webhook
		// that asked to see later changes is called again.
		state.requireReinvokingPreviouslyInvoked()
	}
	defer func() {
		if a.Object != nil {
			state.lastOutput = a.Object.DeepCopyObject()
		}
	}()
	r := newRequest(ctx, a)
	for _, h := range hooks {
		inv, err := d.w.shouldCall(ctx, h, r)
		if err != nil {
			return err
		}
		if inv == nil || (reinvoke && !state.reinvoke.Has(h.uid)) {
			continue
		}
		changed, err := d.callAndPatch(ctx, inv, r)
		if changed {
			state.requireReinvokingPreviouslyInvoked()
			a.Reinvocation.SetShouldReinvoke()
		}
		if h.reinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy {
			state.previouslyInvoked.Insert(h.uid)
		}
		if err == nil {
			continue
		}
		var callErr *webhookutil.ErrCallingWebhook
		if errors.As(err, &callErr) {
			if h.failurePolicy == admissionregistrationv1.Ignore {
				slog.Warn("failed calling webhook, failing open", "webhook", h.name, "err", callErr)
				if ctx.Err() != nil {
					return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
				}
				continue
			}
			slog.Warn("failed calling webhook, failing closed", "webhook", h.name, "err", callErr)
			return apierrors.NewInternalError(err)
		}
		var rejection *webhookutil.ErrWebhookRejection
		if errors.As(err, &rejection) {
			return rejection.Status
		}
		return err
	}
	return nil
}

// callAndPatch calls inv's webhook and applies the JSONPatch it answers to the request's
// object (converted back from the invocation's kind when it matched an equivalent
// resource), reporting whether the object changed. Errors: call's; 500 for a patch on a
// request with no object (a delete), or one that does not apply or yields no valid
// object.
func (d *mutatingDispatcher) callAndPatch(ctx context.Context, inv *invocation, r *request) (bool, error) {
	h := inv.hook
	object, err := encodeObject(inv.object, inv.kind)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	oldObject, err := encodeObject(inv.oldObject, inv.kind)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	resp, err := d.w.call(ctx, inv, r, object, oldObject)
	if err != nil || len(resp.patch) == 0 {
		return false, err
	}
	if resp.patchType != admissionv1.PatchTypeJSONPatch {
		return false, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("unsupported patch type %q", resp.patchType),
			Status: webhookerrors.ToStatusErr(h.name, resp.result)}
	}
	patch, err := jsonpatch.DecodePatch(resp.patch)
	if err != nil {
		return false, &webhookutil.ErrCallingWebhook{WebhookName: h.name, Reason: fmt.Errorf("received undecodable patch in webhook response: %w", err),
			Status: apierrors.NewServiceUnavailable("error decoding patch in webhook response")}
	}
	if len(patch) == 0 {
		return false, nil
	}
	if inv.object == nil {
		return false, apierrors.NewInternalError(fmt.Errorf("admission webhook %q attempted to modify the object, which is not supported for this operation", h.name))
	}
	patched, err := patch.Apply(object)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	mutated, err := d.w.decodeObject(patched, inv.kind, inv.object)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if _, typed := mutated.(runtime.Unstructured); !typed {
		mutated.GetObjectKind().SetGroupVersionKind(inv.object.GetObjectKind().GroupVersionKind())
	}
	if apiequality.Semantic.DeepEqual(inv.object, mutated) {
		return false, nil
	}
	if inv.kind != r.Kind && !r.Kind.Empty() {
		// Matched as an equivalent resource: back to the request's kind.
		if mutated, err = d.w.convert(mutated, r.Kind); err != nil {
			return false, apierrors.NewInternalError(err)
		}
	}
	if err := replaceObject(r.Object, mutated); err != nil {
		return false, apierrors.NewInternalError(err)
	}
	return true, nil
}
