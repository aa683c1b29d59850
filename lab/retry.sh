# Sourced by the scripts that fetch from a registry (the Go module proxy, Debian's
# mirror): `retry CMD…` runs CMD and, when it fails, runs it again after 10, 30, 60 and
# 120 s (five tries, under four minutes of waiting), saying so on stderr each time and
# when it gives up. A registry that times out once must not fail a two-hour run; one that
# is down for minutes still fails it, within a bound, with the command named.
# RETRY_WAITS overrides the waits (seconds, space-separated; "" means one try).
retry() {
  local waits=(${RETRY_WAITS-10 30 60 120}) try=1 rc
  while :; do
    "$@" && return 0
    rc=$?
    if [ "$try" -gt "${#waits[@]}" ]; then
      echo "retry: gave up after $try tries (exit $rc): $*" >&2
      return "$rc"
    fi
    echo "retry: try $try of $((${#waits[@]} + 1)) failed (exit $rc), again in ${waits[$((try - 1))]} s: $*" >&2
    sleep "${waits[$((try - 1))]}"
    try=$((try + 1))
  done
}
