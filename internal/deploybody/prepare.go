package deploybody

import (
	"errors"
	"fmt"
	"strings"
)

// The phases that bring the closure to the node: build, wait for node, push closure.

func (r *run) build() (string, error) {
	if r.o.Toplevel != "" {
		if !validStorePath(r.o.Toplevel) {
			return "", withHint(fmt.Errorf("toplevel %q is not a clean absolute store path", r.o.Toplevel), "set toplevel to the store path of the built system")
		}
		r.setToplevel(r.o.Toplevel)
		return "prebuilt toplevel", nil
	}
	if r.o.Cache != nil && r.o.CacheKey != "" {
		toplevel, ok, why := r.o.Cache.Lookup(r.o.CacheKey)
		if why != "" {
			r.warn(PhaseBuild, "evaluation cache: "+why)
		}
		if ok {
			r.setToplevel(toplevel)
			r.res.CacheHit = true
			return "evaluation cache hit", nil
		}
	}
	if r.o.Build == nil {
		return "", withHint(errors.New("no toplevel was given and there is no way to build one"), "set toplevel to a prebuilt system, or configure the build")
	}
	toplevel, err := r.o.Build(r.ctx)
	if err != nil {
		return "", withHint(fmt.Errorf("building the system: %w", err), "fix the evaluation or build error; nothing was copied to the node")
	}
	toplevel = strings.TrimSpace(toplevel)
	if !validStorePath(toplevel) {
		return "", withHint(fmt.Errorf("the build returned %q, which is not a clean absolute store path", toplevel), "the build must print the toplevel's store path")
	}
	r.setToplevel(toplevel)
	if r.o.Cache != nil && r.o.CacheKey != "" {
		if err := r.o.Cache.Store(r.o.CacheKey, toplevel, r.o.Clock.Now()); err != nil {
			r.warn(PhaseBuild, "evaluation cache not written (not an error): "+err.Error())
		}
	}
	return "built", nil
}

func (r *run) setToplevel(toplevel string) {
	r.toplevel = toplevel
	r.res.Toplevel = toplevel
}

// ---- wait for node ----

func (r *run) waitForNode() (string, error) {
	deadline := r.o.Clock.Now().Add(r.o.Timings.NodeWait)
	var lastErr error
	for attempt := 1; attempt <= maxSamples; attempt++ {
		lastErr = r.t.Reach(r.ctx)
		if lastErr == nil {
			return fmt.Sprintf("answered at attempt %d", attempt), nil
		}
		if errors.Is(lastErr, ErrRefused) {
			return "", withHint(fmt.Errorf("the node refused the connection: %w", lastErr),
				"retrying will not help: fix the host key pin or the credentials named above, then apply again")
		}
		if r.verdictOnly && errors.Is(lastErr, ErrSystemdUnanswered) {
			// The node answers; only its systemd does not. The verdict shows the unit
			// states as unread instead of calling the node unreachable.
			r.warn(PhaseWaitForNode, "the node answers but its systemd does not: "+lastErr.Error())
			return "node answered; systemd did not (unit states will be unread)", nil
		}
		if r.ctx.Err() != nil || !r.o.Clock.Now().Before(deadline) {
			break
		}
		r.log(LevelDebug, PhaseWaitForNode, "node not answering yet", map[string]any{"attempt": attempt, "error": lastErr.Error()})
		if err := r.o.Clock.Sleep(r.ctx, r.o.Timings.SampleInterval); err != nil {
			return "", err
		}
	}
	if r.verdictOnly {
		r.nodeSilent = true
		r.warn(PhaseWaitForNode, fmt.Sprintf("node did not answer within node_wait (%s): %v", r.o.Timings.NodeWait, lastErr))
		return "node silent; the chain wait samples it", nil
	}
	return "", withHint(fmt.Errorf("node did not answer within node_wait (%s): %w", r.o.Timings.NodeWait, lastErr),
		"check that the node is up and the transport's address and credentials; raise timings.node_wait if it boots slowly")
}

// ---- push closure ----

// macListScript prints "<interface dir> <address>" for each network interface.
const macListScript = `for f in /sys/class/net/*/address; do [ -r "$f" ] && printf '%s %s\n' "${f%/address}" "$(cat "$f")"; done; true`

func (r *run) pushClosure() (string, error) {
	if err := r.checkHardwareAddresses(); err != nil {
		return "", err
	}
	stats, err := r.t.CopyClosure(r.ctx, r.toplevel)
	if err != nil {
		return "", withHint(fmt.Errorf("copying %s: %w", r.toplevel, err), "check the node's free space and the transport; nothing was switched")
	}
	r.res.Copy = stats
	return fmt.Sprintf("%d of %d paths sent, %d bytes", stats.PathsMissing, stats.PathsTotal, stats.BytesSent), nil
}

// checkHardwareAddresses refuses a closure whose link files match a permanent
// hardware address the node does not have (it would rename or misconfigure the wrong
// interface), before anything is copied.
func (r *run) checkHardwareAddresses() error {
	requirements, err := readLinkRequirements(r.tree, r.toplevel)
	if err != nil {
		return withHint(err, "the toplevel's files must be readable on the deployer (see local_root)")
	}
	if len(requirements) == 0 {
		return nil
	}
	res, err := r.remote("sh", "-c", macListScript)
	if err != nil {
		return withHint(fmt.Errorf("reading the node's hardware addresses: %w", err), "the closure's link files need them; check the transport")
	}
	nodeMACs := map[string]bool{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 {
			if mac, ok := normalizeMAC(fields[1]); ok {
				nodeMACs[mac] = true
			}
		}
	}
	for _, req := range requirements {
		found := false
		for _, mac := range req.MACs {
			found = found || nodeMACs[mac]
		}
		if !found {
			return withHint(
				fmt.Errorf("refusing the closure before the copy: link file %s matches PermanentMACAddress=%s, which node %s does not have (it has %s)",
					req.File, strings.Join(req.MACs, " "), r.o.Node, strings.Join(sortedKeys(nodeMACs), ", ")),
				"the closure was built for other hardware: correct the node's hardware address in its configuration, or deploy it to the machine that has it")
		}
	}
	return nil
}
