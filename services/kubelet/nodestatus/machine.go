package nodestatus

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultMaxPods is the pods capacity kubelet reports by default.
const DefaultMaxPods = 110

// Machine is what the kubelet knows about the machine it runs on, read once
// at start (cadvisor's MachineInfo and the OS files kubelet reads).
type Machine struct {
	NumCPU int
	// MemoryCapacity is MemTotal in bytes.
	MemoryCapacity int64
	// EphemeralStorageCapacity is the size in bytes of the filesystem
	// holding the kubelet's root directory (0 if unknown).
	EphemeralStorageCapacity      int64
	MachineID, SystemUUID, BootID string
	KernelVersion, OSImage        string
}

// ReadMachine reads the machine's facts; rootDir is the kubelet's state
// directory, whose filesystem is the ephemeral storage. Facts that cannot be
// read are left empty (e.g. product_uuid is root-only).
func ReadMachine(rootDir string) Machine {
	m := Machine{
		NumCPU:        runtime.NumCPU(),
		MachineID:     readTrimmed("/etc/machine-id"),
		SystemUUID:    readTrimmed("/sys/class/dmi/id/product_uuid"),
		BootID:        readTrimmed("/proc/sys/kernel/random/boot_id"),
		KernelVersion: readTrimmed("/proc/sys/kernel/osrelease"),
		OSImage:       osImage(),
	}
	m.MemoryCapacity = memTotal()
	var st unix.Statfs_t
	if err := unix.Statfs(rootDir, &st); err == nil {
		m.EphemeralStorageCapacity = int64(st.Blocks) * int64(st.Bsize)
	}
	return m
}

// Capacity returns the machine's resources (cpu, memory, ephemeral-storage,
// pods=110) overlaid with override's entries.
func (m Machine) Capacity(override v1.ResourceList) v1.ResourceList {
	c := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(m.NumCPU), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(m.MemoryCapacity, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(DefaultMaxPods, resource.DecimalSI),
	}
	if m.EphemeralStorageCapacity > 0 {
		c[v1.ResourceEphemeralStorage] = *resource.NewQuantity(m.EphemeralStorageCapacity, resource.BinarySI)
	}
	for k, v := range override {
		c[k] = v.DeepCopy()
	}
	return c
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// memTotal returns MemTotal from /proc/meminfo in bytes.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// osImage returns PRETTY_NAME from /etc/os-release, as kubelet reports it.
func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("PRETTY_NAME=")); ok {
			return strings.Trim(string(v), `"'`)
		}
	}
	return runtime.GOOS
}
