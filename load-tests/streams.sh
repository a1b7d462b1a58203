#!/usr/bin/env bash
# The stream load test, one command: many long streams at once, as LLM traffic comes.
# A paced mock provider (first byte after 100 ms, then 50 chunks 10 ms apart: about
# 0.6 s a stream) is loaded with CONCURRENCY concurrent streaming chat completions
# directly, through nginx, through bare pingora (the framework's own floor) and through
# Warden, side by side in one run; then a burst of
# BURST new connections within BURST_MS, each a stream, against nginx, bare pingora and
# Warden.
# The steady load runs in ROUNDS rounds, each target in turn; the ratios to nginx are
# each round's (targets measured a minute apart at most) and their median, since this
# kind of shared machine drifts in speed by 10 to 20 % within minutes.
# Prints, per target and round: streams a second, first-byte p50/p99, whole-stream p99, errors,
# CPU per stream and peak memory of the proxy process, and the kernel's listen-queue
# overflows and SYN retransmissions during the run; then Warden's ratios to nginx (the
# issue's targets) and to bare pingora.
#
#   load-tests/streams.sh                        # 1,000 streams, 15 s after 3 s warm-up, 3 rounds
#   CONCURRENCY=2000 DURATION=30 load-tests/streams.sh
#   BIN2=folder TARGETS="nginx warden warden2" ROUNDS=5 load-tests/streams.sh
#                                                # another build's proxy beside this one's
#
# TARGETS chooses what the steady load and the burst run against (default: direct nginx
# pingora warden, and warden2 when BIN2 is set). BIN2 names a folder with another build's
# `warden`: its proxy runs beside the first on the same control plane and mock, measured
# in the same rounds, so the two builds' ratio is read within minutes of each other.
#
# Ends by checking that the proxy dropped no usage and holds none: the ledger kept up.
set -euo pipefail
cd "$(dirname "$0")/.."

CONCURRENCY=${CONCURRENCY:-1000}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
BURST=${BURST:-2000}
BURST_MS=${BURST_MS:-100}
KEYS_COUNT=${KEYS_COUNT:-1000}
PACE=${PACE:-100,50,10}
MOCK=127.0.0.1:19400
NGINX=127.0.0.1:19480
PINGORA=127.0.0.1:19580
API=127.0.0.1:19380
PROXY=127.0.0.1:19381
PROXY2=127.0.0.1:19382
TARGETS=${TARGETS:-direct nginx pingora warden${BIN2:+ warden2}}
# has NAME: whether NAME is one of the TARGETS.
has() { [[ " $TARGETS " == *" $1 "* ]]; }

need() { command -v "$1" >/dev/null 2>&1; }
if ! need nginx; then
  apt-get update -qq && apt-get install -y -qq nginx >/dev/null
fi
# shellcheck source=load-tests/lib.sh
source load-tests/lib.sh
# Each connection is a file descriptor in the client, the proxy and its upstream pool.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

"$BIN/mock-provider" "$MOCK" --pace "$PACE" >/dev/null & MOCK_PID=$!; PIDS+=($MOCK_PID)
wait_http "http://$MOCK/"

