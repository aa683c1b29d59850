// Package ssh is the SSH transport (golang.org/x/crypto/ssh): host keys pinned by
// default, agent or key-file authentication, an optional jump host, keepalives and one
// connection per node reused across calls and re-dialled when it dies. The node-side
// work (copy, switch, boot entry) is internal/transport/remote's.
//
// It must not import the plugin framework. Private keys and agent material never reach
// argv, errors or logs.
package ssh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Config says how to reach one node.
type Config struct {
	Host string
	Port int    // 22 when 0
	User string // root when empty

	// HostKey pins the node's host key (authorized_keys format: "ssh-ed25519 AAAA…").
	HostKey string
	// KnownHostsFile is checked when HostKey is empty (~/.ssh/known_hosts when both are
	// empty and it exists).
	KnownHostsFile string
	// InsecureIgnoreHostKey accepts any host key. Only for throwaway labs.
	InsecureIgnoreHostKey bool

	// PrivateKeyFile (unencrypted) and/or AgentSocket (an ssh-agent's unix socket)
	// authenticate; at least one is needed.
	PrivateKeyFile string
	AgentSocket    string

	// Jump, if set, is the host the connection is tunnelled through (ssh -J).
	Jump *Config

	// Keepalive is the interval of keepalive@openssh.com requests (15 s when 0,
	// none when negative). An unanswered one marks the connection dead.
	Keepalive time.Duration
	// ConnectTimeout bounds the TCP connect plus the SSH handshake (15 s when 0).
	ConnectTimeout time.Duration
	// DialAttempts bounds how often a dead connection is re-dialled per call (3 when 0).
	DialAttempts int

	// Sudo runs the commands that change the system through `sudo -n` (remote.Transport.Sudo).
	Sudo bool
}

func (c Config) port() int {
	if c.Port == 0 {
		return 22
	}
	return c.Port
}

func (c Config) user() string {
	if c.User == "" {
		return "root"
	}
	return c.User
}

// Addr is host:port.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.port())) }

// String names the target for messages: user@host:port (via jump).
func (c Config) String() string {
	s := c.user() + "@" + c.Addr()
	if c.Jump != nil {
		s += " via " + c.Jump.String()
	}
	return s
}

func (c Config) keepalive() time.Duration {
	if c.Keepalive == 0 {
		return 15 * time.Second
	}
	return c.Keepalive
}

func (c Config) connectTimeout() time.Duration {
	if c.ConnectTimeout <= 0 {
		return 15 * time.Second
	}
	return c.ConnectTimeout
}

func (c Config) dialAttempts() int {
	if c.DialAttempts <= 0 {
		return 3
	}
	return c.DialAttempts
}

// Validate reports configuration errors before any dial.
func (c Config) Validate() error {
	if c.Host == "" {
		return errors.New("ssh: host is empty")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("ssh: port %d out of range", c.Port)
	}
	if c.PrivateKeyFile == "" && c.AgentSocket == "" {
		return fmt.Errorf("ssh %s: no credentials: set a private key file or an agent socket", c)
	}
	if c.HostKey != "" {
		if _, _, _, _, err := gossh.ParseAuthorizedKey([]byte(c.HostKey)); err != nil {
			return fmt.Errorf("ssh %s: host_key is not in authorized_keys format (\"ssh-ed25519 AAAA…\"): %v", c, err)
		}
	}
	if c.Jump != nil {
		if err := c.Jump.Validate(); err != nil {
			return fmt.Errorf("jump host: %w", err)
		}
	}
	return nil
}

// HostKeyError is a refused host key: unknown or changed. It is never retried.
type HostKeyError struct {
	Addr        string
	Offered     string // SHA256 fingerprint the server offered
	OfferedType string
	Want        []string // fingerprints that were expected (empty: the host is unknown)
	Source      string   // "host_key" or the known_hosts file
}

func (e *HostKeyError) Error() string {
	if len(e.Want) == 0 {
		return fmt.Sprintf("ssh %s: unknown host key %s %s: %s has no key for this host. "+
			"Check the fingerprint out of band (e.g. `ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub` on the node), "+
			"then set host_key to the node's public host key or add it to %s",
			e.Addr, e.OfferedType, e.Offered, e.Source, keyFileStem(e.OfferedType), e.Source)
	}
	// "Mismatch", not "changed": a pin seen for the first time may simply be wrong.
	return fmt.Sprintf("ssh %s: HOST KEY MISMATCH: the server offered %s %s, but %s pins %s. "+
		"The pin may be wrong, the node may have been re-installed, or someone may be intercepting the connection: "+
		"check the offered fingerprint out of band before you update %s",
		e.Addr, e.OfferedType, e.Offered, e.Source, strings.Join(e.Want, ", "), e.Source)
}

