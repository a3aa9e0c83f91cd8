package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	tunnelv1 "skiff.dev/proto/tunnel/v1"
)

// maxDataSize bounds one Data packet (bytes), well under gRPC's 4 MiB message limit.
const maxDataSize = 32 << 10

// packetStream is a Proxy stream from either end.
type packetStream interface {
	Send(*tunnelv1.Packet) error
	Recv() (*tunnelv1.Packet, error)
}

// tunnelAddr is the address a tunnel connection reports: the node and the dial id.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "tunnel" }
func (a tunnelAddr) String() string  { return string(a) }

// conn is exec-proxy's end of one tunnelled connection: a net.Conn over a Proxy stream.
// Reads come from a goroutine that receives Data packets (HTTP/2 flow control holds the
// agent back while nobody reads); writes send Data packets of at most maxDataSize bytes.
// Close ends the Proxy call (the server handler returns), which the agent sees as the
// end of the connection.
type conn struct {
	stream packetStream
	local  net.Addr
	remote net.Addr

	// incoming carries received payloads to Read; readErr is set before it is closed.
	incoming chan []byte
	readErr  error
	pending  []byte // what is left of the payload Read is consuming

	readMu   sync.Mutex
	writeMu  sync.Mutex
	deadline struct {
		sync.Mutex
		read, write time.Time
		readTimer   *time.Timer
		readExpired chan struct{}
	}

	closeOnce sync.Once
	done      chan struct{} // closed by Close
}

func newConn(stream packetStream, local, remote net.Addr) *conn {
	c := &conn{stream: stream, local: local, remote: remote, incoming: make(chan []byte), done: make(chan struct{})}
	c.deadline.readExpired = make(chan struct{})
	go c.receive()
	return c
}

// receive feeds Read until the stream ends: io.EOF when the agent closed its sending
// direction (the kubelet API closed the connection), the stream's error otherwise.
func (c *conn) receive() {
	defer close(c.incoming)
	for {
		p, err := c.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.readErr = io.EOF
			} else {
				c.readErr = &net.OpError{Op: "read", Net: "tunnel", Addr: c.remote, Err: err}
			}
			return
		}
		data := p.GetData().GetData()
		if len(data) == 0 {
			continue
		}
		select {
		case c.incoming <- data:
		case <-c.done:
			c.readErr = net.ErrClosed
			return
		}
	}
}

// Read reads what the kubelet API sent. Errors: io.EOF at its end, os.ErrDeadlineExceeded
// past the read deadline, net.ErrClosed after Close.
func (c *conn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(c.pending) == 0 {
		c.deadline.Lock()
		expired := c.deadline.readExpired
		c.deadline.Unlock()
		select {
		case data, ok := <-c.incoming:
			if !ok {
				select {
				case <-c.done:
					return 0, net.ErrClosed
				default:
				}
				return 0, c.readErr
			}
			c.pending = data
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		case <-c.done:
			return 0, net.ErrClosed
		}
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write sends b to the kubelet API in Data packets. A write deadline is checked before
// each packet (a packet already blocked on flow control waits until Close). Errors:
// net.ErrClosed after Close, os.ErrDeadlineExceeded, or the stream's.
func (c *conn) Write(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	written := 0
	for len(b) > 0 {
		select {
		case <-c.done:
			return written, net.ErrClosed
		default:
		}
		c.deadline.Lock()
		wd := c.deadline.write
		c.deadline.Unlock()
		if !wd.IsZero() && !time.Now().Before(wd) {
			return written, os.ErrDeadlineExceeded
		}
		n := min(len(b), maxDataSize)
		// Send does not keep the slice past its return: it is marshalled at once.
		if err := c.stream.Send(&tunnelv1.Packet{Kind: &tunnelv1.Packet_Data{Data: &tunnelv1.Data{Data: b[:n]}}}); err != nil {
			return written, &net.OpError{Op: "write", Net: "tunnel", Addr: c.remote, Err: err}
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

// Close ends the connection. It is safe to call more than once.
func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return nil
}

// Done is closed once Close has been called.
func (c *conn) Done() <-chan struct{} { return c.done }

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline makes a future Read fail with os.ErrDeadlineExceeded once t has
// passed (a Read already blocked keeps the deadline it started with); the zero time means
// none.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.deadline.Lock()
	defer c.deadline.Unlock()
	c.deadline.read = t
	if c.deadline.readTimer != nil {
		c.deadline.readTimer.Stop()
		c.deadline.readTimer = nil
	}
	// Each deadline has a channel of its own, closed only by its own timer.
	expired := make(chan struct{})
	c.deadline.readExpired = expired
	if t.IsZero() {
		return nil
	}
	if d := time.Until(t); d <= 0 {
		close(expired)
	} else {
		c.deadline.readTimer = time.AfterFunc(d, func() { close(expired) })
	}
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.deadline.Lock()
	defer c.deadline.Unlock()
	c.deadline.write = t
	return nil
}
