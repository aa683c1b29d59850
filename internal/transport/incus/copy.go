package incus

import (
	"context"
	"io"
	"os"

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
	stats.PathsTotal = len(closure)
	missing, err := remote.MissingPaths(ctx, t.runner(), closure)
	if err != nil {
		return stats, t.wrapErr(phase, err)
	}
	if len(missing) == 0 {
		return stats, nil
	}

	f, err := os.CreateTemp("", "fediversity-export-*.nar")
	if err != nil {
		return stats, t.errorf(phase, "temporary export file on the deployer: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
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

	remoteFile, err := t.tempName("import")
	if err != nil {
		return stats, t.errorf(phase, "%v", err)
	}
	if err := t.c.PushFile(ctx, t.instance, remoteFile, f, size, incusapi.FileMode{Mode: 0o600}); err != nil {
		return stats, t.classify(ctx, phase+": push export", err)
	}
	defer t.removeFile(remoteFile)
	stats.BytesSent = size

	// The file name is a positional parameter, never part of the script.
	res, err := t.Run(ctx, []string{"/bin/sh", "-c", `exec nix-store --import < "$1" > /dev/null`, "sh", remoteFile},
		deploybody.RunOptions{})
	if err != nil {
		return stats, err
	}
	if res.ExitCode != 0 {
		return stats, t.errorf(phase, "nix-store --import exited %d: %s (is Nix installed on the node and is its store writable?)",
			res.ExitCode, trim(res.Stderr))
	}
	stats.PathsMissing = len(missing)
	still, err := remote.MissingPaths(ctx, t.runner(), closure)
	if err != nil {
		return stats, t.wrapErr(phase+": verify", err)
	}
	if len(still) > 0 {
		return stats, t.errorf(phase, "after the import the node still lacks %d paths (first %s)", len(still), still[0])
	}
	return stats, nil
}
