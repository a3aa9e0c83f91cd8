package process

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultCgroupRoot is where a sandbox without linux.cgroup_parent gets its
// pod cgroup: <defaultCgroupRoot>/pod<sandbox ID>, in every hierarchy.
const defaultCgroupRoot = "/skiff/kubepods"

// cgroupsConfig decides how containers get cgroups: through the v1
// hierarchies (also on a hybrid host, as runc does), or the unified v2
// hierarchy, with the cgroupfs layout the kubelet's cgroupfs driver uses:
// <cgroup_parent>/<container ID>.
type cgroupsConfig struct {
	v2 bool
	// hugetlb says the hugetlb controller is there.
	hugetlb bool
	// unusable says why no cgroup can be made (nil: they can).
	unusable error
}

// probeCgroups finds out whether cgroups can be made here by making (and
// removing) a cgroup under the runtime's root, which is kept: it is shared by
// every runtime on the host, and its existence proves nothing.
func probeCgroups() *cgroupsConfig {
	c := &cgroupsConfig{v2: cgroups.IsCgroup2UnifiedMode()}
	if c.v2 {
		data, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		c.hugetlb = slices.Contains(strings.Fields(string(data)), "hugetlb")
	} else {
		_, err := cgroups.FindCgroupMountpoint("", "hugetlb")
		c.hugetlb = err == nil
	}
	m, err := c.manager(path.Join(defaultCgroupRoot, fmt.Sprintf("probe-%d-%d", os.Getpid(), time.Now().UnixNano())), nil)
	if err == nil {
		if err = m.Apply(-1); err == nil {
			err = m.Destroy()
		}
	}
	if err != nil {
		c.unusable = fmt.Errorf("no writable cgroup hierarchy: %w", err)
	}
	return c
}

// manager returns the library's cgroupfs manager for the cgroup at path
// (relative to each hierarchy's root) with resources r (nil: none).
func (c *cgroupsConfig) manager(path string, r *cgroups.Resources) (cgroups.Manager, error) {
	if r == nil {
		r = &cgroups.Resources{}
	}
	// Devices are the host's: the process runtime runs host processes.
	r.SkipDevices = true
	cg := &cgroups.Cgroup{Path: path, Resources: r}
	if c.v2 {
		return fs2.NewManager(cg, "")
	}
	return fs.NewManager(cg, nil)
}

// podCgroup is the cgroup of a sandbox's containers: its cgroup_parent as the
// kubelet's cgroupfs driver names it ("/kubepods/burstable/pod<uid>"), or one
// under defaultCgroupRoot. Errors: a systemd slice name, or a path leaving
// the hierarchy.
func podCgroup(sandboxID string, sb *runtimeapi.PodSandboxConfig) (string, error) {
	parent := sb.GetLinux().GetCgroupParent()
	if parent == "" {
		return path.Join(defaultCgroupRoot, "pod"+sandboxID), nil
	}
	if strings.HasSuffix(parent, ".slice") {
		return "", fmt.Errorf("cgroup parent %q is a systemd slice: the process runtime manages cgroups through cgroupfs, "+
			"so run the kubelet with the cgroupfs cgroup driver", parent)
	}
	p := path.Clean("/" + parent)
	if p == "/" || slices.Contains(strings.Split(parent, "/"), "..") {
		return "", fmt.Errorf("cgroup parent %q is not a cgroup below the hierarchy's root", parent)
	}
	return p, nil
}

// needsCgroup reports whether r sets a limit only a cgroup enforces. CPU
// shares (the kubelet's translation of a CPU request) are a weight under
// contention, not a limit: without cgroups the container runs with the
// host's default weight.
func needsCgroup(r *runtimeapi.LinuxContainerResources) bool {
	return r.GetMemoryLimitInBytes() > 0 || r.GetCpuQuota() > 0 ||
		r.GetCpusetCpus() != "" || r.GetCpusetMems() != "" || r.GetMemorySwapLimitInBytes() > 0 ||
		len(r.GetHugepageLimits()) > 0 || len(r.GetUnified()) > 0
}

