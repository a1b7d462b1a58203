#!/usr/bin/env bash
# The proxy load test, one command: a fast local mock provider, then the same wrk load at
# fixed concurrency sent directly to the mock, through nginx (the floor for any
# forwarding proxy), through a bare pass-through proxy on pingora (the floor for a proxy
# on Warden's framework) and through Warden's proxy with a realistic number of proxy
# keys, non-streaming and streaming. Prints throughput, p50 and p99 of each, Warden's
# ratios to them, and the proxy's CPU time per request and resident memory.
#
#   load-tests/run.sh                 # 10,000 keys, concurrency 32, 15 s per run
#   KEYS_COUNT=100000 DURATION=20 CONCURRENCY=32 load-tests/run.sh
#   PROXY_LOOPS=1 load-tests/run.sh    # the proxy on one event loop (default one per core)
#   PROXY_LOOPS=0 load-tests/run.sh    # connections on the proxy's shared runtime workers
#   PROXY_THREADS=1 load-tests/run.sh  # the proxy's runtime on one thread
#   ROUNDS=9 load-tests/run.sh         # more alternating rounds with and without policies (default 5)
#   CP_NICE=10 load-tests/run.sh       # the control plane below the proxy's CPU priority
#   MOCK_CHUNKED=1 load-tests/run.sh   # streams chunked, an HTTP chunk per event, as
#                                      # providers send them (default: one Content-Length body)
#   ONLY="targets traced" load-tests/run.sh  # only these parts: targets, governed,
#                                      # minute, guarded, twin, traced, captured,
#                                      # responses, messages
#
# The control plane runs at the proxy's priority (CP_NICE, default 0). The load saturates
# both cores, so a control plane at a lower priority gets too little to keep up: at nice
# 10 its ingest fell behind by a quarter and the proxy's usage buffer overflowed within
# 15 s. Usage the ledger has not taken is work deferred, not saved, so the figures are
# those of a Warden whose ledger keeps up: its CPU per request is printed, and the script
# fails if the proxy dropped usage or ended with usage still buffered.
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS_COUNT=${KEYS_COUNT:-10000}
CONCURRENCY=${CONCURRENCY:-32}
DURATION=${DURATION:-15}
THREADS=${THREADS:-2}
MOCK=127.0.0.1:19100
NGINX=127.0.0.1:19180
BARE=127.0.0.1:19280
API=127.0.0.1:19080
PROXY=127.0.0.1:19081
# The traced proxy, beside the other for the traced rounds, and an untraced twin.
PROXY_TRACED=127.0.0.1:19082
PROXY_TWIN=127.0.0.1:19083
# A proxy with traces configured and none sampled (OTEL_TRACES_SAMPLER=always_off).
PROXY_UNSAMPLED=127.0.0.1:19084
# Where the traced rounds export their spans (an OTLP/HTTP endpoint answering 200: nginx).
OTLP=127.0.0.1:19318

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx; then
  apt-get update -qq && apt-get install -y -qq wrk nginx >/dev/null
fi
# shellcheck source=load-tests/lib.sh
source load-tests/lib.sh
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

MOCK_ARGS=()
if [ "${MOCK_CHUNKED:-0}" = 1 ]; then MOCK_ARGS+=(--chunked); fi
"$BIN/mock-provider" "$MOCK" "${MOCK_ARGS[@]}" >/dev/null & PIDS+=($!)
wait_http "http://$MOCK/"

