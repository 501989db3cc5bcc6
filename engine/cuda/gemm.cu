/*
 * gemm.cu - y[m][n] (+)= x[m][k] . w[n][k]^T, weights fp32, fp16 or bf16
 * as stored, activations fp32, fp32 accumulation.
 *
 * Decode (m <= K25CU_GEMV_MAX_M): a GEMV kernel of ours.  One warp per
 * weight row: lane l reads 16 bytes at a time (8 fp16/bf16 or 4 fp32
 * values; l, l + 32, ... in units of 16 bytes, coalesced across the warp)
 * when the rows allow it (16-byte aligned, k a multiple of the vector),
 * else one value at a time; converts to fp32 in registers, multiplies by
 * every x row and sums; a fixed shuffle tree reduces.  The order of every row's sum is the same whatever m is, so a
 * row's result does not depend on the other rows of the step (batch
 * invariance, like the CPU's gemv.c).  Weights are read once per step.
 *
 * Prefill (larger m): cuBLASLt, compute type CUBLAS_COMPUTE_32F (fp32
 * accumulate; no TF32 anywhere - CUBLAS_COMPUTE_32F_FAST_TF32 is never
 * asked for).  The caller (backend_cuda.c, config key cuda_gemm) passes
 * either fp32 on both sides (fp32 weights, or fp16/bf16 weight tiles
 * widened to fp32: exact, CPU parity) or fp16/bf16 on both sides
 * (activations rounded to the weights' type: tensor cores).  Plans
 * (layouts, heuristic algorithm) are cached per shape.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ GEMV */

template <int T> __device__ static inline float wval(const void *w, size_t j);
template <> __device__ inline float wval<K25CU_F32>(const void *w, size_t j)
{
    return ((const float *)w)[j];
}
template <> __device__ inline float wval<K25CU_F16>(const void *w, size_t j)
{
    return k25cm_h2f(((const uint16_t *)w)[j]);
}
template <> __device__ inline float wval<K25CU_BF16>(const void *w, size_t j)
{
    return k25cm_bf2f(((const uint16_t *)w)[j]);
}

/*
 * M: x rows held per warp (m rounded up); T: weight type.  Lane l takes
 * values j = l, l + 32, ... of the row (coalesced across the warp), fixed
 * for any m.
 */
/* The 16 bytes at p as fp32 values (8 of fp16/bf16, 4 of fp32): exact conversions. */
template <int T> __device__ static inline void unpack16(const unsigned char *p, float *v)
{
    const uint4 raw = __ldg((const uint4 *)p);
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (T == K25CU_F32) {
            v[i] = __uint_as_float(u[i]);
        } else if (T == K25CU_F16) {
            v[2 * i] = k25cm_h2f((uint16_t)(u[i] & 0xffffu));
            v[2 * i + 1] = k25cm_h2f((uint16_t)(u[i] >> 16));
        } else {
            v[2 * i] = __uint_as_float(u[i] << 16);
            v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    }
}

template <int M, int T, bool VEC>
__global__ __launch_bounds__(32 * K25CU_GEMV_WARPS) void gemv_kernel(const float *__restrict__ x, size_t xs, int m,
                                                                      const unsigned char *__restrict__ w,
                                                                      size_t wsb, int n, int k,
                                                                      float *__restrict__ y, size_t ys, int acc)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * K25CU_GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= n)
        return;
    const unsigned char *wr = w + (size_t)row * wsb;
    float sum[M];
