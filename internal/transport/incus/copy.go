package incus

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// CopyClosure makes the node's store hold the closure of storePath. It asks the node
// which paths of the closure it lacks, exports only those to a temporary file on the
// deployer, pushes that file with the files API, imports it with
// `nix-store --import` reading the file, and deletes both copies of the file.
func (t *Transport) CopyClosure(ctx context.Context, storePath string) (deploybody.CopyStats, error) {
	const phase = "copy closure"
	var stats deploybody.CopyStats
	closure, err := nixstore.Closure(ctx, storePath)
	if err != nil {
		return stats, t.errorf(phase, "%w", err)
	}
	stats.PathsTotal, stats.Closure = len(closure), closure
	step := time.Now()
	lap := func() time.Duration {
		now := time.Now()
		d := now.Sub(step).Round(time.Millisecond)
		step = now
		return d
	}
	missing, err := remote.MissingPaths(ctx, t.runner(), closure)
	if err != nil {
		return stats, t.wrapErr(phase, err)
	}
	t.logPrintf("copy %s: node lacks %d of %d paths (asked in %s)", storePath, len(missing), len(closure), lap())
	if len(missing) == 0 {
		return stats, nil
	}

	f, err := os.CreateTemp("", "fediversity-export-*.nar")
	if err != nil {
		return stats, t.errorf(phase, "temporary export file on the deployer: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	if err := nixstore.Export(ctx, missing, f); err != nil {
		return stats, t.errorf(phase, "export %d paths: %w", len(missing), err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return stats, t.errorf(phase, "export file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return stats, t.errorf(phase, "export file: %w", err)
	}

	t.logPrintf("copy: exported %d bytes in %s", size, lap())
	remoteFile, err := tempName(importDir, "import")
	if err != nil {
		return stats, t.errorf(phase, "%v", err)
	}
	if err := t.c.PushFile(ctx, t.instance, remoteFile, f, size, incusapi.FileMode{Mode: 0o600}); err != nil {
		return stats, t.classify(ctx, phase+": push export", err)
	}
	removed := false // the import command removes the file itself
	defer func() {
		if !removed {
			t.removeFile(remoteFile)
		}
	}()
	stats.BytesSent = size
	t.logPrintf("copy: pushed %s in %s", remoteFile, lap())

	// The import, the removal of the file and the check of the closure in one exec
	// (closures of up to a few hundred paths; larger ones are checked separately). The
	// file name goes in the environment and the paths as arguments, never in the script.
	inline := remote.VerifyInline(closure)
	argv := []string{"/bin/sh", "-c", remote.ImportScript, "sh"}
	if inline {
		argv = append(argv, closure...)
	}
	argv = append([]string{"env", "IMPORT_FILE=" + remoteFile}, argv...)
	res, err := t.Run(ctx, argv, deploybody.RunOptions{})
	if err != nil {
		return stats, err
	}
	removed = res.ExitCode == 0
	if res.ExitCode != 0 {
		return stats, t.errorf(phase, "nix-store --import exited %d: %s (is Nix installed on the node and is its store writable?)",
			res.ExitCode, trim(res.Stderr))
	}
	stats.PathsMissing, stats.Sent = len(missing), missing
	t.logPrintf("copy: imported %d paths in %s", len(missing), lap())
	still := remote.InvalidPaths(string(res.Stdout), closure)
	if !inline {
		if still, err = remote.MissingPaths(ctx, t.runner(), closure); err != nil {
			return stats, t.wrapErr(phase+": verify", err)
		}
	}
	if len(still) > 0 {
		return stats, t.errorf(phase, "after the import the node still lacks %d paths (first %s)", len(still), still[0])
	}
	t.logPrintf("copy: verified in %s", lap())
	return stats, nil
}
