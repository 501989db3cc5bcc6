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
set -u
failed=()
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
  local label=$1 bin=$2 start
  shift 2
  echo "=== $label"
  start=$(date +%s)
  if ! env "$@" "$bin"; then failed+=("$label"); fi
  echo "--- $label: $(( $(date +%s) - start ))s"
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
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED test executables:$(printf ' [%s]' "${failed[@]}")" >&2
  exit 1
fi
if [ "$quick" = 1 ]; then
  echo "All $# test executables passed."
else
  echo "All $# test executables passed (the numerics tests also under each supported OpenBLAS core type)."
fi
