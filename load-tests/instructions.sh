#!/usr/bin/env bash
# Instructions a streamed request costs the proxy, counted by callgrind: a figure that
# stays put where this kind of shared machine's speed drifts by 10 to 20 % within
# minutes (streams.sh), so a change of a few percent in the proxy's work shows in one
# run. It counts instructions, not time: a cache miss costs nothing here, and at 1,000
# streams most of the proxy's user time is such misses (load-tests/README.md). The count
# does follow how the provider's events reach the proxy: on a machine busy with other
# work (a build) more of them arrive together and a request counts fewer instructions,
# so compare builds within one run, on an otherwise idle machine.
#
# A paced mock provider (as streams.sh's) and a control plane (SQLite, KEYS_COUNT proxy
# keys); then, for BIN's proxy and, when BIN2 names another build's folder, BIN2's, one
# after the other: the proxy under `valgrind --tool=callgrind`, its counters zeroed once it
# serves, CONCURRENCY concurrent streamed chat completions (LOAD=plain: wrk's plain
# ones, which the mock answers at once) for WARMUP + DURATION s, its usage flushed, the
# counters dumped. Prints, per build, the instructions a request (all of the proxy's
# threads, divided by the requests it recorded) and the functions that spent the most
# of them; then BIN2's figure as a ratio to BIN's. With TRACED=1, BIN's
# proxy is counted a second time with traces of every request exported over OTLP/HTTP
# (sampling 1.0, to the mock, which answers 200), and the ratio of the two is what the
# traces cost in instructions.
#
#   load-tests/instructions.sh                   # this tree's release build
#   BIN2=folder load-tests/instructions.sh       # and another build beside it
#   TRACED=1 load-tests/instructions.sh          # and the same build with traces on
#   TRACED=1 BIN2=folder load-tests/instructions.sh  # both builds, each with and without
#   KEEP=folder load-tests/instructions.sh       # keeps the dumps for callgrind_annotate
#   LOAD=plain load-tests/instructions.sh        # plain (not streamed) chat completions, by wrk
#   LOAD=streamed load-tests/instructions.sh     # wrk's streamed ones, as run.sh sends them:
#                                                # the mock's short stream, unpaced
set -euo pipefail
cd "$(dirname "$0")/.."

CONCURRENCY=${CONCURRENCY:-50}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-2}
KEYS_COUNT=${KEYS_COUNT:-1000}
PACE=${PACE:-100,50,10}
LOAD=${LOAD:-streams}
TOP=${TOP:-12}
MOCK=127.0.0.1:19600
API=127.0.0.1:19680
PROXY=127.0.0.1:19681

if ! command -v valgrind >/dev/null 2>&1 || { [ "$LOAD" != streams ] && ! command -v wrk >/dev/null 2>&1; }; then
  apt-get update -qq && apt-get install -y -qq valgrind wrk >/dev/null
fi
# shellcheck source=load-tests/lib.sh
source load-tests/lib.sh

# wrk's streams are the mock's short one, unpaced (as run.sh's).
MOCK_ARGS=()
if [ "$LOAD" = streams ]; then MOCK_ARGS=(--pace "$PACE"); fi
"$BIN/mock-provider" "$MOCK" "${MOCK_ARGS[@]}" >/dev/null & PIDS+=($!)
wait_http "http://$MOCK/"
start_control_plane "$API"

