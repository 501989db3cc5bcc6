#!/usr/bin/env bash
# ci/bench-decode.sh - k25's batch-1 decode (and prefill) against the single-file reference
# decoder bench/ref_decoder.c (llama2.c-style: one token at a time, OpenMP dot-product matmuls
# over fp32 weights), on the same model and weights (docs/engine.md, "Decode speed against a
# single-file reference").  `make bench-decode` builds both and runs this.
#
# For each prompt length, ROUNDS interleaved rounds (A = k25 run, B = ref_decoder: A B A B ...),
# each a fresh process generating --decode-tokens greedy tokens after the prompt.  Reports per
# side the median tok/s with its range, and the per-round ratio k25/ref (median, min-max) for
# decode and prefill; writes every run's JSON and a summary JSON under --out.
#
# THE MACHINE MUST BE QUIET, or the script must run under `chrt -f 10` (root: SCHED_FIFO, so the
# runs take the cores ahead of everything else; a niced neighbour is not enough under autogroup
# scheduling): another process on the cores skews both sides (OpenMP barriers
# stall when a core is taken).  The load average is recorded and a busy machine is flagged.
#
# usage: ci/bench-decode.sh [--model small|tiny] [--contexts 1k,8k] [--rounds N]
#                           [--decode-tokens N] [--threads N] [--out DIR] [-- K25_FLAGS...]
#   --model          preset both sides run (default small)
#   --contexts LIST  prompt lengths, k suffix allowed (default 1k,8k)
#   --rounds N       interleaved A/B rounds per prompt length (default 3)
#   --decode-tokens  tokens generated per run (default 128)
#   --threads N      threads of both sides (default: all cores, nproc)
#   --out DIR        run JSONs and summary.json (default results/bench-decode)
#   -- FLAGS         passed to `k25 run` only (e.g. -- --kv-cache-dtype fp16, --weight-dtype bf16)
# Environment: K25 (default build/k25), K25_REF_DECODER (default build/ref_decoder).
# Exit status: 0 measured, 1 a run failed, 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
K25=${K25:-build/k25}
REF=${K25_REF_DECODER:-build/ref_decoder}
MODEL=small CONTEXTS=1k,8k ROUNDS=3 NTOK=128 THREADS=$(nproc) OUT=results/bench-decode
K25_FLAGS=()
die() { echo "bench-decode: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --model) MODEL=${2:?}; shift 2 ;;
    --contexts) CONTEXTS=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --decode-tokens) NTOK=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --) shift; K25_FLAGS=("$@"); break ;;
    *) die "unknown argument '$1' (--help; k25 flags go after --)" ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: expected a positive integer, got '$ROUNDS'"
[[ $NTOK =~ ^[1-9][0-9]*$ && $NTOK -ge 2 ]] || die "--decode-tokens: expected an integer >= 2, got '$NTOK'"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, got '$THREADS'"
ctx=()
IFS=, read -ra items <<< "$CONTEXTS"
for c in "${items[@]}"; do
  case $c in
    *[kK]) n=${c%[kK]}; [[ $n =~ ^[1-9][0-9]*$ ]] && ctx+=($((n * 1024))) || die "--contexts: bad length '$c'" ;;
    *) [[ $c =~ ^[1-9][0-9]*$ ]] && ctx+=("$c") || die "--contexts: bad length '$c'" ;;
  esac
