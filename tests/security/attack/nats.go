package attack

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// natsAttempt connects with cert and tries a's subject. nats-server answers a
// permissions violation asynchronously ("-ERR 'Permissions Violation ...'"), so the
// attempt waits for it, or for what it tried to get, whichever comes first.
func natsAttempt(ctx context.Context, a Attempt, cert *tls.Certificate) (bool, string) {
	var (
		mu        sync.Mutex
		violation error
	)
	violated := make(chan struct{}, 1)
	opts := []nats.Option{
		nats.Secure(clientTLS(cert)),
		nats.Timeout(3 * time.Second),
		nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			defer mu.Unlock()
			if violation == nil && isRefusal(err) {
				violation = err
				violated <- struct{}{}
			}
		}),
	}
	// Replies come to the inbox a connection of this certificate may read: what the
	// legitimate client does (skiff.events' publishers read _INBOX.<their token>), so
	// a request is judged on its subject, not on its reply.
	if cert != nil && cert.Leaf != nil {
		opts = append(opts, nats.CustomInboxPrefix("_INBOX."+strings.ReplaceAll(cert.Leaf.Subject.CommonName, ".", "_")))
	}
	nc, err := nats.Connect(a.Target, opts...)
	if err != nil {
		if isRefusal(err) || strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "certificate") {
			return true, "connect: " + err.Error()
		}
		return false, "unreachable: " + err.Error()
	}
	defer nc.Close()
	refusal := func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return true, violation.Error()
	}
	// settle waits long enough for the server's verdict on what was sent: a PING's
	// PONG comes after any -ERR about what preceded it.
	settle := func() bool {
		_ = nc.FlushTimeout(3 * time.Second)
		select {
		case <-violated:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}
	switch a.Door {
	case NATSSubscribe:
		msgs := make(chan *nats.Msg, 1)
		sub, err := nc.ChanSubscribe(a.Subject, msgs)
		if err != nil {
			return true, err.Error()
		}
		defer sub.Unsubscribe()
		if settle() {
			return refusal()
		}
		// Not refused: the subscription stands. Whether anything flows on it now is
		// beside the point, but say so when something does.
		select {
		case m := <-msgs:
			return false, "subscribed; received a message on " + m.Subject
		case <-violated:
			return refusal()
		case <-time.After(time.Second):
			return false, "subscribed to " + a.Subject
		}
	case NATSRequest:
		type answer struct {
			msg *nats.Msg
			err error
		}
		answered := make(chan answer, 1)
		go func() {
			msg, err := nc.RequestWithContext(ctx, a.Subject, a.Body)
			answered <- answer{msg, err}
		}()
		select {
		case <-violated:
			return refusal()
		case ans := <-answered:
			if ans.err != nil {
				if settle() {
					return refusal()
				}
				// No answer at all: nothing was obtained.
				return true, ans.err.Error()
			}
			return false, "answered: " + truncate(string(ans.msg.Data))
		}
	case NATSPublish:
		if err := nc.Publish(a.Subject, a.Body); err != nil {
			return true, err.Error()
		}
		if settle() {
			return refusal()
		}
		return false, "published to " + a.Subject
	}
	return false, "unknown NATS door"
}

// isRefusal reports whether err is nats-server saying no.
func isRefusal(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) ||
		strings.Contains(strings.ToLower(err.Error()), "permissions violation") ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
