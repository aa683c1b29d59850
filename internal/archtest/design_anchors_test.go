package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDesignPageAnchorsExist: code comments, object descriptions and docs point at
// sections of docs/design.md and docs/testing.md by anchor
// ("docs/design.md#verdict-classes", "docs/testing.md#lab-node"). A renamed, removed or
// moved section would leave them pointing nowhere, so every such pointer in the
// repository must name an anchor the page defines (<a id="…">), and so must each page's
// links within itself.
func TestDesignPageAnchorsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	pages := []string{"design.md", "testing.md"}
	defined := map[string]map[string]bool{}
	for _, name := range pages {
		page, err := os.ReadFile(filepath.Join(root, "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		defined[name] = map[string]bool{}
		for _, m := range regexp.MustCompile(`<a id="([a-z0-9-]+)"></a>`).FindAllStringSubmatch(string(page), -1) {
			defined[name][m[1]] = true
		}
		if len(defined[name]) < 5 {
			t.Fatalf("docs/%s defines %d anchors; its sections lost their <a id> names", name, len(defined[name]))
		}
	}

	pointer := regexp.MustCompile(`\b(design|testing)\.md#([A-Za-z0-9_-]+)`)
	inPage := regexp.MustCompile(`\]\(#([A-Za-z0-9_-]+)\)`)
	checked := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "dist" || name == "bin" || name == ".terraform" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".tmpl", ".tf", ".sh", ".yml":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		type ref struct{ page, anchor string }
		var refs []ref
		for _, m := range pointer.FindAllStringSubmatch(string(b), -1) {
			refs = append(refs, ref{m[1] + ".md", m[2]})
		}
		for _, name := range pages {
			if rel == filepath.Join("docs", name) {
				for _, m := range inPage.FindAllStringSubmatch(string(b), -1) {
					refs = append(refs, ref{name, m[1]})
				}
			}
		}
		for _, r := range refs {
			checked++
			if !defined[r.page][r.anchor] {
				t.Errorf("%s points at docs/%s#%s, which the page does not define (anchors: %s)", rel, r.page, r.anchor, strings.Join(keys(defined[r.page]), " "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("found no pointer into docs/design.md; the walk read nothing")
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
