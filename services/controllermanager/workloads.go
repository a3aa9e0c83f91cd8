package controllermanager

import (
	"context"

	"skiff.dev/services/controllermanager/deployment"
	"skiff.dev/services/controllermanager/garbagecollector"
	"skiff.dev/services/controllermanager/job"
	"skiff.dev/services/controllermanager/replicaset"
	"skiff.dev/services/controllermanager/ttlafterfinished"
)

// The start functions of the workload controllers and the garbage collector (kube's
// cmd/kube-controller-manager/app apps.go, batch.go and core.go).

// TTLAfterFinishedController is kube's name for the controller that deletes finished
// Jobs after ttlSecondsAfterFinished.
const TTLAfterFinishedController = "ttl-after-finished-controller"

// ttlAfterFinishedWorkers is kube's default --concurrent-ttl-after-finished-syncs.
const ttlAfterFinishedWorkers = 5

func startReplicaSetController(ctx context.Context, cc ControllerContext) error {
	go replicaset.New(cc.InformerFactory, cc.Client, cc.Recorder).Run(ctx, cc.Options.ConcurrentRSSyncs)
	return nil
}

func startDeploymentController(ctx context.Context, cc ControllerContext) error {
	go deployment.New(cc.InformerFactory, cc.Client, cc.Recorder).Run(ctx, cc.Options.ConcurrentDeploymentSyncs)
	return nil
}

func startJobController(ctx context.Context, cc ControllerContext) error {
	go job.New(cc.InformerFactory, cc.Client, cc.Recorder).Run(ctx, cc.Options.ConcurrentJobSyncs)
	return nil
}

func startTTLAfterFinishedController(ctx context.Context, cc ControllerContext) error {
	go ttlafterfinished.New(cc.InformerFactory, cc.Client, cc.Recorder).Run(ctx, ttlAfterFinishedWorkers)
	return nil
}

func startGarbageCollectorController(ctx context.Context, cc ControllerContext) error {
	go garbagecollector.New(cc.InformerFactory, cc.Client, cc.Recorder).Run(ctx, cc.Options.ConcurrentGCSyncs)
	return nil
}
