# What the load tests share, sourced from the repository's root after their settings:
# the release binaries, a scratch folder and the processes to stop when the script ends,
# and the helpers they wait and measure with.
# BIN=folder runs the binaries already there instead (two builds compared on one machine).
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p warden-control-plane -p warden-load-tests
  BIN=target/release
fi
WORK=$(mktemp -d)
PIDS=()
# Waits for the processes to exit: a script run straight after this one binds the same ports.
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# Waits until something answers HTTP at $1 (20 s at most).
wait_http() { for _ in $(seq 1 200); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }
# The CPU time process $1 has used, user and system, in clock ticks (TICK a second).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
# Waits until the proxy at $1 (host:port) serves the last key of $WORK/keys.txt: it
# has the state it enforces ($2 seconds at most, 30 by default).
wait_for_keys() {
  local last_key; last_key=$(tail -n 1 "$WORK/keys.txt")
  for _ in $(seq 1 $(( ${2:-30} * 10 ))); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $last_key" "http://$1/v1/models")" = 200 ] && return 0
    sleep 0.1
  done
}
# Starts a control plane of $BIN on $1 (SQLite in $WORK) and seeds KEYS_COUNT proxy keys
# into $WORK/keys.txt; sets CP_PID.
start_control_plane() {
  export WARDEN_SERVICE_TOKEN="load-test-service-token-0123456789"
  export WARDEN_BOOTSTRAP_PLATFORM_KEY="wdn_loadtest_platform_key_0123456789"
  export WARDEN_LOG_FORMAT=json RUST_LOG=error
  WARDEN_LISTEN=$1 WARDEN_DATABASE_URL="sqlite://$WORK/warden.db" \
    "$BIN/warden" control-plane >"$WORK/control-plane.log" 2>&1 & CP_PID=$!; PIDS+=($CP_PID)
  wait_http "http://$1/healthz"
  "$BIN/seed-keys" "http://$1" "$WARDEN_BOOTSTRAP_PLATFORM_KEY" "$KEYS_COUNT" "$WORK/keys.txt" >/dev/null
}
# The numbers on standard input, separated by spaces or lines, one a line in order.
sorted() { tr ' ' '\n' | awk 'NF' | sort -g; }
# The median of the numbers on standard input.
median() { sorted | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# A 95 % interval for the median of the numbers on standard input, free of any
# assumption about their distribution: the order statistics k and n + 1 - k, k the
# largest with P(B < k) <= 2.5 %, B binomial (n, 1/2) (how many of the numbers fall
# below the true median). Prints "low high", or "- -" for fewer than 6 numbers, too few
# for such an interval.
median_interval() {
  sorted | awk '{ v[NR] = $1 } END {
    n = NR; p = 0.5 ^ n; below = 0; k = 0
    for (i = 0; i < n; i++) { below += p; if (below > 0.025) break; k = i + 1; p = p * (n - i) / (i + 1) }
    if (k < 1) print "- -"; else print v[k], v[n + 1 - k] }'
}
