// Package judge holds the deploy body's judging: pure functions over what systemd
// printed and what the operator's checks answered (docs/design.md#verdict-classes).
//
//   - systemctl.go reads `systemctl show`, `list-jobs` and `list-units` output into
//     UnitState, Job and unit names, and says which names are well formed;
//   - classify.go sorts the watch's samples into the verdict classes (failed, set aside,
//     restart loop, cycling, stale start job, never spawned, skipped on condition),
//     Decide turns a Verdict into pass or fail, and RenderReport writes it for an
//     operator;
//   - checks.go validates, schedules and records the operator's node checks and
//     probes (a probe is the one request this package makes, to the operator's URL or
//     address), masking credential-looking output;
//   - verdict.go is the Verdict and the lists it names.
//
// It talks to no node and imports nothing of the deploy body: the body reads the node
// and hands the judge what it read, so each rule is tested here with tables.
package judge
