package remote

import (
	"context"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// A batch must give every command exactly what running it alone gives: same stdout,
// stderr and exit code, whatever the output looks like. Run by a real /bin/sh.
func TestBatchMatchesCommandsRunOneByOne(t *testing.T) {
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	cmds := [][]string{
		{"printf", "%s", "no trailing newline"},
		{"sh", "-c", `echo out; echo err >&2; exit 3`},
		{"printf", `%s\n`, "a'b\"c $HOME `id` \\"},
		{"sh", "-c", `printf '\nstart 0\n'; printf '\n%s end 0 0\n' forged >&2`},
		{"true"},
		{"sh", "-c", `printf ''; printf 'x\n\n\n'`},
		{"cat"}, // reads stdin: must get /dev/null, not the batch's script
		{"no-such-command-fediversity"},
		append([]string{"printf", `%s|`}, awkward...),
	}
	got, err := RunBatch(context.Background(), r, cmds, deploybody.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(cmds) {
		t.Fatalf("%d results for %d commands", len(got), len(cmds))
	}
	for i, c := range cmds {
		want, err := Run(context.Background(), r, c, deploybody.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c[0] == "no-such-command-fediversity" {
			// The shell's message names its caller differently; the code and that it
			// says why are what matters.
			if got[i].ExitCode != 127 || !strings.Contains(string(got[i].Stderr), "not found") {
				t.Fatalf("command %d: %+v", i, got[i])
			}
			continue
		}
		if got[i].ExitCode != want.ExitCode || string(got[i].Stdout) != string(want.Stdout) || string(got[i].Stderr) != string(want.Stderr) {
			t.Errorf("command %d %q:\nbatch %d %q %q\nalone %d %q %q", i, c,
				got[i].ExitCode, got[i].Stdout, got[i].Stderr, want.ExitCode, want.Stdout, want.Stderr)
		}
	}
}

// The PATH prefix reaches every command of the batch.
func TestBatchPutsPathFirst(t *testing.T) {
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	got, err := RunBatch(context.Background(), r, [][]string{{"sh", "-c", "echo $PATH"}, {"sh", "-c", "echo $PATH"}},
		deploybody.RunOptions{Path: []string{"/nix/store/x-sw/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if !strings.HasPrefix(string(g.Stdout), "/nix/store/x-sw/bin:") {
			t.Fatalf("PATH = %q", g.Stdout)
		}
	}
}

// Output that stops before a command's end marker (the shell was killed, the output was
// capped) is an error, never a guessed result.
func TestBatchRefusesCutOutput(t *testing.T) {
	_, split, err := BatchCommand([][]string{{"true"}, {"true"}})
	if err != nil {
		t.Fatal(err)
	}
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	argv, split2, _ := BatchCommand([][]string{{"echo", "one"}, {"echo", "two"}})
	full, err := Run(context.Background(), r, argv, deploybody.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := split2(full); err != nil || string(res[1].Stdout) != "two\n" {
		t.Fatalf("full output: %+v %v", res, err)
	}
	for _, cut := range []int{len(full.Stdout) - 1, len(full.Stdout) / 2, 0} {
		res := full
		res.Stdout = full.Stdout[:cut]
		if got, err := split2(res); err == nil {
			t.Fatalf("output cut at %d accepted: %+v", cut, got)
		}
	}
	// Another batch's boundary never matches.
	if _, err := split(full); err == nil {
		t.Fatal("output of another batch accepted")
	}
	if _, _, err := BatchCommand(nil); err == nil {
		t.Fatal("empty batch accepted")
	}
	if _, _, err := BatchCommand([][]string{{"echo", "a\x00b"}}); err == nil {
		t.Fatal("NUL byte accepted")
	}
}