#pragma unroll
    for (int r = 0; r < M; r++)
        sum[r] = 0.0f;
    if (VEC) {
        constexpr int PER = T == K25CU_F32 ? 4 : 8, EB = T == K25CU_F32 ? 4 : 2;
        for (int j0 = lane * PER; j0 < k; j0 += 32 * PER) {
            float wv[PER];
            unpack16<T>(wr + (size_t)j0 * EB, wv);
#pragma unroll
            for (int r = 0; r < M; r++)
                if (r < m)
#pragma unroll
                    for (int e = 0; e < PER; e++)
                        sum[r] = fmaf(wv[e], __ldg(x + (size_t)r * xs + j0 + e), sum[r]);
        }
    } else {
        for (int j = lane; j < k; j += 32) {
            const float wv = wval<T>(wr, (size_t)j);
#pragma unroll
            for (int r = 0; r < M; r++)
                if (r < m)
                    sum[r] = fmaf(wv, __ldg(x + (size_t)r * xs + j), sum[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < M; r++) {
        float v = sum[r];
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        sum[r] = v;
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < M; r++)
            if (r < m) {
                float *yp = y + (size_t)r * ys + row;
                *yp = acc ? *yp + sum[r] : sum[r];
            }
}

template <int M, bool VEC>
static void gemv_launch_v(cudaStream_t s, const float *x, size_t xs, int m, const unsigned char *wb, size_t wsb,
                          enum k25cu_type t, int n, int k, float *y, size_t ys, bool acc)
{
    const unsigned grid = k25cm_grid1(n, K25CU_GEMV_WARPS), block = 32 * K25CU_GEMV_WARPS;
    if (t == K25CU_F32)
        gemv_kernel<M, K25CU_F32, VEC><<<grid, block, 0, s>>>(x, xs, m, wb, wsb, n, k, y, ys, acc);
    else if (t == K25CU_F16)
        gemv_kernel<M, K25CU_F16, VEC><<<grid, block, 0, s>>>(x, xs, m, wb, wsb, n, k, y, ys, acc);
    else
        gemv_kernel<M, K25CU_BF16, VEC><<<grid, block, 0, s>>>(x, xs, m, wb, wsb, n, k, y, ys, acc);
}

/* 16-byte loads when every row starts 16-byte aligned and k fills whole vectors (k25cm_gemv_vec). */
template <int M>
static void gemv_launch(cudaStream_t s, const float *x, size_t xs, int m, const void *w, size_t wsb,
                        enum k25cu_type t, int n, int k, float *y, size_t ys, bool acc)
{
    const unsigned char *wb = (const unsigned char *)w;
    if (k25cm_gemv_vec((uint64_t)(uintptr_t)w, wsb, k, t == K25CU_F32 ? 4 : 2))
        gemv_launch_v<M, true>(s, x, xs, m, wb, wsb, t, n, k, y, ys, acc);
    else
        gemv_launch_v<M, false>(s, x, xs, m, wb, wsb, t, n, k, y, ys, acc);
}

extern "C" bool k25cu_gemv(struct k25cu_err *e, cudaStream_t s, const float *x, size_t xs, int m, const void *w,
                           size_t ws, enum k25cu_type t, int n, int k, float *y, size_t ys, bool acc)
{
    if (m <= 0 || n <= 0)
        return true;
    if (m > K25CU_GEMV_MAX_M || (t != K25CU_F32 && t != K25CU_F16 && t != K25CU_BF16))
        return k25cu_note(e, false, "k25", m, "GEMV shape or type not built", "k25cu_gemv", __FILE__, __LINE__);
    const size_t wsb = ws * (t == K25CU_F32 ? 4 : 2);
    switch (k25cm_gemv_mtile(m)) {
    case 1: gemv_launch<1>(s, x, xs, m, w, wsb, t, n, k, y, ys, acc); break;
    case 2: gemv_launch<2>(s, x, xs, m, w, wsb, t, n, k, y, ys, acc); break;
    case 4: gemv_launch<4>(s, x, xs, m, w, wsb, t, n, k, y, ys, acc); break;
    case 8: gemv_launch<8>(s, x, xs, m, w, wsb, t, n, k, y, ys, acc); break;
    default: gemv_launch<16>(s, x, xs, m, w, wsb, t, n, k, y, ys, acc); break;
    }
    return K25_LAUNCHED(e);
}

/* -------------------------------------------------------------- cuBLASLt */

#define LT_WORKSPACE (32u << 20)
#define LT_PLANS 64

/* One cached plan: the shape it is for, its descriptors and algorithm. */
struct lt_plan {
    int used;
    int m, n, k, t, acc;
    size_t xs, ws, ys;
    uintptr_t align; /* the lowest set alignment bits of the pointers (16 or less) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

struct k25cu_lt {
    cublasLtHandle_t h;
    void *ws;
    struct lt_plan plans[LT_PLANS];
    int next; /* the slot the next new plan replaces when all are used */
};

static void plan_free(struct lt_plan *p)
{
    if (!p->used)
        return;
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
    p->used = 0;
}

extern "C" bool k25cu_lt_create(struct k25cu_err *e, struct k25cu_lt **out)
{
    struct k25cu_lt *lt = (struct k25cu_lt *)calloc(1, sizeof(*lt));
    *out = NULL;
    if (!lt)
        return k25cu_note(e, false, "k25", 0, "out of memory", "calloc(cuBLASLt state)", __FILE__, __LINE__);
    if (!K25_CUBLAS(e, cublasLtCreate(&lt->h))) {
        free(lt);
        return false;
    }
    if (!K25_CUDA(e, cudaMalloc(&lt->ws, LT_WORKSPACE))) {
        cublasLtDestroy(lt->h);
        free(lt);
        return false;
    }
    *out = lt;
    return true;
}

extern "C" void k25cu_lt_destroy(struct k25cu_lt *lt)
{
    if (!lt)
        return;
    for (int i = 0; i < LT_PLANS; i++)
        plan_free(&lt->plans[i]);
    cudaFree(lt->ws);
    cublasLtDestroy(lt->h);
    free(lt);
}

static cudaDataType_t lt_type(enum k25cu_type t)
{
    return t == K25CU_F16 ? CUDA_R_16F : t == K25CU_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static uintptr_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p & 15u;
    return a ? (a & (~a + 1)) : 16u;
}

/*
 * Row-major y[m][n] = x[m][k] w[n][k]^T is column-major
 * Y(n x m) = W^T . X with W stored k x n (ld ws) and X k x m (ld xs):
 * transa = T, transb = N.
 */
static bool plan_make(struct k25cu_err *e, struct k25cu_lt *lt, struct lt_plan *p, int m, int n, int k,
                      enum k25cu_type t, size_t xs, size_t ws, size_t ys, bool acc, uintptr_t align)
{
    *p = (struct lt_plan){};
    const cudaDataType_t ab = lt_type(t);
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const uint64_t wsb = LT_WORKSPACE;
    const uint32_t al = (uint32_t)align;
    bool ok = K25_CUBLAS(e, cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (!ok)
        return false;
    ok = K25_CUBLAS(e, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT))) &&
         K25_CUBLAS(e, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
    if (ok && !K25_CUBLAS(e, cublasLtMatrixLayoutCreate(&p->a, ab, (uint64_t)k, (uint64_t)n, (int64_t)ws)))
        ok = false;
    else if (ok && !K25_CUBLAS(e, cublasLtMatrixLayoutCreate(&p->b, ab, (uint64_t)k, (uint64_t)m, (int64_t)xs)))
        ok = false;
    else if (ok && !K25_CUBLAS(e, cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)n, (uint64_t)m,
                                                             (int64_t)ys)))
        ok = false;
    ok = ok && K25_CUBLAS(e, cublasLtMatmulPreferenceCreate(&pref));
    ok = ok && K25_CUBLAS(e, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &wsb, sizeof(wsb)));
    ok = ok && K25_CUBLAS(e, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                  &al, sizeof(al)));
    ok = ok && K25_CUBLAS(e, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                  &al, sizeof(al)));
    ok = ok && K25_CUBLAS(e, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                  &al, sizeof(al)));
    ok = ok && K25_CUBLAS(e, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                  &al, sizeof(al)));
    ok = ok && K25_CUBLAS(e, cublasLtMatmulAlgoGetHeuristic(lt->h, p->op, p->a, p->b, p->c, p->c, pref, 1, &res,
                                                            &found));
    if (ok && found < 1)
        ok = k25cu_note(e, false, "cuBLAS", 0, "no algorithm", "cublasLtMatmulAlgoGetHeuristic (found 0)", __FILE__,
                        __LINE__);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        if (p->a)
            cublasLtMatrixLayoutDestroy(p->a);
        if (p->b)
            cublasLtMatrixLayoutDestroy(p->b);
        if (p->c)
            cublasLtMatrixLayoutDestroy(p->c);
        cublasLtMatmulDescDestroy(p->op);
        *p = (struct lt_plan){};
        return false;
    }
    p->algo = res.algo;
    p->used = 1;
    p->m = m, p->n = n, p->k = k, p->t = (int)t, p->acc = acc;
    p->xs = xs, p->ws = ws, p->ys = ys, p->align = align;
    return true;
}

