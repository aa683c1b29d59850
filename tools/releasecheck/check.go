package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// semver is the version form the registries accept: MAJOR.MINOR.PATCH with an optional
// pre-release, no leading "v" (the tag has it, the file names do not).
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// Check returns what it checked, line by line, and every problem it found.
func Check(dist, project, repoManifest string, signed bool) (report, problems []string) {
	fail := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	sums, _ := filepath.Glob(filepath.Join(dist, project+"_*_SHA256SUMS"))
	if len(sums) != 1 {
		fail("want exactly one %s_<version>_SHA256SUMS in %s, found %d", project, dist, len(sums))
		return report, problems
	}
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(sums[0]), project+"_"), "_SHA256SUMS")
	if !semver.MatchString(version) {
		fail("version %q is not a semantic version without a leading v", version)
	}
	report = append(report, fmt.Sprintf("version %s", version))
	prefix := project + "_" + version + "_"

	listed, err := readSums(sums[0])
	if err != nil {
		fail("%v", err)
		return report, problems
	}

	// The manifest beside the zips, listed in the sums, equal to the repository's.
	manifestName := prefix + "manifest.json"
	manifest, err := os.ReadFile(filepath.Join(dist, manifestName))
	if err != nil {
		fail("the manifest %s is not beside the zips: %v", manifestName, err)
	} else {
		if want, err := os.ReadFile(repoManifest); err != nil {
			fail("reading %s: %v", repoManifest, err)
		} else if !bytes.Equal(manifest, want) {
			fail("%s differs from %s", manifestName, repoManifest)
		}
		var m struct {
			Version  int `json:"version"`
			Metadata struct {
				ProtocolVersions []string `json:"protocol_versions"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(manifest, &m); err != nil || m.Version != 1 || strings.Join(m.Metadata.ProtocolVersions, ",") != "6.0" {
			fail("%s must be version 1 with protocol_versions [\"6.0\"] (the provider serves protocol 6), got %s", manifestName, strings.TrimSpace(string(manifest)))
		}
		report = append(report, fmt.Sprintf("%-60s protocol 6.0", manifestName))
	}

	// One zip per platform, each with the binary alone in it.
	zips, _ := filepath.Glob(filepath.Join(dist, prefix+"*.zip"))
	if len(zips) == 0 {
		fail("no %s<os>_<arch>.zip in %s", prefix, dist)
	}
	platforms := map[string]bool{}
	for _, z := range zips {
		name := filepath.Base(z)
		platform := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".zip")
		goos, goarch, ok := strings.Cut(platform, "_")
		if !ok || strings.Contains(goarch, "_") {
			fail("%s: the name must end in _<os>_<arch>.zip", name)
			continue
		}
		if platforms[platform] {
			fail("two zips for %s", platform)
		}
		platforms[platform] = true
		if p := checkZip(z, project+"_v"+version, goos, goarch); p != "" {
			fail("%s: %s", name, p)
		} else {
			report = append(report, fmt.Sprintf("%-60s %s_v%s for %s/%s", name, project, version, goos, goarch))
		}
	}

	// The sums: every zip and the manifest, with the sums of the files as they are.
	want := []string{manifestName}
	for _, z := range zips {
		want = append(want, filepath.Base(z))
	}
	for _, name := range want {
		if _, err := os.Stat(filepath.Join(dist, name)); err != nil {
			continue // a missing file is reported above
		}
		sum, ok := listed[name]
		if !ok {
			fail("%s does not list %s", filepath.Base(sums[0]), name)
			continue
		}
		if got, err := fileSum(filepath.Join(dist, name)); err != nil {
			fail("%v", err)
		} else if got != sum {
			fail("%s lists %s with %s, the file's sum is %s", filepath.Base(sums[0]), name, sum, got)
		}
	}
	report = append(report, fmt.Sprintf("%-60s %d files, sums match", filepath.Base(sums[0]), len(listed)))

	sig := sums[0] + ".sig"
	if _, err := os.Stat(sig); err == nil {
		report = append(report, fmt.Sprintf("%-60s present", filepath.Base(sig)))
	} else if signed {
		fail("%s is missing: a registry refuses an unsigned release", filepath.Base(sig))
	} else {
		report = append(report, fmt.Sprintf("%-60s not checked (snapshot, unsigned)", filepath.Base(sig)))
	}
	sort.Strings(problems)
	return report, problems
}

func readSums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	listed := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		if !ok || len(sum) != 64 {
			return nil, fmt.Errorf("%s: line %q is not \"<sha256>  <file>\"", filepath.Base(path), s.Text())
		}
		listed[name] = sum
	}
	return listed, s.Err()
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkZip says what is wrong with one platform's zip, or "" when it is right.
func checkZip(path, binary, goos, goarch string) string {
	r, err := zip.OpenReader(path)
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	if len(r.File) != 1 || r.File[0].Name != binary {
		var names []string
		for _, f := range r.File {
			names = append(names, f.Name)
		}
		return fmt.Sprintf("must hold only %s, holds %q", binary, names)
	}
	f := r.File[0]
	if f.Mode()&0o111 == 0 {
		return fmt.Sprintf("%s is not executable (mode %v)", binary, f.Mode())
	}
	rc, err := f.Open()
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err.Error()
	}
	return checkBinary(data, goos, goarch)
}

// checkBinary checks that the executable was built for the platform its zip names.
func checkBinary(data []byte, goos, goarch string) string {
	machines := map[string]struct {
		elf   elf.Machine
		macho macho.Cpu
	}{
		"amd64": {elf.EM_X86_64, macho.CpuAmd64},
		"arm64": {elf.EM_AARCH64, macho.CpuArm64},
	}
	want, ok := machines[goarch]
	if !ok {
		return fmt.Sprintf("architecture %s is not one this check knows", goarch)
	}
	switch goos {
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(data))
		if err != nil {
			return "not a Mach-O executable: " + err.Error()
		}
		if f.Cpu != want.macho {
			return fmt.Sprintf("built for %v, not %s", f.Cpu, goarch)
		}
	case "linux", "freebsd":
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return "not an ELF executable: " + err.Error()
		}
		if f.Machine != want.elf {
			return fmt.Sprintf("built for %v, not %s", f.Machine, goarch)
		}
		osabi := map[string]elf.OSABI{"linux": elf.ELFOSABI_NONE, "freebsd": elf.ELFOSABI_FREEBSD}[goos]
		if f.OSABI != osabi && (goos != "linux" || f.OSABI != elf.ELFOSABI_LINUX) {
			return fmt.Sprintf("ELF OS ABI %v, not %s", f.OSABI, goos)
		}
	default:
		return fmt.Sprintf("operating system %s is not one this check knows", goos)
	}
	return ""
}
