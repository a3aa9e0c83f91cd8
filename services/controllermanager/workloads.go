package controllermanager

import (
	"context"

	"k8s.io/client-go/dynamic"

	"skiff.dev/services/controllermanager/cronjob"
	"skiff.dev/services/controllermanager/daemon"
	"skiff.dev/services/controllermanager/deployment"
	"skiff.dev/services/controllermanager/garbagecollector"
	"skiff.dev/services/controllermanager/job"
	"skiff.dev/services/controllermanager/replicaset"
	"skiff.dev/services/controllermanager/replicationcontroller"
	"skiff.dev/services/controllermanager/statefulset"
	"skiff.dev/services/controllermanager/ttlafterfinished"
)

// The start functions of the workload controllers and the garbage collector (kube's
// cmd/kube-controller-manager/app apps.go, batch.go and core.go).

// TTLAfterFinishedController is kube's name for the controller that deletes finished
// Jobs after ttlSecondsAfterFinished.
const TTLAfterFinishedController = "ttl-after-finished-controller"

// CronJobController is kube's name for the CronJob controller.
const CronJobController = "cronjob-controller"

// ttlAfterFinishedWorkers, cronJobWorkers and statefulSetWorkers are kube's defaults of
// --concurrent-ttl-after-finished-syncs, --concurrent-cron-job-syncs and
// --concurrent-statefulset-syncs.
const (
	ttlAfterFinishedWorkers = 5
	cronJobWorkers          = 5
	statefulSetWorkers      = 5
)

func startReplicaSetController(ctx context.Context, cc ControllerContext) error {
	go replicaset.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent("replicaset-controller")).Run(ctx, cc.Options.ConcurrentRSSyncs)
	return nil
}

// startReplicationController runs the ReplicaSet controller over ReplicationControllers,
// reporting as kube's replication-controller. Mirrors startReplicationController.
func startReplicationController(ctx context.Context, cc ControllerContext) error {
	go replicationcontroller.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent(replicationcontroller.EventSource)).Run(ctx, cc.Options.ConcurrentRCSyncs)
	return nil
}

func startDeploymentController(ctx context.Context, cc ControllerContext) error {
	go deployment.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent("deployment-controller")).Run(ctx, cc.Options.ConcurrentDeploymentSyncs)
	return nil
}

// startStatefulSetController runs the StatefulSet controller. Mirrors
// startStatefulSetController.
func startStatefulSetController(ctx context.Context, cc ControllerContext) error {
	go statefulset.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent(statefulset.Name)).Run(ctx, statefulSetWorkers)
	return nil
}

// startDaemonSetController runs the DaemonSet controller. Mirrors
// startDaemonSetController.
func startDaemonSetController(ctx context.Context, cc ControllerContext) error {
	go daemon.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent(daemon.EventSource)).Run(ctx, cc.Options.ConcurrentDaemonSetSyncs)
	return nil
}

func startJobController(ctx context.Context, cc ControllerContext) error {
	go job.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent("job-controller")).Run(ctx, cc.Options.ConcurrentJobSyncs)
	return nil
}

func startTTLAfterFinishedController(ctx context.Context, cc ControllerContext) error {
	go ttlafterfinished.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent("ttl-after-finished-controller")).Run(ctx, ttlAfterFinishedWorkers)
	return nil
}

func startGarbageCollectorController(ctx context.Context, cc ControllerContext) error {
	gc := garbagecollector.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent("garbage-collector-controller"))
	if cc.RESTConfig != nil {
		// Custom resources, found through discovery, read through the dynamic client.
		dyn, err := dynamic.NewForConfig(cc.RESTConfig)
		if err != nil {
			return err
		}
		gc.WithCustomResources(dyn, cc.Client.Discovery(), 0)
	}
	go gc.Run(ctx, cc.Options.ConcurrentGCSyncs)
	return nil
}

func startCronJobController(ctx context.Context, cc ControllerContext) error {
	c := cronjob.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent("cronjob-controller"))
	c.Clock = cc.Clock
	go c.Run(ctx, cronJobWorkers)
	return nil
}