extern "C" bool k25cu_lt_gemm(struct k25cu_err *e, struct k25cu_lt *lt, cudaStream_t s, const void *x, size_t xs,
                              int m, const void *w, size_t ws, enum k25cu_type t, int n, int k, float *y, size_t ys,
                              bool acc)
{
    if (m <= 0 || n <= 0)
        return true;
    uintptr_t al = align_of(x), aw = align_of(w), ay = align_of(y);
    al = al < aw ? al : aw;
    al = al < ay ? al : ay;
    struct lt_plan *p = NULL;
    for (int i = 0; i < LT_PLANS && !p; i++) {
        struct lt_plan *q = &lt->plans[i];
        if (q->used && q->m == m && q->n == n && q->k == k && q->t == (int)t && q->acc == acc && q->xs == xs &&
            q->ws == ws && q->ys == ys && q->align == al)
            p = q;
    }
    if (!p) {
        int slot = -1;
        for (int i = 0; i < LT_PLANS && slot < 0; i++)
            if (!lt->plans[i].used)
                slot = i;
        if (slot < 0) {
            slot = lt->next;
            lt->next = (lt->next + 1) % LT_PLANS;
            plan_free(&lt->plans[slot]);
        }
        p = &lt->plans[slot];
        if (!plan_make(e, lt, p, m, n, k, t, xs, ws, ys, acc, al))
            return false;
    }
    const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    return K25_CUBLAS(e, cublasLtMatmul(lt->h, p->op, &alpha, w, p->a, x, p->b, &beta, y, p->c, y, p->c, &p->algo,
                                        lt->ws, LT_WORKSPACE, s));
}
