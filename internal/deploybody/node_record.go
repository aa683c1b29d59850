package deploybody

import (
	"context"
	"encoding/json"
	"fmt"
)

// readRecordScript prints $1, or exits 3 when there is none.
const readRecordScript = `[ -e "$1" ] || exit 3; cat "$1"`

// readNodeRecord reads the JSON record file on the node into v (privileged, with the
// tools on path): false (and no error) when the node has none. what names the record in
// the error when the file is not JSON. The verdict record and the last good system's
// record are both read so.
func readNodeRecord(ctx context.Context, t Transport, file, what string, path []string, v any) (bool, error) {
	out, err := t.Run(ctx, []string{"sh", "-c", readRecordScript, "sh", file}, RunOptions{Path: path, Privileged: true})
	if err != nil {
		return false, err
	}
	switch out.ExitCode {
	case 0:
	case 3:
		return false, nil
	default:
		return false, fmt.Errorf("reading %s exited %d: %s", file, out.ExitCode, firstLine(string(out.Stderr), "no output"))
	}
	if err := json.Unmarshal(out.Stdout, v); err != nil {
		return false, fmt.Errorf("%s is not %s: %w", file, what, err)
	}
	return true, nil
}
