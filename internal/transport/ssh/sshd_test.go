package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// These tests run a real OpenSSH sshd on 127.0.0.1 (the deployer host has one; the
// lab installs it). They need no lab containers, so they run in every `go test` where
// sshd exists and the test runs as root; otherwise they skip and say why.

type sshd struct {
	dir      string
	port     int
	hostKey  string // authorized_keys line of the host key
	keyFile  string // client private key authorised on it
	knownHos string
}

func startSSHD(t *testing.T) *sshd {
	t.Helper()
	bin := "/usr/sbin/sshd"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("sshd is not installed (lab/install-host.sh installs openssh-server): %v", err)
		}
		t.Skip("no /usr/sbin/sshd on this machine: the real-sshd tests cannot run")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatal("the real-sshd tests start sshd, which needs root: run the lab tests as root")
		}
		t.Skip("the real-sshd tests start sshd, which needs root")
	}
	dir := t.TempDir()
	keygen := func(path string) {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", path).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v %s", err, out)
		}
	}
	keygen(filepath.Join(dir, "host_ed25519"))
	keygen(filepath.Join(dir, "client"))
	pub, _ := os.ReadFile(filepath.Join(dir, "client.pub"))
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	hostPub, _ := os.ReadFile(filepath.Join(dir, "host_ed25519.pub"))
	f := strings.Fields(string(hostPub))
	s := &sshd{dir: dir, port: freePort(t), hostKey: f[0] + " " + f[1], keyFile: filepath.Join(dir, "client")}
	s.knownHos = filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(s.knownHos, []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", s.port, s.hostKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`ListenAddress 127.0.0.1:%d
HostKey %s/host_ed25519
AuthorizedKeysFile %s/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
PidFile %s/sshd.pid
`, s.port, dir, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll("/run/sshd", 0o755) // sshd's privilege separation directory
	cmd := exec.Command(bin, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("sshd log:\n%s", log.String())
		}
	})
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			closeQuietly(c) // only probing that sshd listens
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sshd did not listen on 127.0.0.1:%d: %s", s.port, log.String())
	return nil
}

func (s *sshd) config() Config {
	return Config{Host: "127.0.0.1", Port: s.port, HostKey: s.hostKey, PrivateKeyFile: s.keyFile}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	mustClose(t, l)
	return port
}

func tctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

var awkwardArgs = []string{"", " ", "a b", "'", `"`, `\`, "$HOME", "`id`", "$(id)", "a'b\"c", "*", "\n", "x\ty", ";", "|", "&", "#", "!", "-n", "--", "é ü", `'\''`}

// roundTrip has the node print its argv NUL-separated and compares.
func roundTrip(t *testing.T, tr deploybody.Transport) {
	t.Helper()
	res, err := tr.Run(tctx(t), append([]string{"printf", `%s\0`}, awkwardArgs...), deploybody.RunOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v exit %d stderr %s", err, res.ExitCode, res.Stderr)
	}
	got := strings.Split(string(res.Stdout), "\x00")
	got = got[:len(got)-1]
	if len(got) != len(awkwardArgs) {
		t.Fatalf("node saw %d args %q, want %d", len(got), got, len(awkwardArgs))
	}
	for i := range got {
		if got[i] != awkwardArgs[i] {
			t.Errorf("arg %d: node saw %q, want %q", i, got[i], awkwardArgs[i])
		}
	}
	res, err = tr.Run(tctx(t), []string{"sh", "-c", "exit 7"}, deploybody.RunOptions{})
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("exit 7: got %d, %v", res.ExitCode, err)
	}
	res, err = tr.Run(tctx(t), []string{"cat"}, deploybody.RunOptions{Stdin: []byte("through stdin")})
	if err != nil || string(res.Stdout) != "through stdin" {
		t.Fatalf("stdin: %q %v", res.Stdout, err)
	}
}

func TestRealSSHDQuotingAndReuse(t *testing.T) {
	s := startSSHD(t)
	tr, err := New("local", s.config(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, tr)
	roundTrip(t, tr)
	if n := tr.Client().Dials(); n != 1 {
		t.Fatalf("%d dials for several commands, want one reused connection", n)
	}
	// Kill the TCP connection under the SSH connection: the next call re-dials.
	tr.Client().mu.Lock()
	_ = tr.Client().conn.net.Close()
	tr.Client().mu.Unlock()
	res, err := tr.Run(tctx(t), []string{"echo", "again"}, deploybody.RunOptions{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "again" {
		t.Fatalf("after the connection dropped: %q %v", res.Stdout, err)
	}
	if n := tr.Client().Dials(); n != 2 {
		t.Fatalf("dials = %d after a drop, want 2", n)
	}
	if err := tr.Reach(tctx(t)); err != nil && !strings.Contains(err.Error(), "systemd does not") {
		t.Fatalf("reach: %v", err) // the deployer host has no systemd: it answers, systemd does not
	}
}

func TestRealSSHDHostKeys(t *testing.T) {
	s := startSSHD(t)
	ctx := tctx(t)
	run := func(cfg Config) error {
		c, err := NewClient(cfg, nil)
		if err != nil {
			return err
		}
		defer mustClose(t, c)
		_, err = c.Exec(ctx, []string{"true"}, nil, nil, nil)
		return err
	}
	hostPub, _, _, _, _ := gossh.ParseAuthorizedKey([]byte(s.hostKey))
	fp := gossh.FingerprintSHA256(hostPub)

	t.Run("pinned host_key", func(t *testing.T) {
		if err := run(s.config()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("known_hosts", func(t *testing.T) {
		cfg := s.config()
		cfg.HostKey, cfg.KnownHostsFile = "", s.knownHos
		if err := run(cfg); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown host refused with fingerprint", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "known_hosts")
		_ = os.WriteFile(empty, []byte("[127.0.0.1]:1 "+s.hostKey+"\n"), 0o600)
		cfg := s.config()
		cfg.HostKey, cfg.KnownHostsFile = "", empty
		err := run(cfg)
		var hk *HostKeyError
		if !errors.As(err, &hk) || len(hk.Want) != 0 || !strings.Contains(err.Error(), fp) || !strings.Contains(err.Error(), "unknown host key") {
			t.Fatalf("err = %v, want an unknown host key error showing %s", err, fp)
		}
		if errors.Is(err, deploybody.ErrUnreachable) {
			t.Fatal("a refused host key must not read as unreachable (it would be retried)")
		}
	})
	t.Run("changed key refused", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other")
		_ = exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other).Run()
		otherPub, _ := os.ReadFile(other + ".pub")
		cfg := s.config()
		cfg.HostKey = strings.TrimSpace(string(otherPub))
		err := run(cfg)
		if err == nil || !strings.Contains(err.Error(), "HOST KEY MISMATCH") || !strings.Contains(err.Error(), fp) {
			t.Fatalf("err = %v, want a changed host key error showing %s", err, fp)
		}
		// The same through known_hosts.
		kh := filepath.Join(t.TempDir(), "known_hosts")
		_ = os.WriteFile(kh, []byte(fmt.Sprintf("[127.0.0.1]:%d %s", s.port, otherPub)), 0o600)
		cfg.HostKey, cfg.KnownHostsFile = "", kh
		if err := run(cfg); err == nil || !strings.Contains(err.Error(), "HOST KEY MISMATCH") {
			t.Fatalf("known_hosts: err = %v, want HOST KEY MISMATCH", err)
		}
	})
	t.Run("no host key source refused", func(t *testing.T) {
		t.Setenv("HOME", t.TempDir())
		cfg := s.config()
		cfg.HostKey = ""
		if err := run(cfg); err == nil || !strings.Contains(err.Error(), "insecure_ignore_host_key") {
			t.Fatalf("err = %v", err)
		}
		cfg.InsecureIgnoreHostKey = true
		if err := run(cfg); err != nil {
			t.Fatalf("insecure: %v", err)
		}
	})
	t.Run("wrong client key", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other")
		_ = exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other).Run()
		cfg := s.config()
		cfg.PrivateKeyFile = other
		err := run(cfg)
		if !errors.Is(err, errAuth) || errors.Is(err, deploybody.ErrUnreachable) {
			t.Fatalf("err = %v, want an authentication error", err)
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Fatal("key material in the error")
		}
	})
	t.Run("nothing listening is unreachable", func(t *testing.T) {
		cfg := s.config()
		cfg.Port = freePort(t)
		cfg.DialAttempts = 1
		if err := run(cfg); !errors.Is(err, deploybody.ErrUnreachable) {
			t.Fatalf("err = %v, want ErrUnreachable", err)
		}
	})
}

func TestRealSSHDAgentAndJump(t *testing.T) {
	s := startSSHD(t)
	// An ssh-agent (x/crypto's keyring speaking the agent protocol on a unix socket)
	// holding the client key.
	pem, _ := os.ReadFile(s.keyFile)
	key, err := gossh.ParseRawPrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: key}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, l)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = agent.ServeAgent(kr, c); closeQuietly(c) }()
		}
	}()
	agentCfg := s.config()
	agentCfg.PrivateKeyFile, agentCfg.AgentSocket = "", sock

	t.Run("agent", func(t *testing.T) {
		tr, err := New("agent", agentCfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer mustClose(t, tr)
		roundTrip(t, tr)
	})
	t.Run("jump host", func(t *testing.T) {
		// OpenSSH's direct-tcpip: the jump sshd opens the TCP connection to the target
		// (here the same sshd, the only loopback target without the lab; the lab test
		// jumps to a lab node). Target host key checks apply end to end.
		jump := agentCfg
		target := s.config()
		target.Jump = &jump
		tr, err := New("jumped", target, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		defer mustClose(t, tr)
		roundTrip(t, tr)
		res, err := tr.Run(tctx(t), []string{"sh", "-c", `echo "$SSH_CONNECTION"`}, deploybody.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The target sees its client on loopback from the jump host's side, not from us
		// directly: the source port is the jump sshd's, which we never opened.
		if f := strings.Fields(string(res.Stdout)); len(f) != 4 || f[0] != "127.0.0.1" {
			t.Fatalf("SSH_CONNECTION = %q", res.Stdout)
		}
		// A wrong target key is refused even through the jump.
		bad := target
		bad.HostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIWiYhsol3/p3B2LEReK2ZOYpaX+UmC9gbixEoLJWleG"
		c, err := NewClient(bad, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer mustClose(t, c)
		if _, err := c.Exec(tctx(t), []string{"true"}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "HOST KEY MISMATCH") {
			t.Fatalf("jumped with a wrong target key: %v", err)
		}
	})
}

// silentProxy forwards TCP to target until frozen; frozen, it stops moving bytes but
// keeps the sockets open: a network that went silent, which only keepalives detect.
type silentProxy struct {
	l      net.Listener
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{l: l}
	t.Cleanup(func() {
		closeQuietly(l)
		p.mu.Lock()
		for _, c := range p.conns {
			closeQuietly(c)
		}
		p.mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				closeQuietly(c)
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *silentProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for {
			p.mu.Lock()
			f := p.frozen
			p.mu.Unlock()
			if !f {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			closeQuietly(dst)
			return
		}
	}
}

func (p *silentProxy) freeze(f bool) {
	p.mu.Lock()
	p.frozen = f
	p.mu.Unlock()
}

func TestKeepaliveDetectsSilentConnection(t *testing.T) {
	s := startSSHD(t)
	p := newSilentProxy(t, fmt.Sprintf("127.0.0.1:%d", s.port))
	cfg := s.config()
	cfg.Port = p.l.Addr().(*net.TCPAddr).Port
	cfg.HostKey, cfg.InsecureIgnoreHostKey = "", true // the proxy's port is not in known_hosts
	cfg.Keepalive, cfg.ConnectTimeout = 200*time.Millisecond, time.Second
	c, err := NewClient(cfg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, c)
	if _, err := c.Exec(tctx(t), []string{"true"}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	cn := c.conn
	c.mu.Unlock()
	p.freeze(true)
	select {
	case <-cn.dead:
	case <-time.After(30 * time.Second): // a bound, not a speed assertion
		t.Fatal("a silent connection was not marked dead by its keepalives")
	}
	p.freeze(false)
	var out bytes.Buffer
	if _, err := c.Exec(tctx(t), []string{"echo", "back"}, nil, &out, nil); err != nil || strings.TrimSpace(out.String()) != "back" {
		t.Fatalf("after keepalive failure: %q %v", out.String(), err)
	}
	if c.Dials() != 2 {
		t.Fatalf("dials = %d, want 2", c.Dials())
	}
}

var _ remote.Runner = (*Client)(nil)

func TestPoolSharesOneConnectionPerTarget(t *testing.T) {
	s := startSSHD(t)
	var p Pool
	defer mustClose(t, &p)
	a, err := p.Transport("a", s.config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Transport("b", s.config(), nil)
	other := s.config()
	other.HostKey, other.KnownHostsFile = "", s.knownHos // another trust source: its own connection
	c, _ := p.Transport("c", other, nil)
	for _, tr := range []deploybody.Transport{a, b, c} {
		if res, err := tr.Run(tctx(t), []string{"true"}, deploybody.RunOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatal(err)
		}
		_ = tr.Close() // pooled: leaves the connection open
	}
	ca, cc := a.(pooled).client, c.(pooled).client
	if a.(pooled).client != b.(pooled).client || ca.Dials() != 1 || ca == cc || cc.Dials() != 1 {
		t.Fatalf("pool: a and b must share one connection, c its own (dials %d, %d)", ca.Dials(), cc.Dials())
	}
	if res, err := a.Run(tctx(t), []string{"true"}, deploybody.RunOptions{}); err != nil || res.ExitCode != 0 || ca.Dials() != 1 {
		t.Fatalf("after Close of a pooled transport: %v, dials %d", err, ca.Dials())
	}
}

// mustClose closes what a test opened; a failing Close fails the test.
func mustClose(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// closeQuietly closes a proxy's or probe's connection, where the peer or the other copy
// direction may have closed it first; that error says nothing about the code under test.
func closeQuietly(c io.Closer) {
	_ = c.Close()
}

// The agent path against OpenSSH's own ssh-agent (not x/crypto's keyring): the key is
// added with ssh-add and never read by the transport. Skips where ssh-agent is missing,
// unless the lab was asked for.
func TestRealSSHDOpenSSHAgent(t *testing.T) {
	s := startSSHD(t)
	agentBin, err := exec.LookPath("ssh-agent")
	if err != nil {
		if os.Getenv("FEDIVERSITY_LAB") == "1" {
			t.Fatalf("ssh-agent is not installed (lab/install-host.sh installs openssh-client): %v", err)
		}
		t.Skip("no ssh-agent on this machine (openssh-client provides it)")
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(agentBin, "-D", "-a", sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; i < 50; i++ { // bounded: 5 s for the socket to appear
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	add := exec.Command("ssh-add", s.keyFile)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}
	cfg := s.config()
	cfg.PrivateKeyFile, cfg.AgentSocket = "", sock
	tr, err := New("openssh-agent", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, tr)
	roundTrip(t, tr)

	// An agent without the key is refused at once, as a refusal (not unreachable).
	del := exec.Command("ssh-add", "-D")
	del.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := del.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add -D: %v: %s", err, out)
	}
	cfg.DialAttempts = 1
	empty, err := New("openssh-agent-empty", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, empty)
	if _, err := empty.Run(tctx(t), []string{"true"}, deploybody.RunOptions{}); !errors.Is(err, deploybody.ErrRefused) {
		t.Fatalf("an agent without the key: err = %v, want ErrRefused", err)
	}
}