// resources converts CRI resources to the library's, as containerd's
// cgroupfs path does. A memory limit without a swap limit also limits swap
// (memory+swap = memory), the kubelet's NoSwap default. Errors: a field this
// host cannot enforce.
func (c *cgroupsConfig) resources(r *runtimeapi.LinuxContainerResources) (*cgroups.Resources, error) {
	res := &cgroups.Resources{}
	if r == nil {
		return res, nil
	}
	if s := r.GetCpuShares(); s > 0 {
		res.CpuShares = uint64(s)
		if c.v2 {
			res.CpuWeight = cgroups.ConvertCPUSharesToCgroupV2Value(uint64(s))
		}
	}
	if r.GetCpuQuota() > 0 {
		res.CpuQuota = r.GetCpuQuota()
		res.CpuPeriod = uint64(r.GetCpuPeriod())
	}
	res.CpusetCpus, res.CpusetMems = r.GetCpusetCpus(), r.GetCpusetMems()
	if m := r.GetMemoryLimitInBytes(); m > 0 {
		res.Memory = m
		swap := r.GetMemorySwapLimitInBytes()
		if swap == 0 {
			swap = m
		}
		if c.swapAccounted() {
			res.MemorySwap = swap
		} else if swap != m {
			return nil, fmt.Errorf("memory_swap_limit_in_bytes %d: this host does not account swap in cgroups", swap)
		}
	}
	for _, h := range r.GetHugepageLimits() {
		if !c.hugetlb {
			// Without the controller a limit holds only where no page of
			// that size can be had at all.
			if hugepagesOnHost(h.GetPageSize()) {
				return nil, fmt.Errorf("hugepage limit for %s pages: this host has such pages but no hugetlb cgroup controller", h.GetPageSize())
			}
			continue
		}
		res.HugetlbLimit = append(res.HugetlbLimit, &cgroups.HugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	if u := r.GetUnified(); len(u) > 0 {
		if !c.v2 {
			return nil, fmt.Errorf("unified cgroup settings %v need a cgroup v2 host; this one uses cgroup v1", u)
		}
		res.Unified = u
	}
	return res, nil
}

// hugepagesOnHost reports whether pages of pageSize ("2MB", "1GB", as the
// kubelet names them) can be allocated here: some are reserved or may be
// overcommitted.
func hugepagesOnHost(pageSize string) bool {
	kb, ok := pageSizeKB(pageSize)
	if !ok {
		return true // unknown: assume there are
	}
	dir := fmt.Sprintf("/sys/kernel/mm/hugepages/hugepages-%dkB", kb)
	for _, f := range []string{"nr_hugepages", "nr_overcommit_hugepages"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil || n > 0 {
			return true
		}
	}
	return false
}

// pageSizeKB parses a hugepage size such as "2MB" or "1GB" into KiB.
func pageSizeKB(s string) (uint64, bool) {
	for unit, kb := range map[string]uint64{"KB": 1, "MB": 1 << 10, "GB": 1 << 20} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.ParseUint(n, 10, 64)
			return v * kb, err == nil
		}
	}
	return 0, false
}

// swapAccounted reports whether the memory controller can limit swap.
func (c *cgroupsConfig) swapAccounted() bool {
	f := "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"
	if c.v2 {
		f = "/sys/fs/cgroup/memory.swap.max"
		if _, err := os.Stat(f); err != nil {
			// The root has no swap.max; any child shows it when swap is accounted.
			f = filepath.Join("/sys/fs/cgroup", defaultCgroupRoot, "memory.swap.max")
		}
	}
	_, err := os.Stat(f)
	return err == nil
}

// containerCgroup is a running container's cgroup.
type containerCgroup struct {
	m cgroups.Manager
}

// newContainerCgroup makes the cgroup <pod>/<id> with r applied.
func (c *cgroupsConfig) newContainerCgroup(pod, id string, r *runtimeapi.LinuxContainerResources) (*containerCgroup, error) {
	res, err := c.resources(r)
	if err != nil {
		return nil, err
	}
	m, err := c.manager(path.Join(pod, id), res)
	if err != nil {
		return nil, err
	}
	if err := m.Apply(-1); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if err := m.Set(res); err != nil {
		_ = m.Destroy()
		return nil, fmt.Errorf("apply resources: %w", err)
	}
	return &containerCgroup{m: m}, nil
}

