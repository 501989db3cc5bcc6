#!/usr/bin/env bash
# Runs each CMocka test executable given on the command line, shows its
# output (cmocka's summary lines included) and fails if any failed.
#
# The numerics tests (test_engine, test_kvcompress, test_attention,
# test_backend_ops) run again under every OpenBLAS kernel set this CPU
# supports among SkylakeX, Haswell and Prescott (OPENBLAS_CORETYPE per
# run): each rounds GEMMs in its own order, so a test that claims more
# identity (or a tighter tolerance) than the arithmetic gives fails here
# rather than on the next machine (docs/engine.md, the token-identity
# rule).  A kernel set the CPU lacks is skipped with the
# reason.  Those extra runs set K25_QUICK=1, which drops only long cases
# that do not depend on the kernels (two of the three kept-fraction
# ratios, the 5000-token decode-split size: 2500 still splits); every
# identity and tolerance check still runs, and the default run before them
# is the full one.  K25_QUICK=1 (make test-quick, make asan) runs the
# default only.
#
# Each run has a time limit, K25_TEST_TIMEOUT seconds (default 900; 0: none)
# through coreutils timeout (SIGTERM to the test's process group, SIGKILL 30 s
# later): a hung test fails naming itself ("TIMEOUT test_x after N s")
# instead of eating CI's limit.  At the end, a table of every run's wall
# time (each core-type rerun on its own line) and the suite's total;
# docs/testing.md says what the suite costs.
set -u
failed=()
labels=()
secs=()
limit=${K25_TEST_TIMEOUT:-900}
case $limit in
  ''|*[!0-9]*) echo "run-tests.sh: K25_TEST_TIMEOUT=$limit: expected whole seconds (0: no limit)" >&2; exit 2 ;;
esac
suite_start=$(date +%s.%N)
n_exe=$#
child=
interrupted=
on_signal() { # forwards SIGINT/SIGTERM to the running test; the suite stops after it
  interrupted=1
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
}
trap on_signal INT TERM
numerics=" test_engine test_kvcompress test_attention test_backend_ops "
coretypes=(SkylakeX Haswell Prescott)
quick=0
[ -n "${K25_QUICK:-}" ] && [ "${K25_QUICK}" != 0 ] && quick=1

flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2)
has_flags() { # has_flags FLAG... : all present in /proc/cpuinfo
  local f
  for f in "$@"; do
    [[ " $flags " == *" $f "* ]] || return 1
  done
}
# Empty when the CPU runs coretype $1, else why not.
coretype_missing() {
  [ -n "$flags" ] || { echo "no x86 CPU flags in /proc/cpuinfo"; return; }
  case $1 in
    SkylakeX) has_flags avx512f avx512bw avx512vl || echo "needs avx512f, avx512bw and avx512vl" ;;
    Haswell) has_flags avx2 fma || echo "needs avx2 and fma" ;;
    Prescott) has_flags pni || echo "needs sse3 (pni)" ;;
  esac
}

run_one() { # run_one LABEL BINARY [VAR=VALUE]
  local label=$1 bin=$2 start rc dt
  shift 2
  echo "=== $label"
  start=$(date +%s.%N)
  # in the background and waited for, so that a Ctrl-C here reaches the test through on_signal
  # (timeout runs it in a process group of its own, outside the terminal's)
  if [ "$limit" = 0 ]; then
    env "$@" "$bin" &
  else
    timeout --kill-after=30 "$limit" env "$@" "$bin" &
  fi
  child=$!
  while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break # still running: the wait was cut short by a signal
  done
  child=
  dt=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$limit" != 0 ] && { [ $rc = 124 ] || { [ $rc = 137 ] && awk -v d="$dt" -v l="$limit" 'BEGIN { exit !(d >= l) }'; }; }; then
    echo "TIMEOUT $label after $limit s (K25_TEST_TIMEOUT)"
    failed+=("$label: TIMEOUT after $limit s")
  elif [ $rc != 0 ]; then
    failed+=("$label")
  fi
  labels+=("$label")
  secs+=("$dt")
  echo "--- $label: ${dt}s"
  if [ -n "$interrupted" ]; then
    print_times
    echo "run-tests.sh: interrupted during $label" >&2
    exit 130
  fi
}

print_times() { # the table of wall times and the suite's total
  local i total n=$n_exe
  total=$(awk -v a="$suite_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo
  echo "Test wall times (seconds):"
  for i in "${!labels[@]}"; do
    printf '  %8s  %s\n' "${secs[$i]}" "${labels[$i]}"
  done
  printf '  %8s  %s\n' "$total" "total (${#labels[@]} runs of $n executables)"
}

for t in "$@"; do
  name=$(basename "$t")
  run_one "$name" "$t"
  [[ "$numerics" == *" $name "* ]] || continue
  if [ "$quick" = 1 ]; then
    echo "=== $name: other OpenBLAS core types skipped (K25_QUICK)"
    continue
  fi
  for ct in "${coretypes[@]}"; do
    why=$(coretype_missing "$ct")
    if [ -n "$why" ]; then
      echo "=== $name (OPENBLAS_CORETYPE=$ct): skipped, this CPU lacks it ($why)"
      continue
    fi
    run_one "$name (OPENBLAS_CORETYPE=$ct)" "$t" OPENBLAS_CORETYPE="$ct" K25_QUICK=1
  done
done
print_times
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED test executables:$(printf ' [%s]' "${failed[@]}")" >&2
  exit 1
fi
if [ "$quick" = 1 ]; then
  echo "All $# test executables passed."
else
  echo "All $# test executables passed (the numerics tests also under each supported OpenBLAS core type)."
fi
