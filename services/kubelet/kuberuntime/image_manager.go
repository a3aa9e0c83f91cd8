package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/credentialprovider"
	"skiff.dev/services/kubelet/events"
)

// imageManager makes sure a container's image is present before the
// container is created. Mirrors kubelet's pkg/kubelet/images imageManager.
type imageManager struct {
	m       *Manager
	backOff *flowcontrol.Backoff
}

// EnsureImageExists returns the runtime's reference for the container's
// image, pulling it when the pull policy requires: Always pulls every time,
// IfNotPresent and Never look with ImageStatus first (a runtime such as
// containerd 1.6 contacts the registry on every PullImage, even for a present
// image). On failure it returns a message for the pod status and one of
// container.ErrInvalidImageName, ErrImageNeverPull, ErrImagePullBackOff or
// ErrImagePull.
func (im *imageManager) EnsureImageExists(ctx context.Context, pod *v1.Pod, c *v1.Container, sandboxConfig *runtimeapi.PodSandboxConfig) (imageRef, message string, err error) {
	if c.Image == "" {
		return "", fmt.Sprintf("Failed to apply default image tag %q: empty image", c.Image), container.ErrInvalidImageName
	}
	image := applyDefaultImageTag(c.Image)
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image}

	policy := c.ImagePullPolicy
	if policy == "" {
		policy = defaultPullPolicy(image)
	}
	if policy != v1.PullAlways {
		ref, err := im.imageRef(ctx, spec)
		if err != nil {
			return "", fmt.Sprintf("Failed to inspect image %q: %v", c.Image, grpcMessage(err)), container.ErrImagePull
		}
		if ref != "" {
			im.m.recordContainerEvent(pod, c, v1.EventTypeNormal, events.PulledImage, "Container image %q already present on machine", c.Image)
			return ref, "", nil
		}
		if policy == v1.PullNever {
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
			im.m.recordContainerEvent(pod, c, v1.EventTypeWarning, events.ErrImageNeverPullPolicy, "%s", msg)
			return "", msg, container.ErrImageNeverPull
		}
	}

	backOffKey := string(pod.UID) + "_" + c.Image
	if im.backOff.IsInBackOffSinceUpdate(backOffKey, im.backOff.Clock.Now()) {
		im.m.recordContainerEvent(pod, c, v1.EventTypeNormal, events.BackOffPullImage, "Back-off pulling image %q", c.Image)
		return "", fmt.Sprintf("Back-off pulling image %q", c.Image), container.ErrImagePullBackOff
	}
	im.m.logger.Info("pulling image", "image", c.Image, "pod", pod.Namespace+"/"+pod.Name)
	im.m.recordContainerEvent(pod, c, v1.EventTypeNormal, events.PullingImage, "Pulling image %q", c.Image)
	pullStart := time.Now()
	// Pulls take as long as the image is big; only ctx bounds them, as in
	// kubelet (which has no pull deadline by default).
	resp, err := im.pull(ctx, pod, spec, sandboxConfig)
	if err != nil {
		im.backOff.Next(backOffKey, im.backOff.Clock.Now())
		msg := fmt.Sprintf("Failed to pull image %q: %v", c.Image, grpcMessage(err))
		im.m.recordContainerEvent(pod, c, v1.EventTypeWarning, events.FailedToPullImage, "%s", msg)
		return "", msg, container.ErrImagePull
	}
	im.m.recordContainerEvent(pod, c, v1.EventTypeNormal, events.PulledImage, "Successfully pulled image %q in %v", c.Image, time.Since(pullStart).Round(time.Millisecond))
	im.backOff.GC()
	ref := resp.GetImageRef()
	if ref == "" {
		ref = image
	}
	return ref, "", nil
}

// pull pulls spec with the credentials the pod's imagePullSecrets hold for
// its registry, trying each matching one in turn (most specific first) as
// kubelet does, and anonymously when none matches.
func (im *imageManager) pull(ctx context.Context, pod *v1.Pod, spec *runtimeapi.ImageSpec, sandboxConfig *runtimeapi.PodSandboxConfig) (*runtimeapi.PullImageResponse, error) {
	var auths []*runtimeapi.AuthConfig
	if len(pod.Spec.ImagePullSecrets) > 0 && im.m.pullSecrets != nil {
		secrets := im.m.pullSecrets(ctx, pod)
		keyring, err := credentialprovider.MakeKeyring(secrets)
		if err != nil {
			return nil, err
		}
		auths = keyring.Lookup(spec.GetImage())
	}
	if len(auths) == 0 {
		return im.m.imageService.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, SandboxConfig: sandboxConfig})
	}
	var errs []error
	for _, auth := range auths {
		resp, err := im.m.imageService.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: auth, SandboxConfig: sandboxConfig})
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// imageRef returns the runtime's id of the image, "" if it is not present.
func (im *imageManager) imageRef(ctx context.Context, spec *runtimeapi.ImageSpec) (string, error) {
	cctx, cancel := im.m.callCtx(ctx)
	defer cancel()
	resp, err := im.m.imageService.ImageStatus(cctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if resp.GetImage() == nil {
		return "", nil
	}
	if id := resp.GetImage().GetId(); id != "" {
		return id, nil
	}
	return spec.GetImage(), nil
}

// applyDefaultImageTag adds ":latest" to an image named without tag or digest,
// as kubelet does before talking to the runtime.
func applyDefaultImageTag(image string) string {
	if strings.Contains(image, "@") {
		return image
	}
	last := image[strings.LastIndex(image, "/")+1:]
	if strings.Contains(last, ":") {
		return image
	}
	return image + ":latest"
}

// defaultPullPolicy is the API server's default: Always for ":latest",
// IfNotPresent otherwise.
func defaultPullPolicy(image string) v1.PullPolicy {
	if strings.HasSuffix(image, ":latest") {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}
