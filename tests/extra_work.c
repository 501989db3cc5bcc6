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
 * K25_EXTRA_ONE_IN=N (this binary only) re-runs one GEMM in N instead: a
 * smaller, still deterministic amount of extra work, the "~5% slower
 * commit" of the instruction-gate proof (tests/test_instrgate.c: N = 24 adds
 * about 5% to prefill instructions; docs/gates.md).
 */
#include <cblas.h>
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
static long g_one_in = -1; /* K25_EXTRA_ONE_IN, 0 when unset; -1 until read */

void __wrap_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint m,
                        blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
                        float beta, float *c, blasint ldc)
{
    __real_cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (g_one_in < 0) {
        const char *e = getenv("K25_EXTRA_ONE_IN");
        g_one_in = e && atol(e) > 0 ? atol(e) : 0;
    }
    unsigned long call = atomic_fetch_add(&g_calls, 1);
    if (g_one_in > 0 ? call % (unsigned long)g_one_in != 0 : call % K25_EXTRA_STRIDE == 0)
        return;
    /* the same product again into a scratch of the output's shape (row-major: m rows of ldc) */
    size_t rows = order == CblasRowMajor ? (size_t)m : (size_t)n;
    float *s = calloc(rows * (size_t)ldc, sizeof(float));
    if (!s)
        return;
    __real_cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, s, ldc);
    free(s);
}
