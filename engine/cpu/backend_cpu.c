/*
 * backend_cpu.c - the CPU backend, the reference every other backend is
 * checked against (tests/test_backend_ops.c).  Buffers are host memory
 * from the tracking allocator, charged to the engine's accounting; the
 * model's weights are mapped, not copied.  GEMMs run through OpenBLAS
 * (CBLAS) except steps of at most K25_GEMV_MAX_M rows (decode), which run
 * on gemv.c's batch-invariant kernels; weights in bf16, fp16, int8 or int4
 * are dequantized inside those kernels, or tile by tile into fp32 scratch
 * for OpenBLAS (prefill).  The element-wise operations are written here (OpenMP over rows,
 * inner loops left to the compiler's vectorizer); attention runs the
 * implementation the call names from the table in attn_impl.c; the KV ops
 * are kvstore.c's and kvcompact.c's host storage code.  Ops do not abort on
 * out-of-memory for their scratch: the op that cannot get it records the
 * failure and returns, and status() reports it (once) to the engine, which
 * discards the pass and fails the step with the reason.
 */
#include "backend.h"
#include "k25_cpu.h"
#include "kvstore.h"
#include "weights.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per-instance scratch of the attention op: jobs and block-pointer arrays, grown as needed. */
struct cpu_priv {
    struct k25_attn_job *jobs;
    size_t jobs_cap;
    const void **ptrs;
    size_t ptrs_cap;
    enum k25_kpath kpath; /* decode kernels (cpu_kernels) */
    float *tile;          /* [tile rows][k] fp32 weight rows of a prefill GEMM (K25_MEM_ACTIVATIONS) */
    size_t tile_floats;
    int fail_rc;          /* the first failure since status() last reported one (K25_OK: none) */
    struct k25_error fail;
};

/* Records the first failure of a pass (out of memory for scratch); the ops after it do nothing. */
static void cpu_fail(struct cpu_priv *p, const char *what, size_t bytes)
{
    if (p->fail_rc == K25_OK)
        p->fail_rc = k25_error_set(&p->fail, K25_ENOMEM, NULL, 0, NULL, "CPU backend: out of memory (%s, %zu bytes)",
                                   what, bytes);
}

/* Grows *arr (elements of size elem, *cap of them, charged to acct as attention scratch) to at least
 * n, doubling; false (and *arr untouched) when the allocator refuses. */
static bool grow(struct k25_mem_acct *acct, void **arr, size_t elem, size_t have, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    size_t ncap = n > 2 * *cap ? n : 2 * *cap;
    void *na = k25_alloc_acct(acct, K25_MEM_ATTN_SCRATCH, elem * ncap);
    if (!na)
        return false;
    if (*arr)
        memcpy(na, *arr, elem * have);
    k25_free(*arr);
    *arr = na;
    *cap = ncap;
    return true;
}

/* A prefill GEMM on non-fp32 weights dequantizes GEMM_TILE_BYTES of fp32 rows (at least
 * GEMM_TILE_MIN_ROWS) per OpenBLAS call: few calls and parallel regions (each costs a fork-join,
 * dear on a loaded machine), a bounded scratch. */
#define GEMM_TILE_BYTES (8u << 20)
#define GEMM_TILE_MIN_ROWS 64

static float *f32(const struct k25_tensor *t)
{
    K25_ASSERT(t->dtype == K25_DTYPE_FP32);
    return (float *)((unsigned char *)t->buf->data + t->off);
}

/* ------------------------------------------------------------ instance */

static int cpu_init(struct k25_bctx *ctx, struct k25_error *err)
{
    struct cpu_priv *p = calloc(1, sizeof(struct cpu_priv));
    if (!(ctx->priv = p))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (CPU backend)");
    return k25_kpath_resolve(K25_CPU_KERNELS_AUTO, &p->kpath, err);
}

