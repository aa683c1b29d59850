package incus

// The shell text the transport sends to a node (the session's claim, the stand-in
// exec's claim, the stdin staging, the node's setup) run here by the local /bin/sh
// and bash: it is the same text the node's shell runs, and the cases (a session that
// ran a command whose start marker was then lost, a run killed between the push and
// the command) are ones a lab node cannot be made to show on demand.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// shells are the local shells the scripts are run with (the node's /bin/sh is bash).
func shells(t *testing.T) []string {
	t.Helper()
	out := []string{"/bin/sh"}
	if bash, err := exec.LookPath("bash"); err == nil {
		out = append(out, bash)
	}
	return out
}

// runLocal runs argv (whose argv[0] is /bin/sh) with shell instead, and returns what
// the transport would get back.
func runLocal(t *testing.T, shell string, argv []string, stdin string) deploybody.RunResult {
	t.Helper()
	if argv[0] != "/bin/sh" {
		t.Fatalf("argv %q does not start with /bin/sh", argv)
	}
	cmd := exec.Command(shell, argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return deploybody.RunResult{ExitCode: code, Stdout: o.Bytes(), Stderr: e.Bytes()}
}

func countLines(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// A command whose start marker was lost runs at most once: whichever of the session's
// shell and the stand-in recorded exec claims it first runs it, the other runs nothing.
func TestClaimedCommandRunsAtMostOnce(t *testing.T) {
	for _, shell := range shells(t) {
		t.Run(filepath.Base(shell), func(t *testing.T) {
			claims := t.TempDir()
			marker := filepath.Join(t.TempDir(), "ran")
			argv := []string{"sh", "-c", `echo ran >> "$1"`, "sh", marker}

			// The session ran it (its start marker then lost): the stand-in runs nothing.
			b := randomBoundary()
			before, after := claimGuard(claims+"/"+b, b)
			line, err := framedScript(b, before, after, argv, os.Getenv("PATH"))
			if err != nil {
				t.Fatal(err)
			}
			out := runLocal(t, shell, []string{"/bin/sh", "-s"}, "set -C; "+line)
			if !strings.Contains(string(out.Stdout), b+" start") || countLines(t, marker) != 1 {
				t.Fatalf("the session did not run the command once: %q, %d runs", out.Stdout, countLines(t, marker))
			}
			claim := claims + "/" + b
			res := runLocal(t, shell, claimedArgv(claim, argv), "")
			if !claimTaken(res, claim) || countLines(t, marker) != 1 {
				t.Fatalf("the stand-in exec ran a command the session ran: exit %d %q, %d runs", res.ExitCode, res.Stderr, countLines(t, marker))
			}

			// The session never read it: the stand-in runs it, and a session shell that
			// reads the line late runs nothing.
			b = randomBoundary()
			claim = claims + "/" + b
			res = runLocal(t, shell, claimedArgv(claim, argv), "")
			if res.ExitCode != 0 || claimTaken(res, claim) || countLines(t, marker) != 2 {
				t.Fatalf("the stand-in exec did not run an unclaimed command: exit %d %q, %d runs", res.ExitCode, res.Stderr, countLines(t, marker))
			}
			before, after = claimGuard(claim, b)
			line, _ = framedScript(b, before, after, argv, os.Getenv("PATH"))
			out = runLocal(t, shell, []string{"/bin/sh", "-s"}, "set -C; "+line)
			if !strings.Contains(string(out.Stdout), b+" unclaimed") || strings.Contains(string(out.Stdout), b+" start") || countLines(t, marker) != 2 {
				t.Fatalf("a late session line ran a command the stand-in ran: %q, %d runs", out.Stdout, countLines(t, marker))
			}

			// The claims directory is gone (with /run, at a reboot): whether the command
			// ran is unknown, so nothing runs.
			claim = filepath.Join(t.TempDir(), "gone", "x")
			if res := runLocal(t, shell, claimedArgv(claim, argv), ""); !claimTaken(res, claim) || countLines(t, marker) != 2 {
				t.Fatalf("the stand-in ran without a claims directory: exit %d %q", res.ExitCode, res.Stderr)
			}
		})
	}
}

// A command's exit code 222 is its own, not a taken claim.
func TestClaimTakenNeedsTheMarker(t *testing.T) {
	claim := "/run/fediversity-session/x/y"
	if claimTaken(deploybody.RunResult{ExitCode: claimTakenExit, Stderr: []byte("222 of my own\n")}, claim) {
		t.Fatal("a command that exits 222 by itself was taken for a taken claim")
	}
}

// The staged stdin is unlinked before the command runs: the command reads it whole, and
// by then no file holds it.
func TestStdinScriptUnlinksTheFileBeforeTheCommand(t *testing.T) {
	for _, shell := range shells(t) {
		t.Run(filepath.Base(shell), func(t *testing.T) {
			staged := filepath.Join(t.TempDir(), "fediversity-stdin-x")
			if err := os.WriteFile(staged, []byte("join-token-s3cret"), 0o600); err != nil {
				t.Fatal(err)
			}
			argv := []string{"/bin/sh", "-c", stdinScript, staged, "sh", "-c", `cat; test -e "$1" && echo " still on disk" || echo " gone"`, "sh", staged}
			res := runLocal(t, shell, argv, "")
			if string(res.Stdout) != "join-token-s3cret gone\n" {
				t.Fatalf("stdout %q (stderr %q), want the token read whole and its file gone while the command runs", res.Stdout, res.Stderr)
			}
			if _, err := os.Stat(staged); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the staged stdin is still there: %v", err)
			}
		})
	}
}

// The node's setup at a run's start: the staging directory is made private, and what
// killed runs left (there and in the old /var/tmp place) is removed; a live run's
// fresh file and other files are left alone.
func TestNodeSetupScriptRemovesLeftovers(t *testing.T) {
	root := t.TempDir()
	stdin, legacy, claimsRoot := filepath.Join(root, "stdin"), filepath.Join(root, "var-tmp"), filepath.Join(root, "claims")
	old := time.Now().Add(-10 * time.Minute)
	write := func(p string, at time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(stdin, "fediversity-stdin-killed"), old)
	write(filepath.Join(stdin, "fediversity-stdin-live"), time.Now())
	write(filepath.Join(legacy, "fediversity-stdin-killed"), old)
	write(filepath.Join(legacy, "fediversity-import-x"), old)
	write(filepath.Join(legacy, "someone-else"), old)
	write(filepath.Join(claimsRoot, "gone-session", "b"), old)
	if err := os.Chtimes(filepath.Join(claimsRoot, "gone-session"), old.Add(-2*time.Hour), old.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stdin, 0o755); err != nil { // made by someone with a wider mode
		t.Fatal(err)
	}
	argv := []string{"/bin/sh", "-c", nodeSetupScript, "sh", stdin, legacy, claimsRoot, filepath.Join(claimsRoot, "mine")}
	if res := runLocal(t, "/bin/sh", argv, ""); res.ExitCode != 0 {
		t.Fatalf("setup exited %d: %s", res.ExitCode, res.Stderr)
	}
	for p, want := range map[string]bool{
		filepath.Join(stdin, "fediversity-stdin-killed"):  false,
		filepath.Join(stdin, "fediversity-stdin-live"):    true,
		filepath.Join(legacy, "fediversity-stdin-killed"): false,
		filepath.Join(legacy, "fediversity-import-x"):     true,
		filepath.Join(legacy, "someone-else"):             true,
		filepath.Join(claimsRoot, "gone-session"):         false,
		filepath.Join(claimsRoot, "mine"):                 true,
	} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", p, err == nil, want)
		}
	}
	for _, d := range []string{stdin, filepath.Join(claimsRoot, "mine")} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", d, st.Mode().Perm(), err)
		}
	}
}
