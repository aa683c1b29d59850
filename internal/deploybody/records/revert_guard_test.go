package records

import (
	"reflect"
	"testing"
)

// The guard's answers as RevertGuardScript prints them (its `say` and `pending`), read
// back: the deployer acts on these fields, so a line read wrong settles a revert wrong.
func TestRevertGuardAnswersParse(t *testing.T) {
	a := ParseRevertAnswer("reverted 0\nrunning /nix/store/aaaa-prev\nprofile /nix/var/nix/profiles/system-12-link\n")
	if a.State != RevertReverted || a.Detail != "0" || a.Running != "/nix/store/aaaa-prev" || a.Generation() != 12 || !a.Final() {
		t.Fatalf("disarm answer = %+v (generation %d, final %v)", a, a.Generation(), a.Final())
	}
	if u := ParseRevertAnswer("unconfirmed 100 200\n"); u.State != RevertUnconfirmed || u.Detail != "100 200" || u.Final() || u.Generation() != 0 {
		t.Fatalf("unconfirmed answer = %+v", u)
	}
	p := ParsePendingAnswer("revert fediversity-revert-x /nix/store/aaaa-prev - stood-down the node runs another system\n" +
		"revert short\nswitching fediversity-switch-y\nrunning /nix/store/bbbb-new\nprofile system-3-link\n")
	want := PendingAnswer{
		Reverts: []EarlierRevert{{Unit: "fediversity-revert-x", Previous: "/nix/store/aaaa-prev", Guarded: "",
			Answer: RevertAnswer{State: RevertStoodDown, Detail: "the node runs another system"}}},
		Switching: []string{"fediversity-switch-y"},
		Running:   "/nix/store/bbbb-new",
		Profile:   "system-3-link",
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("pending answer =\n%+v\nwant\n%+v", p, want)
	}
	if !ParsePendingAnswer("busy\n").Busy {
		t.Fatal("a busy guard must read as busy")
	}
}