cat >"$WORK/nginx.conf" <<NGINX
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK;
  proxy_temp_path $WORK;
  upstream mock { server $MOCK; keepalive 128; }
  server {
    listen $OTLP;
    client_max_body_size 256m;
    location /v1/traces { return 200; }
  }
  server {
    listen $NGINX;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGINX
nginx -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;' & PIDS+=($!)
wait_http "http://$NGINX/"
# pingora with nothing of Warden in it, a thread per core (src/bare_pingora.rs).
"$BIN/bare-pingora" "$BARE" "$MOCK" >"$WORK/bare-pingora.log" 2>&1 & BARE_PID=$!; PIDS+=($BARE_PID)
wait_http "http://$BARE/"

export WARDEN_SERVICE_TOKEN="load-test-service-token-0123456789"
export WARDEN_BOOTSTRAP_PLATFORM_KEY="wdn_loadtest_platform_key_0123456789"
export WARDEN_LOG_FORMAT=json RUST_LOG=error
CP_NICE=${CP_NICE:-0}
WARDEN_LISTEN=$API WARDEN_DATABASE_URL="sqlite://$WORK/warden.db" \
  nice -n "$CP_NICE" "$BIN/warden" control-plane >"$WORK/control-plane.log" 2>&1 & CP_PID=$!; PIDS+=($CP_PID)
wait_http "http://$API/healthz"
echo "seeding $KEYS_COUNT proxy keys..."
"$BIN/seed-keys" "http://$API" "$WARDEN_BOOTSTRAP_PLATFORM_KEY" "$KEYS_COUNT" "$WORK/keys.txt"
# PROXY_LOOPS sets the proxy's event loops (unset: its default, one per core);
# PROXY_THREADS sizes its runtime (0: one thread per core).
if [ -n "${PROXY_LOOPS:-}" ]; then export WARDEN_PROXY__EVENT_LOOPS=$PROXY_LOOPS; fi
# start_proxy ADDRESS [VAR=value...]: a proxy on ADDRESS, with the extra environment
# given, once it knows the last key; its pid in STARTED_PID.
start_proxy() {
  local address=$1; shift
  env "$@" WARDEN_PROXY__WORKER_THREADS="${PROXY_THREADS:-0}" WARDEN_PROXY__USAGE_SPOOL_DIR="$WORK/usage-spool-${address##*:}" \
    WARDEN_PROXY__LISTEN=$address WARDEN_PROXY__CONTROL_PLANE_URL="http://$API" \
    WARDEN_PROVIDERS__OPENAI__BASE_URL="http://$MOCK/v1" WARDEN_PROVIDERS__OPENAI__API_KEY=sk-load \
    WARDEN_PROVIDERS__ANTHROPIC__BASE_URL="http://$MOCK/v1" WARDEN_PROVIDERS__ANTHROPIC__API_KEY=sk-ant-load \
    "$BIN/warden" proxy >>"$WORK/proxy-${address##*:}.log" 2>&1 & STARTED_PID=$!; PIDS+=($STARTED_PID)
  for _ in $(seq 1 300); do
    curl -s "http://$address/healthz" | grep -q '"ok"' && break; sleep 0.1
  done
  wait_for_keys "$address"
}
start_proxy "$PROXY"; PROXY_PID=$STARTED_PID
# The proxy the alternating rounds load (a toggle may point them at another).
TARGET=$PROXY TARGET_PID=$PROXY_PID
echo "proxy loaded $KEYS_COUNT keys; resident memory $(rss_mib $PROXY_PID) MiB"

# run NAME URL STREAM [KEYS] -> "rps p50_ms p99_ms requests non_200"; a URL ending in
# /responses gets Responses API bodies.
run() {
  local out api=chat
  case "$2" in */responses) api=responses ;; */messages) api=messages ;; esac
  out=$(API=$api STREAM=$3 KEYS=${4:-} wrk -t"$THREADS" -c"$CONCURRENCY" -d"${DURATION}s" --latency \
        -s load-tests/chat.lua "$2" 2>&1)
  local rps p50 p99 total bad
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  total=$(awk '/requests in/ {print $1}' <<<"$out")
  bad=$(awk '/^non_200/ {print $2}' <<<"$out")
  echo "$rps $(to_ms "$p50") $(to_ms "$p99") $total ${bad:-0}"
}
to_ms() { awk -v v="$1" 'BEGIN { u = v; gsub(/[0-9.]/, "", u); n = v + 0;
  if (u == "us") n /= 1000; else if (u == "s") n *= 1000; printf "%.3f", n }'; }

