package nodespec

// The import address of a node: the inverse of Target.Address, one scheme per transport.

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ParseAddress parses a node's import address (the provider's import ID of
// fediversity_node_switch and fediversity_verdict; Target.Address writes it) into the
// node's name and its target:
//
//	ssh://[user@]host[:port]/node[?known_hosts_file=…|host_key=…] (user root, port 22 by default)
//	incus://[remote]/project/instance (remote "local" by default; the node is the instance)
//	incus://[remote]/project/instance/node (an explicit node name)
func ParseAddress(id string) (node string, target Target, err error) {
	const want = "want ssh://[user@]host[:port]/node or incus://remote/project/instance"
	u, err := url.Parse(id)
	if err != nil {
		return "", Target{}, fmt.Errorf("import address %q: %v; %s", id, err, want)
	}
	if u.Fragment != "" {
		return "", Target{}, fmt.Errorf("import address %q has a fragment; %s", id, want)
	}
	query := u.Query()
	for k := range query {
		if u.Scheme != "ssh" || (k != "host_key" && k != "known_hosts_file") {
			return "", Target{}, fmt.Errorf("import address %q: unknown parameter %q (an ssh address takes host_key= or known_hosts_file=)", id, k)
		}
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) == 1 && segs[0] == "" {
		segs = nil
	}
	switch u.Scheme {
	case "ssh":
		if u.Hostname() == "" {
			return "", Target{}, fmt.Errorf("import address %q names no host; %s", id, want)
		}
		if len(segs) != 1 || !ValidNodeName(segs[0]) {
			return "", Target{}, fmt.Errorf("import address %q: the path must be exactly one node name; %s", id, want)
		}
		if _, hasPass := u.User.Password(); hasPass {
			return "", Target{}, fmt.Errorf("import address %q carries a password: credentials come from the provider, never from an address", id)
		}
		t := Target{Kind: "ssh", Host: u.Hostname(), Port: DefaultSSHPort, User: DefaultSSHUser, Keepalive: DefaultKeepalive}
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return "", Target{}, fmt.Errorf("import address %q: port %q is not 1…65535", id, p)
			}
			t.Port = n
		}
		if u.User != nil && u.User.Username() != "" {
			t.User = u.User.Username()
		}
		t.HostKey = query.Get("host_key")
		t.KnownHostsFile = query.Get("known_hosts_file")
		return segs[0], t, nil
	case "incus":
		if u.User != nil {
			return "", Target{}, fmt.Errorf("import address %q: an incus address carries no user; %s", id, want)
		}
		if len(segs) != 2 && len(segs) != 3 {
			return "", Target{}, fmt.Errorf("import address %q: want project/instance[/node] after the remote; %s", id, want)
		}
		for _, s := range segs {
			if !ValidNodeName(s) {
				return "", Target{}, fmt.Errorf("import address %q: %q is not a valid project, instance or node name", id, s)
			}
		}
		remote := u.Host
		if remote == "" {
			remote = LocalRemote
		}
		t := Target{Kind: "incus", Remote: remote, Project: segs[0], Instance: segs[1]}
		node := segs[1]
		if len(segs) == 3 {
			node = segs[2]
		}
		return node, t, nil
	default:
		return "", Target{}, fmt.Errorf("import address %q: unknown scheme %q; %s", id, u.Scheme, want)
	}
}

// ValidNodeName accepts the names of nodes, instances and projects: letters, digits,
// '-', '_', '.', not starting with '.' or '-'.
func ValidNodeName(s string) bool {
	if s == "" || len(s) > 253 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, c := range s {
		if !nameRune(c) {
			return false
		}
	}
	return true
}

func nameRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}
