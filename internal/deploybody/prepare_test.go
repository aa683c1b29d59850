package deploybody

import "testing"

func TestValidStorePath(t *testing.T) {
	for _, p := range []string{testToplevel, "/nix/store/abc-x"} {
		if !validStorePath(p) {
			t.Errorf("%q rejected", p)
		}
	}
	for _, p := range []string{"", "/", "relative/x", "/nix/store/a b", "/nix/store/a\n", "/nix/store/../etc", "/nix/store/x/"} {
		if validStorePath(p) {
			t.Errorf("%q accepted", p)
		}
	}
}
