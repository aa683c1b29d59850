package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// The node-side revert: a node that stops accepting new logins after a switch puts
// itself back on its previous system.
//
// The switch's start arms it: in the same round trip, a second transient unit
// (RevertUnitPrefix) starts that waits until the switch has left its exit-code file
// (or its time limit plus grace has passed), then gives the deployer `confirm` to log
// in again. Only a login over a *new* connection disarms it (DisarmRevert stops the
// unit): the session the switch ran on proves nothing about whether sshd and the
// network still accept new logins. Otherwise the unit points the system profile back
// at the previous system, runs its `switch-to-configuration switch` and `boot`, and
// leaves "<unit>.reverted" in ResultDir with the exit code of that switch.

// RevertUnitPrefix names the transient units of armed reverts.
const RevertUnitPrefix = "fediversity-revert-"

// RevertSpec arms the revert at the next switch.
type RevertSpec struct {
	// Previous is the system the node ran before the switch.
	Previous string
	// Confirm is how long after the switch a new login may take.
	Confirm time.Duration
	// Unit names the revert's transient unit (NewRevertUnit).
	Unit string
}

// NewRevertUnit is a fresh name for an armed revert's unit.
func NewRevertUnit() string { return RevertUnitPrefix + randomHex(6) }

// revertScript is the armed revert. $1 the switch's result prefix, $2 seconds to wait
// at most for the switch to end, $3 confirm seconds, $4 previous system, $5 the file
// that records a revert.
const revertScript = `i=0; while [ ! -e "$1.rc" ] && [ "$i" -lt "$2" ]; do sleep 1; i=$((i + 1)); done; ` +
	`sleep "$3"; ` +
	`PATH="$4/sw/bin:/run/current-system/sw/bin:/nix/var/nix/profiles/default/bin:$PATH"; ` +
	`p=` + SystemProfile + `; ` +
	`if [ "$(readlink -f "$p" 2>/dev/null)" != "$4" ]; then nix-env --profile "$p" --set "$4" || exit 10; fi; ` +
	`"$4/bin/switch-to-configuration" switch; rc=$?; "$4/bin/switch-to-configuration" boot; ` +
	`echo "$rc" >"$5.tmp" && mv "$5.tmp" "$5"`

// revertStart is the command that starts the armed revert unit and then the switch
// unit (its own arguments): one round trip for both, so the switch never runs unarmed.
// $1 revert unit, $2 switch prefix, $3 wait, $4 confirm, $5 previous, $6 record, then
// the switch's systemd-run argv.
const revertStart = `ru=$1 p=$2 w=$3 c=$4 prev=$5 rec=$6; shift 6; ` +
	`systemd-run --unit="$ru" --description="fediversity: revert to the previous system unless the deployer logs in again" ` +
	`--property=RuntimeMaxSec=$((w + c + 600))s --no-block --collect --quiet ` +
	`/bin/sh -c '` + revertScript + `' sh "$p" "$w" "$c" "$prev" "$rec" || exit 1; exec "$@"`

// armedArgv wraps the switch's systemd-run argv so the revert unit starts first.
func armedArgv(spec *RevertSpec, prefix string, waitSecs int64, switchArgv []string) ([]string, error) {
	revertUnit := spec.Unit
	if !strings.HasPrefix(revertUnit, RevertUnitPrefix) || strings.ContainsAny(revertUnit, " '\"/") {
		return nil, fmt.Errorf("revert: unit name %q must start with %s", revertUnit, RevertUnitPrefix)
	}
	if !nixstore.ValidStorePath(spec.Previous) {
		return nil, fmt.Errorf("revert: previous system %q is not a store path", spec.Previous)
	}
	confirm := int64((spec.Confirm + time.Second - 1) / time.Second)
	if confirm < 1 {
		return nil, errors.New("revert: the confirm window must be at least a second")
	}
	argv := []string{"/bin/sh", "-c", revertStart, "sh", revertUnit, prefix,
		strconv.FormatInt(waitSecs, 10), strconv.FormatInt(confirm, 10), spec.Previous, revertRecord(revertUnit)}
	return append(argv, switchArgv...), nil
}

func revertRecord(unit string) string { return ResultDir + "/" + unit + ".reverted" }

// disarmScript stops the armed revert and says whether it had already fired: prints
// "reverted <rc>" or "disarmed". $1 unit, $2 record.
const disarmScript = `systemctl stop "$1" 2>/dev/null; ` +
	`if [ -e "$2" ]; then printf 'reverted %s\n' "$(cat "$2")"; else echo disarmed; fi`

// ErrReverted is returned by DisarmRevert when the node had already put itself back.
var ErrReverted = deploybody.ErrSelfReverted

// DisarmRevert stops the armed revert unit over r, which must be a new connection.
func DisarmRevert(ctx context.Context, r Runner, unit string) error {
	out, err := runSys(ctx, r, nil, "/bin/sh", "-c", disarmScript, "sh", unit, revertRecord(unit))
	if err != nil {
		return err
	}
	if strings.HasPrefix(strings.TrimSpace(out), "reverted") {
		return ErrReverted
	}
	return nil
}

// RevertOutcome reads, over r, whether the armed revert fired and what the node runs
// now: the running system and the system profile's generation.
func RevertOutcome(ctx context.Context, r Runner, unit string) (reverted bool, running string, generation int, err error) {
	out, err := runSys(ctx, r, nil, "/bin/sh", "-c",
		`test -e "$1" && echo reverted || echo pending; readlink -f /run/current-system; readlink "$2"`,
		"sh", revertRecord(unit), SystemProfile)
	if err != nil {
		return false, "", 0, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for len(lines) < 3 {
		lines = append(lines, "")
	}
	gen, _ := generationOf(lines[2])
	return lines[0] == "reverted", strings.TrimSpace(lines[1]), gen, nil
}

// FreshDialer is a Runner that can open a second, independent connection to the same
// node (SSH: a new TCP connection and a new login). Only such runners support the
// node-side revert: it must be disarmed by a new login.
type FreshDialer interface {
	Fresh() (Runner, error)
}
