#!/usr/bin/env bash
# The reverse proxy next to nginx, and `tollgate` builds next to each other
# (docs/PERFORMANCE.md, "Server"), on the three shapes of a rate-limiting
# proxy:
#
# - none:     no HTTP rule (forwarding alone; nginx with no `limit_req`);
# - open:     one rule per client address that never refuses (GCRA at 10^8
#             a second; nginx `limit_req` per `$binary_remote_addr` at
#             10^6r/s, burst 10^6 nodelay);
# - refusing: the same rule at 100 a second, so that nearly every request
#             is answered 429 by the proxy itself (nginx: `limit_req` at
#             100r/s, no burst, `limit_req_status 429`).
#
# Every (shape, target) is a process of its own in front of the same tiny
# upstream (`load upstream`, answering `hello`); nginx has 2 workers (the
# machine's cores, as tollgate's default `--workers`) and `keepalive 64` to
# the upstream, and appends the client to `X-Forwarded-For` and `Forwarded`
# as tollgate's proxy does (the same fields on the wire: the same work). wrk (-t2 -c64, keep-alive, GET /) takes turns on every one,
# after the upstream called directly, ROUNDS times, so that the shared
# machine's load hits them alike. Per run, and as medians over the rounds:
# requests/s, that over the direct run of the same round, the proxy's own
# CPU time per request (user + system from /proc: the tollgate process,
# nginx's workers), that over nginx's in the same round, and the share of
# answers that were not 2xx.
#
#   bash crates/tollgate-server/benches/proxy-ab.sh [BINARY[:FLAGS] ...]
#
# With no binary, the workspace's release `tollgate` (built first). A
# binary's flags can follow it after a colon ("bin:--workers 1"). NGINX=
# (empty) leaves nginx out; SHAPES picks shapes ("none open refusing").
#
# FLOOR=N adds, on the shape without a rule, the floor under the proxy: the
# `load` bench's `floor` (benches/load/floor.rs), the least a proxy on hyper
# and Tokio does, on N workers laid out as `--workers N` (N=2 next to the
# default, 1 under callgrind next to "bin:--workers 1").
#
# LOAD=PATH takes that build of the `load` bench instead of building it.
#
# UPSTREAM=demo serves the upstream with the first binary's
# `--demo-upstream` (hyper answering `ok`, one thread) instead of the `load`
# bench, which then need not be built.
#
# COUNT=callgrind counts instead of timing, for builds compared on a busy
# machine: each tollgate process runs under valgrind's callgrind, counting
# only while wrk runs (`callgrind_control`), and the CPU column becomes the
# instructions it executed per request (whatever the load; wrk then keeps
# 4 connections, req/s are valgrind's, and nginx runs as one process,
# without its master, under callgrind too). KEEP=DIR
# keeps the profiles there (cg.PID.N, one per tollgate process and round)
# for `callgrind_annotate --inclusive=yes`.
set -euo pipefail
DUR=${DUR:-5s}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-19000}
SHAPES=${SHAPES:-none open refusing}
NGINX=${NGINX-/usr/sbin/nginx}
COUNT=${COUNT:-cpu}
if [ $# -eq 0 ]; then
  cargo build --release -p tollgate-cli --bin tollgate 2>&1 | tail -1
  set -- "${CARGO_TARGET_DIR:-target}/release/tollgate"
fi
if [ -z "${LOAD:-}" ] && { [ "${UPSTREAM:-load}" != demo ] || [ -n "${FLOOR:-}" ]; }; then
  LOAD=$(cargo bench -p tollgate-server --bench load --no-run 2>&1 |
    sed -n 's/.*Executable.*(\(.*\)).*/\1/p' | tail -1)
  [ -x "$LOAD" ] || { echo "the load bench did not build"; exit 1; }
fi
if [ "${UPSTREAM:-load}" = demo ]; then
  upstream_cmd() { exec "${1%%:*}" serve --no-grpc --no-watch --log error --http-listen "127.0.0.1:$((PORT + 999))" --demo-upstream "127.0.0.1:$PORT"; }
else
  upstream_cmd() { exec "$LOAD" upstream "$PORT"; }
fi
OUT=$(mktemp -d)
# nginx's workers run as an unprivileged user: let them reach their files.
chmod 755 "$OUT"
PIDS=()
stop_all() {
  [ -f "$OUT/nginx/nginx.pid" ] && kill -QUIT "$(cat "$OUT/nginx/nginx.pid")" 2>/dev/null || true
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$OUT"/cg.* "$KEEP"/ 2>/dev/null || true; fi
  rm -rf "$OUT"
}
trap stop_all EXIT
WRAP=()
NGINX_PROCESSES="worker_processes 2;"
if [ "$COUNT" = callgrind ]; then
  NGINX_PROCESSES="worker_processes 1; master_process off;"
  # shellcheck source=../../../benches/counting.sh
  . "$(dirname "$0")/../../../benches/counting.sh"
  WRAP=("${COUNTING[@]}")
fi
wait_port() {
  for _ in $(seq 1200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1"; exit 1
}

# The rule of each shape; `none` has no `http` section at all.
rule_of() {
  case $1 in
    none) ;;
    open) printf 'http:\n  rules:\n    - name: per-ip\n      limit: { algorithm: gcra, unit: second, requests_per_unit: 100000000 }\n' ;;
    refusing) printf 'http:\n  rules:\n    - name: per-ip\n      limit: { algorithm: gcra, unit: second, requests_per_unit: 100 }\n' ;;
    *) echo "unknown shape $1 (none, open, refusing)" >&2; exit 2 ;;
  esac
}
nginx_limit_of() {
  case $1 in
    none) ;;
    open) echo "limit_req zone=open burst=1000000 nodelay;" ;;
    refusing) echo "limit_req zone=strict; limit_req_status 429;" ;;
  esac
}

