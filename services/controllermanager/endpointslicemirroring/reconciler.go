package endpointslicemirroring

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	netutils "k8s.io/utils/net"
	"k8s.io/utils/ptr"
)

// group is what one mirrored slice should hold: the endpoints of one address type that
// share one port set.
type group struct {
	addrType  discoveryv1.AddressType
	ports     []discoveryv1.EndpointPort
	endpoints []discoveryv1.Endpoint
}

// desired groups the repacked subsets' addresses by address type and port set, ready
// ones first, at most MaxEndpointsPerSubset per subset; it counts the addresses that
// are no IP and those left out for the limit. Mirrors kube's reconcile and desiredCalc.
func (c *Controller) desired(endpoints *corev1.Endpoints) (groups map[string]*group, invalid, overLimit int) {
	max := c.maxPerSubset()
	groups = map[string]*group{}
	for _, subset := range repackSubsets(endpoints.Subsets) {
		ports := endpointPorts(subset.Ports)
		added := 0
		add := func(addrs []corev1.EndpointAddress, ready bool) {
			for _, a := range addrs {
				if added >= max {
					overLimit++
					continue
				}
				addrType := addressType(a.IP)
				if addrType == "" {
					invalid++
					continue
				}
				key := string(addrType) + "/" + portsKey(ports)
				g := groups[key]
				if g == nil {
					g = &group{addrType: addrType, ports: ports}
					groups[key] = g
				}
				if len(g.endpoints) < max {
					g.endpoints = append(g.endpoints, addressEndpoint(a, ready))
				}
				added++
			}
		}
		add(subset.Addresses, true)
		add(subset.NotReadyAddresses, false)
	}
	for _, g := range groups {
		sortEndpoints(g.endpoints)
	}
	return groups, invalid, overLimit
}

// maxPerSubset is MaxEndpointsPerSubset, or kube's default where it is unset.
func (c *Controller) maxPerSubset() int {
	if c.MaxEndpointsPerSubset <= 0 {
		return MaxEndpointsPerSubset
	}
	return c.MaxEndpointsPerSubset
}

// addressType is IPv4 or IPv6 for an IP, "" for anything else (kube's getAddressType).
func addressType(ip string) discoveryv1.AddressType {
	parsed := netutils.ParseIPSloppy(ip)
	switch {
	case parsed == nil:
		return ""
	case parsed.To4() != nil:
		return discoveryv1.AddressTypeIPv4
	default:
		return discoveryv1.AddressTypeIPv6
	}
}

// addressEndpoint is an Endpoints address as a slice endpoint: only the Ready condition
// is set, as kube's addressToEndpoint does (serving and terminating stay unset, which
// readers take as serving and not terminating).
func addressEndpoint(a corev1.EndpointAddress, ready bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{a.IP},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
	}
	if a.TargetRef != nil {
		ep.TargetRef = a.TargetRef.DeepCopy()
	}
	if a.NodeName != nil {
		ep.NodeName = ptr.To(*a.NodeName)
	}
	if a.Hostname != "" {
		ep.Hostname = ptr.To(a.Hostname)
	}
	return ep
}

// endpointPorts converts an Endpoints subset's ports (kube's epPortsToEpsPorts).
func endpointPorts(ports []corev1.EndpointPort) []discoveryv1.EndpointPort {
	out := []discoveryv1.EndpointPort{}
	for _, p := range ports {
		out = append(out, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.Port), Protocol: ptr.To(p.Protocol), AppProtocol: p.AppProtocol})
	}
	return out
}

// portsKey identifies a port set whatever its order (kube's NewPortMapKey).
func portsKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = fmt.Sprintf("%s/%d/%s/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, ""), ptr.Deref(p.AppProtocol, ""))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func sliceKey(s *discoveryv1.EndpointSlice) string {
	return string(s.AddressType) + "/" + portsKey(s.Ports)
}

// sortEndpoints orders endpoints by address and target, so a slice's content compares
// whatever order it was written in.
func sortEndpoints(eps []discoveryv1.Endpoint) {
	uid := func(ep discoveryv1.Endpoint) types.UID {
		if ep.TargetRef == nil {
			return ""
		}
		return ep.TargetRef.UID
	}
	sort.SliceStable(eps, func(i, j int) bool {
		if a, b := eps[i].Addresses[0], eps[j].Addresses[0]; a != b {
			return a < b
		}
		return uid(eps[i]) < uid(eps[j])
	})
}

