/*
 * attention.c - ChunkedAttention on the CPU: the engine's prefill and
 * decode attention kernels over the paged KV cache.
 *
 * Prefill.  A prefill chunk's queries attend to every earlier token of
 * their sequence (read from the paged KV cache) plus, causally, to the
 * chunk itself.  The work is cut into items of (job, KV head, tile of TQ
 * queries); the query heads that share a KV head are stacked into one row
 * block (GQA), so a tile is a [TQ*group][head_dim] matrix multiplied by one
 * KV tile of TK tokens at a time (OpenBLAS SGEMM, single-threaded inside an
 * OpenMP worker) with an online softmax carrying the running max, sum and
 * output between tiles (FlashAttention's recurrence).  TQ*group is about
 * TQ_ROWS whatever the GQA ratio, so scratch is bounded by TQ_ROWS and TK,
 * never by the context length.
 *
 * Decode.  A job with at most DECODE_MAX_Q queries (a decode step, or a
 * short tail chunk) has too little work per KV head to keep the threads
 * busy, and is bandwidth-bound: its KV range is split into
 * ceil(n / SPLIT_TOKENS) near-equal pieces (whole decode tiles; split_len),
 * one item per (job, KV head, split), each producing a
 * partial (max, sum, unnormalized output) per query row; a second pass
 * merges the partials of each (job, KV head) in split order.  The number of
 * splits depends only on the KV length, so the result is the same for any
 * thread count.
 *
 * Storage types.  KV tiles are read through k25_kv_rows: fp32 rows that lie
 * in one block are used in place; fp16 rows are dequantized on the fly into
 * a per-thread tile buffer that stays in L1/L2 (F16C/AVX-512 conversion
 * where the build has it, the portable bit conversion otherwise), so the
 * cache is read exactly once per tile and never converted in full.
 *
 * Determinism: every row's reductions (dot products, softmax sums, split
 * merge) run in an order fixed by the shapes alone.
 */
#include "attn.h"
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define TQ_ROWS 128      /* target query rows (queries x group heads) per prefill tile */
#define TK 128           /* KV tokens per tile (SGEMM inner size) */
#define DT 32            /* KV tokens per decode sub-tile (two fp32 tiles stay in L1) */
#define DECODE_MAX_Q 4   /* jobs with at most this many queries take the split-KV path */
#define SPLIT_TOKENS 2048 /* decode: KV tokens per split */

/* Adds the slots' ln(count) to a row block of scores s[rows][ld] (nk columns). */
static void add_logc(const struct k25_kv_view *kv, int g, int k0, int nk, float *s, int rows, int ld, float *lc)
{
    if (!k25_kv_logc(kv, g, k0, nk, lc))
        return;
    for (int r = 0; r < rows; r++) {
        float *sr = s + (size_t)r * ld;
#pragma omp simd
        for (int j = 0; j < nk; j++)
            sr[j] += lc[j];
    }
}

/* Decode scoring: copies a tile's raw logits (s[rows][DT], slots [k0, k0+nk))
 * into raw[rows][raw_ld] for the slots >= kv->score_k0 only: column k - score_k0
 * (the buffer spans the uncompressed tail, not the whole context). */
static void raw_store(const struct k25_kv_view *kv, float *raw, int raw_ld, int k0, int nk, const float *s, int rows)
{
    int c0 = kv->score_k0 > k0 ? kv->score_k0 - k0 : 0;
    if (!raw || c0 >= nk)
        return;
    for (int r = 0; r < rows; r++)
        memcpy(raw + (size_t)r * raw_ld + (k0 + c0 - kv->score_k0), s + (size_t)r * DT + c0,
               sizeof(float) * (size_t)(nk - c0));
}

/* Columns of a decode job's raw-logit rows: its visible slots from score_k0 on. */
static inline int raw_width(const struct k25_attn_job *job)
{
    int w = job->q_pos0 + job->n_q - job->kv.score_k0;
    return w > 0 ? w : 0;
}

/* ------------------------------------------------------ online softmax */

/*
 * One row of the online softmax: s[0..nk) are this tile's scores, of which
 * the first lim are visible (causal mask).  Updates the running max *m and
 * sum *l, rescales the row's accumulated output acc[hd] when the max grows,
 * and turns s into probabilities (0 beyond lim).
 */
void k25_softmax_tile_row(float *s, int nk, int lim, float *m, float *l, float *acc, int hd)
{
    if (lim > nk)
        lim = nk;
    if (lim <= 0) {
        memset(s, 0, sizeof(float) * (size_t)nk);
        return;
    }
    /* omp simd: vectorized reductions in a fixed lane order */
    float mx = s[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < lim; j++)
        mx = s[j] > mx ? s[j] : mx;
    if (mx > *m) {
        float alpha = (*m == -INFINITY) ? 0.0f : k25_fast_expf(*m - mx);
        *l *= alpha;
        for (int d = 0; d < hd; d++)
            acc[d] *= alpha;
        *m = mx;
    }
    float m_new = *m, sum = 0.0f;
    /* the exp map and the sum are separate loops (the sum's lane order is fixed by omp simd) */
    k25_exp_sub_row(s, lim, m_new);
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < lim; j++)
        sum += s[j];
    for (int j = lim; j < nk; j++)
        s[j] = 0.0f;
    *l += sum;
}

/* ------------------------------------------------------------- scratch */

static int tile_queries(int group)
{
    return group >= TQ_ROWS ? 1 : TQ_ROWS / group;
}

/* Per-thread scratch in floats: q, acc [rows][hd], s [rows][TK], m, l [rows],
 * lc, cs [TK] (slot ln-counts, score column sums), and, when tiles must be
 * converted or gathered, kt, vt [TK][hd]. */
static size_t thread_floats(int group, int hd, bool need_tmp)
{
    size_t rows = (size_t)tile_queries(group) * group;
    if (rows < (size_t)DECODE_MAX_Q * group)
        rows = (size_t)DECODE_MAX_Q * group;
    return rows * hd * 2 + rows * TK + rows * 2 + 2 * (size_t)TK + (need_tmp ? 2 * (size_t)TK * hd : 0);
}

static int n_splits(int visible)
{
    return (visible + SPLIT_TOKENS - 1) / SPLIT_TOKENS;
}

/* Tokens per decode split: the visible keys shared out evenly over n_splits, rounded up to a
 * whole number of decode tiles (DT, also the default int8/int4 key group), so that a context
 * past a multiple of SPLIT_TOKENS does not leave one short split for one thread to wait on
 * (the compute-bound int4 tiles showed it: 28K slots ran 5% slower per slot than 32K).  A
 * function of the job's context alone: no thread count or batch moves the boundaries. */
static int split_len(int visible)
{
    const int n = n_splits(visible), len = (visible + n - 1) / n;
    return (len + DT - 1) / DT * DT;
}

static int64_t chunked_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int block_size,
                                  enum k25_dtype dtype, int n_seqs, int64_t n_q, int64_t n_kv,
                                  int threads)
{
    int group = n_heads / n_kv_heads;
    bool need_tmp = dtype != K25_DTYPE_FP32 || block_size % TK != 0;
    int64_t items, partial = 0;
    if (n_q <= DECODE_MAX_Q) {
        int64_t sp = (n_kv + SPLIT_TOKENS - 1) / SPLIT_TOKENS;
        items = (int64_t)n_seqs * n_kv_heads * sp;
        partial = items * n_q * group * (head_dim + 2) * (int64_t)sizeof(float);
    } else {
        int tq = tile_queries(group);
        items = (int64_t)n_seqs * n_kv_heads * ((n_q + tq - 1) / tq);
    }
    int64_t per = (int64_t)thread_floats(group, head_dim, need_tmp) * (int64_t)sizeof(float);
    return partial + (items > 1 ? threads : 1) * per;
}

struct scratch {
    float *q;    /* [rows][hd]  scaled queries */
    float *acc;  /* [rows][hd]  unnormalized output */
    float *s;    /* [rows][TK]  scores, then probabilities */
    float *m;    /* [rows]      running max */
    float *l;    /* [rows]      running sum */
    float *lc;   /* [TK]        ln(count) of a tile's slots */
    float *cs;   /* [TK]        score column sums */
    float *kt;   /* [TK][hd]    converted/gathered keys (NULL when not needed) */
    float *vt;   /* [TK][hd]    values */
};

/* Copies the query rows of tile queries [t0, t1), heads of KV head g, scaled. */
static void load_queries(const struct k25_attn_job *job, int g, int group, int t0, int t1, float scale,
                         struct scratch *sc)
{
    const int hd = job->kv.head_dim, rows = (t1 - t0) * group;
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
}

/* ------------------------------------------------------------- prefill */

