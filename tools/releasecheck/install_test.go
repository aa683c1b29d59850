package main

// TestReleaseInstalls installs the release that `make release-check` (or `make
// release-snapshot`) wrote to dist/ as a registry consumer would, with nothing but
// loopback:
//
//   - the SHA256SUMS file is signed as the release signs it (.goreleaser.yml: a detached
//     GPG signature) with a throwaway key made here, `gpg --verify` accepts it and
//     refuses a changed sums file, and the signed dist passes releasecheck -signed;
//   - the zip of this platform is served on 127.0.0.1 as a provider network mirror
//     (the provider network mirror protocol: index.json, <version>.json, the archive),
//     over HTTPS with a certificate made here; Terraform and OpenTofu run `init` with
//     no dev overrides and no other installation method, install the provider from
//     it and record its hash in the lock file (h1:, the unpacked package, computed
//     here from the released zip); a second init from an empty .terraform verifies
//     it, and an archive that differs from the locked one is refused;
//   - the module the tf guide uses is fetched by a `git::file://…?ref=v<version>` source
//     from a local bare repository holding this tree's commit under that tag, as a
//     consumer's `source` fetches it; `validate` then runs the installed provider.
//
//	make release-check && make release-install
//	FEDIVERSITY_RELEASE_DIST=dist go test -count=1 -run TestReleaseInstalls ./tools/releasecheck/
//
// TERRAFORM (default /usr/local/bin/terraform) and TOFU (default: lab/build-tofu.sh's
// cached build) name the binaries.

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// builtRelease is what the install test takes from dist/.
type builtRelease struct {
	dist    string
	version string // without the leading v
	sums    string // path of the SHA256SUMS file
	zip     string // path of this platform's zip
	zipSum  string // its sha256 as SHA256SUMS lists it
}

const providerNamespace, providerType = "fediversity", "fediversity"

func findRelease(t *testing.T, dist string) builtRelease {
	t.Helper()
	sums, _ := filepath.Glob(filepath.Join(dist, project+"_*_SHA256SUMS"))
	if len(sums) != 1 {
		t.Fatalf("FEDIVERSITY_RELEASE_DIST=%s holds %d %s_*_SHA256SUMS files, want 1 (run make release-check first)", dist, len(sums), project)
	}
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(sums[0]), project+"_"), "_SHA256SUMS")
	listed, err := readSums(sums[0])
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s_%s_%s_%s.zip", project, version, runtime.GOOS, runtime.GOARCH)
	if listed[name] == "" {
		t.Fatalf("%s lists no %s: the release has no build for this machine", sums[0], name)
	}
	return builtRelease{dist: dist, version: version, sums: sums[0], zip: filepath.Join(dist, name), zipSum: listed[name]}
}

// commandLimit bounds each CLI this test runs. Every command here takes seconds on an
// idle machine; CI runs this test niced beside the whole suite, where the same test took
// from 16 s to 580 s in all (up to about 40 s a command), and once ran into go test's
// own 10-minute limit, which names no command (the make target now gives it 30). A
// command past this limit is killed, and the failure names it with the processes then
// running.
const commandLimit = 10 * time.Minute

// run runs name with args in dir with exactly env, and returns its output and error.
func run(dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	// A descendant that outlives the command (an agent it started) keeps the output
	// pipe open; the command's own exit is what counts, so stop reading soon after it.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success() {
		err = nil
	}
	if ctx.Err() != nil {
		ps, _ := exec.Command("ps", "-eo", "pid,ppid,etime,stat,args", "--forest").CombinedOutput()
		err = fmt.Errorf("%s %s did not end within %s and was killed (%v); processes at that time:\n%s",
			name, strings.Join(args, " "), commandLimit, err, ps)
	}
	return string(out), err
}

// baseEnv is PATH alone: no setting of the caller's environment reaches the CLIs.
func baseEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
}

