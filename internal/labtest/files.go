package labtest

import (
	"os"
	"testing"
)

// CopyFile copies the file src to dst (mode 0600), failing the test on an error.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
