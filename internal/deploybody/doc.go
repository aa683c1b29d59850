// Package deploybody is the deploy body shared by every method that switches a NixOS
// closure on a node (docs/design.md#phases). It builds (or takes) a toplevel,
// copies it, switches the node, and judges whether the node came up; in verdict-only
// mode it only judges.
//
// It must not import the plugin framework, terraform-plugin-log, or any transport
// package: it programs against the Transport interface (transport.go) and a small
// Logger that the provider adapts to tflog. Tests use a simulated node.
//
// # Phases
//
// Deploy runs, in order, each timed, logged and recorded in Result.Phases:
// build → wait-for-node → lock-node → push-closure → wait-for-secret-chain →
// snapshot-unit-states → switch → read-switch-result → detect-unconfirmed-switch →
// collect-owned-units → restart-failed-owned-units → settle → watch → checks → classify →
// verdict → report → finalize-boot-entry → conclude (the Phases list in result.go). The verdict's failure is returned only in conclude,
// after the boot entry is finalized, so a node with a failed unit keeps the new boot
// entry. VerdictOnly records build, push-closure, switch, read-switch-result,
// detect-unconfirmed-switch and finalize-boot-entry as skipped.
//
// Decisions (docs/design.md#decisions):
//   - The toplevel's files are read on the deployer (Options.LocalRoot), not on the node.
//     Owned units are the valid unit names in <toplevel>/etc/systemd/system/ (an
//     instance is owned when its template is); wanted units are the names in its
//     *.wants, *.requires and *.upholds directories.
//   - A switch is unconfirmed when /run/current-system is not the new toplevel after
//     it; the run fails and the boot entry is left as it was (the switch runs
//     `switch-to-configuration test`, which touches no boot entry, and the boot entry
//     is set only after a verdict).
//   - In a deploy the secret chain is waited for before the switch, but only members
//     that are loaded and in progress, and a chain that does not come up is a warning:
//     the first pass judges a node before its secrets arrive. In verdict-only mode
//     the chain must come up.
//   - A job's age is how long this run has seen it (systemd publishes no creation
//     time); the run sees jobs from the snapshot on.
//   - A loop budget counts NRestarts. In verdict-only mode the watch goes on (at most
//     chain_wait longer) while a looping unit is within its budget; a unit still
//     looping past its budget fails the pass. In a deploy loops are named, never fatal.
//   - Unread sources (the bus did not answer) fail a strict verdict: an unread verdict
//     cannot claim the node converged. Lenient mode turns that into a warning.
//     An unreachable node fails in both modes.
//   - Spawn statuses 200–245 not listed as host faults (below) count as closure
//     faults, including unknown ones.
//
// # Data flow
//
// A run is a runEnv (env.go: the transport, the options, the mode, the deployer's view
// of the closure; read-only, with a warnings sink) and a flow (deploy.go: what the
// phases hand on to each other). Each phase is a method of runEnv that takes the
// context and what it reads as arguments and returns what it produces (built, snapshot,
// switched, confirmation, watched, …); the step table (runEnv.steps) is the only writer
// of the flow and of the Result. Phase files call only the shared files below them
// (env.go, reads.go, lock.go, selfrevert.go, judging.go, …), never another phase's
// file. `go run ./tools/pkggraph internal/deploybody` prints the calls between the
// files; its test fails on a back-arrow or a struct that holds a context.
//
// # Rooms (docs/design.md#deploy-body-rooms)
//
// Two packages sit below the body and import neither it nor each other:
//   - judge: the judging, pure over what the node printed: systemctl's output parsed
//     (UnitState, Job), the samples sorted into the classes below (Classify), pass or
//     fail (Decide), the report, and the operator's checks and probes;
//   - records: the node's records: the lock (LockScript, LockHolder), the verdict
//     record's and the last good system's files and scripts, the boot pin, and the
//     revert guard's script and its answers. The body runs those scripts through its
//     Transport.
//
// The body keeps the step table, the phases, and everything that talks to the node,
// and the drift decision (drift.go: JudgeDrift over what a node runs, boots and
// records), which the provider's Read and the command's resume both ask.
//
// # Defaults (docs/design.md#timings)
//
// Every row of TimingTable (timing_table.go), which the provider's `timings` blocks and
// the roster's keys are made from:
//
//	node_wait        2m   node must answer within this, else the deploy fails
//	switch_timeout  10m   time limit of switch-to-configuration on the node
//	settle           5s   pause after the switch/restarts before the watch
//	watch           10s   unit states are sampled this long
//	sample_interval  2s   pause between samples (watch, chain wait, node wait)
//	stale_job       60s   a start job seen this long is stale
//	chain_wait       5m   bound of the secret chain wait (and of a loop-budget extension)
//	no_progress     60s   a chain member unchanged this long stops the chain wait
//	confirm_timeout 30s   SSH: a new login must get through this soon after the switch, else the node reverts
//	lock_wait        2m   wait for another run's lock on the node, then fail naming its holder
//	rollout_wait     5m   k8s rollout: the pod must be ready within this, else it rolls back
//	pull_grace      20s   k8s rollout: an image pull may fail this long before the wait stops
//	degraded_grace  10s   k8s rollout: the pod may answer "degraded" this long before the wait stops
//	rollback_wait    2m   k8s rollout: wait for the previous image's pod after a rollback
//
// The k8s rollout's four are the k8s engine's (internal/k8s); the body reads the others.
//
// # Classes (docs/design.md#verdict-classes)
//
//	class                        recognised by                                          fails strict?
//	failed                       ActiveState=failed, unit defined by the closure        yes (marked new / already failed before the switch)
//	set aside                    ActiveState=failed, unit not defined by the closure    no, named
//	restart loop                 SubState=auto-restart, or NRestarts rising in watch    no in a deploy; in verdict-only yes once past its loop budget
//	cycling                      InvocationID / ExecMainStartTimestampMonotonic changed no, named
//	                             during the watch without NRestarts rising
//	stale start job              start job seen for longer than stale_job              no, named
//	never spawned, closure fault ExecMainCode=exited, ExecMainStatus 200–245 caused by  yes
//	                             the closure (200 CHDIR, 203 EXEC, 216 GROUP, 217 USER,
//	                             233/238–241 directories, 243 CREDENTIALS, …)
//	never spawned, host fault    Result=resources, or 201 NICE, 204 MEMORY, 205 LIMITS, no, named; the closure is not blamed
//	                             206, 207, 211–215 (214 SETSCHEDULER), 218 CAPABILITIES,
//	                             219 CGROUP, 220, 225, 226 NAMESPACE, 227, 228 SECCOMP,
//	                             229–232, 236, 237, 242, 245
//	skipped on condition         ConditionResult=no with a condition timestamp          no: never restarted, named
//	unread                       systemctl could not reach the bus                      shown as unread, never as empty (fails strict)
//	unreachable                  the node answered none of the samples                  yes, in both modes
//
// Lenient mode (Options.Strict=false) keeps every name and turns failures into
// warnings. judge.Decide is the single function that turns a Verdict into pass or fail.
package deploybody
