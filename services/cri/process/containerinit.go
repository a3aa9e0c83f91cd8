package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// initArg0 is the argv[0] with which the runtime's binary re-executes itself
// as a container init, as runc re-executes itself as "runc init".
const initArg0 = "skiff-container-init"

// Files the container init inherits beside stdio.
const (
	initConfigFD = 3 // the initConfig, JSON (a memfd, read to its end)
	initStatusFD = 4 // optional: where a failure before exec is written; EOF means exec succeeded
)

// Exit codes of an init that failed before exec and has no status file, as a
// shell reports a command it could not run.
const (
	exitCannotExecute = 126
	exitNotFound      = 127
)

// initConfig is everything the container init does between its start and
// the exec of the container's command (or an exec's command).
type initConfig struct {
	// Probe makes the init only try what it was asked (unshare) and exit 0.
	Probe bool `json:"probe,omitempty"`
	// Argv is the command; Argv[0] is looked up in PATH of Env inside the
	// container's mount namespace.
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// Dir is the working directory if it is an existing directory inside the
	// container's mount namespace, else FallbackDir.
	Dir         string `json:"dir,omitempty"`
	FallbackDir string `json:"fallbackDir"`
	// Cgroups lists the cgroup directories (one per hierarchy) the
	// init joins before anything else, so the command never runs outside
	// its limits.
	Cgroups []string `json:"cgroups,omitempty"`
	// JoinMountNS is /proc/<pid>/ns/mnt of a running container to enter
	// (CRI Exec and ExecSync).
	JoinMountNS string `json:"joinMountNS,omitempty"`
	// NewMountNS makes the init unshare a mount namespace (slave to the
	// host's, so nothing propagates back) and perform Mounts in it.
	NewMountNS bool `json:"newMountNS,omitempty"`
	// StagingDir is an empty directory owned by the runtime where shadow
	// directories are assembled before they are moved into place.
	StagingDir string      `json:"stagingDir,omitempty"`
	Mounts     []initMount `json:"mounts,omitempty"`
	// MaskedPaths and ReadonlyPaths are hidden and made read-only after
	// Mounts (CRI masked_paths, readonly_paths).
	MaskedPaths   []string  `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string  `json:"readonlyPaths,omitempty"`
	User          *initUser `json:"user,omitempty"`
	NoNewPrivs    bool      `json:"noNewPrivs,omitempty"`
	OOMScore      *int64    `json:"oomScoreAdj,omitempty"`
	// Status says initStatusFD is open.
	Status bool `json:"status,omitempty"`
}

// initUser is the identity the command runs as.
type initUser struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
}

func init() {
	if len(os.Args) > 0 && os.Args[0] == initArg0 {
		containerInit()
	}
}

// containerInit runs the init and never returns: it execs the command or
// exits.
func containerInit() {
	// Namespaces and credentials belong to the thread: everything below,
	// up to the exec, must happen on this one.
	runtime.LockOSThread()
	status := os.Stderr
	cfg, err := readInitConfig()
	if err == nil && cfg.Status {
		// Closed by the exec: its end of file tells the runtime the
		// command runs.
		unix.CloseOnExec(initStatusFD)
		status = os.NewFile(initStatusFD, "status")
	}
	if err == nil {
		err = cfg.run()
	}
	// Only failures reach this point.
	fmt.Fprintln(status, err)
	code := exitCannotExecute
	if errors.Is(err, errNotFound) {
		code = exitNotFound
	}
	os.Exit(code)
}

func readInitConfig() (*initConfig, error) {
	f := os.NewFile(initConfigFD, "config")
	defer f.Close()
	var cfg initConfig
	if err := json.NewDecoder(f).Decode(&cfg); err != nil {
		return nil, fmt.Errorf("container init: read config: %w", err)
	}
	return &cfg, nil
}

// run prepares the process and execs the command; it returns only an error.
func (cfg *initConfig) run() error {
	for _, dir := range cfg.Cgroups {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	if cfg.JoinMountNS != "" {
		// setns into a mount namespace needs a thread that shares no
		// filesystem attributes (root, cwd) with others.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare filesystem attributes: %w", err)
		}
		fd, err := unix.Open(cfg.JoinMountNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("enter the container's mount namespace: %w", err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNS)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("enter the container's mount namespace: %w", err)
		}
	}
	if cfg.NewMountNS {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare mount namespace: %w", err)
		}
		// Slave: the host's later mounts still appear in the container,
		// but nothing mounted here reaches the host.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("make the mount namespace a slave of the host's: %w", err)
		}
		if cfg.Probe {
			os.Exit(0)
		}
		if err := setupMounts(cfg.StagingDir, cfg.Mounts); err != nil {
			return err
		}
		if err := maskPaths(cfg.MaskedPaths, cfg.ReadonlyPaths); err != nil {
			return err
		}
	}
	if cfg.Probe {
		os.Exit(0)
	}
	if cfg.OOMScore != nil {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.FormatInt(*cfg.OOMScore, 10)), 0); err != nil {
			return fmt.Errorf("set oom_score_adj: %w", err)
		}
	}
	dir := cfg.FallbackDir
	if filepath.IsAbs(cfg.Dir) {
		if fi, err := os.Stat(cfg.Dir); err == nil && fi.IsDir() {
			dir = cfg.Dir
		}
	}
	path, err := lookPath(cfg.Argv[0], lookupEnv(cfg.Env, "PATH"), dir)
	if err != nil {
		return err
	}
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir %s: %w", dir, err)
	}
	if u := cfg.User; u != nil {
		if err := setUser(u); err != nil {
			return err
		}
	}
	if cfg.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	if err := unix.Exec(path, cfg.Argv, cfg.Env); err != nil {
		return fmt.Errorf("exec %q: %w", cfg.Argv[0], err)
	}
	return nil
}

// setUser switches this thread, which is about to exec, to u: the raw
// syscalls change only the calling thread's credentials, which is all the
// exec keeps. The parent-death signal is cleared by the change and set again.
func setUser(u *initUser) error {
	groups := u.Groups
	var gp *uint32
	if len(groups) > 0 {
		gp = &groups[0]
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(gp)), 0); errno != 0 {
		return fmt.Errorf("setgroups %v: %w", groups, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(u.GID), uintptr(u.GID), uintptr(u.GID)); errno != 0 {
		return fmt.Errorf("setgid %d: %w", u.GID, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(u.UID), uintptr(u.UID), uintptr(u.UID)); errno != 0 {
		return fmt.Errorf("setuid %d: %w", u.UID, errno)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("set parent-death signal: %w", err)
	}
	return nil
}
