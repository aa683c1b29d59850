package incus

import (
	"context"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
)

func TestNewRefusesIncompleteConfig(t *testing.T) {
	if _, err := New(Config{Instance: "x"}); err == nil {
		t.Error("no client accepted")
	}
	c := &incusapi.Client{}
	if _, err := New(Config{Client: c, Node: "web01"}); err == nil || !strings.Contains(err.Error(), "web01") {
		t.Errorf("no instance: %v", err)
	}
	tr, err := New(Config{Client: c, Instance: "inst"})
	if err != nil || tr.Node() != "inst" {
		t.Fatalf("node name defaults to the instance: %v %v", err, tr)
	}
}

func TestSnapshotNames(t *testing.T) {
	if got := GenerationSnapshotName(12); got != "fediversity-gen-12" {
		t.Fatalf("GenerationSnapshotName = %q", got)
	}
	for name, ok := range map[string]bool{
		"fediversity-gen-1": true, "fediversity-pre.v2_a": true,
		"fediversity-": false, "gen-1": false, "fediversity-a/b": false, "fediversity-a b": false, "operator": false,
	} {
		if err := validSnapshotName(name); (err == nil) != ok {
			t.Errorf("validSnapshotName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// Argument checks happen before any request; the client here has no daemon behind it,
// so a request would fail the test with a different error.
func TestRunRefusesBadInputBeforeAnyRequest(t *testing.T) {
	tr, err := New(Config{Client: &incusapi.Client{}, Instance: "inst", Node: "web01"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := tr.Run(ctx, nil, deploybody.RunOptions{}); err == nil || !strings.Contains(err.Error(), "web01") {
		t.Errorf("empty argv: %v", err)
	}
	for _, p := range []string{"", "/a:/b", "/a\n"} {
		if _, err := tr.Run(ctx, []string{"true"}, deploybody.RunOptions{Path: []string{p}}); err == nil || !strings.Contains(err.Error(), "PATH entry") {
			t.Errorf("PATH entry %q: %v", p, err)
		}
	}
	if err := tr.SnapshotBeforeSwitch(ctx, "mine", 3); err == nil || !strings.Contains(err.Error(), "fediversity-") {
		t.Errorf("snapshot name without prefix: %v", err)
	}
}
