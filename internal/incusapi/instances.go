package incusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Instance is the part of an instance the provider reads.
type Instance struct {
	Name       string            `json:"name"`
	Type       string            `json:"type"` // "container" or "virtual-machine"
	Status     string            `json:"status"`
	StatusCode int               `json:"status_code"`
	Project    string            `json:"project"`
	Location   string            `json:"location"`
	Config     map[string]string `json:"config"`
	CreatedAt  time.Time         `json:"created_at"`
	// LastUsedAt is when the instance was last started (zero: never).
	LastUsedAt time.Time `json:"last_used_at"`
	// ExpandedDevices are the devices with the profiles' applied: the root disk and
	// the custom volumes a rollback point holds.
	ExpandedDevices map[string]map[string]string `json:"expanded_devices"`
}

// Running reports whether the instance is running.
func (i *Instance) Running() bool { return i.StatusCode == 103 || i.Status == "Running" }

// InstanceState is the runtime state of an instance.
type InstanceState struct {
	Status     string `json:"status"`
	StatusCode int    `json:"status_code"`
	Pid        int64  `json:"pid"`
	Processes  int64  `json:"processes"`
	// Disk is each disk device's usage in bytes (as the storage driver can tell).
	Disk map[string]struct {
		Usage int64 `json:"usage"`
	} `json:"disk"`
}

// Running reports whether the instance is running.
func (s *InstanceState) Running() bool { return s.StatusCode == 103 || s.Status == "Running" }

func instPath(name string, rest ...string) string {
	p := "/1.0/instances/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// RootDisk finds the root disk among an instance's devices (its own, or expanded with its
// profiles'): the disk device with path "/".
func RootDisk(devices map[string]map[string]string) (name string, device map[string]string, ok bool) {
	for n, d := range devices {
		if d["type"] == "disk" && d["path"] == "/" {
			return n, d, true
		}
	}
	return "", nil, false
}

// GetInstance reads instance name. A missing instance is an *APIError with
// StatusCode 404 (see IsNotFound).
func (c *Client) GetInstance(ctx context.Context, name string) (*Instance, error) {
	w := where{op: "get instance", instance: name}
	r, err := c.do(ctx, w, http.MethodGet, instPath(name), nil, nil)
	if err != nil {
		return nil, err
	}
	var inst Instance
	if err := json.Unmarshal(r.Metadata, &inst); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed instance: %v", err))
	}
	return &inst, nil
}

// GetInstanceState reads the runtime state of instance name.
func (c *Client) GetInstanceState(ctx context.Context, name string) (*InstanceState, error) {
	w := where{op: "get instance state", instance: name}
	r, err := c.do(ctx, w, http.MethodGet, instPath(name, "state"), nil, nil)
	if err != nil {
		return nil, err
	}
	var st InstanceState
	if err := json.Unmarshal(r.Metadata, &st); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed instance state: %v", err))
	}
	return &st, nil
}

// StateChange is a request to start, stop, restart, freeze or unfreeze an instance.
type StateChange struct {
	Action  string `json:"action"`            // start, stop, restart, freeze, unfreeze
	Timeout int    `json:"timeout,omitempty"` // seconds to wait for a clean stop
	Force   bool   `json:"force,omitempty"`
}

// SetState changes the state of instance name and waits for the change to finish.
func (c *Client) SetState(ctx context.Context, name string, ch StateChange) error {
	w := where{op: "instance " + ch.Action, instance: name}
	_, err := c.runAsync(ctx, w, http.MethodPut, instPath(name, "state"), nil, ch, opTimeout(ctx))
	return settleGone(ctx, err, func(ctx context.Context, _ *OperationGoneError) (bool, error) {
		st, err := c.GetInstanceState(ctx, name)
		if err != nil {
			return false, err
		}
		switch ch.Action {
		case "start", "restart":
			// A restart that left it running may still have failed to stop it first;
			// running is what a caller needs from either.
			return st.Running(), nil
		case "stop":
			return st.StatusCode == 102 || st.Status == "Stopped", nil
		}
		return false, nil
	})
}

// Start starts instance name (nothing to do when it runs already).
func (c *Client) Start(ctx context.Context, name string) error {
	return c.SetState(ctx, name, StateChange{Action: "start"})
}

// Stop stops instance name, cleanly within timeout seconds, or at once when force.
func (c *Client) Stop(ctx context.Context, name string, force bool, timeout int) error {
	return c.SetState(ctx, name, StateChange{Action: "stop", Force: force, Timeout: timeout})
}

