package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
)

// The ssh guide's roster paragraph names every key a roster takes and every timing it
// accepts. A key the node spec gains reaches the roster at once (RosterNode embeds the
// spec), so the guide would fall behind without this check.
func TestSSHGuideNamesEveryRosterKeyAndTiming(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(labtest.RepoRoot(t), "docs", "guides", "ssh.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	start := strings.Index(text, "- **The roster**")
	end := strings.Index(text, "- **The credentials**")
	if start < 0 || end < start {
		t.Fatal("the ssh guide has no roster paragraph (\"- **The roster**\" … \"- **The credentials**\")")
	}
	para := text[start:end]
	var keys []string
	for _, v := range []any{fleet.Roster{}, nodespec.Spec{}, nodespec.SSH{}, nodespec.Jump{}, nodespec.Incus{}, nodespec.Snapshot{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				keys = append(keys, name)
			}
		}
	}
	keys = append(keys, nodespec.NodeTimingNames()...)
	for _, k := range keys {
		if !strings.Contains(para, "`"+k+"`") {
			t.Errorf("the ssh guide's roster paragraph does not name `%s`", k)
		}
	}
}
