package judge

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// unitNamePattern accepts what systemd accepts as a unit name (letters, digits,
// ":-_.\", an optional "@instance", a known suffix). Names read from a node or from a
// closure pass it before they reach a command line.
var unitNamePattern = regexp.MustCompile(`^[a-zA-Z0-9:_.\\-]+(@[a-zA-Z0-9:_.\\-]*)?\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$`)

// ValidUnitName reports whether name is a well-formed systemd unit name.
func ValidUnitName(name string) bool {
	return len(name) <= 255 && unitNamePattern.MatchString(name)
}

// IsTemplate reports whether name is a template ("foo@.service").
func IsTemplate(name string) bool { return strings.Contains(name, "@.") }

// TemplateOf returns the template of an instance ("foo@bar.service" → "foo@.service").
func TemplateOf(name string) (string, bool) {
	at := strings.IndexByte(name, '@')
	dot := strings.LastIndexByte(name, '.')
	if at < 0 || dot < at || IsTemplate(name) {
		return "", false
	}
	return name[:at+1] + name[dot:], true
}

// ShowProperties are read from `systemctl show` for every unit the verdict looks at.
var ShowProperties = []string{
	"Id", "LoadState", "ActiveState", "SubState", "Result", "NRestarts",
	"ExecMainCode", "ExecMainStatus", "ExecMainStartTimestampMonotonic",
	"ConditionResult", "ConditionTimestampMonotonic", "InvocationID", "FragmentPath",
}

// UnitState is one unit's block of `systemctl show`.
type UnitState struct {
	ID          string
	LoadState   string
	ActiveState string
	SubState    string
	Result      string
	NRestarts   int
	// ExecMainCode is the si_code of the main process exit (1 = exited, 2 = killed…).
	ExecMainCode   int
	ExecMainStatus int
	// ExecMainStartMono is ExecMainStartTimestampMonotonic (µs): it changes each
	// time the main process is started.
	ExecMainStartMono uint64
	ConditionResult   string
	// ConditionTimestampMono is 0 when the conditions were never checked; then
	// ConditionResult=no means nothing.
	ConditionTimestampMono uint64
	InvocationID           string
	FragmentPath           string
}

// parseShowBlocks splits `systemctl show` output into its blank-line separated blocks
// of Key=Value lines. A line without "=" is an error: the output is not what systemctl
// prints, and the caller must not read it as an empty set.
func parseShowBlocks(out string) ([]map[string]string, error) {
	var blocks []map[string]string
	current := map[string]string{}
	flush := func() {
		if len(current) > 0 {
			blocks = append(blocks, current)
			current = map[string]string{}
		}
	}
	scanner := bufio.NewScanner(strings.NewReader(out))
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	lineNo := 0
	for scanner.Scan() {
		lineNo++
		line := strings.TrimRight(scanner.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("systemctl show output line %d is not Key=Value: %.80q", lineNo, line)
		}
		current[key] = value
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading systemctl show output: %w", err)
	}
	flush()
	return blocks, nil
}

// ParseShow turns `systemctl show` output into unit states. Blocks whose Id is not a
// valid unit name are returned in rejected and not used.
func ParseShow(out string) (units []UnitState, rejected []string, err error) {
	blocks, err := parseShowBlocks(out)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range blocks {
		id := b["Id"]
		if !ValidUnitName(id) {
			rejected = append(rejected, id)
			continue
		}
		units = append(units, UnitState{
			ID:                     id,
			LoadState:              b["LoadState"],
			ActiveState:            b["ActiveState"],
			SubState:               b["SubState"],
			Result:                 b["Result"],
			NRestarts:              atoiOrZero(b["NRestarts"]),
			ExecMainCode:           atoiOrZero(b["ExecMainCode"]),
			ExecMainStatus:         atoiOrZero(b["ExecMainStatus"]),
			ExecMainStartMono:      atouOrZero(b["ExecMainStartTimestampMonotonic"]),
			ConditionResult:        b["ConditionResult"],
			ConditionTimestampMono: atouOrZero(b["ConditionTimestampMonotonic"]),
			InvocationID:           b["InvocationID"],
			FragmentPath:           b["FragmentPath"],
		})
	}
	return units, rejected, nil
}

