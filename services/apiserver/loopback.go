package apiserver

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver/authentication"
)

// loopback is the apiserver's client of itself, as kube-apiserver's loopback client
// config: requests go over in-memory connections (net.Pipe) to the apiserver's own
// handler, through the whole chain (authentication, flow control, authorization,
// admission), and authenticate as system:apiserver in system:masters. Nothing listens
// on a port and there is no credential to leak: a request is the loopback user only
// when it arrives on one of these connections. API Priority and Fairness's config
// controller reads FlowSchemas and PriorityLevelConfigurations and writes their status
// through it, as in kube.
type loopback struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	user   user.Info
}

func newLoopback() *loopback {
	return &loopback{
		conns: make(chan net.Conn), closed: make(chan struct{}),
		user: &user.DefaultInfo{Name: user.APIServerUser, UID: string(uuid.NewUUID()),
			Groups: []string{user.SystemPrivilegedGroup, authentication.AuthenticatedGroup}},
	}
}

// loopbackConnKey marks the context of a request that came over a loopback connection.
type loopbackConnKey struct{}

// AuthenticateRequest implements authentication.Authenticator: the loopback user for a
// request over a loopback connection; nothing (ok false) for any other.
func (l *loopback) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	if r.Context().Value(loopbackConnKey{}) != l {
		return nil, false, nil
	}
	return l.user, true, nil
}

// serve serves handler on the loopback connections until ctx ends; it returns once
// the requests in flight have (at most 5 s after ctx ends).
func (l *loopback) serve(ctx context.Context, handler http.Handler) {
	requestCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return requestCtx },
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, loopbackConnKey{}, l)
		},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(loopbackListener{l})
	}()
	<-ctx.Done()
	cancel()
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	<-done
}

// dial is the client side: one end of a new in-memory connection, whose other end the
// server accepts. It fails once the server has stopped.
func (l *loopback) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, net.ErrClosed
}

// config is a client-go config of the loopback: protobuf, as kube's loopback client,
// and no client-side rate limit to speak of (the server's own flow control exempts it).
func (l *loopback) config() *rest.Config {
	return &rest.Config{
		Host: "http://apiserver-loopback",
		Dial: l.dial,
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
		QPS: 50, Burst: 100,
		UserAgent: "skiff-apiserver-loopback",
	}
}

// loopbackListener is the server side of the loopback's connections.
type loopbackListener struct{ l *loopback }

func (ll loopbackListener) Accept() (net.Conn, error) {
	select {
	case c := <-ll.l.conns:
		return c, nil
	case <-ll.l.closed:
		return nil, net.ErrClosed
	}
}

func (ll loopbackListener) Close() error {
	ll.l.once.Do(func() { close(ll.l.closed) })
	return nil
}

func (loopbackListener) Addr() net.Addr { return loopbackAddr{} }

type loopbackAddr struct{}

func (loopbackAddr) Network() string { return "pipe" }
func (loopbackAddr) String() string  { return "apiserver-loopback" }
