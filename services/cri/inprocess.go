package cri

import (
	"context"
	"io"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// InProcessConn is a CRI connection to runtime and image servers in the same process: a
// grpc.ClientConnInterface, so runtimeapi.NewRuntimeServiceClient and
// NewImageServiceClient work over it unchanged, whose unary calls run the servers'
// methods directly instead of crossing a socket. Each request is copied into a fresh
// message before the server sees it, as marshalling over a socket would, so the server
// keeps no pointer into the caller's memory. A response is not copied: the caller's reply
// takes the response's fields as they are (a shallow copy), so the reply's maps, lists
// and messages may be the server's own. That is safe because the runtimes built on
// criservice answer with messages built for the call, whose parts they never change
// afterwards (a container's labels, annotations, metadata and mounts are its config as
// created; an update replaces its resources rather than changing them), and because the
// caller treats a reply as read-only, as client-go's informer objects are: the kubelet
// reads CRI replies and builds its own status from them. Copying every reply's labels
// and annotations through protobuf reflection was most of what a hollow node's status
// calls cost (BenchmarkInProcessGetPodStatus: 15 µs and 162 allocations for one pod's
// four calls with the copy, 6 µs and 64 without). Errors reach the caller as gRPC
// statuses (codes.Unknown for an error that is not one), and a call whose context has
// ended fails with its code before the server runs.
// Streams (GetContainerEvents, which the kubelet's Evented PLEG reads) run the server's
// stream handler in a goroutine of their own: each message is copied on its way, a
// message sent is received before the stream's end is, and the stream ends when the
// handler returns or the caller's context ends, as a stream over a socket does.
//
// Hollow nodes (package kubelet/hollow) use it: over a unix socket, gRPC's framing and
// the marshalling on both ends cost a third of the hollow-node process's CPU, and what
// a hollow node simulates is the kubelet, not the runtime's transport. kubemark's hollow
// kubelets keep the socket (pkg/kubemark/hollow_kubelet.go with a fake remote runtime).
// The zero value is not usable; see NewInProcessConn.
type InProcessConn struct {
	methods map[string]inProcessMethod // by full method name, "/runtime.v1.RuntimeService/Version"
	streams map[string]inProcessStream // by full method name
}

type inProcessMethod struct {
	server  any
	handler grpc.MethodHandler
}

type inProcessStream struct {
	server  any
	handler grpc.StreamHandler
}

// NewInProcessConn returns a connection to rs and is. Either may be nil; calls to a nil
// server's methods fail with codes.Unimplemented.
func NewInProcessConn(rs runtimeapi.RuntimeServiceServer, is runtimeapi.ImageServiceServer) *InProcessConn {
	c := &InProcessConn{methods: map[string]inProcessMethod{}, streams: map[string]inProcessStream{}}
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
	for _, st := range desc.Streams {
		c.streams["/"+desc.ServiceName+"/"+st.StreamName] = inProcessStream{server: server, handler: st.Handler}
	}
}

// Invoke runs method's server handler with a copy of args and sets reply's fields to its
// response's (shared, read-only: see InProcessConn). Call options are ignored (there is
// no message size to bound, no retry to make).
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
		return asCallStatus(ctx, err)
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
	// The reply takes the response's fields as they are, without copying what they
	// point to: see InProcessConn.
	return setFields(dst, res)
}

