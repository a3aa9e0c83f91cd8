package endpoints

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/util/dryrun"
	"sigs.k8s.io/yaml"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
)

// resourceHandler serves every resource URL of one group version.
type resourceHandler struct {
	gv      *APIGroupVersion
	admit   admission.Interface
	authz   authorization.Authorizer
	metrics *metrics
	fields  *fieldManagers
}

// request is one resolved resource request: what it names and the storage serving it.
type request struct {
	RequestInfo
	gvr      schema.GroupVersionResource
	gvk      schema.GroupVersionKind
	storage  rest.Storage
	resource *Resource
}

func (h *resourceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.serveResource(w, r, chi.URLParam(r, "*"))
}

// serveResource serves the resource URL path, the part after the group version.
func (h *resourceHandler) serveResource(w http.ResponseWriter, r *http.Request, path string) {
	req, err := h.resolve(path)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := authorize(r, h.authz, resourceAttributes(r, req), metav1.GroupResource{Group: req.gvr.Group, Resource: req.gvr.Resource}); err != nil {
		writeError(w, err)
		return
	}
	h.metrics.instrument(w, r, req, func(w http.ResponseWriter) { h.serve(w, r, req) })
}

// requestTimeout bounds every request but watches, as kube-apiserver's
// --request-timeout does; a request that runs out gets 504 Timeout.
const requestTimeout = 60 * time.Second

func (h *resourceHandler) serve(w http.ResponseWriter, r *http.Request, req *request) {
	if c, ok := req.storage.(rest.Connecter); ok && req.Subresource != "" {
		h.connect(w, r, req, c) // long-running: no request timeout
		return
	}
	// Admission's warnings (webhooks') become Warning headers.
	ctx := admission.WithWarningHeaders(r.Context(), w.Header())
	if !isWatch(r) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	switch {
	case r.Method == http.MethodGet && req.Name == "":
		h.list(ctx, w, r, req)
	case r.Method == http.MethodGet:
		h.get(ctx, w, r, req)
	case r.Method == http.MethodPost && (req.Name == "" || req.Subresource != ""):
		h.create(ctx, w, r, req)
	case r.Method == http.MethodPut && req.Name != "":
		h.update(ctx, w, r, req)
	case r.Method == http.MethodPatch && req.Name != "":
		h.patch(ctx, w, r, req)
	case r.Method == http.MethodDelete && req.Name != "":
		h.delete(ctx, w, r, req)
	case r.Method == http.MethodDelete:
		h.deleteCollection(ctx, w, r, req)
	default:
		writeError(w, apierrors.NewMethodNotSupported(req.gvr.GroupResource(), r.Method))
	}
}

// resolve turns the path under the group version into a request, or a 404.
func (h *resourceHandler) resolve(path string) (*request, error) {
	info, err := parseResourcePath(path, h.gv)
	if err != nil {
		return nil, err
	}
	res, ok := h.gv.resources[info.Resource]
	if !ok || (info.Namespace != "" && !res.Namespaced) {
		return nil, notFoundPath(path)
	}
	req := &request{
		RequestInfo: info,
		gvr:         h.gv.GroupVersion.WithResource(res.Name),
		gvk:         h.gv.GroupVersion.WithKind(res.Kind),
		storage:     res.Storage,
		resource:    res,
	}
	if info.Subresource != "" {
		sub, ok := res.Subresources[info.Subresource]
		if !ok {
			return nil, notFoundPath(path)
		}
		req.storage, req.gvk = sub.Storage, subresourceKind(sub, h.gv.GroupVersion)
	}
	return req, nil
}

func (h *resourceHandler) notSupported(w http.ResponseWriter, req *request, verb string) {
	writeError(w, apierrors.NewMethodNotSupported(req.gvr.GroupResource(), verb))
}

