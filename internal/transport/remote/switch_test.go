package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// fakeNode models the node side of the detached switch protocol. The deployer host
// has no systemd and a dropped connection cannot be placed at an exact poll with a
// real sshd, so the poll state machine (faults between polls, a unit that vanished,
// a re-dial) is unit-tested here; the SSH lab tests prove the protocol for real.
type fakeNode struct {
	polls     []string // answers to successive polls; "fault" = transport error
	dialCount uint64
	dialAt    int // poll index at which the runner re-dials (0: never)
	pollN     int
	unit      string
	prefix    string
	files     map[string]string
	startErr  error
}

func (f *fakeNode) Dials() uint64 { return f.dialCount }

func (f *fakeNode) Exec(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	argv = withoutPath(argv)
	switch {
	case slices.Contains(argv, "systemd-run"):
		for _, a := range argv {
			if u, ok := strings.CutPrefix(a, "--unit="); ok {
				f.unit = u
			}
		}
		f.prefix = argv[len(argv)-1]
		if want := ResultDir + "/" + f.unit; f.prefix != want || argv[2] != StartScript || argv[5] != f.prefix || argv[6] != f.unit {
			return 1, fmt.Errorf("fake: result prefix %q, want %q", f.prefix, want)
		}
		if f.startErr != nil {
			return 0, f.startErr
		}
		return f.answerPoll(stdout, stderr) // the start script goes on as the first poll
	case (len(argv) == 7 || len(argv) == 10) && argv[2] == PollScript:
		if argv[4] != f.prefix || argv[5] != f.unit || argv[6] == "" {
			return 1, fmt.Errorf("fake: poll of %v, started %s", argv[4:], f.unit)
		}
		return f.answerPoll(stdout, stderr)
	}
	return 1, fmt.Errorf("fake: unexpected command %q", argv)
}

func (f *fakeNode) answerPoll(stdout, stderr io.Writer) (int, error) {
	i := f.pollN
	f.pollN++
	if f.dialAt != 0 && i == f.dialAt {
		f.dialCount++
	}
	ans := f.polls[min(i, len(f.polls)-1)]
	if ans == "fault" {
		return 0, &TransportError{Err: errors.New("connection lost")}
	}
	if _, err := fmt.Fprintln(stdout, ans); err != nil {
		return 0, err
	}
	if strings.HasPrefix(ans, "rc ") { // the poll script sends the result with the code
		_, _ = fmt.Fprint(stdout, f.files[".out"])
		_, _ = fmt.Fprint(stderr, f.files[".err"])
	}
	return 0, nil
}

const testToplevel = "/nix/store/yz1f3iqli0jfd7wzg3vngchnpjq7xnp5-nixos-system-fedi-good-1"

func fastOpts() SwitchOptions {
	return SwitchOptions{PollInterval: time.Millisecond, Grace: time.Minute, MaxTransportErrors: 5}
}

func TestSwitchReadsResult(t *testing.T) {
	files := map[string]string{".out": "o", ".err": "warning: the following units failed: a.service\n"}
	cases := []struct {
		name          string
		node          *fakeNode
		code          int
		reconnected   bool
		wantErrSubstr string
	}{
		{name: "plain", node: &fakeNode{polls: []string{"unit active loaded", "unit active loaded", "rc 4"}}, code: 4},
		{name: "faults between polls", node: &fakeNode{polls: []string{"unit active loaded", "fault", "fault", "rc 0"}}, code: 0, reconnected: true},
		{name: "runner re-dialled", node: &fakeNode{polls: []string{"unit active loaded", "unit active loaded", "rc 0"}, dialAt: 1}, code: 0, reconnected: true},
		{name: "start result lost", node: &fakeNode{polls: []string{"rc 0"}, startErr: &TransportError{Err: io.EOF}}, code: 0, reconnected: true},
		{name: "unit vanished", node: &fakeNode{polls: []string{"unit inactive not-found"}}, wantErrSubstr: "without leaving a result"},
		{name: "node lost for good", node: &fakeNode{polls: []string{"fault"}}, wantErrSubstr: "could not reconnect after 5"},
		{name: "start refused", node: &fakeNode{polls: []string{"rc 0"}, startErr: errors.New("exit 1")}, wantErrSubstr: "start fediversity-switch-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.node.files = files
			res, err := Switch(context.Background(), c.node, testToplevel, "switch", time.Minute, fastOpts())
			if c.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErrSubstr) {
					t.Fatalf("err = %v, want it to contain %q", err, c.wantErrSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != c.code || res.Reconnected != c.reconnected || res.Stderr != files[".err"] || res.Stdout != "o" {
				t.Fatalf("got %+v, want code %d reconnected %v", res, c.code, c.reconnected)
			}
			if !strings.HasPrefix(c.node.unit, SwitchUnitPrefix) {
				t.Fatalf("unit %q", c.node.unit)
			}
		})
	}
}

