// Package remote holds what every transport does the same way once it can run a command
// on a node: quoting argv for a remote shell, putting the closure's tools on PATH,
// copying only the missing paths of a closure, the detached switch that survives a
// dropped connection, and the system profile / boot entry.
//
// A transport supplies a Runner (how to run argv on the node with streams) and gets a
// deploybody.Transport from NewTransport. This package must not import the plugin
// framework nor any transport package.
package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// Runner runs one command on a node. It is all a transport has to provide.
//
// Exec runs argv (argv[0] looked up on the node's PATH) with stdin (nil: empty) and
// writes its output to stdout and stderr (nil: discarded). It returns the exit code; a
// non-zero exit is not an error. err is only for transport faults, and wraps
// deploybody.ErrUnreachable when the node could not be reached. A transport that needs
// a shell string (SSH) builds it with ShellJoin, which quotes every element.
type Runner interface {
	Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (exitCode int, err error)
}

// Redials is implemented by runners that re-establish their connection: Dials counts
// connections made so far. Switch uses it to report SwitchResult.Reconnected.
type Redials interface {
	Dials() uint64
}

// Logger receives progress messages (copy sizes, switch polling). Never secrets.
type Logger func(format string, args ...any)

func (l Logger) printf(format string, args ...any) {
	if l != nil {
		l(format, args...)
	}
}

// Quote returns s quoted for a POSIX shell (sh, dash, bash): one word, no expansion.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellJoin quotes every element of argv and joins them with spaces, for a transport
// whose remote end takes a command line (SSH runs it with the user's shell). It refuses
// an empty argv and NUL bytes, which no command line can carry.
func ShellJoin(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("empty command")
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return "", fmt.Errorf("argument %d of %q contains a NUL byte", i, argv[0])
		}
		q[i] = Quote(a)
	}
	return strings.Join(q, " "), nil
}

// pathScript sets PATH to $1 (prefix, may be empty) + the node's PATH + $2 (suffix, may
// be empty) and execs the rest of its arguments. The arguments stay arguments: nothing
// in them is parsed by the shell.
const pathScript = `p=$1 s=$2; shift 2; ` +
	`if [ -n "$p" ]; then PATH=$p${PATH:+:$PATH}; fi; ` +
	`if [ -n "$s" ]; then PATH=${PATH:+$PATH:}$s; fi; ` +
	`export PATH; exec "$@"`

// WithPath returns argv wrapped so that it runs with prefix put before and suffix put
// after the node's PATH (via /bin/sh, which NixOS keeps). With neither it returns argv.
// A PATH entry with ':' or NUL cannot be expressed and is refused.
//
// A command that is itself a /bin/sh script (`/bin/sh -c <script> …`: the batches, the
// switch's start and polls) gets the PATH in front of its script instead (inlinePath),
// so that the shell that runs it is the one that sets the PATH: one program start
// fewer on the node for most round trips of a deploy (about 4 ms of a lab node's CPU
// each; docs/testing.md#node-execs). Any other command goes through pathScript, whose
// arguments stay arguments.
func WithPath(argv, prefix, suffix []string) ([]string, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	if len(prefix) == 0 && len(suffix) == 0 {
		return argv, nil
	}
	for _, e := range append(append([]string(nil), prefix...), suffix...) {
		if e == "" || strings.ContainsAny(e, ":\x00") {
			return nil, fmt.Errorf("PATH entry %q is empty or contains ':'", e)
		}
	}
	if len(argv) >= 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		return append([]string{"/bin/sh", "-c", inlinePath(prefix, suffix) + argv[2]}, argv[3:]...), nil
	}
	return append([]string{"/bin/sh", "-c", pathScript, "sh",
		strings.Join(prefix, ":"), strings.Join(suffix, ":")}, argv...), nil
}

