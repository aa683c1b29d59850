package labtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Why the tests' `incus exec` does not go through the incus CLI: under load (CI runs
// eight suites side by side on two cores), `incus exec NODE -- readlink -f
// /run/current-system` returned exit 0 with no output at all, three times in two full
// runs, and a test then failed on a node that was fine. The CLI relays the command's
// output over websockets; the exit status and the last output arrive on different
// connections. With record-output the daemon writes the output to files of its own and
// the exit status is read after the command ended, so nothing is relayed and nothing can
// be dropped. The provider's own exec (internal/incusapi) reads output the same way.

// execTimeout bounds one test exec (dpkg -i and nix-collect-garbage are the slowest).
const execTimeout = 20 * time.Minute

// recordedExec runs `incus exec INSTANCE [--project P] -- ARGV…` through incusd's API
// with its output recorded, and returns stdout then stderr, and an error for a non-zero
// exit ("exit status N", as the CLI's exit would give). handled is false for any other
// form of exec arguments, which the caller hands to the CLI.
func recordedExec(args []string) (out string, handled bool, err error) {
	if len(args) < 4 || args[0] != "exec" {
		return "", false, nil
	}
	instance, project, rest := args[1], "", args[2:]
	if len(rest) >= 2 && rest[0] == "--project" {
		project, rest = rest[1], rest[2:]
	}
	if len(rest) < 2 || rest[0] != "--" {
		return "", false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	out, err = daemonExec(ctx, instance, project, rest[1:])
	return out, true, err
}

// incusSocket is the daemon's unix socket, found as the incus CLI finds it.
func incusSocket() string {
	if s := os.Getenv("INCUS_SOCKET"); s != "" {
		return s
	}
	dir := os.Getenv("INCUS_DIR")
	if dir == "" {
		dir = "/var/lib/incus"
	}
	return filepath.Join(dir, "unix.socket")
}

var daemon = &http.Client{Transport: &http.Transport{
	DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", incusSocket())
	},
}}

// daemonCall sends one request to incusd and returns the response body; a status of 400
// or more is an error carrying the daemon's message.
func daemonCall(ctx context.Context, method, path, project string, body any) ([]byte, error) {
	u := "http://incus" + path
	if project != "" {
		u += "?project=" + url.QueryEscape(project)
	}
	var reqBody io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reqBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := daemon.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return nil, fmt.Errorf("incusd %s %s: %d %s", method, path, resp.StatusCode, e.Error)
	}
	return b, nil
}

func daemonExec(ctx context.Context, instance, project string, argv []string) (string, error) {
	started, err := daemonCall(ctx, http.MethodPost, "/1.0/instances/"+url.PathEscape(instance)+"/exec", project, map[string]any{
		"command": argv, "wait-for-websocket": false, "interactive": false, "record-output": true,
	})
	if err != nil {
		return "", err
	}
	var op struct {
		Operation string `json:"operation"`
	}
	if err := json.Unmarshal(started, &op); err != nil || op.Operation == "" {
		return "", fmt.Errorf("incusd exec on %s: no operation in %q", instance, started)
	}
	waited, err := daemonCall(ctx, http.MethodGet, op.Operation+"/wait?timeout="+fmt.Sprint(int(execTimeout.Seconds())), "", nil)
	if err != nil {
		return "", err
	}
	var done struct {
		Metadata struct {
			Status   string `json:"status"`
			Err      string `json:"err"`
			Metadata struct {
				Return *int              `json:"return"`
				Output map[string]string `json:"output"`
			} `json:"metadata"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(waited, &done); err != nil {
		return "", fmt.Errorf("incusd exec on %s: %v", instance, err)
	}
	var out strings.Builder
	for _, fd := range []string{"1", "2"} { // stdout, then stderr
		logPath := done.Metadata.Metadata.Output[fd]
		if logPath == "" {
			continue
		}
		b, err := daemonCall(ctx, http.MethodGet, logPath, project, nil)
		if err != nil {
			return out.String(), err
		}
		out.Write(b)
		_, _ = daemonCall(ctx, http.MethodDelete, logPath, project, nil)
	}
	switch {
	case done.Metadata.Status != "Success":
		return out.String(), fmt.Errorf("incusd exec on %s: %s %s", instance, done.Metadata.Status, done.Metadata.Err)
	case done.Metadata.Metadata.Return == nil:
		return out.String(), fmt.Errorf("incusd exec on %s: no exit status", instance)
	case *done.Metadata.Metadata.Return != 0:
		return out.String(), fmt.Errorf("exit status %d", *done.Metadata.Metadata.Return)
	}
	return out.String(), nil
}