printf '\nconcurrency %s, %s s per run, %s wrk threads, %s proxy keys, %s cores, proxy event loops %s, control plane at nice %s, streams %s\n' \
  "$CONCURRENCY" "$DURATION" "$THREADS" "$KEYS_COUNT" "$(nproc)" "${PROXY_LOOPS:-one per core}" "$CP_NICE" \
  "$([ "${MOCK_CHUNKED:-0}" = 1 ] && echo "chunked, a chunk per event" || echo "in one Content-Length body")"
printf '%-28s %12s %10s %10s %9s\n' "target" "requests/s" "p50 ms" "p99 ms" "non-200"
# wanted PART: whether ONLY (unset: every part) names it.
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
declare -A WARDEN_RPS
for stream in $(wanted targets && echo 0 1); do
  label=$([ "$stream" = 1 ] && echo "streaming" || echo "plain")
  # Every target gets the very same requests, the rotating proxy keys included (the
  # mock ignores them), so wrk's own work per request is the same in every row.
  read -r d_rps d_p50 d_p99 _ d_bad < <(run direct "http://$MOCK/v1/chat/completions" "$stream" "$WORK/keys.txt")
  read -r n_rps n_p50 n_p99 _ n_bad < <(run nginx "http://$NGINX/v1/chat/completions" "$stream" "$WORK/keys.txt")
  bare_before=$(cpu_ticks "$BARE_PID")
  read -r b_rps b_p50 b_p99 b_total b_bad < <(run bare "http://$BARE/v1/chat/completions" "$stream" "$WORK/keys.txt")
  bare_after=$(cpu_ticks "$BARE_PID")
  before=$(cpu_ticks "$PROXY_PID"); cp_before=$(cpu_ticks "$CP_PID")
  read -r w_rps w_p50 w_p99 w_total w_bad < <(run warden "http://$PROXY/v1/chat/completions" "$stream" "$WORK/keys.txt")
  after=$(cpu_ticks "$PROXY_PID"); cp_after=$(cpu_ticks "$CP_PID")
  WARDEN_RPS[$label]=$w_rps
  printf '%-28s %12s %10s %10s %9s\n' "direct ($label)" "$d_rps" "$d_p50" "$d_p99" "$d_bad"
  printf '%-28s %12s %10s %10s %9s\n' "nginx ($label)" "$n_rps" "$n_p50" "$n_p99" "$n_bad"
  printf '%-28s %12s %10s %10s %9s\n' "bare pingora ($label)" "$b_rps" "$b_p50" "$b_p99" "$b_bad"
  printf '%-28s %12s %10s %10s %9s\n' "warden ($label)" "$w_rps" "$w_p50" "$w_p99" "$w_bad"
  awk -v w="$w_rps" -v n="$n_rps" -v b="$b_rps" -v wp="$w_p99" -v dp="$d_p99" -v t="$w_total" -v bt="$b_total" \
      -v c="$((after - before))" -v cp="$((cp_after - cp_before))" -v bc="$((bare_after - bare_before))" \
      -v hz="$(getconf CLK_TCK)" -v label="$label" 'BEGIN {
    printf "  warden/nginx throughput %.2f; warden/bare pingora %.2f; bare pingora/nginx %.2f; added p99 over direct %.3f ms (%s)\n",
      w / n, w / b, b / n, wp - dp, label
    printf "  CPU per request: warden proxy %.1f us, control plane (ingesting its usage) %.1f us; bare pingora %.1f us (%s)\n",
      (c / hz) / t * 1e6, (cp / hz) / t * 1e6, (bc / hz) / bt * 1e6, label }'
done
echo "proxy resident memory after the runs: $(rss_mib $PROXY_PID) MiB"

