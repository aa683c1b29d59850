package node

// The import address of fediversity_node_switch and fediversity_verdict.

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// importAddress is a parsed import ID.
type importAddress struct {
	Node   string
	Target kit.TransportTarget
}

// parseImportAddress parses the import ID of fediversity_node_switch and
// fediversity_verdict:
//
//	ssh://[user@]host[:port]/node[?known_hosts_file=…|host_key=…] (user root, port 22 by default)
//	incus://[remote]/project/instance (remote "local" by default; the node is the instance)
//	incus://[remote]/project/instance/node (an explicit node name)
func parseImportAddress(id string) (importAddress, error) {
	const want = "want ssh://[user@]host[:port]/node or incus://remote/project/instance"
	u, err := url.Parse(id)
	if err != nil {
		return importAddress{}, fmt.Errorf("import address %q: %v; %s", id, err, want)
	}
	if u.Fragment != "" {
		return importAddress{}, fmt.Errorf("import address %q has a fragment; %s", id, want)
	}
	query := u.Query()
	for k := range query {
		if u.Scheme != "ssh" || (k != "host_key" && k != "known_hosts_file") {
			return importAddress{}, fmt.Errorf("import address %q: unknown parameter %q (an ssh address takes host_key= or known_hosts_file=)", id, k)
		}
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) == 1 && segs[0] == "" {
		segs = nil
	}
	switch u.Scheme {
	case "ssh":
		if u.Hostname() == "" {
			return importAddress{}, fmt.Errorf("import address %q names no host; %s", id, want)
		}
		if len(segs) != 1 || !validNodeName(segs[0]) {
			return importAddress{}, fmt.Errorf("import address %q: the path must be exactly one node name; %s", id, want)
		}
		if _, hasPass := u.User.Password(); hasPass {
			return importAddress{}, fmt.Errorf("import address %q carries a password: credentials come from the provider, never from an address", id)
		}
		t := kit.TransportTarget{Kind: "ssh", Host: u.Hostname(), Port: kit.DefaultSSHPort, User: kit.DefaultSSHUser, Keepalive: kit.DefaultKeepalive}
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return importAddress{}, fmt.Errorf("import address %q: port %q is not 1…65535", id, p)
			}
			t.Port = n
		}
		if u.User != nil && u.User.Username() != "" {
			t.User = u.User.Username()
		}
		t.HostKey = query.Get("host_key")
		t.KnownHostsFile = query.Get("known_hosts_file")
		return importAddress{Node: segs[0], Target: t}, nil
	case "incus":
		if u.User != nil {
			return importAddress{}, fmt.Errorf("import address %q: an incus address carries no user; %s", id, want)
		}
		if len(segs) != 2 && len(segs) != 3 {
			return importAddress{}, fmt.Errorf("import address %q: want project/instance[/node] after the remote; %s", id, want)
		}
		for _, s := range segs {
			if !validNodeName(s) {
				return importAddress{}, fmt.Errorf("import address %q: %q is not a valid project, instance or node name", id, s)
			}
		}
		remote := u.Host
		if remote == "" {
			remote = kit.LocalRemote
		}
		t := kit.TransportTarget{Kind: "incus", Remote: remote, Project: segs[0], Instance: segs[1]}
		node := segs[1]
		if len(segs) == 3 {
			node = segs[2]
		}
		return importAddress{Node: node, Target: t}, nil
	default:
		return importAddress{}, fmt.Errorf("import address %q: unknown scheme %q; %s", id, u.Scheme, want)
	}
}

// validNodeName accepts the names of nodes, instances and projects: letters, digits,
// '-', '_', '.', not starting with '.' or '-'.
func validNodeName(s string) bool {
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
