package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// SystemProfile is the system profile whose generations are the boot entries.
const SystemProfile = "/nix/var/nix/profiles/system"

// ResultDir is where the detached switch leaves its output and exit code on the node.
const ResultDir = "/run/fediversity"

// Actions switch-to-configuration accepts.
var validActions = map[string]bool{"switch": true, "boot": true, "test": true, "dry-activate": true}

// SwitchOptions tune the detached switch. Zero values take the defaults.
type SwitchOptions struct {
	// PollInterval between two reads of the result (default 250 ms: a read over a reused
	// connection costs milliseconds, and the poll adds up to one interval to every switch).
	PollInterval time.Duration
	// Grace is how long past the limit the result is still awaited (default 30 s):
	// systemd stops the unit at the limit, then the result file must appear.
	Grace time.Duration
	// MaxTransportErrors is how many consecutive failed polls are tolerated while the
	// connection is re-established (default 120, about 30 s at the default interval).
	MaxTransportErrors int
	// Log receives progress.
	Log Logger
}

func (o *SwitchOptions) defaults() {
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.MaxTransportErrors <= 0 {
		o.MaxTransportErrors = 120 // about 30 s of failed polls at the default interval
	}
}

// detachedScript runs switch-to-configuration and leaves its stdout, stderr and exit code
// in files; the exit code file is written last and atomically, so its presence means
// the switch is over. $1 toplevel, $2 action, $3 file prefix.
const detachedScript = `"$1/bin/switch-to-configuration" "$2" >"$3.out" 2>"$3.err"; ` +
	`echo $? >"$3.rc.tmp" && mv "$3.rc.tmp" "$3.rc"`

// pollScript prints "rc <code>" when the switch is over, else "unit <ActiveState>
// <LoadState>". $1 file prefix, $2 unit.
const pollScript = `if [ -e "$1.rc" ]; then printf 'rc %s\n' "$(cat "$1.rc")"; exit 0; fi; ` +
	`printf 'unit %s %s\n' "$(systemctl show -p ActiveState --value "$2" 2>/dev/null)" ` +
	`"$(systemctl show -p LoadState --value "$2" 2>/dev/null)"`

// SwitchUnitPrefix names the transient units of detached switches.
const SwitchUnitPrefix = "fediversity-switch-"

