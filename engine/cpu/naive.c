/*
 * naive.c - naive attention baseline (see baselines.h): the textbook
 * softmax(Q K^T * scale + causal mask) V with the score matrix of every
 * head materialized.  It exists to be the simple, memory-hungry reference:
 * k25 attn-bench shows its scratch growing with queries x keys, and the
 * memory calculator predicts it (naive_scratch_bytes), so settings it
 * cannot hold are skipped instead of attempted.
 */
#include "baselines.h"
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* The jobs run one after another: the peak is one job's (block size, dtype,
 * sequences and threads do not matter). */
static int64_t naive_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int block_size, enum k25_dtype dtype,
                                   int n_seqs, int64_t n_q, int64_t n_kv, int threads)
{
    (void)block_size;
    (void)dtype;
    (void)n_seqs;
    (void)threads;
    /* S [heads][n_q][n_kv] + contiguous K and V [kv_heads][n_kv][head_dim] */
    return ((int64_t)n_heads * n_q * n_kv + 2 * (int64_t)n_kv_heads * n_kv * head_dim) *
           (int64_t)sizeof(float);
}

/* One job: scratch allocated for it alone, freed before the next. */
static void naive_job(const struct k25_attn_job *job, int n_heads, float scale, struct k25_mem_acct *acct)
{
    const struct k25_kv_view *kv = &job->kv;
    const int hd = kv->head_dim, n_kv = kv->n_kv_heads, group = n_heads / n_kv;
    const int n_q = job->n_q, nv = job->q_pos0 + job->n_q; /* keys the last query sees */
    K25_ASSERT(nv <= kv->n_tokens);
    size_t s_elems = (size_t)n_heads * n_q * nv, kv_elems = (size_t)n_kv * nv * hd;
    float *mem = k25_alloc_acct(acct, K25_MEM_ATTN_SCRATCH, sizeof(float) * (s_elems + 2 * kv_elems));
    K25_ASSERT(mem != NULL);
    float *S = mem, *K = S + s_elems, *V = K + kv_elems;

    /* gather (and dequantize) the paged cache: K, V [kv_head][token][hd] */
#pragma omp parallel for schedule(static)
    for (int g = 0; g < n_kv; g++)
        for (int k0 = 0; k0 < nv; k0 += kv->block_size) {
            int n = nv - k0 < kv->block_size ? nv - k0 : kv->block_size;
            float *kd = K + ((size_t)g * nv + k0) * hd, *vd = V + ((size_t)g * nv + k0) * hd;
            const float *ks = k25_kv_rows(kv, kv->k_blocks, g, k0, n, kd);
            const float *vs = k25_kv_rows(kv, kv->v_blocks, g, k0, n, vd);
            if (ks != kd)
                memcpy(kd, ks, sizeof(float) * (size_t)n * hd);
            if (vs != vd)
                memcpy(vd, vs, sizeof(float) * (size_t)n * hd);
        }

#pragma omp parallel for schedule(static)
    for (int h = 0; h < n_heads; h++) {
        const int g = h / group;
        float *Sh = S + (size_t)h * n_q * nv;
        const float *Kg = K + (size_t)g * nv * hd, *Vg = V + (size_t)g * nv * hd;
        /* S = scale * Q_h K_g^T, all queries x all keys */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_q, nv, hd, scale, job->q + (size_t)h * hd,
                    job->q_stride, Kg, hd, 0.0f, Sh, nv);
        for (int i = 0; i < n_q; i++) {
            float *row = Sh + (size_t)i * nv;
            int lim = job->q_pos0 + i + 1; /* causal, aligned bottom-right */
            float mx = row[0];
            for (int j = 1; j < lim; j++)
                mx = row[j] > mx ? row[j] : mx;
            double sum = 0.0;
            for (int j = 0; j < lim; j++) {
                row[j] = expf(row[j] - mx);
                sum += row[j];
            }
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < lim; j++)
                row[j] *= inv;
            for (int j = lim; j < nv; j++)
                row[j] = 0.0f;
        }
        /* O_h = P V_g */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_q, hd, nv, 1.0f, Sh, nv, Vg, hd, 0.0f,
                    job->out + (size_t)h * hd, job->out_stride);
    }
    k25_free(mem);
}

void k25_baseline_naive_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                                  struct k25_mem_acct *acct)
{
    K25_ASSERT(n_jobs <= 0 || n_heads % jobs[0].kv.n_kv_heads == 0);
    for (int j = 0; j < n_jobs; j++)
        naive_job(&jobs[j], n_heads, scale, acct);
}

const struct k25_attn_impl_desc k25_attn_naive = {
    .id = K25_ATTN_NAIVE,
    .name = "naive",
    .run = k25_baseline_naive_attention,
    .scratch_bytes = naive_scratch_bytes,
    .compression = false,
};
