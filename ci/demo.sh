#!/usr/bin/env bash
# The demo `make demo` runs: the main job on the shipped defaults.
# Today that is the reference engine end to end: `k25 run` on the `tiny`
# preset, a short prompt and a 4K-token long-context prompt, with the
# structured log and the JSON result written under results/demo/.
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
echo "demo done: results in $OUT/"