func TestSwitchRefusesBadInput(t *testing.T) {
	n := &fakeNode{polls: []string{"rc 0"}}
	for _, c := range []struct{ top, action string }{
		{"/tmp/x", "switch"},
		{testToplevel + "; rm -rf /", "switch"},
		{testToplevel, "switch; reboot"},
		{testToplevel, ""},
	} {
		if _, err := Switch(context.Background(), n, c.top, c.action, time.Minute, fastOpts()); err == nil {
			t.Errorf("Switch(%q, %q) accepted", c.top, c.action)
		}
	}
	if n.unit != "" {
		t.Fatal("a refused switch started a unit")
	}
}

func TestTransportErrorsNameNode(t *testing.T) {
	tr := NewTransport("web01", &fakeNode{polls: []string{"fault"}}, nil)
	tr.SwitchOpts = fastOpts()
	_, err := tr.Switch(context.Background(), testToplevel, "switch", time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "node web01: switch:") {
		t.Fatalf("err = %v", err)
	}
	var _ deploybody.Transport = tr
}

// The poll script, run by a real /bin/sh (this machine has no systemd, so the unit
// state reads come back empty): it waits on the node for the result and hands the exit
// code, stdout and stderr back in one answer.
func TestPollScriptWaitsAndReadsTheResult(t *testing.T) {
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	dir := t.TempDir()
	prefix := dir + "/" + SwitchUnitPrefix + "abc"
	write := func(ext, s string) {
		if err := os.WriteFile(prefix+ext, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".out", "activating\n")
	write(".err", "warning: the following units failed: a.service\n")

	// No result yet and 3 ticks: the poll gives up and reports the unit's state.
	poll := func(ctx context.Context, r Runner, prefix, unit, ticks string) (string, string, error) {
		return runScript(ctx, r, []string{"/bin/sh", "-c", PollScript, "sh", prefix, unit, ticks})
	}
	out, _, err := poll(context.Background(), r, prefix, "x.service", "3")
	if err != nil || !strings.HasPrefix(out, "unit ") {
		t.Fatalf("no result: %q %v", out, err)
	}
	// The result appears while the poll waits: it is read in the same poll.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = os.WriteFile(prefix+".rc", []byte("4\n"), 0o600)
	}()
	out, stderr, err := poll(context.Background(), r, prefix, "x.service", "100")
	if err != nil {
		t.Fatal(err)
	}
	if out != "rc 4\nactivating\n" || stderr != "warning: the following units failed: a.service\n" {
		t.Fatalf("poll = %q, %q", out, stderr)
	}
	// The files stay, so a poll cut by a dropped connection can be repeated.
	if again, _, err := poll(context.Background(), r, prefix, "x.service", "1"); err != nil || again != out {
		t.Fatalf("second poll = %q %v", again, err)
	}
}

// The start script, run by a real /bin/sh with stand-ins for systemd-run: a start that
// succeeds goes on as the first poll; one that fails is exit 91 with its message.
func TestStartScriptStartsThenPolls(t *testing.T) {
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	dir := t.TempDir()
	prefix := dir + "/" + SwitchUnitPrefix + "def"
	// The stand-in "starts" a switch that ends at once with exit 0.
	out, _, err := runScript(context.Background(), r, []string{"/bin/sh", "-c", StartScript, "sh", dir, prefix, "x.service", "40", "", "", "", "", "", "0",
		"sh", "-c", `echo done >"$0.out"; echo 0 >"$0.rc"`, prefix})
	if err != nil || out != "rc 0\ndone\n" {
		t.Fatalf("start then poll: %q %v", out, err)
	}
	_, _, err = runScript(context.Background(), r, []string{"/bin/sh", "-c", StartScript, "sh", dir, prefix + "x", "x.service", "40", "", "", "", "", "", "0",
		"sh", "-c", `echo "Failed to start transient service unit" >&2; exit 1`})
	if err == nil || !strings.Contains(err.Error(), "systemd-run failed: 91: Failed to start transient service unit") {
		t.Fatalf("failed start: %v", err)
	}
}