# The same Warden runs with 10 enabled policies of every type (all letting the load
# through; about half cover it) and a budget limit on the agent every key acts for, in
# ROUNDS alternating rounds against the same Warden without them (policies disabled, the
# limit deleted), so that drift of this shared machine between runs does not land on
# one side. Each round's pair is printed; the ratio is of the medians.
ROUNDS=${ROUNDS:-5}
# shellcheck disable=SC1091
source "$WORK/keys.txt.tenant"
call() {
  local code
  code=$(curl -s -o "$WORK/answer.json" -w '%{http_code}' -X "$1" "http://$API/api/v1/$2" \
    -H "authorization: Bearer $ADMIN" -H 'content-type: application/json' ${3:+-d "$3"})
  [ "$code" = "$4" ] || { echo "$1 /$2 answered $code: $(cat "$WORK/answer.json")" >&2; exit 1; }
}
field() { sed -E "s/.*\"$1\":\"?([^,\"]*).*/\1/" "$WORK/answer.json"; }
# A series of the proxy's /metrics (or those of the proxy at $2).
metric() { curl -s "http://${2:-$PROXY}/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
POLICY_IDS=()
policy() { call POST policies "$1" 201; POLICY_IDS+=("$(field id)"); }
policy '{"name":"allowlist","policy_type":"model_allowlist","config":{"allowed_models":["gpt-4o*","claude-*"]}}'
policy '{"name":"no nvidia","policy_type":"block_provider","config":{"providers":["nvidia"]}}'
policy '{"name":"approve o1-pro","policy_type":"require_approval","config":{"models":["o1-pro"]}}'
policy '{"name":"approve in production","policy_type":"require_approval","scope":"environment:production","config":{"providers":["anthropic"]}}'
policy '{"name":"tenant budget","policy_type":"budget_limit","config":{"monthly_limit_usd":999999}}'
policy "{\"name\":\"agent budget\",\"policy_type\":\"budget_limit\",\"scope\":\"agent:$AGENT\",\"config\":{\"monthly_limit_usd\":900000}}"
policy '{"name":"per-key rate","policy_type":"rate_limit","config":{"requests_per_minute":1000000,"per":"key"}}'
policy "{\"name\":\"agent rate\",\"policy_type\":\"rate_limit\",\"scope\":\"agent:$AGENT\",\"config\":{\"requests_per_minute\":1000000,\"tokens_per_minute\":1000000000,\"per\":\"agent\"}}"
policy '{"name":"review anthropic","policy_type":"require_human_review","config":{"providers":["anthropic"]}}'
policy '{"name":"staging allowlist","policy_type":"model_allowlist","scope":"environment:staging","config":{"allowed_models":["gpt-4o-mini"]}}'
LIMIT_ID=""
governed() { # on|off; the proxies have the change within a second
  local enabled=false
  if [ "$1" = on ]; then
    enabled=true
    call POST budget/limits "{\"agent_id\":\"$AGENT\",\"monthly_limit_usd\":999999}" 201
    LIMIT_ID=$(field id)
  elif [ -n "$LIMIT_ID" ]; then
    call DELETE "budget/limits/$LIMIT_ID" "" 204; LIMIT_ID=""
  fi
  for id in "${POLICY_IDS[@]}"; do call PATCH "policies/$id" "{\"enabled\":$enabled}" 200; done
  sleep 2
}
# alternate <what> <toggle> [<path with>] [<target>]: ROUNDS rounds of Warden without and with
# <what> (turned on and off by `<toggle> on|off`; with, requests go to <path with>,
# chat completions by default), plain and streamed; prints each round's pair and the
# ratio of the medians, the median of the pairs' ratios and the medians' p50 (against
# <target>, 0.90 by default; "-" for none). The
# rounds take their two runs in turns (without first, then with first, ...): this
# machine's speed drifts steadily for minutes, and a pair always run in one order put
# that drift on one side (one request at a time, five rounds in a row each slower than
# the last made every "with" run the slower of its pair).
alternate() {
  local what=$1 toggle=$2 path_with=${3:-/v1/chat/completions} target=${4:-0.90} path current=""
  printf '\nwith and without %s, %s alternating rounds:\n' "$what" "$ROUNDS"
  printf '%-28s %12s %10s %10s %9s %12s %12s\n' "target" "requests/s" "p50 ms" "p99 ms" "non-200" "proxy us/req" "cp us/req"
  for stream in 0 1; do
    label=$([ "$stream" = 1 ] && echo "streaming" || echo "plain")
    without=(); with=(); without_p50=(); with_p50=(); ratios=()
    for round in $(seq 1 "$ROUNDS"); do
      local order="off on"
      if [ $((round % 2)) = 0 ]; then order="on off"; fi
      for mode in $order; do
        # A toggle is called only for a change: turned on twice, some would not be
        # undone by one "off" (a budget limit made twice).
        if [ "$mode" != "$current" ]; then "$toggle" "$mode"; current=$mode; fi
        path=$([ "$mode" = on ] && echo "$path_with" || echo /v1/chat/completions)
        before=$(cpu_ticks "$TARGET_PID"); cp_before=$(cpu_ticks "$CP_PID")
        read -r g_rps g_p50 g_p99 g_total g_bad < <(run warden "http://$TARGET$path" "$stream" "$WORK/keys.txt")
        after=$(cpu_ticks "$TARGET_PID"); cp_after=$(cpu_ticks "$CP_PID")
        name=$([ "$mode" = on ] && echo "with" || echo "without")
        awk -v n="$name ($label) $round" -v r="$g_rps" -v p50="$g_p50" -v p99="$g_p99" -v b="$g_bad" -v t="$g_total" \
            -v c="$((after - before))" -v cp="$((cp_after - cp_before))" -v hz="$(getconf CLK_TCK)" 'BEGIN {
          printf "%-28s %12s %10s %10s %9s %12.1f %12.1f\n", n, r, p50, p99, b, (c / hz) / t * 1e6, (cp / hz) / t * 1e6 }'
        if [ "$mode" = on ]; then
          with+=("$g_rps"); with_p50+=("$g_p50")
        else
          without+=("$g_rps"); without_p50+=("$g_p50")
        fi
      done
      ratios+=("$(awk -v a="${with[-1]}" -v b="${without[-1]}" 'BEGIN { printf "%.4f", a / b }')")
    done
    w_med=$(echo "${without[*]}" | median); p_med=$(echo "${with[*]}" | median)
    w_p50=$(echo "${without_p50[*]}" | median); p_p50=$(echo "${with_p50[*]}" | median)
    # A round's pair ran a few seconds apart: the median of the pairs' ratios is the
    # least moved by this shared machine's drift, which the medians of each side keep.
    r_med=$(echo "${ratios[*]}" | median)
    # How far that median may be from the machine's true ratio: from 6 rounds on, the
    # rounds' ratios bound it with 95 % confidence, whatever their spread's shape.
    read -r r_low r_high < <(echo "${ratios[*]}" | median_interval)
    awk -v p="$p_med" -v w="$w_med" -v r="$r_med" -v lo="$r_low" -v hi="$r_high" -v pl="$p_p50" -v wl="$w_p50" -v label="$label" -v what="$what" -v target="$target" 'BEGIN {
      goal = target == "-" ? "" : "; target at least " target
      interval = lo == "-" ? "" : sprintf(", 95 %% interval %.3f to %.3f", lo, hi)
      printf "  with/without %s: throughput %.2f, median of the rounds %.3f%s (medians %.0f / %.0f requests/s%s); p50 %.3f / %.3f ms (%s)\n", what, p / w, r, interval, p, w, goal, pl, wl, label }'
  done
}
if wanted governed; then
  alternate "10 policies and a budget limit" governed
  # The rate limits' allowances (per key: 10,000 buckets a minute), asked in batches.
  printf '  rate limit allowances asked: %s in %s batches, %s unanswered\n' \
    "$(metric warden_proxy_rate_grant_asks_total)" "$(metric warden_proxy_rate_grant_batches_total)" \
    "$(metric warden_proxy_rate_grant_failures_total)"
  # The budgets' allowances: asked by a request short of one, shared by a scope's
  # requests at once; renewed every second.
  printf '  budget allowances asked: %s, %s unanswered\n' \
    "$(metric warden_proxy_budget_grant_asks_total)" "$(metric warden_proxy_budget_grant_failures_total)"
