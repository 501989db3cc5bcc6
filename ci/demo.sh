#!/usr/bin/env bash
# The demo `make demo` runs: the main job on the shipped defaults.
# The reference engine end to end: `k25 run` on the `tiny` preset, a short
# prompt and a 4K-token long-context prompt, with the structured log and the
# JSON result written under results/demo/; `k25 bench` on the shipped gold
# set; then the whole pipeline (ci/pipeline.sh demo): the ci-smoke sweep,
# `k25 report` on it and `k25 gate` against the stored baseline, ending with
# where the report is and the best setting found.
set -euo pipefail
cd "$(dirname "$0")/.."
K25=${K25:-build/k25}
OUT=results/demo
mkdir -p "$OUT"
rm -f "$OUT/engine.log"

echo "== k25 run: tiny, short prompt (greedy)"
"$K25" run --model tiny --prompt "Article 12. Notice. Any notice under this Agreement shall be in writing" \
  --max-tokens 48 --log-level info --log-file "$OUT/engine.log"

echo
echo "== k25 run: tiny, 4096-token prompt in chunks of 1024, JSON result -> $OUT/run-4k.json"
"$K25" run --model tiny --prompt-file README.md --prompt-len 4096 --prefill-chunk-size 1024 \
  --max-tokens 64 --json --log-level info --log-file "$OUT/engine.log" > "$OUT/run-4k.json"
jq -r '"prefill \(.timing.prefill_tok_s|floor) tok/s, decode \(.timing.decode_tok_s|floor) tok/s, TTFT \(.timing.ttft_ms|floor) ms, \(.timing.prefill_chunks) chunks, peak RSS \(.memory.peak_rss_mb|floor) MB"' "$OUT/run-4k.json"

echo
echo "== structured log ($OUT/engine.log)"
cat "$OUT/engine.log"
echo
echo "== k25 bench: tiny on the shipped gold set (short requests), 2 users -> $OUT/bench.h5, $OUT/bench.json"
"$K25" bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter 'input_length <= 2048' \
  --concurrency 2 --requests 8 --warmup 1 --quiet --out "$OUT/bench.h5" --json "$OUT/bench.json"
jq -r '"TTFT P50 \(.summary.ttft_ms.p50|floor) ms, \(.summary.output_tok_per_s|floor) output tok/s, harness overhead \(.summary.harness.overhead_per_token_us * 100 | round / 100) us/token"' "$OUT/bench.json"
echo "demo runs: results in $OUT/"
echo
echo "== the pipeline: ci-smoke sweep, report, gate (ci/pipeline.sh demo)"
K25="$K25" ./ci/pipeline.sh demo
