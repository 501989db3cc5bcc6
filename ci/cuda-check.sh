#!/usr/bin/env bash
# cuda-check.sh FILE.cu... - the CUDA backend's compile-only check (CI; no GPU needed).
#
# Every .cu is compiled for sm_80 and for sm_90 (one nvcc run each, -c to /dev/null-like
# temporaries) with the build's warning flags (host compiler warnings as errors,
# -Werror all-warnings) and -Xptxas -v.  ptxas prints, for every kernel it assembles,
#     ptxas info    : Compiling entry function '_Z...' for 'sm_80'
#     ...   N bytes stack frame, S bytes spill stores, L bytes spill loads
# and this script fails when any kernel reports S or L above 0 (a register spill on the
# hot path: attention, GEMV, KV writes, norms), naming the kernel and the architecture.
# Prints one line per (file, arch) with the kernel count and the seconds it took, then a
# total.  Without nvcc (NVCC unset and none on PATH or in /usr/local/cuda) it says so and
# exits 0: CPU-only CI machines skip it.
#
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), NVCCFLAGS (the
# Makefile's: -std, -O, warnings, -I).  Exit status 0 when everything compiles clean with
# no spills, 1 otherwise.
set -u
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ] && ! command -v "$NVCC" >/dev/null 2>&1; then
    echo "cuda-check: nvcc not found: CUDA compile check skipped"
    exit 0
fi
: "${NVCCFLAGS:=-std=c++17 -O3 -lineinfo -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings -Iengine/cuda}"
[ $# -gt 0 ] || { echo "cuda-check: no .cu files given" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/k25-cuda-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
t_all0=$(date +%s.%N)
n_kernels=0
for f in "$@"; do
    for arch in 80 90; do
        log="$tmp/$(basename "$f" .cu).$arch.log"
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086  # NVCCFLAGS is a list of flags
        if ! "$NVCC" $NVCCFLAGS -gencode "arch=compute_$arch,code=sm_$arch" -Xptxas -v -c "$f" \
                -o "$tmp/out.o" >"$log" 2>&1; then
            echo "cuda-check: FAIL $f sm_$arch: does not compile cleanly:"
            sed 's/^/    /' "$log"
            fail=1
            continue
        fi
        t1=$(date +%s.%N)
        # kernel name from "Compiling entry function 'NAME'", spills from the next stack-frame line
        res=$(awk -v arch="$arch" -v file="$f" '
            /Compiling entry function/ { match($0, /'\''[^'\'']+'\''/); k = substr($0, RSTART + 1, RLENGTH - 2); n++ }
            /spill stores/ {
                split($0, w, " ")
                for (i = 1; i <= length(w); i++) {
                    if (w[i] == "spill" && w[i + 1] == "stores,") st = w[i - 2]
                    if (w[i] == "spill" && w[i + 1] == "loads") ld = w[i - 2]
                }
                if (k != "" && (st + 0 > 0 || ld + 0 > 0)) { printf "SPILL %s sm_%s %s: %s bytes spill stores, %s bytes spill loads\n", file, arch, k, st, ld }
                k = ""
            }
            END { printf "KERNELS %d\n", n }' "$log")
        nk=$(echo "$res" | awk '/^KERNELS/ { print $2 }')
        n_kernels=$((n_kernels + nk))
        ns=$(echo "$res" | grep -c '^SPILL')
        if [ "$ns" -gt 0 ]; then
            echo "$res" | grep '^SPILL' | sed 's/^SPILL /cuda-check: FAIL register spill: /'
            fail=1
        fi
        if grep -qi 'warning' "$log"; then
            echo "cuda-check: FAIL $f sm_$arch: warnings:"
            grep -i 'warning' "$log" | sed 's/^/    /'
            fail=1
        fi
        printf 'cuda-check: %-32s sm_%s %3d kernels, %d spilling, %5.1f s\n' "$f" "$arch" "$nk" "$ns" \
            "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
    done
done
t_all1=$(date +%s.%N)
printf 'cuda-check: %d files x 2 architectures, %d kernel builds, %.1f s in all: %s\n' "$#" "$n_kernels" \
    "$(awk -v a="$t_all0" -v b="$t_all1" 'BEGIN { print b - a }')" "$([ $fail = 0 ] && echo ok || echo FAILED)"
exit $fail