# nginx as it would front a streaming API: 2 workers, a listener with the same backlog
# as Warden's, accepting many connections per wakeup, a keep-alive pool to the mock large
# enough for every stream, no buffering.
cat >"$WORK/nginx.conf" <<NGINX
worker_processes 2;
worker_rlimit_nofile 65536;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 16384; multi_accept on; }
http {
  access_log off;
  client_body_temp_path $WORK;
  proxy_temp_path $WORK;
  upstream mock { server $MOCK; keepalive 2048; }
  server {
    listen $NGINX backlog=4096;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGINX
nginx -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;' & NGINX_PID=$!; PIDS+=($NGINX_PID)
wait_http "http://$NGINX/"

# pingora with nothing of Warden: what any proxy on Warden's framework costs.
"$BIN/bare-pingora" "$PINGORA" "$MOCK" >"$WORK/bare-pingora.log" 2>&1 & PINGORA_PID=$!; PIDS+=($PINGORA_PID)
wait_http "http://$PINGORA/"

start_control_plane "$API"
# start_proxy BIN LISTEN NAME: a proxy of the build in BIN on LISTEN, serving once it
# knows the last key; sets PROXY_STARTED to its pid.
start_proxy() {
  WARDEN_PROXY__USAGE_SPOOL_DIR="$WORK/usage-spool-$3" WARDEN_PROXY__LISTEN=$2 \
    WARDEN_PROXY__CONTROL_PLANE_URL="http://$API" \
    WARDEN_PROVIDERS__OPENAI__BASE_URL="http://$MOCK/v1" WARDEN_PROVIDERS__OPENAI__API_KEY=sk-load \
    "$1/warden" proxy >"$WORK/$3.log" 2>&1 & PROXY_STARTED=$!; PIDS+=($PROXY_STARTED)
  wait_for_keys "$2"
}
start_proxy "$BIN" "$PROXY" proxy; PROXY_PID=$PROXY_STARTED
PROXY2_PID=none
if [ -n "${BIN2:-}" ]; then start_proxy "$BIN2" "$PROXY2" proxy2; PROXY2_PID=$PROXY_STARTED; fi

# The kernel's TCP extended counter $1 (ListenOverflows, TCPSynRetrans, ...).
tcpext() { awk -v name="$1" '$1 == "TcpExt:" { if (!n) { for (i = 2; i <= NF; i++) col[$i] = i; n = 1 } else print $(col[name]) }' /proc/net/netstat; }
# The processes a target runs in: the proxy, or nginx's master and workers.
procs_of() { if [ "$1" = "$NGINX_PID" ]; then echo "$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"; else echo "$1"; fi; }
# CPU ticks of the processes $@ together.
ticks_of() { local sum=0 pid; for pid in "$@"; do sum=$((sum + $(cpu_ticks "$pid"))); done; echo "$sum"; }
# Proportional set size of the processes $@ together, KiB: a page shared by nginx's
# workers counts once, split between them.
pss_kib() { local pid; for pid in "$@"; do awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup"; done | awk '{s += $1} END {print s + 0}'; }
# Samples pss_kib of $@ every 200 ms into $WORK/peak until that file is removed.
sample_peak() { local peak=0 now; echo 0 >"$WORK/peak"; while [ -f "$WORK/peak" ]; do
  now=$(pss_kib "$@"); [ "$now" -gt "$peak" ] && peak=$now && echo "$peak" >"$WORK/peak.max"; sleep 0.2; done; }
# field NAME LINE: the value of NAME=... in stream-load's line.
field() { tr ' ' '\n' <<<"$2" | awk -F= -v n="$1" '$1 == n {print $2}'; }

declare -A LINE CPU CPU_CP PEAK OVERFLOWS RETRANS
# measure NAME URL PID MODE ARGS...: stream-load against URL, with the kernel's counters,
# the CPU of PID's processes and their peak memory around it.
measure() {
  local name=$1 url=$2 pid=$3 mode=$4; shift 4
  local procs; read -r -a procs <<<"$(procs_of "$pid")"
  local keys=-; [ "$pid" = "$PROXY_PID" ] || [ "$pid" = "$PROXY2_PID" ] && keys=$WORK/keys.txt
  echo 0 >"$WORK/peak.max"; sample_peak "${procs[@]}" & local sampler=$!
  local o0 r0 c0 c1 cp0 cp1 line
  o0=$(tcpext ListenOverflows); r0=$(tcpext TCPSynRetrans); c0=$(ticks_of "${procs[@]}"); cp0=$(cpu_ticks "$CP_PID")
  line=$("$BIN/stream-load" "$mode" "$url" "$keys" "$@" 2>"$WORK/stream-load.err")
  c1=$(ticks_of "${procs[@]}"); cp1=$(cpu_ticks "$CP_PID")
  OVERFLOWS[$name]=$(( $(tcpext ListenOverflows) - o0 )); RETRANS[$name]=$(( $(tcpext TCPSynRetrans) - r0 ))
  rm -f "$WORK/peak"; wait "$sampler" 2>/dev/null || true
  PEAK[$name]=$(awk '{printf "%.1f", $1 / 1024}' "$WORK/peak.max")
  local streams; streams=$(field completed "$line"); [ -n "$streams" ] || streams=$(field streams "$line")
  CPU[$name]=$(awk -v t=$((c1 - c0)) -v n="$streams" -v hz="$TICK" 'BEGIN {printf "%.3f", n ? t / hz / n * 1e3 : 0}')
  CPU_CP[$name]=$(awk -v t=$((cp1 - cp0)) -v n="$streams" -v hz="$TICK" 'BEGIN {printf "%.3f", n ? t / hz / n * 1e3 : 0}')
  LINE[$name]=$line
  [ -s "$WORK/stream-load.err" ] && sed "s/^/  $name: /" "$WORK/stream-load.err" >&2
  return 0
}

printf '\n%s concurrent streams (paced %s: first byte ms, chunks, gap ms), %s s after %s s warm-up, %s rounds, %s cores, %s proxy keys\n' \
  "$CONCURRENCY" "$PACE" "$DURATION" "$WARMUP" "$ROUNDS" "$(nproc)" "$KEYS_COUNT"
for round in $(seq 1 "$ROUNDS"); do
  for target in $TARGETS; do
    case $target in
      direct) url=$MOCK pid=$MOCK_PID ;;
      nginx) url=$NGINX pid=$NGINX_PID ;;
      pingora) url=$PINGORA pid=$PINGORA_PID ;;
      warden) url=$PROXY pid=$PROXY_PID ;;
      warden2) url=$PROXY2 pid=$PROXY2_PID ;;
      *) echo "unknown target $target (direct, nginx, pingora, warden, warden2 with BIN2)" >&2; exit 2 ;;
    esac
    measure "$target#$round" "http://$url/v1/chat/completions" "$pid" steady "$CONCURRENCY" "$WARMUP" "$DURATION"
    sleep 2 # the connections of one target close before the next starts
  done
