package nodespec

import (
	"fmt"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// Defaults of an SSH target.
const (
	DefaultSSHPort   = 22
	DefaultSSHUser   = "root"
	DefaultKeepalive = 15 * time.Second
	// LocalRemote is the Incus daemon the front end is connected to.
	LocalRemote = "local"
)

// Target is a validated, resolved transport description: defaults filled in, no
// secrets. Kind is "ssh" or "incus".
type Target struct {
	Kind string

	// ssh
	Host                  string
	Port                  int
	User                  string
	HostKey               string
	KnownHostsFile        string
	InsecureIgnoreHostKey bool
	// Keepalive 0 turns keepalives off.
	Keepalive time.Duration
	Sudo      bool
	Jump      *Target

	// incus
	Instance string
	Project  string
	Remote   string
}

// Target resolves the spec's transport (validated by Validate): SSH defaults, and a
// jump host that shares the node's user and known_hosts file. An Incus project left
// empty stays empty: the front end knows its own default.
func (s Spec) Target() Target {
	if s.Incus != nil {
		remote := s.Incus.Remote
		if remote == "" {
			remote = LocalRemote
		}
		return Target{Kind: "incus", Instance: s.Incus.Instance, Project: s.Incus.Project, Remote: remote}
	}
	if s.SSH == nil {
		return Target{}
	}
	n := s.SSH
	keepalive, _ := parseKeepalive(n.Keepalive)
	t := Target{
		Kind: "ssh", Host: n.Host, Port: portOrDefault(n.Port), User: n.User,
		HostKey: n.HostKey, KnownHostsFile: n.KnownHostsFile, InsecureIgnoreHostKey: n.InsecureIgnoreHostKey,
		Keepalive: keepalive, Sudo: n.Sudo,
	}
	if t.User == "" {
		t.User = DefaultSSHUser
	}
	if j := n.Jump; j != nil {
		jt := Target{
			Kind: "ssh", Host: j.Host, Port: portOrDefault(j.Port), User: j.User,
			HostKey: j.HostKey, KnownHostsFile: j.KnownHostsFile,
			// insecure_ignore_host_key is the node's: the jump host keeps its own pin.
			Keepalive: t.Keepalive,
		}
		if jt.User == "" {
			jt.User = t.User
		}
		if jt.KnownHostsFile == "" {
			jt.KnownHostsFile = t.KnownHostsFile
		}
		t.Jump = &jt
	}
	return t
}

// Address is the import address of the target, e.g. ssh://root@127.0.0.1:2201/fedi-n1.
func (t Target) Address(node string) string {
	if t.Kind == "incus" {
		remote := t.Remote
		if remote == "" {
			remote = LocalRemote
		}
		return fmt.Sprintf("incus://%s/%s/%s", remote, t.Project, t.Instance)
	}
	return fmt.Sprintf("ssh://%s@%s/%s", t.User, HostPort(t.Host, t.Port), node)
}

// Credentials are the per-run SSH credentials: never in a spec, never printed.
type Credentials struct {
	PrivateKeyFile string
	AgentSocket    string
}

// SSHConfig is the SSH transport's configuration of an SSH target: the one builder
// both front ends use (host key pinning, keepalive, sudo, the jump host).
func (t Target) SSHConfig(creds Credentials) sshtransport.Config {
	c := sshtransport.Config{
		Host: t.Host, Port: t.Port, User: t.User,
		HostKey: t.HostKey, KnownHostsFile: t.KnownHostsFile, InsecureIgnoreHostKey: t.InsecureIgnoreHostKey,
		PrivateKeyFile: creds.PrivateKeyFile, AgentSocket: creds.AgentSocket,
		Keepalive: t.Keepalive, Sudo: t.Sudo,
	}
	if t.Keepalive == 0 {
		c.Keepalive = -1 // keepalive = "0s" turns them off
	}
	if t.Jump != nil {
		j := t.Jump.SSHConfig(creds)
		c.Jump = &j
	}
	return c
}

// CheckHostKey refuses a pinned host key that is not a public key in authorized_keys
// form; "" (not pinned) passes.
func CheckHostKey(key string) error {
	if key == "" {
		return nil
	}
	if _, _, _, _, err := gossh.ParseAuthorizedKey([]byte(key)); err != nil {
		return fmt.Errorf("%q is not in authorized_keys format (\"ssh-ed25519 AAAA…\"): %v. Copy it from the node's /etc/ssh/ssh_host_ed25519_key.pub", key, err)
	}
	return nil
}

func parseKeepalive(v string) (time.Duration, error) {
	if v == "" {
		return DefaultKeepalive, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return DefaultKeepalive, fmt.Errorf("keepalive = %q is not a non-negative Go duration such as \"15s\" (\"0s\" turns keepalives off)", v)
	}
	return d, nil
}

func portOrDefault(p int) int {
	if p == 0 {
		return DefaultSSHPort
	}
	return p
}

func (s SSH) portOrDefault() int { return portOrDefault(s.Port) }

// HostPort is host:port, bracketing an IPv6 address.
func HostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}
