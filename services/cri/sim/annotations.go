package sim

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Annotations that shape a simulated container. Each is looked up, most
// specific first, in:
//  1. the container config's annotations, under the key itself;
//  2. the sandbox config's annotations (the pod's annotations, as the kubelet
//     passes them) under the key + "." + the container's name, e.g.
//     "sim.skiff.dev/run-time.init-db", so one container of a pod — an init
//     container, say — can behave differently from the others;
//  3. the sandbox config's annotations under the key itself.
//
// An invalid value makes CreateContainer fail with InvalidArgument.
const (
	// AnnotationStartDelay is a Go duration ("2s"): StartContainer takes that
	// long before it returns with the container RUNNING, like a slow process
	// start in a real runtime. The container is CREATED meanwhile; the delay
	// ends early, with the start failing, if the request is cancelled or the
	// container is stopped or removed.
	AnnotationStartDelay = "sim.skiff.dev/start-delay"
	// AnnotationRunTime is a Go duration ("30s"): after running that long the
	// container exits by itself with AnnotationExitCode. Without it a
	// container runs until it is stopped.
	AnnotationRunTime = "sim.skiff.dev/run-time"
	// AnnotationExitCode is the exit code, 0-255 (default 0), of a container
	// that exits by itself after AnnotationRunTime. A stopped container always
	// exits with 0, as a program that handles SIGTERM cleanly would.
	AnnotationExitCode = "sim.skiff.dev/exit-code"
)

// behavior is how a simulated container acts, read from annotations.
type behavior struct {
	startDelay time.Duration
	runTime    time.Duration // 0: until stopped
	exitCode   int32
}

func lookupAnnotation(sandbox *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig, key string) (string, bool) {
	if v, ok := cfg.GetAnnotations()[key]; ok {
		return v, true
	}
	if v, ok := sandbox.GetAnnotations()[key+"."+cfg.GetMetadata().GetName()]; ok {
		return v, true
	}
	v, ok := sandbox.GetAnnotations()[key]
	return v, ok
}

// behaviorOf reads a container's behavior; errors are InvalidArgument.
func behaviorOf(sandbox *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (behavior, error) {
	var b behavior
	for _, d := range []struct {
		key string
		to  *time.Duration
	}{{AnnotationStartDelay, &b.startDelay}, {AnnotationRunTime, &b.runTime}} {
		v, ok := lookupAnnotation(sandbox, cfg, d.key)
		if !ok {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil || dur < 0 {
			return behavior{}, invalid(d.key, v, "want a non-negative Go duration such as 500ms or 2m")
		}
		*d.to = dur
	}
	if v, ok := lookupAnnotation(sandbox, cfg, AnnotationExitCode); ok {
		code, err := strconv.ParseUint(v, 10, 8)
		if err != nil {
			return behavior{}, invalid(AnnotationExitCode, v, "want an integer from 0 to 255")
		}
		b.exitCode = int32(code)
	}
	return b, nil
}

func invalid(key, value, want string) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf("annotation %s=%q: %s", key, value, want))
}
