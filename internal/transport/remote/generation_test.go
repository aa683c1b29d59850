package remote

import "testing"

// The snapshot guard names its rollback point after the generation the system profile
// points at (generationOf); a link that names no generation is an error, which the guard
// takes as generation 0. The cases are those the provider's own parser was tested with
// before the guard moved into the Incus transport.
func TestGenerationOfProfileLink(t *testing.T) {
	for in, want := range map[string]int{
		"system-12-link": 12, "/nix/var/nix/profiles/system-3-link": 3, "system": 0,
		"system-x-link": 0, "": 0, "/nix/store/abc-nixos-system": 0, "system--1-link": 0,
	} {
		got, err := generationOf(in)
		if err != nil {
			got = 0
		}
		if got != want {
			t.Errorf("generationOf(%q) = %d (err %v), want %d", in, got, err, want)
		}
	}
}
