#!/usr/bin/env bash
# ci/instr-gate.sh - the instruction-count gate of `make test` (docs/gates.md, "The instruction gate").
#
# Wall time on a shared machine moves 15-40% within minutes; the number of instructions a
# binary executes for a fixed input does not.  So the baseline commit's k25 (built from
# source and cached, as ci/timing-gate.sh does: ci/base-lib.sh) and the candidate run the
# same fixed `tiny` workload under `valgrind --tool=callgrind`, one thread, OpenMP waits
# passive (a spin loop is not work), and a gated figure that needs more than 3% more
# instructions than the baseline fails.
#
# The workload (ci/instr-gold.jsonl, 4 short prompts), for each configuration
#   b1-fp32 b1-int4 b4-fp32 b4-int4   batch 1 or 4 (concurrency = requests = max_batch_size),
#                                     KV fp32 or int4 (int4 with kv_quant_residual 0, so the
#                                     quantized path is what attention reads)
# is one `k25 bench` run: every request is submitted before the first step, so step 1 is
# the prefill of every prompt (and its first token) and steps 2..D+1 are D decode steps.
# Only the engine's steps are counted (--toggle-collect=k25_engine_step) and each step is
# its own profile part (--dump-after=k25_engine_step).  The gated figures:
#   prefill  instructions of step 1 / prompt tokens
#   decode   instructions of steps 2..D+1 / (D * batch) generated tokens
# less libc's allocator (malloc/free and their internals) and its memcpy/memmove/memset:
# their paths follow the heap's history and the buffers' alignment, which the harness's
# wall-clock work between steps shapes (measured: a few instructions per step move); all
# else in a step is the same for the same binary and input, to the instruction.  The split
# by function group (GEMM/GEMV, attention, KV, sampling, harness, libc, other) and the
# functions whose counts moved most are reported, not gated.
#
# Environment (all optional):
#   K25                  the candidate binary (default build/k25)
#   K25_BASE_BIN, BASE_REF   the baseline, as for ci/timing-gate.sh (ci/base-lib.sh)
#   K25_INSTR_OUT        output folder (default results/instr-gate): instr-gate.json, the
#                        profiles (A = baseline, B = candidate) and their per-function costs
#   K25_INSTR_TOLERANCE  percent (default 3)
#   K25_INSTR_CONFIGS    the configurations measured (default "b1-fp32 b1-int4 b4-fp32 b4-int4")
#   K25_INSTR_DECODE_STEPS  D (default 4)
#   K25_INSTR_JOBS       valgrind runs at once (default: nproc)
#   K25_INSTR_CACHE      0: measure the baseline again instead of reusing its cached counts
#                        ($K25_BASE_CACHE/instr/KEY: same binary, valgrind, OpenBLAS, workload;
#                        a fresh measurement is stored there either way)
#   K25_VALGRIND         the valgrind to run (default: valgrind on PATH)
#   K25_INSTR_ARCH       native: run the binaries as built; ARCH: build both sides with
#                        -march=ARCH (default x86-64-v3 on a CPU with AVX-512, else native)
#   K25_INSTR_GATE       `strict`: no valgrind or a binary valgrind cannot run fails (exit 2)
#                        instead of the loud fallback
#   K25_GATE_BIN_ENV     extra environment for the candidate's runs only (the proof tests:
#                        K25_EXTRA_K_FRACTION=0.04 for build/tests/k25-extra-work)
# Exit status: 0 pass (or the loud fallback), 1 more instructions than the tolerance,
# 2 unusable.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "instr-gate: takes no arguments (settings are environment variables; --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
K25=${K25:-build/k25}
OUT=${K25_INSTR_OUT:-results/instr-gate}
TOL=${K25_INSTR_TOLERANCE:-3}
CONFIGS=${K25_INSTR_CONFIGS:-b1-fp32 b1-int4 b4-fp32 b4-int4}
DECODE=${K25_INSTR_DECODE_STEPS:-4}
JOBS=${K25_INSTR_JOBS:-$(nproc)}
CACHE=${K25_BASE_CACHE:-build/base}
GOLD=ci/instr-gold.jsonl
VALGRIND=${K25_VALGRIND:-valgrind}
t_start=$(date +%s)

