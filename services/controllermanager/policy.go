package controllermanager

import (
	"context"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	scaleclient "k8s.io/client-go/scale"

	"skiff.dev/services/controllermanager/disruption"
)

// DisruptionController is kube's name for the controller that computes
// PodDisruptionBudgets' status.
const DisruptionController = disruption.Name

// startDisruptionController runs the disruption controller. With a REST config it also
// reads the scale subresource of controllers other than ReplicationControllers,
// ReplicaSets and Deployments, through a discovery-backed RESTMapper, as kube's does.
// Mirrors startDisruptionController (cmd/kube-controller-manager/app/policy.go).
func startDisruptionController(ctx context.Context, cc ControllerContext) error {
	cfg := disruption.Config{
		Factory: cc.InformerFactory, Client: cc.Client, Recorder: cc.Events.ForComponent(disruption.EventSource),
		Discovery: cc.Client.Discovery(),
	}
	if cc.RESTConfig != nil {
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cc.Client.Discovery()))
		scales, err := scaleclient.NewForConfig(cc.RESTConfig, mapper, dynamic.LegacyAPIPathResolverFunc,
			scaleclient.NewDiscoveryScaleKindResolver(cc.Client.Discovery()))
		if err != nil {
			return err
		}
		cfg.Mapper, cfg.Scales = mapper, scales
	}
	go disruption.New(cfg).Run(ctx)
	return nil
}
