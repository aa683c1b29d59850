package incusapi

import (
	"context"
	"net"
	"os"
	"sync"
	"time"
)

// incusd holds up every new connection behind one that says nothing.
//
// incusd serves its unix socket through a listener that, inside its accept loop, reads
// the first 8 bytes of each connection it accepts before it accepts the next one (to
// tell a STARTTLS connection from plain HTTP: lxc/incus
// internal/server/endpoints/listeners/starttls.go, StarttlsListener.Accept peeks 8
// bytes). A client that connects and sends nothing holds the daemon's accept loop until
// it sends or closes: in the meantime no new connection of anyone is served, while
// requests on connections already open are.
//
// net/http's Transport makes such connections. A request that finds no idle connection
// starts a dial; when another connection becomes idle first, the request takes that one
// and the dialled connection goes to the idle pool without a byte written, where it
// stays until a later request takes it or the pool's idle timeout (30 s) closes it.
// Seen in the lab (bench-apply and a copy loop, load average 15-35): each stall began as
// the recorded exec beside the copy fetched and deleted its two output logs side by
// side (two requests at once: a dial that can go unused) and ended 30 s later, the idle
// timeout; the copy's four websocket handshakes, each a new connection, waited all that
// time, with every other client of the daemon, and the daemon failed the exec after 5 s
// without its websockets.
//
// So the client's unix connections are lazy: the socket is opened by the first write on
// it, which is the request itself. A dial the Transport never uses opens nothing.

// lazyUnixConn is a connection to the unix socket at path that is made by its first
// Write. Reads wait for it; Close before any write opens nothing.
type lazyUnixConn struct {
	path string

	mu     sync.Mutex
	conn   net.Conn      // nil until the first Write
	err    error         // the dial's failure, or net.ErrClosed after an early Close
	ready  chan struct{} // closed once conn or err is set
	closed bool
	// Deadlines set before the connection exists, applied when it is made.
	readDeadline, writeDeadline time.Time
}

func newLazyUnixConn(path string) *lazyUnixConn {
	return &lazyUnixConn{path: path, ready: make(chan struct{})}
}

// lazyDialTimeout bounds the connect of a lazy connection's first write (a unix connect
// is queued by the kernel at once; this bounds a daemon whose socket is gone or wedged).
const lazyDialTimeout = 30 * time.Second

// open makes the connection if it is not made yet and returns it.
func (c *lazyUnixConn) open() (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil || c.err != nil {
		return c.conn, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), lazyDialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		c.err = err
	} else {
		c.conn = conn
		if !c.readDeadline.IsZero() {
			_ = conn.SetReadDeadline(c.readDeadline)
		}
		if !c.writeDeadline.IsZero() {
			_ = conn.SetWriteDeadline(c.writeDeadline)
		}
	}
	close(c.ready)
	return c.conn, c.err
}

func (c *lazyUnixConn) Write(p []byte) (int, error) {
	conn, err := c.open()
	if err != nil {
		return 0, err
	}
	return conn.Write(p)
}

// Read waits until the first Write made the connection (net/http's Transport reads an
// idle connection to notice the daemon closing it) or Close ended it.
func (c *lazyUnixConn) Read(p []byte) (int, error) {
	<-c.ready
	c.mu.Lock()
	conn, err := c.conn, c.err
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return conn.Read(p)
}

func (c *lazyUnixConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.conn != nil {
		return c.conn.Close()
	}
	if c.err == nil {
		c.err = net.ErrClosed
		close(c.ready)
	}
	return nil
}

func (c *lazyUnixConn) LocalAddr() net.Addr { return &net.UnixAddr{Net: "unix"} }

func (c *lazyUnixConn) RemoteAddr() net.Addr { return &net.UnixAddr{Name: c.path, Net: "unix"} }

func (c *lazyUnixConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *lazyUnixConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline = t
	if c.conn != nil {
		return c.conn.SetReadDeadline(t)
	}
	return nil
}

func (c *lazyUnixConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeDeadline = t
	if c.conn != nil {
		return c.conn.SetWriteDeadline(t)
	}
	return nil
}

// dialUnixLazily is the Transport's dialer for the daemon's unix socket: it checks that
// the socket is there (so that a missing daemon is still a dial error) and returns a
// connection that opens on its first write.
func dialUnixLazily(path string) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := os.Stat(path); err != nil {
			return nil, &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: err}
		}
		return newLazyUnixConn(path), nil
	}
}
