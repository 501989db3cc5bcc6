/*
 * flash2.c - FlashAttention-2-style baseline (see baselines.h).
 *
 * The FA2 schedule on a CPU: the outer loop runs over query tiles (BR
 * queries of one head), the inner over KV tiles (BC tokens); each tile pair
 * is two SGEMMs (S = Q K^T, O += P V) around an online-softmax row update,
 * with the rescaling of O deferred to the end as FA2 does.  KV tiles
 * entirely above the causal diagonal are skipped.  Scratch per thread is
 * O(BR x BC + BR x head_dim), independent of the sequence length.
 */
#include "baselines.h"
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define BR 64 /* queries per tile */
#define BC 64 /* keys per tile */

static size_t thread_floats(int hd, bool need_tmp)
{
    return (size_t)BR * hd * 2 + (size_t)BR * BC + 2 * BR + (need_tmp ? 2 * (size_t)BC * hd : 0);
}

static int64_t flash2_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int block_size,
                                 enum k25_dtype dtype, int n_seqs, int64_t n_q, int64_t n_kv,
                                 int threads)
{
    (void)n_kv_heads;
    (void)n_kv;
    bool need_tmp = dtype != K25_DTYPE_FP32 || block_size % BC != 0;
    int64_t items = (int64_t)n_seqs * n_heads * ((n_q + BR - 1) / BR);
    return (items > 1 ? threads : 1) * (int64_t)thread_floats(head_dim, need_tmp) * (int64_t)sizeof(float);
}

struct f2_scratch {
    float *q, *o, *s, *m, *l, *kt, *vt;
};

/* Queries [t0, t1) of one head h of job. */
static void f2_tile(const struct k25_attn_job *job, int h, int group, int t0, int t1, float scale,
                    struct f2_scratch *sc)
{
    const struct k25_kv_view *kv = &job->kv;
    const int hd = kv->head_dim, rows = t1 - t0, g = h / group;
    for (int r = 0; r < rows; r++) {
        const float *src = job->q + (size_t)(t0 + r) * job->q_stride + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            sc->q[(size_t)r * hd + d] = src[d] * scale;
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->o, 0, sizeof(float) * (size_t)rows * hd);

    int visible = job->q_pos0 + t1;
    K25_ASSERT(visible <= kv->n_tokens);
    for (int k0 = 0; k0 < visible; k0 += BC) {
        int nk = visible - k0 < BC ? visible - k0 : BC;
        const float *K = k25_kv_rows(kv, kv->k_blocks, g, k0, nk, sc->kt);
        const float *V = k25_kv_rows(kv, kv->v_blocks, g, k0, nk, sc->vt);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, 1.0f, sc->q, hd, K, hd, 0.0f,
                    sc->s, nk);
        for (int r = 0; r < rows; r++)
            k25_softmax_tile_row(sc->s + (size_t)r * nk, nk, job->q_pos0 + t0 + r - k0 + 1, &sc->m[r],
                                 &sc->l[r], sc->o + (size_t)r * hd, hd);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, nk, 1.0f, sc->s, nk, V, hd, 1.0f,
                    sc->o, hd);
    }
    for (int r = 0; r < rows; r++) {
        float inv = 1.0f / sc->l[r];
        float *dst = job->out + (size_t)(t0 + r) * job->out_stride + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            dst[d] = sc->o[(size_t)r * hd + d] * inv;
    }
}

void k25_baseline_flash2_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                                   struct k25_mem_acct *acct)
{
    if (n_jobs <= 0)
        return;
    const int n_kv = jobs[0].kv.n_kv_heads, hd = jobs[0].kv.head_dim, group = n_heads / n_kv;
    K25_ASSERT(group * n_kv == n_heads);
    int first[n_jobs + 1];
    bool need_tmp = false;
    first[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        first[j + 1] = first[j] + n_heads * ((jobs[j].n_q + BR - 1) / BR);
        need_tmp |= k25_kv_rows_need_tmp(&jobs[j].kv, BC);
    }
    const int n_items = first[n_jobs];

#pragma omp parallel if (n_items > 1)
    {
        float *mem = k25_alloc_acct(acct, K25_MEM_ATTN_SCRATCH, sizeof(float) * thread_floats(hd, need_tmp));
        K25_ASSERT(mem != NULL);
        struct f2_scratch sc;
        sc.q = mem;
        sc.o = sc.q + (size_t)BR * hd;
        sc.s = sc.o + (size_t)BR * hd;
        sc.m = sc.s + (size_t)BR * BC;
        sc.l = sc.m + BR;
        sc.kt = need_tmp ? sc.l + BR : NULL;
        sc.vt = need_tmp ? sc.kt + (size_t)BC * hd : NULL;
        int j = 0;
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < n_items; it++) {
            while (it >= first[j + 1])
                j++;
            while (it < first[j])
                j--;
            int local = it - first[j], h = local % n_heads, tile = local / n_heads;
            int t0 = tile * BR, t1 = t0 + BR < jobs[j].n_q ? t0 + BR : jobs[j].n_q;
            f2_tile(&jobs[j], h, group, t0, t1, scale, &sc);
        }
        k25_free(mem);
    }
}

const struct k25_attn_impl_desc k25_attn_flash2 = {
    .id = K25_ATTN_FLASH2,
    .name = "flash2",
    .run = k25_baseline_flash2_attention,
    .scratch_bytes = flash2_scratch_bytes,
    .compression = false,
};
