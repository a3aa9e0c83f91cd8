package configmap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/kubelet/volume/volumetest"
)

func TestConfigMapVolume(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	cm, err := client.CoreV1().ConfigMaps("default").Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Data:       map[string]string{"app.conf": "level=info", "extra": "x"},
		BinaryData: map[string][]byte{"logo.bin": {0, 1, 2}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-c"}}
	p := NewPlugin(&volumetest.Host{PodsDir: t.TempDir(), Client: client})
	mount := func(t *testing.T, src v1.ConfigMapVolumeSource) (string, error) {
		t.Helper()
		m, err := p.NewMounter(&v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &src}}, pod)
		if err != nil {
			t.Fatal(err)
		}
		if !m.GetAttributes().ReadOnly {
			t.Error("configMap volumes must be read-only")
		}
		u, _ := p.NewUnmounter("v", pod.UID)
		t.Cleanup(func() {
			if err := u.TearDown(); err != nil {
				t.Error(err)
			}
		})
		return m.GetPath(), m.SetUp(ctx)
	}
	read := func(t *testing.T, path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	t.Run("data and binaryData keys as files, updated with the ConfigMap", func(t *testing.T) {
		name := v1.LocalObjectReference{Name: "app"}
		dir, err := mount(t, v1.ConfigMapVolumeSource{LocalObjectReference: name})
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(dir, "app.conf")); got != "level=info" {
			t.Errorf("app.conf = %q", got)
		}
		if got := read(t, filepath.Join(dir, "logo.bin")); got != "\x00\x01\x02" {
			t.Errorf("logo.bin = %q", got)
		}
		cm.Data = map[string]string{"app.conf": "level=debug"}
		cm.BinaryData = nil
		if _, err := client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		m, _ := p.NewMounter(&v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: name}}}, pod)
		if err := m.SetUp(ctx); err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(dir, "app.conf")); got != "level=debug" {
			t.Errorf("after update app.conf = %q", got)
		}
		for _, gone := range []string{"extra", "logo.bin"} {
			if _, err := os.Lstat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
				t.Errorf("%s removed from the ConfigMap is still a file: %v", gone, err)
			}
		}
	})
	t.Run("items with paths and modes", func(t *testing.T) {
		mode := int32(0o600)
		dir, err := mount(t, v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"},
			Items: []v1.KeyToPath{{Key: "app.conf", Path: "etc/app.conf", Mode: &mode}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(dir, "etc/app.conf")); got != "level=debug" {
			t.Errorf("etc/app.conf = %q", got)
		}
		if info, _ := os.Stat(filepath.Join(dir, "etc/app.conf")); info.Mode().Perm() != 0o600 {
			t.Errorf("mode = %o, want 600", info.Mode().Perm())
		}
	})
	t.Run("missing configmap is an error", func(t *testing.T) {
		_, err := mount(t, v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}})
		if err == nil || !strings.Contains(err.Error(), `configmaps "nope" not found`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("missing optional configmap is an empty directory", func(t *testing.T) {
		optional := true
		if _, err := mount(t, v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: &optional}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing item key is an error", func(t *testing.T) {
		_, err := mount(t, v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Items: []v1.KeyToPath{{Key: "absent", Path: "x"}}})
		if err == nil || !strings.Contains(err.Error(), "configmap references non-existent config key: absent") {
			t.Errorf("err = %v", err)
		}
	})
}