done
[ ${#ctx[@]} -gt 0 ] || die "--contexts: no prompt length"
[ -x "$K25" ] || die "$K25 is not an executable (make, or set K25)"
[ -x "$REF" ] || die "$REF is not an executable (make $REF, or set K25_REF_DECODER)"
mkdir -p "$OUT"

source ci/bench-lib.sh
IDS=$BENCH_IDS
load() { bench_load; }
LOAD0=$(load)
{
  echo "######################################################################"
  echo "# bench-decode: timings; THE MACHINE MUST BE QUIET (nothing else on the cores)."
  echo "# load average now: $LOAD0 on $(nproc) cores"
  bench_quiet_note "$LOAD0"
  echo "# $MODEL, ${THREADS} threads, $NTOK decode tokens, prompts ${ctx[*]}, $ROUNDS rounds (A = k25, B = ref_decoder)"
  echo "# k25 flags: ${K25_FLAGS[*]:-(none)}"
  echo "######################################################################"
} >&2

run_a() { # run_a LEN ROUND
  "$K25" run --model "$MODEL" --input-ids "$IDS" --prompt-len "$1" --max-tokens "$NTOK" --threads "$THREADS" \
    --quiet --json "${K25_FLAGS[@]}" > "$OUT/k25-$1-r$2.json"
}
run_b() {
  "$REF" --model "$MODEL" --input-ids "$IDS" --prompt-len "$1" --max-tokens "$NTOK" --threads "$THREADS" \
    --json > "$OUT/ref-$1-r$2.json"
}
for n in "${ctx[@]}"; do
  for r in $(seq 1 "$ROUNDS"); do
    echo "bench-decode: prompt $n, round $r/$ROUNDS: k25 ..." >&2
    run_a "$n" "$r" || { echo "bench-decode: k25 run failed (prompt $n, round $r)" >&2; exit 1; }
    echo "bench-decode: prompt $n, round $r/$ROUNDS: ref_decoder ..." >&2
    run_b "$n" "$r" || { echo "bench-decode: ref_decoder failed (prompt $n, round $r)" >&2; exit 1; }
  done
done
LOAD1=$(load)

# Summary: per prompt length, each side's runs, medians and ranges, and per-round ratios.
points=()
for n in "${ctx[@]}"; do
  a=() b=()
  for r in $(seq 1 "$ROUNDS"); do a+=("$OUT/k25-$n-r$r.json"); b+=("$OUT/ref-$n-r$r.json"); done
  points+=("$(jq -n --argjson n "$n" --slurpfile A <(cat "${a[@]}") --slurpfile B <(cat "${b[@]}") '
    def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    def stats: {runs: ., median: med, min: min, max: max};
    def same: [.[0], .[1]] | transpose | until(length == 0 or .[0][0] != .[0][1]; .[1:]) | length;
    {prompt_tokens: $n,
     k25: {decode_tok_s: ([$A[].timing.decode_tok_s] | stats), prefill_tok_s: ([$A[].timing.prefill_tok_s] | stats)},
     ref_decoder: {decode_tok_s: ([$B[].timing.decode_tok_s] | stats), prefill_tok_s: ([$B[].timing.prefill_tok_s] | stats)},
     decode_ratio: ([range($A | length) as $i | $A[$i].timing.decode_tok_s / $B[$i].timing.decode_tok_s] | stats),
     prefill_ratio: ([range($A | length) as $i | $A[$i].timing.prefill_tok_s / $B[$i].timing.prefill_tok_s] | stats),
     identical_leading_tokens: [range($A | length) as $i | ($A[$i].output_ids | length) -
       ([$A[$i].output_ids, $B[$i].output_ids] | same)]}')")
done
tmp=$(mktemp "$OUT/summary.json.XXXXXX")
printf '%s\n' "${points[@]}" | jq -s --slurpfile run "$OUT/k25-${ctx[0]}-r1.json" --arg model "$MODEL" --argjson threads "$THREADS" --argjson ntok "$NTOK" \
  --argjson rounds "$ROUNDS" --arg flags "${K25_FLAGS[*]:-}" --arg l0 "$LOAD0" --arg l1 "$LOAD1" \
  --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" \
  --arg k25 "$("$K25" --version)" --arg date "$(date -u +%FT%TZ)" '
  {what: "k25 run vs bench/ref_decoder.c, batch 1, interleaved A B rounds", model: $model, threads: $threads,
   decode_tokens: $ntok, rounds: $rounds, k25_flags: $flags, k25_version: $k25, cpu: $cpu, date: $date,
   k25_config: ($run[0].config | {kv_cache_dtype, kv_compression_ratio, prefill_chunk_size, attention}),
   load_average: {before: ($l0 | tonumber), after: ($l1 | tonumber)},
   note: "ratios are k25 / ref_decoder per round; the machine must be quiet", points: .}' > "$tmp"
# identical_leading_tokens: how much of the output the two sides share (information; the
# token-identity check is tests/test_refdecoder.c, and lossy k25 flags change tokens by design).
mv "$tmp" "$OUT/summary.json"

jq -r --argjson n "$NTOK" '
  def f: . * 10 | round / 10;
  def r: "\(.median | f) [\(.min | f)-\(.max | f)]";
  def x: "\(.median * 100 | round / 100)x [\(.min * 100 | round / 100)-\(.max * 100 | round / 100)]";
  "bench-decode: \(.model), \(.threads) threads, \(.decode_tokens) decode tokens, \(.rounds) rounds; k25 flags: \(if .k25_flags == "" then "(none)" else .k25_flags end)",
  "  k25 runs with kv_cache_dtype \(.k25_config.kv_cache_dtype), kv_compression_ratio \(.k25_config.kv_compression_ratio)\(if .k25_config.kv_cache_dtype != "fp32" or .k25_config.kv_compression_ratio < 1 then " (lossy: tokens may differ from the fp32 reference by design; -- --kv-compression-ratio 1 runs the exact model)" else " (exact: the same computation as the reference)" end)",
  "  prompt  side           decode tok/s median [range]   prefill tok/s median [range]",
  def pad(n): tostring | . + " " * ([n - length, 1] | max);
  (.points[] | "  \(.prompt_tokens | pad(8))\("k25" | pad(15))\(.k25.decode_tok_s | r | pad(30))\(.k25.prefill_tok_s | r)",
               "  \("" | pad(8))\("ref_decoder" | pad(15))\(.ref_decoder.decode_tok_s | r | pad(30))\(.ref_decoder.prefill_tok_s | r)",
               "  \("" | pad(8))\("k25/ref" | pad(15))\(.decode_ratio | x | pad(30))\(.prefill_ratio | x)",
               "  \("" | pad(8))identical leading tokens per round: \(.identical_leading_tokens | map(tostring) | join(", ")) of \($n)"),
  "  load average \(.load_average.before) before, \(.load_average.after) after (quiet: well under 1)"' "$OUT/summary.json"
echo "bench-decode: summary in $OUT/summary.json, every run in $OUT/" >&2
