package controllermanager

import (
	"context"

	"skiff.dev/services/controllermanager/volume/persistentvolume"
	"skiff.dev/services/controllermanager/volume/pvcprotection"
	"skiff.dev/services/controllermanager/volume/pvprotection"
)

// The start functions of the volume controllers (kube's
// cmd/kube-controller-manager/app/core.go).

// Kube's names of the volume controllers.
const (
	PersistentVolumeBinderController          = persistentvolume.Name
	PersistentVolumeClaimProtectionController = pvcprotection.Name
	PersistentVolumeProtectionController      = pvprotection.Name
)

// startPersistentVolumeBinderController runs the PV binder, its events from
// persistentvolume-controller. Mirrors startPersistentVolumeBinderController.
func startPersistentVolumeBinderController(ctx context.Context, cc ControllerContext) error {
	go persistentvolume.New(cc.InformerFactory, cc.Client, cc.Events.ForComponent(persistentvolume.EventSource)).Run(ctx)
	return nil
}

// startPVCProtectionController runs the PVC protection controller with one worker, as
// kube's. Mirrors startPVCProtectionController.
func startPVCProtectionController(ctx context.Context, cc ControllerContext) error {
	go pvcprotection.New(cc.InformerFactory, cc.Client).Run(ctx, 1)
	return nil
}

// startPVProtectionController runs the PV protection controller with one worker, as
// kube's. Mirrors startPVProtectionController.
func startPVProtectionController(ctx context.Context, cc ControllerContext) error {
	go pvprotection.New(cc.InformerFactory, cc.Client).Run(ctx, 1)
	return nil
}
