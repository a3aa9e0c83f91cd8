package downwardapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/kubelet/volume/volumetest"
)

func TestDownwardAPIVolume(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "uid-d", Labels: map[string]string{"app": "web", "tier": "front"}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
		}}}},
	}
	mode := int32(0o600)
	src := &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
		{Path: "uid", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}, Mode: &mode},
		{Path: "meta/labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		{Path: "cpu_request", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "requests.cpu", Divisor: resource.MustParse("1m")}},
		{Path: "mem_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
	}}
	host := &volumetest.Host{PodsDir: t.TempDir(), Allocatable: v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}}
	p := NewPlugin(host)
	spec := &v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: src}}
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"name":        "web",
		"namespace":   "prod",
		"uid":         "uid-d",
		"meta/labels": "app=\"web\"\ntier=\"front\"",
		"cpu_request": "250",
		"mem_limit":   "2048", // no limit: the node's allocatable
	}
	for path, content := range want {
		b, err := os.ReadFile(filepath.Join(m.GetPath(), path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if string(b) != content {
			t.Errorf("%s = %q, want %q", path, b, content)
		}
	}
	if info, _ := os.Stat(filepath.Join(m.GetPath(), "uid")); info.Mode().Perm() != 0o600 {
		t.Errorf("uid mode = %o, want 600", info.Mode().Perm())
	}

	// New labels reach the file at the next SetUp.
	pod.Labels = map[string]string{"app": "api"}
	m, _ = p.NewMounter(spec, pod)
	if err := m.SetUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(m.GetPath(), "meta/labels")); string(b) != `app="api"` {
		t.Errorf("labels after update = %q", b)
	}

	u, _ := p.NewUnmounter("info", pod.UID)
	if err := u.TearDown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.GetPath()); !os.IsNotExist(err) {
		t.Errorf("volume survives TearDown: %v", err)
	}
}

func TestCollectDataRefusesUnknownFieldPath(t *testing.T) {
	_, err := CollectData([]v1.DownwardAPIVolumeFile{{Path: "x", FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}, nil, &v1.Pod{}, nil)
	if err == nil {
		t.Error("spec.nodeName is not a downwardAPI volume field, yet it was accepted")
	}
}