// The detached script runs in a transient unit, whose PATH on NixOS is systemd's own bin
// directory and nothing else: run by a real /bin/sh with a PATH that finds nothing, it
// still leaves the switch's output and its exit code.
func TestDetachedScriptNeedsNoTools(t *testing.T) {
	dir := t.TempDir()
	top := dir + "/toplevel"
	if err := os.MkdirAll(top+"/bin", 0o755); err != nil {
		t.Fatal(err)
	}
	stc := "#!/bin/sh\necho \"activating $1\"; echo 'Failed to run activate script' >&2; exit 2\n"
	if err := os.WriteFile(top+"/bin/switch-to-configuration", []byte(stc), 0o755); err != nil {
		t.Fatal(err)
	}
	prefix := dir + "/" + SwitchUnitPrefix + "0"
	r := localRunner{env: []string{"PATH=" + dir + "/empty-systemd-bin"}}
	code, err := r.Exec(context.Background(), []string{"/bin/sh", "-c", DetachedScript, "sh", top, "test", prefix}, nil, io.Discard, io.Discard)
	if err != nil || code != 0 {
		t.Fatalf("detached script: exit %d, %v", code, err)
	}
	for ext, want := range map[string]string{".rc": "2\n", ".out": "activating test\n", ".err": "Failed to run activate script\n"} {
		got, err := os.ReadFile(prefix + ext)
		if err != nil || string(got) != want {
			t.Fatalf("%s = %q (%v), want %q", ext, got, err, want)
		}
	}
}

func TestMissingToolIsNamed(t *testing.T) {
	for stderr, want := range map[string]string{
		"sh: 1: flock: not found":              "flock",
		"bash: line 1: mv: command not found":  "mv",
		"sudo: nix-env: command not found\n":   "nix-env",
		"/bin/sh: 1: systemd-run: not found\n": "systemd-run",
		"something else went wrong entirely\n": "a command it runs",
	} {
		if got := MissingTool(127, stderr); got != want {
			t.Errorf("MissingTool(%q) = %q, want %q", stderr, got, want)
		}
	}
	if MissingTool(1, "sh: 1: mv: not found") != "" {
		t.Error("only exit 127 is a missing tool")
	}
	if !strings.Contains(LacksTool("flock"), "the node lacks `flock` on its PATH") {
		t.Error(LacksTool("flock"))
	}
}

