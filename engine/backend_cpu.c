/*
 * backend_cpu.c - the CPU backend: GEMMs through OpenBLAS (CBLAS), the
 * element-wise operations written here (OpenMP over rows, inner loops left
 * to the compiler's vectorizer).  Attention lives in attention.c.
 */
#include "backend.h"

#include <cblas.h>
#include <math.h>

static void cpu_gemm_xwt(int m, int n, int k, const float *x, const float *w, float *y, bool acc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k,
                acc ? 1.0f : 0.0f, y, n);
}

static void cpu_rmsnorm(int m, int d, const float *x, const float *w, float eps, float *y)
{
#pragma omp parallel for schedule(static) if (m > 4)
    for (int i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * d;
        float *yi = y + (size_t)i * d;
        double ss = 0.0; /* double: d up to 8K values of O(1) squared */
        for (int j = 0; j < d; j++)
            ss += (double)xi[j] * xi[j];
        float inv = (float)(1.0 / sqrt(ss / d + eps));
        for (int j = 0; j < d; j++)
            yi[j] = xi[j] * inv * w[j];
    }
}

static void cpu_rope(int m, int n_heads, int hd, float *x, int stride, const float *cs)
{
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (m > 4)
    for (int i = 0; i < m; i++) {
        const float *c = cs + (size_t)i * hd, *s = c + half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)i * stride + (size_t)h * hd;
            for (int j = 0; j < half; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] - b * s[j];
                v[j + half] = b * c[j] + a * s[j];
            }
        }
    }
}

static void cpu_swiglu(int m, int ffn, const float *gu, float *h)
{
#pragma omp parallel for schedule(static) if (m > 4)
    for (int i = 0; i < m; i++) {
        const float *g = gu + (size_t)i * 2 * ffn, *u = g + ffn;
        float *o = h + (size_t)i * ffn;
        for (int j = 0; j < ffn; j++)
            o[j] = g[j] / (1.0f + k25_fast_expf(-g[j])) * u[j];
    }
}

static const struct k25_backend cpu_backend = {
    .name = "cpu",
    .gemm_xwt = cpu_gemm_xwt,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .attention = k25_cpu_attention,
};

const struct k25_backend *k25_backend_cpu(void)
{
    return &cpu_backend;
}