fi
governed off

# A minute's turn under the same policies: the per-key rate limit's 10,000 buckets, used
# in the minute, ask ahead for the next, so its first requests wait for no allowance. The
# policies on, 10 s of load from the 30th second of a minute (every bucket's first ask of
# the minute: a cold start), then 30 s across the turn. (Not longer: the agent's limit of
# 1,000,000 a minute, the most a policy takes, would be reached.)
if wanted minute; then
  governed on
  sleep $(( (90 - $(date +%s) % 60) % 60 ))
  minute_run() { # label duration
    local rps p50 p99 bad
    read -r rps p50 p99 _ bad < <(DURATION=$2 run warden "http://$PROXY/v1/chat/completions" 0 "$WORK/keys.txt")
    printf '%-28s %12s %10s %10s %9s\n' "$1" "$rps" "$p50" "$p99" "$bad"
  }
  printf '\nwith the 10 policies and the budget limit, plain, from the 30th second of a minute:\n'
  printf '%-28s %12s %10s %10s %9s\n' "target" "requests/s" "p50 ms" "p99 ms" "non-200"
  minute_run "first 10 s (cold)" 10
  minute_run "30 s across the turn" 30
  governed off
fi

# A guardrail policy (every detector, blocking; the load carries nothing it finds, so it
# scans every request's body and lets it through) against none, in the same rounds.
GUARDRAIL_ID=""
guarded() { # on|off; in force on the proxy when the call answers
  if [ "$1" = on ]; then
    call POST policies '{"name":"secrets and personal data","policy_type":"guardrail","config":{"action":"block"}}' 201
    GUARDRAIL_ID=$(field id)
  elif [ -n "$GUARDRAIL_ID" ]; then
    call DELETE "policies/$GUARDRAIL_ID" "" 204; GUARDRAIL_ID=""
  fi
}
if wanted guarded; then
  alternate "a guardrail policy (every detector, block)" guarded
  guarded off