// Switch runs `<toplevel>/bin/switch-to-configuration <action>` on the node in a
// transient systemd unit (systemd-run --no-block, RuntimeMaxSec=limit), detached from
// the connection, and polls for its exit code file. A transport fault while polling is
// retried (the runner re-dials); the result is read, never guessed.
func Switch(ctx context.Context, r Runner, toplevel, action string, limit time.Duration, opts SwitchOptions) (deploybody.SwitchResult, error) {
	opts.defaults()
	var res deploybody.SwitchResult
	if !nixstore.ValidStorePath(toplevel) {
		return res, fmt.Errorf("switch: toplevel %q is not a store path", toplevel)
	}
	if !validActions[action] {
		return res, fmt.Errorf("switch: action %q is not one of switch, boot, test, dry-activate", action)
	}
	if limit <= 0 {
		return res, errors.New("switch: the time limit must be positive")
	}
	dialsBefore := dials(r)
	unit := SwitchUnitPrefix + randomHex(6)
	prefix := ResultDir + "/" + unit
	secs := int64((limit + time.Second - 1) / time.Second)

	startArgv := []string{"/bin/sh", "-c",
		`mkdir -p "$1" && shift && exec "$@"`, "sh", ResultDir,
		"systemd-run", "--unit=" + unit, "--description=fediversity switch-to-configuration " + action,
		"--property=RuntimeMaxSec=" + strconv.FormatInt(secs, 10) + "s",
		"--no-block", "--collect", "--quiet",
		"/bin/sh", "-c", detachedScript, "sh", toplevel, action, prefix}
	started := time.Now()
	sawTransportError := false
	if _, err := runSys(ctx, r, nil, startArgv...); err != nil {
		// A transport fault here leaves it open whether the unit started: polling tells.
		if !isTransportFault(err) {
			return res, fmt.Errorf("switch: start %s: %w", unit, err)
		}
		sawTransportError = true
		opts.Log.printf("switch: starting %s: %v; polling to learn whether it started", unit, err)
	} else {
		opts.Log.printf("switch: started %s (%s %s, limit %s)", unit, path.Base(toplevel), action, limit)
	}

	deadline := started.Add(limit + opts.Grace)
	transportErrors, gone := 0, 0
	var lastErr error
	for {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("switch: %w while waiting for %s (it keeps running on the node; see journalctl -u %s)", err, unit, unit)
		}
		out, err := runSys(ctx, r, nil, "/bin/sh", "-c", pollScript, "sh", prefix, unit)
		switch {
		case err != nil && isTransportFault(err):
			sawTransportError = true
			transportErrors++
			lastErr = err
			opts.Log.printf("switch: polling %s: %v (retry %d/%d)", unit, err, transportErrors, opts.MaxTransportErrors)
			if transportErrors >= opts.MaxTransportErrors {
				return res, fmt.Errorf("switch: lost the node while %s ran and could not reconnect after %d attempts: %w", unit, transportErrors, lastErr)
			}
		case err != nil:
			return res, fmt.Errorf("switch: poll %s: %w", unit, err)
		default:
			transportErrors = 0
			f := strings.Fields(out)
			if len(f) >= 2 && f[0] == "rc" {
				code, perr := strconv.Atoi(f[1])
				if perr != nil {
					return res, fmt.Errorf("switch: %s left an unreadable exit code %q", unit, f[1])
				}
				res.ExitCode = code
				var rerr error
				if res.Stdout, rerr = readResult(ctx, r, prefix+".out"); rerr != nil {
					return res, fmt.Errorf("switch: %s exited %d, but its output could not be read: %w", unit, code, rerr)
				}
				if res.Stderr, rerr = readResult(ctx, r, prefix+".err"); rerr != nil {
					return res, fmt.Errorf("switch: %s exited %d, but its messages could not be read: %w", unit, code, rerr)
				}
				_, _ = runSys(ctx, r, nil, "rm", "-f", prefix+".out", prefix+".err", prefix+".rc")
				res.Reconnected = sawTransportError || dials(r) > dialsBefore
				opts.Log.printf("switch: %s exited %d after %s (reconnected: %v)", unit, code, time.Since(started).Round(time.Millisecond), res.Reconnected)
				return res, nil
			}
			// Not over. A unit that is gone (collected) or failed without a result file
			// was killed (time limit) or never started; allow a few polls for the race
			// between the file and the unit's end.
			active, load := "", ""
			if len(f) >= 2 {
				active = f[1]
			}
			if len(f) >= 3 {
				load = f[2]
			}
			if load == "not-found" || active == "failed" || (active == "inactive" && time.Since(started) > 5*time.Second) {
				gone++
			} else {
				gone = 0
			}
			if gone >= 3 {
				if time.Since(started) >= limit {
					return res, fmt.Errorf("switch: %s %s did not finish within its time limit of %s; systemd stopped it, the node may be half-switched (see journalctl -u %s; raise the switch timeout if it needs longer)", path.Base(toplevel), action, limit, unit)
				}
				return res, fmt.Errorf("switch: %s ended (or never started) without leaving a result in %s (see journalctl -u %s)", unit, ResultDir, unit)
			}
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("switch: no result from %s within the limit %s plus %s grace (see journalctl -u %s)", unit, limit, opts.Grace, unit)
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.PollInterval):
		}
	}
}

// readResult reads a result file of the switch, retrying transport faults a few times
// (the connection may drop right after the exit code was read).
func readResult(ctx context.Context, r Runner, file string) (string, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var out string
		if out, err = runSys(ctx, r, nil, "cat", file); err == nil || !isTransportFault(err) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return "", err
}

func isTransportFault(err error) bool {
	var tf *TransportError
	return errors.Is(err, deploybody.ErrUnreachable) || errors.As(err, &tf)
}

// TransportError marks a Runner error as a transport fault (the connection broke) that
// is not (yet) ErrUnreachable; Switch retries those. Runners may also just wrap
// deploybody.ErrUnreachable.
type TransportError struct{ Err error }

