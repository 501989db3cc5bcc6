/*
 * attention.c - ChunkedAttention on the CPU.
 *
 * A prefill chunk's queries attend to every earlier token of their
 * sequence (read from the paged KV cache) plus, causally, to the chunk
 * itself; a decode step is the same with one query.  The work is cut into
 * items of (job, KV head, tile of TQ queries); the query heads that share
 * a KV head are stacked into one row block, so a tile is a
 * [TQ*group][head_dim] matrix that is multiplied by one KV block at a time
 * (OpenBLAS SGEMM, single-threaded inside an OpenMP worker) with an online
 * softmax carrying the running max, sum and output between blocks
 * (FlashAttention's recurrence).  Scratch is bounded by TQ and the block
 * size, never by the context length; every row's reduction runs in the
 * same order whatever the thread count, so results are reproducible.
 */
#include "backend.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define TQ 64 /* queries per tile */

struct scratch {
    float *q;    /* [TQ*group][hd]  scaled queries */
    float *s;    /* [TQ*group][bs]  scores, then probabilities */
    float *acc;  /* [TQ*group][hd]  unnormalized output */
    float *m;    /* [TQ*group]      running max */
    float *l;    /* [TQ*group]      running sum */
    float *kt;   /* [bs][hd]        fp32 copy of a half block (fp16 only) */
    float *vt;   /* [bs][hd] */
};

static const float *block_rows(const struct k25_kv_view *kv, const void *blk, int g, int n,
                               float *tmp)
{
    size_t off = (size_t)g * kv->block_size * kv->head_dim;
    if (kv->dtype == K25_DTYPE_FP32)
        return (const float *)blk + off;
    /* fp16: dequantize the rows this tile reads into fp32 scratch */
    const uint16_t *h = (const uint16_t *)blk + off;
    size_t cnt = (size_t)n * kv->head_dim;
    for (size_t i = 0; i < cnt; i++)
        tmp[i] = k25_fp16_to_fp32(h[i]);
    return tmp;
}

/* One work item: queries [t0, t1) of job j, query heads of KV head g. */
static void attend_tile(const struct k25_attn_job *job, int g, int group, int t0, int t1,
                        float scale, struct scratch *sc)
{
    const struct k25_kv_view *kv = &job->kv;
    const int hd = kv->head_dim, bs = kv->block_size;
    const int rows = (t1 - t0) * group;

    for (int t = t0; t < t1; t++)
        for (int hh = 0; hh < group; hh++) {
            const float *src = job->q + (size_t)t * job->q_stride + (size_t)(g * group + hh) * hd;
            float *dst = sc->q + (size_t)((t - t0) * group + hh) * hd;
            for (int d = 0; d < hd; d++)
                dst[d] = src[d] * scale;
        }
    for (int r = 0; r < rows; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->acc, 0, sizeof(float) * (size_t)rows * hd);

    int visible = job->q_pos0 + t1; /* tokens the last query of the tile sees */
    K25_ASSERT(visible <= kv->n_tokens);
    int n_blocks = (visible + bs - 1) / bs;
    for (int b = 0; b < n_blocks; b++) {
        int ks = b * bs;
        int nk = visible - ks < bs ? visible - ks : bs;
        const float *K = block_rows(kv, kv->k_blocks[b], g, nk, sc->kt);
        const float *V = block_rows(kv, kv->v_blocks[b], g, nk, sc->vt);

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, 1.0f, sc->q, hd, K, hd,
                    0.0f, sc->s, nk);

        for (int r = 0; r < rows; r++) {
            float *s = sc->s + (size_t)r * nk;
            int lim = job->q_pos0 + t0 + r / group - ks + 1; /* keys of this block row r sees */
            if (lim > nk)
                lim = nk;
            if (lim <= 0) {
                memset(s, 0, sizeof(float) * (size_t)nk);
                continue;
            }
            /* omp simd: vectorized reductions (fixed lane order, so still
             * independent of the thread count) */
            float mx = s[0];
#pragma omp simd reduction(max : mx)
            for (int j = 1; j < lim; j++)
                mx = s[j] > mx ? s[j] : mx;
            float m_old = sc->m[r];
            if (mx > m_old) {
                float alpha = (m_old == -INFINITY) ? 0.0f : k25_fast_expf(m_old - mx);
                sc->l[r] *= alpha;
                float *a = sc->acc + (size_t)r * hd;
                for (int d = 0; d < hd; d++)
                    a[d] *= alpha;
                sc->m[r] = mx;
            }
            float m_new = sc->m[r], sum = 0.0f;
            for (int j = 0; j < lim; j++)
                s[j] = k25_fast_expf(s[j] - m_new);
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < lim; j++)
                sum += s[j];
            for (int j = lim; j < nk; j++)
                s[j] = 0.0f;
            sc->l[r] += sum;
        }

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, nk, 1.0f, sc->s, nk, V, hd,
                    1.0f, sc->acc, hd);
    }

    for (int t = t0; t < t1; t++)
        for (int hh = 0; hh < group; hh++) {
            int r = (t - t0) * group + hh;
            const float *a = sc->acc + (size_t)r * hd;
            float inv = 1.0f / sc->l[r]; /* l >= 1: every query sees itself */
            float *dst = job->out + (size_t)t * job->out_stride + (size_t)(g * group + hh) * hd;
            for (int d = 0; d < hd; d++)
                dst[d] = a[d] * inv;
        }
}

void k25_cpu_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale)
{
    if (n_jobs <= 0)
        return;
    const int n_kv = jobs[0].kv.n_kv_heads, hd = jobs[0].kv.head_dim, bs = jobs[0].kv.block_size;
    const int group = n_heads / n_kv;
    K25_ASSERT(group * n_kv == n_heads);

    /* item i -> (job, kv head, tile); first[j] = first item of job j */
    int first[n_jobs + 1];
    first[0] = 0;
    for (int j = 0; j < n_jobs; j++)
        first[j + 1] = first[j] + n_kv * ((jobs[j].n_q + TQ - 1) / TQ);
    const int n_items = first[n_jobs];

#pragma omp parallel if (n_items > 1)
    {
        struct scratch sc;
        size_t rows = (size_t)TQ * group;
        float *mem = k25_alloc(K25_MEM_ATTN_SCRATCH,
                               sizeof(float) * (rows * hd * 2 + rows * bs + rows * 2 + 2 * (size_t)bs * hd));
        K25_ASSERT(mem != NULL);
        sc.q = mem;
        sc.acc = sc.q + rows * hd;
        sc.s = sc.acc + rows * hd;
        sc.m = sc.s + rows * bs;
        sc.l = sc.m + rows;
        sc.kt = sc.l + rows;
        sc.vt = sc.kt + (size_t)bs * hd;
        int j = 0;
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < n_items; it++) {
            while (it >= first[j + 1])
                j++;
            while (it < first[j])
                j--;
            int local = it - first[j];
            int g = local % n_kv, tile = local / n_kv;
            int t0 = tile * TQ, t1 = t0 + TQ < jobs[j].n_q ? t0 + TQ : jobs[j].n_q;
            attend_tile(&jobs[j], g, group, t0, t1, scale, &sc);
        }
        k25_free(mem);
    }
}
