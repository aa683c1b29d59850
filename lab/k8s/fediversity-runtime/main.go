// Command fediversity-runtime is the OCI runtime behind the lab node's RuntimeClass
// handler "fediversity": a thin wrapper around runc that gives an unprivileged pod what
// systemd needs to run as PID 1 on this host's cgroup v1 (hybrid) layout, the way Incus
// does for its unprivileged system containers here. The pod spec stays as the provider
// writes it (hostUsers: false, no privileged, no hostPath of /sys/fs/cgroup).
//
// On `create` of an app container that has its own user namespace, it edits the
// bundle's config.json before handing over to runc:
//   - a cgroup namespace, so the container sees its own cgroup as the root;
//   - /sys/fs/cgroup mounted read-write (inside the cgroup namespace runc mounts each v1
//     hierarchy afresh, rooted at the container's cgroup), plus the unified (cgroup2)
//     hierarchy on /sys/fs/cgroup/unified;
//   - the container's cgroup made in every v1 hierarchy and in the unified one, and
//     delegated (chowned) to the host uid/gid that the container's root maps to, so
//     systemd can make its own sub-cgroups there. The cgroups above stay host root's;
//   - the capability set of an Incus unprivileged container. The capabilities are
//     those of the container's user namespace: they give nothing over host resources.
//
// A container without a user namespace, the sandbox, and every other command go to runc
// unchanged. The runc binary is the "runc" next to the path this program was started
// by, or $FEDIVERSITY_RUNC.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	unified    = cgroupRoot + "/unified"
	// recordDir keeps, per container, the unified cgroup this wrapper made, so delete
	// can remove it (runc's cgroupfs driver does not manage the unified hierarchy).
	recordDir = "/run/fediversity-runtime"
)

// Incus' unprivileged containers (LXC's defaults) keep every capability but these.
// Without CAP_SYS_RAWIO, systemd also skips the debugfs and tracefs mounts, which a
// user namespace may not make.
var droppedCaps = map[string]bool{"CAP_SYS_MODULE": true, "CAP_SYS_RAWIO": true, "CAP_SYS_TIME": true, "CAP_MAC_ADMIN": true, "CAP_MAC_OVERRIDE": true}

var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

func main() {
	runc := os.Getenv("FEDIVERSITY_RUNC")
	if runc == "" {
		runc = filepath.Join(filepath.Dir(os.Args[0]), "runc")
	}
	args := os.Args[1:]
	cmd, rest := subcommand(args)
	switch cmd {
	case "create", "run":
		id := lastArg(rest)
		if err := prepare(bundleOf(rest), id); err != nil {
			fail(args, fmt.Errorf("container %s: %w", id, err))
		}
	case "delete":
		// runc first: the container's processes must be gone before its cgroups can go.
		c := exec.Command(runc, args...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		err := c.Run()
		removeRecorded(lastArg(rest))
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		} else if err != nil {
			fmt.Fprintf(os.Stderr, "fediversity-runtime: %v\n", err)
			os.Exit(1)
		}
		return
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "fediversity-runtime: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// subcommand splits runc's command line into its command and the arguments after it,
// skipping the global flags (and the values of those that take one).
func subcommand(args []string) (string, []string) {
	withValue := map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		if withValue[a] {
			i++
		}
	}
	return "", nil
}

func bundleOf(args []string) string {
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle=")
		}
	}
	return "."
}

// fail reports err where containerd reads a runtime's errors (runc's --log file, in
// its JSON form) and on stderr, and exits.
func fail(args []string, err error) {
	msg := "fediversity-runtime: " + err.Error()
	fmt.Fprintln(os.Stderr, msg)
	for i, a := range args {
		if a == "--log" && i+1 < len(args) {
			line, _ := json.Marshal(map[string]string{"level": "error", "msg": msg, "time": time.Now().Format(time.RFC3339Nano)})
			if f, ferr := os.OpenFile(args[i+1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); ferr == nil {
				_, _ = f.Write(append(line, '\n'))
				_ = f.Close()
			}
		}
	}
	os.Exit(1)
}

func lastArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[len(args)-1]
}

type object = map[string]any

