package process

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestWithoutCgroupsOrMountNamespaces pins what a runtime that cannot make
// cgroups or mount namespaces (not root) accepts: the driver is given the
// probes' failures, since the tests run as root.
func TestWithoutCgroupsOrMountNamespaces(t *testing.T) {
	d := newDriver(t.TempDir(), t.TempDir(), "127.0.0.1", &cgroupsConfig{unusable: errors.New("no writable cgroup hierarchy: permission denied")})
	d.probeMounts.Do(func() { d.mountsErr = errors.New("unshare mount namespace: operation not permitted") })
	for _, tc := range []struct {
		name string
		edit func(*runtimeapi.ContainerConfig)
		want string // "" for accepted
	}{
		{"no limits", func(*runtimeapi.ContainerConfig) {}, ""},
		{"cpu shares are a weight, not a limit", func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 102}}
		}, ""},
		{"memory limit", func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 1 << 20}}
		}, "cannot enforce its resources (memory limit 1048576 bytes): no writable cgroup hierarchy"},
		{"cpu quota", func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000}}
		}, "cannot enforce its resources (cpu quota 50000us per 100000us)"},
		{"mounts", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/tmp", ContainerPath: "/data"}}
		}, "the process runtime needs root for volume mounts: unshare mount namespace: operation not permitted"},
		{"masked paths", func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{MaskedPaths: []string{"/proc/kcore"}}}
		}, "the process runtime needs root for masked and read-only paths"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "main"}, Command: []string{"true"}}
			tc.edit(cfg)
			err := d.ValidateContainer(&runtimeapi.PodSandboxConfig{}, cfg)
			if tc.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ValidateContainer: %v, want InvalidArgument with %q", err, tc.want)
			}
		})
	}
}

func TestPageSizeKB(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"2MB", 2048, true},
		{"1GB", 1 << 20, true},
		{"64KB", 64, true},
		{"2M", 0, false},
	} {
		if got, ok := pageSizeKB(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("pageSizeKB(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestHugepageLimitsWithoutTheController pins that a hugepage limit is left
// out only where no such page can be had.
func TestHugepageLimitsWithoutTheController(t *testing.T) {
	c := &cgroupsConfig{}
	r := &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}}
	res, err := c.resources(r)
	if hugepagesOnHost("2MB") {
		if err == nil {
			t.Errorf("accepted a 2MB hugepage limit on a host with 2MB pages and no hugetlb controller")
		}
		return
	}
	if err != nil || len(res.HugetlbLimit) != 0 {
		t.Errorf("resources = %v, %v; want no hugetlb limit and no error on a host without 2MB pages", res, err)
	}
}
