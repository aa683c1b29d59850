package deploybody

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// previousDefault is what decides the boot loader's default before the run changes
// it: the system profile's target and the entry an earlier run left pinned.
type previousDefault struct{ profile, pinned string }

// readPreviousDefault reads it (records.PreviousDefaultScript).
func (e *runEnv) readPreviousDefault(ctx context.Context) (previousDefault, error) {
	res, err := e.t.Run(ctx, []string{"sh", "-c", records.PreviousDefaultScript}, RunOptions{Path: records.ToolPath})
	if err != nil {
		return previousDefault{}, fmt.Errorf("reading the system profile and the boot loader's pinned default: %w", err)
	}
	lines := strings.Split(string(res.Stdout)+"\n\n", "\n")
	return previousDefault{profile: strings.TrimSpace(lines[0]), pinned: strings.TrimSpace(lines[1])}, nil
}

// bootOnce asks the boot loader to boot toplevel once, with the previous default kept
// as the default; rb records which entries, or why not.
func (e *runEnv) bootOnce(ctx context.Context, toplevel string, prev previousDefault, rb *Reboot) error {
	res, err := e.t.Run(ctx, []string{"sh", "-c", records.BootOnceScript, "sh", toplevel, prev.profile, prev.pinned}, RunOptions{Path: records.ToolPath, Privileged: true})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, judge.FirstLine(string(res.Stderr), "no output"))
	}
	if err != nil {
		return withHint(fmt.Errorf("setting the one-shot boot entry: %w", err),
			"the boot entry points at the new system, the node runs its previous one and has not rebooted: apply again")
	}
	f := strings.Fields(string(res.Stdout))
	switch {
	case len(f) == 4 && f[0] == "oneshot" && nixstore.CleanAbsolutePath(f[3]):
		rb.OneShotEntry, rb.DefaultEntry, rb.DefaultSystem = f[1], f[2], f[3]
	case len(f) > 1 && f[0] == "none":
		rb.NoOneShot = strings.Join(f[1:], " ")
	default:
		rb.NoOneShot = "the boot loader's answer was not understood"
	}
	return nil
}

// oneShotNote is the verdict's words of the boot entry after a reboot, given whether
// the verdict is ok.
func oneShotNote(rb *Reboot, ok bool) string {
	switch {
	case rb == nil:
		return ""
	case rb.OneShotEntry != "" && ok:
		return "booted once from a one-shot boot entry; the new system is the default entry now that the verdict is ok"
	case rb.OneShotEntry != "":
		return "booted once from a one-shot boot entry; the previous system stays the default entry (" + rb.DefaultEntry + "), so the node boots it at its next boot"
	case rb.NoOneShot == records.AlreadyDefault:
		return "the new system was already the default boot entry"
	case rb.NoOneShot != "":
		return "no one-shot boot entry (" + rb.NoOneShot + "): the new system was made the default entry before the reboot"
	}
	return ""
}

// BootEntryAfterFailedVerdict says what a deploy whose verdict failed left as the
// node's boot entry (rb: the run's reboot, nil for none), in the words of both front
// ends' hints.
func BootEntryAfterFailedVerdict(rb *Reboot) string {
	if rb != nil && rb.OneShotEntry != "" {
		return "the node runs the new system until its next boot, then its previous one: the boot entry points back at " + rb.DefaultSystem
	}
	return "the node keeps the new boot entry"
}