func (h *resourceHandler) get(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	getter, ok := req.storage.(rest.Getter)
	if !ok {
		h.notSupported(w, req, "get")
		return
	}
	opts := &metav1.GetOptions{}
	if err := decodeOptions(r, opts); err != nil {
		writeError(w, err)
		return
	}
	obj, err := getter.Get(ctx, req.Namespace, req.Name, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	h.writeMaybeTable(ctx, w, r, req, obj)
}

// writeMaybeTable writes obj, or its Table when kubectl asked for one.
func (h *resourceHandler) writeMaybeTable(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, obj runtime.Object) {
	if wantsTable(r) {
		if _, ok := req.storage.(rest.TableConvertor); !ok && acceptsOnlyTables(r) {
			writeError(w, notAcceptable(req.gvr.Resource))
			return
		}
		if convertor, ok := req.storage.(rest.TableConvertor); ok {
			opts, err := tableOptions(r)
			if err != nil {
				writeError(w, err)
				return
			}
			table, err := convertor.ConvertToTable(ctx, obj, opts)
			if err != nil {
				writeError(w, err)
				return
			}
			h.setRowKinds(table)
			obj = table
		}
	}
	writeObject(w, r, http.StatusOK, req.gvk.GroupVersion(), obj)
}

// setRowKinds gives full objects embedded in Table rows (includeObject=Object) their
// apiVersion and kind, which items taken out of a list lack.
func (h *resourceHandler) setRowKinds(table *metav1.Table) {
	for i := range table.Rows {
		obj := table.Rows[i].Object.Object
		if obj == nil || !obj.GetObjectKind().GroupVersionKind().Empty() {
			continue
		}
		if gvks, _, err := scheme.Scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
			obj.GetObjectKind().SetGroupVersionKind(gvks[0])
		}
	}
}

func tableOptions(r *http.Request) (*metav1.TableOptions, error) {
	opts := &metav1.TableOptions{}
	if err := scheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return opts, nil
}

// listOptions decodes list and watch query parameters (selectors, resourceVersion,
// limit, continue, watch, timeoutSeconds, sendInitialEvents) and validates them as
// kube-apiserver does with its WatchList feature on (422 Invalid otherwise).
func listOptions(r *http.Request) (*metainternalversion.ListOptions, error) {
	opts := &metainternalversion.ListOptions{}
	if err := decodeOptions(r, opts); err != nil {
		return nil, err
	}
	if errs := metainternalversionvalidation.ValidateListOptions(opts, true); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	return opts, nil
}

