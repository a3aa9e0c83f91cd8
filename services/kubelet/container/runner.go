package container

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// CommandRunner runs a command inside a running container and returns its
// output (stdout then stderr). A non-zero exit is an *ExitError; a command
// still running after timeout is ErrCommandTimedOut (timeout 0: no limit but
// ctx's). The kuberuntime Manager implements it with CRI ExecSync; probes and
// lifecycle hooks use it. Mirrors kubecontainer.CommandRunner.
type CommandRunner interface {
	RunInContainer(ctx context.Context, id ContainerID, cmd []string, timeout time.Duration) ([]byte, error)
}

// ExitError is a command that ran and exited non-zero.
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", e.Code)
}

// ErrCommandTimedOut is a command that did not finish within its timeout.
var ErrCommandTimedOut = errors.New("command timed out")
