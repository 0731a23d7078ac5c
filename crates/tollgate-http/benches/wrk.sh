#!/usr/bin/env bash
# End-to-end overhead of tollgate-http, measured with wrk (docs/PERFORMANCE.md):
# 64 keep-alive connections, 10,000 distinct client keys, the same axum route
# bare, behind tollgate-http (1 and 3 rules, memory; 1 rule, Redis) and behind
# tower_governor; each mostly admitting and mostly refusing. Prints the median
# of RUNS runs by throughput, with that run's p99 latency and non-2xx count.
#
#   cargo build --release -p tollgate-http --example bench_server
#   bash crates/tollgate-http/benches/wrk.sh            # from the repository root
#   bash crates/tollgate-http/benches/wrk.sh one:refuse # or only some MODE:HOW
set -euo pipefail
BIN=${BIN:-target/release/examples/bench_server}
LUA=crates/tollgate-http/benches/wrk-keys.lua
DUR=${DUR:-10s}
RUNS=${RUNS:-3}
PORT=${PORT:-18080}
LOG=$(mktemp)

one() {
  local mode=$1 how=$2
  PORT=$((PORT + 1)) # a fresh port for every server
  local URL=http://127.0.0.1:$PORT/v1/items
  "$BIN" "$mode" "$how" "$PORT" >"$LOG" 2>&1 &
  local pid=$!
  until grep -q ready "$LOG"; do
    kill -0 "$pid" 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.1
  done
  # Warm up: every key's first request (after which `refuse` refuses).
  wrk -t2 -c64 -d2s -s "$LUA" "$URL" >/dev/null
  for _ in $(seq "$RUNS"); do
    wrk -t2 -c64 -d"$DUR" --latency -s "$LUA" "$URL" |
      awk '/Requests\/sec/ {rps=$2} /^ +99%/ {p99=$2} /Non-2xx/ {bad=$5} END {printf "%s %s %s\n", rps, p99, bad+0}'
  done | sort -n | sed -n "$(((RUNS + 1) / 2))p" | {
    read -r rps p99 bad
    printf '%-9s %-7s %12s req/s   p99 %-8s non-2xx %s\n' "$mode" "$how" "$rps" "$p99" "$bad"
  }
  local children
  children=$(pgrep -P "$pid" || true) # the redis-server a `redis` run started
  kill "$pid" $children 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

if [ $# -gt 0 ]; then # e.g. `three:admit governor:refuse`
  for run in "$@"; do one "${run%:*}" "${run#*:}"; done
else
  for how in admit refuse; do
    for mode in bare one three governor; do
      one "$mode" "$how"
    done
  done
  one redis admit
fi
rm -f "$LOG"
