// Command fediversity is the `ssh` deployment method: it deploys (or judges) a group of
// NixOS nodes over SSH from a submission, without Terraform and without state, and
// prints one verdict per node.
//
//	fediversity deploy  --roster nodes.json [--submission s.json --baked b.json] [--parallel 10] [--strict|--lenient] [--output table|json]
//	                    [--canary 1|web01,web02] [--wave-size 2|50%] [--waves 'a,b;c'] [--failure-budget 1|20%]
//	fediversity verdict --roster nodes.json [--every 5m] [...]
//	fediversity rollback --roster nodes.json [--to last-good] [rollout flags] [...]
//	fediversity incus inspect-copy [--project P] <instance> <snapshot> <new-name>
//
// `incus inspect-copy` makes a copy, for inspection, of the state a restore of an
// Incus node kept aside (docs/transports.md#incus-snapshots): its volumes are copies of the
// bricked volume snapshots, and nothing of the live node is in it.
//
// A deploy can be staged (the roster's "rollout", or the flags): a canary, then waves,
// under a failure budget; past the budget the rollout halts and later waves are not
// touched (docs/rollouts.md#staged-rollouts).
//
// On request, each of them also writes the verdicts for CI and monitoring, each file
// atomically: --junit FILE (JUnit XML, one test case per node) and --metrics FILE
// (Prometheus text format, for node_exporter's textfile collector). `verdict --every
// 5m` judges the group again and again, rewriting those files, until SIGTERM or
// SIGINT ends it (exit 0, once a pass in progress has finished and been written).
//
// Exit codes: 0 every node is ok, 1 a verdict failed (or a node could not be deployed),
// 2 bad input (nothing was done on any node), 130 quit by a second interrupt (what each
// unfinished run may have left on its node is printed on stderr).
//
// Every node's warnings are printed: in the table (one "<node>: warning: …" line each)
// and in --json ("warnings").
//
// It only parses, runs and prints: the engines (internal/fleet, internal/deploybody,
// internal/submission, the SSH transport) are the provider's own.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/submission"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitBadInput = 2
)

var version = "dev"

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	nodes := newNodePhases()
	go watchInterrupts(signals, cancel, nodes, os.Stderr, os.Exit)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nodes)
	signal.Stop(signals)
	cancel()
	os.Exit(code)
}

const usage = `usage: fediversity <command> [flags]

commands:
  deploy    build each enabled node, copy its closure, switch it and judge it
  verdict   judge the running nodes (no build, no copy, no switch);
            with --every 5m, again and again until SIGTERM or SIGINT
  rollback  switch every node back to its last good system and judge it
  incus inspect-copy <instance> <snapshot> <new-name>
            make a stopped copy of a state a restore kept aside, with copies
            of its volumes' snapshots and nothing of the live node
  version   print the version

deploy, verdict and rollback also write the verdicts, on request, each file
atomically: --junit FILE (JUnit XML, one test case per node) and --metrics FILE
(Prometheus text format, for node_exporter's textfile collector).

Run 'fediversity <command> -h' for the flags. Credentials come from
SSH_PRIVATE_KEY_FILE and SSH_AUTH_SOCK, never from flags or the roster.
`

// run runs the command; nodes follows the runs' phases (for a second interrupt).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, nodes *nodePhases) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitBadInput
	}
	switch args[0] {
	case "deploy", "verdict", "rollback":
		return runGroup(ctx, args[0], args[1:], stdout, stderr, nodes)
	case "incus":
		return runIncus(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "fediversity", version)
		return exitOK
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "fediversity: unknown command %q\n\n%s", args[0], usage)
		return exitBadInput
	}
}

type groupFlags struct {
	roster, submissionFile, bakedFile, method, identityKeys, operatorRoot string
	parallel                                                              int
	strict, lenient, json                                                 bool
	output, to, activation                                                string
	rollout                                                               rolloutFlags
	junit, metrics                                                        string
	every                                                                 time.Duration
}

