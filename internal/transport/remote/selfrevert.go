package remote

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// The node-side revert: a node that stops accepting new logins after a switch puts
// itself back on its previous system.
//
// The switch's start arms it: in the same round trip, the guard (deploybody's
// RevertGuardScript, kept as <unit>.sh beside the lock) records the revert as armed,
// and a second transient unit (RevertUnitPrefix) starts that waits until the switch
// has left its exit-code file (or its time limit plus grace has passed), then gives
// the deployer `confirm` to log in again, counted by the node. Then it asks the guard
// to begin: only a revert still armed, on a node that still runs the system it
// guarded, with the lock free or still the arming run's, begins; it then holds the
// lock, points the system profile back at the previous system, runs its
// `switch-to-configuration switch` and `boot`, and tells the guard it ended. Whoever
// disarms it (the arming run over a new login, or a later run that holds the lock)
// does so through the guard, which answers what had happened.

// RevertUnitPrefix names the transient units of armed reverts.
const RevertUnitPrefix = records.RevertUnitPrefix

// revertScript is the armed revert unit. $1 the guard's file, $2 the unit, $3 the
// switch's result prefix, $4 seconds to wait at most for the switch to end, $5 confirm
// seconds, $6 previous system. It passes through systemd-run, which expands ${…}, $$
// and %-specifiers itself: it uses none of them.
//
// A unit systemd-run starts gets systemd's own bin directory as its PATH on NixOS, and
// nothing else: the script sets PATH before its first command (the previous system's
// tools first: that system ran, the new one may be what is broken), and checks every
// command it and the guard call. One that is missing leaves the revert "broken", with
// the command's name, in its state and in the unit's journal, never armed in silence.
const revertScript = `PATH="$6/sw/bin:/run/current-system/sw/bin:/nix/var/nix/profiles/default/bin:$PATH"; export PATH; ` +
	`g=$1 u=$2 prev=$6; ` +
	`for c in sleep readlink nix-env ` + records.RevertGuardTools + `; do command -v "$c" >/dev/null 2>&1 || ` +
	`{ why="the revert cannot run on this node: $c is not on its PATH ($PATH)"; echo "$why" >&2; echo "broken $why" >` + ResultDir + `/"$u.state"; exit 127; }; done; ` +
	`i=0; while [ ! -e "$3.rc" ] && [ "$i" -lt "$4" ]; do sleep 1; i=$((i + 1)); done; ` +
	`sleep "$5"; ` +
	`[ "$(/bin/sh "$g" begin "$u")" = begin ] || exit 0; ` +
	`(while sleep 5; do /bin/sh "$g" touch "$u"; done) >/dev/null 2>&1 & hb=$!; ` +
	`p=` + SystemProfile + `; rc=0; ` +
	`if [ "$(readlink -f "$p" 2>/dev/null)" != "$prev" ]; then nix-env --profile "$p" --set "$prev" || rc=10; fi; ` +
	`if [ "$rc" = 0 ]; then "$prev/bin/switch-to-configuration" switch; rc=$?; "$prev/bin/switch-to-configuration" boot; fi; ` +
	`kill "$hb" 2>/dev/null; /bin/sh "$g" end "$u" "$rc"`

// revertStart is the command that arms the revert and then starts the switch unit (its
// own arguments): one round trip for both, so the switch never runs unarmed.
// $1 revert unit, $2 switch prefix, $3 wait, $4 confirm, $5 previous, $6 guarded,
// $7 lock token, $8 the guard script, then the switch's systemd-run argv.
const revertStart = `ru=$1 p=$2 w=$3 c=$4 prev=$5 guarded=$6 token=$7 g=$8; shift 8; ` +
	`d=` + ResultDir + `; mkdir -p "$d" && printf '%s' "$g" >"$d/$ru.sh" || exit 1; ` +
	`[ "$(/bin/sh "$d/$ru.sh" arm "$ru" "$prev" "$guarded" "$token" "$p")" = armed ] || exit 1; ` +
	`systemd-run --unit="$ru" --description="fediversity: revert to the previous system unless the deployer logs in again" ` +
	`--property=RuntimeMaxSec=$((w + c + w))s --no-block --collect --quiet ` +
	`/bin/sh -c '` + revertScript + `' sh "$d/$ru.sh" "$ru" "$p" "$w" "$c" "$prev" || exit 1; exec "$@"`

// armedArgv wraps the switch's systemd-run argv so the revert is armed first.
func armedArgv(arm *deploybody.RevertArm, prefix string, waitSecs int64, switchArgv []string) ([]string, error) {
	if !strings.HasPrefix(arm.Unit, RevertUnitPrefix) || strings.ContainsAny(arm.Unit, " '\"/$%") {
		return nil, fmt.Errorf("revert: unit name %q must start with %s", arm.Unit, RevertUnitPrefix)
	}
	if !nixstore.ValidStorePath(arm.Previous) || !nixstore.ValidStorePath(arm.Guarded) {
		return nil, fmt.Errorf("revert: previous system %q and new system %q must be store paths", arm.Previous, arm.Guarded)
	}
	if strings.ContainsAny(arm.Token, " \n") {
		return nil, fmt.Errorf("revert: lock token %q has blanks", arm.Token)
	}
	confirm := int64((arm.Confirm + time.Second - 1) / time.Second)
	if confirm < 1 {
		return nil, errors.New("revert: the confirm window must be at least a second")
	}
	argv := []string{"/bin/sh", "-c", revertStart, "sh", arm.Unit, prefix,
		strconv.FormatInt(waitSecs, 10), strconv.FormatInt(confirm, 10), arm.Previous, arm.Guarded, arm.Token, records.RevertGuardScript}
	return append(argv, switchArgv...), nil
}

// FreshDialer is a Runner that can open a second, independent connection to the same
// node (SSH: a new TCP connection and a new login). Only such runners support the
// node-side revert: it must be disarmed by a new login.
type FreshDialer interface {
	Fresh() (Runner, error)
}
