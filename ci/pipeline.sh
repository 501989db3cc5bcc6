#!/usr/bin/env bash
# The pipeline users and CI run on the shipped defaults (docs/gates.md):
#
#   1. the ci-smoke sweep (sweeps/ci-smoke.yaml, tiny model)  -> results/ci-smoke/
#   2. k25 report on it                                       -> reports/ci-smoke/
#   3. k25 gate against the stored baseline (baselines/results/ci-smoke)
#      under ci/gate-policy-ci.yaml (exact checks, memory; timings at 2x) -> results/ci-smoke/gate.json
#   4. (test only) the CI timing gate, ci/timing-gate.sh: the baseline commit built from
#      source, measured beside the candidate, interleaved, 15%  -> results/timing-gate/
#      (INCONCLUSIVE - too noisy to tell - counts as a pass there, said in its log)
#   5. (test only) the instruction gate, ci/instr-gate.sh: the same baseline binary and the
#      candidate under callgrind, a fixed tiny workload, 3%   -> results/instr-gate/
#
#   ci/pipeline.sh test   `make test`, after the unit tests: a regression fails (exit 1),
#                         unusable input too (exit 2: e.g. the config changed and the
#                         baseline needs `make baselines`)
#   ci/pipeline.sh demo   `make demo`: the same, then where the report is and the best
#                         setting found; the gate's verdict is shown, not enforced
#
# The sweep runs with --jobs 2: each run pinned to its own core share (one thread on
# a 2-core machine), which keeps a busy neighbour core from stalling every parallel
# region.  The stored baseline was made the same way (make baselines).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-test}
K25=${K25:-build/k25}
OUT=${K25_PIPELINE_OUT:-results/ci-smoke}
REPORT=${K25_PIPELINE_REPORT:-reports/ci-smoke}
BASELINE=baselines/results/ci-smoke
POLICY=ci/gate-policy-ci.yaml
case "$MODE" in test|demo) ;; *) echo "usage: ci/pipeline.sh [test|demo]" >&2; exit 2 ;; esac

t0=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - t0 ))s)"; }

# 1. sweep: fresh measurements every time (a resumed sweep would reuse old runs)
step "k25 sweep sweeps/ci-smoke.yaml -> $OUT"
rm -rf "$OUT"
"$K25" sweep sweeps/ci-smoke.yaml --out "$OUT" --jobs 2 --quiet --print-best

# 2. report
step "k25 report $OUT -> $REPORT"
"$K25" report "$OUT" --out "$REPORT" --quiet

# 3. gate against the stored baseline
step "k25 gate --baseline $BASELINE --candidate $OUT --policy $POLICY"
set +e
"$K25" gate --baseline "$BASELINE" --candidate "$OUT" --policy "$POLICY" --json-file "$OUT/gate.json"
gate=$?
set -e

if [ "$MODE" = demo ]; then
  echo
  case $gate in
    0) echo "gate: passed against $BASELINE" ;;
    1) echo "gate: REGRESSION against $BASELINE (see the table above; details in $OUT/gate.json)" ;;
    3) echo "gate: INCONCLUSIVE against $BASELINE: no regression found, but a gated metric was too noisy"
       echo "      to tell (the reasons and the command that settles it are above); the demo shows the"
       echo "      verdict and does not enforce it" ;;
    *) echo "gate: could not compare with $BASELINE (see above; \`make baselines\` refreshes it)" ;;
  esac
  # a baseline measured elsewhere: say what the table above can and cannot tell the reader
  if [ "$(jq -r '[.. | .other_machine? | select(. != null)] | any' "$OUT/gate.json" 2>/dev/null)" = true ]; then
    echo "note: $BASELINE was measured on ANOTHER MACHINE. Its timings are compared after dividing by each"
    echo "      machine's calibration, under the policy's wider other-machine tolerances, and a timing without"
    echo "      one is advisory (shown, never a failure); tokens are held to the cross-machine identity rule."
    echo "      So this gate catches large regressions only; for a strict timing gate on this machine,"
    echo "      measure a baseline here (\`make baselines\`) and compare against that."
  fi
  echo
  echo "report:       $REPORT/report.html (and report.md)"
  echo "best setting: $(jq -r -f ci/jq/sweep-best.jq "$OUT/summary.json")"
  echo "results:      $OUT/ (HDF5 traces and JSON summaries per point)"
  exit 0
fi
if [ $gate -eq 2 ]; then
  echo "the gate could not compare with $BASELINE; if the config or gold set changed on purpose," >&2
  echo "refresh the baseline with \`make baselines\` and commit it" >&2
fi
# INCONCLUSIVE (exit 3) against the stored baseline: what it means here is decided here.
# Timings gate against the stored baseline only as a 2x backstop; the timing gate (step 4)
# and the instruction gate (step 5) judge speed.  So UNSURE timings count as a pass, said in
# the log; an UNSURE on anything else (tokens, completions, memory, fidelity) fails.
if [ $gate -eq 3 ]; then
  others=$(jq -r '[.metrics[] | select(.verdict == "UNSURE" and .gated and (.advisory | not)
                   and .compare != "statistical") | .metric] | join(", ")' "$OUT/gate.json")
  if [ -z "$others" ]; then
    echo "pipeline: stored-baseline gate INCONCLUSIVE on timings only: counted as a pass here (timings are"
    echo "          judged by the timing gate and the instruction gate below)"
    gate=0
  else
    echo "pipeline: stored-baseline gate INCONCLUSIVE on $others: counted as a failure (these do not" >&2
    echo "          depend on the machine's noise; see the table above)" >&2
  fi
fi

# 4. timings: the baseline commit against the candidate, on this machine, now
step "ci/timing-gate.sh (baseline commit built from source, interleaved A/B)"
set +e
K25="$K25" ./ci/timing-gate.sh
timing=$?
set -e

# 5. instructions: deterministic, whatever the machine's neighbours do
step "ci/instr-gate.sh (instructions under callgrind, the same baseline commit)"
set +e
K25="$K25" ./ci/instr-gate.sh
instr=$?
set -e
echo "--- pipeline: $(( $(date +%s) - t0 ))s, gate exit status $gate, timing gate exit status $timing," \
     "instruction gate exit status $instr"
[ $gate -ne 0 ] && exit $gate
[ $timing -ne 0 ] && exit $timing
exit $instr
