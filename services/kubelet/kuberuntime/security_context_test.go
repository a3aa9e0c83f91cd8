package kuberuntime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/kubelet/container"
)

func TestContainerSecurityContext(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{
		SecurityContext: &v1.PodSecurityContext{
			RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000), FSGroup: ptr.To[int64](2000),
			SupplementalGroups: []int64{4000}, SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
			Sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}},
		},
		Containers: []v1.Container{
			// Inherits the pod's user, group and seccomp profile.
			{Name: "inherits"},
			// Its own user and group win; capabilities, no_new_privs, read-only root.
			{Name: "own", SecurityContext: &v1.SecurityContext{
				RunAsUser: ptr.To[int64](1002), RunAsGroup: ptr.To[int64](2002),
				AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities:   &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}},
				SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined},
			}},
		},
	}}
	ns := namespacesForPod(pod)
	tests := []struct {
		c    *v1.Container
		want *runtimeapi.LinuxContainerSecurityContext
	}{
		{&pod.Spec.Containers[0], &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: ns, RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000},
			SupplementalGroups: []int64{2000, 4000}, Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		}},
		{&pod.Spec.Containers[1], &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: ns, RunAsUser: &runtimeapi.Int64Value{Value: 1002}, RunAsGroup: &runtimeapi.Int64Value{Value: 2002},
			SupplementalGroups: []int64{2000, 4000}, NoNewPrivs: true, ReadonlyRootfs: true,
			Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}},
			Seccomp:      &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
		}},
	}
	for _, tt := range tests {
		if got := containerSecurityContext(pod, tt.c); !proto.Equal(got, tt.want) {
			t.Errorf("container %s: security context\n got %v\nwant %v", tt.c.Name, got, tt.want)
		}
	}
	sandbox := sandboxSecurityContext(pod)
	if sandbox.GetRunAsUser().GetValue() != 1000 || sandbox.GetRunAsGroup().GetValue() != 3000 ||
		!proto.Equal(&runtimeapi.LinuxSandboxSecurityContext{SupplementalGroups: sandbox.GetSupplementalGroups()}, &runtimeapi.LinuxSandboxSecurityContext{SupplementalGroups: []int64{2000, 4000}}) ||
		sandbox.GetPrivileged() {
		t.Errorf("sandbox security context %v", sandbox)
	}
	if got := sandboxSysctls(pod); len(got) != 1 || got["kernel.shm_rmid_forced"] != "1" {
		t.Errorf("sandbox sysctls %v", got)
	}
	// A bare pod: Unconfined seccomp, no user, no groups.
	bare := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	if got := containerSecurityContext(bare, &bare.Spec.Containers[0]); got.GetRunAsUser() != nil || len(got.GetSupplementalGroups()) != 0 ||
		got.GetSeccomp().GetProfileType() != runtimeapi.SecurityProfile_Unconfined || got.GetNoNewPrivs() {
		t.Errorf("bare pod: security context %v", got)
	}
}