/* One prefill item: queries [t0, t1) of job, query heads of KV head g. */
static void prefill_tile(const struct k25_attn_job *job, int g, int group, int t0, int t1, float scale,
                         struct scratch *sc, float *ml)
{
    const struct k25_kv_view *kv = &job->kv;
    const int hd = kv->head_dim, rows = (t1 - t0) * group;
    load_queries(job, g, group, t0, t1, scale, sc);

    int visible = job->q_pos0 + t1; /* tokens the last query of the tile sees */
    K25_ASSERT(visible <= kv->n_tokens);
    for (int k0 = 0; k0 < visible; k0 += TK) {
        int nk = visible - k0 < TK ? visible - k0 : TK;
        const float *K = k25_kv_rows(kv, kv->k_blocks, g, k0, nk, sc->kt);
        const float *V = k25_kv_rows(kv, kv->v_blocks, g, k0, nk, sc->vt);

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, 1.0f, sc->q, hd, K, hd,
                    0.0f, sc->s, nk);
        add_logc(kv, g, k0, nk, sc->s, rows, nk, sc->lc);
        for (int r = 0; r < rows; r++) /* row r sees keys < q_pos0 + t0 + r/group + 1 */
            k25_softmax_tile_row(sc->s + (size_t)r * nk, nk, job->q_pos0 + t0 + r / group - k0 + 1,
                                 &sc->m[r], &sc->l[r], sc->acc + (size_t)r * hd, hd);
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
            if (ml) { /* final max and sum of the row, for the scoring pass */
                ml[2 * ((size_t)t * group + hh)] = sc->m[r];
                ml[2 * ((size_t)t * group + hh) + 1] = sc->l[r];
            }
        }
}

/*
 * Scoring pass of a prefill job (job->score set): for KV head g and the key
 * tile [k0, k0+nk), the attention each slot received from every query of
 * the job and every query head of g, from the rows' final max and sum in
 * ml ([n_q][group][2] for this g).  Recomputes the scores tile by tile (one
 * more Q K^T, no score matrix kept); sums in query order.
 */
static void prefill_score(const struct k25_attn_job *job, int g, int group, int k0, float scale,
                          struct scratch *sc, const float *ml)
{
    const struct k25_kv_view *kv = &job->kv;
    const int hd = kv->head_dim, tq = tile_queries(group), visible = job->q_pos0 + job->n_q;
    const int nk = visible - k0 < TK ? visible - k0 : TK;
    const float *K = k25_kv_rows(kv, kv->k_blocks, g, k0, nk, sc->kt);
    for (int j = 0; j < nk; j++)
        sc->cs[j] = 0.0f;
    /* queries before k0 - q_pos0 see none of the tile; only the score window's queries score */
    int tfirst = k0 - job->q_pos0 > 0 ? k0 - job->q_pos0 : 0;
    if (tfirst < k25_attn_score_q0(job))
        tfirst = k25_attn_score_q0(job);
    for (int t0 = tfirst; t0 < job->n_q; t0 += tq) {
        int t1 = t0 + tq < job->n_q ? t0 + tq : job->n_q, rows = (t1 - t0) * group;
        load_queries(job, g, group, t0, t1, scale, sc);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, 1.0f, sc->q, hd, K, hd, 0.0f,
                    sc->s, nk);
        add_logc(kv, g, k0, nk, sc->s, rows, nk, sc->lc);
        for (int r = 0; r < rows; r++) {
            int lim = job->q_pos0 + t0 + r / group - k0 + 1;
            lim = lim < nk ? lim : nk;
            const float *mr = ml + 2 * ((size_t)t0 * group + r);
            float m = mr[0], inv = 1.0f / mr[1], *sr = sc->s + (size_t)r * nk;
            k25_exp_sub_row(sr, lim, m);
            for (int j = 0; j < lim; j++)
                sc->cs[j] += sr[j] * inv;
        }
    }
    float *dst = job->score + (size_t)g * visible + k0;
    for (int j = 0; j < nk; j++)
        dst[j] = sc->cs[j];
}

/* -------------------------------------------------------------- decode */

#if defined(__AVX512F__)
/* 16 elements of a KV row as floats (fp16 converted in the register). */
static inline __m512 kv_load16(const void *base, bool half, size_t i)
{
    return half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + i)))
                : _mm512_loadu_ps((const float *)base + i);
}

/*
 * AVX-512 decode tile (head_dim a multiple of 16, at most 128): nk keys and
 * values in raw storage (kb, vb: contiguous rows of one block), dequantized
 * in registers.  Scores: each key row is loaded once and dotted with every
 * query row.  P V: two rows' accumulators stay in registers while the
 * value rows stream past.
 */
static void decode_tile_avx512(const void *kb, const void *vb, bool half, int nk, int rows, int hd,
                               int lim0, int group, struct scratch *sc, const struct k25_kv_view *kv, int g,
                               int k0, float *raw, int raw_ld)
{
    const int nv = hd / 16;
    /* Ask for the next tile's keys and values now: the loop below computes
     * between loads and alone keeps too few misses in flight to stream at
     * the memory's rate.  (A prefetch past the block end never faults.) */
    const size_t tile_bytes = (size_t)nk * hd * (half ? 2 : 4);
    for (size_t off = 0; off < tile_bytes; off += 64) {
        _mm_prefetch((const char *)kb + tile_bytes + off, _MM_HINT_T0);
        _mm_prefetch((const char *)vb + tile_bytes + off, _MM_HINT_T0);
    }
    for (int t = 0; t < nk; t++) {
        __m512 kr[8];
        for (int v = 0; v < nv; v++)
            kr[v] = kv_load16(kb, half, (size_t)t * hd + (size_t)v * 16);
        for (int r = 0; r < rows; r++) {
            const float *qr = sc->q + (size_t)r * hd;
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qr), kr[0]);
            for (int v = 1; v < nv; v++)
                a = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 16 * v), kr[v], a);
            sc->s[(size_t)r * DT + t] = _mm512_reduce_add_ps(a);
        }
    }
    add_logc(kv, g, k0, nk, sc->s, rows, DT, sc->lc);
    raw_store(kv, raw, raw_ld, k0, nk, sc->s, rows);
    for (int r = 0; r < rows; r++)
        k25_softmax_tile_row(sc->s + (size_t)r * DT, nk, lim0 + r / group + 1, &sc->m[r], &sc->l[r],
                             sc->acc + (size_t)r * hd, hd);
    for (int r0 = 0; r0 < rows; r0 += 2) {
        const bool two = r0 + 1 < rows;
        float *a0p = sc->acc + (size_t)r0 * hd, *a1p = a0p + hd;
        const float *p0 = sc->s + (size_t)r0 * DT, *p1 = p0 + DT;
        __m512 a0[8], a1[8];
        for (int v = 0; v < nv; v++) {
            a0[v] = _mm512_loadu_ps(a0p + 16 * v);
            a1[v] = two ? _mm512_loadu_ps(a1p + 16 * v) : _mm512_setzero_ps();
        }
        for (int t = 0; t < nk; t++) {
            __m512 w0 = _mm512_set1_ps(p0[t]), w1 = _mm512_set1_ps(two ? p1[t] : 0.0f);
            for (int v = 0; v < nv; v++) {
                __m512 x = kv_load16(vb, half, (size_t)t * hd + (size_t)v * 16);
                a0[v] = _mm512_fmadd_ps(w0, x, a0[v]);
                a1[v] = _mm512_fmadd_ps(w1, x, a1[v]);
            }
        }
        for (int v = 0; v < nv; v++) {
            _mm512_storeu_ps(a0p + 16 * v, a0[v]);
            if (two)
                _mm512_storeu_ps(a1p + 16 * v, a1[v]);
        }
    }
}
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define K25_DECODE_AVX2 1
/*
 * AVX2 decode tiles.  A tile's keys and values are first made fp32 rows in
 * L1 (fp32 rows in place; fp16 converted by F16C; int8/int4 codes scaled
 * and offset, one FMA per 8 channels), then two fp32 kernels do the work:
 *  - scores: each query row against four keys at a time, four vector
 *    accumulators reduced together by a fixed hadd tree (one reduction per
 *    four dot products instead of a horizontal sum per dot product);
 *  - P V: the accumulators of up to four rows x 16 channels stay in
 *    registers while the tile's value rows stream past (no load/store of
 *    the output per value row).
 * int4 keys with head_dim a multiple of 64 are the exception: they are
 * scored on their codes, never dequantized (qk4_tile_avx2 below; int8 keys
 * would overflow maddubs' 16-bit sums, head_dim 32 fills half a register);
 * so are int4 values in groups of a multiple of 16 channels, a power-of-two
 * number of groups per row (pv4_tile_avx2: the scale folded into the
 * probability, the zero into one sum per group).  The online softmax of a
 * tile's rows runs in registers (softmax_row_avx2, an FMA exp).
 * Per row every operation and its order are fixed by head_dim (and the
 * value grouping) alone: which other rows or keys share a tile never
 * changes a row's value.
 */