// ExecRequest is one command to run in an instance.
type ExecRequest struct {
	Command     []string          // argv; never joined into a shell string
	Environment map[string]string // added to the instance's environment
	Cwd         string            // working directory ("" = the daemon's default)
	User        uint32            // uid (0 = root)
	Group       uint32            // gid
}

// ExecResult is what a command did.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

type execBody struct {
	Command          []string          `json:"command"`
	Environment      map[string]string `json:"environment,omitempty"`
	WaitForWebsocket bool              `json:"wait-for-websocket"`
	Interactive      bool              `json:"interactive"`
	RecordOutput     bool              `json:"record-output"`
	Cwd              string            `json:"cwd,omitempty"`
	User             uint32            `json:"user,omitempty"`
	Group            uint32            `json:"group,omitempty"`
}

// Exec runs a command in instance name with its output recorded, waits for it (bounded
// by ctx), and returns its exit code, stdout and stderr. The daemon's log files of the
// output are deleted afterwards. A non-zero exit is not an error. Stdin is empty.
func (c *Client) Exec(ctx context.Context, name string, req ExecRequest) (*ExecResult, error) {
	w := where{op: "exec", instance: name}
	if len(req.Command) == 0 {
		return nil, c.apiErr(w, 0, "empty command")
	}
	body := execBody{
		Command:          req.Command,
		Environment:      req.Environment,
		WaitForWebsocket: false,
		Interactive:      false,
		RecordOutput:     true,
		Cwd:              req.Cwd,
		User:             req.User,
		Group:            req.Group,
	}
	r, err := c.do(ctx, w, http.MethodPost, instPath(name, "exec"), nil, body)
	if err != nil {
		return nil, err
	}
	op, err := c.asyncOp(w, r)
	if err != nil {
		return nil, err
	}
	done, err := c.waitOp(ctx, w, op.ID, opTimeout(ctx))
	err = c.forgotten(w, op, err)
	if err != nil {
		// Output logs are named after the operation id; remove them even when no
		// result names them: at once for a failed exec (e.g. "Command not found"), or,
		// when the caller gave up while the command runs, in the background once it
		// ends (bounded to 10 minutes).
		cleanup := func(ctx context.Context) {
			for _, ext := range []string{"stdout", "stderr"} {
				_ = c.deleteLog(ctx, w, instPath(name, "logs", "exec-output", "exec_"+url.PathEscape(op.ID)+"."+ext))
			}
		}
		var ae *APIError
		switch {
		case errors.As(err, &ae) || IsOperationGone(err):
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			cleanup(dctx)
		default: // the caller gave up, or the wait timed out: the command may still run
			go func() {
				bctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				_, _ = c.waitOp(bctx, w, op.ID, 10*time.Minute)
				cleanup(bctx)
			}()
		}
		return nil, err
	}
	res := &ExecResult{ExitCode: -1}
	if raw, ok := done.Metadata["return"]; ok {
		if err := json.Unmarshal(raw, &res.ExitCode); err != nil {
			return nil, c.apiErr(w, 0, fmt.Sprintf("malformed exit code %s: %v", raw, err))
		}
	} else {
		return nil, c.apiErr(w, 0, "the exec operation finished without an exit code")
	}
	var outputs map[string]string
	if raw, ok := done.Metadata["output"]; ok {
		if err := json.Unmarshal(raw, &outputs); err != nil {
			return nil, c.apiErr(w, 0, fmt.Sprintf("malformed output paths: %v", err))
		}
	}
	limit := c.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	// stdout and stderr are fetched (and their logs deleted) side by side: four
	// requests in two rounds instead of four, on every exec.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, fd := range []string{"1", "2"} {
		p, ok := outputs[fd]
		if !ok {
			continue
		}
		dst := &res.Stdout
		if fd == "2" {
			dst = &res.Stderr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			*dst, errs[i] = c.fetchLog(ctx, w, p, limit)
			// The log files stay on the daemon until deleted; a failure to delete is not
			// worth failing the command for, but a cancelled ctx is reported above.
			_ = c.deleteLog(ctx, w, p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// logPath checks that p is a log path of an instance and returns it without any query.
func logPath(p string) (string, bool) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if !strings.HasPrefix(p, "/1.0/instances/") || !strings.Contains(p, "/logs/") || strings.Contains(p, "..") {
		return "", false
	}
	return p, true
}

// getRaw GETs a body that is not a JSON envelope (a log, a file). A status of 400 or more
// is decoded into the daemon's error; otherwise the caller reads and closes the body.
func (c *Client) getRaw(ctx context.Context, w where, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportErr(w, err)
	}
	if resp.StatusCode >= 400 {
		defer func() { _ = resp.Body.Close() }()
		_, err := c.decode(w, resp)
		return nil, err
	}
	return resp, nil
}

func (c *Client) fetchLog(ctx context.Context, w where, p string, limit int64) ([]byte, error) {
	lp, ok := logPath(p)
	if !ok {
		return nil, c.apiErr(w, 0, fmt.Sprintf("unexpected output log path %q", p))
	}
	resp, err := c.getRaw(ctx, w, c.url(lp, nil))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, c.transportErr(w, err)
	}
	if int64(len(b)) > limit {
		return b[:limit], c.apiErr(w, 0, fmt.Sprintf("command output larger than %d bytes (truncated)", limit))
	}
	return b, nil
}

