package criservice

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/cri/streaming"
)

// Streamer is implemented by a Driver that can run a command in a running
// container on the client's streams (CRI Exec) and forward a port of a
// sandbox (CRI PortForward); without it Exec and PortForward answer
// codes.Unimplemented. Attach needs nothing from the driver: it follows the
// container's log.
type Streamer interface {
	// Exec runs cmd in container c on the given streams until it exits or
	// ctx ends (the client went away: the command is killed). It returns nil
	// for exit code 0 and a k8s.io/utils/exec.ExitError otherwise, as
	// streaming.RunCommand does.
	Exec(ctx context.Context, c *ContainerSpec, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error
	// PortForward connects stream to port in sandbox sandboxID until either
	// side closes or ctx ends.
	PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error
}

// StartStreaming serves the URLs that Exec, Attach and PortForward return on
// addr ("127.0.0.1:0": a random loopback port, as containerd does); Close
// stops it and ends every open stream. Errors: addr cannot be listened on.
func (s *Service) StartStreaming(addr string) error {
	srv, err := streaming.Start(addr, streamRuntime{s})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.streaming = srv
	s.mu.Unlock()
	return nil
}

// streamServer returns the streaming server, or Unimplemented without one.
func (s *Service) streamServer() (*streaming.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streaming == nil {
		return nil, status.Errorf(codes.Unimplemented, "%s serves no streams", s.name)
	}
	return s.streaming, nil
}

// runningContainer returns the spec of a RUNNING container. Errors: NotFound,
// FailedPrecondition when it is not running.
func (s *Service) runningContainer(id string) (*ContainerSpec, *container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "container %q not found", id)
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "container %s is in %s state, not CONTAINER_RUNNING", id, c.state)
	}
	return &c.spec, c, nil
}

// Exec returns a one-use URL that runs req.Cmd in a RUNNING container on the
// client's streams. Errors: Unimplemented when the driver cannot exec or no
// streaming server runs; NotFound; FailedPrecondition when the container is
// not running; InvalidArgument for an empty command, tty with stderr, or no
// stream at all.
func (s *Service) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if _, ok := s.driver.(Streamer); !ok {
		return nil, status.Errorf(codes.Unimplemented, "%s cannot run commands in containers", s.name)
	}
	srv, err := s.streamServer()
	if err != nil {
		return nil, err
	}
	if len(req.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec needs a command")
	}
	if _, _, err := s.runningContainer(req.GetContainerId()); err != nil {
		return nil, err
	}
	return srv.GetExec(req)
}

// Attach returns a one-use URL that streams a RUNNING container's output
// from now on; the built-in runtimes give containers no stdin, so the
// client's stdin is read and dropped. Errors as Exec's.
func (s *Service) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	srv, err := s.streamServer()
	if err != nil {
		return nil, err
	}
	if _, _, err := s.runningContainer(req.GetContainerId()); err != nil {
		return nil, err
	}
	return srv.GetAttach(req)
}

// PortForward returns a one-use URL forwarding connections to ports of a
// READY sandbox. Errors: Unimplemented as Exec's; NotFound;
// FailedPrecondition when the sandbox is not ready.
func (s *Service) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if _, ok := s.driver.(Streamer); !ok {
		return nil, status.Errorf(codes.Unimplemented, "%s cannot forward ports", s.name)
	}
	srv, err := s.streamServer()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	sb, ok := s.sandboxes[req.GetPodSandboxId()]
	state := sb.currentState()
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.GetPodSandboxId())
	}
	if state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is not ready", req.GetPodSandboxId())
	}
	return srv.GetPortForward(req)
}

// streamRuntime is the streaming.Runtime of a Service: it resolves IDs, then
// hands the streams to the driver.
type streamRuntime struct{ s *Service }

func (r streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	spec, _, err := r.s.runningContainer(containerID)
	if err != nil {
		return err
	}
	return r.s.driver.(Streamer).Exec(ctx, spec, cmd, in, out, errOut, tty, resize)
}

func (r streamRuntime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	return r.s.driver.(Streamer).PortForward(ctx, sandboxID, port, stream)
}

// attachPollInterval is how often an attached client's log is checked for
// new lines.
const attachPollInterval = 100 * time.Millisecond

// Attach follows the container's CRI log from its current end, writing each
// line's content to out (stdout lines) or errOut (stderr lines; out as well
// with a tty), until the container stops running or ctx ends.
func (r streamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, _ <-chan streaming.TerminalSize) error {
	_, c, err := r.s.runningContainer(containerID)
	if err != nil {
		return err
	}
	if in != nil {
		go func() { _, _ = io.Copy(io.Discard, in) }()
	}
	r.s.mu.Lock()
	path := c.logPath
	r.s.mu.Unlock()
	if path == "" {
		return status.Errorf(codes.FailedPrecondition, "container %s has no log to attach to", containerID)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	rd := bufio.NewReader(f)
	var partial []byte
	ticker := time.NewTicker(attachPollInterval)
	defer ticker.Stop()
	for {
		for {
			line, err := rd.ReadBytes('\n')
			partial = append(partial, line...)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			entry, perr := criolog.ParseLine(partial)
			partial = partial[:0]
			if perr != nil {
				continue
			}
			w := out
			if entry.Stream == criolog.Stderr && !tty {
				w = errOut
			}
			if w == nil {
				continue
			}
			content := entry.Content
			if entry.Tag == criolog.Full {
				content = append(content, '\n')
			}
			if _, err := w.Write(content); err != nil {
				return nil
			}
		}
		if _, _, err := r.s.runningContainer(containerID); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
