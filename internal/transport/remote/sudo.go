package remote

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// Non-root deploys. With Transport.Sudo the commands that change the system (the
// closure's import, the detached switch, the boot entry and its revert, the body's unit
// restarts) run through `sudo -n`; the judge's reads (unit states, the running system,
// the journal, operator checks) run as the user. `-n` never prompts: a password sudo
// would ask for is a refusal, so no prompt can hang the deploy.
//
// Every privileged command runs as `sudo -n -- /bin/sh -c '<set PATH>; exec "$@"' …`,
// or, for one of this package's /bin/sh scripts, `sudo -n -- /bin/sh -c '<set PATH>;
// <script>' …` (WithPath, as for every command), so the sudoers rule the deploy needs
// is one that lets the user run /bin/sh as root without a password: in effect full root.
// The operator's lines (the ssh block's `sudo` documentation repeats them):
//
//	deploy ALL=(root) NOPASSWD: ALL
//	Defaults:deploy !requiretty

// sudoPreflight is what Reach runs once per transport before anything changes.
var sudoPreflight = []string{"sudo", "-n", "--", "/bin/sh", "-c", "exit 0"}

// sudoRunner prefixes every command with `sudo -n --`.
type sudoRunner struct{ inner Runner }

func (s sudoRunner) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return s.inner.Exec(ctx, append([]string{"sudo", "-n", "--"}, argv...), stdin, stdout, stderr)
}

// Dials forwards to the inner runner, so Switch still sees reconnects.
func (s sudoRunner) Dials() uint64 {
	if d, ok := s.inner.(Redials); ok {
		return d.Dials()
	}
	return 0
}

// privileged is the runner of commands that change the system.
func (t *Transport) privileged() Runner {
	if !t.Sudo {
		return t.Runner
	}
	return sudoRunner{inner: t.Runner}
}

// checkSudo asks sudo, once, whether the user may run the deploy's privileged wrapper
// without a password. A refusal wraps deploybody.ErrRefused: retrying will not mend it.
func (t *Transport) checkSudo(ctx context.Context) error {
	if !t.Sudo || t.sudoChecked {
		return nil
	}
	var stdout, stderr bytes.Buffer
	code, err := t.Runner.Exec(ctx, sudoPreflight, nil, &stdout, &stderr)
	if err != nil {
		return fmt.Errorf("sudo preflight: %w", err)
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr.String() + " " + stdout.String())
		if code == 127 || strings.Contains(msg, "not found") {
			msg += " (sudo is not installed on the node)"
		}
		return fmt.Errorf("sudo refused `%s` (exit %d: %s); every command that changes the system runs through it. "+
			"Give the user passwordless sudo for it (e.g. `<user> ALL=(root) NOPASSWD: ALL` in /etc/sudoers.d/), or deploy as root: %w",
			strings.Join(sudoPreflight[3:], " "), code, msg, deploybody.ErrRefused)
	}
	t.sudoChecked = true
	return nil
}