static int cpu_configure(struct k25_bctx *ctx, const struct k25_config *cfg, struct k25_error *err)
{
    struct cpu_priv *p = ctx->priv;
    if (cfg->cuda_gemm != K25_CUDA_GEMM_EXACT) /* the CPU's GEMMs are fp32 whatever it says: refuse it */
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "cuda_gemm",
                             "cuda_gemm applies to backend cuda; the CPU backend's GEMMs are fp32");
    return k25_kpath_resolve(cfg->cpu_kernels, &p->kpath, err);
}

static void cpu_destroy(struct k25_bctx *ctx)
{
    struct cpu_priv *p = ctx->priv;
    if (p) {
        k25_free(p->jobs);
        k25_free(p->ptrs);
        k25_free(p->tile);
        free(p);
    }
    ctx->priv = NULL;
}

static bool cpu_supports(const struct k25_bctx *ctx, enum k25_op op, enum k25_dtype dtype)
{
    (void)ctx;
    bool kv_dtype = dtype == K25_DTYPE_FP32 || dtype == K25_DTYPE_FP16 || dtype == K25_DTYPE_INT8 ||
                    dtype == K25_DTYPE_INT4;
    switch (op) {
    case K25_OP_KV_WRITE:
    case K25_OP_ATTN_CHUNKED:
    case K25_OP_ATTN_FLASH2:
    case K25_OP_ATTN_NAIVE:
    case K25_OP_KV_SCORE:
    case K25_OP_KV_COMPACT:
    case K25_OP_KV_TIER_COPY:
        return kv_dtype;
    case K25_OP_GEMM: /* every weight format (backend.h) */
    case K25_OP_EMBED:
        return dtype == K25_DTYPE_FP32 || dtype == K25_DTYPE_BF16 || dtype == K25_DTYPE_FP16 ||
               dtype == K25_DTYPE_INT8 || dtype == K25_DTYPE_INT4;
    case K25_OP_RMSNORM:
    case K25_OP_ROPE:
    case K25_OP_SWIGLU:
    case K25_OP_ROWS:
        return dtype == K25_DTYPE_FP32;
    case K25_OP_N: break;
    }
    return false;
}

/* -------------------------------------------------------------- memory */

static int cpu_buf_new(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes, void *data, bool mapped,
                       struct k25_buf **out, struct k25_error *err)
{
    struct k25_buf *b = calloc(1, sizeof(*b));
    if (!b || (!mapped && !(data = k25_alloc_acct(ctx->acct, cat, bytes ? bytes : 1)))) {
        free(b);
        *out = NULL;
        return err ? k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (%s, %zu bytes)",
                                   k25_mem_cat_name(cat), bytes)
                   : K25_ENOMEM;
    }
    *b = (struct k25_buf){&k25_backend_cpu, data, bytes, cat, mapped, true};
    if (mapped && ctx->acct)
        k25_mem_acct_add(ctx->acct, cat, (int64_t)bytes);
    *out = b;
    return K25_OK;
}

static int cpu_buf_alloc(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes, struct k25_buf **out,
                         struct k25_error *err)
{
    return cpu_buf_new(ctx, cat, bytes, NULL, false, out, err);
}

static int cpu_buf_map_host(struct k25_bctx *ctx, enum k25_mem_cat cat, const void *host, size_t bytes,
                            struct k25_buf **out, struct k25_error *err)
{
    return cpu_buf_new(ctx, cat, bytes, (void *)host, true, out, err);
}

static void cpu_buf_free(struct k25_bctx *ctx, struct k25_buf *b)
{
    if (!b)
        return;
    if (b->mapped) {
        if (ctx->acct)
            k25_mem_acct_add(ctx->acct, b->cat, -(int64_t)b->bytes);
    } else {
        k25_free(b->data);
    }
    free(b);
}

static void cpu_buf_set(struct k25_bctx *ctx, struct k25_buf *b, size_t off, const void *src, size_t bytes)
{
    (void)ctx;
    K25_ASSERT(off + bytes <= b->bytes && !b->mapped);
    memcpy((unsigned char *)b->data + off, src, bytes);
}

