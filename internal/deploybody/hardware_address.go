package deploybody

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The node's side of the hardware address gate (checkHardwareAddresses): which
// addresses a link file's PermanentMACAddress= can match on the node.
//
// systemd.link(5): PermanentMACAddress= matches an interface's permanent address, "which
// may be different from the current one" (MACAddress= matches the current one). The
// current address of /sys/class/net/<if>/address is not enough: a bond's ports take the
// bond's address, and a link file's own MACAddress= replaces an interface's address, so
// a node that runs the very closure of its hardware would be refused on its next deploy.
// The kernel reports the permanent address over netlink (IFLA_PERM_ADDRESS, from a
// driver that read one from the hardware), and `ip -o link` prints it as "permaddr"
// when it differs from the current address (iproute2 ip/ipaddress.c, print_linkinfo).
// When it does not print one, the current address is the permanent one or there is
// none; the gate then counts the current address, unless the kernel made it up at
// random (addr_assign_type 1, NET_ADDR_RANDOM: a veth, a dummy, a NIC without one):
// such an interface has no permanent address, and no link file can match it.

// hardwareAddressScript prints, per interface, "sys <name> <current address>
// <addr_assign_type>" from sysfs, then `ip -o link`'s lines (the permanent addresses).
// A node without `ip` (a default NixOS system has it, iproute2) gives only the first.
const hardwareAddressScript = `for d in /sys/class/net/*; do [ -r "$d/address" ] && printf 'sys %s %s %s\n' "${d##*/}" "$(cat "$d/address")" "$(cat "$d/addr_assign_type" 2>/dev/null)"; done; ip -o link show 2>/dev/null; true`

// addrAssignRandom is addr_assign_type's NET_ADDR_RANDOM (include/uapi/linux/netdevice.h).
const addrAssignRandom = "1"

// ipLinkPermaddr is a line of `ip -o link` with a permanent address: "2: eth1: <…> …
// link/ether 02:… brd ff:… permaddr 00:16:3e:…" (an interface's name may carry "@peer").
var ipLinkPermaddr = regexp.MustCompile(`^\d+:\s+([^:@\s]+)(?:@\S+)?:.*\spermaddr\s+(\S+)`)

// nodeHardwareAddresses reads hardwareAddressScript's output: each address a
// PermanentMACAddress= can match, with the interfaces that have it.
func nodeHardwareAddresses(out string) map[string][]string {
	has := map[string][]string{}
	add := func(raw, iface string) {
		mac, ok := normalizeMAC(raw)
		if !ok || mac == "00:00:00:00:00:00" {
			return
		}
		for _, i := range has[mac] {
			if i == iface {
				return
			}
		}
		has[mac] = append(has[mac], iface)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "sys" {
			if len(f) >= 4 && f[3] == addrAssignRandom {
				continue
			}
			add(f[2], f[1])
			continue
		}
		if m := ipLinkPermaddr.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			add(m[2], m[1])
		}
	}
	return has
}

// describeHardwareAddresses lists the node's addresses for an error: "52:54:00:… (lan0),
// …", or says it has none.
func describeHardwareAddresses(has map[string][]string) string {
	if len(has) == 0 {
		return "none of its network interfaces has a permanent hardware address"
	}
	macs := make([]string, 0, len(has))
	for mac := range has {
		macs = append(macs, mac)
	}
	sort.Strings(macs)
	parts := make([]string, len(macs))
	for i, mac := range macs {
		parts[i] = fmt.Sprintf("%s (%s)", mac, strings.Join(has[mac], ", "))
	}
	return "it has " + strings.Join(parts, ", ")
}