/* Channels [d0, d0+16) of a quantized row (int8, or int4 with the even
 * channel in the low nibble) as two vectors of floats: the integer codes,
 * not yet scaled. */
static inline void q16_codes(const uint8_t *row, int bits, int d0, __m256 *lo, __m256 *hi)
{
    __m128i x;
    if (bits == 8) {
        x = _mm_loadu_si128((const __m128i *)(row + d0));
    } else {
        const __m128i b = _mm_loadl_epi64((const __m128i *)(row + d0 / 2)), m = _mm_set1_epi8(15);
        x = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    }
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)));
}

/* Keys [k0, k0+nk) of KV head g as fp32 rows in dst[nk][hd]: all in one
 * block, below n_quant and inside one key group, so one per-channel scale
 * and zero row (fp16) hold for every key: x = code * scale + zero. */
static inline __attribute__((always_inline)) void
dequant_keys_avx2(const struct k25_kv_view *kv, int g, int k0, int nk, float *dst, const int nv)
{
    const int bs = kv->block_size, hd = nv * 8, bits = kv->dtype == K25_DTYPE_INT8 ? 8 : 4;
    const size_t rb = (size_t)hd * bits / 8;
    const unsigned char *kb = kv->k_blocks[k0 / bs];
    const int o = k0 % bs;
    const uint8_t *kq = kb + ((size_t)g * bs + o) * rb;
    const uint16_t *ksz = (const uint16_t *)(kb + kv->ks_off) + ((size_t)g * (bs / kv->group) + o / kv->group) * 2 * hd;
    __m256 sv[16], zv[16];
    for (int v = 0; v < nv; v++) {
        sv[v] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ksz + 8 * v)));
        zv[v] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ksz + hd + 8 * v)));
    }
    for (int t = 0; t < nk; t++) {
        float *d = dst + (size_t)t * hd;
        for (int v = 0; v < nv; v += 2) {
            __m256 lo, hi;
            q16_codes(kq + (size_t)t * rb, bits, 8 * v, &lo, &hi);
            _mm256_storeu_ps(d + 8 * v, _mm256_fmadd_ps(lo, sv[v], zv[v]));
            _mm256_storeu_ps(d + 8 * v + 8, _mm256_fmadd_ps(hi, sv[v + 1], zv[v + 1]));
        }
    }
}

/* Values [k0, k0+nk) of KV head g as fp32 rows in dst[nk][hd]: per token,
 * a scale and zero (fp16) per group of vgroup channels (a multiple of 8). */
static inline __attribute__((always_inline)) void
dequant_values_avx2(const struct k25_kv_view *kv, int g, int k0, int nk, float *dst, const int nv)
{
    const int bs = kv->block_size, hd = nv * 8, bits = kv->dtype == K25_DTYPE_INT8 ? 8 : 4;
    const size_t rb = (size_t)hd * bits / 8;
    const int o = k0 % bs, nvg = hd / kv->vgroup, cpg = kv->vgroup / 8;
    const uint8_t *vq = (const uint8_t *)kv->v_blocks[k0 / bs] + ((size_t)g * bs + o) * rb;
    const uint16_t *vsz = (const uint16_t *)((const unsigned char *)kv->k_blocks[k0 / bs] + kv->vs_off) +
                          ((size_t)g * bs + o) * nvg * 2;
    for (int t = 0; t < nk; t++) {
        const uint16_t *sz = vsz + (size_t)t * nvg * 2;
        float *d = dst + (size_t)t * hd, szf[32]; /* the token's (scale, zero) pairs: nvg <= hd / 8 <= 16 */
        for (int k = 0; k < 2 * nvg; k++) /* converted once per token, broadcast per 8 channels */
            szf[k] = _cvtsh_ss(sz[k]);
        for (int v = 0; v < nv; v += 2) {
            __m256 c[2];
            q16_codes(vq + (size_t)t * rb, bits, 8 * v, &c[0], &c[1]);
            for (int h = 0; h < 2; h++) {
                int k = (v + h) / cpg;
                _mm256_storeu_ps(d + 8 * (v + h), _mm256_fmadd_ps(c[h], _mm256_broadcast_ss(szf + 2 * k),
                                                                  _mm256_broadcast_ss(szf + 2 * k + 1)));
            }
        }
    }
}

/* Stores the scores of keys t..t+3 (r4) into sr, only those below nk. */
static inline void store_scores4(float *sr, int t, int nk, __m128 r4)
{
    if (t + 4 <= nk) {
        _mm_storeu_ps(sr + t, r4);
    } else {
        float tmp[4];
        _mm_storeu_ps(tmp, r4);
        for (int j = 0; t + j < nk; j++)
            sr[t + j] = tmp[j];
    }
}

/* The four dot products in a0..a3 (8 lanes each) as [sum a0, sum a1, sum a2, sum a3]. */
static inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* s[r][t] = q_r . K_t for rows query rows q[rows][hd] and nk keys K[nk][hd]
 * (s rows DT apart).  Four keys at a time; a missing fourth key is a zero
 * accumulator, which leaves the other lanes' reductions as they are. */
static inline __attribute__((always_inline)) void
qk_tile_avx2(const float *q, const float *K, int rows, int nk, float *s, const int nv)
{
    const int hd = nv * 8;
    for (int r = 0; r < rows; r++) {
        const float *qr = q + (size_t)r * hd;
        float *sr = s + (size_t)r * DT;
        for (int t = 0; t < nk; t += 4) {
            __m256 a[4];
            for (int j = 0; j < 4; j++) {
                if (t + j < nk) {
                    const float *kr = K + (size_t)(t + j) * hd;
                    a[j] = _mm256_mul_ps(_mm256_loadu_ps(qr), _mm256_loadu_ps(kr));
                    for (int v = 1; v < nv; v++)
                        a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * v), _mm256_loadu_ps(kr + 8 * v), a[j]);
                } else {
                    a[j] = _mm256_setzero_ps();
                }
            }
            __m128 r4 = reduce4(a[0], a[1], a[2], a[3]);
            store_scores4(sr, t, nk, r4);
        }
    }
}

/* Eight channels of an fp16 row as floats. */
static inline __m256 ld8h(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* qk_tile_avx2 for rr (<= 4) rows against fp16 keys read in place (K rows
 * hd apart): each key vector is converted once and used by every row,
 * instead of a converted copy of the tile written and read back.  Per
 * (row, key) the products and sums are those of qk_tile_avx2 in the same
 * order (reduce4 reduces each lane's vector alike, whichever lane it
 * holds), so the scores equal those of the converted rows bit for bit. */
static inline __attribute__((always_inline)) void
qk_rows_f16_avx2(const float *q, const uint16_t *K, int nk, float *s, const int nv, const int rr)
{
    const int hd = nv * 8;
    for (int t = 0; t < nk; t += 4) {
        __m128 by_key[4]; /* [key j] lanes = rows */
        for (int j = 0; j < 4; j++) {
            __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            if (t + j < nk) {
                const uint16_t *kr = K + (size_t)(t + j) * hd;
                __m256 k = ld8h(kr);
                for (int r = 0; r < rr; r++)
                    a[r] = _mm256_mul_ps(_mm256_loadu_ps(q + (size_t)r * hd), k);
                for (int v = 1; v < nv; v++) {
                    k = ld8h(kr + 8 * v);
                    for (int r = 0; r < rr; r++)
                        a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)r * hd + 8 * v), k, a[r]);
                }
            }
            by_key[j] = reduce4(a[0], a[1], a[2], a[3]);
        }
        _MM_TRANSPOSE4_PS(by_key[0], by_key[1], by_key[2], by_key[3]); /* now [row] lanes = keys */
        for (int r = 0; r < rr; r++)
            store_scores4(s + (size_t)r * DT, t, nk, by_key[r]);
    }
}

static inline __attribute__((always_inline)) void
qk_tile_f16_avx2(const float *q, const uint16_t *K, int rows, int nk, float *s, const int nv)
{
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const float *qr = q + (size_t)r0 * nv * 8;
        float *sr = s + (size_t)r0 * DT;
        switch (rows - r0 < 4 ? rows - r0 : 4) {
        case 1: qk_rows_f16_avx2(qr, K, nk, sr, nv, 1); break;
        case 2: qk_rows_f16_avx2(qr, K, nk, sr, nv, 2); break;
        case 3: qk_rows_f16_avx2(qr, K, nk, sr, nv, 3); break;
        default: qk_rows_f16_avx2(qr, K, nk, sr, nv, 4); break;
        }
    }
}

