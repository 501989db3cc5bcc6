#!/usr/bin/env bash
# device-check.sh - the CUDA backend's sign-off run on a GPU machine: one run of at most
# 5 minutes, prepared on a machine with nvcc and the project's libraries, run on a fresh GPU
# machine that has the CUDA 13 runtime, cuBLAS and (in its Python packages) cuDNN, but no
# OpenBLAS, HDF5, jansson or libyaml and no package registry.
#
#   ci/device-check.sh pack [DIR]   (here) make CUDA=1 PORTABLE=1 into build-device/, then
#                                   DIR/bundle.tar.xz (default DIR: device-bundle, git-ignored):
#                                   bin/ k25, test_backend_ops, test_cuda_host (stripped);
#                                   lib/ every shared library they need except the CUDA ones
#                                   and glibc; glibc/ glibc and its loader (used only when the
#                                   machine's own glibc is too old for the binaries).  Prints the
#                                   size (the carried folder and the working tree stay < 64 MiB).
#   ci/device-check.sh run [DIR]    (there) unpacks the bundle, finds cuBLAS (CUDA_HOME, default
#                                   /usr/local/cuda) and cuDNN (nvidia-cudnn-cu13 under a Python
#                                   site-packages), and runs, each under a time limit:
#       1. k25 device-probe: the GPU's bf16 GEMM peak and memory bandwidth, measured now;
#       2. test_cuda_host: the kernels' host-side arithmetic (also runs in every CPU build);
#       3. test_backend_ops: every op of every built backend against the double reference
#          (CUDA: every op and dtype it runs), argmax, and CPU/CUDA greedy-token parity on
#          tiny, small and a generated HF-style folder under the token-identity rule (fp32 KV,
#          fp32 weights, no TF32);
#       4. k25 run --backend cuda on llama3-8b dummy weights in bf16 (cuda_gemm fast), fp16 KV,
#          8K and 32K prompts, batch 1; k25 bench in process at batch 32 with 8K prompts (32K x 32
#          is not run: its fp16 KV alone is 128 GiB);
#     then prints one table: each figure beside the probe's peak and bandwidth, also written to
#     $OUT/device-check.txt with every log under $OUT (DIR/results when OUT is unset).
#
# The device tool runs it as: carry ["device-bundle"], command "ci/device-check.sh run".
# DEVICE_CHECK_MODEL (default llama3-8b) swaps the model of step 4, for a dry run of the script
# on a machine without a GPU (DEVICE_CHECK_MODEL=tiny: every CUDA step then fails or skips by name).
# Exit status: 0 every step passed, 1 a step failed or timed out (the table says which),
# 2 bad usage or a bundle that cannot be made/found.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
dir=${2:-device-bundle}

die() { echo "device-check: $*" >&2; exit 2; }