UP=$PORT
upstream_cmd "$1" >/dev/null 2>&1 & UP_PID=$!; PIDS+=("$UP_PID")
wait_port "$UP"

# TARGETS: "shape name port pids..." (the pids whose CPU is the proxy's).
TARGETS=()
next=$((PORT + 1))
n=0
for spec in "$@"; do
  n=$((n + 1))
  bin=${spec%%:*} flags=""
  [ "$bin" != "$spec" ] && flags=${spec#*:}
  for shape in $SHAPES; do
    { echo "domain: bench"; echo "descriptors: []"; rule_of "$shape"; } >"$OUT/$shape.yaml"
    # shellcheck disable=SC2086 # the flags are words
    "${WRAP[@]}" "$bin" serve --config "$OUT/$shape.yaml" --no-grpc --no-watch --log error \
      --http-listen "127.0.0.1:$((next + 1))" --upstream "http://127.0.0.1:$UP" \
      --proxy-listen "127.0.0.1:$next" $flags >/dev/null 2>&1 &
    PIDS+=($!)
    wait_port "$next"
    TARGETS+=("$shape tollgate#$n $next ${PIDS[-1]}")
    next=$((next + 2))
  done
done
if [ -n "${FLOOR:-}" ]; then
  "${WRAP[@]}" "$LOAD" floor "$next" "$UP" "$FLOOR" >/dev/null 2>&1 &
  PIDS+=($!)
  wait_port "$next"
  TARGETS+=("none floor $next ${PIDS[-1]}")
  next=$((next + 1))
fi
if [ -n "$NGINX" ]; then
  mkdir -p "$OUT/nginx"
  servers=""
  for shape in $SHAPES; do
    servers+="server { listen 127.0.0.1:$next; location / { $(nginx_limit_of "$shape")
      proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header Forwarded \"for=\$remote_addr;proto=\$scheme;host=\\\"\$http_host\\\"\"; } }
"
    NGINX_PORTS+=("$shape $next")
    next=$((next + 1))
  done
  cat >"$OUT/nginx.conf" <<EOF
$NGINX_PROCESSES
daemon off;
pid $OUT/nginx/nginx.pid;
error_log $OUT/nginx/error.log error;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $OUT/nginx/body;
  proxy_temp_path $OUT/nginx/proxy;
  fastcgi_temp_path $OUT/nginx/fastcgi;
  uwsgi_temp_path $OUT/nginx/uwsgi;
  scgi_temp_path $OUT/nginx/scgi;
  limit_req_zone \$binary_remote_addr zone=open:10m rate=1000000r/s;
  limit_req_zone \$binary_remote_addr zone=strict:10m rate=100r/s;
  limit_req_log_level info;
  upstream up { server 127.0.0.1:$UP; keepalive 64; }
  $servers
}
EOF
  "${WRAP[@]}" "$NGINX" -p "$OUT/nginx" -e "$OUT/nginx/error.log" -c "$OUT/nginx.conf" >/dev/null 2>&1 &
  NGINX_PID=$!; PIDS+=("$NGINX_PID")
  for sp in "${NGINX_PORTS[@]}"; do wait_port "${sp#* }"; done
  if [ "$COUNT" = callgrind ]; then
    workers=$NGINX_PID # no master: the process serves
  else
    sleep 0.5 # the workers are forked after the ports are open
    workers=$(pgrep -P "$NGINX_PID" | tr '\n' ' ')
  fi
  for sp in "${NGINX_PORTS[@]}"; do TARGETS+=("${sp% *} nginx ${sp#* } $workers"); done
  echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///')"
