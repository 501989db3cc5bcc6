#!/usr/bin/env bash
# ci/timing-gate.sh - the timing gate of `make test` (docs/gates.md, "The CI timing gate").
#
# Timings measured at another time, or on another machine, cannot catch a 15-25%
# slowdown (the stored baseline gates them only at 100%).  So CI builds the
# baseline commit from source in a temporary `git worktree` and measures both
# binaries here, interleaved (`k25 gate --ab`: A B, B A, ...), under
# ci/gate-policy-timing.yaml: a timing more than 15% worse, surely, fails.
#
# The baseline commit, first that applies:
#   BASE_REF=<commit>        given (any git revision)
#   the last commit that touched baselines/results (the commit that stored the
#                            baseline: `make baselines` + commit, see docs/gates.md)
# A commit that is slower on purpose accepts it by re-baselining: `make baselines`,
# commit with the reason in the message; from then on that commit is the baseline.
#
# Environment (all optional):
#   K25               the candidate binary (default build/k25)
#   K25_BASE_BIN      a prebuilt baseline binary: skip the build (make gate-ab, tests)
#   K25_GATE_BIN      the k25 that runs `k25 gate` itself (default: K25); the proof tests
#                     set it when K25 is a wrapper that sets a test knob, which the gate
#                     process would otherwise pass on to both sides
#   K25_TIMING_OUT    where the A/B runs and gate-timing.json go (default results/timing-gate)
#   K25_TIMING_POLICY the policy (default ci/gate-policy-timing.yaml)
#   ROUNDS, MAX_ROUNDS  A/B rounds, and the most while a gated metric is UNSURE (6, 12)
#   K25_TIMING_GATE   `strict`: a baseline that cannot be built fails (exit 2) instead of
#                     the loud fallback
#   K25_TIMING_INCONCLUSIVE  what an INCONCLUSIVE gate (a timing still UNSURE after
#                     MAX_ROUNDS: the machine too noisy to tell) means: `pass` (default: said
#                     in the log and the JSON; the instruction gate, ci/instr-gate.sh, counts
#                     the work deterministically) or `fail` (exit 3)
# Exit status: 0 pass (or the loud fallback, or INCONCLUSIVE counted as a pass),
# 1 a timing regression, 2 unusable, 3 INCONCLUSIVE with K25_TIMING_INCONCLUSIVE=fail.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "timing-gate: takes no arguments (settings are environment variables; --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
K25=${K25:-build/k25}
OUT=${K25_TIMING_OUT:-results/timing-gate}
POLICY=${K25_TIMING_POLICY:-ci/gate-policy-timing.yaml}
ROUNDS=${ROUNDS:-6}
MAX_ROUNDS=${MAX_ROUNDS:-12}
CACHE=${K25_BASE_CACHE:-build/base}
# The workload: small, one thread (a neighbour on the other core does not stall it), ~1 s a run.
WORKLOAD='bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter "input_length <= 1024" --concurrency 2 --requests 8 --warmup 1 --decode-max-tokens 32 --threads 1 --quiet'

say() { echo "timing-gate: $*" >&2; }
INCONCLUSIVE=${K25_TIMING_INCONCLUSIVE:-pass}
case $INCONCLUSIVE in pass|fail) ;; *) say "K25_TIMING_INCONCLUSIVE must be pass or fail, not '$INCONCLUSIVE'"; exit 2 ;; esac

# The loud fallback: no A/B is possible, so timings are gated only against the stored
# baseline (at its 100% tolerance, by ci/pipeline.sh).  Strict mode makes it an error.
fallback() {
  {
    echo
    echo "######################################################################"
    echo "# timing-gate: NO TIMING GATE: $*"
    echo "# Timings are compared only with the stored baseline, at 100% tolerance:"
    echo "# a 15-25% slowdown would pass.  Fix: a full clone (git fetch --unshallow),"
    echo "# or BASE_REF=<buildable commit>, or K25_BASE_BIN=<baseline k25 binary>."
    echo "######################################################################"
    echo
  } >&2
  mkdir -p "$OUT"
  jq -n --arg reason "$*" '{kind: "k25-timing-gate", ran: false, reason: $reason}' > "$OUT/gate-timing.json"
  [ "${K25_TIMING_GATE:-}" = strict ] && exit 2
  exit 0
}

[ -x "$K25" ] || { say "candidate binary $K25 not found (make first)"; exit 2; }

# the baseline binary (ci/base-lib.sh): K25_BASE_BIN, BASE_REF or the commit that stored
# baselines/results, built from source and cached
. ci/base-lib.sh
k25_resolve_baseline

rm -rf "$OUT"
mkdir -p "$OUT"
say "A = baseline ($base_desc), B = candidate ($K25); $ROUNDS rounds interleaved (up to $MAX_ROUNDS while UNSURE), policy $POLICY"
set +e
# --allow-mismatch: the two commits may differ in config keys (a new key is a new
# identity); what is compared here is time for the same workload, and the table
# names any difference.  Tokens, completions and memory are gated against the stored
# baseline by ci/pipeline.sh.
"${K25_GATE_BIN:-$K25}" gate --ab "$base_bin $WORKLOAD" "$K25 $WORKLOAD" --rounds "$ROUNDS" --max-rounds "$MAX_ROUNDS" \
  --policy "$POLICY" --allow-mismatch --dir "$OUT/ab" --json-file "$OUT/gate-timing.json" --quiet
st=$?
set -e
tmp=$(mktemp)
jq --arg base "$base_desc" --arg means "$INCONCLUSIVE" '. + {ran: true, baseline_build: $base, inconclusive_means: $means}' \
  "$OUT/gate-timing.json" > "$tmp" 2>/dev/null && mv "$tmp" "$OUT/gate-timing.json" || rm -f "$tmp"
case $st in
  0) say "passed: no timing more than the tolerance slower than $base_desc" ;;
  3) say "INCONCLUSIVE: no timing surely slower than $base_desc, but the machine was too noisy to tell after"
     say "  up to $MAX_ROUNDS rounds (reasons and the command that settles it in the table above)."
     if [ "$INCONCLUSIVE" = pass ]; then
       say "  Counted as a PASS here (K25_TIMING_INCONCLUSIVE=pass): wall time on a busy machine cannot tell;"
       say "  the instruction gate (ci/instr-gate.sh) gates the work itself."
       st=0
     else
       say "  Counted as a FAILURE here (K25_TIMING_INCONCLUSIVE=fail): exit 3."
     fi ;;
  1) say "FAILED: the candidate is slower than $base_desc (table above; $OUT/gate-timing.json)."
     say "If the slowdown is deliberate, re-baseline: make baselines, commit with the reason (docs/gates.md)." ;;
  *) say "the A/B measurement could not be made (exit $st; runs in $OUT/ab)" ;;
esac
exit $st
