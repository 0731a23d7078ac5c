#!/usr/bin/env bash
# `tollgate serve` under load, each figure next to a peer (docs/PERFORMANCE.md):
#
# - reverse proxy: wrk (2 threads, 64 keep-alive connections) against a tiny
#   upstream called directly, through `tollgate serve --upstream` (one rule
#   per client address, GCRA, never refusing; memory store, then Redis), and
#   through nginx `limit_req` (the same: per client address, never refusing)
#   with keep-alive to the same upstream, and through nginx with no limit
#   (what forwarding alone costs);
# - `POST /v1/check`: wrk against the same `tollgate serve` processes'
#   HTTP API (memory, Redis) and a do-nothing axum handler;
# - gRPC `ShouldRateLimit`: the `load` bench's client (64 in flight over 4
#   HTTP/2 connections) against tollgate (memory, Redis) then a do-nothing
#   tonic server, in one run each.
#
# The targets take turns, ROUNDS times, so that the shared machine's load hits
# them alike; each ratio is taken against the peer of its own round, and the
# tables give medians over the rounds. CPU/request is the CPU time (user +
# system, from /proc) of every process serving the request (the proxy and the
# upstream; nginx's workers and the upstream; the upstream alone when called
# directly) over the requests answered: other processes on the machine do not
# inflate it the way they inflate wall-clock figures.
#
# Starts its own redis-server and nginx (foreground, on 127.0.0.1, with their
# files in a temp dir) and stops everything at the end. From the repository
# root, with wrk, nginx and redis-server installed:
#
#   bash crates/tollgate-server/benches/serve.sh
set -euo pipefail
DUR=${DUR:-5s}
GRPC_SECS=${GRPC_SECS:-5}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-18300}
NGINX=${NGINX:-/usr/sbin/nginx}
OUT=$(mktemp -d)
# nginx's workers run as an unprivileged user: let them reach their files.
chmod 755 "$OUT"
PIDS=()
stop_all() {
  [ -f "$OUT/nginx.pid" ] && kill -QUIT "$(cat "$OUT/nginx.pid")" 2>/dev/null || true
  [ ${#PIDS[@]} -gt 0 ] && kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$OUT"
}
trap stop_all EXIT

cargo build --release -p tollgate-cli --bin tollgate 2>&1 | tail -1
TOLLGATE=target/release/tollgate
LOAD=$(cargo bench -p tollgate-server --bench load --no-run 2>&1 |
  sed -n 's/.*Executable.*(\(.*\)).*/\1/p' | tail -1)
[ -x "$LOAD" ] || { echo "the load bench did not build"; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1"; exit 1
}
# Starts a command in the background, records its pid in PIDS and $LAST.
start() { "$@" >"$OUT/$(basename "$1").$RANDOM.log" 2>&1 & LAST=$!; PIDS+=("$LAST"); }

UP=$PORT
P_MEM=$((PORT + 1)) P_REDIS=$((PORT + 2)) P_NGINX=$((PORT + 3))
C_NULL=$((PORT + 4)) API_MEM=$((PORT + 5)) API_REDIS=$((PORT + 6)) P_PLAIN=$((PORT + 7))

REDIS_PORT=$(free_port)
start redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT"
REDIS_PID=$LAST
wait_port "$REDIS_PORT"
REDIS=redis://127.0.0.1:$REDIS_PORT
redis_version=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')

start "$LOAD" upstream "$UP"; UP_PID=$LAST
wait_port "$UP"

cat >"$OUT/proxy.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit: { algorithm: gcra, unit: second, requests_per_unit: 1000000000 }
http:
  rules:
    - name: per-ip
      limit: { algorithm: gcra, unit: second, requests_per_unit: 100000000 }
EOF
serve() { # PROXY_PORT API_PORT STORE
  start "$TOLLGATE" serve --config "$OUT/proxy.yaml" --no-grpc --no-watch --log warn \
    --http-listen "127.0.0.1:$2" --upstream "http://127.0.0.1:$UP" \
    --proxy-listen "127.0.0.1:$1" --store "$3"
  wait_port "$1"
}
serve "$P_MEM" "$API_MEM" memory; PROXY_MEM_PID=$LAST
serve "$P_REDIS" "$API_REDIS" "$REDIS"; PROXY_REDIS_PID=$LAST

mkdir -p "$OUT/nginx"
cat >"$OUT/nginx.conf" <<EOF
# Two workers: the machine's cores, as tollgate's runtime has two threads.
worker_processes 2;
daemon off;
pid $OUT/nginx.pid;
error_log $OUT/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $OUT/nginx/body;
  proxy_temp_path $OUT/nginx/proxy;
  fastcgi_temp_path $OUT/nginx/fastcgi;
  uwsgi_temp_path $OUT/nginx/uwsgi;
  scgi_temp_path $OUT/nginx/scgi;
  limit_req_zone \$binary_remote_addr zone=per_ip:10m rate=1000000r/s;
  upstream up {
    server 127.0.0.1:$UP;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$P_NGINX;
    location / {
      limit_req zone=per_ip burst=1000000 nodelay;
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
  # No limit at all: what forwarding alone costs, the ceiling of a proxy.
  server {
    listen 127.0.0.1:$P_PLAIN;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
start "$NGINX" -p "$OUT/nginx" -e "$OUT/nginx/error.log" -c "$OUT/nginx.conf"; NGINX_PID=$LAST
wait_port "$P_NGINX"
sleep 0.5 # the workers are forked after the port is open
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | tr '\n' ' ')
nginx_version=$("$NGINX" -v 2>&1 | sed 's/.*nginx\///')

start "$LOAD" null "$C_NULL"; NULL_PID=$LAST
wait_port "$C_NULL"

# name url lua pids-serving-it (the peer's name is the first of its table).
TARGETS=(
  "direct http://127.0.0.1:$UP/ - $UP_PID"
  "tollgate-memory http://127.0.0.1:$P_MEM/ - $PROXY_MEM_PID $UP_PID"
  "nginx-limit_req http://127.0.0.1:$P_NGINX/ - $NGINX_WORKERS $UP_PID"
  "nginx-no-limit http://127.0.0.1:$P_PLAIN/ - $NGINX_WORKERS $UP_PID"
  "tollgate-redis http://127.0.0.1:$P_REDIS/ - $PROXY_REDIS_PID $UP_PID $REDIS_PID"
  "axum-do-nothing http://127.0.0.1:$C_NULL $PWD/crates/tollgate-server/benches/check.lua $NULL_PID"
  "check-memory http://127.0.0.1:$API_MEM $PWD/crates/tollgate-server/benches/check.lua $PROXY_MEM_PID"
  "check-redis http://127.0.0.1:$API_REDIS $PWD/crates/tollgate-server/benches/check.lua $PROXY_REDIS_PID $REDIS_PID"
)
cpu_of() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo "$t"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
wrk_run() { # name url lua duration pids...
  local name=$1 url=$2 lua=$3 dur=$4; shift 4
  local script=() before used
  [ "$lua" != - ] && script=(-s "$lua")
  before=$(cpu_of "$@")
  wrk -t2 -c64 -d"$dur" --latency "${script[@]}" "$url" >"$OUT/wrk"
  used=$(($(cpu_of "$@") - before))
  awk -v n="$name" -v r="$round" -v cpu="$((used * TICK_US))" '
    function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1000000; return v }
    /requests in/ { total = $1 } /Requests\/sec/ { rps = $2 } /^ +50%/ { p50 = us($2) } /^ +99%/ { p99 = us($2) }
    /Non-2xx/ { bad += $5 } /Socket errors/ { bad += $4 + $6 + $8 + $10 }
    END { printf "%s %s %.0f %.0f %.0f %.2f %d\n", r, n, rps, p50, p99, cpu / total, bad }' "$OUT/wrk" >>"$OUT/runs"
}

echo "uptime before: $(uptime)"
# Warm-up: every target once, briefly.
round=0
for t in "${TARGETS[@]}"; do read -r name url lua pids <<<"$t"; wrk_run "$name" "$url" "$lua" 2s $pids; done
: >"$OUT/runs"
for round in $(seq "$ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    read -r name url lua pids <<<"$t"
    wrk_run "$name" "$url" "$lua" "$DUR" $pids
  done
  for store in memory "$REDIS"; do
    label=${store%%:*}
    "$LOAD" grpc "$GRPC_SECS" "$store" | awk -v r="$round" -v s="$label" '
      function us(v) { if (v ~ /ns$/) return v / 1000; if (v ~ /µs$/) return v + 0; if (v ~ /ms$/) return v * 1000; return v * 1000000 }
      /^tollgate gRPC/ { sub(/.*: /, ""); gsub(/,/, ""); t = $1; t50 = us($4); t99 = us($6) }
      /^do-nothing tonic/ { sub(/.*: */, ""); gsub(/,/, ""); n = $1; n50 = us($4); n99 = us($6) }
      END { printf "%s %s %.0f %.0f %.0f %.0f %.0f %.0f\n", r, s, t, t50, t99, n, n50, n99 }' >>"$OUT/grpc"
  done
done
echo "uptime after:  $(uptime)"
echo "nginx $nginx_version, redis-server $redis_version, wrk -t2 -c64 -d$DUR --latency, $ROUNDS rounds"
echo

# Medians over the rounds; each ratio against the first target of its table
# in the same round.
table() { # peer names...
  local peer=$1
  echo "| target | req/s | vs $peer | p50 | p99 | p99 added | CPU/request | capacity vs $peer | errors |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for name in "$@"; do
    awk -v c="$name" -v peer="$peer" '
      { rps[$1, $2] = $3; p50[$1, $2] = $4; p99[$1, $2] = $5; cpu[$1, $2] = $6; bad[$1, $2] = $7; if ($1 > n) n = $1 }
      function median(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((k + 1) / 2)] }
      END {
        for (r = 1; r <= n; r++) { x[r] = rps[r, c]; ratio[r] = rps[r, c] / rps[r, peer]; a[r] = p50[r, c]; b[r] = p99[r, c]; add[r] = p99[r, c] - p99[r, peer]; u[r] = cpu[r, c]; keep[r] = cpu[r, peer] / cpu[r, c]; e[r] = bad[r, c] }
        printf "| %s | %.0f | %.2fx | %.0f µs | %.0f µs | %+.0f µs | %.1f µs | %.2fx | %d |\n", c, median(x, n), median(ratio, n), median(a, n), median(b, n), median(add, n), median(u, n), median(keep, n), median(e, n)
      }' "$OUT/runs"
  done
}
echo "Reverse proxy (GET /, 5-byte answer):"
table direct tollgate-memory nginx-limit_req nginx-no-limit tollgate-redis
echo
echo "POST /v1/check:"
table axum-do-nothing check-memory check-redis
echo
echo "gRPC ShouldRateLimit (load bench client, 64 in flight, ${GRPC_SECS}s each):"
echo "| store | tollgate req/s | p50 | p99 | do-nothing tonic req/s | p50 | p99 | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for label in memory redis; do
  awk -v s="$label" '
    $2 == s { k++; t[k] = $3; t50[k] = $4; t99[k] = $5; m[k] = $6; m50[k] = $7; m99[k] = $8; ratio[k] = $3 / $6 }
    function median(a, k,   i, j, x) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x } return a[int((k + 1) / 2)] }
    END { printf "| %s | %.0f | %.0f µs | %.0f µs | %.0f | %.0f µs | %.0f µs | %.2fx |\n", s, median(t, k), median(t50, k), median(t99, k), median(m, k), median(m50, k), median(m99, k), median(ratio, k) }' "$OUT/grpc"
done
echo
echo "Every run (round, target, req/s, p50 µs, p99 µs, CPU µs/request, errors):"
cat "$OUT/runs"
