package aggregator

import (
	"context"
	"errors"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"skiff.dev/services/apiserver/registry/apiregistration/apiservice"
	"skiff.dev/services/apiserver/registry/rest"
)

// AutoManagedLabel marks the APIServices autoregistration owns, with AutoManagedOnStart
// for those it reconciles at start. Kube's.
const (
	AutoManagedLabel   = "kube-aggregator.kubernetes.io/automanaged"
	AutoManagedOnStart = "onstart"
)

// priority is a group version's place in discovery: its group's among groups, its own
// within the group.
type priority struct{ group, version int32 }

// priorities are kube-apiserver's for its built-in group versions (its
// apiVersionPriorities); a group version not listed (apiregistration.k8s.io, whose
// APIServices these are) gets no APIService, as in kube.
var priorities = map[schema.GroupVersion]priority{
	{Group: "", Version: "v1"}:                                   {18000, 1},
	{Group: "apps", Version: "v1"}:                               {17800, 15},
	{Group: "events.k8s.io", Version: "v1"}:                      {17750, 15},
	{Group: "authentication.k8s.io", Version: "v1"}:              {17700, 15},
	{Group: "authorization.k8s.io", Version: "v1"}:               {17600, 15},
	{Group: "autoscaling", Version: "v1"}:                        {17500, 15},
	{Group: "autoscaling", Version: "v2"}:                        {17500, 30},
	{Group: "batch", Version: "v1"}:                              {17400, 15},
	{Group: "certificates.k8s.io", Version: "v1"}:                {17300, 15},
	{Group: "networking.k8s.io", Version: "v1"}:                  {17200, 15},
	{Group: "policy", Version: "v1"}:                             {17100, 15},
	{Group: "rbac.authorization.k8s.io", Version: "v1"}:          {17000, 15},
	{Group: "storage.k8s.io", Version: "v1"}:                     {16800, 15},
	{Group: "apiextensions.k8s.io", Version: "v1"}:               {16700, 15},
	{Group: "admissionregistration.k8s.io", Version: "v1"}:       {16700, 15},
	{Group: "scheduling.k8s.io", Version: "v1"}:                  {16600, 15},
	{Group: "coordination.k8s.io", Version: "v1"}:                {16500, 15},
	{Group: "node.k8s.io", Version: "v1"}:                        {16300, 15},
	{Group: "discovery.k8s.io", Version: "v1"}:                   {16200, 15},
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1"}:       {16100, 21},
	{Group: "internal.apiserver.k8s.io", Version: "v1alpha1"}:    {16000, 9},
	{Group: "admissionregistration.k8s.io", Version: "v1beta1"}:  {16700, 12},
	{Group: "admissionregistration.k8s.io", Version: "v1alpha1"}: {16700, 9},
}

// localAPIServices are the APIServices of the built-in group versions, as kube's
// makeAPIService makes them.
func (a *Aggregator) localAPIServices() []*apiregistrationv1.APIService {
	var out []*apiregistrationv1.APIService
	for _, gv := range a.cfg.Local {
		p, ok := priorities[gv]
		if !ok {
			continue
		}
		out = append(out, &apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: gv.Version + "." + gv.Group, Labels: map[string]string{AutoManagedLabel: AutoManagedOnStart}},
			Spec: apiregistrationv1.APIServiceSpec{Group: gv.Group, Version: gv.Version,
				GroupPriorityMinimum: p.group, VersionPriority: p.version},
		})
	}
	return out
}

// autoregister makes the stored APIServices of the built-in group versions what they
// should be: it creates the missing ones, puts back the spec of those it manages, and
// deletes the ones it managed whose group version is no longer served. An APIService a
// user made for the same name without the label is left alone. Mirrors kube's
// autoregister controller for its sync-on-start APIServices.
func (a *Aggregator) autoregister(ctx context.Context) error {
	store := a.cfg.Stores.Store(apiservice.Resource)
	if store == nil {
		return errors.New("apiservices are not served")
	}
	want := map[string]*apiregistrationv1.APIService{}
	for _, s := range a.localAPIServices() {
		want[s.Name] = s
	}
	var errs []error
	for name, desired := range want {
		obj, exists, err := a.informer.GetStore().GetByKey(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !exists {
			if _, err := store.Create(ctx, "", desired.DeepCopy(), &metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, err)
			}
			continue
		}
		current := obj.(*apiregistrationv1.APIService)
		if current.Labels[AutoManagedLabel] == "" || sameSpec(current.Spec, desired.Spec) {
			continue
		}
		_, _, err = store.Update(ctx, "", name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
			s := old.DeepCopyObject().(*apiregistrationv1.APIService)
			s.Spec = desired.Spec
			return s, nil
		}), &metav1.UpdateOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	stale := sets.New[string]()
	for _, obj := range a.informer.GetStore().List() {
		s := obj.(*apiregistrationv1.APIService)
		if s.Labels[AutoManagedLabel] == AutoManagedOnStart && want[s.Name] == nil {
			stale.Insert(s.Name)
		}
	}
	for _, name := range sets.List(stale) {
		slog.Info("deleting the APIService of a group version no longer served", "apiservice", name)
		if _, _, err := store.Delete(ctx, "", name, &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sameSpec compares the fields a local APIService's spec holds.
func sameSpec(a, b apiregistrationv1.APIServiceSpec) bool {
	return a.Group == b.Group && a.Version == b.Version && a.Service == nil && b.Service == nil &&
		a.GroupPriorityMinimum == b.GroupPriorityMinimum && a.VersionPriority == b.VersionPriority &&
		len(a.CABundle) == 0 && !a.InsecureSkipTLSVerify
}
