package kuberuntime

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
)

// registryImages is an ImageService standing in for a registry behind
// containerd (none can be reached here): no image is present, and a pull
// succeeds only with the user "good".
type registryImages struct {
	runtimeapi.UnimplementedImageServiceServer
	mu    sync.Mutex
	pulls []*runtimeapi.AuthConfig
}

func (r *registryImages) ImageStatus(context.Context, *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (r *registryImages) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pulls = append(r.pulls, req.GetAuth())
	if req.GetAuth().GetUsername() != "good" {
		return nil, grpcstatus.Error(codes.Unknown, "401 Unauthorized")
	}
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:pulled"}, nil
}

func TestPullSecretsArePassedAsCRIAuth(t *testing.T) {
	rt := sim.New()
	t.Cleanup(rt.Close)
	images := &registryImages{}
	cri := socketharness.Start(t, rt, images)
	conn, err := Dial(cri.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	secret := func(name, user string) v1.Secret {
		return v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{
			v1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"username":"` + user + `","password":"pw"}}}`)}}
	}
	m := NewManager(conn, Options{PodLogsDirectory: t.TempDir(), PullSecrets: func(_ context.Context, pod *v1.Pod) []v1.Secret {
		return []v1.Secret{secret("bad", "bad"), secret("good", "good")}
	}})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"}, Spec: v1.PodSpec{
		ImagePullSecrets: []v1.LocalObjectReference{{Name: "bad"}, {Name: "good"}},
		Containers:       []v1.Container{{Name: "c", Image: "registry.example.com/app:1", ImagePullPolicy: v1.PullIfNotPresent}},
	}}
	ref, msg, err := m.imagePuller.EnsureImageExists(context.Background(), pod, &pod.Spec.Containers[0], nil)
	if err != nil || ref != "sha256:pulled" {
		t.Fatalf("EnsureImageExists = %q, %q, %v; want the pulled image", ref, msg, err)
	}
	if len(images.pulls) != 2 || images.pulls[0].GetUsername() != "bad" || images.pulls[1].GetUsername() != "good" ||
		images.pulls[1].GetPassword() != "pw" || images.pulls[1].GetServerAddress() != "registry.example.com" {
		t.Errorf("pulls with %v, want the bad then the good credentials", images.pulls)
	}

	// An image of another registry is pulled anonymously, and fails here.
	pod.Spec.Containers[0].Image = "other.example.org/app:1"
	images.pulls = nil
	if _, _, err := m.imagePuller.EnsureImageExists(context.Background(), pod, &pod.Spec.Containers[0], nil); err == nil {
		t.Error("anonymous pull succeeded")
	}
	if len(images.pulls) != 1 || images.pulls[0] != nil {
		t.Errorf("pulls with %v, want one anonymous pull", images.pulls)
	}
}
