package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// Client is one node's SSH connection, dialled on first use, reused by every call and
// re-dialled (a bounded number of times) when it died. It is a remote.Runner.
type Client struct {
	cfg Config
	log atomic.Pointer[remote.Logger]

	mu     sync.Mutex
	conn   *conn // nil or dead: dial on next use
	dials  uint64
	closed bool
}

var (
	_ remote.Runner  = (*Client)(nil)
	_ remote.Redials = (*Client)(nil)
	_ io.Closer      = (*Client)(nil)
)

// conn is one live SSH connection and what it owns.
type conn struct {
	client *gossh.Client
	net    net.Conn // the transport underneath the SSH connection (TCP, or a channel of the jump)
	jump   *conn    // the jump host's connection, closed with this one
	agent  net.Conn // the agent socket, if used
	dead   chan struct{}
	once   sync.Once
}

func (c *conn) markDead() {
	c.once.Do(func() { close(c.dead) })
}

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

func (c *conn) close() {
	c.markDead()
	_ = c.client.Close()
	if c.agent != nil {
		_ = c.agent.Close()
	}
	if c.jump != nil {
		c.jump.close()
	}
}

// NewClient checks cfg and returns a client; nothing is dialled yet.
func NewClient(cfg Config, log remote.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	c.SetLogger(log)
	return c, nil
}

// SetLogger replaces the logger of connection events (a pooled client outlives the
// request whose logger it was created with).
func (c *Client) SetLogger(log remote.Logger) { c.log.Store(&log) }

func (c *Client) logf(format string, args ...any) {
	if l := c.log.Load(); l != nil && *l != nil {
		(*l)(format, args...)
	}
}

// Dials counts the connections made so far (remote.Redials).
func (c *Client) Dials() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

// Close closes the connection; later calls fail.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn != nil {
		c.conn.close()
		c.conn = nil
	}
	return nil
}

// get returns the live connection, dialling when there is none or it died.
func (c *Client) get(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("ssh %s: connection closed", c.cfg)
	}
	if c.conn != nil && !c.conn.isDead() {
		return c.conn, nil
	}
	if c.conn != nil {
		c.conn.close()
		c.conn = nil
		c.logf("ssh %s: connection lost, re-dialling", c.cfg)
	}
	var err error
	for attempt := 1; attempt <= c.cfg.dialAttempts(); attempt++ {
		var cn *conn
		cn, err = dial(ctx, c.cfg)
		if err == nil {
			c.conn = cn
			c.dials++
			go c.keepalive(cn)
			return cn, nil
		}
		var hk *HostKeyError
		if errors.As(err, &hk) || errors.Is(err, errAuth) || ctx.Err() != nil {
			return nil, err // retrying cannot help
		}
		if attempt < c.cfg.dialAttempts() {
			c.logf("ssh %s: dial attempt %d failed: %v", c.cfg, attempt, err)
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
	}
	return nil, err
}

// keepalive sends keepalive@openssh.com on a ticker; a failed or unanswered one marks
// the connection dead (and closes it, which unblocks anything waiting on it).
func (c *Client) keepalive(cn *conn) {
	go func() {
		_ = cn.client.Wait()
		cn.markDead()
	}()
	every := c.cfg.keepalive()
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-cn.dead:
			return
		case <-t.C:
		}
		answered := make(chan error, 1)
		go func() {
			_, _, err := cn.client.SendRequest("keepalive@openssh.com", true, nil)
			answered <- err
		}()
		select {
		case err := <-answered:
			if err == nil {
				continue
			}
			c.logf("ssh %s: keepalive failed: %v", c.cfg, err)
		case <-time.After(every + c.cfg.connectTimeout()):
			c.logf("ssh %s: keepalive unanswered", c.cfg)
		case <-cn.dead:
			return
		}
		cn.markDead()
		_ = cn.client.Close()
		return
	}
}

var errAuth = errors.New("ssh authentication failed")