/*
 * int4 keys scored on their codes (issue 16).  With x_tc = scale_c code_tc
 * + zero_c (one scale and zero row per key group),
 *   s_t = sum_c q_c x_tc = sum_c q'_c code_tc + sum_c q_c zero_c,  q'_c = q_c scale_c.
 * Once per row and tile, q' is rounded to int8 with one step per row,
 * alpha = max|q'| / 127: q'_c = alpha qi_c + d_c, |d_c| <= alpha / 2.  Then
 *   sum_c q'_c code_tc = alpha sum_c qi_c code_tc + sum_c d_c code_tc,
 * the first an exact integer dot product (maddubs: unsigned codes times
 * signed qi, no overflow as 4 * 15 * 127 * hd/64 < 32767 for hd <= 128),
 * the second taken as 7.5 sum_c d_c (the codes' midpoint), so a score's
 * extra error is sum_c d_c (code_tc - 7.5): at most 7.5 hd alpha / 2, half
 * what dropping the term would leave, and beside int4's own error small
 * (qi carries 8 bits of q', the codes 4 of the key).  Per row:
 *   s_t = alpha * dot_t + cst,  cst = sum_c q_c zero_c + 7.5 sum_c d_c,
 * both sums in a fixed order; nothing depends on the other rows.
 */

/* Sum of the 8 lanes in a fixed order. */
static inline float hsum8(__m256 a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* 32 int32 lanes (channels 0..31 of a, b, c, d in order) as 32 bytes, the
 * even channels in the low 128 bits and the odd ones in the high 128 bits
 * (values within [-127, 127], so the saturating packs are exact). */
static inline __m256i qk4_pack_eo(__m256i a, __m256i b, __m256i c, __m256i d)
{
    /* packs work per 128-bit lane: dwords come out as channels 0-3, 8-11, 16-19, 24-27 | 4-7, ... */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* per 128-bit lane: even bytes, then odd bytes; then the two evens halves together */
    const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10,
                                        12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(p, eo), 0xD8);
}

/*
 * The rows' int8 queries for an int4 key tile whose scale and zero rows are
 * ksz[2][hd] (halves): per row, qi[hd] laid out as the packed codes read,
 * per 64 channels the 32 even ones then the 32 odd ones, and ac[2] =
 * (alpha, cst) (see above).  hd = 8 nv, a multiple of 64, at most 128.
 */
static inline __attribute__((always_inline)) void
qk4_prepare(const float *q, int rows, const uint16_t *ksz, int8_t *qi, float *ac, const int nv)
{
    const int hd = nv * 8;
    __m256 sv[16], zv[16];
    for (int v = 0; v < nv; v++) {
        sv[v] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ksz + 8 * v)));
        zv[v] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ksz + hd + 8 * v)));
    }
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int r = 0; r < rows; r++) {
        const float *qr = q + (size_t)r * hd;
        __m256 qp[16], mx = _mm256_setzero_ps(), zs = _mm256_setzero_ps();
        for (int v = 0; v < nv; v++) {
            const __m256 x = _mm256_loadu_ps(qr + 8 * v);
            qp[v] = _mm256_mul_ps(x, sv[v]);
            mx = _mm256_max_ps(mx, _mm256_and_ps(qp[v], absmask));
            zs = _mm256_fmadd_ps(x, zv[v], zs);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
        const float alpha = m / 127.0f, inv = m > 0.0f ? 127.0f / m : 0.0f; /* m = 0: every qi and d is 0 */
        const __m256 iv = _mm256_set1_ps(inv), av = _mm256_set1_ps(alpha);
        __m256i qv[16];
        __m256 ds = _mm256_setzero_ps();
        for (int v = 0; v < nv; v++) {
            qv[v] = _mm256_cvtps_epi32(_mm256_mul_ps(qp[v], iv)); /* round to nearest (even) */
            ds = _mm256_add_ps(ds, _mm256_fnmadd_ps(av, _mm256_cvtepi32_ps(qv[v]), qp[v]));
        }
        int8_t *qo = qi + (size_t)r * hd;
        for (int k = 0; k < nv / 8; k++) {
            const __m256i *w = qv + 8 * k;
            __m256i a = qk4_pack_eo(w[0], w[1], w[2], w[3]), b = qk4_pack_eo(w[4], w[5], w[6], w[7]);
            _mm256_storeu_si256((__m256i *)(qo + 64 * k), _mm256_permute2x128_si256(a, b, 0x20));
            _mm256_storeu_si256((__m256i *)(qo + 64 * k + 32), _mm256_permute2x128_si256(a, b, 0x31));
        }
        ac[2 * r] = alpha;
        ac[2 * r + 1] = hsum8(zs) + 7.5f * hsum8(ds);
    }
}

/*
 * Scores of int4 keys [k0, k0+nk) of KV head g (one block, below n_quant,
 * one key group) for the rows' queries q[rows][hd] into s (rows DT apart),
 * on the codes: the rows are prepared into qi (rows * (hd + 8) bytes of
 * scratch), then per four keys the codes are unpacked once (low nibbles =
 * even channels, high = odd) and every row takes four integer dot products,
 * reduced together by a fixed hadd tree.  A missing fourth key is a zero
 * code row.
 */
static inline __attribute__((always_inline)) void
qk4_tile_avx2(const struct k25_kv_view *kv, int g, int k0, int nk, const float *q, int rows, int8_t *qi,
              float *s, const int nv)
{
    const int bs = kv->block_size, hd = nv * 8, nc = nv / 8;
    const size_t rb = (size_t)hd / 2;
    const unsigned char *kb = kv->k_blocks[k0 / bs];
    const int o = k0 % bs;
    const uint8_t *kq = kb + ((size_t)g * bs + o) * rb;
    const uint16_t *ksz = (const uint16_t *)(kb + kv->ks_off) + ((size_t)g * (bs / kv->group) + o / kv->group) * 2 * hd;
    float *ac = (float *)(qi + (size_t)rows * hd); /* hd is a multiple of 64: aligned as the buffer */
    qk4_prepare(q, rows, ksz, qi, ac, nv);

    const __m256i nib = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int t = 0; t < nk; t += 4) {
        __m256i lo[4][2], hi[4][2];
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < nc; k++) {
                if (t + j < nk) {
                    const __m256i b = _mm256_loadu_si256((const __m256i *)(kq + (size_t)(t + j) * rb + 32 * k));
                    lo[j][k] = _mm256_and_si256(b, nib);
                    hi[j][k] = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
                } else {
                    lo[j][k] = hi[j][k] = _mm256_setzero_si256();
                }
            }
        for (int r = 0; r < rows; r++) {
            const int8_t *qr = qi + (size_t)r * hd;
            __m256i a[4];
            for (int j = 0; j < 4; j++) {
                __m256i x = _mm256_setzero_si256();
                for (int k = 0; k < nc; k++) {
                    x = _mm256_add_epi16(x, _mm256_maddubs_epi16(lo[j][k], _mm256_loadu_si256((const __m256i *)(qr + 64 * k))));
                    x = _mm256_add_epi16(x, _mm256_maddubs_epi16(hi[j][k], _mm256_loadu_si256((const __m256i *)(qr + 64 * k + 32))));
                }
                a[j] = _mm256_madd_epi16(x, ones);
            }
            __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
            __m128i d4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            __m128 r4 = _mm_fmadd_ps(_mm_set1_ps(ac[2 * r]), _mm_cvtepi32_ps(d4), _mm_set1_ps(ac[2 * r + 1]));
            float *sr = s + (size_t)r * DT;
            store_scores4(sr, t, nk, r4);
        }
    }
}

/*
 * acc[r] += sum_t p[r][t] V_t for every row (p rows DT apart, acc rows hd
 * apart), V the tile's nk value rows (fp32, or fp16 converted as read).
 * Row by row, up to 64 channels a pass with their accumulators in
 * registers, each pass reading the value rows in order: the first row's
 * pass streams the tile from memory with many misses in flight and the
 * other rows find it in L1.  (Four rows by 16 channels, stepping over the
 * value rows once per channel block, kept too few misses in flight: that
 * order spent more time waiting for the value tile than computing.)  Per
 * row and channel the sum runs over t in order, from acc.
 */
