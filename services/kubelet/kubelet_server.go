package kubelet

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/server"
)

// serveKubeletAPI serves the kubelet API (package server) on the listener
// New opened until ctx ends. Mirrors kubelet's ListenAndServeKubeletServer.
func (kl *Kubelet) serveKubeletAPI(ctx context.Context) {
	srv, err := server.New(server.Config{
		Host:    kubeletHost{kl},
		Runtime: runtimeapi.NewRuntimeServiceClient(kl.conn),
		Logger:  kl.logger,
	})
	if err != nil {
		kl.serverListener.Close()
		kl.logger.Error("kubelet API not served", "err", err)
		return
	}
	kl.logger.Info("serving the kubelet API", "addr", kl.serverListener.Addr().String())
	if err := srv.Serve(ctx, kl.serverListener, kl.serverTLS); err != nil {
		kl.logger.Error("kubelet API stopped", "err", err)
	}
}

// kubeletHost is the server.HostInterface of a Kubelet.
type kubeletHost struct{ kl *Kubelet }

// GetPodByName returns a pod the kubelet knows (bound to this node).
func (h kubeletHost) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	return h.kl.podManager.GetPodByName(namespace, name)
}

// GetPodStatus is the status manager's latest status of pod uid.
func (h kubeletHost) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	return h.kl.statusManager.GetPodStatus(uid)
}

// Healthz is nil while the PLEG relists.
func (h kubeletHost) Healthz() error {
	if ok, err := h.kl.pleg.Healthy(); !ok {
		return fmt.Errorf("pleg: %w", err)
	}
	return nil
}
