package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"

	"skiff.dev/services/apiserver/admission"
)

// validatingDispatcher is the ValidatingAdmissionWebhook plugin.
type validatingDispatcher struct{ w *Webhooks }

// encoded are a request's objects encoded in one kind.
type encoded struct {
	object, oldObject []byte
	err               error
}

// Admit calls every validating webhook that matches the request, all at once, and
// refuses the request if one of them does: with the denying webhook's status, or 500
// `failed calling webhook "<name>": ...` for a webhook that cannot be called under
// failurePolicy Fail (under Ignore it is skipped). When several refuse, the first in
// configuration order is answered. Mirrors validatingDispatcher.Dispatch.
func (d *validatingDispatcher) Admit(ctx context.Context, a admission.Attributes) error {
	if exempt(a) {
		return nil
	}
	hooks, err := d.w.validating.hooks(ctx)
	if err != nil || len(hooks) == 0 {
		return err
	}
	r := newRequest(ctx, a)
	var invocations []*invocation
	byKind := map[schema.GroupVersionKind]*encoded{}
	for _, h := range hooks {
		inv, err := d.w.shouldCall(ctx, h, r)
		if err != nil {
			return err
		}
		if inv == nil {
			continue
		}
		invocations = append(invocations, inv)
		// Encoded once per kind, before the calls run in parallel.
		if byKind[inv.kind] == nil {
			e := &encoded{}
			if e.object, e.err = encodeObject(inv.object, inv.kind); e.err == nil {
				e.oldObject, e.err = encodeObject(inv.oldObject, inv.kind)
			}
			if e.err != nil {
				return apierrors.NewInternalError(e.err)
			}
			byKind[inv.kind] = e
		}
	}
	if len(invocations) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	}
	errs := make([]error, len(invocations))
	var wg sync.WaitGroup
	for i, inv := range invocations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[i] = apierrors.NewInternalError(fmt.Errorf("ValidatingAdmissionWebhook/%v has panicked: %v", inv.hook.name, p))
				}
			}()
			e := byKind[inv.kind]
			_, errs[i] = d.w.call(ctx, inv, r, e.object, e.oldObject)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		h := invocations[i].hook
		var callErr *webhookutil.ErrCallingWebhook
		if errors.As(err, &callErr) {
			if h.failurePolicy == admissionregistrationv1.Ignore {
				slog.Warn("failed calling webhook, failing open", "webhook", h.name, "err", callErr)
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
