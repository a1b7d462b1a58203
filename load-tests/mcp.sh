#!/usr/bin/env bash
# The MCP gateway's load test, one command: a fast MCP server (rmcp, one `echo` tool),
# then the same load, CONCURRENCY agents each calling the tool in a loop as an MCP
# session of the official Rust SDK's client, sent directly to the server and through
# Warden's /mcp (`warden dev`, release build), in alternating rounds. Prints each run's
# calls per second, p50 and p99, the latency Warden adds at p50 and p99, Warden's CPU
# time per call (both planes: the gateway's decision and forwarding, and the control
# plane storing the call's record and decision) and, as the baseline of the same run,
# the MCP server's own CPU time per call when called directly.
#
#   load-tests/mcp.sh                          # concurrency 16, 10 s per run, 3 rounds
#   CONCURRENCY=32 DURATION=20 ROUNDS=5 load-tests/mcp.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CONCURRENCY=${CONCURRENCY:-16}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
SERVER=127.0.0.1:19300
API=127.0.0.1:19380
PROXY=127.0.0.1:19381

# shellcheck source=load-tests/lib.sh
source load-tests/lib.sh

"$BIN/mcp-server" "$SERVER" >/dev/null 2>&1 & UPSTREAM=$!; PIDS+=($UPSTREAM)
wait_http "http://$SERVER/mcp"

WARDEN_OUTBOUND__ALLOW_PRIVATE='["127.0.0.1/32"]' RUST_LOG=warn \
  "$BIN/warden" dev --data-dir "$WORK/data" --port "${API##*:}" --proxy-port "${PROXY##*:}" \
  >"$WORK/warden.log" 2>&1 & WARDEN=$!; PIDS+=($WARDEN)
wait_http "http://$API/healthz"
for _ in $(seq 1 100); do grep -q 'wdn_' "$WORK/warden.log" && break; sleep 0.1; done
PLATFORM=$(grep -o 'wdn_[A-Za-z0-9]*' "$WORK/warden.log" | head -n 1)

json() { curl -sf -X POST "http://$API/api/v1$1" -H "authorization: Bearer $2" -H 'content-type: application/json' -d "$3"; }
ADMIN=$(json /admin/tenants "$PLATFORM" '{"company_name":"Load","owner_email":"load@example.com","plan":"starter"}' | jq -r .data.api_key)
KEY=$(json /proxy-keys "$ADMIN" '{"developer_label":"load-agent"}' | jq -r .data.raw_key)
MCP_ID=$(json /mcp-servers "$ADMIN" "{\"name\":\"load\",\"url\":\"http://$SERVER/mcp\"}" | jq -r .data.id)
json "/mcp-servers/$MCP_ID/approve" "$ADMIN" '{}' >/dev/null
# A tenant with policies, as a governed one has: the calls are evaluated against them.
json /policies "$ADMIN" '{"name":"load tools","policy_type":"tool_allowlist","config":{"allowed_tools":["load__*"]}}' >/dev/null
json /policies "$ADMIN" '{"name":"no deletes","policy_type":"block_tool","config":{"tools":["load__delete*"]}}' >/dev/null

printf '%-8s %-7s %9s %9s %9s %8s\n' round target calls/s p50_us p99_us cpu_us
# cpu_us: the MCP server's CPU per call for `direct`, Warden's for `warden`.
DIRECT_P50=(); DIRECT_P99=(); WARDEN_P50=(); WARDEN_P99=(); CPU=(); SERVER_CPU=()
for round in $(seq 1 "$ROUNDS"); do
  before=$(cpu_ticks "$UPSTREAM")
  direct=$("$BIN/mcp-load" "http://$SERVER/mcp" echo "$DURATION" "$CONCURRENCY")
  after=$(cpu_ticks "$UPSTREAM")
  calls=$(jq .calls <<<"$direct")
  server_us=$(( (after - before) * 1000000 / TICK / (calls > 0 ? calls : 1) ))
  before=$(cpu_ticks "$WARDEN")
  warden=$("$BIN/mcp-load" "http://$PROXY/mcp" load__echo "$DURATION" "$CONCURRENCY" "$KEY")
  sleep 2 # the last records reach the ledger: their storing counts too
  after=$(cpu_ticks "$WARDEN")
  calls=$(jq .calls <<<"$warden")
  cpu_us=$(( (after - before) * 1000000 / TICK / (calls > 0 ? calls : 1) ))
  for run in direct warden; do
    line=${!run}
    if [ "$(jq .errors <<<"$line")" != 0 ]; then echo "$run: calls failed: $line" >&2; exit 1; fi
    printf '%-8s %-7s %9.0f %9s %9s %8s\n' "$round" "$run" "$(jq .calls_per_second <<<"$line")" \
      "$(jq .p50_us <<<"$line")" "$(jq .p99_us <<<"$line")" "$([ "$run" = warden ] && echo "$cpu_us" || echo "$server_us")"
  done
  DIRECT_P50+=("$(jq .p50_us <<<"$direct")"); DIRECT_P99+=("$(jq .p99_us <<<"$direct")")
  WARDEN_P50+=("$(jq .p50_us <<<"$warden")"); WARDEN_P99+=("$(jq .p99_us <<<"$warden")")
  CPU+=("$cpu_us"); SERVER_CPU+=("$server_us")
done

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
RECORDED=$(curl -s "http://$API/api/v1/tool-calls?limit=1" -H "authorization: Bearer $ADMIN" | jq .meta.total)
echo
echo "medians of $ROUNDS rounds, $CONCURRENCY agents, ${DURATION} s per run:"
echo "  direct p50 $(median "${DIRECT_P50[@]}") us, p99 $(median "${DIRECT_P99[@]}") us"
echo "  warden p50 $(median "${WARDEN_P50[@]}") us, p99 $(median "${WARDEN_P99[@]}") us"
echo "  added by Warden: p50 $(( $(median "${WARDEN_P50[@]}") - $(median "${DIRECT_P50[@]}") )) us, p99 $(( $(median "${WARDEN_P99[@]}") - $(median "${DIRECT_P99[@]}") )) us"
echo "  Warden CPU per call (both planes): $(median "${CPU[@]}") us; the MCP server's own, direct: $(median "${SERVER_CPU[@]}") us"
echo "  tool calls recorded: $RECORDED"