func prepare(bundle, id string) error {
	path := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec object
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	linux, _ := spec["linux"].(object)
	annotations, _ := spec["annotations"].(object)
	if linux == nil || annotations["io.kubernetes.cri.container-type"] != "container" || !hasNamespace(linux, "user") {
		return nil
	}
	uid, err := mappedRoot(linux["uidMappings"])
	if err != nil {
		return fmt.Errorf("uidMappings: %w", err)
	}
	gid, err := mappedRoot(linux["gidMappings"])
	if err != nil {
		return fmt.Errorf("gidMappings: %w", err)
	}
	inner, _ := linux["cgroupsPath"].(string)
	if !strings.HasPrefix(inner, "/") {
		return fmt.Errorf("cgroupsPath %q is not a cgroupfs path; the node's kubelet and containerd must use the cgroupfs driver", inner)
	}

	if !hasNamespace(linux, "cgroup") {
		ns, _ := linux["namespaces"].([]any)
		linux["namespaces"] = append(ns, object{"type": "cgroup"})
	}
	if err := writableCgroupMount(spec); err != nil {
		return err
	}
	if err := delegate(inner, id, uid, gid); err != nil {
		return err
	}
	grantCapabilities(spec)

	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp := path + ".fediversity"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func hasNamespace(linux object, kind string) bool {
	ns, _ := linux["namespaces"].([]any)
	for _, n := range ns {
		if m, ok := n.(object); ok && m["type"] == kind {
			return true
		}
	}
	return false
}

// mappedRoot is the host id that id 0 of the container maps to.
func mappedRoot(v any) (int, error) {
	list, _ := v.([]any)
	for _, e := range list {
		m, _ := e.(object)
		if c, _ := m["containerID"].(float64); c == 0 && m["size"] != nil {
			h, _ := m["hostID"].(float64)
			if h == 0 {
				return 0, errors.New("the container's root is host root; refusing to delegate cgroups to it")
			}
			return int(h), nil
		}
	}
	return 0, errors.New("no mapping for id 0")
}

// writableCgroupMount makes the /sys/fs/cgroup mount read-write and adds the unified
// hierarchy under it, when the host has one.
func writableCgroupMount(spec object) error {
	mounts, _ := spec["mounts"].([]any)
	out := make([]any, 0, len(mounts)+1)
	found := false
	for _, e := range mounts {
		m, _ := e.(object)
		if m == nil || m["destination"] != cgroupRoot {
			if m == nil || m["destination"] != unified {
				out = append(out, e)
			}
			continue
		}
		found = true
		opts, _ := m["options"].([]any)
		kept := []any{}
		for _, o := range opts {
			if o != "ro" && o != "rw" {
				kept = append(kept, o)
			}
		}
		m["options"] = append(kept, "rw")
		out = append(out, m)
		if isCgroup2(unified) {
			out = append(out, object{"destination": unified, "type": "cgroup2", "source": "cgroup2",
				"options": []any{"nosuid", "noexec", "nodev", "relatime", "rw"}})
		}
	}
	if !found {
		return errors.New("the container has no /sys/fs/cgroup mount")
	}
	spec["mounts"] = out
	return nil
}

func isCgroup2(path string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(path, &st) == nil && st.Type == 0x63677270 // CGROUP2_SUPER_MAGIC
}

// v1Hierarchies are the directories of the cgroup v1 hierarchies mounted under
// /sys/fs/cgroup ("cpu,cpuacct", "memory", "systemd", …).
func v1Hierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "cgroup" && filepath.Dir(fields[4]) == cgroupRoot {
				dirs = append(dirs, fields[4])
			}
		}
	}
	return dirs, s.Err()
}

// delegate makes the container's cgroup in every hierarchy and hands it to the
// container's root, as Incus does: the directory and the files that move processes and
// enable controllers. Sub-cgroups systemd makes in it are then its own. runc joins the
// v1 ones (they exist already, which it accepts); the unified one is joined here, by
// moving this process there before runc starts, so the container inherits it.
func delegate(inner, id string, uid, gid int) error {
	dirs, err := v1Hierarchies()
	if err != nil {
		return err
	}
	for _, h := range dirs {
		if err := own(filepath.Join(h, inner), uid, gid, "tasks", "cgroup.procs", "cgroup.clone_children"); err != nil {
			return err
		}
	}
	if !isCgroup2(unified) {
		return nil
	}
	dir := filepath.Join(unified, inner)
	if err := own(dir, uid, gid, "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"); err != nil {
		return err
	}
	if err := os.MkdirAll(recordDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(recordDir, filepath.Base(id)), []byte(dir), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

func own(dir string, uid, gid int, files ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("delegate cgroup %s: %w", dir, err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.Chown(p, uid, gid); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delegate %s: %w", p, err)
		}
	}
	return nil
}

// removeRecorded removes the unified cgroup made for a container, sub-cgroups first.
func removeRecorded(id string) {
	rec := filepath.Join(recordDir, filepath.Base(id))
	dir, err := os.ReadFile(rec)
	if err != nil {
		return
	}
	removeTree(string(dir))
	_ = os.Remove(rec)
}

func removeTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir) // one still in use stays behind, empty cgroups cost nothing
}

func grantCapabilities(spec object) {
	process, _ := spec["process"].(object)
	if process == nil {
		return
	}
	var caps []any
	for _, c := range allCaps {
		if !droppedCaps[c] {
			caps = append(caps, c)
		}
	}
	set, _ := process["capabilities"].(object)
	if set == nil {
		set = object{}
	}
	for _, k := range []string{"bounding", "effective", "permitted"} {
		set[k] = caps
	}
	process["capabilities"] = set
}
