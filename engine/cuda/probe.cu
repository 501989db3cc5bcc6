/*
 * probe.cu - what this GPU can do, measured in the run that reports
 * against it (the device check prints every figure beside these):
 *   - bf16 GEMM peak: cuBLASLt, bf16 in, fp32 accumulate (the prefill
 *     GEMMs' configuration), 8192^3, best of PROBE_REPS after a warm-up;
 *   - device-memory bandwidth: a device-to-device copy of 1 GiB (each byte
 *     read once and written once), best of PROBE_REPS;
 *   - the decode GEMM on our GEMV kernel against cuBLASLt at m = 1 and 16
 *     (bf16 weights of 14336 x 4096): the figures behind keeping the GEMV
 *     kernel for m <= 16 (backend_cuda.c), measured on each device.
 * Timed with CUDA events on the given stream.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define PROBE_N 8192
#define PROBE_BYTES (1ull << 30)
#define PROBE_REPS 5

/* The best of PROBE_REPS event-timed runs of what (after one untimed), in ms. */
template <typename F> static bool best_ms(struct k25cu_err *e, cudaStream_t s, F what, float *best)
{
    cudaEvent_t a = NULL, b = NULL;
    bool ok = K25_CUDA(e, cudaEventCreate(&a)) && K25_CUDA(e, cudaEventCreate(&b)) && what();
    *best = 0.0f;
    for (int r = 0; ok && r < PROBE_REPS; r++) {
        float ms = 0.0f;
        ok = K25_CUDA(e, cudaEventRecord(a, s)) && what() && K25_CUDA(e, cudaEventRecord(b, s)) &&
             K25_CUDA(e, cudaEventSynchronize(b)) && K25_CUDA(e, cudaEventElapsedTime(&ms, a, b));
        if (ok && (r == 0 || ms < *best))
            *best = ms;
    }
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    return ok;
}

extern "C" bool k25cu_probe(struct k25cu_err *e, struct k25cu_lt *lt, cudaStream_t s, struct k25cu_probe_out *o)
{
    const size_t n = PROBE_N, ab = sizeof(uint16_t) * n * n, cb = sizeof(float) * n * n;
    void *x = NULL, *w = NULL, *y = NULL, *src = NULL, *dst = NULL;
    float ms = 0.0f;
    *o = (struct k25cu_probe_out){};
    bool ok = K25_CUDA(e, cudaMalloc(&x, ab)) && K25_CUDA(e, cudaMalloc(&w, ab)) && K25_CUDA(e, cudaMalloc(&y, cb)) &&
              K25_CUDA(e, cudaMemsetAsync(x, 0, ab, s)) && K25_CUDA(e, cudaMemsetAsync(w, 0, ab, s));
    ok = ok && best_ms(e, s, [&]() {
             return k25cu_lt_gemm(e, lt, s, x, n, (int)n, w, n, K25CU_BF16, (int)n, (int)n, (float *)y, n, false);
         }, &ms);
    if (ok)
        o->bf16_tflops = 2.0 * (double)n * n * n / (ms * 1e-3) / 1e12;
    /* decode GEMMs: w [14336][4096] bf16 (inside the 8192^2 buffer), x fp32 [16][4096] (inside y) */
    const int dn = 14336 / 2, dk = 4096; /* 7168 rows of 8192 bf16 = the same bytes as 14336 x 4096 */
    for (int i = 0; ok && i < 2; i++) {
        const int m = i ? 16 : 1;
        ok = best_ms(e, s, [&]() {
                 return k25cu_gemv(e, s, (const float *)y, 2 * dk, m, w, n, K25CU_BF16, dn, 2 * dk,
                                   (float *)y + (size_t)64 * n, n, false);
             }, &ms);
        o->gemv_us[i] = ms * 1e3;
        ok = ok && best_ms(e, s, [&]() {
                 return k25cu_convert(e, s, (const float *)y, 2 * dk, m, 2 * dk, K25CU_BF16, (uint16_t *)x) &&
                        k25cu_lt_gemm(e, lt, s, x, 2 * dk, m, w, n, K25CU_BF16, dn, 2 * dk,
                                      (float *)y + (size_t)64 * n, n, false);
             }, &ms);
        o->lt_us[i] = ms * 1e3;
    }
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
    ok = ok && K25_CUDA(e, cudaMalloc(&src, PROBE_BYTES)) && K25_CUDA(e, cudaMalloc(&dst, PROBE_BYTES)) &&
         K25_CUDA(e, cudaMemsetAsync(src, 1, PROBE_BYTES, s));
    ok = ok && best_ms(e, s, [&]() {
             return K25_CUDA(e, cudaMemcpyAsync(dst, src, PROBE_BYTES, cudaMemcpyDeviceToDevice, s));
         }, &ms);
    if (ok)
        o->bw_gbs = 2.0 * (double)PROBE_BYTES / (ms * 1e-3) / 1e9;
    cudaFree(src);
    cudaFree(dst);
    return ok;
}
