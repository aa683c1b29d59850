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
// sections of docs/design.md by anchor ("docs/design.md#verdict-classes"). A renamed or
// removed section would leave them pointing nowhere, so every such pointer in the
// repository must name an anchor the page defines (<a id="…">).
func TestDesignPageAnchorsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`<a id="([a-z0-9-]+)"></a>`).FindAllStringSubmatch(string(page), -1) {
		defined[m[1]] = true
	}
	if len(defined) < 10 {
		t.Fatalf("docs/design.md defines %d anchors; its sections lost their <a id> names", len(defined))
	}

	pointer := regexp.MustCompile(`design\.md#([A-Za-z0-9_-]+)`)
	inPage := regexp.MustCompile(`\]\(#([A-Za-z0-9_-]+)\)`)
	checked := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
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
		refs := pointer.FindAllStringSubmatch(string(b), -1)
		if rel == filepath.Join("docs", "design.md") {
			refs = append(refs, inPage.FindAllStringSubmatch(string(b), -1)...)
		}
		for _, m := range refs {
			checked++
			if !defined[m[1]] {
				t.Errorf("%s points at docs/design.md#%s, which the page does not define (anchors: %s)", rel, m[1], strings.Join(keys(defined), " "))
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
