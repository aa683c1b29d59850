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
	// PollInterval is the pause between two polls that ended without a result (default
	// 250 ms). A poll itself waits on the node (PollWait), so a switch's result is read
	// within about 20 ms of the switch ending, in one round trip.
	PollInterval time.Duration
	// PollWait is how long one poll waits on the node for the result before it answers
	// with the unit's state (default 5 s). A dropped connection ends a poll at once.
	PollWait time.Duration
	// Grace is how long past the limit the result is still awaited (default 30 s):
	// systemd stops the unit at the limit, then the result file must appear.
	Grace time.Duration
	// MaxTransportErrors is how many consecutive failed polls are tolerated while the
	// connection is re-established (default 120, about 30 s at the default interval).
	MaxTransportErrors int
	// Log receives progress.
	Log Logger
	// Revert, if set, arms the node-side revert (selfrevert.go) in the same round trip
	// that starts the switch.
	Revert *deploybody.RevertArm
}

func (o *SwitchOptions) defaults() {
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.PollWait <= 0 {
		o.PollWait = 5 * time.Second
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

// pollTick is how often pollScript looks for the result file on the node: a `[ -e ]`
// and a sleep, 50 times a second, for the length of the switch.
const pollTick = 20 * time.Millisecond

// pollScript waits up to $3 ticks of 20 ms for the switch to end. When it has ended it
// prints "rc <code>" and then the switch's stdout, and copies its stderr to stderr: the
// whole result in one round trip. Otherwise (time is up, or the unit failed or is gone:
// checked about once a second) it prints "unit <ActiveState> <LoadState>".
// $1 file prefix, $2 unit, $3 ticks. The result files stay (see startScript).
const pollScript = `i=0; while [ ! -e "$1.rc" ] && [ "$i" -lt "$3" ]; do ` +
	`if [ "$i" -gt 0 ] && [ $((i % 50)) -eq 0 ]; then ` +
	`case "$(systemctl show -p ActiveState --value "$2" 2>/dev/null)/$(systemctl show -p LoadState --value "$2" 2>/dev/null)" in ` +
	`failed/* | */not-found) break ;; esac; fi; ` +
	`sleep 0.02 2>/dev/null || sleep 1; i=$((i + 1)); done; ` +
	`if [ -e "$1.rc" ]; then printf 'rc %s\n' "$(cat "$1.rc")"; cat "$1.out" 2>/dev/null; cat "$1.err" >&2 2>/dev/null; exit 0; fi; ` +
	`printf 'unit %s %s\n' "$(systemctl show -p ActiveState --value "$2" 2>/dev/null)" ` +
	`"$(systemctl show -p LoadState --value "$2" 2>/dev/null)"`

// startScript makes the result directory, removes results of switches older than an
// hour (a result stays readable that long, so a poll cut by a dropped connection can
// be repeated), runs its other arguments (systemd-run …) and goes on as the first poll
// (pollScript), so starting the switch and reading a quick result is one round trip.
// $1 result directory, $2 file prefix, $3 unit, $4 ticks. Exit 90: the directory
// could not be made; 91: systemd-run failed.
const startScript = `d=$1 p=$2 u=$3 n=$4; shift 4; ` +
	`mkdir -p "$d" || exit 90; find "$d" -maxdepth 1 -name '` + SwitchUnitPrefix + `*' -mmin +60 -exec rm -f {} + 2>/dev/null; ` +
	`"$@" || exit 91; set -- "$p" "$u" "$n"; ` + pollScript

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

	deadline := time.Now().Add(limit + opts.Grace)
	ticks := strconv.FormatInt(int64(max(opts.PollWait/(pollTick), 1)), 10)
	switchArgv := []string{"systemd-run", "--unit=" + unit, "--description=fediversity switch-to-configuration " + action,
		"--property=RuntimeMaxSec=" + strconv.FormatInt(secs, 10) + "s",
		"--no-block", "--collect", "--quiet",
		"/bin/sh", "-c", detachedScript, "sh", toplevel, action, prefix}
	if opts.Revert != nil {
		armed, err := armedArgv(opts.Revert, prefix, int64((limit+opts.Grace)/time.Second)+1, switchArgv)
		if err != nil {
			return res, fmt.Errorf("switch: %w", err)
		}
		switchArgv = armed
		opts.Log.printf("switch: arming %s: back to %s unless a new login confirms within %s of the switch's end", opts.Revert.Unit, path.Base(opts.Revert.Previous), opts.Revert.Confirm)
	}
	startArgv := append([]string{"/bin/sh", "-c", startScript, "sh", ResultDir, prefix, unit, ticks}, switchArgv...)
	started := time.Now()
	sawTransportError := false
	opts.Log.printf("switch: starting %s (%s %s, limit %s)", unit, path.Base(toplevel), action, limit)
	transportErrors, gone := 0, 0
	var lastErr error
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("switch: %w while waiting for %s (it keeps running on the node; see journalctl -u %s)", err, unit, unit)
		}
		var out, stderr string
		var err error
		if first {
			// Start, then wait for the result in the same round trip.
			out, stderr, err = runScript(ctx, r, startArgv)
			switch {
			case err != nil && isTransportFault(err):
				// It is open whether the unit started: polling tells.
				opts.Log.printf("switch: starting %s: %v; polling to learn whether it started", unit, err)
			case err != nil:
				return res, fmt.Errorf("switch: start %s: %w", unit, err)
			default:
				opts.Log.printf("switch: started %s", unit)
			}
		} else {
			out, stderr, err = runScript(ctx, r, []string{"/bin/sh", "-c", pollScript, "sh", prefix, unit, ticks})
		}
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
				_, res.Stdout, _ = strings.Cut(out, "\n")
				res.Stderr = stderr
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

// runScript runs one of the switch's scripts (with NixFallbackPath) and returns its
// stdout and stderr; a non-zero exit is an error that quotes stderr.
func runScript(ctx context.Context, r Runner, argv []string) (stdout, stderr string, err error) {
	wrapped, err := WithPath(argv, nil, NixFallbackPath)
	if err != nil {
		return "", "", err
	}
	var out, errOut boundedBuffer
	code, err := r.Exec(ctx, wrapped, nil, &out, &errOut)
	if err != nil {
		return "", "", err
	}
	if code != 0 {
		what := "exited"
		switch code {
		case 90:
			what = "could not make " + ResultDir + ":"
		case 91:
			what = "systemd-run failed:"
		}
		return "", "", fmt.Errorf("%s %d: %s", what, code, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), nil
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
	return generationOf(out)
}

// generationOf reads the generation number from where the system profile points.
func generationOf(link string) (int, error) {
	m := generationLink.FindStringSubmatch(path.Base(strings.TrimSpace(link)))
	if m == nil {
		return 0, fmt.Errorf("the system profile %s points at %q, not at a system-<n>-link generation", SystemProfile, strings.TrimSpace(link))
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

// finalizeScript points the system profile $1 at toplevel $2 (a new generation only
// when it points elsewhere), runs `$2/bin/switch-to-configuration boot` (its output to
// stderr) and prints where the profile points: one round trip. Exit 10: the profile
// could not be set; 11: the boot entry could not be written.
var finalizeScript = `if [ "$(readlink -f "$1" 2>/dev/null)" != "$2" ]; then nix-env --profile "$1" --set "$2" >&2 || exit 10; fi; ` +
	`"$2/bin/switch-to-configuration" boot >&2 || exit 11; ` + deploybody.ReleaseBootPin + `; readlink "$1"`

// FinalizeBoot points the system profile at toplevel (a new generation only when it
// points elsewhere), runs `<toplevel>/bin/switch-to-configuration boot`, and releases
// the default entry a one-shot reboot pinned (deploybody.ReleaseBootPin), in one round
// trip: the boot loader's default is then toplevel. It returns the profile's
// generation afterwards.
func FinalizeBoot(ctx context.Context, r Runner, toplevel string, log Logger) (int, error) {
	if !nixstore.ValidStorePath(toplevel) {
		return 0, fmt.Errorf("finalize boot entry: toplevel %q is not a store path", toplevel)
	}
	argv, err := WithPath([]string{"/bin/sh", "-c", finalizeScript, "sh", SystemProfile, toplevel}, nil, NixFallbackPath)
	if err != nil {
		return 0, err
	}
	var out, errOut boundedBuffer
	code, err := r.Exec(ctx, argv, nil, &out, &errOut)
	msg := strings.TrimSpace(errOut.String())
	switch {
	case err != nil:
		return 0, fmt.Errorf("finalize boot entry: %w", err)
	case code == 10:
		return 0, fmt.Errorf("finalize boot entry: set the system profile to %s: nix-env failed: %s", toplevel, msg)
	case code == 11:
		return 0, fmt.Errorf("finalize boot entry: %s boot failed: %s", path.Base(toplevel), msg)
	case code == 12:
		return 0, fmt.Errorf("finalize boot entry: releasing the default boot entry pinned for a one-shot boot (%s): bootctl set-default failed: %s", deploybody.BootPinFile, msg)
	case code != 0:
		return 0, fmt.Errorf("finalize boot entry: exited %d: %s", code, msg)
	}
	gen, err := generationOf(out.String())
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
	if _, err := runSys(ctx, r, nil, "/bin/sh", "-c", deploybody.ReleaseBootPin); err != nil {
		return fmt.Errorf("revert boot entry: releasing the default boot entry pinned for a one-shot boot (%s): %w", deploybody.BootPinFile, err)
	}
	log.printf("boot entry reverted to %s (generation %d; -1: new generation)", running, best)
	return nil
}
