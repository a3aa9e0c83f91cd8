package cm

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntimeConfigServer is a CRI runtime service that implements only
// RuntimeConfig, answering resp (or, with nil, Unimplemented as a runtime
// without the RPC does). A fake: the real runtimes here either lack the RPC
// (skiff's, Debian's containerd 1.6) or cannot run in a unit test.
type fakeRuntimeConfigServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	resp *runtimeapi.RuntimeConfigResponse
}

func (s *fakeRuntimeConfigServer) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	if s.resp == nil {
		return s.UnimplementedRuntimeServiceServer.RuntimeConfig(ctx, req)
	}
	return s.resp, nil
}

// serveCRI serves srv over gRPC on a unix socket and returns a client to it.
func serveCRI(t *testing.T, srv runtimeapi.RuntimeServiceServer) runtimeapi.RuntimeServiceClient {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, srv)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

func TestCgroupDriverFromCRI(t *testing.T) {
	linux := func(d runtimeapi.CgroupDriver) *runtimeapi.RuntimeConfigResponse {
		return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}
	}
	tests := []struct {
		name       string
		resp       *runtimeapi.RuntimeConfigResponse
		configured CgroupDriver
		want       CgroupDriver
		wantErr    string
	}{
		{"the runtime's systemd wins over the flag", linux(runtimeapi.CgroupDriver_SYSTEMD), CgroupDriverCgroupfs, CgroupDriverSystemd, ""},
		{"the runtime's cgroupfs wins over the flag", linux(runtimeapi.CgroupDriver_CGROUPFS), CgroupDriverSystemd, CgroupDriverCgroupfs, ""},
		{"Unimplemented: the flag", nil, CgroupDriverSystemd, CgroupDriverSystemd, ""},
		{"no linux section: the flag", &runtimeapi.RuntimeConfigResponse{}, CgroupDriverSystemd, CgroupDriverSystemd, ""},
		{"an unknown driver is an error", linux(runtimeapi.CgroupDriver(7)), CgroupDriverCgroupfs, "", "unknown cgroup driver 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := serveCRI(t, &fakeRuntimeConfigServer{resp: tt.resp})
			got, err := CgroupDriverFromCRI(context.Background(), client, tt.configured, slog.Default())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