static inline __attribute__((always_inline)) void
pv_tile_avx2(const float *p, const void *V, int rows, int nk, float *acc, const int nv, const bool f16)
{
    const int hd = nv * 8;
    for (int r = 0; r < rows; r++) {
        const float *pr = p + (size_t)r * DT;
        float *ar = acc + (size_t)r * hd;
        for (int c0 = 0; c0 < nv; c0 += 8) {
            const int nc = nv - c0 < 8 ? nv - c0 : 8;
            __m256 a[8];
            for (int c = 0; c < nc; c++)
                a[c] = _mm256_loadu_ps(ar + 8 * (c0 + c));
            for (int t = 0; t < nk; t++) {
                const __m256 pb = _mm256_broadcast_ss(pr + t);
                const size_t i = (size_t)t * hd + 8 * (size_t)c0;
                for (int c = 0; c < nc; c++)
                    a[c] = _mm256_fmadd_ps(pb,
                                           f16 ? ld8h((const uint16_t *)V + i + 8 * c)
                                               : _mm256_loadu_ps((const float *)V + i + 8 * c),
                                           a[c]);
            }
            for (int c = 0; c < nc; c++)
                _mm256_storeu_ps(ar + 8 * (c0 + c), a[c]);
        }
    }
}

/*
 * int4 values on their codes (issue 16).  A value is x_tc = s_tk code_tc +
 * z_tk (per token t a scale and zero per group k of vgroup channels), so a
 * row's sum over a tile is
 *   sum_t p_t x_tc = sum_t w_tk code_tc + Z_k,  w_tk = p_t s_tk,  Z_k = sum_t p_t z_tk:
 * the scale folds into the probability (once per row, token and group) and
 * the zero into one scalar per row and group, so no dequantized value row is
 * written or read back.  The codes are made floats once per token and
 * shared by up to four rows: the 8 bytes of 16 channels zero-extended to
 * 32-bit lanes give the even channels (low nibbles, after a mask) and the
 * odd ones (high nibbles, after a shift), so the accumulators hold even and
 * odd channels apart and are interleaved back once per tile.  Per row and
 * channel the tile adds (Z_k + w_0k code_0c + w_1k code_1c + ...) to acc,
 * in that order: fixed by head_dim and vgroup alone.  vgroup is a multiple
 * of 16 (16 channels never straddle two groups).
 */

/* The tile's (scale, zero) pairs as floats, token-major: F[t][k][2] for
 * t < nk, zeros on to the end of the last 8 tokens (8 w floats per 8
 * tokens, w = 2 nvg).  The pairs of the tile's tokens lie together (token
 * t at w t halves from the first). */
static inline void pv4_pairs(const uint16_t *sz, int nk, int w, float *F)
{
    const int n = nk * w, n8 = (nk + 7) / 8 * 8 * w;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(F + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sz + i))));
    if (i < n) {
        uint16_t tail[8] = {0};
        memcpy(tail, sz + i, sizeof(uint16_t) * (size_t)(n - i));
        _mm256_storeu_ps(F + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tail)));
        i += 8;
    }
    for (; i < n8; i += 8)
        _mm256_storeu_ps(F + i, _mm256_setzero_ps());
}

/* For rr rows of probabilities p (rows DT apart, zero from nk on to the end
 * of the last 8 tokens): the products W[j][t][k][2] = p_jt (s_tk, z_tk)
 * (token-major as F; w = 2 nvg a power of two), and Zs[j][k] = sum_t p_jt
 * z_tk: per lane in token order, then the lanes of group k in lane order.
 * The probabilities are read as the softmax stored them, 8 tokens to a
 * vector, each spread over w vectors (lane i of the m-th: token (8 m + i) / w). */
static inline __attribute__((always_inline)) void
pv4_weights(const float *p, int rr, int nk, int nvg, const float *F, float *W, float *Zs)
{
    const int w = 2 * nvg, nc = (nk + 7) / 8, nz = w > 8 ? 2 : 1;
    const __m128i lw = _mm_cvtsi32_si128(__builtin_ctz((unsigned)w));
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int j = 0; j < rr; j++) {
        const float *pj = p + (size_t)j * DT;
        float *Wj = W + (size_t)j * DT * w;
        __m256 za0 = _mm256_setzero_ps(), za1 = _mm256_setzero_ps(); /* even and odd vectors when w = 16 */
        for (int c = 0; c < nc; c++) {
            const __m256 pv = _mm256_loadu_ps(pj + 8 * c);
            for (int m = 0; m < w; m += nz) {
                const __m256i idx = _mm256_srl_epi32(_mm256_add_epi32(iota, _mm256_set1_epi32(8 * m)), lw);
                const __m256 q = _mm256_mul_ps(_mm256_permutevar8x32_ps(pv, idx), _mm256_loadu_ps(F + 8 * (c * w + m)));
                _mm256_storeu_ps(Wj + 8 * (c * w + m), q);
                za0 = _mm256_add_ps(za0, q);
                if (nz == 2) { /* the same token's second vector */
                    const __m256 q1 = _mm256_mul_ps(_mm256_permutevar8x32_ps(pv, idx), _mm256_loadu_ps(F + 8 * (c * w + m + 1)));
                    _mm256_storeu_ps(Wj + 8 * (c * w + m + 1), q1);
                    za1 = _mm256_add_ps(za1, q1);
                }
            }
        }
        float zl[16];
        _mm256_storeu_ps(zl, za0);
        _mm256_storeu_ps(zl + 8, za1);
        for (int k = 0; k < nvg; k++) {
            float z = 0.0f;
            for (int i = 2 * k + 1; i < 8 * nz; i += w)
                z += zl[i];
            Zs[j * nvg + k] = z;
        }
    }
}

/* acc[j][16 b + c] += Zs[j][k] + sum_t W[j][t][k][0] code_t,16b+c for rr
 * (<= 4) rows (acc rows hd apart), channels [16 b, 16 b + 16) of group k. */
static inline __attribute__((always_inline)) void
pv4_rows_avx2(const uint8_t *vq, size_t rb, int nk, int nvg, const float *W, const float *Zs, float *acc,
              int hd, int b, int k, const int rr)
{
    const int w = 2 * nvg;
    const __m256i nib = _mm256_set1_epi32(15);
    __m256 ae[4], ao[4];
    for (int j = 0; j < rr; j++)
        ae[j] = ao[j] = _mm256_set1_ps(Zs[j * nvg + k]);
    for (int t = 0; t < nk; t++) {
        const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(vq + (size_t)t * rb + 8 * b)));
        const __m256 e = _mm256_cvtepi32_ps(_mm256_and_si256(x, nib)), o = _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4));
        for (int j = 0; j < rr; j++) {
            const __m256 wb = _mm256_broadcast_ss(W + (size_t)j * DT * w + (size_t)t * w + 2 * k);
            ae[j] = _mm256_fmadd_ps(wb, e, ae[j]);
            ao[j] = _mm256_fmadd_ps(wb, o, ao[j]);
        }
    }
    for (int j = 0; j < rr; j++) {
        /* even lanes e_i = channel 2i, odd o_i = 2i + 1: unpack gives channels 0-3 | 8-11 and 4-7 | 12-15 */
        const __m256 l = _mm256_unpacklo_ps(ae[j], ao[j]), h = _mm256_unpackhi_ps(ae[j], ao[j]);
        float *a = acc + (size_t)j * hd + 16 * b;
        _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_permute2f128_ps(l, h, 0x20)));
        _mm256_storeu_ps(a + 8, _mm256_add_ps(_mm256_loadu_ps(a + 8), _mm256_permute2f128_ps(l, h, 0x31)));
    }
}

/* Whether pv4_tile_avx2 takes the view's values: 16 channels in one group, a power-of-two number of groups. */
static inline bool pv4_fits(const struct k25_kv_view *kv)
{
    const int nvg = kv->head_dim / kv->vgroup;
    return kv->vgroup % 16 == 0 && (nvg & (nvg - 1)) == 0;
}

/* P V of int4 values [k0, k0+nk) of KV head g (one block, below n_quant) on
 * their codes for every row (p rows DT apart, acc rows hd apart); buf holds
 * DT * 2 nvg * 5 floats of scratch. */