metric() { curl -s "http://$PROXY/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# Waits until the proxy holds no usage unsent (its flush runs every second).
flushed() { for _ in $(seq 1 100); do [ "$(metric warden_proxy_usage_buffer_depth)" = 0 ] && return 0; sleep 0.2; done; }

# The load, CONCURRENCY connections for WARMUP + DURATION s, and what it is.
if [ "$LOAD" = plain ] || [ "$LOAD" = streamed ]; then
  LOAD_NAME="connections of $LOAD chat completions (wrk)"
  load() {
    STREAM=$([ "$LOAD" = streamed ] && echo 1 || echo 0) KEYS="$WORK/keys.txt" wrk -t1 -c"$CONCURRENCY" -d"$((WARMUP + DURATION))s" -s load-tests/chat.lua \
      "http://$PROXY/v1/chat/completions"
  }
else
  LOAD_NAME="streams (paced $PACE)"
  load() { "$BIN/stream-load" steady "http://$PROXY/v1/chat/completions" "$WORK/keys.txt" "$CONCURRENCY" "$WARMUP" "$DURATION"; }
fi

declare -A PER_REQUEST
# count NAME FOLDER [VARIABLE=VALUE...]: the instructions a request of FOLDER's proxy,
# started with the variables given.
count() {
  local name=$1 folder=$2 out="$WORK/callgrind.$1.out"
  env "${@:3}" WARDEN_PROXY__USAGE_SPOOL_DIR="$WORK/spool-$name" WARDEN_PROXY__LISTEN=$PROXY \
    WARDEN_PROXY__CONTROL_PLANE_URL="http://$API" \
    WARDEN_PROVIDERS__OPENAI__BASE_URL="http://$MOCK/v1" WARDEN_PROVIDERS__OPENAI__API_KEY=sk-load \
    valgrind --tool=callgrind --compress-strings=no --callgrind-out-file="$out" "$folder/warden" proxy \
    >"$WORK/proxy-$name.log" 2>&1 & local pid=$!
  wait_for_keys "$PROXY" 120 # slow to start under valgrind
  flushed
  local before; before=$(metric warden_proxy_usage_flushed_total)
  callgrind_control -z "$pid" >/dev/null 2>&1
  load >/dev/null
  flushed
  local requests=$(( $(metric warden_proxy_usage_flushed_total) - before ))
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$out.1" "$KEEP/callgrind.$name.out"; fi
  local total; total=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  PER_REQUEST[$name]=$(awk -v t="$total" -v n="$requests" 'BEGIN {printf "%.0f", n ? t / n : 0}')
  printf '\n%s (%s): %s requests, %s instructions a request\n' "$name" "$folder" "$requests" "${PER_REQUEST[$name]}"
  printf '  %12s  %s\n' "a request" "function (its own instructions)"
  # The functions on the threads' stacks when the counters were zeroed (the runtime's
  # roots) are charged everything they called since: they are left out.
  callgrind_annotate --threshold=100 "$out.1" 2>/dev/null | awk -v n="$requests" -v total="$total" -v top="$TOP" '
    /^-+$/ { rule++; next }
    rule == 6 && /\)  / && shown < top { count = $1; gsub(",", "", count); count += 0; if (count > total / 2) next
      f = $0; sub(/^[^)]*\) +/, "", f); sub(/ \[[^]]*\]$/, "", f); sub(/^\?\?\?:/, "", f)
      printf "  %12.0f  %s\n", count / n, substr(f, 1, 110); shown++ }'
}

printf '%s concurrent %s, %s s after %s s warm-up, the proxy under callgrind\n' \
  "$CONCURRENCY" "$LOAD_NAME" "$DURATION" "$WARMUP"
count bin "$BIN"
if [ "${TRACED:-0}" = 1 ]; then
  count traced "$BIN" OTEL_EXPORTER_OTLP_ENDPOINT="http://$MOCK"
  awk -v a="${PER_REQUEST[traced]}" -v b="${PER_REQUEST[bin]}" 'BEGIN {
    printf "\ntraced / untraced, instructions a request: %.3f (%+.0f a request)\n", a / b, a - b }'
fi
if [ -n "${BIN2:-}" ]; then
  count bin2 "$BIN2"
  awk -v a="${PER_REQUEST[bin2]}" -v b="${PER_REQUEST[bin]}" 'BEGIN {
    printf "\nBIN2 / BIN, instructions a request: %.3f\n", a / b }'
  if [ "${TRACED:-0}" = 1 ]; then
    count traced2 "$BIN2" OTEL_EXPORTER_OTLP_ENDPOINT="http://$MOCK"
    awk -v a="${PER_REQUEST[traced2]}" -v b="${PER_REQUEST[bin2]}" -v t="${PER_REQUEST[traced]}" 'BEGIN {
      printf "\nBIN2 traced / untraced, instructions a request: %.3f (%+.0f a request)\n", a / b, a - b
      printf "BIN2 traced / BIN traced: %.3f (%+.0f a request)\n", a / t, a - t }'
  fi
fi
