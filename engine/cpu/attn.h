/*
 * attn.h - attention kernels: the job an implementation runs, the table of
 * implementations, and the helpers kernels share.
 *
 * The CPU backend's attention op (backend_cpu.c) builds one k25_attn_job
 * per sequence from the paged KV cache and runs the implementation that
 * cfg.attention names, through the table in attn_impl.c: the engine's
 * ChunkedAttention (attention.c) or a baseline (engine/cpu/flash2.c,
 * engine/cpu/naive.c), which register there and include only this header.
 * `k25 attn-bench` (harness/attnbench.c) times the same table.  Host
 * memory: these are CPU kernels; a GPU backend has its own attention op.
 */
#ifndef K25_ATTN_H
#define K25_ATTN_H

#include "k25.h"
#include "k25_attn.h" /* the job, the KV view, the implementation table (public) */

/* One slot's compression state as k25_kv_seq_slot returns it (kvcache.h):
 * count in the block, score and seen in the sequence's statistics. */
struct k25_kv_slot {
    float logc;   /* ln(count): added to the attention logit */
    float count;  /* tokens this slot stands for (1 unless merged) */
    float score;  /* attention received, summed over queries and query heads */
    float seen;   /* (query, query head) pairs that could see the slot */
};

/* The first query of job that contributes to its scores (kv.score_window). */
static inline int k25_attn_score_q0(const struct k25_attn_job *job)
{
    int w = job->kv.score_window;
    return w > 0 && job->n_q > w ? job->n_q - w : 0;
}

/* The implementations in the table, defined beside their kernels. */
extern const struct k25_attn_impl_desc k25_attn_chunked;  /* engine/cpu/attention.c */
extern const struct k25_attn_impl_desc k25_attn_flash2;   /* engine/cpu/flash2.c */
extern const struct k25_attn_impl_desc k25_attn_naive;    /* engine/cpu/naive.c */

/* CPU ChunkedAttention (attention.c). */
void k25_cpu_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                       struct k25_mem_acct *acct);

/* Helpers the kernels and baselines share (kvstore.c: KV rows; attention.c: softmax). */

/* dst[i] = half src[i] as float, vectorized (F16C / AVX-512) where built so. */
void k25_fp16_to_fp32_row(const uint16_t *src, float *dst, size_t n);
/* n floats as fp16 (k25_fp32_to_fp16 each: round to nearest even). */
void k25_fp32_to_fp16_row(const float *src, uint16_t *dst, size_t n);

/*
 * Keys (blocks = kv->k_blocks) or values (kv->v_blocks) of slots
 * [k0, k0+n) for KV head g as fp32 rows [n][head_dim]: a pointer into the
 * cache when the rows are fp32 and inside one block, else dequantized or
 * gathered into tmp ([n][head_dim], only touched then: a tile buffer,
 * never a whole-block copy).
 */
const float *k25_kv_rows(const struct k25_kv_view *kv, const void *const *blocks, int g, int k0,
                         int n, float *tmp);
/* ln(count) of slots [k0, k0+n) of KV head g into out[n]; false (out
 * untouched) when the view has no slot metadata or every count is 1 (the
 * term is 0: callers then add nothing). */
bool k25_kv_logc(const struct k25_kv_view *kv, int g, int k0, int n, float *out);
/* The table k25_kv_logc reads: ln(c) for a count c in 0..255 (ln 1 = 0 exactly). */
const float *k25_kv_logc_table(void);

/* Whether k25_kv_rows may need tmp for tiles of `tile` tokens starting at multiples of tile. */
bool k25_kv_rows_need_tmp(const struct k25_kv_view *kv, int tile);

/*
 * One row of the online softmax over a tile of nk scores s, of which the
 * first lim are visible: updates the running max *m and sum *l, rescales
 * the row's output acc[hd] when the max grows, turns s into exp(s - m)
 * (0 beyond lim).
 */
void k25_softmax_tile_row(float *s, int nk, int lim, float *m, float *l, float *acc, int hd);

/* exp(x) for the softmax: vectorizable, relative error < 2e-7 on [-87, 88]. */
static inline float k25_fast_expf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* x = n ln2 + r with |r| <= ln2/2; adding and removing 1.5*2^23 rounds
     * x*log2(e) to the nearest integer without a call (so it vectorizes) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f; /* ln2 high bits (exact product) */
    r -= n * 1.428606765330187e-06f;      /* ln2 low bits */
    /* exp(r) by its Taylor polynomial to degree 7: error < 6e-9 */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n from the exponent bits; memcpy (not a union) keeps it vectorizable */
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    __builtin_memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

#if defined(__AVX2__)
#include <immintrin.h>
/*
 * k25_fast_expf on 8 lanes: the same operations in the same order (separate
 * multiplies and adds, as the scalar compiles under -std=c11's
 * -ffp-contract=off), so every lane is bit-identical to the scalar.  GCC 12
 * does not vectorize the scalar's clamps ("control flow in loop"), and the
 * softmax's exp map was the largest single cost of prefill.
 */
static inline __m256 k25_fast_expf8(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f)); /* x < -87 ? -87 : x (no NaN here) */
    x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    const __m256 big = _mm256_set1_ps(12582912.0f);
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), big), big);
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(1.428606765330187e-06f)));
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
#endif

/* s[j] = k25_fast_expf(s[j] - m) for j < n (8 lanes at a time where built with AVX2). */
static inline void k25_exp_sub_row(float *s, int n, float m)
{
    int j = 0;
#if defined(__AVX2__)
    const __m256 mv = _mm256_set1_ps(m);
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(s + j, k25_fast_expf8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
#endif
    for (; j < n; j++)
        s[j] = k25_fast_expf(s[j] - m);
}

#endif /* K25_ATTN_H */