func (e *TransportError) Error() string { return e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

func dials(r Runner) uint64 {
	if d, ok := r.(Redials); ok {
		return d.Dials()
	}
	return 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var generationLink = regexp.MustCompile(`^system-([0-9]+)-link$`)

// Generation returns the generation number the system profile points at now.
func Generation(ctx context.Context, r Runner) (int, error) {
	out, err := runSys(ctx, r, nil, "readlink", SystemProfile)
	if err != nil {
		return 0, fmt.Errorf("read the system profile %s: %w", SystemProfile, err)
	}
	m := generationLink.FindStringSubmatch(path.Base(strings.TrimSpace(out)))
	if m == nil {
		return 0, fmt.Errorf("the system profile %s points at %q, not at a system-<n>-link generation", SystemProfile, strings.TrimSpace(out))
	}
	return strconv.Atoi(m[1])
}

// Resolve returns the store path a link on the node resolves to ("" when it does not
// exist), e.g. /run/current-system or the system profile.
func Resolve(ctx context.Context, r Runner, link string) (string, error) {
	out, err := runSys(ctx, r, nil, "/bin/sh", "-c", `readlink -f "$1" 2>/dev/null || true`, "sh", link)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", link, err)
	}
	p := strings.TrimSpace(out)
	if p == "" || p == link {
		return "", nil
	}
	return p, nil
}

// FinalizeBoot points the system profile at toplevel (a new generation only when it
// points elsewhere) and runs `<toplevel>/bin/switch-to-configuration boot`. It returns
// the profile's generation afterwards.
func FinalizeBoot(ctx context.Context, r Runner, toplevel string, log Logger) (int, error) {
	if !nixstore.ValidStorePath(toplevel) {
		return 0, fmt.Errorf("finalize boot entry: toplevel %q is not a store path", toplevel)
	}
	current, err := Resolve(ctx, r, SystemProfile)
	if err != nil {
		return 0, fmt.Errorf("finalize boot entry: %w", err)
	}
	if current != toplevel {
		if _, err := runSys(ctx, r, nil, "nix-env", "--profile", SystemProfile, "--set", toplevel); err != nil {
			return 0, fmt.Errorf("finalize boot entry: set the system profile to %s: %w", toplevel, err)
		}
	}
	if _, err := runSys(ctx, r, nil, toplevel+"/bin/switch-to-configuration", "boot"); err != nil {
		return 0, fmt.Errorf("finalize boot entry: %s boot: %w", path.Base(toplevel), err)
	}
	gen, err := Generation(ctx, r)
	if err != nil {
		return 0, fmt.Errorf("finalize boot entry: %w", err)
	}
	log.printf("boot entry: generation %d is %s", gen, toplevel)
	return gen, nil
}

// RevertBoot points the system profile back at running (the system the node runs;
// /run/current-system when empty), by switching to the newest generation that holds it
// or by adding one, and runs its `switch-to-configuration boot`.
func RevertBoot(ctx context.Context, r Runner, running string, log Logger) error {
	if running == "" {
		cur, err := Resolve(ctx, r, "/run/current-system")
		if err != nil {
			return fmt.Errorf("revert boot entry: %w", err)
		}
		if cur == "" {
			return errors.New("revert boot entry: the node has no /run/current-system to revert to; name the running system explicitly")
		}
		running = cur
	}
	if !nixstore.ValidStorePath(running) {
		return fmt.Errorf("revert boot entry: running system %q is not a store path", running)
	}
	out, err := runSys(ctx, r, nil, "/bin/sh", "-c",
		`for l in "$1"-*-link; do [ -L "$l" ] && printf '%s %s\n' "${l##*/}" "$(readlink -f "$l")"; done; true`,
		"sh", SystemProfile)
	if err != nil {
		return fmt.Errorf("revert boot entry: list generations: %w", err)
	}
	best := -1
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || f[1] != running {
			continue
		}
		if m := generationLink.FindStringSubmatch(f[0]); m != nil {
			if n, _ := strconv.Atoi(m[1]); n > best {
				best = n
			}
		}
	}
	if best >= 0 {
		_, err = runSys(ctx, r, nil, "nix-env", "--profile", SystemProfile, "--switch-generation", strconv.Itoa(best))
	} else {
		_, err = runSys(ctx, r, nil, "nix-env", "--profile", SystemProfile, "--set", running)
	}
	if err != nil {
		return fmt.Errorf("revert boot entry: point the system profile at %s: %w", running, err)
	}
	if _, err := runSys(ctx, r, nil, running+"/bin/switch-to-configuration", "boot"); err != nil {
		return fmt.Errorf("revert boot entry: %s boot: %w", path.Base(running), err)
	}
	log.printf("boot entry reverted to %s (generation %d; -1: new generation)", running, best)
	return nil
}