func (h *resourceHandler) list(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	opts, err := listOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if opts.Watch {
		watcher, ok := req.storage.(rest.Watcher)
		if !ok {
			h.notSupported(w, req, "watch")
			return
		}
		h.serveWatch(w, r, req, watcher, opts)
		return
	}
	lister, ok := req.storage.(rest.Lister)
	if !ok || req.Subresource != "" {
		h.notSupported(w, req, "list")
		return
	}
	obj, err := lister.List(ctx, req.Namespace, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	h.writeMaybeTable(ctx, w, r, req, obj)
}

func (h *resourceHandler) create(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	creater, ok := req.storage.(rest.Creater)
	if !ok {
		h.notSupported(w, req, "create")
		return
	}
	opts := &metav1.CreateOptions{}
	if err := decodeOptions(r, opts); err != nil {
		writeError(w, err)
		return
	}
	if errs := metav1validation.ValidateCreateOptions(opts); len(errs) > 0 {
		writeError(w, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "CreateOptions"}, "", errs))
		return
	}
	obj, err := readObject(w, r, req, opts.FieldValidation)
	if err != nil {
		writeError(w, err)
		return
	}
	objMeta, err := meta.Accessor(obj)
	if err != nil {
		writeError(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if req.Subresource != "" {
		// A subresource create (pods/NAME/binding) names its parent in the URL.
		if objMeta.GetName() == "" {
			objMeta.SetName(req.Name)
		} else if objMeta.GetName() != req.Name {
			writeError(w, apierrors.NewBadRequest(fmt.Sprintf("name in URL does not match name in %s object", req.gvk.Kind)))
			return
		}
	}
	if err := h.admit.Admit(ctx, admission.Attributes{
		Operation: admission.Create, Resource: req.gvr, Subresource: req.Subresource, Kind: req.gvk,
		Namespace: req.Namespace, Name: objMeta.GetName(), Object: obj,
		DryRun: dryrun.IsDryRun(opts.DryRun), Options: optionsOf(opts, "CreateOptions"),
	}); err != nil {
		writeError(w, err)
		return
	}
	// Only stored objects carry managedFields; reviews (SelfSubjectAccessReview) are not
	// stored and, as in kube-apiserver, get none.
	if _, stored := req.storage.(rest.Getter); stored && req.Subresource == "" {
		obj = h.fields.track(req.gvk, "", req.storage, req.storage.New(), obj, managerName(opts.FieldManager, r.UserAgent()))
	}
	out, err := creater.Create(ctx, req.Namespace, obj, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	code := http.StatusCreated
	if status, ok := out.(*metav1.Status); ok && status.Code != 0 {
		code = int(status.Code)
	}
	if wantsTable(r) && acceptsOnlyTables(r) {
		if _, ok := req.storage.(rest.TableConvertor); !ok {
			// The object is created; only its answer cannot be given in the form asked.
			writeError(w, notAcceptable(req.gvr.Resource))
			return
		}
	}
	writeObject(w, r, code, req.gvk.GroupVersion(), out)
}

func (h *resourceHandler) update(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	updater, ok := req.storage.(rest.Updater)
	if !ok {
		h.notSupported(w, req, "update")
		return
	}
	opts := &metav1.UpdateOptions{}
	if err := decodeOptions(r, opts); err != nil {
		writeError(w, err)
		return
	}
	obj, err := readObject(w, r, req, opts.FieldValidation)
	if err != nil {
		writeError(w, err)
		return
	}
	h.runUpdate(ctx, w, r, req, updater, rest.DefaultUpdatedObjectInfo(obj), opts)
}

// decodeOptions decodes the query into opts, one of the metav1 option structs
// (GetOptions, ListOptions, CreateOptions, ...); 400 BadRequest on malformed values.
func decodeOptions(r *http.Request, opts runtime.Object) error {
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// readObject decodes the request body as req's kind under fieldValidation and turns
// unknown-field findings into Warning headers.
func readObject(w http.ResponseWriter, r *http.Request, req *request, fieldValidation string) (runtime.Object, error) {
	obj, warnings, err := decodeBody(r, req.gvk, req.storage.New(), fieldValidation)
	if err != nil {
		return nil, err
	}
	unknown, err := pruneUnknownFields(req.storage, obj, req.gvk, fieldValidation)
	if err != nil {
		return nil, err
	}
	addWarnings(w, append(warnings, unknown...))
	return obj, nil
}

// pruneUnknownFields drops the fields obj's schema does not know, when its storage
// prunes (custom resources), and returns a warning for each under fieldValidation Warn,
// none under Ignore, and a 400 naming them all under Strict, as kube-apiserver's
// custom resource decoder does.
func pruneUnknownFields(storage rest.Storage, obj runtime.Object, gvk schema.GroupVersionKind, fieldValidation string) ([]string, error) {
	pruner, ok := storage.(UnknownFieldPruner)
	if !ok {
		return nil, nil
	}
	var unknown []string
	for _, path := range pruner.PruneUnknownFields(obj) {
		unknown = append(unknown, fmt.Sprintf("unknown field %q", path))
	}
	switch {
	case len(unknown) == 0 || fieldValidation == metav1.FieldValidationIgnore:
		return nil, nil
	case fieldValidation == metav1.FieldValidationStrict:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s",
			gvk.Kind, gvk.Version, gvk.Kind, strings.Join(unknown, ", ")))
	}
	return unknown, nil
}

// runUpdate admits and performs an update (PUT or PATCH) and writes the result.
func (h *resourceHandler) runUpdate(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, updater rest.Updater, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) {
	out, code, err := h.doUpdate(ctx, r, req, updater, objInfo, opts, true)
	if err != nil {
		writeError(w, err)
		return
	}
	writeObject(w, r, code, req.gvk.GroupVersion(), out)
}

// doUpdate admits and performs an update and returns the stored object and the status
// code to answer with (201 if the update created it). Admission sees the new object next
// to the stored one it replaces, inside the store's GuaranteedUpdate, so it judges the
// very pair that is written (and again on a retry after a conflict), as kube's
// rest.AdmissionToValidateObjectUpdateFunc does. trackFields records the write in
// managedFields; server-side apply records it itself.
func (h *resourceHandler) doUpdate(ctx context.Context, r *http.Request, req *request, updater rest.Updater, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions, trackFields bool) (runtime.Object, int, error) {
	if errs := metav1validation.ValidateUpdateOptions(opts); len(errs) > 0 {
		return nil, 0, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "UpdateOptions"}, "", errs)
	}
	manager := managerName(opts.FieldManager, r.UserAgent())
	tracked := rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		newObj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil {
			return nil, err
		}
		if err := h.admit.Admit(ctx, admission.Attributes{
			Operation: admission.Update, Resource: req.gvr, Subresource: req.Subresource, Kind: req.gvk,
			Namespace: req.Namespace, Name: req.Name, Object: newObj, OldObject: old,
			DryRun: dryrun.IsDryRun(opts.DryRun), Options: optionsOf(opts, "UpdateOptions"),
		}); err != nil {
			return nil, err
		}
		if !trackFields {
			return newObj, nil
		}
		return h.fields.track(req.gvk, req.Subresource, req.storage, old, newObj, manager), nil
	})
	out, created, err := updater.Update(ctx, req.Namespace, req.Name, tracked, opts)
	if err != nil {
		return nil, 0, err
	}
	if created {
		return out, http.StatusCreated, nil
	}
	return out, http.StatusOK, nil
}

