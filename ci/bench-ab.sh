#!/usr/bin/env bash
# ci/bench-ab.sh - k25 against itself: two or more `k25 run` variants (flag sets) on the same
# model and prompt, interleaved (A B C A B C ...), each a fresh process.  The tool behind the
# KV-format and compression bars of docs/engine.md ("Decode speed" and "Compression that pays"):
# e.g. int4 KV against fp32 KV at 32K, or r = 0.85 against r = 1.
#
# Reports per variant the median [range] of decode tok/s (mean over the run, and from the median
# inter-token latency, which one stalled step cannot move), prefill tok/s, TTFT and the bytes one
# decode step reads (weights + KV at the end of the run: `k25 run --json` memory.peak_weights_bytes
# + memory.peak_kv_bytes), and per round the ratios against a reference variant (the first, or
# the one named by NAME@REF=FLAGS): decode speedup,
# TTFT ratio, KV bytes ratio, the bytes ratio (first / this: what the step-bytes allow), and
# "paid" = (speedup - 1) / (bytes ratio - 1), the fraction of the byte saving that decode turned
# into speed (the bar: >= 0.8).  Every run's JSON and summary.json land under --out.
#
# THE MACHINE MUST BE QUIET, or the script must run under `chrt -f 10` (root: SCHED_FIFO, so the
# runs take the cores ahead of everything else; a niced neighbour is not enough under autogroup
# scheduling).: the load average is recorded and a busy machine is flagged.
#
# usage: ci/bench-ab.sh [--model small] [--prompt-len N[k]] [--rounds N] [--decode-tokens N]
#                       [--threads N] [--out DIR] --variant NAME=FLAGS --variant NAME=FLAGS ...
#   --variant NAME[@REF]=FLAGS  a variant: its name and the `k25 run` flags (one string, split on
#                         spaces), e.g. --variant 'fp32=--kv-cache-dtype fp32'.  Ratios are taken
#                         against variant REF (an earlier --variant), else against the first one.
#                         At least two.
#   --model          preset (default small)        --prompt-len  prompt tokens (default 1k)
#   --rounds N       interleaved rounds (default 3) --decode-tokens N  generated tokens (default 64)
#   --threads N      threads (default nproc)        --out DIR     (default results/bench-ab)
# Environment: K25 (default build/k25).  Exit status: 0 measured, 1 a run failed, 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
K25=${K25:-build/k25}
MODEL=small PLEN=1k ROUNDS=3 NTOK=64 THREADS=$(nproc) OUT=results/bench-ab
names=() flags=() refs=()
die() { echo "bench-ab: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --model) MODEL=${2:?}; shift 2 ;;
    --prompt-len) PLEN=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --decode-tokens) NTOK=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --variant)
      v=${2:?}; shift 2
      [[ $v == *=* ]] || die "--variant: expected NAME=FLAGS, got '$v'"
      n=${v%%=*} ref=
      if [[ $n == *@* ]]; then ref=${n#*@}; n=${n%%@*}; fi
      [[ $n =~ ^[A-Za-z0-9_.-]+$ ]] || die "--variant: name '$n' must be letters, digits, _ . -"
      for x in "${names[@]}"; do [ "$x" != "$n" ] || die "--variant: name '$n' given twice"; done
      if [ -n "$ref" ]; then
        found=0; for x in "${names[@]}"; do [ "$x" != "$ref" ] || found=1; done
        [ $found = 1 ] || die "--variant $n@$ref: no earlier variant named '$ref'"
      fi
      names+=("$n"); flags+=("${v#*=}"); refs+=("${ref:-}") ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
case $PLEN in
  *[kK]) n=${PLEN%[kK]}; [[ $n =~ ^[1-9][0-9]*$ ]] || die "--prompt-len: bad length '$PLEN'"; PLEN=$((n * 1024)) ;;
  *) [[ $PLEN =~ ^[1-9][0-9]*$ ]] || die "--prompt-len: bad length '$PLEN'" ;;
