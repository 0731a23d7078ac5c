#!/usr/bin/env bash
# End-to-end overhead of tollgate-http, measured with wrk (docs/PERFORMANCE.md):
# 64 keep-alive connections, 10,000 distinct client keys, the same axum route
# bare, behind tollgate-http (1 and 3 rules, memory; 1 rule, Redis) and behind
# tower_governor; each mostly admitting and mostly refusing.
#
# Every server runs at once (an idle one costs nothing) and the configurations
# take turns, ROUNDS times, so that a change in the machine's load hits them
# alike; each layered figure is compared with the bare run of its own round.
# Prints a Markdown table: medians over the rounds of the throughput, of its
# ratio to bare, of the p99 latency and of the p99 added to bare's, and of
# the server's CPU time per request (user + system, from /proc), which other
# processes on a shared machine do not inflate: bare's CPU per request over a
# configuration's is the share of bare's capacity it keeps.
#
#   cargo build --release -p tollgate-http --example bench_server
#   bash crates/tollgate-http/benches/wrk.sh            # from the repository root
#
# CPU=user counts the servers' user time alone in the CPU columns.
# RUNS=FILE keeps every round's figures (round, config, req/s, p99 µs, share
# refused, CPU per request, its user and system parts).
# TWINS="A/B ..." (configurations, e.g. three:admit/three-unsummed:admit)
# adds a table of A's CPU per request over B's, taken round by round and
# then the median: a difference smaller than the spread between rounds.
#
# COUNT=callgrind counts instead of timing, for builds compared on a busy
# machine: every server runs under callgrind, counting only while wrk runs
# (benches/counting.sh), and the CPU columns become the instructions the
# server executed per request, whatever the load (wrk then keeps 1 thread
# and 4 connections; req/s and latencies are valgrind's). Only user space is
# counted, not the kernel's socket work, so *CPU added* is the figure to
# read; *capacity vs bare* overstates the layer's share. The warm-up then
# takes WARMUP (20s) per server, for every key to be sent once.
set -euo pipefail
BIN=${BIN:-target/release/examples/bench_server}
LUA=crates/tollgate-http/benches/wrk-keys.lua
DUR=${DUR:-5s}
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-18100}
CONFIGS=${CONFIGS:-"bare:admit one:admit one-unsummed:admit three:admit three-unsummed:admit governor:admit redis:admit bare:refuse one:refuse three:refuse governor:refuse"}
COUNT=${COUNT:-cpu}
OUT=$(mktemp -d)
WRAP=()
LOAD=(-t2 -c64)
if [ "$COUNT" = callgrind ]; then
  # shellcheck source=../../../benches/counting.sh
  . "$(dirname "$0")/../../../benches/counting.sh"
  WRAP=("${COUNTING[@]}")
  # Valgrind serves a few thousand requests a second, on one thread.
  LOAD=(-t1 -c4)
fi
WARMUP=${WARMUP:-$([ "$COUNT" = callgrind ] && echo 20s || echo 2s)}
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$OUT"' EXIT

port_of() { echo $((PORT + $1)); }
url_of() { echo "http://127.0.0.1:$(port_of "$1")/v1/items"; }

# Start every server, then send every key once (after which `refuse` refuses).
i=0
for c in $CONFIGS; do
  i=$((i + 1))
  "${WRAP[@]}" "$BIN" "${c%:*}" "${c#*:}" "$(port_of $i)" >"$OUT/$i.log" 2>&1 &
  PIDS+=($!)
  SERVER[i]=$!
  until grep -qs ready "$OUT/$i.log"; do
    kill -0 "${PIDS[-1]}" 2>/dev/null || { cat "$OUT/$i.log"; exit 1; }
    sleep 0.1
  done
  # The redis-server a `redis` server started, to stop it at the end.
  PIDS+=($(pgrep -P "${PIDS[-1]}" || true))
  wrk "${LOAD[@]}" -d"$WARMUP" -s "$LUA" "$(url_of $i)" >/dev/null
done

