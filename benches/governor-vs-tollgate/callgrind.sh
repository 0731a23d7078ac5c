#!/usr/bin/env bash
# Instructions per check of one limiter in one row of the harness, counted by
# callgrind (deterministic whatever the machine's load, except where the
# limiter's own clock decides: see docs/PERFORMANCE.md, "Keyed limiter"): the
# harness's `--only` mode, counting only the measured checks
# (`checks_in_order`, so building and filling the limiter are left out).
#
# Usage: callgrind.sh BIN KEYS SIDE:TYPE:SHAPE:THREADS [CHECKS_PER_THREAD [HARNESS ARGS...]]
#   e.g. callgrind.sh target/release/governor-vs-tollgate 1000 tollgate:str:allowed:1
set -euo pipefail
bin=$1 keys=$2 row=$3 n=${4:-100000}; shift $(( $# < 4 ? $# : 4 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect='*checks_in_order*' \
  "$bin" --keys "$keys" --only "$row" --checks "$n" "$@" >"$out/log" 2>&1
ir=$(grep -o 'Collected : *[0-9]*' "$out/log" | tr -dc 0-9)
threads=${row##*:}
held=$(grep -o 'held.*' "$out/log" || true)
echo "$keys keys $row: $((ir / (n * threads))) instructions per check ($n checks per thread${held:+; $held})"