# ------------------------------------------------------------------------- pack (here)
pack() {
    local build=build-device
    make -j2 CUDA=1 PORTABLE=1 BUILD=$build $build/k25 $build/tests/test_backend_ops \
        $build/tests/test_cuda_host >&2 || die "the CUDA build failed"
    local stage
    stage=$(mktemp -d "${TMPDIR:-/tmp}/k25-bundle.XXXXXX")
    mkdir -p "$stage/bin" "$stage/lib" "$stage/glibc"
    for b in $build/k25 $build/tests/test_backend_ops $build/tests/test_cuda_host; do
        cp "$b" "$stage/bin/" && strip --strip-unneeded "$stage/bin/$(basename "$b")"
    done
    # shared libraries: the CUDA ones come from the GPU machine, glibc goes aside
    ldd "$stage"/bin/* | awk '/=>/ && $3 ~ /^\// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u |
        while read -r so; do
            case "$(basename "$so")" in
                libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libnvidia*) ;;
                libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*)
                    cp -L "$so" "$stage/glibc/" ;;
                *) cp -L "$so" "$stage/lib/" && strip --strip-unneeded "$stage/lib/$(basename "$so")" 2>/dev/null ;;
            esac
        done
    [ -n "$(ls "$stage/glibc" | grep ld-linux)" ] || die "no ld-linux found by ldd"
    git rev-parse HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"
    mkdir -p "$dir"
    tar -C "$stage" -cf - . | xz -6 -T0 > "$dir/bundle.tar.xz.tmp" && mv "$dir/bundle.tar.xz.tmp" "$dir/bundle.tar.xz" ||
        die "cannot write $dir/bundle.tar.xz"
    local raw packed tree
    raw=$(du -sb "$stage" | awk '{ printf "%.1f", $1 / 1048576 }')
    packed=$(du -sb "$dir" | awk '{ printf "%.1f", $1 / 1048576 }')
    tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{ printf "%.1f", $1 / 1048576 }')
    rm -rf "$stage"
    echo "device-check: $dir/bundle.tar.xz: $packed MiB ($raw MiB unpacked); working tree $tree MiB"
}

# -------------------------------------------------------------------------- run (there)
out=""
table=""
fails=0

# step NAME LIMIT_S CMD...: runs CMD under a time limit, its output in $out/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout --signal=KILL "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc = 0 ]; then
        st=ok
    elif [ $rc = 137 ] || [ $rc = 124 ]; then
        st="TIMEOUT(${limit}s)"; fails=$((fails + 1))
    else
        st="FAIL(rc=$rc)"; fails=$((fails + 1))
    fi
    echo "device-check: $name: $st in ${secs}s" >&2
    eval "st_$name=\$st; secs_$name=\$secs"
}

row() { table+=$(printf '%-34s %-14s %-34s %s' "$1" "$2" "$3" "$4")$'\n'; }

find_cudnn() {
    local d
    for py in python3 python; do
        command -v $py >/dev/null 2>&1 || continue
        d=$($py - <<'PY' 2>/dev/null
import importlib.util, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for r in roots:
    p = os.path.join(r, "nvidia", "cudnn", "lib")
    if os.path.isdir(p):
        print(p); break
PY
)
        [ -n "$d" ] && { echo "$d"; return; }
    done
    find /usr /opt /root /home -maxdepth 9 -type d -path '*site-packages/nvidia/cudnn/lib' 2>/dev/null | head -1
}

run() {
    [ -f "$dir/bundle.tar.xz" ] || die "$dir/bundle.tar.xz not found (ci/device-check.sh pack, here first)"
    out=${OUT:-$dir/results}
    mkdir -p "$out" || die "cannot make $out"
    local root
    root=$(mktemp -d "${TMPDIR:-/tmp}/k25-device.XXXXXX")
    xz -dc "$dir/bundle.tar.xz" | tar -C "$root" -xf - || die "cannot unpack the bundle"
    local cuda=${CUDA_HOME:-/usr/local/cuda} cudnn
    cudnn=$(find_cudnn)
    [ -n "$cudnn" ] || echo "device-check: cuDNN not found in any site-packages (nvidia-cudnn-cu13)" >&2
    export LD_LIBRARY_PATH="$root/lib:${cudnn:+$cudnn:}$cuda/lib64:$cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local K25="$root/bin/k25" pre=()
    if ! "$K25" --help >/dev/null 2>&1; then # the machine's glibc is older than the build's: bring ours
        local ld
        ld=$(ls "$root"/glibc/ld-linux* | head -1)
        pre=("$ld" --library-path "$root/glibc:$LD_LIBRARY_PATH")
        "${pre[@]}" "$K25" --help >/dev/null 2>&1 || {
            "${pre[@]}" "$K25" --help 2>&1 | head -5 >&2
            die "k25 does not start here (libraries: ldd $K25)"
        }
    fi
    if [ ${#pre[@]} -gt 0 ]; then # run everything through the bundled loader; no BLAS re-exec under it
        export K25_NO_BLAS_REEXEC=1
        for b in k25 test_backend_ops test_cuda_host; do
            printf '#!/bin/sh\nexec %q --library-path %q %q "$@"\n' "${pre[0]}" "${pre[2]}" "$root/bin/$b" > "$root/$b"
            chmod +x "$root/$b"
        done
    else
        for b in k25 test_backend_ops test_cuda_host; do ln -s "$root/bin/$b" "$root/$b"; done
    fi
    K25="$root/k25" # the tests run it too (test_cuda_host: the CLI path)
    { echo "commit $(cat "$root/COMMIT")"; nvidia-smi -L 2>/dev/null; nvidia-smi --query-gpu=driver_version,memory.total --format=csv 2>/dev/null
      echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } > "$out/machine.txt"

    step probe 90 "$K25" device-probe --backend cuda --json
    local tflops=0 bw=0 devname="?"
    if [ "$st_probe" = ok ]; then
        tflops=$(sed -n 's/.*"bf16_gemm_tflops":\([0-9.]*\).*/\1/p' "$out/probe.log")
        bw=$(sed -n 's/.*"mem_bw_gbs":\([0-9.]*\).*/\1/p' "$out/probe.log")
        devname=$(sed -n 's/.*"device":"\([^"]*\)".*/\1/p' "$out/probe.log")
    fi
    step host 60 env K25="$K25" "$root/test_cuda_host"
    step ops 150 env K25="$K25" "$root/test_backend_ops"
    # serving configuration: bf16 tensor-core GEMMs (cuda_gemm fast), fp16 KV
    local model=${DEVICE_CHECK_MODEL:-llama3-8b}
    local common=(--backend cuda --model "$model" --weight-dtype bf16 --kv-cache-dtype fp16 --cuda-gemm fast
                  --kv-compression-ratio 1 --prompt "The quick brown fox jumps over the lazy dog. "
                  --max-tokens 32 --json --quiet)
    step run8k 100 "$K25" run "${common[@]}" --prompt-len 8192
    step run32k 160 "$K25" run "${common[@]}" --prompt-len 32768
    # batch 32 (decode with 32 sequences in the step): k25 bench in process, 32 requests of 8K prompts
    # at once.  32K x 32 is not run: its fp16 KV alone (llama3-8b: 128 KiB a token) is 128 GiB
    step bench32 150 "$K25" bench --backend cuda --model "$model" --weight-dtype bf16 --kv-cache-dtype fp16 \
        --cuda-gemm fast --kv-compression-ratio 1 --dataset random:input=8192,output=32 --ignore-eos \
        --concurrency 32 --max-batch-size 32 --requests 32 --out "$out/bench32.h5" --save-result --json "$out/bench32.json" --quiet

    if [ "$st_probe" = ok ]; then
        row "device ($devname)" ok "bf16 GEMM ${tflops} TFLOP/s" "memory ${bw} GB/s (the references)"
    else
        row "device" "$st_probe" "$(tail -1 "$out/probe.log" | cut -c1-60)" ""
    fi
    row "test_cuda_host" "$st_host" "$(grep -c '^\[       OK \]' "$out/host.log") tests passed" ""
    local parity
    parity=$(grep -E 'cuda .* vs cpu' "$out/ops.log" | sed 's/^ *//' | tr '\n' ';')
    row "test_backend_ops (cuda)" "$st_ops" "$(grep -c '^\[       OK \] cuda' "$out/ops.log") cuda checks ok, $(grep '^\[  FAILED  \] cuda' "$out/ops.log" | sort -u | wc -l) failed, $(grep '^\[  SKIPPED \] cuda' "$out/ops.log" | sort -u | wc -l) skipped" \
        "$(grep -m1 'backend cuda: skipped on this machine' "$out/ops.log" | sed 's/.*machine: //' | cut -c1-60)"
    row "token parity tiny/small/HF vs cpu" "$st_ops" "${parity:-none (see ops.log)}" ""
    for r in run8k run32k; do
        local st_r secs_r
        eval "st_r=\$st_$r"
        if [ "$st_r" = ok ] && grep -q prefill_tok_s "$out/$r.log"; then
            local j pf dc wb kvb d L ffn nh nkv hd n
            j=$(grep '^{' "$out/$r.log" | tail -1)
            num() { echo "$j" | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" | head -1; }
            pf=$(num prefill_tok_s); dc=$(num decode_tok_s); wb=$(num peak_weights_bytes); kvb=$(num peak_kv_bytes)
            d=$(num dim); L=$(num n_layers); ffn=$(num ffn_dim); nh=$(num n_heads); nkv=$(num n_kv_heads)
            hd=$(num head_dim); n=$(num input_tokens)
            # prefill FLOPs per token: 2 x the layer weights' MACs, plus causal attention (QK and PV over
            # half the context on average); decode bytes per token: every weight byte and the KV read once
            local pfl dbw
            pfl=$(awk -v pf="$pf" -v d="$d" -v L="$L" -v f="$ffn" -v nh="$nh" -v nkv="$nkv" -v hd="$hd" -v n="$n" \
                'BEGIN { w = L * (d * (nh + 2 * nkv) * hd + nh * hd * d + 3 * d * f); a = L * nh * hd * 2 * n;
                         printf "%.1f", pf * (2 * w + a) / 1e12 }')
            dbw=$(awk -v dc="$dc" -v wb="$wb" -v kv="$kvb" 'BEGIN { printf "%.0f", dc * (wb + kv) / 1e9 }')
            row "run $model $r prefill" ok "$(printf '%.0f tok/s = %s TFLOP/s' "$pf" "$pfl")" \
                "$(awk -v a="$pfl" -v b="$tflops" 'BEGIN { if (b > 0) printf "%.0f%% of bf16 peak", 100 * a / b }')"
            row "run $model $r decode (batch 1)" ok "$(printf '%.1f tok/s = %s GB/s' "$dc" "$dbw")" \
                "$(awk -v a="$dbw" -v b="$bw" 'BEGIN { if (b > 0) printf "%.0f%% of bandwidth", 100 * a / b }')"
        else
            row "run $model $r" "$st_r" "$(tail -1 "$out/$r.log" | cut -c1-60)" ""
        fi
    done
    if [ "$st_bench32" = ok ] && [ -s "$out/bench32.json" ] && [ "${st_run8k:-}" = ok ]; then
        # decode bytes per step at batch 32: every weight byte once, and each sequence's KV (8K + the
        # output so far, ~8K) once; the model's shape from run8k's JSON
        local j8 tp wb8 L8 nkv8 hd8
        j8=$(grep '^{' "$out/run8k.log" | tail -1)
        n8() { echo "$j8" | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" | head -1; }
        tp=$(sed -n 's/.*"mean_tpot_ms": *\([0-9.e+-]*\).*/\1/p' "$out/bench32.json" | head -1)
        wb8=$(n8 peak_weights_bytes); L8=$(n8 n_layers); nkv8=$(n8 n_kv_heads); hd8=$(n8 head_dim)
        local agg bw32
        agg=$(awk -v t="$tp" 'BEGIN { if (t > 0) printf "%.0f", 32 * 1000 / t }')
        bw32=$(awk -v t="$tp" -v wb="$wb8" -v L="$L8" -v k="$nkv8" -v h="$hd8" \
            'BEGIN { if (t > 0) printf "%.0f", (wb + 32 * 8192 * L * 2 * k * h * 2) / (t / 1000) / 1e9 }')
        row "bench $model 8K batch 32 decode" ok "${agg} tok/s (tpot ${tp} ms) = ${bw32} GB/s" \
            "$(awk -v a="$bw32" -v b="$bw" 'BEGIN { if (b > 0) printf "%.0f%% of bandwidth", 100 * a / b }')"
    else
        row "bench $model 8K batch 32" "$st_bench32" "$(tail -1 "$out/bench32.log" | cut -c1-60)" ""
    fi
    row "attn-bench --backend cuda" "not built" "attn-bench times the CPU kernels only" ""
    {
        printf '%-34s %-14s %-34s %s\n' check result figure "against the device"
        printf '%s' "$table"
        echo "$fails step(s) failed; logs in $out"
    } | tee "$out/device-check.txt"
    rm -rf "$root"
    [ $fails = 0 ]
}

case "$mode" in
    pack) pack ;;
    run) run; exit $? ;;
    -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "usage: ci/device-check.sh pack|run [DIR] (--help)" ;;
esac
