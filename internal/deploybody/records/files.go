package records

// The node's records (the verdict of its last deploy, its last good system) live in a
// directory of their own that only root reads: RecordsDir. Versions before this one kept
// them in /var/lib/fediversity, the default mount point of an Incus node's data volume,
// a directory the node's services own: every deploy changed its mode to root's only,
// and wrote at fixed temporary names in it, which a symbolic link planted by a service
// could turn into a write anywhere. So now: a record is written to a fresh temporary
// file (mktemp) in RecordsDir and renamed over the old one; only RecordsDir's own mode
// is ever set; what an older version left in the old directory is read when the new one
// has none, moved to the new one at the next write (a regular file only, never through
// a symbolic link), and the old directory itself is never touched.
const (
	// RecordsDir is where a node keeps this project's records.
	RecordsDir = "/var/lib/fediversity-deploy"
	// legacyRecordsDir is where older versions kept them.
	legacyRecordsDir = "/var/lib/fediversity"
)

// ReadRecordScript prints $1 or, when there is none, the older version's record $2 (a
// regular file, not a link), or exits 3 when there is neither.
const ReadRecordScript = `f=$1; [ -e "$f" ] || { [ -f "$2" ] && [ ! -L "$2" ] && f=$2; } || exit 3; cat "$f"`

// WriteRecordScript writes stdin to $1 atomically: a fresh temporary file in $1's
// directory (only root's: its mode is the only one set), renamed over $1; then the
// older version's record $2 (when given) is removed, the new one replaces it.
const WriteRecordScript = `set -u; umask 077; f=$1 d=${1%/*}
if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then echo "$d is not a directory of its own" >&2; exit 1; fi
mkdir -p "$d" && chmod 700 "$d" || exit 1
t=$(mktemp "$d/.${f##*/}.XXXXXX") || exit 1
if cat >"$t" && mv -f "$t" "$f"; then if [ -n "${2:-}" ]; then rm -f "$2"; fi; else rm -f "$t"; exit 1; fi`

// VerdictRecordFile is where a node keeps the verdict of its last deploy;
// LegacyVerdictRecordFile is where older versions kept it.
const (
	VerdictRecordFile       = RecordsDir + "/last-verdict.json"
	LegacyVerdictRecordFile = legacyRecordsDir + "/last-verdict.json"
)

// VerdictRecordVersion is the record's format; a record of another version is read as
// no record (the safe side: a redeploy).
const VerdictRecordVersion = 1
