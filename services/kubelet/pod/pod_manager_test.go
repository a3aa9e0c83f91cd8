package pod

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubetypes "skiff.dev/services/kubelet/types"
)

func TestManagerKeepsMirrorPodsApart(t *testing.T) {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n1", Namespace: "default", UID: "hash-1",
		Annotations: map[string]string{kubetypes.ConfigSourceAnnotationKey: "file", kubetypes.ConfigHashAnnotationKey: "hash-1"}}}
	mirror := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n1", Namespace: "default", UID: "api-uid",
		Annotations: map[string]string{kubetypes.ConfigSourceAnnotationKey: "file", kubetypes.ConfigHashAnnotationKey: "hash-1",
			kubetypes.ConfigMirrorAnnotationKey: "hash-1"}}}
	m := NewManager()
	m.AddPod(mirror)
	if got := m.GetOrphanedMirrorPods(); len(got) != 1 {
		t.Errorf("a mirror without its static pod must be an orphan, got %v", got)
	}
	m.AddPod(static)

	if pods := m.GetPods(); len(pods) != 1 || pods[0] != static {
		t.Errorf("GetPods = %v, want only the static pod (a mirror pod never runs)", pods)
	}
	if _, ok := m.GetPodByUID("api-uid"); ok {
		t.Error("GetPodByUID found the mirror pod")
	}
	if got, ok := m.GetMirrorPodByPod(static); !ok || got != mirror {
		t.Errorf("GetMirrorPodByPod = %v, %v", got, ok)
	}
	if got, ok := m.GetPodByMirrorPod(mirror); !ok || got != static {
		t.Errorf("GetPodByMirrorPod = %v, %v", got, ok)
	}
	if p, mp, wasMirror := m.GetPodAndMirrorPod(mirror); p != static || mp != mirror || !wasMirror {
		t.Errorf("GetPodAndMirrorPod(mirror) = %v, %v, %v", p, mp, wasMirror)
	}
	if !kubetypes.IsMirrorPodOf(mirror, static) {
		t.Error("the mirror of the same hash must be the static pod's mirror")
	}
	if got := m.GetOrphanedMirrorPods(); len(got) != 0 {
		t.Errorf("orphans %v with the static pod present", got)
	}

	m.RemovePod(static)
	if got := m.GetOrphanedMirrorPods(); len(got) != 1 || got[0] != mirror {
		t.Errorf("orphans after the static pod went: %v", got)
	}
	m.RemovePod(mirror)
	if _, ok := m.GetMirrorPodByPod(static); ok {
		t.Error("the removed mirror pod is still there")
	}
}