// dial connects (through the jump host, if any) and authenticates.
func dial(ctx context.Context, cfg Config) (*conn, error) {
	hostKey, algos, err := cfg.hostKeyCheck()
	if err != nil {
		return nil, err
	}
	signers, agentConn, err := cfg.signers()
	if err != nil {
		// Missing or unusable credentials: retrying cannot mend them.
		return nil, fmt.Errorf("%w (%w)", err, deploybody.ErrRefused)
	}
	cc := &gossh.ClientConfig{
		User:              cfg.user(),
		Auth:              []gossh.AuthMethod{gossh.PublicKeysCallback(func() ([]gossh.Signer, error) { return signers, nil })},
		HostKeyCallback:   hostKey,
		HostKeyAlgorithms: algos,
		Timeout:           cfg.connectTimeout(),
	}
	fail := func(err error) (*conn, error) {
		if agentConn != nil {
			_ = agentConn.Close()
		}
		return nil, err
	}

	var nc net.Conn
	var jump *conn
	if cfg.Jump != nil {
		jump, err = dial(ctx, *cfg.Jump)
		if err != nil {
			return fail(fmt.Errorf("ssh %s: jump host: %w", cfg, err))
		}
		dctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout())
		nc, err = jump.client.DialContext(dctx, "tcp", cfg.Addr())
		cancel()
		if err != nil {
			jump.close()
			return fail(fmt.Errorf("ssh %s: the jump host could not connect to %s: %v: %w", cfg, cfg.Addr(), err, deploybody.ErrUnreachable))
		}
	} else {
		d := net.Dialer{Timeout: cfg.connectTimeout(), KeepAlive: 30 * time.Second}
		nc, err = d.DialContext(ctx, "tcp", cfg.Addr())
		if err != nil {
			return fail(fmt.Errorf("ssh %s: connect: %v: %w", cfg, err, deploybody.ErrUnreachable))
		}
	}
	// Bound the handshake by the timeout and the context (a channel of the jump host
	// has no deadlines, so close the connection instead).
	stop := time.AfterFunc(cfg.connectTimeout(), func() { _ = nc.Close() })
	unwatch := context.AfterFunc(ctx, func() { _ = nc.Close() })
	sc, chans, reqs, err := gossh.NewClientConn(nc, cfg.Addr(), cc)
	timedOut := !stop.Stop()
	unwatch()
	if err != nil {
		_ = nc.Close()
		if jump != nil {
			jump.close()
		}
		var hk *HostKeyError
		switch {
		case errors.As(err, &hk):
			return fail(fmt.Errorf("%w (%w)", hk, deploybody.ErrRefused))
		case isAuthError(err):
			return fail(fmt.Errorf("ssh %s: %w: the node accepted none of the keys (check the private key file or agent, and the node's authorized_keys) (%w)", cfg, errAuth, deploybody.ErrRefused))
		case timedOut:
			return fail(fmt.Errorf("ssh %s: handshake timed out after %s: %w", cfg, cfg.connectTimeout(), deploybody.ErrUnreachable))
		}
		return fail(fmt.Errorf("ssh %s: handshake: %v: %w", cfg, err, deploybody.ErrUnreachable))
	}
	return &conn{client: gossh.NewClient(sc, chans, reqs), net: nc, jump: jump, agent: agentConn, dead: make(chan struct{})}, nil
}

func isAuthError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "unable to authenticate") || strings.Contains(s, "no supported methods remain")
}

