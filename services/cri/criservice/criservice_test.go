package criservice_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"skiff.dev/services/cri/criservice"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
)

// The bookkeeping is the same for every driver; these tests drive it through
// the sim runtime over a real socket.
func serve(t *testing.T) *socketharness.Clients {
	t.Helper()
	rt := sim.New()
	c := socketharness.Start(t, rt, rt)
	t.Cleanup(rt.Close)
	return c
}

func TestNormalizeImage(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{in: "busybox", want: "docker.io/library/busybox:latest"},
		{in: "busybox:1.36", want: "docker.io/library/busybox:1.36"},
		{in: "library/busybox", want: "docker.io/library/busybox:latest"},
		{in: "me/app:v1", want: "docker.io/me/app:v1"},
		{in: "index.docker.io/me/app", want: "docker.io/me/app:latest"},
		{in: "registry.k8s.io/pause:3.10", want: "registry.k8s.io/pause:3.10"},
		{in: "localhost:5000/app", want: "localhost:5000/app:latest"},
		{in: "localhost/app", want: "localhost/app:latest"},
		{in: "busybox@" + digest, want: "docker.io/library/busybox@" + digest},
		{in: "busybox:1.36@" + digest, want: "docker.io/library/busybox:1.36@" + digest},
		{in: "", wantErr: true},
		{in: "Busybox", wantErr: true},
		{in: "busybox:", wantErr: true},
		{in: "bad image", wantErr: true},
		{in: "busybox@sha256:xyz", wantErr: true},
	} {
		got, err := criservice.NormalizeImage(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("NormalizeImage(%q) = %q, want error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeImage(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestImageLifecycle(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	imageStatus := func(ref string) *runtimeapi.Image {
		t.Helper()
		resp, err := c.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			t.Fatalf("ImageStatus(%q): %v", ref, err)
		}
		return resp.Image
	}

	if im := imageStatus("busybox"); im != nil {
		t.Fatalf("ImageStatus before pull = %v, want nil", im)
	}
	pulled, err := c.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pulled.ImageRef, "sha256:") || len(pulled.ImageRef) != len("sha256:")+64 {
		t.Errorf("image ref %q, want sha256:<64 hex>", pulled.ImageRef)
	}
	for _, ref := range []string{"busybox", "busybox:latest", "docker.io/library/busybox:latest", pulled.ImageRef} {
		im := imageStatus(ref)
		if im == nil || im.Id != pulled.ImageRef || !slices.Equal(im.RepoTags, []string{"docker.io/library/busybox:latest"}) {
			t.Errorf("ImageStatus(%q) = %v, want the pulled image", ref, im)
		}
	}
	if im := imageStatus("busybox:1.36"); im != nil {
		t.Errorf("ImageStatus of another tag = %v, want nil", im)
	}
	again, err := c.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox"}})
	if err != nil || again.ImageRef != pulled.ImageRef {
		t.Errorf("pulling the same image again: %v, %v; want ref %s", again, err, pulled.ImageRef)
	}
	list, err := c.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.Images) != 1 {
		t.Fatalf("ListImages = %v, %v; want one image", list, err)
	}
	fs, err := c.Image.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(fs.ImageFilesystems) != 1 {
		t.Errorf("ImageFsInfo = %v, %v; want one filesystem", fs, err)
	}

	for range 2 { // removing is idempotent
		if _, err := c.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
			t.Fatal(err)
		}
	}
	if im := imageStatus("busybox"); im != nil {
		t.Errorf("ImageStatus after remove = %v, want nil", im)
	}
	if _, err := c.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "Not Valid"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("PullImage of an invalid reference: %v, want InvalidArgument", err)
	}
}

func TestCreateContainerNeedsAPulledImage(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig("c", nil)})
	if status.Code(err) != codes.NotFound {
		t.Errorf("CreateContainer with an image never pulled: %v, want NotFound", err)
	}
}

// pullBusybox pulls the image containerConfig names.
func pullBusybox(t *testing.T, c *socketharness.Clients) {
	t.Helper()
	if _, err := c.Image.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		t.Fatal(err)
	}
}

func sandboxConfig(name string, labels map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name},
		Labels:   labels,
	}
}

func containerConfig(name string, labels map[string]string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Labels:   labels,
	}
}

