package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/transport"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"

	"skiff.dev/services/apiserver/registry/apiregistration/apiservice"
	"skiff.dev/services/apiserver/registry/rest"
)

// Availability check: how many endpoints are tried at once, and how long each may take.
// Kube's.
const (
	checkAttempts = 5
	checkTimeout  = 5 * time.Second
)

// sync checks one APIService and writes its Available condition when it changed; then
// refreshes its discovery. A failed discovery check is an error, so the APIService is
// checked again soon (rate limited), beside the 30 s resync. Mirrors the local and remote
// AvailableConditionControllers' sync.
func (a *Aggregator) sync(ctx context.Context, name string) error {
	obj, exists, err := a.informer.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		a.discovery.forget(name)
		return nil
	}
	original := obj.(*apiregistrationv1.APIService)
	s := original.DeepCopy()
	if s.Spec.Service == nil {
		// Local APIServices are always available.
		helper.SetAPIServiceCondition(s, helper.NewLocalAvailableAPIServiceCondition())
		return a.updateStatus(ctx, original, s)
	}
	cond, checkErr := a.check(ctx, s)
	helper.SetAPIServiceCondition(s, cond)
	if err := a.updateStatus(ctx, original, s); err != nil {
		return err
	}
	if cond.Status == apiregistrationv1.ConditionTrue {
		a.refreshDiscovery(ctx, s)
	} else {
		a.discovery.markStale(s.Name)
	}
	return checkErr
}

// check is the Available condition of a remote APIService: its Service exists; a
// ClusterIP Service has the port and EndpointSlices with a ready endpoint on it; and its
// server answers a GET of /apis/<group>/<version> with a 2xx from one of up to five
// endpoints within 5 s. The error is the failed discovery check's.
func (a *Aggregator) check(ctx context.Context, s *apiregistrationv1.APIService) (apiregistrationv1.APIServiceCondition, error) {
	cond := apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue, LastTransitionTime: metav1.Now()}
	ref := s.Spec.Service
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	unavailable := func(reason, format string, args ...interface{}) (apiregistrationv1.APIServiceCondition, error) {
		cond.Status, cond.Reason, cond.Message = apiregistrationv1.ConditionFalse, reason, fmt.Sprintf(format, args...)
		return cond, nil
	}
	obj, exists, err := a.services.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	switch {
	case err != nil:
		cond.Status, cond.Reason = apiregistrationv1.ConditionUnknown, "ServiceAccessError"
		cond.Message = fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err)
		return cond, nil
	case !exists:
		return unavailable("ServiceNotFound", "service/%s in %q is not present", ref.Name, ref.Namespace)
	}
	svc := obj.(*corev1.Service)
	if svc.Spec.Type == corev1.ServiceTypeClusterIP {
		portName, found := "", false
		for _, p := range svc.Spec.Ports {
			if p.Port == port {
				portName, found = p.Name, true
				break
			}
		}
		if !found {
			return unavailable("ServicePortError", "service/%s in %q is not listening on port %d", ref.Name, ref.Namespace, port)
		}
		slices, err := a.slices.GetIndexer().ByIndex(serviceIndex, ref.Namespace+"/"+ref.Name)
		switch {
		case err != nil:
			cond.Status, cond.Reason = apiregistrationv1.ConditionUnknown, "EndpointsAccessError"
			cond.Message = fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err)
			return cond, nil
		case len(slices) == 0:
			return unavailable("EndpointsNotFound", "cannot find endpointslices for service/%s in %q", ref.Name, ref.Namespace)
		case !hasReadyEndpoint(portName, slices):
			return unavailable("MissingEndpoints", "endpointslices for service/%s in %q have no addresses with port name %q", ref.Name, ref.Namespace, portName)
		}
	}
	if err := a.checkDiscovery(ctx, s, port); err != nil {
		cond.Status, cond.Reason, cond.Message = apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck", err.Error()
		return cond, err
	}
	cond.Reason, cond.Message = "Passed", "all checks passed"
	return cond, nil
}

// hasReadyEndpoint reports whether a slice has a ready endpoint and the port named
// portName (an unnamed port when ""). Mirrors hasAvailableEndpoint.
func hasReadyEndpoint(portName string, slices []interface{}) bool {
	for _, obj := range slices {
		s := obj.(*discoveryv1.EndpointSlice)
		ready := false
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				ready = true
				break
			}
		}
		if !ready {
			continue
		}
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if p.Port != nil && name == portName {
				return true
			}
		}
	}
	return false
}

// checkDiscovery GETs /apis/<group>/<version> (/api/v1 for "v1.") from up to five
// endpoints at once, as system:kube-aggregator in system:masters; one 2xx answer
// passes.
func (a *Aggregator) checkDiscovery(ctx context.Context, s *apiregistrationv1.APIService, port int32) error {
	b := a.backendOf(s.Name)
	if b == nil {
		return errors.New("the APIService is not served yet")
	}
	if b.err != nil {
		return b.err
	}
	client := &http.Client{
		Transport:     a.wrap(b.transport),
		Timeout:       checkTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	path := "/apis/" + s.Spec.Group + "/" + s.Spec.Version
	if s.Name == "v1." {
		path = "/api/" + s.Spec.Version
	}
	results := make(chan error, checkAttempts)
	for range checkAttempts {
		go func() {
			addr, err := a.cfg.Resolver.Resolve(ctx, s.Spec.Service.Namespace, s.Spec.Service.Name, port)
			if err != nil {
				results <- err
				return
			}
			u := (&url.URL{Scheme: "https", Host: addr, Path: path}).String()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				results <- err
				return
			}
			transport.SetAuthProxyHeaders(req, "system:kube-aggregator", "", []string{"system:masters"}, nil)
			resp, err := client.Do(req)
			if err != nil {
				b.transport.CloseIdleConnections()
				results <- fmt.Errorf("failing or missing response from %v: %w", u, err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusMultipleChoices {
				results <- fmt.Errorf("failing or missing response from %v: bad status from %v: %d", u, u, resp.StatusCode)
				return
			}
			results <- nil
		}()
	}
	var last error
	for range checkAttempts {
		if last = <-results; last == nil {
			return nil
		}
	}
	return last
}

// backendOf is the backend of APIService name, nil when it is not (yet) proxied.
func (a *Aggregator) backendOf(name string) *backend {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.transports[name]
}

// updateStatus writes s's status when it differs from original's, through
// apiservices/status. Mirrors updateAPIServiceStatus.
func (a *Aggregator) updateStatus(ctx context.Context, original, s *apiregistrationv1.APIService) error {
	if equality.Semantic.DeepEqual(original.Status, s.Status) {
		return nil
	}
	was := helper.GetAPIServiceConditionByType(original, apiregistrationv1.Available)
	now := helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available)
	if was == nil || was.Status != now.Status {
		slog.Info("APIService availability changed", "apiservice", s.Name, "status", now.Status, "reason", now.Reason, "message", now.Message)
	}
	status := a.cfg.Stores.Store(apiservice.Resource).WithStrategy(apiservice.StatusStrategy{})
	_, _, err := status.Update(ctx, "", s.Name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		current := old.DeepCopyObject().(*apiregistrationv1.APIService)
		if current.UID != s.UID {
			return nil, apierrors.NewConflict(apiservice.Resource, s.Name, errors.New("the APIService was replaced"))
		}
		current.Status = *s.Status.DeepCopy()
		return current, nil
	}), &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