# CPU time a process has used, in clock ticks: user + system, or with
# CPU=user user time alone (the kernel's socket work per request is the same
# for every server and, on some machines, most of the time and of its noise).
# The kernel measures the sum exactly and splits it between user and system
# by sampling, so the user figure alone is the noisier.
ticks_of() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# One line per round and configuration: round, config, req/s, p99 in µs,
# share of answers that were not 2xx, server CPU µs (or instructions) per
# request, then (timing only) its user and system parts.
load() { wrk "${LOAD[@]}" -d"$DUR" --latency -s "$LUA" "$1" >"$OUT/wrk"; }
for round in $(seq "$ROUNDS"); do
  i=0
  for c in $CONFIGS; do
    i=$((i + 1))
    if [ "$COUNT" = callgrind ]; then
      used=$(counted "${SERVER[i]}" load "$(url_of $i)")
      user=0 system=0
    else
      read -r user0 system0 < <(ticks_of "${SERVER[i]}")
      load "$(url_of $i)"
      read -r user1 system1 < <(ticks_of "${SERVER[i]}")
      user=$(((user1 - user0) * TICK_US)) system=$(((system1 - system0) * TICK_US))
      used=$([ "${CPU:-all}" = user ] && echo "$user" || echo $((user + system)))
    fi
    awk -v r="$round" -v c="$c" -v cpu="$used" -v user="$user" -v sys="$system" '
      function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1000000; return v }
      /requests in/ { total = $1 } /Requests\/sec/ { rps = $2 } /^ +99%/ { p99 = us($2) } /Non-2xx/ { bad = $5 }
      END { printf "%s %s %.0f %.0f %.3f %.2f %.2f %.2f\n", r, c, rps, p99, bad / total, cpu / total, user / total, sys / total }' "$OUT/wrk" >>"$OUT/runs"
  done
done

[ -n "${RUNS:-}" ] && cp "$OUT/runs" "$RUNS"
UNIT=$([ "$COUNT" = callgrind ] && echo instr || echo us)
echo "| server | mode | req/s | vs bare | p99 | p99 added | refused | CPU/request | CPU added | capacity vs bare |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for c in $CONFIGS; do
  awk -v c="$c" -v unit="$UNIT" '
    { rps[$1, $2] = $3; p99[$1, $2] = $4; bad[$1, $2] = $5; cpu[$1, $2] = $6; if ($1 > n) n = $1 }
    function median(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((k + 1) / 2)] }
    END {
      split(c, parts, ":"); bare = "bare:" parts[2]
      for (r = 1; r <= n; r++) { x[r] = rps[r, c]; ratio[r] = rps[r, c] / rps[r, bare]; p[r] = p99[r, c]; add[r] = p99[r, c] - p99[r, bare]; b[r] = bad[r, c]; u[r] = cpu[r, c]; more[r] = cpu[r, c] - cpu[r, bare]; keep[r] = cpu[r, bare] / cpu[r, c] }
      f = unit == "us" ? "%.1f" : "%.0f"
      printf "| %s | %s | %.0f | %.2fx | %.0f us | %+.0f us | %.1f%% | " f " %s | %+" substr(f, 2) " %s | %.2fx |\n", parts[1], parts[2], median(x, n), median(ratio, n), median(p, n), median(add, n), 100 * median(b, n), median(u, n), unit, median(more, n), unit, median(keep, n)
    }' "$OUT/runs"
done

[ -z "${TWINS:-}" ] && exit 0
echo
echo "| configuration | against | rounds | CPU per request (median of per-round ratios) | user | system |"
echo "|---|---|---:|---:|---:|---:|"
for twin in $TWINS; do
  awk -v a="${twin%/*}" -v b="${twin#*/}" '
    { cpu[$1, $2] = $6; user[$1, $2] = $7; sys[$1, $2] = $8; if ($1 > n) n = $1 }
    function median(x, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t } return x[int((k + 1) / 2)] }
    function pct(v) { return sprintf("%+.1f%%", 100 * (v - 1)) }
    END {
      for (r = 1; r <= n; r++) { c[r] = cpu[r, a] / cpu[r, b]; u[r] = user[r, a] / user[r, b]; s[r] = sys[r, a] / sys[r, b] }
      printf "| %s | %s | %d | %s | %s | %s |\n", a, b, n, pct(median(c, n)), pct(median(u, n)), pct(median(s, n))
    }' "$OUT/runs"
done