say() { echo "instr-gate: $*" >&2; }

fallback() {
  {
    echo
    echo "######################################################################"
    echo "# instr-gate: NO INSTRUCTION GATE: $*"
    echo "# Work is then gated only by the timing gate (ci/timing-gate.sh)."
    echo "######################################################################"
    echo
  } >&2
  mkdir -p "$OUT"
  jq -n --arg reason "$*" '{kind: "k25-instr-gate", ran: false, reason: $reason}' > "$OUT/instr-gate.json"
  [ "${K25_INSTR_GATE:-}" = strict ] && exit 2
  exit 0
}

case $TOL in ''|*[!0-9.]*) say "K25_INSTR_TOLERANCE must be a percentage (a number), not '$TOL'"; exit 2 ;; esac
case $DECODE in ''|*[!0-9]*|0) say "K25_INSTR_DECODE_STEPS must be a whole number >= 1, not '$DECODE'"; exit 2 ;; esac
for c in $CONFIGS; do
  case $c in b1-fp32|b1-int4|b4-fp32|b4-int4) ;;
    *) say "K25_INSTR_CONFIGS: unknown configuration '$c' (b1-fp32, b1-int4, b4-fp32, b4-int4)"; exit 2 ;; esac
done
[ -x "$K25" ] || { say "candidate binary $K25 not found (make first)"; exit 2; }
command -v "$VALGRIND" >/dev/null 2>&1 || fallback "$VALGRIND is not installed (ci/install-deps.sh installs valgrind)"

# valgrind (3.19 in Debian 12) decodes no AVX-512: on a CPU that has it, a -march=native build
# and OpenBLAS's SkylakeX kernels stop with SIGILL under valgrind. There the gate measures both
# sides built for x86-64-v3 (AVX2 + FMA + F16C, which valgrind decodes) in build-instr/, the
# baseline cached apart ($K25_BASE_CACHE-x86-64-v3), with OpenBLAS's Haswell kernels. A candidate
# outside build/ cannot be rebuilt and is run as it is. K25_INSTR_ARCH=native|ARCH overrides.
ARCH=${K25_INSTR_ARCH:-}
if [ -z "$ARCH" ]; then
  if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then ARCH=x86-64-v3; else ARCH=native; fi