// patch applies a JSON patch, JSON merge patch or strategic merge patch to the stored
// object inside the update's GuaranteedUpdate, so a patch never overwrites a concurrent
// change. A resourceVersion inside the patch is a precondition (409 if stale). An apply
// patch (application/apply-patch+yaml) is server-side apply: see serverSideApply. Options
// are validated as kube does (422 Invalid PatchOptions: fieldManager is required for
// apply, force only for apply, dryRun only All). Mirrors
// k8s.io/apiserver/pkg/endpoints/handlers/patch.go.
func (h *resourceHandler) patch(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	updater, ok := req.storage.(rest.Updater)
	if !ok {
		h.notSupported(w, req, "patch")
		return
	}
	var patchOpts metav1.PatchOptions
	if err := decodeOptions(r, &patchOpts); err != nil {
		writeError(w, err)
		return
	}
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	patchType := types.PatchType(mediaType)
	switch patchType {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType:
	default:
		writeError(w, unsupportedMediaType(r.Header.Get("Content-Type")))
		return
	}
	if errs := metav1validation.ValidatePatchOptions(&patchOpts, patchType); len(errs) > 0 {
		writeError(w, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs))
		return
	}
	patchBytes, err := readBody(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if patchType == types.ApplyYAMLPatchType {
		h.serverSideApply(ctx, w, r, req, updater, patchBytes, &patchOpts)
		return
	}
	objInfo := rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		obj, warnings, err := applyPatch(patchType, patchBytes, old, req.gvk, req.storage.New(), patchOpts.FieldValidation)
		if err != nil {
			return nil, err
		}
		unknown, err := pruneUnknownFields(req.storage, obj, req.gvk, patchOpts.FieldValidation)
		w.Header().Del("Warning") // an update retried on a conflict patches again
		addWarnings(w, append(warnings, unknown...))
		return obj, err
	})
	h.runUpdate(ctx, w, r, req, updater, objInfo, &metav1.UpdateOptions{DryRun: patchOpts.DryRun, FieldManager: patchOpts.FieldManager, FieldValidation: patchOpts.FieldValidation})
}

