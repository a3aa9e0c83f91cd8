package kubelet

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

func TestAdmitSysctls(t *testing.T) {
	pod := func(hostNet, hostIPC bool, names ...string) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC, SecurityContext: &v1.PodSecurityContext{}}}
		for _, n := range names {
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
		}
		return p
	}
	tests := []struct {
		name    string
		pod     *v1.Pod
		allowed []string
		want    string
	}{
		{"safe ones", pod(false, false, "kernel.shm_rmid_forced", "net/ipv4/ip_local_port_range"), nil, ""},
		{"an unsafe one", pod(false, false, "kernel.shm_rmid_forced", "kernel.msgmax"), nil, `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{"an unsafe one allowed by name", pod(false, false, "kernel.msgmax"), []string{"kernel.msgmax"}, ""},
		{"an unsafe one allowed by prefix", pod(false, false, "net.core.somaxconn"), []string{"net.core.*"}, ""},
		{"net.* with the host's network", pod(true, false, "net.ipv4.tcp_syncookies"), nil, `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled`},
		{"IPC with the host's IPC", pod(false, true, "kernel.shm_rmid_forced"), nil, `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled`},
	}
	for _, tt := range tests {
		if got := admitSysctls(tt.pod, tt.allowed); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRejectedPodFailsWithoutRunning(t *testing.T) {
	kl := newTestKubelet()
	recorder := record.NewFakeRecorder(10)
	kl.recorder = recorder
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-sysctl"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}},
			SecurityContext: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}}}}
	kl.rejectPod(p, reasonSysctlForbidden, admitSysctls(p, nil))
	s, ok := kl.statusManager.GetPodStatus(p.UID)
	if !ok || s.Phase != v1.PodFailed || s.Reason != "SysctlForbidden" || s.Message != `Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted` {
		t.Fatalf("status %+v", s)
	}
	if e := <-recorder.Events; !strings.HasPrefix(e, "Warning SysctlForbidden ") {
		t.Errorf("event %q", e)
	}
}
