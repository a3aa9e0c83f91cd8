package controllermanager

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Controller names, as kube-controller-manager's --controllers knows them
// (cmd/kube-controller-manager/names).
const (
	NodeLifecycleController         = "node-lifecycle-controller"
	TaintEvictionController         = "taint-eviction-controller"
	NodeIpamController              = "node-ipam-controller"
	PodGarbageCollectorController   = "pod-garbage-collector-controller"
	ReplicaSetController            = "replicaset-controller"
	ReplicationControllerController = "replicationcontroller-controller"
	DeploymentController            = "deployment-controller"
	StatefulSetController           = "statefulset-controller"
	DaemonSetController             = "daemonset-controller"
	JobController                   = "job-controller"
	GarbageCollectorController      = "garbage-collector-controller"
	NamespaceController             = "namespace-controller"
	ServiceAccountController        = "serviceaccount-controller"
	RootCACertPublisher             = "root-ca-certificate-publisher-controller"
	ClusterRoleAggregation          = "clusterrole-aggregation-controller"
	TokenCleanerController          = "token-cleaner-controller"
	ResourceQuotaController         = "resourcequota-controller"
)

// controllerAliases are the names --controllers accepted before kube 1.28.
var controllerAliases = map[string]string{
	"nodelifecycle":            NodeLifecycleController,
	"nodeipam":                 NodeIpamController,
	"podgc":                    PodGarbageCollectorController,
	"replicaset":               ReplicaSetController,
	"replicationcontroller":    ReplicationControllerController,
	"deployment":               DeploymentController,
	"statefulset":              StatefulSetController,
	"daemonset":                DaemonSetController,
	"job":                      JobController,
	"garbagecollector":         GarbageCollectorController,
	"ttl-after-finished":       TTLAfterFinishedController,
	"cronjob":                  CronJobController,
	"endpointslice":            EndpointSliceController,
	"endpointslicemirroring":   EndpointSliceMirroring,
	"endpoint":                 EndpointsController,
	"namespace":                NamespaceController,
	"serviceaccount":           ServiceAccountController,
	"root-ca-cert-publisher":   RootCACertPublisher,
	"clusterrole-aggregation":  ClusterRoleAggregation,
	"tokencleaner":             TokenCleanerController,
	"disruption":               DisruptionController,
	"resourcequota":            ResourceQuotaController,
	"horizontalpodautoscaling": HorizontalPodAutoscalerController,
	"persistentvolume-binder":  PersistentVolumeBinderController,
	"pvc-protection":           PersistentVolumeClaimProtectionController,
	"pv-protection":            PersistentVolumeProtectionController,
}

// ControllerContext is what every controller is built from (kube's
// cmd/kube-controller-manager/app.ControllerContext). One per leadership term.
type ControllerContext struct {
	// Client acts as system:kube-controller-manager.
	Client kubernetes.Interface
	// InformerFactory is shared by every controller; it is started after all of them
	// have registered their informers, so an InitFunc must not wait for a cache sync.
	InformerFactory informers.SharedInformerFactory
	// RESTConfig is Client's configuration (for the namespace controller's dynamic
	// client); nil when the caller gave none.
	RESTConfig *rest.Config
	// RootCA is the PEM bundle root-ca-cert-publisher publishes.
	RootCA []byte
	// Events makes each controller's recorder under its kube component name (the
	// events' source.component and reportingController); never nil.
	Events EventRecorders
	// Options are the manager's flags.
	Options Options
	// Registerer takes the controllers' Prometheus metrics; never nil.
	Registerer prometheus.Registerer
	// TracerProvider traces the controllers' own spans; never nil.
	TracerProvider trace.TracerProvider
	// Clock is the time controllers act on: the real clock, or a fake one in tests.
	Clock clock.WithTickerAndDelayedExecution
}

// InitFunc builds one controller from controllerCtx, registers its informers and starts
// it in the background (typically `go c.Run(ctx, workers)`), then returns at once: the
// controller runs until ctx ends. An error stops the controller manager (kube's InitFunc,
// without its "enabled" result: a disabled controller returns nil without starting).
type InitFunc func(ctx context.Context, controllerCtx ControllerContext) error

// NewControllerInitializers is every controller the manager can run, by name (kube's
// NewControllerInitializers). Adding a controller is one line here.
func NewControllerInitializers() map[string]InitFunc {
	return map[string]InitFunc{
		NodeLifecycleController:                   startNodeLifecycleController,
		TaintEvictionController:                   startTaintEvictionController,
		NodeIpamController:                        startNodeIpamController,
		PodGarbageCollectorController:             startPodGCController,
		ReplicaSetController:                      startReplicaSetController,
		ReplicationControllerController:           startReplicationController,
		DeploymentController:                      startDeploymentController,
		StatefulSetController:                     startStatefulSetController,
		DaemonSetController:                       startDaemonSetController,
		JobController:                             startJobController,
		TTLAfterFinishedController:                startTTLAfterFinishedController,
		GarbageCollectorController:                startGarbageCollectorController,
		CronJobController:                         startCronJobController,
		EndpointSliceController:                   startEndpointSliceController,
		EndpointsController:                       startEndpointsController,
		EndpointSliceMirroring:                    startEndpointSliceMirroringController,
		NamespaceController:                       startNamespaceController,
		ServiceAccountController:                  startServiceAccountController,
		RootCACertPublisher:                       startRootCACertPublisher,
		ClusterRoleAggregation:                    startClusterRoleAggregationController,
		TokenCleanerController:                    startTokenCleanerController,
		DisruptionController:                      startDisruptionController,
		ResourceQuotaController:                   startResourceQuotaController,
		HorizontalPodAutoscalerController:         startHorizontalPodAutoscalerController,
		PersistentVolumeBinderController:          startPersistentVolumeBinderController,
		PersistentVolumeClaimProtectionController: startPVCProtectionController,
		PersistentVolumeProtectionController:      startPVProtectionController,
	}
}

// disabledByDefault are controllers "*" does not enable.
var disabledByDefault = map[string]bool{}

// KnownControllers lists every controller name, sorted.
func KnownControllers() []string {
	var names []string
	for name := range NewControllerInitializers() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// controllerName resolves name or its alias to a known controller name; "" if unknown.
func controllerName(name string) string {
	if alias, ok := controllerAliases[name]; ok {
		name = alias
	}
	if _, ok := NewControllerInitializers()[name]; !ok {
		return ""
	}
	return name
}

// IsControllerEnabled reports whether --controllers enables name: an explicit "name"
// or "-name" (or its alias) decides; else "*" enables what is on by default. Mirrors
// kube's ControllerContext.IsControllerEnabled.
func IsControllerEnabled(name string, controllers []string) bool {
	hasStar := false
	for _, c := range controllers {
		negated := len(c) > 0 && c[0] == '-'
		if negated {
			c = c[1:]
		}
		if alias, ok := controllerAliases[c]; ok {
			c = alias
		}
		switch {
		case c == name:
			return !negated
		case c == "*" && !negated:
			hasStar = true
		}
	}
	return hasStar && !disabledByDefault[name]
}

// informerResync is kube's --min-resync-period: informers replay their cache this often
// so a missed event heals.
const informerResync = 12 * time.Hour

// register registers cs with r; a collector already registered (by an earlier leadership
// term of this process) is not an error.
func register(r prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