static inline __attribute__((always_inline)) void
pv4_tile_avx2(const struct k25_kv_view *kv, int g, int k0, int nk, float *p, int rows, float *acc, float *buf,
              const int nv)
{
    const int bs = kv->block_size, hd = nv * 8, nvg = hd / kv->vgroup, o = k0 % bs;
    const size_t rb = (size_t)hd / 2;
    const uint8_t *vq = (const uint8_t *)kv->v_blocks[k0 / bs] + ((size_t)g * bs + o) * rb;
    const uint16_t *sz = (const uint16_t *)((const unsigned char *)kv->k_blocks[k0 / bs] + kv->vs_off) +
                         ((size_t)g * bs + o) * nvg * 2;
    float *F = buf, *W = buf + DT * 2 * nvg, Zs[4 * 16];
    pv4_pairs(sz, nk, 2 * nvg, F);
    if (nk % 8) /* the weights read whole vectors of probabilities */
        for (int r = 0; r < rows; r++)
            memset(p + (size_t)r * DT + nk, 0, sizeof(float) * (size_t)(8 - nk % 8));
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int rr = rows - r0 < 4 ? rows - r0 : 4;
        float *ar = acc + (size_t)r0 * hd;
        pv4_weights(p + (size_t)r0 * DT, rr, nk, nvg, F, W, Zs);
        for (int b = 0; b < hd / 16; b++) {
            const int k = 16 * b / kv->vgroup;
            switch (rr) {
            case 1: pv4_rows_avx2(vq, rb, nk, nvg, W, Zs, ar, hd, b, k, 1); break;
            case 2: pv4_rows_avx2(vq, rb, nk, nvg, W, Zs, ar, hd, b, k, 2); break;
            case 3: pv4_rows_avx2(vq, rb, nk, nvg, W, Zs, ar, hd, b, k, 3); break;
            default: pv4_rows_avx2(vq, rb, nk, nvg, W, Zs, ar, hd, b, k, 4); break;
            }
        }
    }
}

/* exp(x) for x <= 0 on 8 lanes for the decode softmax: k25_fast_expf's
 * range reduction and degree-7 polynomial with fused multiply-adds (so
 * half the operations, and no less accurate: relative error < 2e-7; not
 * bit-identical to k25_fast_expf, and never mixed with it in one row). */
static inline __m256 exp8_fma(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f)); /* 2^n stays a normal number */
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/*
 * k25_softmax_tile_row for a decode tile (s: one row of DT floats, nk <= DT)
 * in registers: the at most four vectors of scores are loaded once (lanes
 * from lim on masked), their max taken by a fixed tree, acc rescaled only
 * when the max grows, the exps (exp8_fma) summed by a fixed tree and
 * stored, zero from lim on.
 */
static inline __attribute__((always_inline)) void
softmax_row_avx2(float *s, int nk, int lim, float *m, float *l, float *acc, int hd)
{
    if (lim > nk)
        lim = nk;
    if (lim <= 0) {
        memset(s, 0, sizeof(float) * (size_t)nk);
        return;
    }
    const int nvec = (nk + 7) / 8;
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lv = _mm256_set1_epi32(lim);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 x[4], mk[4], mv = ninf;
    for (int i = 0; i < 4; i++) {
        if (i < nvec) {
            mk[i] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lv, _mm256_add_epi32(iota, _mm256_set1_epi32(8 * i))));
            x[i] = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + 8 * i), mk[i]);
        } else {
            mk[i] = _mm256_setzero_ps();
            x[i] = ninf;
        }
    }
    mv = _mm256_max_ps(_mm256_max_ps(x[0], x[1]), _mm256_max_ps(x[2], x[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    if (mx > *m) {
        const float alpha = (*m == -INFINITY) ? 0.0f : k25_fast_expf(*m - mx);
        const __m256 av = _mm256_set1_ps(alpha);
        *l *= alpha;
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), av));
        *m = mx;
    }
    const __m256 mm = _mm256_set1_ps(*m);
    __m256 e[4];
    for (int i = 0; i < 4; i++) {
        e[i] = i < nvec ? _mm256_and_ps(exp8_fma(_mm256_sub_ps(x[i], mm)), mk[i]) : _mm256_setzero_ps();
        if (i < nvec)
            _mm256_storeu_ps(s + 8 * i, e[i]);
    }
    *l += hsum8(_mm256_add_ps(_mm256_add_ps(e[0], e[1]), _mm256_add_ps(e[2], e[3])));
}

/*
 * Asks for the key and value rows of the decode tile starting at k1 (up to
 * DT slots, inside k1's block; the next block's first tile at a block's
 * end) now.  An int4 tile computes long between its loads and alone keeps
 * too few misses in flight: this prefetch paid there (issue 16's int4
 * figures).  For fp32 and fp16 it measured neutral (k25 attn-bench
 * --decode), where the value pass's order was what mattered
 * (pv_tile_avx2).  Stored rows only: the fp16 residual of int8/int4 is
 * small and recent.  A prefetch never faults; nothing past the sequence's
 * last slot is asked for.
 */
static inline void prefetch_next_tile(const struct k25_kv_view *kv, int g, int k1)
{
    const bool quant = kv->dtype == K25_DTYPE_INT8 || kv->dtype == K25_DTYPE_INT4;
    const int end = quant ? kv->n_quant : kv->n_tokens, bs = kv->block_size;
    if (k1 >= end)
        return;
    const int n = end - k1 < DT ? end - k1 : DT, o = k1 % bs, take = bs - o < n ? bs - o : n;
    const size_t bits = kv->dtype == K25_DTYPE_FP32 ? 32 : kv->dtype == K25_DTYPE_FP16 ? 16 : kv->dtype == K25_DTYPE_INT8 ? 8 : 4;
    const size_t row = (size_t)kv->head_dim * bits / 8, off = ((size_t)g * bs + o) * row, bytes = (size_t)take * row;
    const char *kn = (const char *)kv->k_blocks[k1 / bs] + off, *vn = (const char *)kv->v_blocks[k1 / bs] + off;
    for (size_t i = 0; i < bytes; i += 64) {
        _mm_prefetch(kn + i, _MM_HINT_T0);
        _mm_prefetch(vn + i, _MM_HINT_T0);
    }
}

/*
 * add_logc for a decode tile (inside one block, nk <= DT) in registers: the
 * tile's counts are checked at once (nothing to add when none is merged),
 * and counts 1..16 take ln from two 8-float registers loaded from
 * k25_kv_logc's table (so the offsets are its values, bit for bit); a tile
 * with a count above 16 goes through add_logc.  Each row adds the offsets
 * to its scores as add_logc does (one fp32 add per score); the lanes from
 * nk on get ln 1 = 0.
 */
static inline void add_logc_avx2(const struct k25_kv_view *kv, int g, int k0, int nk, float *s, int rows, float *lc)
{
    if (!kv->has_meta)
        return;
    const int bs = kv->block_size;
    const uint8_t *c = (const uint8_t *)kv->k_blocks[k0 / bs] + kv->meta_off + (size_t)g * bs + k0 % bs;
    uint8_t cb[DT];
    if (nk == DT) {
        memcpy(cb, c, DT);
    } else { /* a short tile: its counts, then 1s (nothing past the block's counts is read) */
        memset(cb, 1, sizeof(cb));
        memcpy(cb, c, (size_t)nk);
    }
    const __m256i cv = _mm256_loadu_si256((const __m256i *)cb), one = _mm256_set1_epi8(1);
    if ((unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(cv, one)) == 0xffffffffu)
        return; /* no merged slot in the tile: every ln 1 = 0 */
    const __m256i c1 = _mm256_sub_epi8(cv, one); /* count - 1: 0..15 in the registers' range */
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(c1, _mm256_set1_epi8(15)), c1)) != -1) {
        add_logc(kv, g, k0, nk, s, rows, DT, lc); /* a count above 16 (or 0, which no kept slot has) */
        return;
    }
    const float *lt = k25_kv_logc_table();
    const __m256 t0 = _mm256_loadu_ps(lt + 1), t1 = _mm256_loadu_ps(lt + 9); /* ln 1..8, ln 9..16 */
    const __m128i h[2] = {_mm256_castsi256_si128(c1), _mm256_extracti128_si256(c1, 1)};
    __m256 off[DT / 8];
    for (int i = 0; i < DT / 8; i++) { /* slots 8i..8i+7: count - 1 as int32 lanes */
        const __m256i i1 = _mm256_cvtepu8_epi32(i % 2 ? _mm_srli_si128(h[i / 2], 8) : h[i / 2]);
        const __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(i1, _mm256_set1_epi32(7)));
        off[i] = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, i1), _mm256_permutevar8x32_ps(t1, i1), hi);
    }
    for (int r = 0; r < rows; r++) {
        float *sr = s + (size_t)r * DT;
        for (int i = 0; i < DT / 8; i++)
            _mm256_storeu_ps(sr + 8 * i, _mm256_add_ps(_mm256_loadu_ps(sr + 8 * i), off[i]));
    }
}

/*
 * One decode tile of nk keys from k0 (inside one block; for int8/int4
 * below n_quant, inside one key group), every row: scores, ln-count
 * offsets, raw logits for scoring, online softmax, then P V.
 */