func runGroup(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer, nodes *nodePhases) int {
	fs := flag.NewFlagSet("fediversity "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f groupFlags
	fs.StringVar(&f.roster, "roster", "", "roster file: how to reach (and build) each node (required)")
	fs.StringVar(&f.submissionFile, "submission", "", "submission file (JSON); without it every roster node runs with no node plan")
	fs.StringVar(&f.bakedFile, "baked", "", "baked configuration (JSON) the submission is merged into (required with --submission)")
	fs.StringVar(&f.method, "method", "ssh", "deployment method whose branch of the submission is taken")
	fs.StringVar(&f.identityKeys, "identity-keys", "", "comma-separated node identity keys that reach a node plan")
	fs.StringVar(&f.operatorRoot, "operator-root", "", "operator tree file references are relative to (default: the submission's directory)")
	fs.IntVar(&f.parallel, "parallel", fleet.DefaultParallel, "how many nodes run at once")
	fs.BoolVar(&f.strict, "strict", false, "a failed unit fails the node (the default)")
	fs.BoolVar(&f.lenient, "lenient", false, "a failed unit is named and warned about, but does not fail the node")
	fs.BoolVar(&f.json, "json", false, "print the verdicts as JSON on stdout (the same as --output json)")
	fs.StringVar(&f.output, "output", "table", "table, or json: the per-node verdicts and the rollout's waves and budget, for CI and monitoring")
	fs.StringVar(&f.junit, "junit", "", "also write the verdicts to `FILE` as JUnit XML: one test case per node, failing with its reasons and report (written atomically)")
	fs.StringVar(&f.metrics, "metrics", "", "also write the verdicts to `FILE` as Prometheus metrics, for node_exporter's textfile collector (a *.prom file in its directory; written atomically)")
	if cmd == "verdict" {
		fs.DurationVar(&f.every, "every", 0, "judge the group again and again, this long after each pass ends (2s or more; e.g. 5m), rewriting the --junit and --metrics files, until SIGTERM or SIGINT")
	}
	if cmd != "verdict" {
		f.rollout.register(fs)
	}
	if cmd != "verdict" {
		fs.StringVar(&f.activation, "activation", "", "how every node comes to run its new system, over its roster entry: switch, boot, reboot-if-needed or reboot (roster: activation; default switch)")
	}
	if cmd == "rollback" {
		fs.StringVar(&f.to, "to", "last-good", "what to switch each node back to: last-good, the system of its last clean verdict (pinned on the node)")
	}
	if err := fs.Parse(args); err != nil {
		return exitBadInput
	}
	if fs.NArg() > 0 {
		return badInput(stderr, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	switch f.output {
	case "json":
		f.json = true
	case "table":
	default:
		return badInput(stderr, fmt.Errorf("--output: %q: want table or json", f.output))
	}
	g, err := f.group(cmd)
	if err != nil {
		return badInput(stderr, err)
	}
	planned, _, err := g.Plan()
	if err != nil {
		return badInput(stderr, err)
	}
	nodes.start(planned, g.VerdictOnly)
	progress := newProgress(stderr)
	g.Progress = func(e fleet.Event) {
		if e.Notice != "" {
			progress.notice(e.Notice)
			return
		}
		nodes.observe(e)
		progress.event(e)
	}
	g.WaveStarted = progress.wave
	p := pass{group: g, flags: f, exports: &exports{junit: f.junit, metrics: f.metrics, command: cmd, roster: f.roster},
		stdout: stdout, stderr: stderr}
	if f.every > 0 {
		return p.repeat(ctx, f.every)
	}
	return p.run(ctx)
}

// pass is one run of the command over the group: it prints the verdicts and writes
// the exports.
type pass struct {
	group          *fleet.Group
	flags          groupFlags
	exports        *exports
	stdout, stderr io.Writer
}

// run runs the group once.
func (p pass) run(ctx context.Context) int {
	start := time.Now()
	outcomes, rollout, err := p.group.RunRollout(ctx)
	if err != nil {
		return badInput(p.stderr, err)
	}
	summary := summarize(outcomes, rolloutJSON(rollout, p.group.Rollout.Staged()))
	code := exitOK
	for _, o := range outcomes {
		if !o.OK() {
			code = exitFailed
		}
	}
	if p.flags.json {
		if err := writeJSON(p.stdout, summary); err != nil {
			fmt.Fprintln(p.stderr, "fediversity:", err)
			code = exitFailed
		}
	} else {
		writeTable(p.stdout, outcomes)
		writeRolloutTable(p.stdout, rollout, p.group.Rollout.Staged())
	}
	if err := p.exports.write(summary, start, time.Now()); err != nil {
		fmt.Fprintln(p.stderr, "fediversity:", err)
		code = exitFailed
	}
	return code
}

// minEvery bounds `verdict --every`: each pass reaches every node over SSH.
const minEvery = 2 * time.Second

// repeat is `verdict --every`: a pass, then a pause of every, again and again, until
// the stop signal (SIGTERM or SIGINT) ends ctx. A pass in progress then is finished,
// printed and written (a verdict pass is bounded by the nodes' settle, watch and
// checks), and the command exits 0; in the pause, it exits at once. Finished, not
// cancelled: a pass cut off while it takes a node's lock can leave the lock behind,
// and the files get the freshest verdicts. A second signal quits at once, as for any
// run. Failing verdicts do not end it: they are in the files.
func (p pass) repeat(ctx context.Context, every time.Duration) int {
	for {
		if code := p.run(context.WithoutCancel(ctx)); code == exitBadInput {
			return code
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(p.stderr, "fediversity: verdict --every: stopped; the files hold its last pass, finished")
			return exitOK
		case <-time.After(every):
		}
	}
}

func badInput(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "fediversity: bad input, nothing was done:")
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "  "+line)
	}
	return exitBadInput
}

