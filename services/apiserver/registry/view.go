package registry

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry/rest"
)

// View serves the objects of another resource's Store as the kind of its own group
// version: the objects live once, as the Store's kind, under the Store's etcd prefix, and
// are converted on the way in (create, update, patch) and on the way out (every answer,
// watch events and Table rows included). An object written through either resource is
// read through both with the same name, uid and resourceVersion. Field selectors name the
// view kind's fields and are converted to the Store's before it selects. Mirrors kube's
// cohabitating resources (events.k8s.io/v1 Events stored as core/v1 Events,
// k8s.io/kubernetes/pkg/kubeapiserver/default_storage_factory_builder.go), where one
// internal object is converted to each requested version; skiff stores versioned objects,
// so it converts between the two versions directly.
type View struct {
	// Store holds the objects, as its own kind; its Strategy judges writes made through
	// the view (Descriptor.NewView gives it the view's).
	Store *Store
	// Kind is the served kind, e.g. events.k8s.io/v1 Event.
	Kind schema.GroupVersionKind
	// NewFunc returns an empty object of Kind; NewListFunc an empty list of them.
	NewFunc, NewListFunc func() runtime.Object
	// Convertor converts between the Store's kind and Kind (Convert, both ways) and
	// Kind's field labels to the Store's (ConvertFieldLabel): the apiserver's scheme,
	// where the conversions are registered.
	Convertor runtime.ObjectConvertor
}

var (
	_ rest.Getter            = (*View)(nil)
	_ rest.Lister            = (*View)(nil)
	_ rest.Creater           = (*View)(nil)
	_ rest.Updater           = (*View)(nil)
	_ rest.GracefulDeleter   = (*View)(nil)
	_ rest.CollectionDeleter = (*View)(nil)
	_ rest.Watcher           = (*View)(nil)
	_ rest.TableConvertor    = (*View)(nil)
)

// GetResetFields lists the fields the Store's strategy resets, for server-side apply.
func (v *View) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return v.Store.GetResetFields()
}

// WithStrategy returns a copy of v whose writes strategy judges (in the Store's kind):
// subresources such as horizontalpodautoscalers/status share the objects and differ
// only in what an update may change.
func (v *View) WithStrategy(strategy Strategy) *View {
	c := *v
	c.Store = v.Store.WithStrategy(strategy)
	return &c
}

// Subresource narrows v to what a subresource of its objects serves, as
// Store.Subresource does: get, update and patch, in the served kind.
func (v *View) Subresource() rest.Storage { return subresourceStore{v} }

// New returns an empty object of the served kind.
func (v *View) New() runtime.Object { return v.NewFunc() }

// NewList returns an empty list of the served kind.
func (v *View) NewList() runtime.Object { return v.NewListFunc() }

// toStored converts obj, of the served kind, to the Store's. A failure is a 500: the
// conversions are total.
func (v *View) toStored(obj runtime.Object) (runtime.Object, error) {
	out := v.Store.NewFunc()
	if err := v.Convertor.Convert(obj, out, nil); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("convert %T to %T: %w", obj, out, err))
	}
	return out, nil
}

// fromStored converts obj, of the Store's kind, to the served kind.
func (v *View) fromStored(obj runtime.Object) (runtime.Object, error) {
	out := v.NewFunc()
	if err := v.Convertor.Convert(obj, out, nil); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("convert %T to %T: %w", obj, out, err))
	}
	return out, nil
}

// listFromStored converts a list of the Store's kind to a list of the served kind with
// the same list metadata (resourceVersion, continue, remainingItemCount).
func (v *View) listFromStored(list runtime.Object) (runtime.Object, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	converted := make([]runtime.Object, len(items))
	for i, item := range items {
		if converted[i], err = v.fromStored(item); err != nil {
			return nil, err
		}
	}
	out := v.NewListFunc()
	if err := meta.SetList(out, converted); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	in, err := meta.ListAccessor(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	outMeta, err := meta.ListAccessor(out)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	outMeta.SetResourceVersion(in.GetResourceVersion())
	outMeta.SetContinue(in.GetContinue())
	outMeta.SetRemainingItemCount(in.GetRemainingItemCount())
	return out, nil
}

// storedListOptions returns opts with its field selector converted to the Store's field
// labels. Errors: 400 "field label not supported: <label>" for a label the served kind
// does not select on, as kube-apiserver's list handler answers.
func (v *View) storedListOptions(opts *metainternalversion.ListOptions) (*metainternalversion.ListOptions, error) {
	if opts == nil || opts.FieldSelector == nil || opts.FieldSelector.Empty() {
		return opts, nil
	}
	converted, err := opts.FieldSelector.Transform(func(label, value string) (string, string, error) {
		return v.Convertor.ConvertFieldLabel(v.Kind, label, value)
	})
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	c := opts.DeepCopy()
	c.FieldSelector = converted
	return c, nil
}

// Get returns the object as the served kind, or the Store's errors.
func (v *View) Get(ctx context.Context, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	obj, err := v.Store.Get(ctx, namespace, name, opts)
	if err != nil {
		return nil, err
	}
	return v.fromStored(obj)
}

// List lists as the Store does, with opts' field selector in the served kind's labels.
func (v *View) List(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	opts, err := v.storedListOptions(opts)
	if err != nil {
		return nil, err
	}
	list, err := v.Store.List(ctx, namespace, opts)
	if err != nil {
		return nil, err
	}
	return v.listFromStored(list)
}

// Create converts obj to the Store's kind, creates it and returns it as stored, in the
// served kind.
func (v *View) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	stored, err := v.toStored(obj)
	if err != nil {
		return nil, err
	}
	out, err := v.Store.Create(ctx, namespace, stored, opts)
	if err != nil {
		return nil, err
	}
	return v.fromStored(out)
}

