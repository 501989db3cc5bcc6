#!/usr/bin/env bash
# `make baselines`: re-measures the stored baseline the CI gate compares with
# (baselines/results/ci-smoke: the ci-smoke sweep on the tiny model, made exactly
# as ci/pipeline.sh makes its candidate) and records where and how it was made in
# baselines/results/PROVENANCE.md.  Commit both; say why in the commit message.
#
# When to refresh: after a deliberate change to what the gate checks exactly (the
# engine config keys, generated tokens, memory accounting, the gold set or
# sweeps/ci-smoke.yaml) - the gate then says the config or tokens differ - or after
# a deliberate performance change.  Never to make a failing gate pass by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
K25=${K25:-build/k25}
DEST=baselines/results/ci-smoke
# The CI timing gate (ci/timing-gate.sh) builds the commit that stores this baseline:
# measure from committed code, so that commit's code is the code measured here.
if git rev-parse --git-dir >/dev/null 2>&1 &&
   [ -n "$(git status --porcelain --untracked-files=no -- . ':!baselines/results' 2>/dev/null)" ]; then
  echo "make baselines: WARNING: uncommitted changes outside baselines/results; commit the code first," >&2
  echo "  then commit the baseline: the timing gate builds the commit that stores it (docs/gates.md)" >&2
fi
TMP=baselines/results/.ci-smoke.new
rm -rf "$TMP"
mkdir -p baselines/results
"$K25" sweep sweeps/ci-smoke.yaml --out "$TMP" --jobs 2 --quiet
rm -f "$TMP"/points/*/*.log
# the gate reads each run's trace from the sibling rep-K.h5; the recorded path is informative only
rm -rf "$DEST"
mv "$TMP" "$DEST"
one=$(ls "$DEST"/points/*/rep-0.json | head -n1)
{
  echo "# Stored baselines: provenance"
  echo
  echo "Written by \`make baselines\` (ci/baselines.sh); compared with by \`make test\` (ci/pipeline.sh) and"
  echo "\`k25 gate --baseline $DEST\`. Absolute timings are this machine's: see docs/gates.md for what"
  echo "transfers to other machines (exact checks, memory, calibration-normalized timings at a wide tolerance)."
  echo "The CI timing gate (ci/timing-gate.sh) builds the commit that stores this file and measures it beside"
  echo "the candidate on the CI machine itself; re-baselining moves that commit (docs/gates.md)."
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| made | $(date -u +%Y-%m-%dT%H:%M:%SZ) |"
  echo "| command | \`$K25 sweep sweeps/ci-smoke.yaml --out $DEST --jobs 2\` |"
  jq -r '"| git | \(.provenance.build.git) |",
         "| compiler | \(.provenance.build.compiler) |",
         "| flags | \(.provenance.build.cflags) |",
         "| BLAS core | \(.provenance.build.blas_core) |",
         "| CPU | \(.provenance.machine.cpu_model), \(.provenance.machine.cores_online) cores online |",
         "| threads per run | \(.provenance.config.threads) |",
         "| kernel | \(.provenance.machine.kernel.release) |",
         "| dataset | \(.provenance.dataset.path) sha256 \(.provenance.dataset.sha256) filter `\(.provenance.dataset.filter)` |",
         "| calibration | \(.provenance.calibration.workload), fastest trial \(.provenance.calibration.min_ms) ms |"' "$one"
  echo
  echo "Points (\`jq -r -f ci/jq/headline.jq $DEST/points/*/rep-0.json\`:"
  echo "TTFT P50, TTFT P99, TPOT P50, E2E P50 ms, output tok/s, peak MB, completed/total):"
  echo
  echo '```'
  for j in "$DEST"/points/*/rep-0.json; do
    printf '%s  %s\n' "$(basename "$(dirname "$j")")" "$(jq -r -f ci/jq/headline.jq "$j")"
  done
  echo '```'
} > baselines/results/PROVENANCE.md
echo "baselines written to $DEST (provenance: baselines/results/PROVENANCE.md)"