static void cpu_buf_get(struct k25_bctx *ctx, const struct k25_buf *b, size_t off, void *dst, size_t bytes)
{
    (void)ctx;
    K25_ASSERT(off + bytes <= b->bytes);
    memcpy(dst, (const unsigned char *)b->data + off, bytes);
}

static void cpu_buf_clear(struct k25_bctx *ctx, struct k25_buf *b, size_t off, size_t bytes)
{
    (void)ctx;
    K25_ASSERT(off + bytes <= b->bytes && !b->mapped);
    memset((unsigned char *)b->data + off, 0, bytes);
}

static void cpu_buf_copy(struct k25_bctx *ctx, struct k25_buf *dst, size_t dst_off, const struct k25_buf *src,
                         size_t src_off, size_t bytes)
{
    (void)ctx;
    K25_ASSERT(dst_off + bytes <= dst->bytes && src_off + bytes <= src->bytes && !dst->mapped);
    memcpy((unsigned char *)dst->data + dst_off, (const unsigned char *)src->data + src_off, bytes);
}

static void *cpu_buf_host(struct k25_bctx *ctx, const struct k25_buf *b)
{
    (void)ctx;
    return b->data; /* every CPU buffer is host memory */
}

static int cpu_memory_info(struct k25_bctx *ctx, size_t *free_bytes, size_t *total_bytes, struct k25_error *err)
{
    (void)ctx;
    return k25_cpu_host_memory(free_bytes, total_bytes, err);
}

static int64_t cpu_scratch_bytes(const struct k25_bctx *ctx, const struct k25_config *cfg,
                                 const struct k25_model_shape *s, int64_t step_tokens, int threads)
{
    (void)ctx; /* the attention kernels' scratch of the largest call: one sequence's whole step */
    return k25_attn_scratch_bytes(cfg->attention, s->n_heads, s->n_kv_heads, s->head_dim, cfg->kv_block_size,
                                  cfg->kv_cache_dtype, 1, step_tokens, step_tokens, threads);
}

static int cpu_status(struct k25_bctx *ctx, struct k25_error *err)
{
    struct cpu_priv *p = ctx->priv;
    if (!p || p->fail_rc == K25_OK)
        return K25_OK;
    int rc = p->fail_rc;
    if (err)
        *err = p->fail;
    p->fail_rc = K25_OK; /* reported: the next pass starts afresh (host memory may have come back) */
    return rc;
}

static void cpu_synchronize(struct k25_bctx *ctx)
{
    (void)ctx; /* every op has finished when it returns */
}

/* ------------------------------------------------------------- compute */

/* A weight tensor as the kernels read it. */
static struct k25_wrows wrows_of(const struct k25_tensor *w)
{
    bool q = w->dtype == K25_DTYPE_INT8 || w->dtype == K25_DTYPE_INT4;
    int group = q ? k25_wquant_group(w->dtype, w->cols, (size_t)w->stride) : 0;
    K25_ASSERT(!q || group > 0); /* stride: the bytes of a row of the layout (backend.h) */
    return (struct k25_wrows){(const unsigned char *)w->buf->data + w->off,
                              q ? (size_t)w->stride : (size_t)w->stride * k25_dtype_bytes(w->dtype),
                              w->dtype, w->rows, w->cols, group};
}

/*
 * Decode steps (m <= K25_GEMV_MAX_M) run on gemv.c's kernels: threads over
 * weight rows, weights read once, batch-invariant.  Larger steps go to
 * OpenBLAS: fp32 weights directly, other formats a tile of rows at a time
 * (GEMM_TILE_BYTES), dequantized into the instance's fp32 tile (grown
 * once, charged as activations).
 */
