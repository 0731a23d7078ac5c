#!/usr/bin/env bash
# The PostgreSQL server's instructions per transaction for each statement of
# the `seed` comparison (the hand-written float bucket, then what a check of
# a token bucket and of GCRA sends), counted by callgrind: unlike
# transactions per second, the count does not depend on the machine's load.
#
#   crates/tollgate-postgres/benches/postgres_instructions.sh [N]
#
# Starts its own server (the bench harness's settings, autovacuum off so that
# nothing else runs) under `valgrind --tool=callgrind` on a free port, sets
# it up with `cargo bench ... -- seed-setup`, then runs each script in two
# one-client pgbench sessions of 20 and 20 + N transactions (default 200):
# the difference of the two sessions' backend totals, divided by N, is the
# cost of N transactions without the session's start. Every key is charged
# twice beforehand, so updates are HOT as for a key in use; the count of
# HOT updates is printed too.
set -euo pipefail
n=${1:-200}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
root=$(mktemp -d /tmp/tollgate-pg-instructions-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_server=()
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$root"
    as_server=(runuser -u postgres --)
fi
mkdir -p "$root/cg" "$root/scripts" && chmod 777 "$root/cg" "$root/scripts"
"${as_server[@]}" "$bin/initdb" -D "$root/data" -U tollgate --auth=trust --no-sync \
    -E UTF8 --locale=C >"$root/initdb.log"
"${as_server[@]}" valgrind --tool=callgrind --callgrind-out-file="$root/cg/cg.%p" \
    "$bin/postgres" -D "$root/data" -p "$port" -k "$root" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
    -c full_page_writes=off -c max_connections=200 -c autovacuum=off \
    >"$root/server.log" 2>&1 &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$root"' EXIT
until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do sleep 1; done
url="postgres://tollgate@127.0.0.1:$port/postgres"
cargo bench -p tollgate-postgres --bench postgres -- seed-setup "$url" "$root/scripts" \
    | tee "$root/scripts.txt"

psql=("$bin/psql" -X -A -t -h 127.0.0.1 -p "$port" -U tollgate postgres)
# The instructions of the backend of one pgbench session of $2 transactions
# (pgbench's first connection, which runs none, counts fewer).
session() {
    local before
    before=$(ls "$root/cg")
    "$bin/pgbench" -h 127.0.0.1 -p "$port" -U tollgate -n -M prepared -c 1 -t "$2" \
        -f "$1" postgres >/dev/null
    sleep 2 # the backend writes its counts as it exits
    comm -13 <(echo "$before") <(ls "$root/cg") \
        | while read -r f; do grep '^summary:' "$root/cg/$f" | cut -d' ' -f2; done \
        | sort -n | tail -1
}
hot() { "${psql[@]}" -c "SELECT sum(n_tup_hot_upd) || '/' || sum(n_tup_upd) FROM pg_stat_user_tables"; }

echo
echo "| statement | instructions per transaction | HOT updates / updates (of the 20 + $n) |"
echo "|---|---:|---:|"
while IFS= read -r line; do
    name=${line%%: *}
    script=${line#*: }
    short=$(session "$script" 20)
    "${psql[@]}" -c "SELECT pg_stat_reset()" >/dev/null
    long=$(session "$script" $((20 + n)))
    sleep 1
    echo "| $name | $(((long - short) / n)) | $(hot) |"
done <"$root/scripts.txt"
