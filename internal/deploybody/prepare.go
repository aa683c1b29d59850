package deploybody

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// The phases that bring the closure to the node: build, wait for node, push closure.
// The lock-node phase between the last two is lock.go's and earlierreverts.go's.

// built is what the build phase produces.
type built struct {
	toplevel string
	cacheHit bool
}

func (e *runEnv) build(ctx context.Context) (built, string, error) {
	if e.o.Toplevel != "" {
		if !validStorePath(e.o.Toplevel) {
			return built{}, "", withHint(fmt.Errorf("toplevel %q is not a clean absolute store path", e.o.Toplevel), "set toplevel to the store path of the built system")
		}
		return built{toplevel: e.o.Toplevel}, "prebuilt toplevel", nil
	}
	if e.o.Cache != nil && e.o.CacheKey != "" {
		toplevel, ok, why := e.o.Cache.Lookup(e.o.CacheKey)
		if why != "" {
			e.warn(ctx, PhaseBuild, "evaluation cache: "+why)
		}
		if ok {
			return built{toplevel: toplevel, cacheHit: true}, "evaluation cache hit", nil
		}
	}
	if e.o.Build == nil {
		return built{}, "", withHint(errors.New("no toplevel was given and there is no way to build one"), "set toplevel to a prebuilt system, or configure the build")
	}
	toplevel, err := e.o.Build(ctx)
	if err != nil {
		return built{}, "", withHint(fmt.Errorf("building the system: %w", err), "fix the evaluation or build error; nothing was copied to the node")
	}
	toplevel = strings.TrimSpace(toplevel)
	if !validStorePath(toplevel) {
		return built{}, "", withHint(fmt.Errorf("the build returned %q, which is not a clean absolute store path", toplevel), "the build must print the toplevel's store path")
	}
	if e.o.Cache != nil && e.o.CacheKey != "" {
		if err := e.o.Cache.Store(e.o.CacheKey, toplevel, e.o.Clock.Now()); err != nil {
			e.warn(ctx, PhaseBuild, "evaluation cache not written (not an error): "+err.Error())
		}
	}
	return built{toplevel: toplevel}, "built", nil
}

// ---- wait for node ----

// waitForNode waits for the node to answer. silent is true when, in verdict-only mode,
// it did not (the chain wait samples it then).
func (e *runEnv) waitForNode(ctx context.Context) (silent bool, note string, err error) {
	if err := e.resumeRestore(ctx); err != nil {
		return false, "", err
	}
	deadline := e.o.Clock.Now().Add(e.o.Timings.NodeWait)
	var lastErr error
	for attempt := 1; attempt <= maxSamples; attempt++ {
		lastErr = e.t.Reach(ctx)
		if lastErr == nil {
			return false, fmt.Sprintf("answered at attempt %d", attempt), nil
		}
		if errors.Is(lastErr, ErrRefused) {
			return false, "", withHint(fmt.Errorf("the node refused the connection: %w", lastErr),
				"retrying will not help: fix the host key pin or the credentials named above, then apply again")
		}
		if e.verdictOnly && errors.Is(lastErr, ErrSystemdUnanswered) {
			// The node answers; only its systemd does not. The verdict shows the unit
			// states as unread instead of calling the node unreachable.
			e.warn(ctx, PhaseWaitForNode, "the node answers but its systemd does not: "+lastErr.Error())
			return false, "node answered; systemd did not (unit states will be unread)", nil
		}
		if ctx.Err() != nil || !e.o.Clock.Now().Before(deadline) {
			break
		}
		e.log(ctx, LevelDebug, PhaseWaitForNode, "node not answering yet", map[string]any{"attempt": attempt, "error": lastErr.Error()})
		if err := e.sleep(ctx, e.o.Timings.SampleInterval); err != nil {
			return false, "", err
		}
	}
	if e.verdictOnly {
		e.warn(ctx, PhaseWaitForNode, fmt.Sprintf("node did not answer within node_wait (%s): %v", e.o.Timings.NodeWait, lastErr))
		return true, "node silent; the chain wait samples it", nil
	}
	return false, "", withHint(fmt.Errorf("node did not answer within node_wait (%s): %w", e.o.Timings.NodeWait, lastErr),
		"check that the node is up and the transport's address and credentials; raise timings.node_wait if it boots slowly")
}

// ---- push closure ----

// pushClosure copies toplevel's closure to the node and returns what was sent.
func (e *runEnv) pushClosure(ctx context.Context, toplevel string) (CopyStats, string, error) {
	if err := e.checkHardwareAddresses(ctx, toplevel); err != nil {
		return CopyStats{}, "", err
	}
	stats, err := e.t.CopyClosure(ctx, toplevel)
	if err != nil {
		return CopyStats{}, "", withHint(fmt.Errorf("copying %s: %w", toplevel, err), "check the node's free space and the transport; nothing was switched")
	}
	return stats, fmt.Sprintf("%d of %d paths sent, %d bytes", stats.PathsMissing, stats.PathsTotal, stats.BytesSent), nil
}

// checkHardwareAddresses refuses a closure whose link files match a permanent
// hardware address the node does not have (it would rename or misconfigure the wrong
// interface), before anything is copied.
func (e *runEnv) checkHardwareAddresses(ctx context.Context, toplevel string) error {
	requirements, err := readLinkRequirements(e.tree, toplevel)
	if err != nil {
		return withHint(err, "the toplevel's files must be readable on the deployer (see local_root)")
	}
	if len(requirements) == 0 {
		return nil
	}
	res, err := e.remote(ctx, toplevel, "sh", "-c", hardwareAddressScript)
	if err != nil {
		return withHint(fmt.Errorf("reading the node's hardware addresses: %w", err), "the closure's link files need them; check the transport")
	}
	has := nodeHardwareAddresses(string(res.Stdout))
	for _, req := range requirements {
		found := false
		for _, mac := range req.MACs {
			found = found || len(has[mac]) > 0
		}
		if !found {
			return withHint(
				fmt.Errorf("refusing the closure before the copy: link file %s matches PermanentMACAddress=%s, which node %s does not have (%s)",
					req.File, strings.Join(req.MACs, " "), e.o.Node, describeHardwareAddresses(has)),
				"the closure was built for other hardware: correct the node's hardware address in its configuration, or deploy it to the machine that has it")
		}
	}
	return nil
}

// validStorePath accepts a clean absolute path without whitespace or control
// characters: what a toplevel must look like before it reaches a command line.
func validStorePath(p string) bool { return nixstore.CleanAbsolutePath(p) }
