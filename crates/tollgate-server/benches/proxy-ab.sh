#!/usr/bin/env bash
# Two or more `tollgate` binaries as reverse proxies in front of the same
# upstream, taking turns under wrk (2 threads, 64 keep-alive connections),
# ROUNDS times, with the upstream called directly at the end of each round:
# for comparing builds on a shared machine (docs/PERFORMANCE.md). Prints,
# per run, requests/s and the CPU time per request of the proxy process and
# of the upstream (user + system, from /proc).
#
#   bash crates/tollgate-server/benches/proxy-ab.sh OLD_BINARY NEW_BINARY ...
#
# Each binary's flags can follow it after a colon ("bin:--workers 1").
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: proxy-ab.sh BINARY[:FLAGS] ..."; exit 2; }
DUR=${DUR:-5s}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-19000}
LOAD=$(cargo bench -p tollgate-server --bench load --no-run 2>&1 |
  sed -n 's/.*Executable.*(\(.*\)).*/\1/p' | tail -1)
[ -x "$LOAD" ] || { echo "the load bench did not build"; exit 1; }
OUT=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$OUT"' EXIT
cat >"$OUT/proxy.yaml" <<'YAML'
domain: bench
descriptors: []
http:
  rules:
    - name: per-ip
      limit: { algorithm: gcra, unit: second, requests_per_unit: 100000000 }
YAML
"$LOAD" upstream "$PORT" >/dev/null 2>&1 & UP=$!; PIDS+=("$UP")
NAMES=() PROXIES=()
n=0
for spec in "$@"; do
  n=$((n + 1))
  bin=${spec%%:*} flags=""
  [ "$bin" != "$spec" ] && flags=${spec#*:}
  # shellcheck disable=SC2086 # the flags are words
  "$bin" serve --config "$OUT/proxy.yaml" --no-grpc --no-watch --log warn \
    --http-listen "127.0.0.1:$((PORT + 100 + n))" --upstream "http://127.0.0.1:$PORT" \
    --proxy-listen "127.0.0.1:$((PORT + n))" $flags >/dev/null 2>&1 &
  PIDS+=($!); PROXIES+=($!); NAMES+=("$spec")
done
sleep 1
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
run() { # name url proxy-pid (0: none)
  local p0 u0 out total
  p0=$([ "$3" = 0 ] && echo 0 || cpu "$3"); u0=$(cpu "$UP")
  out=$(wrk -t2 -c64 -d"$DUR" "$2")
  total=$(awk '/requests in/ { print $1 }' <<<"$out")
  awk -v n="$1" -v r="$round" -v total="$total" -v tick="$TICK_US" \
    -v p="$(( $([ "$3" = 0 ] && echo 0 || cpu "$3") - p0 ))" -v u="$(( $(cpu "$UP") - u0 ))" \
    '/Requests\/sec/ { printf "round %s  %-40s %9.0f req/s  proxy %5.1f µs/req  upstream %5.1f µs/req\n", r, n, $2, p * tick / total, u * tick / total }' <<<"$out"
}
for round in $(seq "$ROUNDS"); do
  for i in "${!NAMES[@]}"; do
    run "${NAMES[$i]}" "http://127.0.0.1:$((PORT + i + 1))/" "${PROXIES[$i]}"
  done
  run direct "http://127.0.0.1:$PORT/" 0
done
