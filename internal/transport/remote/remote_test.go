package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// localRunner runs argv on this machine with a real /bin/sh: the quoting and PATH logic
// is then exercised by a real shell, not by a model of one.
type localRunner struct{ env []string }

func (l localRunner) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	// Go through a shell command line, as SSH does, so ShellJoin is what is tested.
	line, err := ShellJoin(argv)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.Env = l.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

var awkward = []string{
	"", " ", "a b", "'", `"`, `\`, "$HOME", "`id`", "$(id)", "a'b\"c", "*", "?", "~",
	"\n", "\t", "x\ny", ";", "&&", "|", ">", "<", "#", "!", "{a,b}", "-n", "--", "é ü", "'\\''",
}

func printArgs(t *testing.T, shell string, args []string) []string {
	t.Helper()
	line, err := ShellJoin(append([]string{"printf", `%s\0`}, args...))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(shell, "-c", line).Output()
	if err != nil {
		t.Fatalf("%s -c %q: %v", shell, line, err)
	}
	got := strings.Split(string(out), "\x00")
	return got[:len(got)-1]
}

func TestQuoteRoundTripsThroughRealShells(t *testing.T) {
	for _, shell := range []string{"/bin/sh", "/bin/bash"} {
		if _, err := os.Stat(shell); err != nil {
			continue
		}
		got := printArgs(t, shell, awkward)
		if len(got) != len(awkward) {
			t.Fatalf("%s: got %d args, want %d: %q", shell, len(got), len(awkward), got)
		}
		for i := range awkward {
			if got[i] != awkward[i] {
				t.Errorf("%s: arg %d = %q, want %q", shell, i, got[i], awkward[i])
			}
		}
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range awkward {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			if _, err := ShellJoin([]string{"echo", s}); err == nil {
				t.Fatal("ShellJoin accepted a NUL byte")
			}
			return
		}
		q := Quote(s)
		if !strings.HasPrefix(q, "'") || !strings.HasSuffix(q, "'") {
			t.Fatalf("Quote(%q) = %q is not single-quoted", s, q)
		}
		out, err := exec.Command("/bin/sh", "-c", `printf '%s' `+q).Output()
		if err != nil {
			t.Fatalf("sh rejected Quote(%q) = %q: %v", s, q, err)
		}
		if string(out) != s {
			t.Fatalf("Quote(%q) = %q came back as %q", s, q, out)
		}
	})
}

func TestShellJoinRefuses(t *testing.T) {
	if _, err := ShellJoin(nil); err == nil {
		t.Error("empty argv accepted")
	}
	if _, err := ShellJoin([]string{"a\x00b"}); err == nil {
		t.Error("NUL accepted")
	}
}

func TestRunPutsClosureToolsFirstAndKeepsArguments(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "fedi-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\nprintf 'closure:%s\\n' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A node whose own PATH resolves nothing useful still finds the closure's tools.
	r := localRunner{env: []string{"PATH=/nonexistent"}}
	ctx := context.Background()
	res, err := Run(ctx, r, []string{"fedi-tool", "a b", "$(id)", "'"}, deploybody.RunOptions{Path: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "closure:a b\nclosure:$(id)\nclosure:'\n"; string(res.Stdout) != want || res.ExitCode != 0 {
		t.Fatalf("got exit %d stdout %q, want %q", res.ExitCode, res.Stdout, want)
	}
	// Without the prefix the tool is not found: exit 127, not a transport error.
	res, err = Run(ctx, r, []string{"fedi-tool"}, deploybody.RunOptions{})
	if err != nil || res.ExitCode != 127 {
		t.Fatalf("without Path: exit %d err %v, want 127 and nil", res.ExitCode, err)
	}
	// Stdin reaches the command.
	res, err = Run(ctx, localRunner{env: os.Environ()}, []string{"cat"}, deploybody.RunOptions{Stdin: []byte("in put")})
	if err != nil || string(res.Stdout) != "in put" {
		t.Fatalf("stdin: %q %v", res.Stdout, err)
	}
}

func TestWithPathOrder(t *testing.T) {
	r := localRunner{env: []string{"PATH=/node/bin"}}
	argv, err := WithPath([]string{"/bin/sh", "-c", `printf %s "$PATH"`}, []string{"/p1", "/p2"}, []string{"/s1"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := r.Exec(context.Background(), argv, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != "/p1:/p2:/node/bin:/s1" {
		t.Fatalf("PATH = %q", out.String())
	}
	// An empty node PATH gets no empty entry (which would mean the working directory).
	argv, _ = WithPath([]string{"/bin/sh", "-c", `printf %s "$PATH"`}, nil, []string{"/s1"})
	out.Reset()
	if _, err := (localRunner{env: []string{"PATH="}}).Exec(context.Background(), argv, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != "/s1" {
		t.Fatalf("PATH with empty node PATH = %q", out.String())
	}
	if _, err := WithPath([]string{"x"}, []string{"/a:/b"}, nil); err == nil {
		t.Error("PATH entry with ':' accepted")
	}
}

// A /bin/sh script gets its PATH in front of it, run by the one shell: its name, its
// arguments and its line numbers stay its own, and so do entries the shell would read
// as syntax. Any other command still goes through the wrapper script.
func TestWithPathPutsThePathInFrontOfAShellScript(t *testing.T) {
	r := localRunner{env: []string{"PATH=/node/bin"}}
	script := `printf '%s|%s|%s|%s\n' "$PATH" "$0" "$1" "$2"
fedi-not-a-command`
	argv, err := WithPath([]string{"/bin/sh", "-c", script, "name", "a b", "$x;'"}, []string{"/p1", "/it's $(here)"}, []string{"/s1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(argv) != 6 || argv[0] != "/bin/sh" || argv[1] != "-c" || argv[2] == pathScript {
		t.Fatalf("a shell script was wrapped, not given its PATH in front: %q", argv)
	}
	var out, errOut bytes.Buffer
	if code, err := r.Exec(context.Background(), argv, nil, &out, &errOut); err != nil || code != 127 {
		t.Fatalf("exit %d, %v; want 127 (the script's second line names no command)", code, err)
	}
	if want := "/p1:/it's $(here):/node/bin:/s1|name|a b|$x;'\n"; out.String() != want {
		t.Fatalf("the script printed %q, want %q", out.String(), want)
	}
	// dash says "name: 2: …", bash "name: line 2: …".
	if msg := errOut.String(); !regexp.MustCompile(`^name: (line )?2: fedi-not-a-command`).MatchString(msg) || MissingTool(127, msg) != "fedi-not-a-command" {
		t.Fatalf("the shell's message %q does not name the script's line 2 and the command", msg)
	}
	if got := withoutPath(argv); !slices.Equal(got, []string{"/bin/sh", "-c", script, "name", "a b", "$x;'"}) {
		t.Fatalf("withoutPath = %q", got)
	}
	// Not a /bin/sh script: the wrapper, with the command's arguments as arguments.
	argv, _ = WithPath([]string{"sh", "-c", script}, []string{"/p1"}, nil)
	if argv[2] != pathScript || !slices.Equal(argv[6:], []string{"sh", "-c", script}) {
		t.Fatalf("sh from the PATH: %q", argv)
	}
}

// withoutPath is argv as it was before WithPath wrapped it: the fakes of this package's
// tests read the command, not its PATH.
func withoutPath(argv []string) []string {
	if len(argv) > 6 && argv[2] == pathScript {
		return argv[6:]
	}
	if len(argv) >= 3 && argv[0] == "/bin/sh" && argv[1] == "-c" && strings.HasPrefix(argv[2], "PATH=") {
		if _, script, ok := strings.Cut(argv[2], inlinePathEnd); ok {
			return append([]string{"/bin/sh", "-c", script}, argv[3:]...)
		}
	}
	return argv
}