// dirs returns the cgroup's directory in each hierarchy it was made in
// (not devices: the container keeps the host's), for the init to join.
func (cg *containerCgroup) dirs() []string {
	var out []string
	for _, p := range cg.m.GetPaths() {
		if _, err := os.Stat(p); p != "" && err == nil && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// update applies new resources to the running container.
func (c *cgroupsConfig) update(cg *containerCgroup, r *runtimeapi.LinuxContainerResources) error {
	res, err := c.resources(r)
	if err != nil {
		return err
	}
	res.SkipDevices = true
	return cg.m.Set(res)
}

// killAll sends SIGKILL to every process in the cgroup until none is left
// (a process forking meanwhile is caught in the next round), waiting at most
// timeout.
func (cg *containerCgroup) killAll(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := cg.m.GetAllPids()
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v are still in cgroup %s", pids, cg.m.Path("memory"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// oomKilled reports whether the kernel's OOM killer killed a process of the
// cgroup (memory.oom_control oom_kill in v1, memory.events oom_kill in v2).
func (cg *containerCgroup) oomKilled() bool {
	n, err := cg.m.OOMKillCount()
	return err == nil && n > 0
}

// destroy removes the cgroup from every hierarchy.
func (cg *containerCgroup) destroy() error { return cg.m.Destroy() }

// removePodCgroup removes a sandbox's cgroup from every hierarchy where it
// is empty. One still in use — by another sandbox of the same pod (a new
// attempt), or by the kubelet — is left, as is one that does not exist.
func (c *cgroupsConfig) removePodCgroup(pod string) error {
	m, err := c.manager(pod, nil)
	if err != nil {
		return err
	}
	for _, dir := range m.GetPaths() {
		switch err := unix.Rmdir(dir); {
		case err == nil, errors.Is(err, unix.ENOENT), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOTEMPTY):
		default:
			return fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	return nil
}

// usage returns the cgroup's CPU and memory usage as the kubelet's cadvisor
// reads them: cumulative CPU time, and a working set of usage less inactive
// file pages.
func (cg *containerCgroup) usage() (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage, error) {
	st, err := cg.m.Stats(&cgroups.StatsOptions{Controllers: cgroups.CPU | cgroups.Memory})
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().UnixNano()
	cpu := &runtimeapi.CpuUsage{
		Timestamp:            now,
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: st.CpuStats.CpuUsage.TotalUsage},
	}
	ms := st.MemoryStats
	inactive, rss := ms.Stats["total_inactive_file"], ms.Stats["total_rss"]
	if cgroups.IsCgroup2UnifiedMode() {
		inactive, rss = ms.Stats["inactive_file"], ms.Stats["anon"]
	}
	workingSet := ms.Usage.Usage
	if inactive < workingSet {
		workingSet -= inactive
	} else {
		workingSet = 0
	}
	faults, majorFaults := ms.Stats["total_pgfault"], ms.Stats["total_pgmajfault"]
	if cgroups.IsCgroup2UnifiedMode() {
		faults, majorFaults = ms.Stats["pgfault"], ms.Stats["pgmajfault"]
	}
	mem := &runtimeapi.MemoryUsage{
		Timestamp:       now,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: workingSet},
		UsageBytes:      &runtimeapi.UInt64Value{Value: ms.Usage.Usage},
		RssBytes:        &runtimeapi.UInt64Value{Value: rss},
		PageFaults:      &runtimeapi.UInt64Value{Value: faults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: majorFaults},
	}
	if ms.Usage.Limit > 0 && ms.Usage.Limit < 1<<62 && ms.Usage.Limit > workingSet {
		mem.AvailableBytes = &runtimeapi.UInt64Value{Value: ms.Usage.Limit - workingSet}
	}
	return cpu, mem, nil
}
