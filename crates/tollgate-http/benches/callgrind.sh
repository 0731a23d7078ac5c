#!/usr/bin/env bash
# Instructions per request of each row of the in-process layer bench
# (benches/layer.rs), counted by callgrind: deterministic whatever else the
# machine runs, so two builds can be compared on a busy machine.
#
# Each row runs alone for 2 s (SECONDS_PER_ROW) under callgrind; the figure is the inclusive
# cost of criterion's `Bencher::iter` (building the request, the call
# through the layer, dropping the response) over the requests it built.
# The rows' setup (sending every key once) is outside `iter`, so not counted.
#
#   cargo bench -p tollgate-http --bench layer --no-run   # prints the binary
#   BIN=target/release/deps/layer-<hash> bash crates/tollgate-http/benches/callgrind.sh
set -euo pipefail
BIN=${BIN:?the layer bench binary, from cargo bench --no-run}
ROWS=${ROWS:-"bare admitting/1 admitting/3 refusing/1 refusing/3"}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for row in $ROWS; do
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg" "$BIN" --bench --profile-time "${SECONDS_PER_ROW:-2}" "http_layer/$row" >/dev/null 2>&1
  callgrind_annotate --threshold=100 --tree=calling --inclusive=yes "$OUT/cg" 2>/dev/null | awk -v row="$row" '
    /\*  .*criterion-[0-9.]+\/src\/bencher.rs:criterion::bencher::Bencher<M>::iter \[/ { t = $1; gsub(",", "", t) }
    /> .*layer::request \(/ && !n { match($0, /\(([0-9,]+)x\)/, m); n = m[1]; gsub(",", "", n) }
    END { printf "| %s | %.0f |\n", row, t / n }'
done