// signers loads the key file and/or the agent's keys. Key material stays in memory.
func (cfg Config) signers() ([]gossh.Signer, net.Conn, error) {
	var signers []gossh.Signer
	if cfg.PrivateKeyFile != "" {
		pem, err := os.ReadFile(cfg.PrivateKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ssh %s: private key file: %v", cfg, err)
		}
		s, err := gossh.ParsePrivateKey(pem)
		clear(pem)
		if err != nil {
			var pp *gossh.PassphraseMissingError
			if errors.As(err, &pp) {
				return nil, nil, fmt.Errorf("ssh %s: private key file %s is encrypted: load it into an ssh-agent and set the agent socket instead", cfg, cfg.PrivateKeyFile)
			}
			return nil, nil, fmt.Errorf("ssh %s: private key file %s cannot be parsed (want an OpenSSH or PEM private key)", cfg, cfg.PrivateKeyFile)
		}
		signers = append(signers, s)
	}
	var agentConn net.Conn
	if cfg.AgentSocket != "" {
		ac, err := net.DialTimeout("unix", cfg.AgentSocket, cfg.connectTimeout())
		if err != nil {
			return nil, nil, fmt.Errorf("ssh %s: agent socket %s: %v", cfg, cfg.AgentSocket, err)
		}
		as, err := agent.NewClient(ac).Signers()
		if err != nil {
			_ = ac.Close()
			return nil, nil, fmt.Errorf("ssh %s: agent at %s: %v", cfg, cfg.AgentSocket, err)
		}
		if len(as) == 0 && len(signers) == 0 {
			_ = ac.Close()
			return nil, nil, fmt.Errorf("ssh %s: the agent at %s holds no keys (ssh-add one)", cfg, cfg.AgentSocket)
		}
		signers = append(signers, as...)
		agentConn = ac
	}
	return signers, agentConn, nil
}

// Exec runs argv on the node (remote.Runner). The command line is built with
// remote.ShellJoin: every element quoted. If the session cannot even be opened, the
// command was not sent, so it is retried once on a fresh connection.
func (c *Client) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	line, err := remote.ShellJoin(argv)
	if err != nil {
		return 0, err
	}
	for attempt := 1; ; attempt++ {
		cn, err := c.get(ctx)
		if err != nil {
			return 0, err
		}
		sess, err := cn.client.NewSession()
		if err != nil {
			cn.markDead()
			if attempt < 2 && ctx.Err() == nil {
				continue
			}
			return 0, &remote.TransportError{Err: fmt.Errorf("ssh %s: open session: %v: %w", c.cfg, err, deploybody.ErrUnreachable)}
		}
		return c.runSession(ctx, cn, sess, line, stdin, stdout, stderr)
	}
}

func (c *Client) runSession(ctx context.Context, cn *conn, sess *gossh.Session, line string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	// Once Wait has returned the channel is closed and Close reports io.EOF; a Close
	// error here has nothing left to tell the caller.
	defer func() { _ = sess.Close() }()
	if stdin != nil {
		sess.Stdin = stdin
	}
	sess.Stdout, sess.Stderr = orDiscard(stdout), orDiscard(stderr)
	if err := sess.Start(line); err != nil {
		cn.markDead()
		return 0, &remote.TransportError{Err: fmt.Errorf("ssh %s: start command: %v", c.cfg, err)}
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = sess.Signal(gossh.SIGTERM)
		_ = sess.Close()
		return 0, fmt.Errorf("ssh %s: %w", c.cfg, ctx.Err())
	case <-cn.dead:
		_ = sess.Close()
		return 0, &remote.TransportError{Err: fmt.Errorf("ssh %s: connection lost while the command ran", c.cfg)}
	}
	var ee *gossh.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		return ee.ExitStatus(), nil
	}
	// No exit status: the connection broke (or the server tore the session down).
	cn.markDead()
	return 0, &remote.TransportError{Err: fmt.Errorf("ssh %s: command ended without an exit status: %v", c.cfg, err)}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Fresh returns a new client to the same node that shares no connection with c, and
// tries the dial only once: the node-side revert is disarmed only by a login that
// proves sshd and the network accept new connections (remote.FreshDialer).
func (c *Client) Fresh() (remote.Runner, error) {
	cfg := c.cfg
	cfg.DialAttempts = 1
	return NewClient(cfg, nil)
}