static void cpu_gemm(struct k25_bctx *ctx, const struct k25_tensor *x, const struct k25_tensor *w,
                     const struct k25_tensor *y, bool acc)
{
    struct cpu_priv *p = ctx->priv;
    K25_ASSERT(x->cols == w->cols && y->rows == x->rows && y->cols == w->rows);
    const struct k25_wrows wr = wrows_of(w);
    const int m = (int)x->rows, k = (int)x->cols;
    if (m <= K25_GEMV_MAX_M) {
        if (m > 0)
            k25_gemv(p->kpath, f32(x), (size_t)x->stride, m, &wr, f32(y), (size_t)y->stride, acc);
        return;
    }
    if (w->dtype == K25_DTYPE_FP32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, (int)w->rows, k, 1.0f, f32(x), (int)x->stride,
                    f32(w), (int)w->stride, acc ? 1.0f : 0.0f, f32(y), (int)y->stride);
        return;
    }
    int64_t tile_rows = (int64_t)(GEMM_TILE_BYTES / (sizeof(float) * (size_t)k));
    tile_rows = tile_rows < GEMM_TILE_MIN_ROWS ? GEMM_TILE_MIN_ROWS : tile_rows > w->rows ? w->rows : tile_rows;
    const size_t need = (size_t)tile_rows * (size_t)k;
    if (need > p->tile_floats) {
        k25_free(p->tile);
        p->tile_floats = 0;
        if (!(p->tile = k25_alloc_acct(ctx->acct, K25_MEM_ACTIVATIONS, sizeof(float) * need))) {
            cpu_fail(p, "prefill GEMM tile", sizeof(float) * need);
            return;
        }
        p->tile_floats = need;
    }
    for (int64_t j0 = 0; j0 < w->rows; j0 += tile_rows) {
        const int nb = (int)(w->rows - j0 < tile_rows ? w->rows - j0 : tile_rows);
        /* threads only where the dequantization weighs against the GEMM: a fork-join stalls on a
         * loaded machine, and 256+ rows of x make the GEMM >= 100x the dequantization */
#pragma omp parallel for schedule(static) if (m < 256)
        for (int j = 0; j < nb; j++)
            k25_wrows_dequant(&wr, j0 + j, 1, p->tile + (size_t)j * k, (size_t)k);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nb, k, 1.0f, f32(x), (int)x->stride, p->tile, k,
                    acc ? 1.0f : 0.0f, f32(y) + j0, (int)y->stride);
    }
}

static void cpu_rmsnorm(struct k25_bctx *ctx, const struct k25_tensor *xt, const struct k25_tensor *wt, float eps,
                        const struct k25_tensor *yt)
{
    (void)ctx;
    const int m = (int)xt->rows, d = (int)xt->cols;
    const float *x = f32(xt), *w = f32(wt);
    float *y = f32(yt);
    const size_t xs = (size_t)xt->stride, ys = (size_t)yt->stride;
#pragma omp parallel for schedule(static) if (m > 4)
    for (int i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * xs;
        float *yi = y + (size_t)i * ys;
        double ss = 0.0; /* double: d up to 8K values of O(1) squared */
        for (int j = 0; j < d; j++)
            ss += (double)xi[j] * xi[j];
        float inv = (float)(1.0 / sqrt(ss / d + eps));
        for (int j = 0; j < d; j++)
            yi[j] = xi[j] * inv * w[j];
    }
}

static void cpu_rope_cache(struct k25_bctx *ctx, const int32_t *pos, const double *inv_freq,
                           const struct k25_tensor *cst)
{
    (void)ctx;
    const int hd = (int)cst->cols, half = hd / 2;
    float *cs = f32(cst);
    for (int64_t i = 0; i < cst->rows; i++) {
        float *c = cs + (size_t)i * cst->stride;
        for (int j = 0; j < half; j++) {
            double a = (double)pos[i] * inv_freq[j]; /* double: positions reach 256K+ */
            c[j] = (float)cos(a);
            c[half + j] = (float)sin(a);
        }
    }
}