done
row_format='%-10s %10s %9s %9s %9s %7s %12s %10s %10s %10s\n'
printf "$row_format" target streams/s "fb p50" "fb p99" "end p99" errors "CPU ms/str" "peak MiB" overflows "SYN retr"
for round in $(seq 1 "$ROUNDS"); do
  for target in $TARGETS; do
    name="$target#$round"; l=${LINE[$name]}
    printf "$row_format" "$name" "$(field streams_per_s "$l")" "$(field first_p50_ms "$l")" \
      "$(field first_p99_ms "$l")" "$(field end_p99_ms "$l")" "$(field errors "$l")" "${CPU[$name]}" "${PEAK[$name]}" \
      "${OVERFLOWS[$name]}" "${RETRANS[$name]}"
  done
done
echo "  (direct: the mock's own CPU and memory; nginx: master and workers; pingora: bare pingora; memory as proportional set size)"
[ -n "${BIN2:-}" ] && echo "  (warden2: BIN2's proxy; its binary's pages are not shared with the control plane's, which runs BIN's, so its proportional set counts them whole: about 10 MiB more)"
# ratios OF TO: each round's OF / TO (the two measured minutes apart at most, so a drift
# of this shared machine's speed between rounds cancels), as "throughput fb_p99 cpu peak".
ratios() { local round; for round in $(seq 1 "$ROUNDS"); do
  awk -v an="$(field streams_per_s "${LINE[$1#$round]}")" -v bn="$(field streams_per_s "${LINE[$2#$round]}")" \
      -v af="$(field first_p99_ms "${LINE[$1#$round]}")" -v bf="$(field first_p99_ms "${LINE[$2#$round]}")" \
      -v ac="${CPU[$1#$round]}" -v bc="${CPU[$2#$round]}" -v am="${PEAK[$1#$round]}" -v bm="${PEAK[$2#$round]}" \
      'BEGIN {printf "%.3f %.3f %.3f %.3f\n", an / bn, af / bf, ac / bc, am / bm}'
done; }
# column N of ratios' lines: the median, and the rounds' values.
med_of() { awk -v c="$1" '{print $c}' | median; }
all_of() { awk -v c="$1" '{printf "%s%.2f", (NR > 1 ? " " : ""), $c}'; }
if has warden && has nginx; then
  warden_nginx=$(ratios warden nginx)
  printf 'warden / nginx, median of the rounds (each round): throughput %.2f (%s; target >= 0.97), first-byte p99 %.2f (%s; <= 1.05), CPU per stream %.2f (%s; <= 1.15), peak memory %.2f (%s; <= 2)\n' \
    "$(med_of 1 <<<"$warden_nginx")" "$(all_of 1 <<<"$warden_nginx")" "$(med_of 2 <<<"$warden_nginx")" "$(all_of 2 <<<"$warden_nginx")" \
    "$(med_of 3 <<<"$warden_nginx")" "$(all_of 3 <<<"$warden_nginx")" "$(med_of 4 <<<"$warden_nginx")" "$(all_of 4 <<<"$warden_nginx")"
fi
if has warden && has pingora && has nginx; then
  warden_pingora=$(ratios warden pingora); pingora_nginx=$(ratios pingora nginx)
  printf 'warden / bare pingora: throughput %.2f, first-byte p99 %.2f, CPU per stream %.2f, peak memory %.2f; bare pingora / nginx: CPU per stream %.2f, peak memory %.2f (medians)\n' \
    "$(med_of 1 <<<"$warden_pingora")" "$(med_of 2 <<<"$warden_pingora")" "$(med_of 3 <<<"$warden_pingora")" \
    "$(med_of 4 <<<"$warden_pingora")" "$(med_of 3 <<<"$pingora_nginx")" "$(med_of 4 <<<"$pingora_nginx")"
fi
if has warden && has warden2; then
  second=$(ratios warden2 warden)
  printf 'warden2 (BIN2) / warden (BIN), median of the rounds (each round): throughput %.2f (%s), first-byte p99 %.2f (%s), CPU per stream %.2f (%s)\n' \
    "$(med_of 1 <<<"$second")" "$(all_of 1 <<<"$second")" "$(med_of 2 <<<"$second")" "$(all_of 2 <<<"$second")" \
    "$(med_of 3 <<<"$second")" "$(all_of 3 <<<"$second")"
fi
if has warden; then
  printf "control plane CPU per stream (the ledger ingesting the proxy's usage, its own process): %s ms\n" \
    "$(for round in $(seq 1 "$ROUNDS"); do echo "${CPU_CP[warden#$round]}"; done | median)"
fi

printf '\nburst: %s new connections within %s ms, each a stream\n' "$BURST" "$BURST_MS"
BURSTS=()
for target in nginx pingora warden warden2; do
  has "$target" || continue
  case $target in
    nginx) url=$NGINX pid=$NGINX_PID ;;
    pingora) url=$PINGORA pid=$PINGORA_PID ;;
    warden) url=$PROXY pid=$PROXY_PID ;;
    warden2) url=$PROXY2 pid=$PROXY2_PID ;;
  esac
  [ ${#BURSTS[@]} -gt 0 ] && sleep 2
  measure "$target-burst" "http://$url/v1/chat/completions" "$pid" burst "$BURST" "$BURST_MS"
  BURSTS+=("$target-burst")
done
printf '%-14s %9s %9s %9s %7s %16s %10s %10s\n' target "fb p50" "fb p99" "fb max" errors "fb over 1 s" overflows "SYN retr"
for target in "${BURSTS[@]}"; do
  l=${LINE[$target]}
  printf '%-14s %9s %9s %9s %7s %16s %10s %10s\n' "$target" "$(field first_p50_ms "$l")" "$(field first_p99_ms "$l")" \
    "$(field first_max_ms "$l")" "$(field errors "$l")" "$(field first_byte_over_1s "$l")" "${OVERFLOWS[$target]}" "${RETRANS[$target]}"
done

# metric URL NAME: the value of NAME in the proxy's metrics at URL.
metric() { curl -s "http://$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
sleep 2 # the last batches' flush
for proxy in "$PROXY" ${BIN2:+"$PROXY2"}; do
  dropped=$(metric "$proxy" warden_proxy_usage_dropped_total); buffered=$(metric "$proxy" warden_proxy_usage_buffer_depth)
  echo "usage records dropped by the proxy at $proxy: $dropped; still buffered: $buffered; flushed: $(metric "$proxy" warden_proxy_usage_flushed_total)"
  if [ "$dropped" != 0 ] || [ "$buffered" != 0 ]; then
    echo "the control plane did not keep up with the proxy's usage" >&2
    exit 1
  fi
done
