#!/usr/bin/env bash
# The PostgreSQL server's instructions per transaction for each statement of
# the `seed` comparison (the hand-written float bucket, then what a check of
# a token bucket and of GCRA sends), counted by callgrind: unlike
# transactions per second, the count does not depend on the machine's load.
#
#   crates/tollgate-postgres/benches/postgres_instructions.sh [N]
#
# Starts its own server (the bench harness's settings, autovacuum off so that
# nothing else runs) on a free port, sets it up with `cargo bench ... --
# seed-setup`, restarts it under `valgrind --tool=callgrind`, then runs each
# script in two one-client pgbench sessions of 20 and 20 + N transactions (default 200):
# the difference of the two sessions' backend totals, divided by N, is the
# cost of N transactions without the session's start. Rows start as a key
# in use has them (below), so updates are in place (HOT); tollgate's are
# counted again with idle_at raised by every update, as a key's first
# update in a minute does (not in place: new entries in both indexes).
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
serve() { # [valgrind ...]: starts the server, under the given tool if any
    "${as_server[@]}" "$@" "$bin/postgres" -D "$root/data" -p "$port" -k "$root" \
        -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
        -c full_page_writes=off -c max_connections=200 -c autovacuum=off \
        >>"$root/server.log" 2>&1 &
    until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do sleep 1; done
}
stop() { "${as_server[@]}" "$bin/pg_ctl" -D "$root/data" stop -m fast -w >/dev/null 2>&1 || true; }
trap 'stop; rm -rf "$root"' EXIT
url="postgres://tollgate@127.0.0.1:$port/postgres"
psql=("$bin/psql" -X -q -A -t -h 127.0.0.1 -p "$port" -U tollgate postgres)
# Set up at full speed, then every row in the state a key in use has: the
# float buckets each updated once and vacuumed (a fresh table of full pages
# leaves no room for in-place updates), tollgate's idle_at an hour ahead,
# so no charge in the count has to raise it.
serve
cargo bench -p tollgate-postgres --bench postgres -- seed-setup "$url" "$root/scripts" \
    | tee "$root/scripts.txt"
ahead="UPDATE tollgate.state SET idle_at = (extract(epoch FROM now() + interval '1 hour') * 1e9)::bigint"
"${psql[@]}" -c "UPDATE rate_limit_bucket SET tokens = tokens" -c "$ahead" -c "VACUUM ANALYZE"
stop
serve valgrind --tool=callgrind --callgrind-out-file="$root/cg/cg.%p"
# Until no backend is left to write its counts.
settle() {
    local last=-1 now
    while now=$(ls "$root/cg" | wc -l) && [ "$now" != "$last" ]; do last=$now; sleep 3; done
}
settle

# The instructions of the backend of one pgbench session of $2 transactions
# (pgbench's first connection, which runs none, counts fewer).
session() {
    local before
    before=$(ls "$root/cg")
    "$bin/pgbench" -h 127.0.0.1 -p "$port" -U tollgate -n -M prepared -c 1 -t "$2" \
        -f "$1" postgres >/dev/null
    settle
    comm -13 <(echo "$before") <(ls "$root/cg") \
        | while read -r f; do grep '^summary:' "$root/cg/$f" | cut -d' ' -f2; done \
        | sort -n | tail -1
}
per_transaction() { echo $((($(session "$1" $((20 + n))) - $(session "$1" 20)) / n)); }
hot() { "${psql[@]}" -c "SELECT sum(n_tup_hot_upd) || '/' || sum(n_tup_upd) FROM pg_stat_user_tables"; }

echo
echo "| statement | instructions per transaction | HOT updates / updates | with idle_at raised at every update (a key's first in a minute) | HOT / updates |"
echo "|---|---:|---:|---:|---:|"
while IFS= read -r line; do
    name=${line%%: *}
    script=${line#*: }
    "${psql[@]}" -c "SELECT pg_stat_reset()" >/dev/null
    settle
    steady=$(per_transaction "$script")
    steady_hot=$(hot)
    raised=
    if [[ $name == tollgate* ]]; then
        "${psql[@]}" -c "UPDATE tollgate.state SET idle_at = 0" -c "VACUUM" -c "SELECT pg_stat_reset()" >/dev/null
        settle
        raised="$(per_transaction "$script") | $(hot)"
        "${psql[@]}" -c "$ahead" -c "VACUUM" >/dev/null
        settle
    fi
    echo "| $name | $steady | $steady_hot | ${raised:- | } |"
done <"$root/scripts.txt"