func (c *Client) deleteLog(ctx context.Context, w where, p string) error {
	lp, ok := logPath(p)
	if !ok {
		return nil
	}
	_, err := c.do(ctx, w, http.MethodDelete, lp, nil, nil)
	return err
}

// FileMode is the owner and mode a pushed file gets.
type FileMode struct {
	UID  int
	GID  int
	Mode uint32 // permission bits, e.g. 0o600; 0 means 0o644
}

// PushFile writes the bytes of r to path in instance name (created or overwritten).
// The body is streamed; size is its length when known (-1 otherwise).
func (c *Client) PushFile(ctx context.Context, name, path string, r io.Reader, size int64, m FileMode) error {
	w := where{op: "file push " + path, instance: name}
	if !strings.HasPrefix(path, "/") {
		return c.apiErr(w, 0, "the path must be absolute")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		c.url(instPath(name, "files"), url.Values{"path": {path}}), r)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	mode := m.Mode
	if mode == 0 {
		mode = 0o644
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Incus-uid", strconv.Itoa(m.UID))
	req.Header.Set("X-Incus-gid", strconv.Itoa(m.GID))
	req.Header.Set("X-Incus-mode", fmt.Sprintf("%04o", mode&0o7777))
	req.Header.Set("X-Incus-type", "file")
	req.Header.Set("X-Incus-write", "overwrite")
	seeker, canRetry := r.(io.Seeker)
	if !canRetry {
		_, err = c.send(w, req)
		return err
	}
	// An overwrite with a body that can be read again is safe to send twice.
	return c.retry(ctx, w.op, func() error {
		if _, err := seeker.Seek(0, io.SeekStart); err != nil {
			return err
		}
		again := req.Clone(ctx)
		again.Body = io.NopCloser(r)
		_, err := c.send(w, again)
		return err
	})
}

// PullFile reads file path of instance name, at most limit bytes (DefaultMaxFile when
// limit <= 0); a larger file is an error.
func (c *Client) PullFile(ctx context.Context, name, path string, limit int64) ([]byte, error) {
	w := where{op: "file pull " + path, instance: name}
	if limit <= 0 {
		limit = DefaultMaxFile
	}
	resp, err := c.getRaw(ctx, w, c.url(instPath(name, "files"), url.Values{"path": {path}}))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if t := resp.Header.Get("X-Incus-Type"); t != "" && t != "file" && t != "symlink" {
		return nil, c.apiErr(w, 0, fmt.Sprintf("%s is a %s, not a file", path, t))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, c.transportErr(w, err)
	}
	if int64(len(b)) > limit {
		return nil, c.apiErr(w, 0, fmt.Sprintf("file larger than %d bytes", limit))
	}
	return b, nil
}

// DeleteFile removes file path from instance name.
func (c *Client) DeleteFile(ctx context.Context, name, path string) error {
	w := where{op: "file delete " + path, instance: name}
	_, err := c.do(ctx, w, http.MethodDelete, instPath(name, "files"), url.Values{"path": {path}}, nil)
	return err
}

// Snapshot is one snapshot of an instance.
type Snapshot struct {
	Name      string    `json:"name"` // the snapshot's own name, without "<instance>/"
	CreatedAt time.Time `json:"created_at"`
	Stateful  bool      `json:"stateful"`
	// Size is the snapshot's size in bytes as the storage driver reports it (0 or -1
	// when it cannot tell).
	Size int64 `json:"size"`
}

// CreateSnapshot takes snapshot snap of instance name and waits for it.
func (c *Client) CreateSnapshot(ctx context.Context, name, snap string) error {
	w := where{op: "snapshot create " + snap, instance: name}
	_, err := c.runAsync(ctx, w, http.MethodPost, instPath(name, "snapshots"), nil,
		map[string]any{"name": snap, "stateful": false}, opTimeout(ctx))
	return settleGone(ctx, err, madeByIt(func(ctx context.Context) (time.Time, error) {
		s, err := c.GetSnapshot(ctx, name, snap)
		if err != nil {
			return time.Time{}, err
		}
		return s.CreatedAt, nil
	}))
}

// ListSnapshots lists the snapshots of instance name, oldest first as the daemon
// orders them.
func (c *Client) ListSnapshots(ctx context.Context, name string) ([]Snapshot, error) {
	w := where{op: "snapshot list", instance: name}
	r, err := c.do(ctx, w, http.MethodGet, instPath(name, "snapshots"), url.Values{"recursion": {"1"}}, nil)
	if err != nil {
		return nil, err
	}
	var snaps []Snapshot
	if err := json.Unmarshal(r.Metadata, &snaps); err != nil {
		return nil, c.apiErr(w, 0, fmt.Sprintf("malformed snapshot list: %v", err))
	}
	for i := range snaps {
		if j := strings.LastIndexByte(snaps[i].Name, '/'); j >= 0 {
			snaps[i].Name = snaps[i].Name[j+1:]
		}
	}
	return snaps, nil
}

// DeleteSnapshot deletes snapshot snap of instance name and waits for it.
func (c *Client) DeleteSnapshot(ctx context.Context, name, snap string) error {
	w := where{op: "snapshot delete " + snap, instance: name}
	_, err := c.runAsync(ctx, w, http.MethodDelete, instPath(name, "snapshots", url.PathEscape(snap)), nil, nil, opTimeout(ctx))
	return settleGone(ctx, err, goneAfterDelete(func(ctx context.Context) error {
		_, err := c.GetSnapshot(ctx, name, snap)
		return err
	}))
}

// OperationsOn counts the daemon's running operations that touch instance name (a
// stop, a snapshot, a restore, a start, an exec), in the client's project.
func (c *Client) OperationsOn(ctx context.Context, name string) (int, error) {
	w := where{op: "operation list", instance: name}
	r, err := c.do(ctx, w, http.MethodGet, "/1.0/operations", url.Values{"recursion": {"1"}}, nil)
	if err != nil {
		return 0, err
	}
	var byStatus map[string][]Operation // "running", "success", … -> operations
	if err := json.Unmarshal(r.Metadata, &byStatus); err != nil {
		return 0, c.apiErr(w, 0, fmt.Sprintf("malformed operation list: %v", err))
	}
	n := 0
	for _, o := range byStatus["running"] {
		for _, u := range o.Resources["instances"] {
			u, _, _ = strings.Cut(u, "?")
			if u == instPath(name) || strings.HasPrefix(u, instPath(name)+"/") {
				n++
				break
			}
		}
	}
	return n, nil
}

// RenameSnapshot renames snapshot snap of instance name to newName and waits for it. A
// rename touches no data (and a restore of the instance leaves its snapshots' names as
// they are), which makes a snapshot's name a record that outlives any restore.
func (c *Client) RenameSnapshot(ctx context.Context, name, snap, newName string) error {
	w := where{op: "snapshot rename " + snap, instance: name}
	_, err := c.runAsync(ctx, w, http.MethodPost, instPath(name, "snapshots", url.PathEscape(snap)), nil,
		map[string]any{"name": newName}, opTimeout(ctx))
	// Renamed: the old name is gone and the new one is there (a taken new name is
	// refused inside the operation, and leaves the old name in place).
	return settleGone(ctx, err, func(ctx context.Context, _ *OperationGoneError) (bool, error) {
		if _, err := c.GetSnapshot(ctx, name, snap); !IsNotFound(err) {
			return false, err
		}
		_, err := c.GetSnapshot(ctx, name, newName)
		return err == nil, err
	})
}

// RestoreSnapshot rolls instance name back to snapshot snap (PUT the instance with
// {"restore": snap}) and waits for it.
func (c *Client) RestoreSnapshot(ctx context.Context, name, snap string) error {
	w := where{op: "snapshot restore " + snap, instance: name}
	_, err := c.runAsync(ctx, w, http.MethodPut, instPath(name), nil, map[string]any{"restore": snap}, opTimeout(ctx))
	return err
}
