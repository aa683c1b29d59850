// Package records holds what the deploy body keeps on a node, and the scripts that
// read and write it there (docs/design.md#deploy-body-rooms):
//
//   - files.go: the records' directory, the verdict record's file, and the scripts that
//     read a record and write one atomically;
//   - lock.go: the node lock's file, its script (acquire, heartbeat, release, and the
//     records written under it) and who holds it (LockHolder);
//   - last_good.go: the last good system's record, its pin against garbage collection
//     and the one-line read the plan uses;
//   - boot_pin.go: the one-shot boot entry and the default this project pins for it;
//   - revert_guard.go: the node side of the lock-out revert (RevertGuardScript) and the
//     grammar of its answers (RevertAnswer, PendingAnswer).
//
// It runs nothing: the body runs these scripts through its transport and reads their
// answers. The scripts are tested here under the real sh against a temporary
// directory; the body's tests run them through a simulated node.
package records