fi

cpu_of() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo "$t"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
run() { # round shape name port pids...
  local round=$1 shape=$2 name=$3 port=$4 before out used; shift 4
  if [ "$COUNT" = callgrind ] && [ "$name" != direct ]; then
    out=$OUT/wrk.$port
    # Four connections: valgrind serves a few hundred requests a second,
    # which would hardly pay for 64 connections' setup.
    used=$(counted "$1" sh -c "wrk -t1 -c4 -d$DUR http://127.0.0.1:$port/ >$out")
    out=$(cat "$out")
  else
    before=$(cpu_of "$@")
    out=$(wrk -t2 -c64 -d"$DUR" "http://127.0.0.1:$port/")
    used=$(( ($(cpu_of "$@") - before) * TICK_US ))
  fi
  awk -v r="$round" -v s="$shape" -v n="$name" -v cpu="$used" '
    /requests in/ { total = $1 } /Requests\/sec/ { rps = $2 } /Non-2xx/ { bad = $5 }
    END { total = total ? total : 1; printf "%s %s %s %.0f %.2f %.3f\n", r, s, n, rps, cpu / total, bad / total }' <<<"$out" | tee -a "$OUT/runs"
}
echo "uptime before: $(uptime)"
for t in "${TARGETS[@]}"; do read -r shape name port pids <<<"$t"; DUR=1s run 0 "$shape" "$name" "$port" $pids >/dev/null; done
: >"$OUT/runs"
echo "runs: round shape target req/s proxy-CPU-µs/request non-2xx-share"
for round in $(seq "$ROUNDS"); do
  run "$round" - direct "$UP" "$UP_PID"
  for t in "${TARGETS[@]}"; do
    read -r shape name port pids <<<"$t"
    # shellcheck disable=SC2086 # the pids are words
    run "$round" "$shape" "$name" "$port" $pids
  done
done
echo "uptime after:  $(uptime)"
echo
n=0
for spec in "$@"; do n=$((n + 1)); echo "tollgate#$n: $spec"; done
if [ -n "${FLOOR:-}" ]; then echo "floor: benches/load/floor.rs on $FLOOR workers"; fi
if [ "$COUNT" = callgrind ]; then
  UNIT=instructions; echo "wrk -t1 -c4 -d$DUR, $ROUNDS rounds, medians; CPU: instructions the proxy process executed (callgrind)"
else
  UNIT=µs; echo "wrk -t2 -c64 -d$DUR, $ROUNDS rounds, medians; CPU: the proxy process's own (nginx: its workers')"
fi
echo
echo "| shape | target | req/s | of direct | proxy CPU/request | CPU vs nginx | non-2xx |"
echo "|---|---|---:|---:|---:|---:|---:|"
for t in "${TARGETS[@]}"; do
  read -r shape name _ <<<"$t"
  awk -v s="$shape" -v c="$name" -v unit="$UNIT" '
    $2 == "-" { direct[$1] = $4 } $2 == s && $3 == "nginx" { ng[$1] = $5 }
    $2 == s && $3 == c { k++; rps[k] = $4; cpu[k] = $5; bad[k] = $6; round[k] = $1 }
    function median(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((k + 1) / 2)] }
    END {
      for (i = 1; i <= k; i++) { of[i] = rps[i] / direct[round[i]]; vs[i] = (round[i] in ng) ? cpu[i] / ng[round[i]] : 0 }
      printf "| %s | %s | %.0f | %.2f | %.1f %s | %s | %.1f%% |\n", s, c, median(rps, k), median(of, k), median(cpu, k), unit,
        (vs[1] ? sprintf("%.2fx", median(vs, k)) : "-"), 100 * median(bad, k)
    }' "$OUT/runs"
done