static inline __attribute__((always_inline)) void
decode_tile_avx2_nv(const struct k25_kv_view *kv, int g, int k0, int nk, int rows, int lim0, int group,
                    struct scratch *sc, float *raw, int raw_ld, const int nv)
{
    const int hd = nv * 8;
    const bool quant = (kv->dtype == K25_DTYPE_INT8 || kv->dtype == K25_DTYPE_INT4) && k0 < kv->n_quant;
    /* fp16 slots (a plain fp16 view; int8/int4's residual is fp32): read in place, converted in the kernels */
    const bool f16 = kv->dtype == K25_DTYPE_FP16;
    const size_t in_block = ((size_t)g * kv->block_size + k0 % kv->block_size) * hd;
    const void *V;
    K25_ASSERT(!quant || sc->kt != NULL); /* the tile buffer: int4 query rows, or dequantized keys */
    prefetch_next_tile(kv, g, k0 + nk);
    if (quant && kv->dtype == K25_DTYPE_INT4 && nv % 8 == 0) { /* int4, head_dim a multiple of 64: on the codes */
        qk4_tile_avx2(kv, g, k0, nk, sc->q, rows, (int8_t *)sc->kt, sc->s, nv);
    } else if (f16) {
        qk_tile_f16_avx2(sc->q, (const uint16_t *)kv->k_blocks[k0 / kv->block_size] + in_block, rows, nk, sc->s, nv);
    } else {
        const float *K;
        if (quant) {
            dequant_keys_avx2(kv, g, k0, nk, sc->kt, nv);
            K = sc->kt;
        } else {
            K = k25_kv_rows(kv, kv->k_blocks, g, k0, nk, sc->kt);
        }
        qk_tile_avx2(sc->q, K, rows, nk, sc->s, nv);
    }
    add_logc_avx2(kv, g, k0, nk, sc->s, rows, sc->lc);
    raw_store(kv, raw, raw_ld, k0, nk, sc->s, rows);
    for (int r = 0; r < rows; r++)
        softmax_row_avx2(sc->s + (size_t)r * DT, nk, lim0 + r / group + 1, &sc->m[r], &sc->l[r],
                         sc->acc + (size_t)r * hd, hd);
    if (quant && kv->dtype == K25_DTYPE_INT4 && pv4_fits(kv)) { /* int4 values: on the codes */
        pv4_tile_avx2(kv, g, k0, nk, sc->s, rows, sc->acc, sc->vt, nv);
        return;
    }
    if (quant) {
        dequant_values_avx2(kv, g, k0, nk, sc->vt, nv);
        V = sc->vt;
    } else if (f16) {
        V = (const uint16_t *)kv->v_blocks[k0 / kv->block_size] + in_block;
    } else {
        V = k25_kv_rows(kv, kv->v_blocks, g, k0, nk, sc->vt);
    }
    pv_tile_avx2(sc->s, V, rows, nk, sc->acc, nv, f16);
}

/* decode_tile_avx2_nv with head_dim / 8 a constant for the common head sizes, so the channel
 * loops unroll and the query row stays in registers. */
static void decode_tile_avx2(const struct k25_kv_view *kv, int g, int k0, int nk, int rows, int lim0, int group,
                             struct scratch *sc, float *raw, int raw_ld)
{
    switch (kv->head_dim) {
    case 32: decode_tile_avx2_nv(kv, g, k0, nk, rows, lim0, group, sc, raw, raw_ld, 4); break;
    case 64: decode_tile_avx2_nv(kv, g, k0, nk, rows, lim0, group, sc, raw, raw_ld, 8); break;
    case 128: decode_tile_avx2_nv(kv, g, k0, nk, rows, lim0, group, sc, raw, raw_ld, 16); break;
    default: decode_tile_avx2_nv(kv, g, k0, nk, rows, lim0, group, sc, raw, raw_ld, kv->head_dim / 8);
    }
}
#endif

/*
 * One decode item: every query of job (n_q <= DECODE_MAX_Q), query heads of
 * KV head g, keys [k_lo, k_hi).  Leaves the partial state of each row in
 * part: [rows][hd + 2] = unnormalized output, max, sum.  Scores are dot
 * products over head_dim (no GEMM: a few rows against a stream of keys is
 * bandwidth-bound, and SGEMM's packing would read every tile twice).
 * Tiles of DT tokens never cross a block, so their rows are contiguous.
 */
