package process

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
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

// wait waits for the leader to exit, kills what is left of its group, waits
// for its output to be copied (at most outputDrainTimeout), and returns the
// exit code — 128+signal for a leader killed by a signal, as runc reports —
// and when the leader exited.
func (g *group) wait() (exitCode int32, finishedAt time.Time) {
	_ = g.cmd.Wait()
	finishedAt = time.Now()
	exitCode = exitCodeOf(g.cmd.ProcessState)
	_ = g.signal(syscall.SIGKILL)

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