fi

# beside on|off ADDRESS PID: the rounds load the proxy at ADDRESS (process PID) when on,
# the first proxy when off.
beside() {
  if [ "$1" = on ]; then TARGET=$2 TARGET_PID=$3; else TARGET=$PROXY TARGET_PID=$PROXY_PID; fi
}

# The rounds' own noise: the proxy against an identical twin beside it, in the same
# rounds as the traced proxy's below. A ratio that differs from 1 here by some hundredths
# is how far this machine's drift moves one run's ratios.
twin() { beside "$1" "$PROXY_TWIN" "$TWIN_PID"; }
if wanted twin; then
  start_proxy "$PROXY_TWIN"; TWIN_PID=$STARTED_PID
  alternate "an identical twin of the proxy (the rounds' noise)" twin /v1/chat/completions -
  THREADS=1 CONCURRENCY=1 alternate "an identical twin, one request at a time" twin /v1/chat/completions -
  twin off
  kill "$TWIN_PID"; wait "$TWIN_PID" 2>/dev/null || true
fi

# Traces of every request (sampling 1.0: a span each, exported over OTLP/HTTP in batches,
# with Warden's default batch settings, to a receiver that takes them, nginx answering
# 200) against no tracing: a second proxy with OTEL_EXPORTER_OTLP_ENDPOINT runs beside
# the first, and the rounds load one or the other. Neither is restarted between rounds,
# so that short rounds measure proxies equally warm.
traced() { beside "$1" "$PROXY_TRACED" "$TRACED_PID"; }
if wanted traced; then
  # TRACES_TO: another endpoint (a closed port: spans made and encoded, posts refused).
  start_proxy "$PROXY_TRACED" OTEL_EXPORTER_OTLP_ENDPOINT="${TRACES_TO:-http://$OTLP}"
  TRACED_PID=$STARTED_PID
  # "A few percent": at most 5 %. First the capacity (the load saturates both cores, so
  # the ratio is what a traced request costs in CPU), then a request's own time: one
  # request at a time, where the ratio is of the time each takes, queueing left out.
  alternate "traces of every request (OTLP, sampling 1.0)" traced /v1/chat/completions 0.95
  THREADS=1 CONCURRENCY=1 alternate "traces of every request, one request at a time" traced /v1/chat/completions 0.95
  traced off
  sleep 2 # its last usage and spans flushed
  traced_dropped=$(metric warden_proxy_usage_dropped_total "$PROXY_TRACED")
  traced_buffered=$(metric warden_proxy_usage_buffer_depth "$PROXY_TRACED")
  printf 'traced proxy: usage records dropped %s, still buffered %s; spans lost: %s\n' "$traced_dropped" "$traced_buffered" \
    "$(curl -s "http://$PROXY_TRACED/metrics" | awk '/^warden_proxy_trace_spans_lost_total/ {printf "%s ", $0}')"
  kill "$TRACED_PID"; wait "$TRACED_PID" 2>/dev/null || true
  if [ "$traced_dropped" != 0 ] || [ "$traced_buffered" != 0 ]; then
    echo "the control plane did not keep up with the traced proxy's usage" >&2
    exit 1
  fi
  # Tracing off: the exporter configured and no trace sampled (each request gets ids,
  # asks the sampler and passes an unsampled traceparent on, but makes no span), against
  # tracing not configured. "Not measurably" slower: as near 1 as the twin's ratio.
  start_proxy "$PROXY_UNSAMPLED" OTEL_EXPORTER_OTLP_ENDPOINT="${TRACES_TO:-http://$OTLP}" OTEL_TRACES_SAMPLER=always_off
  UNSAMPLED_PID=$STARTED_PID
  unsampled() { beside "$1" "$PROXY_UNSAMPLED" "$UNSAMPLED_PID"; }
  alternate "traces configured, none sampled (OTEL_TRACES_SAMPLER=always_off)" unsampled /v1/chat/completions -
  unsampled off
  kill "$UNSAMPLED_PID"; wait "$UNSAMPLED_PID" 2>/dev/null || true
