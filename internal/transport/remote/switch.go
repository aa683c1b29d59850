package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// SystemProfile is the system profile whose generations are the boot entries.
const SystemProfile = "/nix/var/nix/profiles/system"

// ResultDir is where the detached switch leaves its output and exit code on the node.
const ResultDir = "/run/fediversity"

// Actions switch-to-configuration accepts (switch-to-configuration-ng's Action).
var validActions = map[string]bool{"switch": true, "boot": true, "test": true, "dry-activate": true, "check": true}

// SwitchOptions tune the detached switch. Zero values take the defaults.
type SwitchOptions struct {
	// PollInterval is the pause after a poll the transport cut (default 250 ms). A poll
	// itself waits on the node (PollWait), so a switch's result is read within about
	// 20 ms of the switch ending, in one round trip; a poll that waited its time out is
	// followed by the next at once, with no pause in which the result would wait.
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

// DetachedScript runs switch-to-configuration and leaves its stdout, stderr and exit
// code in files; the exit code file is written last, by one write of the shell's own
// echo, so a non-empty file means the switch is over. $1 toplevel, $2 action, $3 file
// prefix.
//
// It runs in a transient unit, whose PATH on NixOS is systemd's own bin directory and
// nothing else (nixpkgs builds systemd with that default PATH): so it calls no tool
// at all, only the switch by its absolute path and the shell's builtins. The switch
// then gets the environment nixos-rebuild gives it (nixos_rebuild/nix.py runs it
// under systemd-run the same way): switch-to-configuration and the activation script
// set the PATH they need themselves.
//
// Once the exit code is written, a line on the wake FIFO $3.wake (StartScript makes it)
// wakes a poll waiting on it at once (PollScript); the FIFO is opened read-write, which
// never blocks, and a line no poll reads is dropped with the pipe when the script ends.
const DetachedScript = `"$1/bin/switch-to-configuration" "$2" >"$3.out" 2>"$3.err"; echo $? >"$3.rc"; ` +
	`if [ -p "$3.wake" ]; then exec 9<>"$3.wake"; echo >&9; fi`

// switchEnvironment is what the detached switch gets besides the unit's own
// environment, as nixos-rebuild passes it (`systemd-run -E LOCALE_ARCHIVE -E
// NIXOS_INSTALL_BOOTLOADER`): the locale archive every NixOS login has
// (environment.sessionVariables in nixos/modules/config/i18n.nix), and no boot
// loader reinstall (nixos-rebuild's default without --install-bootloader).
var switchEnvironment = []string{
	"--setenv=LOCALE_ARCHIVE=/run/current-system/sw/lib/locale/locale-archive",
	"--setenv=NIXOS_INSTALL_BOOTLOADER=0",
}

// pollTick is the unit of PollScript's wait: a poll waits at most $3 ticks. Where it
// cannot wait on the wake FIFO it looks for the result file once a tick.
const pollTick = 20 * time.Millisecond

// PollScript waits up to $3 ticks of 20 ms for the switch to end. When it has ended it
// prints "rc <code>" and then the switch's stdout, and copies its stderr to stderr: the
// whole result in one round trip. Otherwise (time is up, or the unit failed or is gone:
// checked every five seconds, by one systemctl, so once a poll at the default PollWait,
// when it answers) it prints "unit <ActiveState> <LoadState>". Two systemctl every
// second cost a lab node about 80 ms of CPU a second for as long as the switch ran,
// which sixteen nodes switching at once on the deployer's two cores could not spare;
// one every two seconds was still a fifth of a node's systemctl calls in a 16-node
// deploy (docs/testing.md#node-execs). A unit that died without a result is the rare
// killed switch, which the caller names only after three such answers anyway.
// $1 file prefix, $2 unit, $3 ticks. The result files stay (see StartScript).
//
// It waits on the wake FIFO $1.wake, which the switch's script writes a line to once its
// exit code is written (DetachedScript): a read with a one-second time limit (bash's
// `read -t`: NixOS's /bin/sh is bash), which takes no CPU while it waits. The FIFO is
// opened before the result file is first looked for, so a wake is never missed. Where
// there is no FIFO (a switch started without one) or the shell cannot time a read
// (`read -t` is bash's, not POSIX), it looks for the result file every tick, with a
// `sleep 0.02` each: a fork and exec of sleep fifty times a second for as long as the
// switch runs, where the read forks nothing.
//
// With $4, the script to run once the switch exited 0 (FinalizeBoot's afterBootScript,
// with $5 and $6 its arguments), a result of exit 0 is "rc 0", then "after <its exit
// code>" and its stdout, its stderr on stderr: the step that follows a clean switch
// rides in the poll that reads it, not in a round trip of its own. It must be safe to
// run twice (a poll cut by a dropped connection is repeated).
const PollScript = `w=; if [ -p "$1.wake" ]; then exec 9<>"$1.wake"; w=1; fi; ` +
	`u() { s=$(systemctl show -p ActiveState -p LoadState "$2" 2>/dev/null); ` +
	`a=${s##*ActiveState=}; a=${a%%[!a-z-]*}; l=${s##*LoadState=}; l=${l%%[!a-z-]*}; }; ` +
	`i=0; while [ ! -s "$1.rc" ] && [ "$i" -lt "$3" ]; do ` +
	`if [ "$i" -gt 0 ] && [ $((i % 250)) -eq 0 ]; then u "$@"; ` +
	`case "$a/$l" in failed/* | */not-found) break ;; esac; fi; ` +
	`if [ -n "$w" ]; then read -t 1 x <&9 2>/dev/null; r=$?; ` +
	`if [ "$r" -gt 128 ]; then i=$((i + 50)); elif [ "$r" -ne 0 ]; then w=; fi; ` +
	`else sleep 0.02 2>/dev/null || sleep 1; i=$((i + 1)); fi; done; ` +
	`if [ -s "$1.rc" ]; then c=$(cat "$1.rc"); printf 'rc %s\n' "$c"; ` +
	`if [ -n "${4:-}" ] && [ "$c" = 0 ]; then a=$4; shift 4; o=$(sh -c "$a" sh "$@"); printf 'after %s\n%s\n' "$?" "$o"; exit 0; fi; ` +
	`cat "$1.out" 2>/dev/null; cat "$1.err" >&2 2>/dev/null; exit 0; fi; ` +
	`u "$@"; printf 'unit %s %s\n' "$a" "$l"`

// StartScript makes the result directory, removes results of switches older than an
// hour (a result stays readable that long, so a poll cut by a dropped connection can
// be repeated), makes the switch's wake FIFO (PollScript; without mkfifo the polls look
// for the result every tick), points the system profile $5 at the toplevel $6 when $5 is set (the
// boot entry's `boot`: with systemd-boot, entries come from the profile's generations
// only), runs its other arguments (systemd-run …) and goes on as the first poll
// (PollScript), so starting the switch and reading a quick result is one round trip.
// $1 result directory, $2 file prefix, $3 unit, $4 ticks, $5 profile or "", $6
// toplevel, $7 the poll's script after a clean switch or "" (PollScript's $4, given
// the profile and the toplevel), $8 a guard or "", $9 the guard's PATH entries, ${10}
// how many of the arguments that follow are the guard's. A guard runs first, on the
// script's stdin (sh -c $8 sh <its arguments and the rest>): its stdout comes back a
// line at a time as "guard <line>", and unless its first line is "ok" (and it exited 0)
// nothing else is done. Exit 90: the directory could not be made; 91: systemd-run
// failed; 92: the profile could not be set.
const StartScript = `d=$1 p=$2 u=$3 n=$4 prof=$5 top=$6 after=$7 g=$8 gp=$9 gn=${10}; shift 10; ` +
	`if [ -n "$g" ]; then a=$(PATH="${gp:+$gp:}$PATH" sh -c "$g" sh "$@") || a=""; ` +
	`printf '%s\n' "$a" | while IFS= read -r l; do printf 'guard %s\n' "$l"; done; shift "$gn"; ` +
	`[ "${a%%[!a-z-]*}" = ok ] || exit 0; fi; ` +
	`mkdir -p "$d" || exit 90; find "$d" -maxdepth 1 -name '` + SwitchUnitPrefix + `*' -mmin +60 -exec rm -f {} + 2>/dev/null; ` +
	`mkfifo -m 600 "$p.wake" 2>/dev/null; ` +
	`if [ -n "$prof" ] && [ "$(readlink -f "$prof" 2>/dev/null)" != "$top" ]; then nix-env --profile "$prof" --set "$top" >&2 || exit 92; fi; ` +
	`"$@" || exit 91; set -- "$p" "$u" "$n" "$after" "$prof" "$top"; ` + PollScript

// SwitchUnitPrefix names the transient units of detached switches.
const SwitchUnitPrefix = "fediversity-switch-"

// Switch runs `<toplevel>/bin/switch-to-configuration <action>` on the node in a
// transient systemd unit (systemd-run --no-block, RuntimeMaxSec=limit), detached from
// the connection, and polls for its exit code file. A transport fault while polling is
// retried (the runner re-dials); the result is read, never guessed.
func Switch(ctx context.Context, r Runner, toplevel, action string, limit time.Duration, opts SwitchOptions) (deploybody.SwitchResult, error) {
	res, _, err := runDetached(ctx, r, toplevel, action, limit, opts, detached{})
	return res, err
}

// detached is what a detached run does besides the switch: the system profile pointed
// at toplevel first when profile is set (in the round trip that starts the unit);
// after, when set, run by the poll that reads a clean result (PollScript's $4, given
// profile and toplevel: the result's Stdout is then "after <exit code>" and its
// stdout, and its Stderr the script's); guard, when set, run before anything else in
// the round trip that starts the unit (StartScript's $8).
type detached struct {
	profile, after string
	guard          *deploybody.BootGuard
}

// runDetached is Switch, with what d adds. It returns the guard's answer, one element a
// line; an answer whose first line is not "ok" started nothing (no result, no error).
func runDetached(ctx context.Context, r Runner, toplevel, action string, limit time.Duration, opts SwitchOptions, d detached) (deploybody.SwitchResult, []string, error) {
	opts.defaults()
	var res deploybody.SwitchResult
	if !nixstore.ValidStorePath(toplevel) {
		return res, nil, fmt.Errorf("switch: toplevel %q is not a store path", toplevel)
	}
	if !validActions[action] {
		return res, nil, fmt.Errorf("switch: action %q is not one of switch, boot, test, dry-activate, check", action)
	}
	if limit <= 0 {
		return res, nil, errors.New("switch: the time limit must be positive")
	}
	profile, after := d.profile, d.after
	guardArgv := []string{"", "", "0"}
	var stdin []byte
	if g := d.guard; g != nil {
		for _, e := range g.Path {
			if e == "" || strings.ContainsAny(e, ":\x00") {
				return res, nil, fmt.Errorf("switch: the guard's PATH entry %q is empty or contains ':'", e)
			}
		}
		guardArgv = append([]string{g.Script, strings.Join(g.Path, ":"), strconv.Itoa(len(g.Args))}, g.Args...)
		stdin = g.Stdin
	}
	dialsBefore := dials(r)
	unit := SwitchUnitPrefix + randomHex(6)
	prefix := ResultDir + "/" + unit
	secs := int64((limit + time.Second - 1) / time.Second)

	deadline := time.Now().Add(limit + opts.Grace)
	ticks := strconv.FormatInt(int64(max(opts.PollWait/(pollTick), 1)), 10)
	switchArgv := append([]string{"systemd-run", "--unit=" + unit, "--description=fediversity switch-to-configuration " + action,
		"--property=RuntimeMaxSec=" + strconv.FormatInt(secs, 10) + "s",
		"--no-block", "--collect", "--quiet"}, switchEnvironment...)
	switchArgv = append(switchArgv, "/bin/sh", "-c", DetachedScript, "sh", toplevel, action, prefix)
	if opts.Revert != nil {
		armed, err := armedArgv(opts.Revert, prefix, int64((limit+opts.Grace)/time.Second)+1, switchArgv)
		if err != nil {
			return res, nil, fmt.Errorf("switch: %w", err)
		}
		switchArgv = armed
		opts.Log.printf("switch: arming %s: back to %s unless a new login confirms within %s of the switch's end", opts.Revert.Unit, path.Base(opts.Revert.Previous), opts.Revert.Confirm)
	}
	startArgv := append(append([]string{"/bin/sh", "-c", StartScript, "sh", ResultDir, prefix, unit, ticks, profile, toplevel, after}, guardArgv...), switchArgv...)
	pollArgv := []string{"/bin/sh", "-c", PollScript, "sh", prefix, unit, ticks}
	if after != "" {
		pollArgv = append(pollArgv, after, profile, toplevel)
	}
	started := time.Now()
	sawTransportError := false
	opts.Log.printf("switch: starting %s (%s %s, limit %s)", unit, path.Base(toplevel), action, limit)
	transportErrors, gone := 0, 0
	var lastErr error
	var answer []string
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return res, answer, fmt.Errorf("switch: %w while waiting for %s (it keeps running on the node; see journalctl -u %s)", err, unit, unit)
		}
		var out, stderr string
		var err error
		held := false // the poll waited on the node and ended without a result
		if first {
			// Start, then wait for the result in the same round trip.
			out, stderr, err = runScriptWith(ctx, r, startArgv, stdin)
			if d.guard != nil && err == nil {
				answer, out = cutGuardAnswer(out)
				if len(answer) == 0 || answer[0] != "ok" {
					opts.Log.printf("switch: the guard answered %q; %s not started", strings.Join(answer, "; "), unit)
					return res, answer, nil
				}
				opts.Log.printf("switch: the guard answered %q; %s started", strings.Join(answer, "; "), unit)
			}
			switch {
			case err != nil && isTransportFault(err) && d.guard != nil:
				// Whether the guard ran, and what it answered, is unknown: the caller
				// asks again on its own.
				return res, nil, fmt.Errorf("switch: starting %s: %w: %w", unit, deploybody.ErrGuardUnanswered, err)
			case err != nil && isTransportFault(err):
				// It is open whether the unit started: polling tells.
				opts.Log.printf("switch: starting %s: %v; polling to learn whether it started", unit, err)
			case err != nil:
				return res, answer, fmt.Errorf("switch: start %s: %w", unit, err)
			default:
				opts.Log.printf("switch: started %s", unit)
			}
		} else {
			out, stderr, err = runScript(ctx, r, pollArgv)
		}
		switch {
		case err != nil && isTransportFault(err):
			sawTransportError = true
			transportErrors++
			lastErr = err
			opts.Log.printf("switch: polling %s: %v (retry %d/%d)", unit, err, transportErrors, opts.MaxTransportErrors)
			if transportErrors >= opts.MaxTransportErrors {
				return res, answer, fmt.Errorf("switch: lost the node while %s ran and could not reconnect after %d attempts: %w", unit, transportErrors, lastErr)
			}
		case err != nil:
			return res, answer, fmt.Errorf("switch: poll %s: %w", unit, err)
		default:
			transportErrors = 0
			held = true
			f := strings.Fields(out)
			if len(f) >= 2 && f[0] == "rc" {
				code, perr := strconv.Atoi(f[1])
				if perr != nil {
					return res, answer, fmt.Errorf("switch: %s left an unreadable exit code %q", unit, f[1])
				}
				res.ExitCode = code
				_, res.Stdout, _ = strings.Cut(out, "\n")
				res.Stderr = stderr
				res.Reconnected = sawTransportError || dials(r) > dialsBefore
				opts.Log.printf("switch: %s exited %d after %s (reconnected: %v)", unit, code, time.Since(started).Round(time.Millisecond), res.Reconnected)
				return res, answer, nil
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
					return res, answer, fmt.Errorf("switch: %s %s did not finish within its time limit of %s; systemd stopped it, the node may be half-switched (see journalctl -u %s; raise the switch timeout if it needs longer)", path.Base(toplevel), action, limit, unit)
				}
				return res, answer, fmt.Errorf("switch: %s ended (or never started) without leaving a result in %s (see journalctl -u %s)", unit, ResultDir, unit)
			}
		}
		if time.Now().After(deadline) {
			return res, answer, fmt.Errorf("switch: no result from %s within the limit %s plus %s grace (see journalctl -u %s)", unit, limit, opts.Grace, unit)
		}
		if held {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.PollInterval):
		}
	}
}

