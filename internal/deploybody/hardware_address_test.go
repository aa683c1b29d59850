package deploybody

import (
	"reflect"
	"strings"
	"testing"
)

// What a node with a bond prints: eth0 and eth1 are the bond's ports and carry the
// bond's address (eth0's permanent one), so eth1's own permanent address is only in
// `ip -o link`'s permaddr; veth0 has an address the kernel made up; lan0's address was
// set by a link file's MACAddress=, its permanent one differs.
const bondedNodeOutput = `sys bond0 00:16:3e:00:00:01 2
sys eth0 00:16:3e:00:00:01 0
sys eth1 00:16:3e:00:00:01 3
sys lan0 02:00:00:00:00:99 3
sys lo 00:00:00:00:00:00 0
sys veth0 be:ef:00:00:00:07 1
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
2: eth0: <BROADCAST,MULTICAST,SLAVE,UP,LOWER_UP> mtu 1500 qdisc fq_codel master bond0 state UP mode DEFAULT group default qlen 1000\    link/ether 00:16:3e:00:00:01 brd ff:ff:ff:ff:ff:ff
3: eth1: <BROADCAST,MULTICAST,SLAVE,UP,LOWER_UP> mtu 1500 qdisc fq_codel master bond0 state UP mode DEFAULT group default qlen 1000\    link/ether 00:16:3e:00:00:01 brd ff:ff:ff:ff:ff:ff permaddr 00:16:3e:00:00:02
4: lan0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc fq_codel state UP mode DEFAULT group default qlen 1000\    link/ether 02:00:00:00:00:99 brd ff:ff:ff:ff:ff:ff permaddr 00:16:3E:00:00:03
5: bond0: <BROADCAST,MULTICAST,MASTER,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000\    link/ether 00:16:3e:00:00:01 brd ff:ff:ff:ff:ff:ff
6: veth0@veth1: <BROADCAST,MULTICAST,M-DOWN> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\    link/ether be:ef:00:00:00:07 brd ff:ff:ff:ff:ff:ff
`

func TestNodeHardwareAddresses(t *testing.T) {
	got := nodeHardwareAddresses(bondedNodeOutput)
	want := map[string][]string{
		"00:16:3e:00:00:01": {"bond0", "eth0", "eth1"},
		"00:16:3e:00:00:02": {"eth1"}, // a bond port's own permanent address
		"00:16:3e:00:00:03": {"lan0"}, // an interface whose address a link file replaced
		"02:00:00:00:00:99": {"lan0"}, // set, and ip printed no permaddr for it: may be permanent
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("nodeHardwareAddresses =\n%v\nwant\n%v", got, want)
	}
	if _, ok := got["be:ef:00:00:00:07"]; ok {
		t.Fatal("a random address (addr_assign_type 1) counted as a permanent one")
	}
	if d := describeHardwareAddresses(got); !strings.HasPrefix(d, "it has 00:16:3e:00:00:01 (bond0, eth0, eth1), 00:16:3e:00:00:02 (eth1)") {
		t.Fatalf("description %q", d)
	}
}

// A node without `ip` (or whose ip prints nothing) still gives sysfs' lines; a node with
// only lo and random addresses has none.
func TestNodeHardwareAddressesWithoutIP(t *testing.T) {
	if got := nodeHardwareAddresses("sys eth0 52:54:00:12:34:56 0\nsys lo 00:00:00:00:00:00 0\n"); !reflect.DeepEqual(got, map[string][]string{"52:54:00:12:34:56": {"eth0"}}) {
		t.Fatalf("got %v", got)
	}
	got := nodeHardwareAddresses("sys lo 00:00:00:00:00:00 0\nsys veth0 be:ef:00:00:00:07 1\n")
	if len(got) != 0 {
		t.Fatalf("got %v, want none", got)
	}
	if d := describeHardwareAddresses(got); d != "none of its network interfaces has a permanent hardware address" {
		t.Fatalf("description %q", d)
	}
}