// inlinePath is pathScript's PATH assignment as a line to put in front of a script: the
// entries quoted (none holds ':' or NUL), the rest of the line the script's own. It
// adds no newline, so the script's line numbers in the shell's messages stay its own.
func inlinePath(prefix, suffix []string) string {
	var b strings.Builder
	if len(prefix) > 0 {
		b.WriteString("PATH=" + Quote(strings.Join(prefix, ":")) + "${PATH:+:$PATH}; ")
	}
	if len(suffix) > 0 {
		b.WriteString("PATH=${PATH:+$PATH:}" + Quote(strings.Join(suffix, ":")) + "; ")
	}
	b.WriteString(inlinePathEnd)
	return b.String()
}

// inlinePathEnd ends inlinePath's line.
const inlinePathEnd = "export PATH; "

// NixFallbackPath is appended to the node's PATH for the commands this package runs
// itself (nix-store, nix-env, systemd-run, systemctl), so they are found on NixOS and on
// nodes with Nix installed in the default profile even when the login PATH is bare.
var NixFallbackPath = []string{
	"/run/current-system/sw/bin",
	"/nix/var/nix/profiles/default/bin",
	"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin",
}

// Run runs argv on the node with opts.Path before its PATH and collects the output.
func Run(ctx context.Context, r Runner, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	wrapped, err := WithPath(argv, opts.Path, nil)
	if err != nil {
		return deploybody.RunResult{}, err
	}
	var stdin io.Reader
	if opts.Stdin != nil {
		stdin = bytes.NewReader(opts.Stdin)
	}
	var stdout, stderr boundedBuffer
	code, err := r.Exec(ctx, wrapped, stdin, &stdout, &stderr)
	errOut := append(stderr.Bytes(), stdout.cutNote("stdout")+stderr.cutNote("stderr")...)
	return deploybody.RunResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: errOut}, err
}

// runSys runs one of this package's own commands (nix and systemd tools looked up with
// NixFallbackPath after the node's PATH) and fails on a non-zero exit, quoting stderr.
func runSys(ctx context.Context, r Runner, stdin io.Reader, argv ...string) (string, error) {
	wrapped, err := WithPath(argv, nil, NixFallbackPath)
	if err != nil {
		return "", err
	}
	var stdout, stderr boundedBuffer
	code, err := r.Exec(ctx, wrapped, stdin, &stdout, &stderr)
	if err != nil {
		// A transport fault: the command never ran, so its name adds nothing.
		return "", err
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr.String())
		if tool := MissingTool(code, msg); tool != "" {
			return stdout.String(), fmt.Errorf("%s: %s (exit %d: %s)", strings.Join(argv[:min(len(argv), 3)], " "), LacksTool(tool), code, msg)
		}
		return stdout.String(), fmt.Errorf("%s exited %d: %s", strings.Join(argv[:min(len(argv), 3)], " "), code, msg)
	}
	return stdout.String(), nil
}

// notFound is how a shell (dash, bash, busybox) and sudo say that a command is not on
// the PATH: "sh: 1: mv: not found", "bash: line 1: mv: command not found",
// "sudo: flock: command not found", "/bin/sh: mv: not found".
var notFound = regexp.MustCompile(`(?m)([^\s:'"]+): (?:command )?not found\s*$`)

// MissingTool names the command a node-side command could not find, from its exit
// code and stderr ("" when none is named): 127 is the shell's "not found".
func MissingTool(exitCode int, stderr string) string {
	if exitCode != 127 {
		return ""
	}
	m := notFound.FindStringSubmatch(stderr)
	if m == nil {
		return "a command it runs"
	}
	return m[1]
}

// LacksTool is the one sentence that says a node lacks a tool, for every transport.
func LacksTool(tool string) string {
	return fmt.Sprintf("the node lacks `%s` on its PATH (NixOS gives a login /run/wrappers/bin, /run/current-system/sw/bin and /nix/var/nix/profiles/default/bin; a systemd unit gets systemd's own bin only): add the package that has it to environment.systemPackages, or report the command that needed it", tool)
}
