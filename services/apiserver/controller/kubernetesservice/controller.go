// Package kubernetesservice keeps the `kubernetes` Service in the default namespace,
// with its Endpoints and EndpointSlice, pointing at this apiserver: ClusterIP the first
// address of --service-cluster-ip-range, port 443 (https) to the apiserver's port at its
// advertised address. Mirrors kube-apiserver's controlplane "kubernetes service"
// controller (pkg/controlplane/controller/kubernetesservice) and its endpoint reconciler
// (pkg/controlplane/reconcilers), which writes both Endpoints and the EndpointSlice.
package kubernetesservice

import (
	"context"
	"log/slog"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry/rest"
)

// Name is the Service's, Endpoints' and EndpointSlice's name; PortName its port's.
const (
	Name     = "kubernetes"
	PortName = "https"
	// ServicePort is the port the Service exposes (kube's default).
	ServicePort = 443
)

// Storage is what the controller needs of a resource.
type Storage interface {
	rest.Getter
	rest.Creater
	rest.Updater
}

// Controller reconciles the kubernetes Service, Endpoints and EndpointSlice.
type Controller struct {
	// Services, Endpoints and EndpointSlices are the registry's resources; writes bypass
	// admission, as kube's controller does.
	Services, Endpoints, EndpointSlices Storage
	// ClusterIP is the Service's address: the first IP of the service range.
	ClusterIP net.IP
	// PublicIP is the apiserver's advertised address (--advertise-address); nil writes
	// the Service only (an address the Endpoints may not hold, such as loopback, is
	// never advertised).
	PublicIP net.IP
	// Port is the apiserver's secure port, the Service's targetPort.
	Port int
	// Interval is how often the objects are reconciled; default 10 s (kube's
	// --endpoint-reconciler interval).
	Interval time.Duration
}

// Run reconciles now and every Interval until ctx ends, logging failures and retrying.
func (c *Controller) Run(ctx context.Context) {
	interval := c.Interval
	if interval == 0 {
		interval = 10 * time.Second
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("kubernetes service: reconcile; will retry", "err", err)
		}
	}, interval)
}

// Reconcile creates or repairs the three objects once. Errors: the registry's.
func (c *Controller) Reconcile(ctx context.Context) error {
	if err := c.reconcileService(ctx); err != nil {
		return err
	}
	if c.PublicIP == nil {
		return nil
	}
	if err := c.reconcile(ctx, c.Endpoints, c.endpoints()); err != nil {
		return err
	}
	return c.reconcile(ctx, c.EndpointSlices, c.endpointSlice())
}

// reconcileService creates the Service, or puts its ports back if they were changed; its
// clusterIP cannot change once set, as for any Service.
func (c *Controller) reconcileService(ctx context.Context) error {
	want := c.service()
	existing, err := c.Services.Get(ctx, metav1.NamespaceDefault, Name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Services.Create(ctx, metav1.NamespaceDefault, want, &metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	svc := existing.(*corev1.Service)
	if apiequality.Semantic.DeepEqual(svc.Spec.Ports, want.Spec.Ports) && svc.Spec.Type == corev1.ServiceTypeClusterIP {
		return nil
	}
	svc = svc.DeepCopy()
	svc.Spec.Ports, svc.Spec.Type = want.Spec.Ports, corev1.ServiceTypeClusterIP
	_, _, err = c.Services.Update(ctx, metav1.NamespaceDefault, Name, rest.DefaultUpdatedObjectInfo(svc), &metav1.UpdateOptions{})
	return err
}

// object is an API object with metadata.
type object interface {
	metav1.Object
	runtime.Object
}

// reconcile creates want or rewrites the stored object when its content differs.
func (c *Controller) reconcile(ctx context.Context, s Storage, want object) error {
	existing, err := s.Get(ctx, metav1.NamespaceDefault, Name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = s.Create(ctx, metav1.NamespaceDefault, want, &metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	m := existing.(metav1.Object)
	switch got := existing.(type) {
	case *corev1.Endpoints:
		w := want.(*corev1.Endpoints)
		if apiequality.Semantic.DeepEqual(got.Subsets, w.Subsets) && got.Labels["endpointslice.kubernetes.io/skip-mirror"] == "true" {
			return nil
		}
	case *discoveryv1.EndpointSlice:
		w := want.(*discoveryv1.EndpointSlice)
		if apiequality.Semantic.DeepEqual(got.Endpoints, w.Endpoints) && apiequality.Semantic.DeepEqual(got.Ports, w.Ports) &&
			got.AddressType == w.AddressType && got.Labels[discoveryv1.LabelServiceName] == Name {
			return nil
		}
	}
	want.SetResourceVersion(m.GetResourceVersion())
	_, _, err = s.Update(ctx, metav1.NamespaceDefault, Name, rest.DefaultUpdatedObjectInfo(want), &metav1.UpdateOptions{})
	return err
}

func (c *Controller) service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"provider": "kubernetes", "component": "apiserver"}},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       c.ClusterIP.String(),
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []corev1.ServicePort{{Name: PortName, Protocol: corev1.ProtocolTCP, Port: ServicePort,
				TargetPort: intstr.FromInt32(int32(c.Port))}},
		},
	}
}

func (c *Controller) endpoints() *corev1.Endpoints {
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: metav1.NamespaceDefault,
			// kube's reconciler writes the slice itself, so the mirroring controller skips it.
			Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: c.PublicIP.String()}},
			Ports:     []corev1.EndpointPort{{Name: PortName, Port: int32(c.Port), Protocol: corev1.ProtocolTCP}},
		}},
	}
}

func (c *Controller) endpointSlice() *discoveryv1.EndpointSlice {
	addressType := discoveryv1.AddressTypeIPv4
	if c.PublicIP.To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: Name}},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{c.PublicIP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(PortName), Port: ptr.To(int32(c.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}