// atoiOrZero reads a counter or status: systemd prints none negative, so a negative or
// unreadable value counts as 0.
func atoiOrZero(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func atouOrZero(s string) uint64 {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Job is one line of `systemctl list-jobs`.
type Job struct {
	ID    int
	Unit  string
	Type  string // start, stop, restart, …
	State string // waiting, running
}

// ParseListJobs reads `systemctl list-jobs --no-legend --no-pager` (columns JOB UNIT
// TYPE STATE). Lines naming an invalid unit are returned in rejected.
func ParseListJobs(out string) (jobs []Job, rejected []string, err error) {
	for i, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "No jobs") {
			continue
		}
		if len(fields) < 4 {
			return nil, nil, fmt.Errorf("systemctl list-jobs output line %d has %d columns, want JOB UNIT TYPE STATE: %.80q", i+1, len(fields), line)
		}
		id, convErr := strconv.Atoi(fields[0])
		if convErr != nil || id <= 0 {
			return nil, nil, fmt.Errorf("systemctl list-jobs output line %d: job id %.20q is not a positive number", i+1, fields[0])
		}
		if !ValidUnitName(fields[1]) {
			rejected = append(rejected, fields[1])
			continue
		}
		jobs = append(jobs, Job{ID: id, Unit: fields[1], Type: fields[2], State: fields[3]})
	}
	return jobs, rejected, nil
}

// ParseUnitList reads the first column of `systemctl list-units --no-legend --plain`.
// A leading status bullet (printed without --plain) is skipped.
func ParseUnitList(out string) (units []string, rejected []string) {
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		name := fields[0]
		if (name == "●" || name == "*" || name == "○") && len(fields) > 1 {
			name = fields[1]
		}
		if !ValidUnitName(name) {
			rejected = append(rejected, name)
			continue
		}
		units = append(units, name)
	}
	return units, rejected
}

func FirstLine(s, fallback string) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 200 {
				line = line[:200] + "…"
			}
			return line
		}
	}
	return fallback
}

// Spawn statuses (systemd's exit-status.h, 200–245): the service's process failed
// before it could run the program. hostFaultStatuses are those the host causes (a
// container without the privilege, a kernel without the feature); every other status
// in the range is the closure's fault (a missing binary, user, directory, …).
var spawnStatusNames = map[int]string{
	200: "CHDIR", 201: "NICE", 202: "FDS", 203: "EXEC", 204: "MEMORY", 205: "LIMITS",
	206: "OOM_ADJUST", 207: "SIGNAL_MASK", 208: "STDIN", 209: "STDOUT", 210: "CHROOT",
	211: "IOPRIO", 212: "TIMERSLACK", 213: "SECUREBITS", 214: "SETSCHEDULER",
	215: "CPUAFFINITY", 216: "GROUP", 217: "USER", 218: "CAPABILITIES", 219: "CGROUP",
	220: "SETSID", 221: "CONFIRM", 222: "STDERR", 224: "PAM", 225: "NETWORK",
	226: "NAMESPACE", 227: "NO_NEW_PRIVILEGES", 228: "SECCOMP", 229: "SELINUX_CONTEXT",
	230: "PERSONALITY", 231: "APPARMOR_PROFILE", 232: "ADDRESS_FAMILIES",
	233: "RUNTIME_DIRECTORY", 235: "CHOWN", 236: "SMACK_PROCESS_LABEL", 237: "KEYRING",
	238: "STATE_DIRECTORY", 239: "CACHE_DIRECTORY", 240: "LOGS_DIRECTORY",
	241: "CONFIGURATION_DIRECTORY", 242: "NUMA_POLICY", 243: "CREDENTIALS", 245: "BPF",
}

var hostFaultStatuses = map[int]bool{
	201: true, 204: true, 205: true, 206: true, 207: true, 211: true, 212: true,
	213: true, 214: true, 215: true, 218: true, 219: true, 220: true, 225: true,
	226: true, 227: true, 228: true, 229: true, 230: true, 231: true, 232: true,
	236: true, 237: true, 242: true, 245: true,
}

func spawnStatusName(status int) string {
	if name, ok := spawnStatusNames[status]; ok {
		return name
	}
	return "status " + strconv.Itoa(status)
}