// runScript runs one of the switch's scripts (with NixFallbackPath) and returns its
// stdout and stderr; a non-zero exit is an error that quotes stderr, and names the tool
// the node lacks when the shell did not find one (exit 127).
func runScript(ctx context.Context, r Runner, argv []string) (stdout, stderr string, err error) {
	return runScriptWith(ctx, r, argv, nil)
}

// runScriptWith is runScript with stdin for the script (nil: none).
func runScriptWith(ctx context.Context, r Runner, argv []string, stdin []byte) (stdout, stderr string, err error) {
	wrapped, err := WithPath(argv, nil, NixFallbackPath)
	if err != nil {
		return "", "", err
	}
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	var out, errOut boundedBuffer
	code, err := r.Exec(ctx, wrapped, in, &out, &errOut)
	if err != nil {
		return "", "", err
	}
	if code != 0 {
		msg := strings.TrimSpace(errOut.String())
		if tool := MissingTool(code, msg); tool != "" {
			return "", "", fmt.Errorf("%s (exit %d: %s)", LacksTool(tool), code, msg)
		}
		what := "exited"
		switch code {
		case 90:
			what = "could not make " + ResultDir + ":"
		case 91:
			what = "systemd-run failed:"
		case 92:
			what = "could not point the system profile " + SystemProfile + " at the new system (nix-env --set):"
		}
		return "", "", fmt.Errorf("%s %d: %s", what, code, msg)
	}
	return out.String(), errOut.String(), nil
}