// group turns the flags into a fleet.Group: the roster, and the node plans of the
// submission merged into the baked configuration.
func (f groupFlags) group(cmd string) (*fleet.Group, error) {
	verdictOnly := cmd == "verdict"
	if f.roster == "" {
		return nil, fmt.Errorf("--roster: missing: give the roster file (see 'fediversity %s -h')", cmd)
	}
	if cmd == "rollback" && f.to != "last-good" {
		return nil, fmt.Errorf("--to: %q: want last-good (each node's system of its last clean verdict)", f.to)
	}
	if f.strict && f.lenient {
		return nil, fmt.Errorf("--strict and --lenient: give at most one")
	}
	if !deploybody.ValidActivation(f.activation) {
		return nil, fmt.Errorf("--activation: %q: want switch, boot, reboot-if-needed or reboot", f.activation)
	}
	if f.parallel < 1 {
		return nil, fmt.Errorf("--parallel: %d: want 1 or more", f.parallel)
	}
	if err := f.checkExports(); err != nil {
		return nil, err
	}
	roster, err := fleet.LoadRoster(f.roster)
	if err != nil {
		return nil, err
	}
	g := &fleet.Group{
		Roster:      roster,
		VerdictOnly: verdictOnly,
		ToLastGood:  cmd == "rollback",
		Strict:      !f.lenient,
		Activation:  f.activation,
		Parallel:    f.parallel,
		Credentials: fleet.CredentialsFromEnv(),
	}
	if !verdictOnly {
		if g.Rollout, err = f.rollout.rollout(roster.Rollout); err != nil {
			return nil, err
		}
	}
	if f.submissionFile == "" && f.bakedFile == "" {
		return g, nil
	}
	plans, err := f.nodePlans(g.Credentials)
	if err != nil {
		return nil, err
	}
	g.NodePlans = plans
	return g, nil
}

func (f groupFlags) nodePlans(creds fleet.Credentials) (map[string]string, error) {
	if f.bakedFile == "" {
		return nil, fmt.Errorf("--baked: missing: the submission is merged into a baked configuration")
	}
	baked, err := os.ReadFile(f.bakedFile)
	if err != nil {
		return nil, fmt.Errorf("--baked: %v", err)
	}
	in := submission.Input{Baked: baked, Method: f.method, OperatorRoot: f.operatorRoot,
		PerRunValues: map[string]string{}}
	if creds.PrivateKeyFile != "" {
		in.PerRunValues["SSH_PRIVATE_KEY_FILE"] = creds.PrivateKeyFile
	}
	if creds.AgentSocket != "" {
		in.PerRunValues["SSH_AUTH_SOCK"] = creds.AgentSocket
	}
	if f.identityKeys != "" {
		in.IdentityKeys = strings.Split(f.identityKeys, ",")
	}
	if f.submissionFile != "" {
		if in.Submission, err = submission.ReadFile(f.submissionFile); err != nil {
			return nil, fmt.Errorf("--submission: %v", err)
		}
		if in.OperatorRoot == "" {
			in.OperatorRoot = filepath.Dir(f.submissionFile)
		}
	}
	if in.OperatorRoot == "" {
		in.OperatorRoot = "."
	}
	if in.OperatorRoot, err = filepath.Abs(in.OperatorRoot); err != nil {
		return nil, fmt.Errorf("--operator-root: %v", err)
	}
	res, err := submission.Evaluate(in)
	if err != nil {
		return nil, fmt.Errorf("submission %s merged into %s: %v", f.submissionFile, f.bakedFile, err)
	}
	return res.NodePlans, nil
}

// checkExports checks --junit, --metrics and --every before anything runs.
func (f groupFlags) checkExports() error {
	if f.every < 0 || (f.every > 0 && f.every < minEvery) {
		return fmt.Errorf("--every: %s: want %s or more (each pass judges every node over SSH)", f.every, minEvery)
	}
	if f.junit != "" && f.junit == f.metrics {
		return fmt.Errorf("--junit and --metrics: both name %s: give each its own file", f.junit)
	}
	for name, path := range map[string]string{"--junit": f.junit, "--metrics": f.metrics} {
		if path == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
			return fmt.Errorf("%s: %s: its directory %s does not exist: create it first", name, path, filepath.Dir(path))
		}
	}
	return nil
}
