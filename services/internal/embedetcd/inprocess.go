package embedetcd

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// InProcessClient returns an etcd client that calls this server's API functions
// directly, with no socket, gRPC framing or TLS between them (etcd's v3client), for
// the all-in-one, whose apiserver and etcd share a process. KV calls are traced with tp
// (nil: the global provider) under the names gRPC calls get ("etcdserverpb.KV/Txn"),
// so a Pod's trace reads the same as over the wire. The caller closes it.
func (e *Etcd) InProcessClient(tp trace.TracerProvider) *clientv3.Client {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	c := v3client.New(e.server.Server)
	kv := adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.server.Server))
	c.KV = clientv3.NewKVFromKVClient(tracedKV{KVClient: kv, kv: kv, tracer: tp.Tracer("skiff.dev/etcd")}, c)
	return c
}

// tracedKV is a KV client whose unary calls are client spans (RangeStream passes
// through untraced).
type tracedKV struct {
	pb.KVClient
	kv     pb.KVClient
	tracer trace.Tracer
}

// traced runs call in a span named as the gRPC method it stands for.
func traced[Req, Resp any](ctx context.Context, t trace.Tracer, method string, in Req, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), opts []grpc.CallOption) (Resp, error) {
	ctx, span := t.Start(ctx, "etcdserverpb.KV/"+method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", "etcdserverpb.KV"), attribute.String("rpc.method", method)))
	defer span.End()
	resp, err := call(ctx, in, opts...)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return resp, err
}

func (k tracedKV) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	return traced(ctx, k.tracer, "Range", in, k.kv.Range, opts)
}

func (k tracedKV) Put(ctx context.Context, in *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	return traced(ctx, k.tracer, "Put", in, k.kv.Put, opts)
}

func (k tracedKV) DeleteRange(ctx context.Context, in *pb.DeleteRangeRequest, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return traced(ctx, k.tracer, "DeleteRange", in, k.kv.DeleteRange, opts)
}

func (k tracedKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	return traced(ctx, k.tracer, "Txn", in, k.kv.Txn, opts)
}

func (k tracedKV) Compact(ctx context.Context, in *pb.CompactionRequest, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return traced(ctx, k.tracer, "Compact", in, k.kv.Compact, opts)
}
