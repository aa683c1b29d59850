package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const (
	project  = "terraform-provider-fediversity"
	version  = "0.1.0-snapshot-abc1234"
	manifest = `{"version": 1, "metadata": {"protocol_versions": ["6.0"]}}` + "\n"
)

// The executable of this test stands in for the provider binary: a real executable of
// the platform the test runs on, so the check of the binary's format is exercised.
func selfBinary(t *testing.T) []byte {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

type release struct {
	platform string            // the os_arch the zip's name claims
	files    map[string][]byte // the zip's content
	mode     os.FileMode
}

// writeDist writes a dist directory as goreleaser does, plus the manifest beside it.
func writeDist(t *testing.T, zips []release, breakSums bool) (dist, repoManifest string) {
	t.Helper()
	dist = t.TempDir()
	repoManifest = filepath.Join(t.TempDir(), "terraform-registry-manifest.json")
	if err := os.WriteFile(repoManifest, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := project + "_" + version + "_"
	var sums strings.Builder
	add := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dist, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if breakSums {
			sum[0] ^= 0xff
		}
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	for _, z := range zips {
		path := filepath.Join(dist, prefix+z.platform+".zip")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := zip.NewWriter(f)
		for name, data := range z.files {
			h := &zip.FileHeader{Name: name, Method: zip.Deflate}
			h.SetMode(z.mode)
			fw, err := w.CreateHeader(h)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fw.Write(data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		data, _ := os.ReadFile(path)
		os.Remove(path)
		add(filepath.Base(path), data)
	}
	add(prefix+"manifest.json", []byte(manifest))
	if err := os.WriteFile(filepath.Join(dist, prefix+"SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dist, repoManifest
}

func here() string { return runtime.GOOS + "_" + runtime.GOARCH }

func goodZip(t *testing.T) release {
	return release{platform: here(), files: map[string][]byte{project + "_v" + version: selfBinary(t)}, mode: 0o755}
}

func TestCheckAcceptsARegistryLayout(t *testing.T) {
	dist, repoManifest := writeDist(t, []release{goodZip(t)}, false)
	report, problems := Check(dist, project, repoManifest, false)
	if len(problems) != 0 {
		t.Fatalf("a correct release was refused: %q", problems)
	}
	if !strings.Contains(strings.Join(report, "\n"), "for "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("report does not name the platform checked: %q", report)
	}
	if _, problems := Check(dist, project, repoManifest, true); len(problems) != 1 || !strings.Contains(problems[0], "unsigned") {
		t.Errorf("-signed without a signature: problems %q, want the missing signature", problems)
	}
}

func TestCheckRefusesWhatARegistryRefuses(t *testing.T) {
	binary := project + "_v" + version
	other := "linux_arm64"
	if runtime.GOARCH == "arm64" {
		other = "linux_amd64"
	}
	for _, c := range []struct {
		name      string
		zips      []release
		breakSums bool
		want      string
	}{
		{"a README beside the binary", []release{{here(), map[string][]byte{binary: selfBinary(t), "README.md": []byte("x")}, 0o755}}, false, "must hold only"},
		{"the binary named without its version", []release{{here(), map[string][]byte{project: selfBinary(t)}, 0o755}}, false, "must hold only"},
		{"a binary that is not executable", []release{{here(), map[string][]byte{binary: selfBinary(t)}, 0o644}}, false, "not executable"},
		{"a binary of another platform", []release{{other, map[string][]byte{binary: selfBinary(t)}, 0o755}}, false, other + ".zip: "},
		{"sums that do not match", []release{goodZip(t)}, true, "the file's sum is"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dist, repoManifest := writeDist(t, c.zips, c.breakSums)
			_, problems := Check(dist, project, repoManifest, false)
			if !strings.Contains(strings.Join(problems, "\n"), c.want) {
				t.Errorf("problems = %q, want one saying %q", problems, c.want)
			}
		})
	}
}

func TestCheckRefusesAMissingManifest(t *testing.T) {
	dist, repoManifest := writeDist(t, []release{goodZip(t)}, false)
	if err := os.Remove(filepath.Join(dist, project+"_"+version+"_manifest.json")); err != nil {
		t.Fatal(err)
	}
	_, problems := Check(dist, project, repoManifest, false)
	if !strings.Contains(strings.Join(problems, "\n"), "manifest") {
		t.Errorf("problems = %q, want the missing manifest", problems)
	}
}
