package manager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/kubelet/util/manager"
)

// podUsing is a pod of namespace default whose volumes project the ConfigMaps names.
func podUsing(uid string, names ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: uid, UID: types.UID(uid)}}
	for _, name := range names {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: name, VolumeSource: v1.VolumeSource{
			ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}})
	}
	return pod
}

// eventually waits up to 10 s for the manager's copy of name to satisfy ok.
func eventually(t *testing.T, m *manager.Manager[*v1.ConfigMap], name, what string, ok func(*v1.ConfigMap, error) bool) {
	t.Helper()
	var cm *v1.ConfigMap
	var err error
	if werr := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err = m.Get(ctx, "default", name)
		return ok(cm, err), nil
	}); werr != nil {
		t.Fatalf("%s: last Get gave %v, %v", what, cm, err)
	}
}

func TestConfigMapManagerFollowsTheAPI(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	m := manager.NewConfigMapManager(client)
	t.Cleanup(m.Stop)
	cms := client.CoreV1().ConfigMaps("default")

	if _, err := m.Get(ctx, "default", "settings"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("Get before any pod uses it: %v, want not registered", err)
	}
	a := podUsing("a", "settings")
	m.RegisterPod(a)
	if _, err := m.Get(ctx, "default", "settings"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a ConfigMap that does not exist: %v, want NotFound", err)
	}
	cm, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, m, "settings", "the created ConfigMap", func(cm *v1.ConfigMap, err error) bool { return err == nil && cm.Data["k"] == "1" })
	cm.Data["k"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, "settings", "the updated ConfigMap", func(cm *v1.ConfigMap, err error) bool { return err == nil && cm.Data["k"] == "2" })

	// A second pod shares the watch; the object goes when the last pod does.
	b := podUsing("b", "settings")
	m.RegisterPod(b)
	m.UnregisterPod(a)
	if _, err := m.Get(ctx, "default", "settings"); err != nil {
		t.Fatalf("Get while pod b still uses it: %v", err)
	}
	m.RegisterPod(podUsing("b")) // b's update drops the volume
	if _, err := m.Get(ctx, "default", "settings"); err == nil {
		t.Fatal("Get after no pod uses it any more succeeded")
	}
}

func TestConfigMapManagerStopsWatchingAnImmutableObject(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	m := manager.NewConfigMapManager(client)
	t.Cleanup(m.Stop)
	fixed := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fixed"}, Data: map[string]string{"k": "v"}, Immutable: ptr.To(true)}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, fixed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.RegisterPod(podUsing("a", "fixed"))
	if cm, err := m.Get(ctx, "default", "fixed"); err != nil || cm.Data["k"] != "v" {
		t.Fatalf("Get = %v, %v", cm, err)
	}
	// Its watch has stopped: a deletion (the only change an immutable object can
	// have) is not seen, and the pod keeps the copy it read.
	if err := client.CoreV1().ConfigMaps("default").Delete(ctx, "fixed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.RegisterPod(podUsing("canary", "canary"))
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "canary"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The canary's watch saw a write after the deletion; a running watch of fixed would
	// have seen the deletion by now too.
	eventually(t, m, "canary", "the canary", func(_ *v1.ConfigMap, err error) bool { return err == nil })
	if cm, err := m.Get(ctx, "default", "fixed"); err != nil || cm.Data["k"] != "v" {
		t.Fatalf("Get after the deletion = %v, %v; want the copy read while it was immutable", cm, err)
	}
}

func TestSecretManagerFollowsImagePullSecrets(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	m := manager.NewSecretManager(client)
	t.Cleanup(m.Stop)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "a"},
		Spec: v1.PodSpec{ImagePullSecrets: []v1.LocalObjectReference{{Name: "registry"}}}}
	m.RegisterPod(pod)
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := m.Get(ctx, "default", "registry")
		return err == nil && string(s.Data["k"]) == "v", nil
	}); err != nil {
		t.Fatalf("the pull secret never came from the cache: %v", err)
	}
}
