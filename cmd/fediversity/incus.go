package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
)

const incusUsage = `usage: fediversity incus inspect-copy [--project P] <instance> <snapshot> <new-name>

inspect-copy makes <new-name>, a stopped copy of the state a restore kept aside
(snapshot fediversity-bricked-<time> of <instance>, named in the deploy's error):
its root disk from the snapshot and, for each custom volume of the instance, a new
volume <new-name>-<device> copied from that volume's snapshot of the same name.
Nothing of the live node is in it: proxy devices and host-path disks are left out.
Start it with 'incus start <new-name>'; remove it with 'incus delete <new-name>' and
'incus storage volume delete <pool> <new-name>-<device>'. It reaches the local Incus
daemon (INCUS_SOCKET).
`

// runIncus runs `fediversity incus <subcommand>`.
func runIncus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "inspect-copy" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, incusUsage)
			return exitOK
		}
		fmt.Fprint(stderr, incusUsage)
		return exitBadInput
	}
	fs := flag.NewFlagSet("fediversity incus inspect-copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, incusUsage) }
	project := fs.String("project", "default", "the Incus project of the instance (the copy is made in it too)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitBadInput
	}
	if fs.NArg() != 3 {
		return badInput(stderr, fmt.Errorf("inspect-copy: want <instance> <snapshot> <new-name>, got %d arguments", fs.NArg()))
	}
	instance, snapshot, name := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "fediversity: connect to the local Incus daemon (INCUS_SOCKET): %v\n", err)
		return exitFailed
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	res, err := incustransport.InspectCopy(ctx, c.WithProject(*project), instance, snapshot, name)
	if err != nil {
		fmt.Fprintln(stderr, "fediversity:", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "made %s (stopped): its root disk is snapshot %s of %s\n", res.Instance, snapshot, instance)
	devices := make([]string, 0, len(res.Volumes))
	for dev := range res.Volumes {
		devices = append(devices, dev)
	}
	sort.Strings(devices)
	for _, dev := range devices {
		v := res.Volumes[dev]
		fmt.Fprintf(stdout, "  device %s: volume %s/%s, a copy of the volume's snapshot %s\n", dev, v.Pool, v.Volume, snapshot)
	}
	for _, m := range res.Masked {
		fmt.Fprintf(stdout, "  left out: %s\n", m)
	}
	fmt.Fprintf(stdout, "start it with `incus start %s`; remove it with `incus delete %s`", res.Instance, res.Instance)
	for _, dev := range devices {
		v := res.Volumes[dev]
		fmt.Fprintf(stdout, " and `incus storage volume delete %s %s`", v.Pool, v.Volume)
	}
	fmt.Fprintln(stdout)
	return exitOK
}
