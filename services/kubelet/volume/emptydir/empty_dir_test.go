package emptydir

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/kubelet/volume/volumetest"
)

func testPod() *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}}
}

func TestDiskEmptyDirIsAWritableDirectoryUnderThePodDir(t *testing.T) {
	host := &volumetest.Host{PodsDir: t.TempDir()}
	p := NewPlugin(host)
	m, err := p.NewMounter(&v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}, testPod())
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(host.PodsDir, "uid-1", "volumes", "kubernetes.io~empty-dir", "scratch")
	if m.GetPath() != want {
		t.Errorf("path = %s, want %s", m.GetPath(), want)
	}
	if err := m.SetUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(want)
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o777 {
		t.Fatalf("stat = %v, %v; want a 0777 directory", info, err)
	}
	if err := os.WriteFile(filepath.Join(want, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := p.NewUnmounter("scratch", "uid-1")
	if err := u.TearDown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Errorf("directory survives TearDown: %v", err)
	}
}

func TestMemoryEmptyDirIsATmpfsOfSizeLimit(t *testing.T) {
	host := &volumetest.Host{PodsDir: t.TempDir()}
	p := NewPlugin(host)
	limit := resource.MustParse("4Mi")
	m, err := p.NewMounter(&v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &limit}}}, testPod())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(context.Background()); err != nil {
		if os.Geteuid() != 0 {
			// Refusing is the contract when tmpfs cannot be mounted.
			if !strings.Contains(err.Error(), "mount tmpfs") {
				t.Fatalf("SetUp without privilege: %v, want a mount tmpfs error", err)
			}
			return
		}
		t.Fatal(err)
	}
	u, _ := p.NewUnmounter("mem", "uid-1")
	t.Cleanup(func() { _ = u.TearDown() })
	var st unix.Statfs_t
	if err := unix.Statfs(m.GetPath(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("filesystem type %x, want tmpfs", st.Type)
	}
	if size := int64(st.Blocks) * st.Bsize; size != 4<<20 {
		t.Errorf("tmpfs size = %d, want %d", size, 4<<20)
	}
	// A second SetUp does not stack another mount.
	if err := m.SetUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := u.TearDown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.GetPath()); !os.IsNotExist(err) {
		t.Errorf("tmpfs directory survives TearDown: %v", err)
	}
}

func TestNewMounterRefusesWhatItCannotHonour(t *testing.T) {
	limit := resource.MustParse("1Gi")
	tests := []struct {
		name string
		src  v1.EmptyDirVolumeSource
		want string
	}{
		{"sizeLimit on disk needs eviction", v1.EmptyDirVolumeSource{SizeLimit: &limit}, "enforced by eviction"},
		{"hugepages medium", v1.EmptyDirVolumeSource{Medium: v1.StorageMediumHugePages}, `medium "HugePages" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPlugin(&volumetest.Host{PodsDir: t.TempDir()}).NewMounter(&v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &tt.src}}, testPod())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestMemorySize(t *testing.T) {
	limit := resource.MustParse("8Mi")
	withLimits := testPod()
	withLimits.Spec.Containers = []v1.Container{
		{Name: "a", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}}},
		{Name: "b", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}}},
	}
	partial := testPod()
	partial.Spec.Containers = []v1.Container{withLimits.Spec.Containers[0], {Name: "c"}}
	alloc := v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	tests := []struct {
		name  string
		limit *resource.Quantity
		pod   *v1.Pod
		want  int64
	}{
		{"sizeLimit wins", &limit, withLimits, 8 << 20},
		{"pod memory limit when every container has one", nil, withLimits, 32 << 20},
		{"node allocatable otherwise", nil, partial, 1 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := memorySize(tt.limit, tt.pod, alloc); got != tt.want {
				t.Errorf("memorySize = %d, want %d", got, tt.want)
			}
		})
	}
}