fi
BLAS_ENV=""
if [ "$ARCH" != native ]; then
  export OPT="-O3 -march=$ARCH"
  CACHE=$CACHE-$ARCH
  BLAS_ENV="OPENBLAS_CORETYPE=Haswell"
  case $K25 in
    build/*)
      target=build-instr/${K25#build/}
      say "this CPU has AVX-512, which valgrind cannot run: building $target with -march=$ARCH (the baseline is built the same way)"
      if ! make --no-print-directory -j"$(nproc)" BUILD=build-instr "$target" > "build-instr.log" 2>&1; then
        tail -n 20 build-instr.log >&2
        say "building $target failed (log above, build-instr.log)"
        exit 2
      fi
      rm -f build-instr.log
      K25=$target ;;
    *) say "candidate $K25 is not under build/, so it is run as built (-march=$ARCH not applied)" ;;
  esac
fi
export BLAS_ENV

. ci/base-lib.sh
k25_resolve_baseline

rm -rf "$OUT"
mkdir -p "$OUT"

# One configuration of one binary under callgrind into DIR: the step profiles DIR/cg.N, their
# per-function costs DIR/cg.N.tsv (ci/callgrind-costs.awk) and the run's JSON.
measure_one() {
  local bin=$1 dir=$2 cfg=$3 envs=$4
  local b=${cfg%%-*} kv=${cfg#*-}
  b=${b#b}
  local extra=()
  [ "$kv" = int4 ] && extra=(--kv-quant-residual 0)
  mkdir -p "$dir"
  # env -i: nothing of the caller's environment (a test knob, OMP settings) reaches the runs
  if ! env -i PATH="$PATH" HOME="${HOME:-/tmp}" OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $BLAS_ENV $envs \
      "$VALGRIND" --tool=callgrind --dump-instr=no --collect-atstart=no --toggle-collect=k25_engine_step \
      --dump-after=k25_engine_step --callgrind-out-file="$dir/cg" \
      "$bin" bench --dataset "$GOLD" --model tiny --concurrency "$b" --requests "$b" --max-batch-size "$b" \
      --warmup 0 --seed 0 --kv-cache-dtype "$kv" "${extra[@]}" --decode-max-tokens $((DECODE + 1)) \
      --queue-timeout-ms 0 --threads 1 --quiet --out "$dir/run.h5" --json "$dir/run.json" > "$dir/log" 2>&1; then
    echo "FAILED" > "$dir/status"
    return 0
  fi
  for f in "$dir"/cg.[0-9]*; do
    case $f in *.tsv) continue ;; esac
    awk -f ci/callgrind-costs.awk "$f" > "$f.tsv"
  done
  echo "ok" > "$dir/status"
}
export -f measure_one
export GOLD DECODE VALGRIND

# The baseline's counts are a property of its binary, valgrind, OpenBLAS and the workload:
# cached under that key, they are measured once per machine.
blas_lib=$(ldd "$base_bin" 2>/dev/null | awk '/libopenblas/ {print $3; exit}')
key=$( { sha256sum "$base_bin" | cut -d' ' -f1; "$VALGRIND" --version; [ -n "$blas_lib" ] && sha256sum "$(readlink -f "$blas_lib")";
         sha256sum "$GOLD" ci/callgrind-costs.awk | cut -d' ' -f1; echo "$DECODE"; } | sha256sum | cut -c1-16)
base_cache=$CACHE/instr/$key
jobs=()
for c in $CONFIGS; do
  if [ "${K25_INSTR_CACHE:-1}" != 0 ] && [ -f "$base_cache/$c/status" ] && [ "$(cat "$base_cache/$c/status")" = ok ]; then
    mkdir -p "$OUT/A"
    cp -r "$base_cache/$c" "$OUT/A/$c"
  else
    jobs+=("$base_bin|$OUT/A/$c|$c|")
  fi
  jobs+=("$K25|$OUT/B/$c|$c|${K25_GATE_BIN_ENV:-}")
done
say "A = baseline ($base_desc), B = candidate ($K25): ${#jobs[@]} callgrind runs ($JOBS at a time; configurations $CONFIGS, $DECODE decode steps)"
printf '%s\n' "${jobs[@]}" | xargs -d '\n' -P "$JOBS" -I{} bash -c 'IFS="|" read -r b d c e <<< "$1"; measure_one "$b" "$d" "$c" "$e"' _ {}

for side in A B; do
  for c in $CONFIGS; do
    d=$OUT/$side/$c
    if [ "$(cat "$d/status" 2>/dev/null)" != ok ]; then
      tail -n 15 "$d/log" >&2 || true
      if grep -q "unhandled instruction\|Illegal instruction\|SIGILL" "$d/log" 2>/dev/null; then
        fallback "valgrind cannot run $side's binary (an instruction it does not know, e.g. AVX-512 from -march=native: build with PORTABLE=1)"
      fi
      say "the $side run of $c failed under valgrind (log above: $d/log)"
      exit 2
    fi
    n=$(ls "$d"/cg.[0-9]*.tsv 2>/dev/null | wc -l)
    if [ "$n" -ne $((DECODE + 1)) ]; then
      say "$side $c: $n engine steps, expected $((DECODE + 1)) (one prefill step, $DECODE decode steps): the workload did not run as designed"
      exit 2
    fi
  done
done
# the baseline's counts into the cache (not the candidate's: it changes with every commit)
for c in $CONFIGS; do
  if [ ! -f "$base_cache/$c/status" ]; then
    mkdir -p "$base_cache"
    rm -rf "$base_cache/$c.tmp"
    cp -r "$OUT/A/$c" "$base_cache/$c.tmp" && mv "$base_cache/$c.tmp" "$base_cache/$c"
  fi
done

# Function -> group, by source file first, then by name (OpenBLAS has no line info: "???").
classify='
function group(fn, fl) {
  if (fl ~ /\/malloc\// || fn ~ /^(malloc|free|calloc|realloc|cfree|_int_|malloc_|unlink_chunk|alloc_perturb|tcache|sysmalloc|systrim|_mid_memalign|aligned_alloc|posix_memalign|memalign|__libc_(malloc|free|calloc|realloc|memalign))/ || fn ~ /^__(memcpy|memmove|mempcpy|memset|bzero)|^(memcpy|memmove|memset)$/) return "libc"
  if (fl ~ /(^|\/)harness\//) return "harness"
  if (fl ~ /engine\/(sample|tokcheck)\.c/ || fn ~ /^k25_(sample|tok_margin)/) return "sampling"
  if (fl ~ /engine\/(kvcache|kvquant|kvcompress|kvtier|prefix|half)\.[ch]/ || fn ~ /^k25_(kv|prefix|fp32_to_fp16|fp16_to_fp32)/) return "KV"
  if (fl ~ /engine\/(attention|attn_impl)\.c|engine\/attn\.h|baselines\// || fn ~ /attn|attention|softmax|decode_tile|load_queries|add_logc|flash|naive/) return "attention"
  if (fl ~ /engine\/(gemv|wquant)\.c/ || fn ~ /gemm|gemv|cblas|^rows_/ || (fl == "???" && fn ~ /gemm|gemv|blas|copy|beta|kernel/)) return "GEMM/GEMV"
  return "other"
}'
# rows: side config phase group function self
{
  for side in A B; do
    for c in $CONFIGS; do
      for f in "$OUT/$side/$c"/cg.[0-9]*.tsv; do
        part=${f%.tsv}; part=${part##*.}
        phase=decode; [ "$part" = 1 ] && phase=prefill
        awk -F'\t' -v side="$side" -v cfg="$c" -v phase="$phase" "$classify"'
          { print side "\t" cfg "\t" phase "\t" group($1, $2) "\t" $1 "\t" $3 }' "$f"
      done
    done
  done
} > "$OUT/costs.tsv"

# tokens per side and configuration: prompt tokens (prefill) and D * batch (decode)
{
  for side in A B; do
    for c in $CONFIGS; do
      b=${c%%-*}; b=${b#b}
      jq -r --arg s "$side" --arg c "$c" --argjson d $((DECODE * b)) \
        '[$s, $c, .summary.input_tokens, $d] | @tsv' "$OUT/$side/$c/run.json"
    done
  done
} > "$OUT/tokens.tsv"
if ! awk -F'\t' '{t[$2] = t[$2] "," $3} END {for (c in t) { split(substr(t[c], 2), v, ","); if (v[1] != v[2]) exit 1 }}' "$OUT/tokens.tsv"; then
  say "baseline and candidate ran prompts of different lengths (tokens.tsv): the workloads differ, cannot compare"
  exit 2
fi

# figures: config phase A B change% fails
awk -F'\t' -v tol="$TOL" '
  FNR == NR { tok[$1, $2, "prefill"] = $3; tok[$1, $2, "decode"] = $4; next }
  $4 != "libc" { n[$1, $2, $3] += $6; key[$2 "\t" $3] = 1 }
  END {
    for (k in key) {
      split(k, p, "\t")
      a = n["A", p[1], p[2]] / tok["A", p[1], p[2]]
      b = n["B", p[1], p[2]] / tok["B", p[1], p[2]]
      ch = a > 0 ? 100 * (b / a - 1) : 0
      printf "%s\t%s\t%.0f\t%.0f\t%.3f\t%d\n", p[1], p[2], a, b, ch, (ch > tol ? 1 : 0)
    }
  }' "$OUT/tokens.tsv" "$OUT/costs.tsv" | sort -k1,1 -k2,2r > "$OUT/figures.tsv"

# groups: phase group A B (instructions per token, summed over the configurations' tokens)
awk -F'\t' '
  FNR == NR { tok[$1, "prefill"] += $3; tok[$1, "decode"] += $4; next }
  { n[$1, $3, $4] += $6; key[$3 "\t" $4] = 1 }
  END { for (k in key) { split(k, p, "\t");
        printf "%s\t%s\t%.0f\t%.0f\n", p[1], p[2], n["A", p[1], p[2]] / tok["A", p[1]], n["B", p[1], p[2]] / tok["B", p[1]] } }' \
  "$OUT/tokens.tsv" "$OUT/costs.tsv" | sort -k1,1r -k3,3nr > "$OUT/groups.tsv"

# functions whose counts moved most (all configurations and phases): function group A B delta
awk -F'\t' '{ n[$1, $5] += $6; g[$5] = $4; f[$5] = 1 }
  END { for (x in f) { d = n["B", x] - n["A", x]; if (d != 0) printf "%s\t%s\t%.0f\t%.0f\t%.0f\n", x, g[x], n["A", x], n["B", x], d } }' \
  "$OUT/costs.tsv" | sort -t$'\t' -k5,5 -g | awk -F'\t' '{ d = $5 < 0 ? -$5 : $5; print d "\t" $0 }' | sort -t$'\t' -k1,1gr |
  cut -f2- | head -n 12 > "$OUT/moved.tsv"

n_fail=$(awk -F'\t' '$6 == 1' "$OUT/figures.tsv" | wc -l)
elapsed=$(( $(date +%s) - t_start ))

echo
echo "instr-gate: instructions per token, A = baseline ($base_desc), B = candidate ($K25)"
echo "  (tiny, 1 thread, callgrind; engine steps less libc's allocator and mem* copies; tolerance +$TOL%)"
printf '  %-10s %-8s %14s %14s %10s\n' config phase baseline candidate change
awk -F'\t' '{ printf "  %-10s %-8s %14s %14s %+9.2f%% %s\n", $1, $2, $3, $4, $5, $6 ? "* MORE" : "" }' "$OUT/figures.tsv"
echo
echo "  by function group (per token, all configurations; report only):"
printf '  %-8s %-10s %14s %14s %10s\n' phase group baseline candidate change
awk -F'\t' '{ ch = $3 > 0 ? sprintf("%+.2f%%", 100 * ($4 / $3 - 1)) : ($4 > 0 ? "new" : "-");
              printf "  %-8s %-10s %14s %14s %10s\n", $1, $2, $3, $4, ch }' "$OUT/groups.tsv"
echo
if [ -s "$OUT/moved.tsv" ]; then
  echo "  functions whose counts moved most (instructions, all runs):"
  awk -F'\t' '{ ch = $3 > 0 ? sprintf("%+.1f%%", 100 * ($5 / $3)) : "new";
                printf "  %+14s  %8s  %-10s %s\n", $5, ch, $2, $1 }' "$OUT/moved.tsv"
else
  echo "  no function's count moved: the same instructions, to the last one"
fi
echo

# JSON for jq
jq -n --arg base "$base_desc" --arg cand "$K25" --argjson tol "$TOL" --argjson d "$DECODE" --argjson s "$elapsed" \
  --rawfile fig "$OUT/figures.tsv" --rawfile grp "$OUT/groups.tsv" --rawfile mv "$OUT/moved.tsv" '
  def rows($t): $t | split("\n") | map(select(length > 0) | split("\t"));
  {kind: "k25-instr-gate", ran: true, baseline_build: $base, candidate: $cand, tolerance_pct: $tol,
   decode_steps: $d, seconds: $s,
   figures: [rows($fig)[] | {config: .[0], phase: .[1], baseline: (.[2] | tonumber), candidate: (.[3] | tonumber),
                             change_pct: (.[4] | tonumber), regression: (.[5] == "1")}],
   groups: [rows($grp)[] | {phase: .[0], group: .[1], baseline: (.[2] | tonumber), candidate: (.[3] | tonumber)}],
   moved: [rows($mv)[] | {function: .[0], group: .[1], baseline: (.[2] | tonumber), candidate: (.[3] | tonumber),
                          delta: (.[4] | tonumber)}]}
  | .regressions = ([.figures[] | select(.regression)] | length) | .pass = (.regressions == 0)' > "$OUT/instr-gate.json"

if [ "$n_fail" -gt 0 ]; then
  say "FAILED: $n_fail figure(s) need more than $TOL% more instructions than $base_desc (marked *; functions above)."
  say "If the extra work is deliberate, re-baseline: make baselines, commit with the reason (docs/gates.md)."
  say "($elapsed s)"
  exit 1
fi
say "passed: no figure needs more than $TOL% more instructions than $base_desc ($elapsed s)"
exit 0
