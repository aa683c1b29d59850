package incus

import (
	"errors"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// What a restore's error says of the restored system: ok, failing with the verdict's
// reasons, or why it could not be judged; never "ok" for a verdict that fails.
func TestRestoredVerdictText(t *testing.T) {
	top := "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web"
	cases := []struct {
		name string
		res  *deploybody.Result
		err  error
		want []string
		not  string
	}{
		{"ok", &deploybody.Result{Verdict: &judge.Verdict{OK: true, SystemState: "running"}}, nil, []string{top, "judged after the restore: ok (system running)"}, "failing"},
		{"failing", &deploybody.Result{Verdict: &judge.Verdict{OK: false, Reasons: []string{"unit db.service failed (exit 1)"}}}, errors.New("verdict"), []string{"failing: unit db.service failed (exit 1)"}, ": ok"},
		{"warnings", &deploybody.Result{Verdict: &judge.Verdict{OK: true, Reasons: []string{"unit x.service failed"}}}, nil, []string{"ok, with warnings: unit x.service failed"}, "failing"},
		{"not judged", nil, errors.New("node did not answer"), []string{"could not be judged after the restore: node did not answer"}, ": ok"},
	}
	for _, c := range cases {
		got := RestoredVerdictText(top, c.res, c.err)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
		if strings.Contains(got, c.not) {
			t.Errorf("%s: %q says %q", c.name, got, c.not)
		}
	}
}