fi

# Payload capture of every request (the tenant's 5 redaction rules applied by the proxy,
# the captures stored by the ledger) against none, in the same alternating rounds.
RULES='[{"id":"email","field_path":"messages.content","pattern":"[\\w.+-]+@[\\w-]+\\.[\\w.]+"},
{"id":"card","field_path":"messages.content","pattern":"\\b(?:\\d[ -]?){13,16}\\b"},
{"id":"phone","field_path":"messages.content","pattern":"\\+?\\d[\\d ()-]{7,}\\d"},
{"id":"user","field_path":"user"},{"id":"metadata","field_path":"metadata"}]'
captured() { # on|off; in force on the proxy when the call answers
  local enabled=false
  [ "$1" = on ] && enabled=true
  call PUT payload-capture/config "{\"enabled\":$enabled,\"retention_days\":30,\"processing_purpose\":\"load test of payload capture\",\"redaction_rules\":$RULES}" 200
}
if wanted captured; then
  alternate "payload capture (5 redaction rules)" captured
  captured off
fi

# The Responses API (the same small request as a response, plain and streamed) against
# chat completions, on the same Warden.
unchanged() { :; }
if wanted responses; then
  alternate "the Responses API instead of chat completions" unchanged /v1/responses
fi
if wanted messages; then
  alternate "Anthropic's Messages API instead of chat completions" unchanged /v1/messages
fi
sleep 2 # the last batches' flush
echo "decision reports dropped by the proxy: $(metric warden_proxy_policy_decisions_dropped_total)"
dropped=$(metric warden_proxy_usage_dropped_total); buffered=$(metric warden_proxy_usage_buffer_depth)
echo "payload captures by outcome: $(curl -s "http://$PROXY/metrics" | awk '/^warden_proxy_payload_captures_total/ {printf "%s ", $0}')"
echo "usage records dropped by the proxy: $dropped; still buffered: $buffered; flushed: $(metric warden_proxy_usage_flushed_total)"
if [ "$dropped" != 0 ] || [ "$buffered" != 0 ]; then
  echo "the control plane did not keep up with the proxy's usage" >&2
  exit 1
fi
