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
# The median of the numbers on standard input, separated by spaces or lines.
median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