static void cpu_rope(struct k25_bctx *ctx, const struct k25_tensor *xt, int n_heads, int hd,
                     const struct k25_tensor *cst)
{
    (void)ctx;
    const int m = (int)xt->rows, half = hd / 2;
    float *x = f32(xt);
    const float *cs = f32(cst);
    const size_t stride = (size_t)xt->stride, cstride = (size_t)cst->stride;
#pragma omp parallel for schedule(static) if (m > 4)
    for (int i = 0; i < m; i++) {
        const float *c = cs + (size_t)i * cstride, *s = c + half;
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

static void cpu_swiglu(struct k25_bctx *ctx, const struct k25_tensor *gut, const struct k25_tensor *ht)
{
    (void)ctx;
    const int m = (int)gut->rows, ffn = (int)ht->cols;
    const float *gu = f32(gut);
    float *h = f32(ht);
    const size_t gs = (size_t)gut->stride, hs = (size_t)ht->stride;
#pragma omp parallel for schedule(static) if (m > 4)
    for (int i = 0; i < m; i++) {
        const float *g = gu + (size_t)i * gs, *u = g + ffn;
        float *o = h + (size_t)i * hs;
        for (int j = 0; j < ffn; j++)
            o[j] = g[j] / (1.0f + k25_fast_expf(-g[j])) * u[j];
    }
}

/* dst row i = src row rows[i] (dense fp32 rows of dst->cols values). */
static void copy_rows(const struct k25_tensor *src, const int32_t *rows, const struct k25_tensor *dst)
{
    K25_ASSERT(src->cols == dst->cols);
    const float *s = f32(src);
    float *d = f32(dst);
    for (int64_t i = 0; i < dst->rows; i++) {
        K25_ASSERT(rows[i] >= 0 && rows[i] < src->rows);
        memcpy(d + (size_t)i * dst->stride, s + (size_t)rows[i] * src->stride, sizeof(float) * (size_t)dst->cols);
    }
}

static void cpu_embed(struct k25_bctx *ctx, const struct k25_tensor *table, const int32_t *ids,
                      const struct k25_tensor *out)
{
    (void)ctx;
    if (table->dtype == K25_DTYPE_FP32) {
        copy_rows(table, ids, out);
        return;
    }
    K25_ASSERT(table->cols == out->cols);
    const struct k25_wrows wr = wrows_of(table);
    float *o = f32(out);
    for (int64_t i = 0; i < out->rows; i++) {
        K25_ASSERT(ids[i] >= 0 && ids[i] < table->rows);
        k25_wrows_dequant(&wr, ids[i], 1, o + (size_t)i * out->stride, (size_t)out->stride);
    }
}

static void cpu_rows_gather(struct k25_bctx *ctx, const struct k25_tensor *src, const int32_t *rows,
                            const struct k25_tensor *dst)
{
    (void)ctx;
    copy_rows(src, rows, dst);
}

/* ------------------------------------------------------------ KV cache */

static void cpu_kv_write(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq, int layer,
                         int slot0, const struct k25_tensor *k, const struct k25_tensor *v)
{
    (void)ctx;
    K25_ASSERT(k->stride == v->stride && k->rows == v->rows);
    k25_kv_seq_write(pool, seq, layer, slot0, (int)k->rows, f32(k), f32(v), (int)k->stride);
}

static void cpu_attention(struct k25_bctx *ctx, const struct k25_attn_call *c)
{
    struct cpu_priv *p = ctx->priv;
    size_t n_ptrs = 0;
    for (int i = 0; i < c->n_seqs; i++)
        n_ptrs += 2 * (size_t)c->seqs[i].seq->n_blocks;
    if (!grow(ctx->acct, (void **)&p->jobs, sizeof(*p->jobs), 0, &p->jobs_cap, (size_t)c->n_seqs) ||
        !grow(ctx->acct, (void **)&p->ptrs, sizeof(*p->ptrs), 0, &p->ptrs_cap, n_ptrs)) {
        cpu_fail(p, "attention jobs", sizeof(*p->jobs) * (size_t)c->n_seqs + sizeof(*p->ptrs) * n_ptrs);
        return;
    }
    float *q = f32(c->q), *out = f32(c->out), *score = c->score ? f32(c->score) : NULL;
    const void **kp = p->ptrs;
    for (int i = 0; i < c->n_seqs; i++) {
        const struct k25_attn_seq *s = &c->seqs[i];
        struct k25_attn_job *j = &p->jobs[i];
        const void **vp = kp + s->seq->n_blocks;
        k25_kv_seq_view(c->pool, s->seq, c->layer, kp, vp, &j->kv);
        kp = vp + s->seq->n_blocks;
        j->q = q + (size_t)s->row0 * c->q->stride;
        j->q_stride = (int)c->q->stride;
        j->n_q = s->n_q;
        j->q_pos0 = s->q_slot0;
        j->out = out + (size_t)s->row0 * c->out->stride;
        j->out_stride = (int)c->out->stride;
        j->score = score ? score + s->score_off : NULL;
    }
    k25_attn_impl_get(c->impl)->run(p->jobs, c->n_seqs, c->n_heads, c->scale, ctx->acct);
}

static void cpu_kv_add_scores(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq, int layer,
                              const struct k25_tensor *score, int q_slot0, int n_q, int group)
{
    (void)ctx;
    k25_kv_seq_add_scores(pool, seq, layer, f32(score), q_slot0, n_q, group);
}

static int cpu_kv_compact(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq,
                          const struct k25_kv_compress_opts *o, int *removed, struct k25_error *err)
{
    (void)ctx;
    return k25_kv_seq_compress(pool, seq, o, removed, err);
}

static void cpu_kv_block_get(struct k25_bctx *ctx, const struct k25_kv_pool *pool, int32_t id, void *host)
{
    (void)ctx;
    K25_ASSERT(id >= 0 && id < pool->n_alloc);
    memcpy(host, pool->blocks[id]->data, pool->block_bytes);
}

static void cpu_kv_block_set(struct k25_bctx *ctx, struct k25_kv_pool *pool, int32_t id, const void *host)
{
    (void)ctx;
    K25_ASSERT(id >= 0 && id < pool->n_alloc);
    memcpy(pool->blocks[id]->data, host, pool->block_bytes);
}

/* The sampler's greedy rule (sample.c): the first index of the largest value. */
static void cpu_argmax(struct k25_bctx *ctx, const struct k25_tensor *xt, int32_t *ids)
{
    (void)ctx;
    const float *x = f32(xt);
    for (int64_t i = 0; i < xt->rows; i++) {
        const float *r = x + (size_t)i * xt->stride;
        int32_t best = 0;
        for (int64_t j = 1; j < xt->cols; j++)
            if (r[j] > r[best])
                best = (int32_t)j;
        ids[i] = best;
    }
}

const struct k25_backend k25_backend_cpu = {
    .name = "cpu",
    .description = "host memory; OpenBLAS GEMMs (prefill), SIMD GEMV kernels (decode), OpenMP kernels",
    .init = cpu_init,
    .destroy = cpu_destroy,
    .supports = cpu_supports,
    .configure = cpu_configure,
    .status = cpu_status,
    .buf_alloc = cpu_buf_alloc,
    .buf_map_host = cpu_buf_map_host,
    .buf_free = cpu_buf_free,
    .buf_set = cpu_buf_set,
    .buf_get = cpu_buf_get,
    .buf_clear = cpu_buf_clear,
    .buf_copy = cpu_buf_copy,
    .buf_alloc_host = cpu_buf_alloc, /* host memory already */
    .buf_host = cpu_buf_host,
    .memory_info = cpu_memory_info,
    .scratch_bytes = cpu_scratch_bytes,
    .synchronize = cpu_synchronize,
    .gemm = cpu_gemm,
    .rmsnorm = cpu_rmsnorm,
    .rope_cache = cpu_rope_cache,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .embed = cpu_embed,
    .rows_gather = cpu_rows_gather,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .kv_add_scores = cpu_kv_add_scores,
    .kv_compact = cpu_kv_compact,
    .kv_block_get = cpu_kv_block_get,
    .kv_block_set = cpu_kv_block_set,
    .argmax = cpu_argmax,
};
