#!/usr/bin/env bash
# tests/fuzz/smoke.sh BUILD SECONDS [TARGET...] - runs each libFuzzer target
# (BUILD/fuzz/fuzz_TARGET, from `make fuzz`) for SECONDS on seed corpora made
# from the files the repository ships; new inputs go to BUILD/corpus/TARGET
# (kept between runs), crashes to BUILD/crash-TARGET-*.  Exit 1 when any
# target finds something (a crash, a sanitizer report, a leak, a >10 s input,
# >2 GB of memory).  Run from the repository root (`make fuzz-smoke`).
set -uo pipefail
B=${1:-build-fuzz}
S=${2:-30}
shift 2 2>/dev/null || shift $#
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(trace gold filter config sweep_spec sla_policy safetensors tokenizer serve_request)

seed_dir() { # TARGET: fills $B/seeds/TARGET from shipped files
  local t=$1 d=$B/seeds/$1 i=0 f
  rm -rf "$d"
  mkdir -p "$d"
  case $t in
    trace) cp tests/fuzz/seeds/trace/* tests/data/corrupt/*.h5 tests/data/report-attn.h5 "$d"/ 2>/dev/null
           for f in baselines/results/ci-smoke/points/*/rep-0.h5; do [ -f "$f" ] && cp "$f" "$d/base-$((i++)).h5"; done ;;
    gold) cp datasets/gold/*.jsonl "$d"/ ;;
    filter) cp tests/fuzz/seeds/filter/* "$d"/ ;;
    serve_request) cp tests/fuzz/seeds/serve/* "$d"/ ;;
    config) for f in baselines/results/ci-smoke/points/*/config.yaml; do cp "$f" "$d/c-$((i++)).yaml"; done ;;
    sweep_spec) cp sweeps/*.yaml "$d"/ ;;
    sla_policy) { printf '\0'; cat reports/sla-example.yaml; } > "$d/sla.yaml"
                for f in ci/gate-policy*.yaml; do { printf '\1'; cat "$f"; } > "$d/policy-$((i++)).yaml"; done ;;
    safetensors) K25_FUZZ_WRITE_SEED="$d/model.safetensors" "$B/fuzz/fuzz_safetensors" ;;
    tokenizer) K25_FUZZ_WRITE_SEED="$d" "$B/fuzz/fuzz_tokenizer" ;;
  esac
}

# libhdf5's own leaks and overreads on damaged files are not ours to find (asan.supp says which)
export LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="suppressions=$PWD/tests/fuzz/asan.supp${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fail=0
for t in "${targets[@]}"; do
  bin=$B/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then echo "fuzz-smoke: $bin missing (make fuzz)" >&2; fail=1; continue; fi
  seed_dir "$t"
  mkdir -p "$B/corpus/$t"
  start=$(date +%s)
  if "$bin" -max_total_time="$S" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$B/crash-$t-" "$B/corpus/$t" "$B/seeds/$t" > "$B/fuzz-$t.log" 2>&1; then
    echo "fuzz-smoke: $t ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$B/fuzz-$t.log" | grep -o '[0-9]*$') runs in $(( $(date +%s) - start )) s)"
  else
    echo "fuzz-smoke: $t FOUND SOMETHING (log: $B/fuzz-$t.log):" >&2
    grep -E 'ERROR|SUMMARY|Test unit written' "$B/fuzz-$t.log" | head -8 >&2
    fail=1
  fi
done
rm -rf /dev/shm/k25fuzz-* 2>/dev/null
exit $fail