// cutGuardAnswer splits the start script's stdout into the guard's answer (its
// "guard <line>" lines, in front) and the rest.
func cutGuardAnswer(out string) (answer []string, rest string) {
	for {
		line, more, found := strings.Cut(out, "\n")
		text, ok := strings.CutPrefix(line, "guard ")
		if !ok {
			return answer, out
		}
		answer = append(answer, text)
		if !found {
			return answer, ""
		}
		out = more
	}
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

// afterBootScript runs once the boot entry's `boot` succeeded, in the poll that reads
// its result (PollScript's $4): it releases the default entry a one-shot reboot pinned
// (records.ReleaseBootPin, exit 12), releases the pushed closure's GC root now that the
// system profile holds it ($2, the toplevel: only when the root still points at it) and
// prints where the profile $1 points. Each step may run twice.
var afterBootScript = records.ReleaseBootPin + `; ` + deploybody.ReleasePushedRootScript + `; readlink "$1"`

// FinalizeBoot points the system profile at toplevel (a new generation only when it
// points elsewhere) and runs `<toplevel>/bin/switch-to-configuration boot` detached,
// like the switch (in the round trip that sets the profile), then releases the default
// entry a one-shot reboot pinned (records.ReleaseBootPin) and the pushed closure's
// GC root, in the poll that reads the `boot`'s clean result (afterBootScript): the boot
// loader's default is then toplevel. A quick `boot` is thus one round trip in all. A
// `boot` that exits non-zero is a *deploybody.SwitchExitError, so the body can tell
// its exit codes apart. It returns the profile's generation afterwards.
func FinalizeBoot(ctx context.Context, r Runner, toplevel string, limit time.Duration, opts SwitchOptions) (int, error) {
	_, gen, err := finalizeBoot(ctx, r, toplevel, limit, opts, nil)
	return gen, err
}

// FinalizeBootGuarded is FinalizeBoot with guard run first, in the round trip that
// starts the boot (deploybody.GuardedBootFinalizer): unless the guard's first line is
// "ok", nothing else is done and the answer is returned with generation 0 and no error.
func FinalizeBootGuarded(ctx context.Context, r Runner, toplevel string, limit time.Duration, opts SwitchOptions, guard deploybody.BootGuard) ([]string, int, error) {
	return finalizeBoot(ctx, r, toplevel, limit, opts, &guard)
}

func finalizeBoot(ctx context.Context, r Runner, toplevel string, limit time.Duration, opts SwitchOptions, guard *deploybody.BootGuard) ([]string, int, error) {
	answer, gen, err := finalizeBootRun(ctx, r, toplevel, limit, opts, guard)
	if err != nil {
		return answer, 0, fmt.Errorf("finalize boot entry: %w", err)
	}
	return answer, gen, nil
}

func finalizeBootRun(ctx context.Context, r Runner, toplevel string, limit time.Duration, opts SwitchOptions, guard *deploybody.BootGuard) ([]string, int, error) {
	if !nixstore.ValidStorePath(toplevel) {
		return nil, 0, fmt.Errorf("toplevel %q is not a store path", toplevel)
	}
	opts.Revert = nil
	sr, answer, err := runDetached(ctx, r, toplevel, "boot", limit, opts, detached{profile: SystemProfile, after: afterBootScript, guard: guard})
	if err != nil {
		return answer, 0, err
	}
	if guard != nil && (len(answer) == 0 || answer[0] != "ok") {
		return answer, 0, nil
	}
	if sr.ExitCode != 0 {
		return answer, 0, &deploybody.SwitchExitError{Action: "boot", Toplevel: toplevel, Result: sr}
	}
	first, out, _ := strings.Cut(sr.Stdout, "\n")
	code, perr := strconv.Atoi(strings.TrimPrefix(first, "after "))
	if !strings.HasPrefix(first, "after ") || perr != nil {
		return answer, 0, fmt.Errorf("the node answered %q after the boot, not the release of its pins", first)
	}
	msg := strings.TrimSpace(sr.Stderr)
	switch {
	case code == 12:
		return answer, 0, fmt.Errorf("releasing the default boot entry pinned for a one-shot boot (%s): bootctl set-default failed: %s", records.BootPinFile, msg)
	case MissingTool(code, msg) != "":
		return answer, 0, fmt.Errorf("%s (%s)", LacksTool(MissingTool(code, msg)), msg)
	case code != 0:
		return answer, 0, fmt.Errorf("exited %d: %s", code, msg)
	}
	gen, err := generationOf(out)
	if err != nil {
		return answer, 0, fmt.Errorf("%w", err)
	}
	opts.Log.printf("boot entry: generation %d is %s", gen, toplevel)
	return answer, gen, nil
}

// RevertBoot points the system profile back at running (the system the node runs;
// /run/current-system when empty), by switching to the newest generation that holds it
// or by adding one, and runs its `switch-to-configuration boot` detached, like the
// switch.
func RevertBoot(ctx context.Context, r Runner, running string, limit time.Duration, opts SwitchOptions) error {
	log := opts.Log
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
	out, err := runSys(ctx, r, nil, "/bin/sh", "-c", listGenerationsScript, "sh", SystemProfile)
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
	opts.Revert = nil
	sr, _, err := runDetached(ctx, r, running, "boot", limit, opts, detached{})
	if err == nil && sr.ExitCode != 0 {
		err = &deploybody.SwitchExitError{Action: "boot", Toplevel: running, Result: sr}
	}
	if err != nil {
		return fmt.Errorf("revert boot entry: %s boot: %w", path.Base(running), err)
	}
	if _, err := runSys(ctx, r, nil, "/bin/sh", "-c", records.ReleaseBootPin); err != nil {
		return fmt.Errorf("revert boot entry: releasing the default boot entry pinned for a one-shot boot (%s): %w", records.BootPinFile, err)
	}
	log.printf("boot entry reverted to %s (generation %d; -1: new generation)", running, best)
	return nil
}

// listGenerationsScript prints each generation link of the profile $1 and the system it
// resolves to.
const listGenerationsScript = `for l in "$1"-*-link; do [ -L "$l" ] && printf '%s %s\n' "${l##*/}" "$(readlink -f "$l")"; done; true`