// newSlice is the slice that mirrors g for endpoints (kube's newEndpointSlice): the
// Endpoints' labels with the service-name and managed-by labels over them, its
// annotations but the last-change trigger time and kubectl's last-applied
// configuration, and the Endpoints as controller owner.
func newSlice(endpoints *corev1.Endpoints, g *group) *discoveryv1.EndpointSlice {
	l := map[string]string{}
	for k, v := range endpoints.Labels {
		l[k] = v
	}
	l[discoveryv1.LabelServiceName] = endpoints.Name
	l[discoveryv1.LabelManagedBy] = ControllerName
	var annotations map[string]string
	for k, v := range endpoints.Annotations {
		if k == corev1.EndpointsLastChangeTriggerTime || k == corev1.LastAppliedConfigAnnotation {
			continue
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    endpoints.Name + "-",
			Namespace:       endpoints.Namespace,
			Labels:          l,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(endpoints, corev1.SchemeGroupVersion.WithKind("Endpoints"))},
		},
		AddressType: g.addrType,
		Ports:       g.ports,
		Endpoints:   g.endpoints,
	}
}

// upToDate reports whether s already holds what want says.
func upToDate(s, want *discoveryv1.EndpointSlice) bool {
	have := append([]discoveryv1.Endpoint(nil), s.Endpoints...)
	sortEndpoints(have)
	return s.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(s.Ports, want.Ports) &&
		apiequality.Semantic.DeepEqual(s.Labels, want.Labels) &&
		apiequality.Semantic.DeepEqual(s.Annotations, want.Annotations) &&
		apiequality.Semantic.DeepEqual(s.OwnerReferences, want.OwnerReferences)
}

// rewrite is s (a copy) holding want's content under s's name.
func rewrite(s, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	next := s.DeepCopy()
	next.Labels, next.Annotations, next.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
	next.AddressType, next.Ports, next.Endpoints = want.AddressType, want.Ports, want.Endpoints
	return next
}

// reconcile makes existing mirror endpoints, as kube's reconciler does: per address
// type and port set the first existing slice is kept (rewritten when its content
// differs) and the others deleted; a missing one is created, taking over a slice
// otherwise deleted (of the same address type) where there is one.
func (c *Controller) reconcile(ctx context.Context, key string, endpoints *corev1.Endpoints, existing []*discoveryv1.EndpointSlice) error {
	groups, invalid, overLimit := c.desired(endpoints)
	if invalid > 0 {
		c.recorder.Eventf(endpoints, corev1.EventTypeWarning, InvalidIPAddress,
			"Skipped %d invalid IP addresses when mirroring to EndpointSlices", invalid)
	}
	if overLimit > 0 {
		c.recorder.Eventf(endpoints, corev1.EventTypeWarning, TooManyAddressesToMirror,
			"A max of %d addresses can be mirrored to EndpointSlices per Endpoints subset. %d addresses were skipped", c.maxPerSubset(), overLimit)
	}

	existing = append([]*discoveryv1.EndpointSlice(nil), existing...)
	sort.Slice(existing, func(i, j int) bool { return existing[i].Name < existing[j].Name })
	byKey := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		byKey[sliceKey(s)] = append(byKey[sliceKey(s)], s)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	var toCreate, toUpdate, toDelete []*discoveryv1.EndpointSlice
	for _, k := range keys {
		want := newSlice(endpoints, groups[k])
		have := byKey[k]
		if len(have) == 0 {
			toCreate = append(toCreate, want)
			continue
		}
		toDelete = append(toDelete, have[1:]...)
		if !upToDate(have[0], want) {
			toUpdate = append(toUpdate, rewrite(have[0], want))
		}
	}
	for _, s := range existing {
		if groups[sliceKey(s)] == nil {
			toDelete = append(toDelete, s)
		}
	}
	// A slice to create takes over one to delete of its address type (kube's
	// recycleSlices).
	var creates []*discoveryv1.EndpointSlice
	for _, want := range toCreate {
		reused := false
		for i, old := range toDelete {
			if old.AddressType == want.AddressType {
				toUpdate = append(toUpdate, rewrite(old, want))
				toDelete = append(toDelete[:i:i], toDelete[i+1:]...)
				reused = true
				break
			}
		}
		if !reused {
			creates = append(creates, want)
		}
	}

	client := c.client.DiscoveryV1().EndpointSlices(endpoints.Namespace)
	if endpoints.DeletionTimestamp == nil {
		for _, s := range creates {
			created, err := client.Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					return nil
				}
				return c.failed(endpoints, key, err)
			}
			c.tracker.Wrote(key, created)
		}
	}
	for _, s := range toUpdate {
		updated, err := client.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return errStaleCache
			}
			return c.failed(endpoints, key, err)
		}
		c.tracker.Wrote(key, updated)
	}
	for _, s := range toDelete {
		if err := client.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return c.failed(endpoints, key, err)
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}

func (c *Controller) failed(endpoints *corev1.Endpoints, key string, err error) error {
	c.recorder.Eventf(endpoints, corev1.EventTypeWarning, FailedToUpdateEndpointSlices,
		"Error mirroring EndpointSlices for Endpoints %s: %v", key, err)
	return fmt.Errorf("mirroring EndpointSlices for Endpoints %s: %w", key, err)
}