esac
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: expected a positive integer, got '$ROUNDS'"
[[ $NTOK =~ ^[1-9][0-9]*$ && $NTOK -ge 2 ]] || die "--decode-tokens: expected an integer >= 2, got '$NTOK'"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, got '$THREADS'"
[ ${#names[@]} -ge 2 ] || die "at least two --variant NAME=FLAGS are needed (--help)"
[ -x "$K25" ] || die "$K25 is not an executable (make, or set K25)"
mkdir -p "$OUT"

source ci/bench-lib.sh
IDS=$BENCH_IDS
load() { bench_load; }
LOAD0=$(load)
{
  echo "# bench-ab: $MODEL, prompt $PLEN, $NTOK decode tokens, $THREADS threads, $ROUNDS rounds; load average $LOAD0 on $(nproc) cores"
  bench_quiet_note "$LOAD0"
  for i in "${!names[@]}"; do echo "#   ${names[$i]}: ${flags[$i]}"; done
} >&2
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!names[@]}"; do
    echo "bench-ab: round $r/$ROUNDS: ${names[$i]} ..." >&2
    read -ra f <<< "${flags[$i]}"
    "$K25" run --model "$MODEL" --input-ids "$IDS" --prompt-len "$PLEN" --max-tokens "$NTOK" \
      --threads "$THREADS" --quiet --json "${f[@]}" > "$OUT/${names[$i]}-r$r.json" ||
      { echo "bench-ab: k25 run failed (${names[$i]}, round $r)" >&2; exit 1; }
  done
done
LOAD1=$(load)

vs=()
for i in "${!names[@]}"; do
  files=(); for r in $(seq 1 "$ROUNDS"); do files+=("$OUT/${names[$i]}-r$r.json"); done
  vs+=("$(jq -s --arg name "${names[$i]}" --arg flags "${flags[$i]}" --arg ref "${refs[$i]:-${names[0]}}" \
    '{name: $name, flags: $flags, ref: $ref, runs: .}' "${files[@]}")")
done
tmp=$(mktemp "$OUT/summary.json.XXXXXX")
printf '%s\n' "${vs[@]}" | jq -s --arg model "$MODEL" --argjson plen "$PLEN" --argjson ntok "$NTOK" \
  --argjson threads "$THREADS" --argjson rounds "$ROUNDS" --arg l0 "$LOAD0" --arg l1 "$LOAD1" \
  --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" \
  --arg k25 "$("$K25" --version)" --arg date "$(date -u +%FT%TZ)" '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def stats: {median: med, min: min, max: max};
  def step_bytes: .memory.peak_weights_bytes + .memory.peak_kv_bytes;
  def itl_tps: 1000 / .timing.itl_median_ms;
  . as $v | ($v | map({key: .name, value: .runs}) | from_entries) as $by |
  {what: "k25 run variants, interleaved rounds; ratios against the reference variant of each, per round",
   model: $model, prompt_tokens: $plen, decode_tokens: $ntok, threads: $threads, rounds: $rounds,
   k25_version: $k25, cpu: $cpu, date: $date,
   load_average: {before: ($l0 | tonumber), after: ($l1 | tonumber)},
   variants: [$v[] | .runs as $R | $by[.ref] as $ref | {name, flags, ref,
     decode_tok_s: ([$R[].timing.decode_tok_s] | stats), decode_itl_tok_s: ([$R[] | itl_tps] | stats),
     prefill_tok_s: ([$R[].timing.prefill_tok_s] | stats),
     ttft_ms: ([$R[].timing.ttft_ms] | stats), kv_bytes: ([$R[].memory.peak_kv_bytes] | stats),
     step_bytes: ([$R[] | step_bytes] | stats),
     vs_ref: {
       decode_speedup: ([range($R | length) as $i | $R[$i].timing.decode_tok_s / $ref[$i].timing.decode_tok_s] | stats),
       decode_speedup_itl: ([range($R | length) as $i | ($R[$i] | itl_tps) / ($ref[$i] | itl_tps)] | stats),
       ttft_ratio: ([range($R | length) as $i | $R[$i].timing.ttft_ms / $ref[$i].timing.ttft_ms] | stats),
       kv_bytes_ratio: ([range($R | length) as $i | $R[$i].memory.peak_kv_bytes / $ref[$i].memory.peak_kv_bytes] | stats),
       bytes_ratio: ([range($R | length) as $i | ($ref[$i] | step_bytes) / ($R[$i] | step_bytes)] | stats),
       paid: ([range($R | length) as $i | (($ref[$i] | step_bytes) / ($R[$i] | step_bytes)) as $b |
               if $b > 1.0001 then ($R[$i].timing.decode_tok_s / $ref[$i].timing.decode_tok_s - 1) / ($b - 1) else null end]
              | map(select(. != null)) | if length > 0 then stats else null end),
       paid_itl: ([range($R | length) as $i | (($ref[$i] | step_bytes) / ($R[$i] | step_bytes)) as $b |
               if $b > 1.0001 then (($R[$i] | itl_tps) / ($ref[$i] | itl_tps) - 1) / ($b - 1) else null end]
              | map(select(. != null)) | if length > 0 then stats else null end)}}]}' > "$tmp"
mv "$tmp" "$OUT/summary.json"

jq -r '
  def f: . * 10 | round / 10;
  def r: "\(.median | f) [\(.min | f)-\(.max | f)]";
  def x: "\(.median * 1000 | round / 1000) [\(.min * 1000 | round / 1000)-\(.max * 1000 | round / 1000)]";
  def pad(n): tostring | . + " " * ([n - length, 1] | max);
  "bench-ab: \(.model), prompt \(.prompt_tokens), \(.decode_tokens) decode tokens, \(.threads) threads, \(.rounds) rounds (median [range])",
  "  variant        decode tok/s          median-ITL tok/s      prefill tok/s         TTFT ms                  KV MB     step MB",
  (.variants[] | "  \(.name | pad(15))\(.decode_tok_s | r | pad(22))\(.decode_itl_tok_s | r | pad(22))\(.prefill_tok_s | r | pad(22))\(.ttft_ms | r | pad(25))\(.kv_bytes.median / 1048576 | f | pad(10))\(.step_bytes.median / 1048576 | f)"),
  "  against the reference variant, per round:",
  "  variant        against        decode speedup        TTFT ratio            KV bytes ratio        bytes ratio           paid = (speedup-1)/(bytes ratio-1)",
  (.variants[] | select(.ref != .name) | "  \(.name | pad(15))\(.ref | pad(15))\(.vs_ref.decode_speedup | x | pad(22))\(.vs_ref.ttft_ratio | x | pad(22))\(.vs_ref.kv_bytes_ratio | x | pad(22))\(.vs_ref.bytes_ratio | x | pad(22))\(if .vs_ref.paid then (.vs_ref.paid | x) else "n/a (no byte saving)" end)"),
  "  the same on the median inter-token latency (a stalled step does not move it):",
  "  variant        against        decode speedup        paid",
  (.variants[] | select(.ref != .name) | "  \(.name | pad(15))\(.ref | pad(15))\(.vs_ref.decode_speedup_itl | x | pad(22))\(if .vs_ref.paid_itl then (.vs_ref.paid_itl | x) else "n/a (no byte saving)" end)"),
  "  load average \(.load_average.before) before, \(.load_average.after) after (quiet: well under 1)"' "$OUT/summary.json"
echo "bench-ab: summary in $OUT/summary.json, every run in $OUT/" >&2
