package controllermanager

import (
	"context"
	"fmt"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	scaleclient "k8s.io/client-go/scale"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/metrics/pkg/client/external_metrics"

	"skiff.dev/services/controllermanager/podautoscaler"
)

// HorizontalPodAutoscalerController is kube's name for the controller that scales
// HorizontalPodAutoscalers' targets.
const HorizontalPodAutoscalerController = podautoscaler.Name

// startHorizontalPodAutoscalerController runs the horizontal-pod-autoscaler
// controller: targets read and scaled through their scale subresource (a
// discovery-backed RESTMapper finds it), metrics read from the resource, custom and
// external metrics APIs through the apiserver (the custom metrics API's version is
// looked up again every sync period). It needs the REST config. Mirrors
// startHorizontalPodAutoscalerControllerWithRESTClient
// (cmd/kube-controller-manager/app/autoscaling.go).
func startHorizontalPodAutoscalerController(ctx context.Context, cc ControllerContext) error {
	if cc.RESTConfig == nil {
		return fmt.Errorf("%s needs the controller manager's REST config", HorizontalPodAutoscalerController)
	}
	o := cc.Options
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cc.Client.Discovery()))
	scales, err := scaleclient.NewForConfig(cc.RESTConfig, mapper, dynamic.LegacyAPIPathResolverFunc,
		scaleclient.NewDiscoveryScaleKindResolver(cc.Client.Discovery()))
	if err != nil {
		return err
	}
	resourceMetrics, err := metricsclient.NewForConfig(cc.RESTConfig)
	if err != nil {
		return err
	}
	externalMetrics, err := external_metrics.NewForConfig(cc.RESTConfig)
	if err != nil {
		return err
	}
	customAPIs := custom_metrics.NewAvailableAPIsGetter(cc.Client.Discovery())
	go custom_metrics.PeriodicallyInvalidate(customAPIs, o.HorizontalPodAutoscalerSyncPeriod, ctx.Done())
	c := podautoscaler.New(podautoscaler.Config{
		Factory: cc.InformerFactory, Client: cc.Client, Scales: scales, Mapper: mapper,
		Metrics: podautoscaler.RESTMetricsClient{
			Resource: resourceMetrics.MetricsV1beta1(),
			Custom:   custom_metrics.NewForConfig(cc.RESTConfig, mapper, customAPIs),
			External: externalMetrics,
		},
		Recorder:                      cc.Events.ForComponent(podautoscaler.EventSource),
		SyncPeriod:                    o.HorizontalPodAutoscalerSyncPeriod,
		DownscaleStabilizationWindow:  o.HorizontalPodAutoscalerDownscaleStabilizationWindow,
		Tolerance:                     o.HorizontalPodAutoscalerTolerance,
		CPUInitializationPeriod:       o.HorizontalPodAutoscalerCPUInitializationPeriod,
		DelayOfInitialReadinessStatus: o.HorizontalPodAutoscalerInitialReadinessDelay,
	})
	go c.Run(ctx, o.ConcurrentHorizontalPodAutoscalerSyncs)
	return nil
}