func TestListFilters(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	pullBusybox(t, c)
	sandboxes := map[string]string{} // name → ID
	for _, sb := range []struct {
		name, app string
	}{{"web", "web"}, {"db", "db"}} {
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig(sb.name, map[string]string{"app": sb.app, podUIDLabel: "uid-" + sb.name})})
		if err != nil {
			t.Fatal(err)
		}
		sandboxes[sb.name] = resp.PodSandboxId
	}
	containers := map[string]string{} // name → ID
	for _, ct := range []struct{ name, sandbox, tier string }{
		{"web-main", "web", "front"}, {"web-sidecar", "web", "aux"}, {"db-main", "db", "back"},
	} {
		resp, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: sandboxes[ct.sandbox],
			Config:       containerConfig(ct.name, map[string]string{"tier": ct.tier, "pod": ct.sandbox, podUIDLabel: "uid-" + ct.sandbox}),
		})
		if err != nil {
			t.Fatal(err)
		}
		containers[ct.name] = resp.ContainerId
	}
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containers["web-main"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxes["db"]}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"no filter", nil, []string{"web-main", "web-sidecar", "db-main"}},
		{"by id", &runtimeapi.ContainerFilter{Id: containers["web-sidecar"]}, []string{"web-sidecar"}},
		{"by unknown id", &runtimeapi.ContainerFilter{Id: "nope"}, nil},
		{"by sandbox", &runtimeapi.ContainerFilter{PodSandboxId: sandboxes["web"]}, []string{"web-main", "web-sidecar"}},
		{"by state", &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, []string{"web-main"}},
		{"by label", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"tier": "back"}}, []string{"db-main"}},
		{"all labels must match", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"pod": "web", "tier": "back"}}, nil},
		{"sandbox and state", &runtimeapi.ContainerFilter{PodSandboxId: sandboxes["web"], State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}, []string{"web-sidecar"}},
		// The kubelet's filter for one pod's status: served by the runtime's index.
		{"by pod UID", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{podUIDLabel: "uid-web"}}, []string{"web-main", "web-sidecar"}},
		{"by pod UID and another label", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{podUIDLabel: "uid-web", "tier": "aux"}}, []string{"web-sidecar"}},
		{"by the UID of no pod", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{podUIDLabel: "uid-none"}}, nil},
	} {
		t.Run("containers "+tc.name, func(t *testing.T) {
			resp, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ct := range resp.Containers {
				got = append(got, ct.Metadata.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q (oldest first)", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"no filter", nil, []string{"web-main", "web-sidecar", "db-main"}},
		{"by id", &runtimeapi.ContainerStatsFilter{Id: containers["db-main"]}, []string{"db-main"}},
		{"by sandbox", &runtimeapi.ContainerStatsFilter{PodSandboxId: sandboxes["web"]}, []string{"web-main", "web-sidecar"}},
		{"by label", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"tier": "aux"}}, []string{"web-sidecar"}},
	} {
		t.Run("container stats "+tc.name, func(t *testing.T) {
			resp, err := c.Runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range resp.Stats {
				got = append(got, st.Attributes.Metadata.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q (oldest first)", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"no filter", nil, []string{"web", "db"}},
		{"by id", &runtimeapi.PodSandboxFilter{Id: sandboxes["db"]}, []string{"db"}},
		{"by state", &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}, []string{"web"}},
		{"by label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "db"}}, []string{"db"}},
		{"by pod UID", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podUIDLabel: "uid-db"}}, []string{"db"}},
		{"by pod UID and state", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podUIDLabel: "uid-db"},
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}, nil},
	} {
		t.Run("sandboxes "+tc.name, func(t *testing.T) {
			resp, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sb := range resp.Items {
				got = append(got, sb.Metadata.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q (oldest first)", got, tc.want)
			}
		})
	}
}

// podUIDLabel is the label a kubelet filters one pod's sandboxes and containers by.
const podUIDLabel = kubelettypes.KubernetesPodUIDLabel

// TestListByPodUIDFollowsRemovals checks that lists by pod UID forget what was removed
// and see what is created again under the same UID.
func TestListByPodUIDFollowsRemovals(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	pullBusybox(t, c)
	byUID := map[string]string{podUIDLabel: "uid-web"}
	names := func() (sandboxes, containers []string) {
		t.Helper()
		sbs, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: byUID}})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range sbs.Items {
			sandboxes = append(sandboxes, sb.Metadata.Name)
		}
		cts, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: byUID}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ct := range cts.Containers {
			containers = append(containers, ct.Metadata.Name)
		}
		return sandboxes, containers
	}
	run := func() (sandboxID string, containerIDs []string) {
		t.Helper()
		sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("web", byUID)})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"main", "sidecar"} {
			ct, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig(name, byUID)})
			if err != nil {
				t.Fatal(err)
			}
			containerIDs = append(containerIDs, ct.ContainerId)
		}
		return sb.PodSandboxId, containerIDs
	}

	sandboxID, containerIDs := run()
	if _, err := c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerIDs[1]}); err != nil {
		t.Fatal(err)
	}
	if sbs, cts := names(); !slices.Equal(sbs, []string{"web"}) || !slices.Equal(cts, []string{"main"}) {
		t.Errorf("after removing the sidecar: sandboxes %q, containers %q; want [web], [main]", sbs, cts)
	}
	if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	if sbs, cts := names(); len(sbs)+len(cts) != 0 {
		t.Errorf("after removing the sandbox: sandboxes %q, containers %q; want none", sbs, cts)
	}
	run()
	if sbs, cts := names(); !slices.Equal(sbs, []string{"web"}) || !slices.Equal(cts, []string{"main", "sidecar"}) {
		t.Errorf("created again: sandboxes %q, containers %q; want [web], [main sidecar]", sbs, cts)
	}
}