static void decode_split(const struct k25_attn_job *job, int g, int group, int k_lo, int k_hi,
                         float scale, struct scratch *sc, float *part, float *raw)
{
    const struct k25_kv_view *kv = &job->kv;
    const int hd = kv->head_dim, rows = job->n_q * group, bs = kv->block_size;
    load_queries(job, g, group, 0, job->n_q, scale, sc);
#if defined(__AVX512F__)
    const bool fast = hd % 16 == 0 && hd <= 128 &&
                      (kv->dtype == K25_DTYPE_FP32 || kv->dtype == K25_DTYPE_FP16);
#endif

#if defined(K25_DECODE_AVX2)
    const bool quant = kv->dtype == K25_DTYPE_INT8 || kv->dtype == K25_DTYPE_INT4;
    const bool avx2 = hd % 16 == 0 && hd <= 128 && rows <= TK && (!quant || kv->vgroup % 8 == 0) &&
                      (sc->kt != NULL || !k25_kv_rows_need_tmp(kv, DT));
#endif

    for (int k0 = k_lo, nk; k0 < k_hi; k0 += nk) {
        nk = k_hi - k0 < DT ? k_hi - k0 : DT;
        if (bs - k0 % bs < nk)
            nk = bs - k0 % bs;
#if defined(K25_DECODE_AVX2)
        if (avx2 && quant && k0 < kv->n_quant) { /* quantized slots: one key group, below the residual */
            int end = (k0 / kv->group + 1) * kv->group;
            end = end < kv->n_quant ? end : kv->n_quant;
            nk = end - k0 < nk ? end - k0 : nk;
        }
#endif
#if defined(__AVX512F__)
        if (fast) {
            size_t elem = kv->dtype == K25_DTYPE_FP32 ? 4 : 2;
            size_t off = ((size_t)g * bs + k0 % bs) * hd * elem;
            decode_tile_avx512((const char *)kv->k_blocks[k0 / bs] + off,
                               (const char *)kv->v_blocks[k0 / bs] + off, kv->dtype != K25_DTYPE_FP32, nk,
                               rows, hd, job->q_pos0 - k0, group, sc, kv, g, k0, raw, raw_width(job));
            continue;
        }
#endif
#if defined(K25_DECODE_AVX2)
        if (avx2) {
            decode_tile_avx2(kv, g, k0, nk, rows, job->q_pos0 - k0, group, sc, raw, raw_width(job));
            continue;
        }
#endif
        const float *K = k25_kv_rows(kv, kv->k_blocks, g, k0, nk, sc->kt);
        const bool has_lc = k25_kv_logc(kv, g, k0, nk, sc->lc);
        for (int r = 0; r < rows; r++) {
            const float *qr = sc->q + (size_t)r * hd;
            float *s = sc->s + (size_t)r * DT;
            for (int t = 0; t < nk; t++) {
                const float *kr = K + (size_t)t * hd;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int d = 0; d < hd; d++)
                    dot += qr[d] * kr[d];
                s[t] = has_lc ? dot + sc->lc[t] : dot;
            }
            raw_store(kv, raw ? raw + (size_t)r * raw_width(job) : NULL, 0, k0, nk, s, 1);
            k25_softmax_tile_row(s, nk, job->q_pos0 + r / group - k0 + 1, &sc->m[r], &sc->l[r],
                                 sc->acc + (size_t)r * hd, hd);
        }
        const float *V = k25_kv_rows(kv, kv->v_blocks, g, k0, nk, sc->vt);
        for (int t = 0; t < nk; t++) {
            const float *vr = V + (size_t)t * hd;
            for (int r = 0; r < rows; r++) {
                float p = sc->s[(size_t)r * DT + t];
                float *a = sc->acc + (size_t)r * hd;
#pragma omp simd
                for (int d = 0; d < hd; d++)
                    a[d] += p * vr[d];
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float *pr = part + (size_t)r * (hd + 2);
        memcpy(pr, sc->acc + (size_t)r * hd, sizeof(float) * hd);
        pr[hd] = sc->m[r];
        pr[hd + 1] = sc->l[r];
    }
}

/*
 * Merges the n partials of one (job, KV head) in split order:
 * M = max m_s, L = sum l_s e^(m_s - M), O = sum acc_s e^(m_s - M) / L.
 * A split a row cannot see (m = -inf) contributes nothing.
 */
static void decode_merge(const struct k25_attn_job *job, int g, int group, const float *part, int n,
                         const float *raw)
{
    const int visible = job->q_pos0 + job->n_q;
    const int hd = job->kv.head_dim, rows = job->n_q * group, stride = rows * (hd + 2);
    for (int r = 0; r < rows; r++) {
        float M = -INFINITY;
        for (int s = 0; s < n; s++) {
            float ms = part[(size_t)s * stride + (size_t)r * (hd + 2) + hd];
            M = ms > M ? ms : M;
        }
        float *dst = job->out + (size_t)(r / group) * job->out_stride + (size_t)(g * group + r % group) * hd;
        float L = 0.0f;
        for (int d = 0; d < hd; d++)
            dst[d] = 0.0f;
        for (int s = 0; s < n; s++) {
            const float *pr = part + (size_t)s * stride + (size_t)r * (hd + 2);
            if (pr[hd] == -INFINITY)
                continue;
            float w = k25_fast_expf(pr[hd] - M);
            L += pr[hd + 1] * w;
            for (int d = 0; d < hd; d++)
                dst[d] += pr[d] * w;
        }
        float inv = 1.0f / L; /* L >= 1: the split holding the max contributes e^0 */
        for (int d = 0; d < hd; d++)
            dst[d] *= inv;
        if (raw && r / group >= k25_attn_score_q0(job)) {
            /* scoring: each visible slot's probability (slots >= score_k0), rows in order */
            const int k0 = job->kv.score_k0;
            const float *rr = raw + (size_t)r * raw_width(job); /* column k - score_k0 */
            float *sc = job->score + (size_t)g * visible;
            int lim = job->q_pos0 + r / group + 1;
            for (int k = k0; k < lim; k++)
                sc[k] += k25_fast_expf(rr[k - k0] - M) * inv;
        }
    }
}

/* --------------------------------------------------------------- driver */

/*
 * Runs every job: prefill jobs as (job, KV head, query tile) items, decode
 * jobs as (job, KV head, KV split) items, dynamically scheduled over the
 * OpenMP threads; then merges the decode splits.  Scratch comes from the
 * tracking allocator (K25_MEM_ATTN_SCRATCH) per call; allocation failure
 * is an invariant failure (the figure is bounded by the tile sizes and is
 * accounted by the memory calculator).
 */
void k25_cpu_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                       struct k25_mem_acct *acct)
{
    if (n_jobs <= 0)
        return;
    const int n_kv = jobs[0].kv.n_kv_heads, hd = jobs[0].kv.head_dim;
    const int group = n_heads / n_kv, tq = tile_queries(group);
    K25_ASSERT(group * n_kv == n_heads);

    /* item i -> (job, kv head, tile or split); first[j] = first item of job j,
     * pfirst[j] = first partial of job j (decode jobs only) */
    int first[n_jobs + 1], pfirst[n_jobs + 1], sfirst[n_jobs + 1];
    size_t afirst[n_jobs + 1]; /* scoring buffers: prefill [n_kv][n_q*group][2] (max, sum),
                                * decode [n_kv][n_q*group][visible] raw logits */
    bool need_tmp = false;
    first[0] = pfirst[0] = sfirst[0] = 0;
    afirst[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        const struct k25_attn_job *jb = &jobs[j];
        K25_ASSERT(jb->n_q >= 1 && jb->kv.n_kv_heads == n_kv && jb->kv.head_dim == hd);
        int per_head = jb->n_q <= DECODE_MAX_Q ? n_splits(jb->q_pos0 + jb->n_q) : (jb->n_q + tq - 1) / tq;
        first[j + 1] = first[j] + n_kv * per_head;
        pfirst[j + 1] = pfirst[j] + (jb->n_q <= DECODE_MAX_Q ? n_kv * per_head * jb->n_q * group * (hd + 2) : 0);
        need_tmp |= k25_kv_rows_need_tmp(&jb->kv, TK);
        int visible = jb->q_pos0 + jb->n_q;
        bool pre_score = jb->score && jb->n_q > DECODE_MAX_Q;
        sfirst[j + 1] = sfirst[j] + (pre_score ? n_kv * ((visible + TK - 1) / TK - jb->kv.score_k0 / TK) : 0);
        afirst[j + 1] = afirst[j] + (!jb->score ? 0
                                     : pre_score ? (size_t)n_kv * jb->n_q * group * 2
                                                 : (size_t)n_kv * jb->n_q * group * raw_width(jb));
    }
    const int n_items = first[n_jobs];
    float *partials = NULL;
    if (pfirst[n_jobs] > 0) {
        partials = k25_alloc_acct(acct, K25_MEM_ATTN_SCRATCH, sizeof(float) * (size_t)pfirst[n_jobs]);
        K25_ASSERT(partials != NULL);
    }
    float *aux = NULL;
    if (afirst[n_jobs] > 0) {
        aux = k25_alloc_acct(acct, K25_MEM_ATTN_SCRATCH, sizeof(float) * afirst[n_jobs]);
        K25_ASSERT(aux != NULL);
    }
    const int n_score_items = sfirst[n_jobs];

#pragma omp parallel if (n_items > 1 || n_score_items > 1)
    {
        struct scratch sc;
        size_t rows = (size_t)tq * group > (size_t)DECODE_MAX_Q * group ? (size_t)tq * group
                                                                         : (size_t)DECODE_MAX_Q * group;
        float *mem = k25_alloc_acct(acct, K25_MEM_ATTN_SCRATCH, sizeof(float) * thread_floats(group, hd, need_tmp));
        K25_ASSERT(mem != NULL);
        sc.q = mem;
        sc.acc = sc.q + rows * hd;
        sc.s = sc.acc + rows * hd;
        sc.m = sc.s + rows * TK;
        sc.l = sc.m + rows;
        sc.lc = sc.l + rows;
        sc.cs = sc.lc + TK;
        sc.kt = need_tmp ? sc.cs + TK : NULL;
        sc.vt = need_tmp ? sc.kt + (size_t)TK * hd : NULL;
        int j = 0;
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < n_items; it++) {
            while (it >= first[j + 1])
                j++;
            while (it < first[j])
                j--;
            const struct k25_attn_job *jb = &jobs[j];
            int local = it - first[j];
            int g = local % n_kv, k = local / n_kv;
            if (jb->n_q <= DECODE_MAX_Q) {
                int visible = jb->q_pos0 + jb->n_q;
                const int len = split_len(visible);
                int k_lo = k * len < visible ? k * len : visible, k_hi = k_lo + len < visible ? k_lo + len : visible;
                size_t stride = (size_t)jb->n_q * group * (hd + 2);
                decode_split(jb, g, group, k_lo, k_hi, scale, &sc,
                             partials + pfirst[j] + ((size_t)g * n_splits(visible) + k) * stride,
                             jb->score ? aux + afirst[j] + (size_t)g * jb->n_q * group * raw_width(jb) : NULL);
            } else {
                int t0 = k * tq, t1 = t0 + tq < jb->n_q ? t0 + tq : jb->n_q;
                prefill_tile(jb, g, group, t0, t1, scale, &sc,
                             jb->score ? aux + afirst[j] + (size_t)g * jb->n_q * group * 2 : NULL);
            }
        }

        /* scoring pass of prefill jobs: one (job, KV head, key tile) per item */
        j = 0;
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < n_score_items; it++) {
            while (it >= sfirst[j + 1])
                j++;
            while (it < sfirst[j])
                j--;
            const struct k25_attn_job *jb = &jobs[j];
            int local = it - sfirst[j], g = local % n_kv, kt = local / n_kv + jb->kv.score_k0 / TK;
            prefill_score(jb, g, group, kt * TK, scale, &sc, aux + afirst[j] + (size_t)g * jb->n_q * group * 2);
        }
        k25_free(mem);

        /* merge decode splits: one (job, KV head) per iteration, fixed order inside */
#pragma omp for schedule(static)
        for (int x = 0; x < n_jobs * n_kv; x++) {
            const struct k25_attn_job *jb = &jobs[x / n_kv];
            if (jb->n_q > DECODE_MAX_Q)
                continue;
            int g = x % n_kv, n = n_splits(jb->q_pos0 + jb->n_q);
            size_t stride = (size_t)jb->n_q * group * (hd + 2);
            decode_merge(jb, g, group, partials + pfirst[x / n_kv] + (size_t)g * n * stride, n,
                         jb->score ? aux + afirst[x / n_kv] + (size_t)g * jb->n_q * group * raw_width(jb) : NULL);
        }
    }
    k25_free(partials);
    k25_free(aux);
}

const struct k25_attn_impl_desc k25_attn_chunked = {
    .id = K25_ATTN_CHUNKED,
    .name = "chunked",
    .run = k25_cpu_attention,
    .scratch_bytes = chunked_scratch_bytes,
    .compression = true,
};