func keyFileStem(t string) string {
	switch {
	case strings.Contains(t, "ed25519"):
		return "ed25519"
	case strings.Contains(t, "ecdsa"):
		return "ecdsa"
	case strings.Contains(t, "rsa"):
		return "rsa"
	}
	return "*"
}

// hostKeyCheck returns the host key callback and the host key algorithms to ask for
// (so that a server with several host keys offers the pinned kind).
func (c Config) hostKeyCheck() (gossh.HostKeyCallback, []string, error) {
	if c.InsecureIgnoreHostKey {
		return gossh.InsecureIgnoreHostKey(), nil, nil
	}
	if c.HostKey != "" {
		pinned, _, _, _, err := gossh.ParseAuthorizedKey([]byte(c.HostKey))
		if err != nil {
			return nil, nil, fmt.Errorf("ssh %s: host_key: %v", c, err)
		}
		want := gossh.FingerprintSHA256(pinned)
		cb := func(_ string, _ net.Addr, key gossh.PublicKey) error {
			if key.Type() == pinned.Type() && string(key.Marshal()) == string(pinned.Marshal()) {
				return nil
			}
			return &HostKeyError{Addr: c.Addr(), Offered: gossh.FingerprintSHA256(key), OfferedType: key.Type(), Want: []string{want}, Source: "host_key"}
		}
		return cb, algorithmsFor(pinned.Type()), nil
	}
	file := c.KnownHostsFile
	if file == "" {
		home, _ := os.UserHomeDir()
		file = filepath.Join(home, ".ssh", "known_hosts")
		if _, err := os.Stat(file); err != nil {
			return nil, nil, fmt.Errorf("ssh %s: no host key to check the node against: set host_key (the node's public host key) or known_hosts_file; insecure_ignore_host_key = true skips the check (throwaway labs only)", c)
		}
	}
	kh, err := knownhosts.New(file)
	if err != nil {
		return nil, nil, fmt.Errorf("ssh %s: known hosts file: %v", c, err)
	}
	cb := func(hostname string, remote net.Addr, key gossh.PublicKey) error {
		err := kh(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			he := &HostKeyError{Addr: c.Addr(), Offered: gossh.FingerprintSHA256(key), OfferedType: key.Type(), Source: file}
			for _, w := range ke.Want {
				he.Want = append(he.Want, w.Key.Type()+" "+gossh.FingerprintSHA256(w.Key))
			}
			return he
		}
		return err
	}
	// Ask known_hosts which key types it has for this host (a probe with a throwaway
	// key returns them as KeyError.Want), and request exactly those.
	var algos []string
	var ke *knownhosts.KeyError
	if errors.As(kh(c.Addr(), probeAddr{c.Addr()}, probeKey{}), &ke) {
		for _, w := range ke.Want {
			algos = append(algos, algorithmsFor(w.Key.Type())...)
		}
	}
	if len(algos) == 0 {
		// Unknown host: ask for the ed25519 key first, as OpenSSH does, so the
		// fingerprint in the error is the one operators usually record.
		algos = preferredHostKeyAlgorithms
	}
	return cb, algos, nil
}

var preferredHostKeyAlgorithms = []string{
	gossh.KeyAlgoED25519, gossh.KeyAlgoECDSA256, gossh.KeyAlgoECDSA384, gossh.KeyAlgoECDSA521,
	gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256,
}

func algorithmsFor(keyType string) []string {
	if keyType == gossh.KeyAlgoRSA {
		return []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSA}
	}
	return []string{keyType}
}

type probeAddr struct{ s string }

func (a probeAddr) Network() string { return "tcp" }
func (a probeAddr) String() string  { return a.s }

// probeKey is a key no known_hosts line holds.
type probeKey struct{}

func (probeKey) Type() string                          { return "fediversity-probe" }
func (probeKey) Marshal() []byte                       { return []byte("fediversity-probe") }
func (probeKey) Verify([]byte, *gossh.Signature) error { return errors.New("probe") }