// signAndVerify signs a copy of the release's SHA256SUMS as .goreleaser.yml's signs
// step does, with a key made for this test, and checks that gpg --verify accepts it
// and refuses a changed sums file. It returns the directory of the signed copy of dist.
func signAndVerify(t *testing.T, rel builtRelease) string {
	t.Helper()
	gnupg, err := os.MkdirTemp("", "gpg-") // short: gpg-agent's socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	env := append(baseEnv(gnupg), "GNUPGHOME="+gnupg)
	t.Cleanup(func() {
		// The agent this test's gpg started, then its home.
		_, _ = run(gnupg, env, "gpgconf", "--kill", "gpg-agent")
		_ = os.RemoveAll(gnupg)
	})
	if err := os.Chmod(gnupg, 0o700); err != nil {
		t.Fatal(err)
	}
	gpg := func(args ...string) string {
		t.Helper()
		out, err := run(gnupg, env, "gpg", append([]string{"--batch"}, args...)...)
		if err != nil {
			t.Fatalf("gpg %v: %v\n%s", args, err, out)
		}
		return out
	}
	gpg("--passphrase", "", "--quick-gen-key", "fediversity release test <release-test@example.org>", "ed25519", "sign", "1d")
	var fpr string
	for _, line := range strings.Split(gpg("--with-colons", "--list-secret-keys"), "\n") {
		if f := strings.Split(line, ":"); len(f) > 9 && f[0] == "fpr" {
			fpr = f[9]
			break
		}
	}
	if fpr == "" {
		t.Fatal("gpg made no key with a fingerprint")
	}
	signed := t.TempDir()
	entries, err := os.ReadDir(rel.dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), project+"_") {
			labtest.CopyFile(t, filepath.Join(rel.dist, e.Name()), filepath.Join(signed, e.Name()))
		}
	}
	sums := filepath.Join(signed, filepath.Base(rel.sums))
	// The arguments of .goreleaser.yml's signs step.
	gpg("--local-user", fpr, "--output", sums+".sig", "--detach-sign", sums)
	if out, err := run(signed, env, "gpg", "--batch", "--verify", sums+".sig", sums); err != nil {
		t.Fatalf("gpg --verify of the signed SHA256SUMS: %v\n%s", err, out)
	}
	changed := filepath.Join(t.TempDir(), filepath.Base(rel.sums))
	data, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(changed, append(data, []byte("0000  extra.zip\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(signed, env, "gpg", "--batch", "--verify", sums+".sig", changed); err == nil {
		t.Fatalf("gpg --verify accepted a SHA256SUMS file changed after signing:\n%s", out)
	}
	return signed
}

// mirror serves the release as a provider network mirror for both registry hosts.
type mirror struct {
	url       string
	caFile    string
	tampered  atomic.Bool  // serve an archive other than the released one
	downloads atomic.Int32 // archives served
}

func serveMirror(t *testing.T, rel builtRelease) *mirror {
	t.Helper()
	m := &mirror{}
	released, err := os.ReadFile(rel.zip)
	if err != nil {
		t.Fatal(err)
	}
	other := otherArchive(t, released)
	zipName := filepath.Base(rel.zip)
	platform := runtime.GOOS + "_" + runtime.GOARCH
	mux := http.NewServeMux()
	for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
		base := "/" + host + "/" + providerNamespace + "/" + providerType + "/"
		mux.HandleFunc(base+"index.json", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, map[string]any{"versions": map[string]any{rel.version: map[string]any{}}})
		})
		mux.HandleFunc(base+rel.version+".json", func(w http.ResponseWriter, _ *http.Request) {
			archive := map[string]any{"url": zipName}
			if !m.tampered.Load() {
				archive["hashes"] = []string{"zh:" + rel.zipSum}
			}
			writeJSON(w, map[string]any{"archives": map[string]any{platform: archive}})
		})
		mux.HandleFunc(base+zipName, func(w http.ResponseWriter, _ *http.Request) {
			m.downloads.Add(1)
			body := released
			if m.tampered.Load() {
				body = other
			}
			w.Header().Set("Content-Type", "application/zip")
			_, _ = w.Write(body)
		})
	}
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	m.url = srv.URL + "/"
	m.caFile = filepath.Join(t.TempDir(), "ca.pem")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(m.caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// otherArchive is a well-formed zip of the same name and layout whose binary differs
// by one byte: what a mirror or a man in the middle could serve instead.
func otherArchive(t *testing.T, released []byte) []byte {
	t.Helper()
	r, err := zip.NewReader(bytes.NewReader(released), int64(len(released)))
	if err != nil || len(r.File) != 1 {
		t.Fatalf("the release zip does not hold one file: %v", err)
	}
	rc, err := r.File[0].Open()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	hdr := r.File[0].FileHeader
	f, err := zw.CreateHeader(&hdr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(bin, 0)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// packageHash1 is the "h1:" hash of the package a zip holds, as the lock file records
// it (golang.org/x/mod/sumdb/dirhash.Hash1 of the unpacked files): the sha256 of the
// lines "<sha256 hex>  <name>\n" of every file, sorted by name, in base64.
func packageHash1(t *testing.T, zipPath string) string {
	t.Helper()
	r, err := zip.OpenReader(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	var lines []string
	for _, f := range r.File {
		if f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%x  %s\n", h.Sum(nil), f.Name))
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return "h1:" + base64.StdEncoding.EncodeToString(sum[:])
}

// moduleRepo is a bare git repository holding this tree's HEAD under tag.
func moduleRepo(t *testing.T, tag string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "terraform-provider-fediversity.git")
	env := baseEnv(t.TempDir())
	if out, err := run(root, env, "git", "init", "-q", "--bare", bare); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if out, err := run(root, env, "git", "push", "-q", bare, "HEAD:refs/heads/main", "HEAD:refs/tags/"+tag); err != nil {
		t.Fatalf("git push of this tree's HEAD to %s: %v\n%s", bare, err, out)
	}
	return bare
}

// binaries are the CLIs the release is installed with, by name.
func binaries(t *testing.T) map[string]string {
	t.Helper()
	tf := os.Getenv("TERRAFORM")
	if tf == "" {
		tf = "/usr/local/bin/terraform"
	}
	tofu := os.Getenv("TOFU")
	if tofu == "" {
		out, err := exec.Command("bash", filepath.Join("..", "..", "lab", "build-tofu.sh")).Output()
		if err != nil {
			t.Fatalf("lab/build-tofu.sh (set TOFU to an OpenTofu binary instead): %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		tofu = lines[len(lines)-1]
	}
	return map[string]string{"terraform": tf, "tofu": tofu}
}

// consumerConfig is the tf guide (examples/guides/tf) as a consumer of this release
// writes it: the provider pinned to the release's version (a pre-release is installed
// only when named exactly) and the module fetched from bare at tag.
func consumerConfig(t *testing.T, version, bare, tag string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "guides", "tf", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(data)
	pinned := strings.Replace(cfg, `source = "fediversity/fediversity"`, fmt.Sprintf(`source  = "fediversity/fediversity"
      version = "= %s"`, version), 1)
	src := regexp.MustCompile(`source = "github\.com/fediversity/terraform-provider-fediversity//modules/tf\?ref=[^"]*"`)
	fetched := src.ReplaceAllString(pinned, fmt.Sprintf(`source = "git::file://%s//modules/tf?ref=%s"`, bare, tag))
	if fetched == cfg || !strings.Contains(fetched, "git::file://") || !strings.Contains(fetched, "= "+version) {
		t.Fatalf("examples/guides/tf/main.tf no longer has the provider source or the module source this test rewrites:\n%s", cfg)
	}
	return fetched
}

func TestReleaseInstalls(t *testing.T) {
	dist := os.Getenv("FEDIVERSITY_RELEASE_DIST")
	if dist == "" {
		t.Skip("set FEDIVERSITY_RELEASE_DIST to the dist directory make release-check wrote (make release-install does)")
	}
	rel := findRelease(t, dist)
	signed := signAndVerify(t, rel)
	report, problems := Check(signed, project, filepath.Join("..", "..", "terraform-registry-manifest.json"), true)
	if len(problems) > 0 {
		t.Fatalf("the signed release is not one a registry takes: %v\n%s", problems, strings.Join(report, "\n"))
	}
	m := serveMirror(t, rel)
	tag := "v" + rel.version
	bare := moduleRepo(t, tag)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			m.tampered.Store(false)
			dir := t.TempDir()
			rc := filepath.Join(dir, "cli.tfrc")
			if err := os.WriteFile(rc, []byte(fmt.Sprintf("provider_installation {\n  network_mirror {\n    url = %q\n  }\n}\n", m.url)), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(consumerConfig(t, rel.version, bare, tag)), 0o600); err != nil {
				t.Fatal(err)
			}
			// The guide's sample inputs, which its configuration reads.
			for _, f := range []string{"baked.json", "roster.json", "submission.json"} {
				labtest.CopyFile(t, filepath.Join("..", "..", "examples", "guides", "tf", f), filepath.Join(dir, f))
			}
			env := append(baseEnv(dir), "TF_CLI_CONFIG_FILE="+rc, "SSL_CERT_FILE="+m.caFile, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0")
			cli := func(args ...string) (string, error) { return run(dir, env, bin, append(args, "-no-color")...) }
			before := m.downloads.Load()
			out, err := cli("init", "-backend=false")
			if err != nil {
				t.Fatalf("%s init from the mirror: %v\n%s", name, err, out)
			}
			if strings.Contains(out, "development overrides") || m.downloads.Load() == before {
				t.Fatalf("%s init did not install the provider from the mirror (downloads %d):\n%s", name, m.downloads.Load()-before, out)
			}
			if !strings.Contains(out, "Installed fediversity/fediversity v"+rel.version) {
				t.Fatalf("%s init does not say it installed fediversity/fediversity v%s:\n%s", name, rel.version, out)
			}
			lock, err := os.ReadFile(filepath.Join(dir, ".terraform.lock.hcl"))
			if err != nil {
				t.Fatal(err)
			}
			// h1: the hash of the unpacked package, as computed here from the released zip.
			// (OpenTofu also records the mirror's zh: sums; Terraform trusts only a
			// registry's signed ones.)
			for _, want := range []string{`version     = "` + rel.version + `"`, `"` + packageHash1(t, rel.zip) + `"`} {
				if !strings.Contains(string(lock), want) {
					t.Fatalf("%s's lock file lacks %s:\n%s", name, want, lock)
				}
			}
			if out, err := cli("validate"); err != nil || !strings.Contains(out, "The configuration is valid") {
				t.Fatalf("%s validate with the installed provider and the fetched module: %v\n%s", name, err, out)
			}

			// A second init, from nothing but the lock file, verifies the hashes it recorded.
			if err := os.RemoveAll(filepath.Join(dir, ".terraform")); err != nil {
				t.Fatal(err)
			}
			if out, err := cli("init", "-backend=false"); err != nil {
				t.Fatalf("%s re-init against the lock file: %v\n%s", name, err, out)
			}
			if again, _ := os.ReadFile(filepath.Join(dir, ".terraform.lock.hcl")); !bytes.Equal(again, lock) {
				t.Fatalf("%s re-init changed the lock file:\n%s\nwas:\n%s", name, again, lock)
			}

			// Another archive under the same version is refused by the lock file.
			if err := os.RemoveAll(filepath.Join(dir, ".terraform")); err != nil {
				t.Fatal(err)
			}
			m.tampered.Store(true)
			out, err = cli("init", "-backend=false")
			m.tampered.Store(false)
			if err == nil {
				t.Fatalf("%s installed an archive that is not the locked one:\n%s", name, out)
			}
			if !strings.Contains(strings.ToLower(out), "checksum") {
				t.Fatalf("%s refused the other archive, but not for its checksum:\n%s", name, out)
			}
		})
	}
}