func TestVerifyRunAsNonRoot(t *testing.T) {
	pod := func(podNonRoot *bool, user *int64) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{
			SecurityContext: &v1.PodSecurityContext{RunAsNonRoot: podNonRoot},
			Containers:      []v1.Container{{Name: "c", SecurityContext: &v1.SecurityContext{RunAsUser: user}}},
		}}
	}
	tests := []struct {
		name      string
		pod       *v1.Pod
		imageUID  *int64
		imageUser string
		wantErr   string
	}{
		{"runAsNonRoot unset: anything goes", pod(nil, ptr.To[int64](0)), ptr.To[int64](0), "", ""},
		{"runAsUser 0 breaks it", pod(ptr.To(true), ptr.To[int64](0)), nil, "", "container's runAsUser breaks non-root policy"},
		{"runAsUser 1000 keeps it", pod(ptr.To(true), ptr.To[int64](1000)), ptr.To[int64](0), "", ""},
		{"an image running as root breaks it", pod(ptr.To(true), nil), ptr.To[int64](0), "", "container has runAsNonRoot and image will run as root"},
		{"an image's user by name cannot be checked", pod(ptr.To(true), nil), nil, "nobody", "image has non-numeric user (nobody)"},
		{"an image's non-root uid keeps it", pod(ptr.To(true), nil), ptr.To[int64](65534), "", ""},
	}
	for _, tt := range tests {
		err := verifyRunAsNonRoot(tt.pod, &tt.pod.Spec.Containers[0], tt.imageUID, tt.imageUser)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	c := &v1.Container{Name: "c", TerminationMessagePath: "/dev/termination-log"}
	helper := &recordingHelper{opts: &container.RunContainerOptions{PodContainerDir: filepath.Join(dir, "pods", "u", "containers", "c")}}
	m := &Manager{runtimeHelper: helper, podLogsDirectory: t.TempDir()}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{Containers: []v1.Container{*c}}}
	cfg, err := m.generateContainerConfig(context.Background(), c, pod, 0, "img", nil)
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, mt := range cfg.GetMounts() {
		if mt.GetContainerPath() == "/dev/termination-log" {
			file = mt.GetHostPath()
		}
	}
	if file == "" || !strings.HasPrefix(file, helper.opts.PodContainerDir+"/") {
		t.Fatalf("no termination log mount under %s in %v", helper.opts.PodContainerDir, cfg.GetMounts())
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("termination log file: %v, %v; want mode 0666 (any user writes it)", fi, err)
	}

	logPath := filepath.Join(dir, "0.log")
	log := strings.Join([]string{
		"2026-01-01T00:00:00.000000000Z stdout F first line",
		"2026-01-01T00:00:00.000000000Z stderr P partial ",
		"2026-01-01T00:00:00.000000000Z stderr F end",
		"not a CRI line",
		"2026-01-01T00:00:00.000000000Z stdout P DONE",
	}, "\n") + "\n"
	if err := os.WriteFile(logPath, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	status := func(policy v1.TerminationMessagePolicy, exitCode int32) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{
			ExitCode: exitCode, LogPath: logPath,
			Annotations: newContainerAnnotations(&v1.Container{Name: "c", TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: policy}, pod, 0),
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: file}},
		}
	}
	if got := terminationMessage(status(v1.TerminationMessageFallbackToLogsOnError, 1)); got != "first line\npartial end\nDONE" {
		t.Errorf("empty file, FallbackToLogsOnError, failed: %q; want the log's tail", got)
	}
	if got := terminationMessage(status(v1.TerminationMessageFallbackToLogsOnError, 0)); got != "" {
		t.Errorf("empty file, FallbackToLogsOnError, succeeded: %q; want none", got)
	}
	if got := terminationMessage(status(v1.TerminationMessageReadFile, 1)); got != "" {
		t.Errorf("empty file, File, failed: %q; want none", got)
	}
	if err := os.WriteFile(file, []byte(strings.Repeat("x", 5000)), 0o666); err != nil {
		t.Fatal(err)
	}
	if got := terminationMessage(status(v1.TerminationMessageFallbackToLogsOnError, 1)); got != strings.Repeat("x", 4096) {
		t.Errorf("written file: %d bytes; want its first 4096", len(got))
	}
}

func TestUnmaskedProcMountIsRefused(t *testing.T) {
	m := &Manager{runtimeHelper: plainRuntimeHelper{}, podLogsDirectory: t.TempDir()}
	unmasked := v1.UnmaskedProcMount
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", SecurityContext: &v1.SecurityContext{ProcMount: &unmasked}}}}}
	if _, err := m.generateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, "img", nil); err == nil || !strings.Contains(err.Error(), "procMount Unmasked is not supported") {
		t.Fatalf("procMount Unmasked: err %v, want a refusal", err)
	}
}
