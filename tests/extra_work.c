/*
 * extra_work.c - TEST-ONLY: linked into build/tests/k25-extra-work, a k25
 * binary built with extra work, the "commit that made the engine slower"
 * of the timing-gate proof (tests/test_gate.c, docs/gates.md).
 *
 * The link wraps cblas_sgemm (-Wl,--wrap=cblas_sgemm): every engine GEMM
 * runs as before, and all but every K25_EXTRA_STRIDE-th one also run a second time
 * into a scratch output, as a commit that added a projection would.  The
 * results are those of the unmodified engine (the scratch is discarded), so
 * only time changes.  Unlike K25_TEST_SLOWDOWN (a knob inside the engine)
 * this is a different binary; nothing in it can be switched off.
 *
 * K25_EXTRA_K_FRACTION=F (0 < F <= 1; this binary only) does a smaller,
 * still deterministic amount of extra work instead: every GEMM is also
 * computed over the first ceil(F k) of its inner dimension, into a scratch
 * (the same pointers and leading dimensions: op(A)'s first columns, op(B)'s
 * first rows).  A GEMM's instructions grow with k, so this adds about F of
 * the GEMM work: the "~5% slower commit" of the instruction-gate proof
 * (tests/test_instrgate.c, docs/gates.md).
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* two GEMMs of every three run twice: ~+25-30% on the gate workload (tiny, 1 thread; docs/gates.md) */
#define K25_EXTRA_STRIDE 3

void __real_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint m,
                        blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
                        float beta, float *c, blasint ldc);
void __wrap_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint m,
                        blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
                        float beta, float *c, blasint ldc);

static atomic_ulong g_calls;
static double g_kfrac = -1; /* K25_EXTRA_K_FRACTION, 0 when unset; -1 until read */

void __wrap_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint m,
                        blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
                        float beta, float *c, blasint ldc)
{
    __real_cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (g_kfrac < 0) {
        const char *e = getenv("K25_EXTRA_K_FRACTION");
        double f = e ? atof(e) : 0;
        g_kfrac = f > 0 && f <= 1 ? f : 0;
    }
    if (g_kfrac > 0) {
        blasint kk = (blasint)ceil(g_kfrac * (double)k);
        size_t rows = order == CblasRowMajor ? (size_t)m : (size_t)n;
        float *s = calloc(rows * (size_t)ldc, sizeof(float));
        if (!s)
            return;
        __real_cblas_sgemm(order, ta, tb, m, n, kk < 1 ? 1 : kk, alpha, a, lda, b, ldb, 0.0f, s, ldc);
        free(s);
        return;
    }
    if (atomic_fetch_add(&g_calls, 1) % K25_EXTRA_STRIDE == 0)
        return;
    /* the same product again into a scratch of the output's shape (row-major: m rows of ldc) */
    size_t rows = order == CblasRowMajor ? (size_t)m : (size_t)n;
    float *s = calloc(rows * (size_t)ldc, sizeof(float));
    if (!s)
        return;
    __real_cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, s, ldc);
    free(s);
}
