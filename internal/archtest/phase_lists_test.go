package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// TestPhaseListsAreTheStepTable: the design page's table of a deploy's phases and the
// deploy body's package comment each list the phases the body runs, in its order
// (deploybody.Phases). A phase added, renamed or moved in the code and not in the
// prose fails here (both once lacked lock-node).
func TestPhaseListsAreTheStepTable(t *testing.T) {
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	start := strings.Index(section, `<a id="phases"></a>`)
	if start < 0 {
		t.Fatal(`docs/design.md has no <a id="phases"></a> section`)
	}
	section = section[start:]
	if end := strings.Index(section[1:], "<a id="); end >= 0 {
		section = section[:end+1]
	}
	// Rows "| 7 | switch | …" (a sub-step such as "13a" is not a phase of its own).
	var table []string
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \| ([a-z ]+) \|`).FindAllStringSubmatch(section, -1) {
		table = append(table, strings.ReplaceAll(m[2], " ", "-"))
	}
	// The table names the sub-step "checks" as 13a; the step table runs it as a phase.
	want := slices.DeleteFunc(slices.Clone(deploybody.Phases), func(p string) bool { return p == deploybody.PhaseChecks })
	if !slices.Equal(table, want) {
		t.Errorf("docs/design.md#phases lists the phases\n  %v\nthe deploy body runs\n  %v", table, want)
	}
	if !strings.Contains(section, "| 13a | checks |") {
		t.Errorf("docs/design.md#phases lacks the checks step (13a) between watch and classify")
	}

	doc, err := os.ReadFile(filepath.Join(root, "internal", "deploybody", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	chain := regexp.MustCompile(`(?s)// Deploy runs, in order.*?\n// (build →.*?) \(`).FindStringSubmatch(string(doc))
	if chain == nil {
		t.Fatal("internal/deploybody/doc.go no longer lists the phases as `build → … → conclude`")
	}
	flat := strings.Join(strings.Fields(strings.ReplaceAll(chain[1], "//", "")), " ")
	if got := strings.Split(flat, " → "); !slices.Equal(got, deploybody.Phases) {
		t.Errorf("internal/deploybody/doc.go lists the phases\n  %v\nthe deploy body runs\n  %v", got, deploybody.Phases)
	}
}
