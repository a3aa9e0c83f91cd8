package controllermanager

import (
	"context"

	"skiff.dev/services/controllermanager/endpoint"
	"skiff.dev/services/controllermanager/endpointslice"
	"skiff.dev/services/controllermanager/endpointslicemirroring"
)

// The start functions of the Service controllers (kube's
// cmd/kube-controller-manager/app discovery.go and core.go).

// EndpointSliceController and EndpointsController are kube's names for the controllers
// that keep a Service's EndpointSlices and Endpoints.
const (
	EndpointSliceController = "endpointslice-controller"
	EndpointsController     = "endpoints-controller"
)

// EndpointSliceMirroring is kube's name for the controller that mirrors a selectorless
// Service's Endpoints into EndpointSlices.
const EndpointSliceMirroring = "endpointslice-mirroring-controller"

// endpointWorkers is kube's default of --concurrent-service-endpoint-syncs,
// --concurrent-endpointslice-syncs and --mirroring-concurrent-service-endpoint-syncs.
const endpointWorkers = 5

func startEndpointSliceController(ctx context.Context, cc ControllerContext) error {
	f := cc.InformerFactory
	c := endpointslice.NewController(f.Core().V1().Pods(), f.Core().V1().Services(), f.Discovery().V1().EndpointSlices(), cc.Client, cc.Events.ForComponent("endpoint-slice-controller"))
	go c.Run(ctx, endpointWorkers)
	return nil
}

func startEndpointsController(ctx context.Context, cc ControllerContext) error {
	f := cc.InformerFactory
	c := endpoint.NewController(f.Core().V1().Pods(), f.Core().V1().Services(), f.Core().V1().Endpoints(), cc.Client, cc.Events.ForComponent("endpoint-controller"))
	go c.Run(ctx, endpointWorkers)
	return nil
}

func startEndpointSliceMirroringController(ctx context.Context, cc ControllerContext) error {
	f := cc.InformerFactory
	c := endpointslicemirroring.NewController(f.Core().V1().Endpoints(), f.Discovery().V1().EndpointSlices(), f.Core().V1().Services(), cc.Client, cc.Events.ForComponent("endpoint-slice-mirroring-controller"))
	go c.Run(ctx, endpointWorkers)
	return nil
}
