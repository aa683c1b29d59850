package deploybody

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// readNodeRecord reads the JSON record file on the node into v (privileged, with the
// tools on path): false (and no error) when the node has none. what names the record in
// the error when the file is not JSON. The verdict record and the last good system's
// record are both read so.
//
// legacy is the file an older version kept the record in: read when file is missing.
func readNodeRecord(ctx context.Context, t Transport, file, legacy, what string, path []string, v any) (bool, error) {
	out, err := t.Run(ctx, []string{"sh", "-c", records.ReadRecordScript, "sh", file, legacy}, RunOptions{Path: path, Privileged: true})
	if err != nil {
		return false, err
	}
	switch out.ExitCode {
	case 0:
	case 3:
		return false, nil
	default:
		return false, fmt.Errorf("reading %s exited %d: %s", file, out.ExitCode, judge.FirstLine(string(out.Stderr), "no output"))
	}
	if err := json.Unmarshal(out.Stdout, v); err != nil {
		return false, fmt.Errorf("%s is not %s: %w", file, what, err)
	}
	return true, nil
}