// Update hands objInfo the stored object in the served kind and stores what it returns,
// converted back, inside the Store's GuaranteedUpdate (a retry after a conflict converts
// again).
func (v *View) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	converting := rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		served, err := v.fromStored(old)
		if err != nil {
			return nil, err
		}
		updated, err := objInfo.UpdatedObject(ctx, served)
		if err != nil {
			return nil, err
		}
		return v.toStored(updated)
	})
	out, created, err := v.Store.Update(ctx, namespace, name, converting, opts)
	if err != nil {
		return nil, false, err
	}
	served, err := v.fromStored(out)
	return served, created, err
}

// Delete deletes as the Store does and returns the object in the served kind.
func (v *View) Delete(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	out, gone, err := v.Store.Delete(ctx, namespace, name, opts)
	if err != nil {
		return nil, false, err
	}
	served, err := v.fromStored(out)
	return served, gone, err
}

// DeleteCollection deletes as the Store does; deleteValidation sees each object in the
// served kind, and the list returned is of the served kind.
func (v *View) DeleteCollection(ctx context.Context, namespace string, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions, listOpts *metainternalversion.ListOptions) (runtime.Object, error) {
	listOpts, err := v.storedListOptions(listOpts)
	if err != nil {
		return nil, err
	}
	validate := deleteValidation
	if deleteValidation != nil {
		validate = func(ctx context.Context, obj runtime.Object) error {
			served, err := v.fromStored(obj)
			if err != nil {
				return err
			}
			return deleteValidation(ctx, served)
		}
	}
	list, err := v.Store.DeleteCollection(ctx, namespace, validate, opts, listOpts)
	if err != nil {
		return nil, err
	}
	return v.listFromStored(list)
}

// Watch watches as the Store does; every event's object (bookmarks' too) comes in the
// served kind, error statuses as they are.
func (v *View) Watch(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	opts, err := v.storedListOptions(opts)
	if err != nil {
		return nil, err
	}
	w, err := v.Store.Watch(ctx, namespace, opts)
	if err != nil {
		return nil, err
	}
	return newConvertingWatch(w, v.fromStored), nil
}

// ConvertToTable prints obj, one object or a list of the served kind, with the Store's
// columns (kube prints both versions of a cohabiting kind from its internal object); rows
// that carry their whole object (includeObject=Object) carry it in the served kind.
func (v *View) ConvertToTable(ctx context.Context, obj runtime.Object, opts *metav1.TableOptions) (*metav1.Table, error) {
	served := []runtime.Object{obj}
	var stored runtime.Object
	if meta.IsListType(obj) {
		items, err := meta.ExtractList(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		converted := make([]runtime.Object, len(items))
		for i, item := range items {
			if converted[i], err = v.toStored(item); err != nil {
				return nil, err
			}
		}
		list := v.Store.NewListFunc()
		if err := meta.SetList(list, converted); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if in, err := meta.ListAccessor(obj); err == nil {
			out, _ := meta.ListAccessor(list)
			out.SetResourceVersion(in.GetResourceVersion())
			out.SetContinue(in.GetContinue())
			out.SetRemainingItemCount(in.GetRemainingItemCount())
		}
		served, stored = items, list
	} else {
		var err error
		if stored, err = v.toStored(obj); err != nil {
			return nil, err
		}
	}
	table, err := v.Store.ConvertToTable(ctx, stored, opts)
	if err != nil {
		return nil, err
	}
	if opts != nil && opts.IncludeObject == metav1.IncludeObject {
		for i := range table.Rows {
			table.Rows[i].Object.Object = served[i]
		}
	}
	return table, nil
}

// convertingWatch passes a watch's events on with their objects converted.
type convertingWatch struct {
	in      watch.Interface
	convert func(runtime.Object) (runtime.Object, error)
	result  chan watch.Event
	stop    chan struct{}
	once    sync.Once
}

// convertingWatchBuffer is how many converted events wait for the watcher to take them,
// so the handler still sees a burst queued and writes it in one frame.
const convertingWatchBuffer = 100

func newConvertingWatch(in watch.Interface, convert func(runtime.Object) (runtime.Object, error)) *convertingWatch {
	w := &convertingWatch{in: in, convert: convert, result: make(chan watch.Event, convertingWatchBuffer), stop: make(chan struct{})}
	go w.loop()
	return w
}

// ResultChan implements watch.Interface.
func (w *convertingWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop stops the watch beneath and the conversion; the result channel is closed.
func (w *convertingWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

// loop converts until the watch beneath ends or Stop is called. An object that fails to
// convert ends the watch with an ERROR event, as a watch ends on a storage error.
func (w *convertingWatch) loop() {
	defer close(w.result)
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-w.stop:
			return
		case ev, ok = <-w.in.ResultChan():
			if !ok {
				return
			}
		}
		if _, isStatus := ev.Object.(*metav1.Status); ev.Type != watch.Error && !isStatus && ev.Object != nil {
			converted, err := w.convert(ev.Object)
			if err != nil {
				status := err.(apierrors.APIStatus).Status()
				ev = watch.Event{Type: watch.Error, Object: &status}
			} else {
				ev.Object = converted
			}
		}
		select {
		case w.result <- ev:
		case <-w.stop:
			return
		}
		if ev.Type == watch.Error {
			w.Stop()
			return
		}
	}
}