func TestUnknownIDs(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	const id = "0000000000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"RemovePodSandbox is idempotent", func() error {
			_, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		}, codes.OK},
		{"RemoveContainer is idempotent", func() error {
			_, err := c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}, codes.OK},
		{"StopPodSandbox is NotFound", func() error {
			_, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}, codes.NotFound},
		{"PodSandboxStatus is NotFound", func() error {
			_, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			return err
		}, codes.NotFound},
		{"ContainerStatus is NotFound", func() error {
			_, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		}, codes.NotFound},
		{"StopContainer is NotFound", func() error {
			_, err := c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
			return err
		}, codes.NotFound},
		{"StartContainer is NotFound", func() error {
			_, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}, codes.NotFound},
		{"CreateContainer in an unknown sandbox is NotFound", func() error {
			_, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: containerConfig("c", nil)})
			return err
		}, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); status.Code(err) != tc.want {
				t.Errorf("got %v, want %s", err, tc.want)
			}
		})
	}
}

func TestSandboxAndContainerNamesAreReserved(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	pullBusybox(t, c)
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second sandbox with the same name and attempt: %v, want AlreadyExists", err)
	}
	create := func() error {
		_, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig("c", nil)})
		return err
	}
	if err := create(); err != nil {
		t.Fatal(err)
	}
	if err := create(); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second container with the same name and attempt: %v, want AlreadyExists", err)
	}
	if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)}); err != nil {
		t.Errorf("sandbox name not released by RemovePodSandbox: %v", err)
	}
}

func TestNoContainersInANotReadySandbox(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	pullBusybox(t, c)
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)})
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig("early", nil)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // StopPodSandbox may be repeated
		if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig("late", nil)}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CreateContainer in a stopped sandbox: %v, want FailedPrecondition", err)
	}
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("StartContainer in a stopped sandbox: %v, want FailedPrecondition", err)
	}
}

// TestRuntimeHandlers: a sandbox runs with the default handler "" or the one named
// after the runtime, and reports it; any other handler (a RuntimeClass's this runtime
// does not have) fails the sandbox in containerd's words, naming the handler.
func TestRuntimeHandlers(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	st, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var handlers []string
	for _, h := range st.GetRuntimeHandlers() {
		handlers = append(handlers, h.GetName())
	}
	if !slices.Equal(handlers, []string{"", sim.RuntimeName}) {
		t.Errorf("Status runtime handlers %q", handlers)
	}
	for i, handler := range []string{"", sim.RuntimeName} {
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{
			Config: sandboxConfig("handler-"+string(rune('a'+i)), nil), RuntimeHandler: handler,
		})
		if err != nil {
			t.Fatalf("handler %q: %v", handler, err)
		}
		st, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.GetPodSandboxId()})
		if err != nil || st.GetStatus().GetRuntimeHandler() != handler {
			t.Errorf("handler %q: status %v %v", handler, st.GetStatus().GetRuntimeHandler(), err)
		}
	}
	_, err = c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("handler-x", nil), RuntimeHandler: "test-handler"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `failed to get sandbox runtime: no runtime for "test-handler" is configured`) {
		t.Errorf("unknown handler: %v", err)
	}
}
