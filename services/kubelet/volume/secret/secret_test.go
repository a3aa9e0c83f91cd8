package secret

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/kubelet/volume/volumetest"
)

func TestSecretVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("secret volumes live on a tmpfs, which needs root to mount")
	}
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	sec, err := client.CoreV1().Secrets("default").Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"user": []byte("admin"), "pass": []byte("hunter2")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-s"}}
	host := &volumetest.Host{PodsDir: t.TempDir(), Client: client}
	p := NewPlugin(host)
	mount := func(t *testing.T, src v1.SecretVolumeSource) (string, error) {
		t.Helper()
		m, err := p.NewMounter(&v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Secret: &src}}, pod)
		if err != nil {
			t.Fatal(err)
		}
		if !m.GetAttributes().ReadOnly {
			t.Error("secret volumes must be read-only")
		}
		u, _ := p.NewUnmounter("v", pod.UID)
		t.Cleanup(func() { _ = u.TearDown() })
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

	t.Run("every key as a file on a tmpfs, updated with the Secret", func(t *testing.T) {
		dir, err := mount(t, v1.SecretVolumeSource{SecretName: "creds"})
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			t.Errorf("secret volume is not on a tmpfs (type %x, err %v)", st.Type, err)
		}
		if got := read(t, filepath.Join(dir, "pass")); got != "hunter2" {
			t.Errorf("pass = %q", got)
		}
		info, _ := os.Stat(filepath.Join(dir, "user"))
		if info.Mode().Perm() != 0o644 {
			t.Errorf("mode = %o, want the default 644", info.Mode().Perm())
		}
		sec.Data = map[string][]byte{"user": []byte("root")}
		if _, err := client.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		m, _ := p.NewMounter(&v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}}, pod)
		if err := m.SetUp(ctx); err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(dir, "user")); got != "root" {
			t.Errorf("after update user = %q, want root", got)
		}
		if _, err := os.Lstat(filepath.Join(dir, "pass")); !os.IsNotExist(err) {
			t.Errorf("a key removed from the Secret is still a file: %v", err)
		}
	})
	t.Run("items map keys to paths with modes", func(t *testing.T) {
		mode, defaultMode := int32(0o400), int32(0o440)
		dir, err := mount(t, v1.SecretVolumeSource{SecretName: "creds", DefaultMode: &defaultMode, Items: []v1.KeyToPath{{Key: "user", Path: "conf/name", Mode: &mode}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(dir, "conf/name")); got != "root" {
			t.Errorf("conf/name = %q", got)
		}
		if info, _ := os.Stat(filepath.Join(dir, "conf/name")); info.Mode().Perm() != 0o400 {
			t.Errorf("mode = %o, want 400", info.Mode().Perm())
		}
	})
	t.Run("missing secret is an error", func(t *testing.T) {
		_, err := mount(t, v1.SecretVolumeSource{SecretName: "nope"})
		if err == nil || !strings.Contains(err.Error(), `"nope" not found`) {
			t.Errorf("err = %v, want not found", err)
		}
	})
	t.Run("missing optional secret is an empty directory", func(t *testing.T) {
		optional := true
		dir, err := mount(t, v1.SecretVolumeSource{SecretName: "nope", Optional: &optional})
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "..") {
				t.Errorf("unexpected file %s", e.Name())
			}
		}
	})
	t.Run("missing item key is an error", func(t *testing.T) {
		_, err := mount(t, v1.SecretVolumeSource{SecretName: "creds", Items: []v1.KeyToPath{{Key: "absent", Path: "x"}}})
		if err == nil || !strings.Contains(err.Error(), "secret references non-existent secret key: absent") {
			t.Errorf("err = %v", err)
		}
	})
}
