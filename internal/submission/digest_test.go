package submission

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The engine part of the digest check: an apply with a submission that is not the
// one the plan was made from refuses, and the error shows both digests.
func TestCheckUnchangedRefusesAnotherSubmission(t *testing.T) {
	file := filepath.Join(t.TempDir(), "submission.json")
	if err := os.WriteFile(file, []byte(`{"applications": {"mastodon": {"enable": true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	planned, err := ReadAndDigest(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckUnchanged(file, planned); err != nil {
		t.Fatalf("unchanged file refused: %v", err)
	}
	// Reformatting is not a change.
	if err := os.WriteFile(file, []byte("{\n \"applications\": {\"mastodon\": {\"enable\": true}}\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckUnchanged(file, planned); err != nil {
		t.Fatalf("reformatted file refused: %v", err)
	}
	if err := os.WriteFile(file, []byte(`{"applications": {"mastodon": {"enable": false}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err = CheckUnchanged(file, planned)
	var mm *DigestMismatchError
	if !errors.As(err, &mm) || !IsDigestMismatch(err) {
		t.Fatalf("changed file: err = %v, want a *DigestMismatchError", err)
	}
	current, _ := ReadAndDigest(file)
	if mm.Evaluated != planned || mm.Current != current || current == planned {
		t.Fatalf("mismatch %+v, want planned %s current %s", mm, planned, current)
	}
	msg := err.Error()
	for _, want := range []string{planned, current, file, "Nothing was deployed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not show %q", msg, want)
		}
	}
}

func TestReadAndDigestErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadAndDigest(filepath.Join(dir, "missing.json")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want not-exist", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"a":1,"a":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAndDigest(bad); err == nil || !strings.Contains(err.Error(), "$.a") {
		t.Fatalf("duplicate key: err = %v, want one naming $.a", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, MaxSubmissionBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAndDigest(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: err = %v", err)
	}
}