// serverSideApply merges an apply configuration into the stored object as
// patchOpts.FieldManager, tracking field ownership in managedFields: 409 "Apply failed
// with N conflicts: ..." when it would change fields another manager owns, unless force
// takes them over. A missing object is created from the configuration (201), as
// kube-apiserver's patch handler does with forceAllowCreate for apply. A field the schema
// lacks is a 400; a duplicate field is a 400 under fieldValidation=Strict and a warning
// under Warn (the default).
func (h *resourceHandler) serverSideApply(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, updater rest.Updater, patch []byte, patchOpts *metav1.PatchOptions) {
	if patchOpts.FieldValidation != metav1.FieldValidationIgnore {
		// Fields the schema lacks fail the apply itself; duplicates are caught here.
		if err := yaml.UnmarshalStrict(patch, &map[string]interface{}{}); err != nil {
			if patchOpts.FieldValidation == metav1.FieldValidationStrict {
				writeError(w, apierrors.NewBadRequest(fmt.Sprintf("error strict decoding YAML: %v", err)))
				return
			}
			addWarnings(w, []string{err.Error()})
		}
	}
	force := patchOpts.Force != nil && *patchOpts.Force
	objInfo := rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		return h.fields.apply(req.gvk, req.Subresource, req.storage, old, patch, patchOpts.FieldManager, force, req.storage.New())
	})
	updateOpts := &metav1.UpdateOptions{DryRun: patchOpts.DryRun, FieldManager: patchOpts.FieldManager}
	out, code, err := h.doUpdate(ctx, r, req, updater, objInfo, updateOpts, false)
	if apierrors.IsNotFound(err) && req.Subresource == "" {
		out, code, err = h.createFromApply(ctx, req, patch, patchOpts, force)
		if apierrors.IsAlreadyExists(err) {
			// Created by someone else since: apply to what they stored.
			out, code, err = h.doUpdate(ctx, r, req, updater, objInfo, updateOpts, false)
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeObject(w, r, code, req.gvk.GroupVersion(), out)
}

// createFromApply creates the object an apply names when it does not exist yet.
func (h *resourceHandler) createFromApply(ctx context.Context, req *request, patch []byte, patchOpts *metav1.PatchOptions, force bool) (runtime.Object, int, error) {
	creater, ok := req.storage.(rest.Creater)
	if !ok {
		return nil, 0, apierrors.NewNotFound(req.gvr.GroupResource(), req.Name)
	}
	obj, err := h.fields.apply(req.gvk, "", req.storage, req.storage.New(), patch, patchOpts.FieldManager, force, req.storage.New())
	if err != nil {
		return nil, 0, err
	}
	objMeta, err := meta.Accessor(obj)
	if err != nil {
		return nil, 0, apierrors.NewBadRequest(err.Error())
	}
	if objMeta.GetName() != req.Name {
		return nil, 0, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", objMeta.GetName(), req.Name))
	}
	createOpts := &metav1.CreateOptions{DryRun: patchOpts.DryRun, FieldManager: patchOpts.FieldManager}
	if err := h.admit.Admit(ctx, admission.Attributes{
		Operation: admission.Create, Resource: req.gvr, Kind: req.gvk, Namespace: req.Namespace, Name: req.Name, Object: obj,
		DryRun: dryrun.IsDryRun(patchOpts.DryRun), Options: optionsOf(createOpts, "CreateOptions"),
	}); err != nil {
		return nil, 0, err
	}
	out, err := creater.Create(ctx, req.Namespace, obj, createOpts)
	if err != nil {
		return nil, 0, err
	}
	return out, http.StatusCreated, nil
}

// delete reads DeleteOptions from the body (kubectl sends one without kind) or the query,
// and deletes. The response is the object: marked with deletionTimestamp when the delete
// is graceful, its last state otherwise.
func (h *resourceHandler) delete(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	deleter, ok := req.storage.(rest.GracefulDeleter)
	if !ok {
		h.notSupported(w, req, "delete")
		return
	}
	opts, err := deleteOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// Admission sees the object being deleted, as kube's validating admission of a
	// delete does; one that is not there is the 404 the delete would answer.
	var old runtime.Object
	if getter, ok := req.storage.(rest.Getter); ok {
		if old, err = rest.GetCachedFirst(ctx, getter, req.Namespace, req.Name, nil); err != nil {
			writeError(w, err)
			return
		}
		old = old.DeepCopyObject()
	}
	if err := h.admit.Admit(ctx, admission.Attributes{
		Operation: admission.Delete, Resource: req.gvr, Subresource: req.Subresource, Kind: req.gvk,
		Namespace: req.Namespace, Name: req.Name, OldObject: old,
		DryRun: dryrun.IsDryRun(opts.DryRun), Options: optionsOf(opts, "DeleteOptions"),
	}); err != nil {
		writeError(w, err)
		return
	}
	out, _, err := deleter.Delete(ctx, req.Namespace, req.Name, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	writeObject(w, r, http.StatusOK, req.gvk.GroupVersion(), out)
}

// deleteOptions reads DeleteOptions from the body (kubectl sends one without kind) or,
// when there is none, the query. 400 for a malformed body or a negative grace period,
// 422 for options kube's ValidateDeleteOptions refuses (dryRun other than All).
func deleteOptions(r *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if err := decodeOptions(r, opts); err != nil {
		return nil, err
	}
	if r.ContentLength != 0 && r.Body != nil {
		body, err := readBody(r)
		if err != nil {
			return nil, err
		}
		if len(body) > 0 {
			defaultGVK := schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"}
			if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, &defaultGVK, opts); err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid DeleteOptions: %v", err))
			}
		}
	}
	if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds < 0 {
		return nil, apierrors.NewBadRequest("gracePeriodSeconds must be greater than or equal to 0")
	}
	if errs := metav1validation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

// deleteCollection deletes every object of the collection matching the query's label
// and field selectors (DELETE on a collection URL: client-go's DeleteCollection), each
// admitted as a delete of that object. The response is the list of the objects acted on.
// Mirrors DeleteCollection in k8s.io/apiserver/pkg/endpoints/handlers/delete.go.
func (h *resourceHandler) deleteCollection(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	deleter, ok := req.storage.(rest.CollectionDeleter)
	if !ok || req.Subresource != "" || (req.resource.Namespaced && req.Namespace == "") {
		// As in kube-apiserver, a namespaced collection is deleted one namespace at a
		// time: DELETE /api/v1/pods (every namespace) is not served.
		h.notSupported(w, req, "deletecollection")
		return
	}
	listOpts, err := listOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if listOpts.Watch {
		writeError(w, apierrors.NewBadRequest("watch is not supported on a delete collection"))
		return
	}
	opts, err := deleteOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	validate := func(ctx context.Context, obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		return h.admit.Admit(ctx, admission.Attributes{
			Operation: admission.Delete, Resource: req.gvr, Kind: req.gvk, Namespace: m.GetNamespace(), Name: m.GetName(),
			OldObject: obj, DryRun: dryrun.IsDryRun(opts.DryRun), Options: optionsOf(opts, "DeleteOptions"),
		})
	}
	out, err := deleter.DeleteCollection(ctx, req.Namespace, validate, opts, listOpts)
	if err != nil {
		writeError(w, err)
		return
	}
	writeObject(w, r, http.StatusOK, h.gv.GroupVersion, out)
}

// optionsOf is a copy of opts, one of the metav1 write options, with the apiVersion
// (meta.k8s.io/v1) and kind admission reviews carry, as kube's handlers set them.
func optionsOf[T any, PT interface {
	*T
	runtime.Object
}](opts PT, kind string) runtime.Object {
	out := PT(new(T))
	*out = *opts
	out.GetObjectKind().SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind(kind))
	return out
}

