package projected

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/kubelet/volume/volumetest"
)

func TestProjectedVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("projected volumes live on a tmpfs, which needs root to mount")
	}
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Data: map[string][]byte{"tls.key": []byte("KEY")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p"},
		Spec:       v1.PodSpec{ServiceAccountName: "builder"},
	}
	var requested []*authenticationv1.TokenRequest
	host := &volumetest.Host{PodsDir: t.TempDir(), Client: client,
		Tokens: func(_ context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			requested = append(requested, tr)
			out := tr.DeepCopy()
			out.Status.Token = "token-for-" + ns + "/" + name
			return out, nil
		}}
	p := NewPlugin(host)
	expiration := int64(600)
	optional := true
	spec := &v1.Volume{Name: "all", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "tls"}}},
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: &optional}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "podname", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", Audience: "vault", ExpirationSeconds: &expiration}},
	}}}}
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := p.NewUnmounter("all", pod.UID)
	t.Cleanup(func() { _ = u.TearDown() })
	if err := m.SetUp(ctx); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"tls.key": "KEY", "podname": "p", "token": "token-for-default/builder"} {
		b, err := os.ReadFile(filepath.Join(m.GetPath(), path))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", path, b, err, want)
		}
	}
	if len(requested) != 1 {
		t.Fatalf("%d token requests, want 1", len(requested))
	}
	spec0 := requested[0].Spec
	if len(spec0.Audiences) != 1 || spec0.Audiences[0] != "vault" || *spec0.ExpirationSeconds != 600 ||
		spec0.BoundObjectRef == nil || spec0.BoundObjectRef.Kind != "Pod" || spec0.BoundObjectRef.UID != "uid-p" {
		t.Errorf("token request spec = %+v, want audience vault, 600 s, bound to the pod", spec0)
	}

	t.Run("a missing non-optional source fails the whole volume", func(t *testing.T) {
		bad := spec.DeepCopy()
		bad.Projected.Sources[1].ConfigMap.Optional = nil
		m, _ := p.NewMounter(bad, pod)
		if err := m.SetUp(ctx); err == nil || !strings.Contains(err.Error(), `"absent" not found`) {
			t.Errorf("err = %v, want the ConfigMap not found", err)
		}
	})
	t.Run("clusterTrustBundle is refused", func(t *testing.T) {
		ctb := &v1.Volume{Name: "ctb", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Path: "ca.pem"}},
		}}}}
		if _, err := p.NewMounter(ctb, pod); err == nil || !strings.Contains(err.Error(), "clusterTrustBundle sources are not supported") {
			t.Errorf("err = %v", err)
		}
	})
}
