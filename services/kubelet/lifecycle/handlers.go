// Package lifecycle runs containers' lifecycle hooks (postStart after a
// container starts, preStop before it is stopped): exec in the container
// through CRI ExecSync, httpGet against the pod, or sleep. Mirrors kubelet's
// pkg/kubelet/lifecycle HandlerRunner.
package lifecycle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/prober/httpget"
)

// PodStatusProvider reads a pod's runtime status; an httpGet hook without a
// host goes to the pod's IP found there. The kuberuntime Manager implements
// it.
type PodStatusProvider interface {
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
}

// HandlerRunner runs lifecycle handlers. Safe for concurrent use. Mirrors
// lifecycle.handlerRunner.
type HandlerRunner struct {
	runner            container.CommandRunner
	podStatusProvider PodStatusProvider
	http              *http.Client
	userAgent         string
}

// NewHandlerRunner returns a HandlerRunner executing commands with runner
// and finding pod IPs with podStatusProvider; kubeletVersion (e.g.
// "v1.32.4") makes httpGet hooks' User-Agent "kube-lifecycle/1.32".
func NewHandlerRunner(runner container.CommandRunner, podStatusProvider PodStatusProvider, kubeletVersion string) *HandlerRunner {
	return &HandlerRunner{
		runner:            runner,
		podStatusProvider: podStatusProvider,
		http: &http.Client{Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kube's hooks do not verify.
		}},
		userAgent: httpget.UserAgent("kube-lifecycle", kubeletVersion),
	}
}

// Run runs handler for container c (id) of pod until it finishes or ctx
// ends. On failure it returns the message kube puts in the
// FailedPostStartHook event and the error: an exec command's non-zero exit
// or failure to run, an httpGet request that got no response (the status
// code is not checked, as in kube), a sleep cut short by ctx. Mirrors
// handlerRunner.Run.
func (hr *HandlerRunner) Run(ctx context.Context, id container.ContainerID, pod *v1.Pod, c *v1.Container, handler *v1.LifecycleHandler) (string, error) {
	switch {
	case handler.Exec != nil:
		out, err := hr.runner.RunInContainer(ctx, id, handler.Exec.Command, 0)
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				handler.Exec.Command, c.Name, formatPod(pod), err, string(out)), err
		}
		return "", nil
	case handler.HTTPGet != nil:
		if err := hr.runHTTPHandler(ctx, pod, c, handler.HTTPGet); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				handler.HTTPGet.Path, c.Name, formatPod(pod), err), err
		}
		return "", nil
	case handler.Sleep != nil:
		if err := runSleepHandler(ctx, handler.Sleep.Seconds); err != nil {
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v",
				handler.Sleep.Seconds, c.Name, formatPod(pod), err), err
		}
		return "", nil
	}
	err := fmt.Errorf("invalid handler: %v", handler)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

// runHTTPHandler sends the hook's GET, to the pod's IP unless it names a
// host, and discards the response.
func (hr *HandlerRunner) runHTTPHandler(ctx context.Context, pod *v1.Pod, c *v1.Container, action *v1.HTTPGetAction) error {
	host := action.Host
	if host == "" {
		status, err := hr.podStatusProvider.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			return fmt.Errorf("unable to get pod info, event handlers may be invalid: %w", err)
		}
		if len(status.IPs) == 0 {
			return fmt.Errorf("failed to find networking container: %v", status)
		}
		host = status.IPs[0]
	}
	req, err := httpget.NewRequest(ctx, action, c, host, hr.userAgent)
	if err != nil {
		return err
	}
	resp, err := hr.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}

// runSleepHandler waits seconds, or fails when ctx ends first (the container
// is being stopped sooner).
func runSleepHandler(ctx context.Context, seconds int64) error {
	if seconds <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(seconds) * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errors.New("container terminated before sleep hook finished")
	case <-t.C:
		return nil
	}
}

// formatPod names a pod as kubelet's messages do: "name_namespace(uid)".
func formatPod(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
