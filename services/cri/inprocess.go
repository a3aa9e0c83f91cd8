package cri

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// InProcessConn is a CRI connection to runtime and image servers in the same process: a
// grpc.ClientConnInterface, so runtimeapi.NewRuntimeServiceClient and
// NewImageServiceClient work over it unchanged, whose unary calls run the servers'
// methods directly instead of crossing a socket. Each request is copied into a fresh
// message before the server sees it and each response into the caller's reply, as
// marshalling over a socket would, so neither side keeps a pointer into the other's
// memory. Errors reach the caller as gRPC statuses (codes.Unknown for an error that is not
// one), and a call whose context has ended fails with its code before the server runs.
// Streams are not served (NewStream answers codes.Unimplemented): the kubelet makes none.
//
// Hollow nodes (package kubelet/hollow) use it: over a unix socket, gRPC's framing and
// the marshalling on both ends cost a third of the hollow-node process's CPU, and what
// a hollow node simulates is the kubelet, not the runtime's transport. kubemark's hollow
// kubelets keep the socket (pkg/kubemark/hollow_kubelet.go with a fake remote runtime).
// The zero value is not usable; see NewInProcessConn.
type InProcessConn struct {
	methods map[string]inProcessMethod // by full method name, "/runtime.v1.RuntimeService/Version"
}

type inProcessMethod struct {
	server  any
	handler grpc.MethodHandler
}

// NewInProcessConn returns a connection to rs and is. Either may be nil; calls to a nil
// server's methods fail with codes.Unimplemented.
func NewInProcessConn(rs runtimeapi.RuntimeServiceServer, is runtimeapi.ImageServiceServer) *InProcessConn {
	c := &InProcessConn{methods: map[string]inProcessMethod{}}
	c.register(&runtimeapi.RuntimeService_ServiceDesc, rs)
	c.register(&runtimeapi.ImageService_ServiceDesc, is)
	return c
}

func (c *InProcessConn) register(desc *grpc.ServiceDesc, server any) {
	if server == nil {
		return
	}
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = inProcessMethod{server: server, handler: m.Handler}
	}
}

// Invoke runs method's server handler with a copy of args and copies its response into
// reply. Call options are ignored (there is no message size to bound, no retry to make).
func (c *InProcessConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", strings.TrimPrefix(method, "/"))
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	in, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "%s: request %T is not a protobuf message", method, args)
	}
	decode := func(into any) error {
		proto.Merge(into.(proto.Message), in)
		return nil
	}
	out, err := m.handler(m.server, ctx, decode, nil)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			err = status.Error(codes.Unknown, err.Error())
		}
		return err
	}
	dst, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "%s: reply %T is not a protobuf message", method, reply)
	}
	res, ok := out.(proto.Message)
	if !ok || !res.ProtoReflect().IsValid() {
		// Over a socket gRPC fails to marshal a nil response the same way.
		return status.Errorf(codes.Internal, "%s: the server returned no response", method)
	}
	proto.Reset(dst)
	proto.Merge(dst, res)
	return nil
}

// NewStream fails: no CRI stream is served in process.
func (c *InProcessConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "%s: streams are not served in process", strings.TrimPrefix(method, "/"))
}

// Close does nothing; it lets the connection stand where a *grpc.ClientConn is closed.
func (c *InProcessConn) Close() error { return nil }
