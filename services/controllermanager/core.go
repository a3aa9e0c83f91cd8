package controllermanager

import (
	"context"

	"skiff.dev/services/controllermanager/nodeipam"
	"skiff.dev/services/controllermanager/nodelifecycle"
	"skiff.dev/services/controllermanager/podgc"
	"skiff.dev/services/controllermanager/resourcequota"
	"skiff.dev/services/controllermanager/tainteviction"
)

// The start functions of the node controllers (kube's cmd/kube-controller-manager/app
// core.go).

func startNodeLifecycleController(ctx context.Context, cc ControllerContext) error {
	o := cc.Options
	nc, err := nodelifecycle.New(cc.InformerFactory.Core().V1().Nodes(), cc.InformerFactory.Coordination().V1().Leases(),
		cc.InformerFactory.Core().V1().Pods(), cc.Client, cc.Events.ForComponent("node-controller"), cc.Clock, nodelifecycle.Config{
			NodeMonitorPeriod:           o.NodeMonitorPeriod,
			NodeMonitorGracePeriod:      o.NodeMonitorGracePeriod,
			NodeStartupGracePeriod:      o.NodeStartupGracePeriod,
			EvictionLimiterQPS:          o.NodeEvictionRate,
			SecondaryEvictionLimiterQPS: o.SecondaryNodeEvictionRate,
			LargeClusterThreshold:       o.LargeClusterSizeThreshold,
			UnhealthyZoneThreshold:      o.UnhealthyZoneThreshold,
		})
	if err != nil {
		return err
	}
	if err := register(cc.Registerer, nc.Metrics()...); err != nil {
		return err
	}
	go nc.Run(ctx)
	return nil
}

func startTaintEvictionController(ctx context.Context, cc ControllerContext) error {
	tc, err := tainteviction.New(cc.InformerFactory.Core().V1().Pods(), cc.InformerFactory.Core().V1().Nodes(), cc.Client, cc.Events.ForComponent("taint-eviction-controller"), cc.Clock, cc.TracerProvider)
	if err != nil {
		return err
	}
	if err := register(cc.Registerer, tc.Metrics()...); err != nil {
		return err
	}
	go tc.Run(ctx)
	return nil
}

func startNodeIpamController(ctx context.Context, cc ControllerContext) error {
	o := cc.Options
	if !o.AllocateNodeCIDRs {
		return nil // kube's default: nodes get no CIDR unless --allocate-node-cidrs
	}
	maskSizes := make([]int, len(o.ClusterCIDRs))
	for i, cidr := range o.ClusterCIDRs {
		maskSizes[i] = o.NodeCIDRMaskSizeIPv6
		if cidr.IP.To4() != nil {
			maskSizes[i] = o.NodeCIDRMaskSizeIPv4
		}
	}
	c, err := nodeipam.New(cc.InformerFactory.Core().V1().Nodes(), cc.Client, cc.Events.ForComponent("cidrAllocator"), o.ClusterCIDRs, maskSizes)
	if err != nil {
		return err
	}
	go c.Run(ctx)
	return nil
}

func startPodGCController(ctx context.Context, cc ControllerContext) error {
	gcc := podgc.New(cc.InformerFactory.Core().V1().Pods(), cc.InformerFactory.Core().V1().Nodes(), cc.Client,
		cc.Options.TerminatedPodGCThreshold, cc.Clock)
	go gcc.Run(ctx)
	return nil
}

// startResourceQuotaController runs the resource quota controller, which finds the
// resources it counts through discovery. Mirrors startResourceQuotaController.
func startResourceQuotaController(ctx context.Context, cc ControllerContext) error {
	rq, err := resourcequota.New(cc.InformerFactory, cc.Client, cc.Client.Discovery(), cc.Options.ResourceQuotaSyncPeriod)
	if err != nil {
		return err
	}
	go rq.Run(ctx, cc.Options.ConcurrentResourceQuotaSyncs)
	return nil
}