// The poll given a script for after a clean switch (FinalizeBoot's release of its pins),
// run by a real /bin/sh: a clean result runs it in the same poll and hands back its exit
// code, stdout and stderr; a failed switch does not run it and hands back the switch's
// own output, as a poll without one does.
func TestPollScriptRunsTheAfterScriptOnlyAfterACleanSwitch(t *testing.T) {
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	dir := t.TempDir()
	after := `echo "released $2" >"$1.ran"; echo "$1-5-link"; echo "bootctl: note" >&2; exit 12`
	poll := func(prefix string) (string, string) {
		out, stderr, err := runScript(context.Background(), r, []string{"/bin/sh", "-c", PollScript, "sh", prefix, "x.service", "5", after, dir + "/system", testToplevel})
		if err != nil {
			t.Fatal(err)
		}
		return out, stderr
	}
	for prefix, files := range map[string]map[string]string{
		dir + "/clean":  {".rc": "0\n", ".out": "booting\n", ".err": "updating boot entries\n"},
		dir + "/failed": {".rc": "1\n", ".out": "booting\n", ".err": "Failed to install bootloader\n"},
	} {
		for ext, text := range files {
			if err := os.WriteFile(prefix+ext, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, stderr := poll(dir + "/clean")
	if out != "rc 0\nafter 12\n"+dir+"/system-5-link\n" || stderr != "bootctl: note\n" {
		t.Fatalf("clean: %q, %q", out, stderr)
	}
	if ran, err := os.ReadFile(dir + "/system.ran"); err != nil || string(ran) != "released "+testToplevel+"\n" {
		t.Fatalf("the after script's arguments: %q %v", ran, err)
	}
	if err := os.Remove(dir + "/system.ran"); err != nil {
		t.Fatal(err)
	}
	out, stderr = poll(dir + "/failed")
	if out != "rc 1\nbooting\n" || stderr != "Failed to install bootloader\n" {
		t.Fatalf("failed: %q, %q", out, stderr)
	}
	if _, err := os.Stat(dir + "/system.ran"); err == nil {
		t.Fatal("the after script ran after a failed switch")
	}
}

// FinalizeBoot reads the release of its pins from the poll that reads the boot's result:
// the profile's generation, and the errors of the release by its exit code, as they were
// when the release was a round trip of its own.
func TestFinalizeBootReadsTheReleaseFromTheLastPoll(t *testing.T) {
	for _, c := range []struct {
		name, out, err string
		gen            int
		wantErr        string
	}{
		{name: "released", out: "after 0\n" + SystemProfile + "-7-link\n", gen: 7},
		{name: "boot pin", out: "after 12\n", err: "Failed to set default entry\n", wantErr: "bootctl set-default failed: Failed to set default entry"},
		{name: "missing tool", out: "after 127\n", err: "sh: 1: readlink: not found\n", wantErr: "the node lacks `readlink`"},
		{name: "other", out: "after 3\n", err: "boom\n", wantErr: "exited 3: boom"},
		{name: "garbled", out: "activating\n", wantErr: "not the release of its pins"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &fakeNode{polls: []string{"unit active loaded", "rc 0"}, files: map[string]string{".out": c.out, ".err": c.err}}
			gen, err := FinalizeBoot(context.Background(), n, testToplevel, time.Minute, fastOpts())
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || gen != c.gen {
				t.Fatalf("generation %d, %v; want %d", gen, err, c.gen)
			}
		})
	}
	n := &fakeNode{polls: []string{"rc 1"}, files: map[string]string{".out": "booting\n", ".err": "Failed to install bootloader\n"}}
	_, err := FinalizeBoot(context.Background(), n, testToplevel, time.Minute, fastOpts())
	var exit *deploybody.SwitchExitError
	if !errors.As(err, &exit) || exit.Action != "boot" || exit.Result.ExitCode != 1 {
		t.Fatalf("a failed boot: %v", err)
	}
}

// The start script with a guard, run by a real /bin/sh with a stand-in for systemd-run:
// the guard reads the script's stdin and its arguments, its answer comes back first as
// "guard" lines, and only an answer of "ok" lets the start go on (the profile, the
// unit, the first poll); any other answer, or a guard that fails, starts nothing.
func TestStartScriptRunsTheGuardFirst(t *testing.T) {
	r := localRunner{env: []string{"PATH=/usr/bin:/bin"}}
	dir := t.TempDir()
	guard := `cat >"$2"; echo "$1"; echo recorded`
	start := func(name, word string, guard string) (string, error) {
		prefix := dir + "/" + SwitchUnitPrefix + name
		out, _, err := runScriptWith(context.Background(), r, []string{"/bin/sh", "-c", StartScript, "sh", dir, prefix, "x.service", "40", "", "", "",
			guard, "/nonexistent", "2", word, dir + "/" + name + ".record",
			"sh", "-c", `echo done >"$0.out"; echo 0 >"$0.rc"`, prefix}, []byte("{\"verdict\":1}"))
		return out, err
	}
	out, err := start("ok", "ok", guard)
	if err != nil || out != "guard ok\nguard recorded\nrc 0\ndone\n" {
		t.Fatalf("guard ok: %q %v", out, err)
	}
	if rec, err := os.ReadFile(dir + "/ok.record"); err != nil || string(rec) != `{"verdict":1}` {
		t.Fatalf("the guard's stdin: %q %v", rec, err)
	}
	if answer, rest := cutGuardAnswer(out); !slices.Equal(answer, []string{"ok", "recorded"}) || rest != "rc 0\ndone\n" {
		t.Fatalf("cutGuardAnswer = %q, %q", answer, rest)
	}
	for _, c := range []struct{ name, word, guard, want string }{
		{"lost", "lost", guard, "guard lost\nguard recorded\n"},
		{"failed", "ok", `echo ok; exit 3`, "guard \n"},
	} {
		out, err := start(c.name, c.word, c.guard)
		if err != nil || out != c.want {
			t.Fatalf("%s: %q %v, want %q", c.name, out, err, c.want)
		}
		if _, err := os.Stat(dir + "/" + SwitchUnitPrefix + c.name + ".rc"); err == nil {
			t.Fatalf("%s: the unit was started", c.name)
		}
	}
}

// NixOS's /bin/sh is bash: there the poll waits on the wake FIFO the start script makes,
// and the switch's script wakes it, so no poll forks a sleep while the switch runs (a
// sleep fifty times a second cost a lab node half a core). Run by a real bash, with a
// `sleep` on the PATH that records each call: the switch takes about a second (an
// absolute sleep of the stand-in's own), the result comes back in the first poll, and
// the recording sleep was never called. Under /bin/sh (dash here: no `read -t`), the
// other tests above show the same poll falling back to its ticks.
func TestPollWaitsOnTheWakeFIFOWithoutForking(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed: it is /bin/sh on every NixOS node")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := dir + "/bin"
	top := dir + "/toplevel"
	for _, d := range []string{bin, top + "/bin"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	calls := dir + "/sleep-calls"
	recording := "#!" + bash + "\necho \"$*\" >>" + calls + "\nexec " + sleep + " \"$@\"\n"
	stc := "#!" + bash + "\n" + sleep + " 1; echo \"switched $1\"\n"
	for path, text := range map[string]string{bin + "/sleep": recording, top + "/bin/switch-to-configuration": stc} {
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The stand-in for systemd-run starts the detached script in the background, as the
	// transient unit runs it, and returns.
	systemdRun := "#!" + bash + "\n" + `"$@" </dev/null >/dev/null 2>&1 &` + "\n"
	if err := os.WriteFile(bin+"/systemd-run", []byte(systemdRun), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"cat", "mkdir", "mkfifo"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, bin+"/"+tool); err != nil {
			t.Fatal(err)
		}
	}
	prefix := dir + "/" + SwitchUnitPrefix + "fifo"
	argv := []string{StartScript, "sh", dir, prefix, "x.service", "500", "", top, "", "", "", "0",
		"systemd-run", bash, "-c", DetachedScript, "sh", top, "test", prefix}
	cmd := exec.Command(bash, append([]string{"-c"}, argv...)...)
	cmd.Env = []string{"PATH=" + bin}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("start: %v (%s)", err, out)
	}
	if string(out) != "rc 0\nswitched test\n" {
		t.Fatalf("start then poll = %q", out)
	}
	if fi, err := os.Stat(prefix + ".wake"); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("no wake FIFO beside the result: %v", err)
	}
	if got, err := os.ReadFile(calls); err == nil {
		t.Fatalf("the poll forked sleep while it waited: %q", got)
	}
}

// A poll of the default wait (5 s) of a switch still running asks systemd for the
// unit's state once, when it answers, and not every two seconds while it waits: each
// systemctl costs a lab node 15–25 ms of CPU, and sixteen nodes switching share the
// deployer's two cores (lab/bench-fleet.sh). Run by bash (NixOS' /bin/sh) with a
// stand-in systemctl that records its calls: no systemd is needed to count them.
func TestPollOfASwitchStillRunningAsksSystemdOnce(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed: it is /bin/sh on every NixOS node")
	}
	dir := t.TempDir()
	calls := dir + "/systemctl-calls"
	systemctl := "#!" + bash + "\necho \"$*\" >>" + calls + "\necho ActiveState=active; echo LoadState=loaded\n"
	if err := os.WriteFile(dir+"/systemctl", []byte(systemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	mkfifo, err := exec.LookPath("mkfifo")
	if err != nil {
		t.Fatal(err)
	}
	prefix := dir + "/" + SwitchUnitPrefix + "running"
	if out, err := exec.Command(mkfifo, "-m", "600", prefix+".wake").CombinedOutput(); err != nil {
		t.Fatalf("mkfifo: %v (%s)", err, out)
	}
	ticks := strconv.Itoa(int((5 * time.Second) / pollTick))
	cmd := exec.Command(bash, "-c", PollScript, "sh", prefix, "x.service", ticks)
	cmd.Env = []string{"PATH=" + dir}
	out, err := cmd.Output()
	if err != nil || string(out) != "unit active loaded\n" {
		t.Fatalf("poll = %q, %v", out, err)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(got), "\n"); n != 1 {
		t.Fatalf("a 5 s poll called systemctl %d times, want once: %q", n, got)
	}
}
