# Counting a server's instructions per request with callgrind, for the
# end-to-end benches' COUNT=callgrind mode (crates/tollgate-http/benches/wrk.sh,
# crates/tollgate-server/benches/proxy-ab.sh): deterministic whatever else the
# machine runs, where wall-clock figures and CPU times are not. Sourced, with
# OUT set to the bench's scratch directory.
#
# Start each server as `"${COUNTING[@]}" server args...`: under callgrind,
# counting nothing until `counted` switches it on, so start-up and warm-up
# are left out.
COUNTING=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$OUT/cg.%p")

# The instructions callgrind counted in process $1 while the command after
# it ran.
counted() {
  local pid=$1; shift
  callgrind_control -i on "$pid" >/dev/null 2>&1
  "$@"
  # Dumped while still counting: a dump after switching off has lost some.
  callgrind_control -d "$pid" >/dev/null 2>&1
  callgrind_control -i off "$pid" >/dev/null 2>&1
  awk '/^totals:/ { print $2; exit }' "$(ls -t "$OUT/cg.$pid".* | head -1)"
}