// NewStream starts method's stream handler with a server side joined to the returned
// client side. Messages are copied once on their way (the sender's is the sender's to
// reuse), and the receiver's message takes that copy's fields;
// SendMsg after the stream ended returns io.EOF and RecvMsg then returns the handler's
// error as a gRPC status (codes.Unknown for one that is not), or io.EOF when it returned
// nil. The handler's context ends when the caller's does or the handler returns.
func (c *InProcessConn) NewStream(ctx context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	st, ok := c.streams[method]
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", strings.TrimPrefix(method, "/"))
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	serverCtx, cancel := context.WithCancel(ctx)
	p := &streamPipe{
		clientCtx: ctx,
		serverCtx: serverCtx,
		toServer:  make(chan proto.Message),
		toClient:  make(chan proto.Message),
		sendDone:  make(chan struct{}),
		header:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	go func() {
		defer cancel()
		err := st.handler(st.server, (*serverSide)(p))
		if err != nil {
			err = asCallStatus(serverCtx, err)
		}
		p.err = err
		p.headerOnce.Do(func() { close(p.header) })
		close(p.done)
	}()
	return (*clientSide)(p), nil
}

// asCallStatus is err as the caller of an RPC sees it: a gRPC status as it is, the
// context's code when ctx has ended, codes.Unknown otherwise.
func asCallStatus(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

// streamPipe joins the two sides of an in-process stream. Messages cross unbuffered
// channels, so a message the server sent has been received before its handler returns.
type streamPipe struct {
	clientCtx, serverCtx context.Context
	toServer, toClient   chan proto.Message
	sendOnce             sync.Once
	sendDone             chan struct{} // closed by CloseSend
	headerOnce           sync.Once
	header               chan struct{} // closed when the server sent its headers, or ended
	headerSent           bool          // set before header is closed by SendHeader
	done                 chan struct{} // closed when the handler has returned
	err                  error         // the handler's, set before done is closed
}

// setFields resets dst and sets its fields to src's as they are (a shallow copy: what
// they point to is then src's too).
func setFields(dst any, src proto.Message) error {
	m, ok := dst.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "message %T is not a protobuf message", dst)
	}
	proto.Reset(m)
	into := m.ProtoReflect()
	src.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		into.Set(fd, v)
		return true
	})
	return nil
}

func cloneOf(m any) (proto.Message, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "message %T is not a protobuf message", m)
	}
	return proto.Clone(pm), nil
}

// clientSide is the grpc.ClientStream of an in-process stream.
type clientSide streamPipe

func (c *clientSide) Trailer() metadata.MD     { return nil }
func (c *clientSide) Context() context.Context { return c.clientCtx }

// Header waits, as over a socket, until the server has sent its headers (explicitly,
// or with its first message) or the stream has ended; headers carry no metadata here.
// A stream that ended without headers gives nil and no error, as grpc-go's does:
// RecvMsg tells how it ended.
func (c *clientSide) Header() (metadata.MD, error) {
	select {
	case <-c.header:
		if !c.headerSent {
			return nil, nil
		}
		return metadata.MD{}, nil
	case <-c.clientCtx.Done():
		return nil, status.FromContextError(c.clientCtx.Err()).Err()
	}
}

func (c *clientSide) CloseSend() error {
	c.sendOnce.Do(func() { close(c.sendDone) })
	return nil
}

func (c *clientSide) SendMsg(m any) error {
	msg, err := cloneOf(m)
	if err != nil {
		return err
	}
	select {
	case c.toServer <- msg:
		return nil
	case <-c.sendDone:
		return status.Error(codes.Internal, "SendMsg after CloseSend")
	case <-c.done:
		return io.EOF
	case <-c.clientCtx.Done():
		return io.EOF
	}
}

func (c *clientSide) RecvMsg(m any) error {
	select {
	case msg := <-c.toClient:
		return setFields(m, msg) // msg is the stream's own copy
	case <-c.done:
		if c.err != nil {
			return c.err
		}
		return io.EOF
	case <-c.clientCtx.Done():
		return status.FromContextError(c.clientCtx.Err()).Err()
	}
}

// serverSide is the grpc.ServerStream of an in-process stream.
type serverSide streamPipe

func (s *serverSide) SetHeader(metadata.MD) error { return nil }
func (s *serverSide) SetTrailer(metadata.MD)      {}
func (s *serverSide) Context() context.Context    { return s.serverCtx }

func (s *serverSide) SendHeader(metadata.MD) error {
	s.headerOnce.Do(func() {
		s.headerSent = true
		close(s.header)
	})
	return nil
}

func (s *serverSide) SendMsg(m any) error {
	msg, err := cloneOf(m)
	if err != nil {
		return err
	}
	_ = s.SendHeader(nil)
	select {
	case s.toClient <- msg:
		return nil
	case <-s.serverCtx.Done():
		return status.FromContextError(s.serverCtx.Err()).Err()
	}
}

func (s *serverSide) RecvMsg(m any) error {
	select {
	case msg := <-s.toServer:
		return setFields(m, msg) // msg is the stream's own copy
	case <-s.sendDone:
		return io.EOF
	case <-s.serverCtx.Done():
		return status.FromContextError(s.serverCtx.Err()).Err()
	}
}

// Close does nothing; it lets the connection stand where a *grpc.ClientConn is closed.
func (c *InProcessConn) Close() error { return nil }
