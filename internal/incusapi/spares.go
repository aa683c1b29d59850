package incusapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Spare connections for the websocket handshakes of streamed execs.
//
// Each websocket takes a connection of its own, and a streamed exec has four, so every
// exec needs four connections the daemon has accepted. incusd accepts nothing while
// any client holds a new connection that has sent nothing (lazyconn.go): this client
// no longer makes such connections, but other clients of the same daemon may (any
// net/http client can, the incus command's included). Requests on connections the
// daemon accepted earlier are served all the while. So the client keeps a few of those:
// connections that have carried one request (GET /, the daemon's smallest answer) and
// wait, kept alive, for a handshake. An exec's handshakes take them first and are
// answered while new connections wait; the spares are made again in the background,
// where a wait behind another client's silent connection delays nobody.
//
// Seen in the lab with this client's own silent connections gone, on a daemon shared
// with other labs: a copy whose handshakes went on new connections waited out another
// client's stall (a probe's new connection waited 30 s, its open one answered in 3 ms)
// and failed.

// spareWant is how many spare connections a client keeps: one exec's four websockets,
// twice (a deploy opens its exec session and then the copy's exec).
const spareWant = 8

// spareFillTimeout bounds the making of one spare (it may wait behind another client's
// silent connection: up to the 30 s idle timeout of a net/http client, or longer).
const spareFillTimeout = 2 * time.Minute

// spareConn is a connection the daemon has accepted and answered, kept alive.
type spareConn struct {
	conn net.Conn
	br   *bufio.Reader
}

// spareConns is a client's pool of spare connections (shared by its WithProject
// copies). The zero of *spareConns (nil) keeps none.
type spareConns struct {
	dial func(ctx context.Context) (net.Conn, error)
	host string // the Host header of the daemon's address

	mu      sync.Mutex
	conns   []spareConn
	filling bool
}

func newSpareConns(host string, dial func(ctx context.Context) (net.Conn, error)) *spareConns {
	return &spareConns{dial: dial, host: host}
}

// take returns a spare, or ok false when there is none (or s is nil).
func (s *spareConns) take() (sc spareConn, ok bool) {
	if s == nil {
		return sc, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 0 {
		return sc, false
	}
	sc = s.conns[len(s.conns)-1]
	s.conns = s.conns[:len(s.conns)-1]
	return sc, true
}

// refill makes spares in the background until there are spareWant (one filler at a
// time; a failure stops it until the next refill).
func (s *spareConns) refill() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.filling || len(s.conns) >= spareWant {
		s.mu.Unlock()
		return
	}
	s.filling = true
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			s.filling = false
			s.mu.Unlock()
		}()
		for {
			s.mu.Lock()
			full := len(s.conns) >= spareWant
			s.mu.Unlock()
			if full {
				return
			}
			sc, err := s.make()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, sc)
			s.mu.Unlock()
		}
	}()
}

// make opens one connection and has the daemon answer one request on it.
func (s *spareConns) make() (spareConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), spareFillTimeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return spareConn{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	br := bufio.NewReaderSize(conn, 32<<10) // the websocket's reader later
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: fediversity\r\n\r\n", s.host); err != nil {
		_ = conn.Close()
		return spareConn{}, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = conn.Close()
		return spareConn{}, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		_ = conn.Close()
		return spareConn{}, fmt.Errorf("the daemon answered %s and did not keep the connection", resp.Status)
	}
	return spareConn{conn: conn, br: br}, nil
}
