#!/usr/bin/env bash
# queue-surge-bar.sh - the elastic queue's surge bar (issue 17), measured end to end on `tiny`:
# a steady open-loop run, then ROUNDS runs with a surge of FACTOR x the steady rate, all with the
# circuit breaker on and a spill folder.  Per surge run it checks:
#   - accounting: sent = completed + timed out + rejected (each with its reason), none lost;
#   - standard-priority P99 TTFT (undegraded requests) <= the steady run's standard P99 + the
#     memory queue's drain time, queue_memory_capacity / the surge run's measured throughput;
#   - every degraded request's TTFT <= degraded_ttft_ms (the max, not a percentile).
# The P99s are nearest-rank over a few hundred requests each (supported: >= 100 samples); a
# round the sample cannot support is reported "not measured", not passed.
#
# usage: ci/queue-surge-bar.sh [--k25 BIN] [--rounds N] [--factor F] [--rate R] [--out DIR]
#   --rate R     steady open-loop rate, req/s (default 12.5: about half of what `tiny` sustains
#                on 1 thread of a 2-core VM, 25 req/s closed loop)
#   --factor F   the surge multiplies the rate by F for 10 s from t = 10 s (default 5: "+400%")
#   --rounds N   surge runs (default 3)        --out DIR  (default results/surge-bar)
# THE MACHINE MUST BE QUIET, or run it as root under `chrt -f 10` (see ci/bench-ab.sh).
# Exit status: 0 every round met the bar, 1 a round did not (or a run failed), 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
K25=build/k25 ROUNDS=3 FACTOR=5 RATE=12.5 OUT=results/surge-bar
die() { echo "surge-bar: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --k25) K25=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --factor) FACTOR=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: expected a positive integer, got '$ROUNDS'"
[[ $FACTOR =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--factor: expected a number, got '$FACTOR'"
[[ $RATE =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--rate: expected a number, got '$RATE'"
[ -x "$K25" ] || die "$K25 is not an executable (make, or --k25 BIN)"
JQ=$(command -v jq || echo ci/jq)
mkdir -p "$OUT"
SPILL=$(mktemp -d /tmp/k25-surgebar.XXXXXX)
trap 'rm -rf "$SPILL"' EXIT

"$K25" gold generate --lengths 200 --count 40 --output-length 16 --out "$OUT/gold.jsonl"
bench() { # NAME [flags...]
  local n=$1; shift
  rm -rf "$SPILL/q"; mkdir -p "$SPILL/q"
  echo "surge-bar: $n ..." >&2
  "$K25" bench --model tiny --dataset "$OUT/gold.jsonl" --threads 1 --rate "$RATE" --duration 40 \
    --breaker-enabled --queue-spill-dir "$SPILL/q" --quiet --out "$OUT/$n.h5" --json "$OUT/$n.json" "$@" \
    >/dev/null || { echo "surge-bar: k25 bench failed ($n)" >&2; exit 1; }
}
bench steady
STEADY=$("$JQ" '.summary.ttft_ms_by_priority.standard.normal.p99' "$OUT/steady.json")
echo "steady at $RATE req/s: standard P99 TTFT $STEADY ms" \
     "($("$JQ" '.summary.ttft_ms_by_priority.standard.normal.n' "$OUT/steady.json") requests)"
fail=0
for r in $(seq 1 "$ROUNDS"); do
  bench "surge$r" --surge "$FACTOR:10:10"
  line=$("$JQ" -r --argjson steady "$STEADY" '
    .summary as $s | (.provenance.config.queue_memory_capacity) as $cap
    | ($s.ttft_ms_by_priority.standard.normal) as $std | ($s.ttft_ms_by_priority.standard.degraded) as $deg
    | ($s.requests) as $q | (.provenance.config.degraded_ttft_ms) as $sla
    | ($steady + 1000 * $cap / $s.requests_per_s) as $bar
    | [ "sent \($q.total) = \($q.completed) completed + \($q.timed_out) timed out + \($q.rejected) rejected, lost \($q.lost)",
        "standard P99 TTFT \($std.p99 // "n/a" | if type == "number" then (. | floor | tostring) + " ms" else "not measured (n \($std.n))" end)"
          + " vs bar \($bar | floor) ms (steady \($steady | floor) + \($cap) / \($s.requests_per_s * 100 | floor / 100) req/s)",
        "degraded max TTFT \($deg.max // 0 | floor) ms of \($deg.n) (SLA \($sla) ms)",
        (if $q.lost != 0 or $q.total != $q.completed + $q.timed_out + $q.rejected then "LOST"
         elif $std.p99 == null then "NOT MEASURED"
         elif $std.p99 > $bar or ($deg.max // 0) > $sla then "NOT MET" else "met" end) ] | join("; ")' \
    "$OUT/surge$r.json")
  echo "surge $r (x$FACTOR): $line"
  [[ $line == *"; met" ]] || fail=1
done
exit $fail