// writeJSON writes v with encoding/json, for bodies that are not scheme objects
// (discovery documents, /version).
func writeJSON(w http.ResponseWriter, code int, contentType string, v interface{}) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
}

// applyPatch applies a patch of patchType to old and decodes the result into into,
// checking it for unknown and duplicate fields under fieldValidation as a request body
// is: Strict fails, Warn (the default) returns one warning each, Ignore drops them.
// Errors are API statuses: 400 for a malformed patch or result (under Strict, "strict
// decoding error: unknown field ..."), 422 for a JSON patch operation that cannot apply
// (a test that fails, a path that does not exist).
func applyPatch(patchType types.PatchType, patch []byte, old runtime.Object, gvk schema.GroupVersionKind, into runtime.Object, fieldValidation string) (runtime.Object, []string, error) {
	oldJSON, err := runtime.Encode(scheme.EncoderFor(gvk.GroupVersion()), old)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	switch patchType {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
		if patched, err = p.Apply(oldJSON); err != nil {
			return nil, nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: err.Error(),
			}}
		}
	case types.MergePatchType:
		if patched, err = jsonpatch.MergePatch(oldJSON, patch); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
	case types.StrategicMergePatchType:
		if _, ok := into.(runtime.Unstructured); ok {
			return nil, nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
				Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
					types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType),
			}}
		}
		if patched, err = strategicpatch.StrategicMergePatch(oldJSON, patch, into); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
	default:
		return nil, nil, unsupportedMediaType(string(patchType))
	}
	decoder := scheme.StrictCodecs.UniversalDeserializer()
	switch fieldValidation {
	case "", metav1.FieldValidationWarn, metav1.FieldValidationStrict:
	case metav1.FieldValidationIgnore:
		decoder = scheme.Codecs.UniversalDeserializer()
	default:
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("fieldValidation parameter unsupported: %q, must be one of Ignore, Warn or Strict", fieldValidation))
	}
	var warnings []string
	obj, _, err := decoder.Decode(patched, &gvk, into)
	if strictErr, ok := runtime.AsStrictDecodingError(err); ok && obj != nil {
		if fieldValidation == metav1.FieldValidationStrict {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
		for _, e := range strictErr.Errors() {
			warnings = append(warnings, e.Error())
		}
		err = nil
	}
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the patched object is not a valid %s: %v", gvk.Kind, err))
	}
	if obj != into {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the patch changed the kind of the object to %s", obj.GetObjectKind().GroupVersionKind().Kind))
	}
	return obj, warnings, nil
}
