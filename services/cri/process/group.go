package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// outputDrainTimeout bounds how long output is still read after a group's
// leader exited and the group was killed; only a process that left the group
// (setsid) could keep the pipes open longer.
const outputDrainTimeout = 2 * time.Second

// group is a command running as the leader of its own process group, with
// its stdout and stderr read through pipes.
type group struct {
	cmd     *exec.Cmd
	pgid    int
	readers []*os.File
	copies  sync.WaitGroup
}

// startGroup starts cmd in a new process group and feeds its stdout and
// stderr to the given copy functions, each in its own goroutine. The caller
// must call wait.
func startGroup(cmd *exec.Cmd, copyStdout, copyStderr func(io.Reader)) (*group, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// Pdeathsig: the runtime's state is in memory, so processes outliving it
	// could never be stopped through CRI again.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	g := &group{cmd: cmd, pgid: cmd.Process.Pid, readers: []*os.File{outR, errR}}
	g.copies.Add(2)
	go func() { defer g.copies.Done(); copyStdout(outR) }()
	go func() { defer g.copies.Done(); copyStderr(errR) }()
	return g, nil
}

// signal sends sig to every process in the group. A group that is already
// gone is not an error.
func (g *group) signal(sig syscall.Signal) error {
	err := syscall.Kill(-g.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// wait waits for the leader to exit, kills what is left of its group and
// calls killRest (if not nil) to kill what left the group, waits for its
// output to be copied (at most outputDrainTimeout), and returns the exit
// code — 128+signal for a leader killed by a signal, as runc reports — and
// when the leader exited.
func (g *group) wait(killRest func()) (exitCode int32, finishedAt time.Time) {
	_ = g.cmd.Wait()
	finishedAt = time.Now()
	exitCode = exitCodeOf(g.cmd.ProcessState)
	_ = g.signal(syscall.SIGKILL)
	if killRest != nil {
		killRest()
	}

	drained := make(chan struct{})
	go func() { g.copies.Wait(); close(drained) }()
	timer := time.NewTimer(outputDrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		for _, r := range g.readers {
			r.Close() // unblocks the copiers
		}
		<-drained
	}
	for _, r := range g.readers {
		r.Close()
	}
	return exitCode, finishedAt
}

func exitCodeOf(ps *os.ProcessState) int32 {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ps.ExitCode())
}

// initCommand returns the command that re-executes the runtime's binary as
// the container init with cfg, and the file holding cfg, to close once the
// command has started.
func initCommand(cfg *initConfig) (*exec.Cmd, *os.File, error) {
	fd, err := unix.MemfdCreate("skiff-container-init", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("container init config: %w", err)
	}
	f := os.NewFile(uintptr(fd), "container-init-config")
	if err := json.NewEncoder(f).Encode(cfg); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("container init config: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("container init config: %w", err)
	}
	// /proc/self/exe is this binary even if its file was replaced since.
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{initArg0}, Env: []string{}, ExtraFiles: []*os.File{f}}
	return cmd, f, nil
}

// startInit starts the container init with cfg as the leader of a new
// process group (see startGroup) and returns once it has exec'd the
// command. A failure before the exec is returned as an error, with the
// group reaped; killRest is called then as after any exit. ctx's end
// abandons the start (the group is killed).
func startInit(ctx context.Context, cfg *initConfig, copyStdout, copyStderr func(io.Reader), killRest func()) (*group, error) {
	cfg.Status = true
	cmd, cfgFile, err := initCommand(cfg)
	if err != nil {
		return nil, err
	}
	defer cfgFile.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	cmd.ExtraFiles = append(cmd.ExtraFiles, statusW)
	g, err := startGroup(cmd, copyStdout, copyStderr)
	statusW.Close()
	if err != nil {
		return nil, err
	}
	read := make(chan []byte, 1)
	go func() {
		msg, _ := io.ReadAll(io.LimitReader(statusR, 64<<10))
		read <- msg
	}()
	var msg []byte
	select {
	case msg = <-read:
	case <-ctx.Done():
		_ = g.signal(syscall.SIGKILL)
		g.wait(killRest)
		<-read
		return nil, ctx.Err()
	}
	if len(msg) > 0 {
		g.wait(killRest)
		return nil, errors.New(string(bytes.TrimSpace(msg)))
	}
	return g, nil
}
