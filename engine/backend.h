/*
 * backend.h - the backend interface: where tensors live and what computes
 * on them.  The forward pass (forward.c), the KV cache's storage, KV
 * compression and (later) the KV tiers touch tensor memory only through
 * this table, so a backend for other hardware plugs in without touching
 * them.  After ggml's split, kept small:
 *
 *   registry  (backend.c)  name -> struct k25_backend, the one place
 *                                   that knows which backends are built in
 *   backend   struct k25_backend    a table of functions, static, one per kind
 *   instance  struct k25_bctx       one per engine: the backend's state and the
 *                                   engine's memory accounting
 *   buffer    struct k25_buf        memory owned by a backend (host memory for
 *                                   the CPU, device memory for CUDA); opaque
 *                                   outside the backends (its fields exist only
 *                                   under K25_BACKEND_IMPL, which the Makefile
 *                                   sets for engine/cpu/ and engine/cuda/ alone),
 *                                   so the engine cannot dereference buf->data
 *   tensor    struct k25_tensor     a 2-D view into a buffer (offset, rows,
 *                                   cols, row stride, element type)
 *
 * Who owns which memory:
 *
 *     host (engine, harness)                 backend buffers (k25_buf)
 *     --------------------------             ---------------------------------
 *     model weights (model.c)  --map_host-->  weights   (CPU: mapped, no copy;
 *                                                        GPU: uploaded once)
 *     token ids, positions     --embed/rope-> activations x, xn, qkv, att, gu, h,
 *                                             cs, last, logits   (forward.c)
 *     block tables, counts     --kv ops----> KV blocks + quantization residual
 *       (kvcache.c bookkeeping)               (engine/cpu/kvstore.c on the CPU, per block)
 *     sampled logits  <---------buf_get----- logits rows
 *     attention probe <---------buf_get----- att rows of probe layers
 *
 * Adding a backend: implement every slot of struct k25_backend (a slot
 * may return false from supports() for an op it does not run: the engine
 * then refuses the config with a clear error, k25_backend_check), add one
 * line to backend.c, and build it with the Makefile's switch.
 * tests/test_backend_ops.c then checks every op of it against a scalar
 * double-precision reference, without being edited.
 *
 * Threading: ops are called from the engine's thread; a backend may run
 * them asynchronously but must order them as called, and buf_get returns
 * only when the data is on the host.  synchronize() waits for everything.
 */
#ifndef K25_BACKEND_H
#define K25_BACKEND_H

#include "internal.h"
#include "k25_attn.h"

struct k25_kv_pool;
struct k25_kv_seq;
struct k25_kv_compress_opts;

/* The operations a backend may run, for supports(op, dtype). */
enum k25_op {
    K25_OP_GEMM,              /* dtype: the weight format */
    K25_OP_RMSNORM,
    K25_OP_ROPE,              /* rope_cache + rope */
    K25_OP_SWIGLU,
    K25_OP_EMBED,             /* dtype: the embedding table's format */
    K25_OP_ROWS,              /* rows_gather */
    K25_OP_KV_WRITE,          /* dtype: the KV cache's */
    K25_OP_ATTN_CHUNKED,      /* attention by implementation; dtype: the KV cache's */
    K25_OP_ATTN_FLASH2,
    K25_OP_ATTN_NAIVE,
    K25_OP_KV_SCORE,          /* attention-score accumulation into slot metadata */
    K25_OP_KV_COMPACT,        /* compression: merge, prune, compact a sequence */
    K25_OP_KV_TIER_COPY,      /* whole blocks to and from host memory */
    K25_OP_N
};
const char *k25_op_name(enum k25_op op);
/* The attention op of an implementation. */
enum k25_op k25_op_attention(enum k25_attn_impl impl);

/* Memory owned by a backend: opaque outside the backends (K25_BACKEND_IMPL, above). */
struct k25_buf;
#ifdef K25_BACKEND_IMPL
struct k25_buf {
    const struct k25_backend *be;
    void *data;           /* the backend's handle: host address (CPU), device address (CUDA) */
    size_t bytes;
    enum k25_mem_cat cat;
    bool mapped;          /* wraps host memory the backend does not own (CPU weights) */
    bool host;            /* host memory the host may address (k25_buf_host): every CPU buffer, a
                           * device backend's pinned host buffers (buf_alloc_host) */
};
#endif

/*
 * A 2-D view of a buffer: rows of cols elements, stride elements apart.
 *
 * Weight formats (issue 16; docs/engine.md "Weight formats").  GEMM and
 * embedding tables come in fp32, bf16 or fp16 (dense rows, stride in
 * elements) or quantized group-wise:
 *   INT8 / INT4 weights: G values per scale (a multiple of 32 that divides
 *   cols), stride = BYTES from one row to the next, exactly the row's size
 *   (no padding), so G follows from it: G = 4 cols / (stride - data bytes),
 *   k25_wquant_group().  A row is
 *     [cols/G fp32 scales, little-endian][data]
 *   int8 data: cols signed bytes, value k = q[k] * scale[k / G];
 *   int4 data: cols/2 bytes in blocks of 32 values (16 bytes): byte l of a
 *   block holds value l in its low nibble and value l+16 in its high one,
 *   each stored as q + 8 (q in [-8, 7]), value = q * scale.
 *   Quantization is symmetric (no zero point): scale = max|w| / 127 (int8)
 *   or / 7 (int4) over the group, q = round(w / scale).  A row's bytes
 *   (scales included) are 4 cols/G + cols (int8) or + cols/2 (int4), a
 *   multiple of 4.  Quantized weight tensors are whole matrices: no
 *   k25_tensor_view of them (the kernels take row ranges inside).
 */
struct k25_tensor {
    struct k25_buf *buf;
    size_t off;           /* bytes from the buffer's start to row 0 */
    int64_t rows, cols, stride;
    enum k25_dtype dtype; /* INT8/INT4 weights: stride counts bytes (above) */
};

/* Bytes of one element of a dense dtype (fp32 4, fp16/bf16 2, int8 1); 0 for int4. */
size_t k25_dtype_bytes(enum k25_dtype t);

/* rows [row0, row0+n) of t, and columns [col0, col0+ncols) of those. */
static inline struct k25_tensor k25_tensor_view(const struct k25_tensor *t, int64_t row0, int64_t n, int64_t col0,
                                                int64_t ncols)
{
    struct k25_tensor v = *t;
    K25_ASSERT(k25_dtype_bytes(t->dtype) > 0); /* int4 packs two per byte: no element views (nor of int8
                                                * weights, whose rows carry scales) */
    v.off += (size_t)(row0 * t->stride + col0) * k25_dtype_bytes(t->dtype);
    v.rows = n;
    v.cols = ncols;
    return v;
}

/* A backend instance (one per engine).  priv belongs to the backend. */
struct k25_bctx {
    const struct k25_backend *be;
    struct k25_mem_acct *acct; /* where buffers are charged (the engine's) */
    void *priv;
};

/* One sequence of an attention call: its queries are rows [row0, row0+n_q)
 * of q/out at KV slots q_slot0.., scored into score + score_off floats
 * ([n_kv_heads][q_slot0 + n_q], zeroed by the caller). */
struct k25_attn_seq {
    struct k25_kv_seq *seq;
    int row0, n_q, q_slot0;
    size_t score_off;
};

/* One layer's attention over a step's sequences (struct k25_attn_job per sequence). */
struct k25_attn_call {
    enum k25_attn_impl impl;
    const struct k25_kv_pool *pool;
    int layer;
    int n_heads;
    float scale;
    const struct k25_attn_seq *seqs;
    int n_seqs;
    const struct k25_tensor *q;   /* [T][>= n_heads*head_dim], RoPE applied */
    const struct k25_tensor *out; /* [T][n_heads*head_dim] */
    const struct k25_tensor *score; /* NULL or fp32 scores, 1 row; only implementations that read
                                     * compressed caches fill it (k25_attn_impl_desc.compression) */
};

struct k25_backend {
    const char *name;
    const char *description;

    /* ---- instance */
    int (*init)(struct k25_bctx *ctx, struct k25_error *err);
    void (*destroy)(struct k25_bctx *ctx);
    bool (*supports)(const struct k25_bctx *ctx, enum k25_op op, enum k25_dtype dtype);
    /* Reads the backend's own config keys (the CPU's cpu_kernels) for an engine; NULL when it has
     * none.  A setting this machine cannot run is K25_EUNSUPPORTED naming the key.  Without a call
     * (tests that make bare instances) the backend uses its defaults. */
    int (*configure)(struct k25_bctx *ctx, const struct k25_config *cfg, struct k25_error *err);
    /* Optional (NULL: always K25_OK).  The ops below return nothing: a backend whose calls can fail
     * (a device) records the first failure - the call, file, line, device - and stops running ops;
     * status() reports it.  The engine asks once per forward pass and after loading the weights
     * (k25_backend_status). */
    int (*status)(struct k25_bctx *ctx, struct k25_error *err);

    /* ---- memory.  buf_alloc: zeroed, charged to ctx->acct under cat.
     * buf_map_host: a buffer holding host memory's bytes - the CPU maps it
     * (no copy; the host memory must outlive the buffer), others copy it;
     * either way charged to ctx->acct (not to the process, which counted
     * the host memory already).  set/get/clear: byte ranges. */
    int (*buf_alloc)(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes, struct k25_buf **out,
                     struct k25_error *err);
    int (*buf_map_host)(struct k25_bctx *ctx, enum k25_mem_cat cat, const void *host, size_t bytes,
                        struct k25_buf **out, struct k25_error *err);
    void (*buf_free)(struct k25_bctx *ctx, struct k25_buf *buf);
    void (*buf_set)(struct k25_bctx *ctx, struct k25_buf *buf, size_t off, const void *src, size_t bytes);
    void (*buf_get)(struct k25_bctx *ctx, const struct k25_buf *buf, size_t off, void *dst, size_t bytes);
    void (*buf_clear)(struct k25_bctx *ctx, struct k25_buf *buf, size_t off, size_t bytes);
    /* bytes from src at src_off to dst at dst_off, both this backend's buffers (no overlap) */
    void (*buf_copy)(struct k25_bctx *ctx, struct k25_buf *dst, size_t dst_off, const struct k25_buf *src,
                     size_t src_off, size_t bytes);
    /* Optional.  buf_alloc_host: a buffer in host memory the host addresses directly
     * (k25_buf_host) and the device copies from without staging - pinned memory on a GPU, ordinary
     * memory on the CPU; zeroed, charged like buf_alloc.  The KV tiers' host areas are such buffers.
     * buf_host: the host address of a host buffer, NULL for device memory. */
    int (*buf_alloc_host)(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes, struct k25_buf **out,
                          struct k25_error *err);
    void *(*buf_host)(struct k25_bctx *ctx, const struct k25_buf *buf);
    /* Optional: the backend's memory, free and total bytes (the CPU: the host's available and
     * total memory; a GPU: the device's).  The memory budget and `k25 mem` read it. */
    int (*memory_info)(struct k25_bctx *ctx, size_t *free_bytes, size_t *total_bytes, struct k25_error *err);
    /* Optional (NULL: none): the host or device scratch one step of step_tokens tokens (queries and
     * KV tokens of one sequence) needs beyond its buffers - the CPU: its attention kernels' scratch
     * (k25_attn_scratch_bytes).  The memory budget subtracts it before sizing the KV pool. */
    int64_t (*scratch_bytes)(const struct k25_bctx *ctx, const struct k25_config *cfg,
                             const struct k25_model_shape *s, int64_t step_tokens, int threads);
    void (*synchronize)(struct k25_bctx *ctx);

    /* ---- compute.  Activations are fp32 rows. */
    /* y[m][n] = x[m][k] . w[n][k]^T (+ y when accumulate); w in w->dtype.  The CPU runs steps of
     * m <= 16 rows (decode) on its own kernels, batch-invariant: a row's result does not depend on
     * m or on the other rows (docs/engine.md "Decode kernels"); larger m on OpenBLAS */
    void (*gemm)(struct k25_bctx *ctx, const struct k25_tensor *x, const struct k25_tensor *w,
                 const struct k25_tensor *y, bool accumulate);
    /* y[i] = x[i] / rms(x[i]) * w, per row; w is one row */
    void (*rmsnorm)(struct k25_bctx *ctx, const struct k25_tensor *x, const struct k25_tensor *w, float eps,
                    const struct k25_tensor *y);
    /* cs[i] = cos(pos[i] f_j) for j < hd/2, then sin(pos[i] f_j), f_j = inv_freq[j] (host) */
    void (*rope_cache)(struct k25_bctx *ctx, const int32_t *pos, const double *inv_freq,
                       const struct k25_tensor *cs);
    /* rotates heads [0, n_heads) of every row of x in place ("rotate half"), angles from cs */
    void (*rope)(struct k25_bctx *ctx, const struct k25_tensor *x, int n_heads, int head_dim,
                 const struct k25_tensor *cs);
    /* h[i] = silu(gu[i][0:ffn]) * gu[i][ffn:2ffn] */
    void (*swiglu)(struct k25_bctx *ctx, const struct k25_tensor *gu, const struct k25_tensor *h);
    /* out[i] = table[ids[i]] (ids on the host, out->rows of them) */
    void (*embed)(struct k25_bctx *ctx, const struct k25_tensor *table, const int32_t *ids,
                  const struct k25_tensor *out);
    /* dst[i] = src[rows[i]] (rows on the host, dst->rows of them) */
    void (*rows_gather)(struct k25_bctx *ctx, const struct k25_tensor *src, const int32_t *rows,
                        const struct k25_tensor *dst);

    /* ---- KV cache.  The pool's bookkeeping (block ids, block tables,
     * slot counts) is host data in kvcache.c; blocks and residuals are
     * this backend's buffers. */
    /* writes k, v rows ([n][n_kv_heads*head_dim], fp32) at slots slot0.. of (seq, layer);
     * slot0 + n <= seq->n_tokens (k25_kv_seq_reserve made room) */
    void (*kv_write)(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq, int layer,
                     int slot0, const struct k25_tensor *k, const struct k25_tensor *v);
    void (*attention)(struct k25_bctx *ctx, const struct k25_attn_call *call);
    /* adds one sequence's scores ([n_kv_heads][q_slot0+n_q] at score) to its slot metadata for layer;
     * the layer-0 call also counts the queries in the slots' seen (one per slot: kvcache.h) */
    void (*kv_add_scores)(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq, int layer,
                          const struct k25_tensor *score, int q_slot0, int n_q, int group);
    /* merges and prunes seq's compressible region to the kept count (kvcompress.c's rules) */
    int (*kv_compact)(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq,
                      const struct k25_kv_compress_opts *o, int *removed, struct k25_error *err);
    /* one whole block (pool->block_bytes) to / from host memory: the KV tiers' copies.  For
     * int8/int4 a sequence's newest slots live in its fp16 residual (seq->res, a buffer of its
     * own, read with buf_get): a tier move of a whole sequence moves that too */
    void (*kv_block_get)(struct k25_bctx *ctx, const struct k25_kv_pool *pool, int32_t id, void *host);
    void (*kv_block_set)(struct k25_bctx *ctx, struct k25_kv_pool *pool, int32_t id, const void *host);

    /* ---- optional (NULL when a backend has none) */
    /* ids[i] = the index of row i's largest value (the lowest among equal ones), x fp32; ids on the
     * host.  Greedy sampling on the backend (the engine's sampler reads logits with buf_get) */
    void (*argmax)(struct k25_bctx *ctx, const struct k25_tensor *x, int32_t *ids);
    /* measures the device's bf16 GEMM peak and memory bandwidth (seconds of work; k25_device_probe) */
    int (*probe)(struct k25_bctx *ctx, struct k25_device_probe *out, struct k25_error *err);
};

/* ---- registry (backend.c) */

/* The backend built in under name, or NULL. */
const struct k25_backend *k25_backend_find(const char *name);
/* Backends built in, in registration order (the CPU first). */
int k25_backend_count(void);
const struct k25_backend *k25_backend_at(int i);

/* The backends themselves. */
extern const struct k25_backend k25_backend_cpu;

/* Creates / destroys an instance of be charging acct. */
int k25_bctx_init(struct k25_bctx *ctx, const struct k25_backend *be, struct k25_mem_acct *acct,
                  struct k25_error *err);
void k25_bctx_destroy(struct k25_bctx *ctx);
/* K25_OK, or the first failure the backend recorded (its status slot; backends without one: K25_OK). */
int k25_backend_status(struct k25_bctx *ctx, struct k25_error *err);

/*
 * K25_EINVAL unless the backend runs everything cfg needs with weights in
 * weight_dtype: every op, the KV dtype, the attention implementation, and
 * the compression ops when compression is active.  The message names the
 * backend, the op and the config key to change.
 */
int k25_backend_check(const struct k25_bctx *ctx, const struct k25_config *cfg, enum k25_dtype weight_dtype,
                      struct k25_error *err);

/*
 * The buffer calls, for the engine's code: k25_buf_alloc(ctx, ...) instead of
 * ctx->be->buf_alloc(ctx, ...).  k25_buf_alloc_host falls back to buf_alloc on a
 * backend without host buffers; k25_buf_host is NULL where the backend has none;
 * k25_memory_info is K25_EUNSUPPORTED on a backend that cannot tell.
 */
static inline int k25_buf_alloc(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes, struct k25_buf **out,
                                struct k25_error *err)
{
    return ctx->be->buf_alloc(ctx, cat, bytes, out, err);
}
static inline int k25_buf_alloc_host(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes,
                                     struct k25_buf **out, struct k25_error *err)
{
    return ctx->be->buf_alloc_host ? ctx->be->buf_alloc_host(ctx, cat, bytes, out, err)
                                   : ctx->be->buf_alloc(ctx, cat, bytes, out, err);
}
static inline void k25_buf_free(struct k25_bctx *ctx, struct k25_buf *buf)
{
    ctx->be->buf_free(ctx, buf);
}
static inline void k25_buf_set(struct k25_bctx *ctx, struct k25_buf *buf, size_t off, const void *src,
                               size_t bytes)
{
    ctx->be->buf_set(ctx, buf, off, src, bytes);
}
static inline void k25_buf_get(struct k25_bctx *ctx, const struct k25_buf *buf, size_t off, void *dst,
                               size_t bytes)
{
    ctx->be->buf_get(ctx, buf, off, dst, bytes);
}
static inline void k25_buf_clear(struct k25_bctx *ctx, struct k25_buf *buf, size_t off, size_t bytes)
{
    ctx->be->buf_clear(ctx, buf, off, bytes);
}
static inline void k25_buf_copy(struct k25_bctx *ctx, struct k25_buf *dst, size_t dst_off,
                                const struct k25_buf *src, size_t src_off, size_t bytes)
{
    ctx->be->buf_copy(ctx, dst, dst_off, src, src_off, bytes);
}
static inline void *k25_buf_host(struct k25_bctx *ctx, const struct k25_buf *buf)
{
    return ctx->be->buf_host ? ctx->be->buf_host(ctx, buf) : NULL;
}
int k25_memory_info(struct k25_bctx *ctx, size_t *free_bytes, size_t *total_bytes, struct k25_error *err);

/* A tensor over a whole buffer: rows x cols fp32 (or dtype) elements. */
static inline struct k25_tensor k25_tensor_of(struct k25_buf *buf, int64_t rows, int64_t cols, enum k25_dtype dtype)
{
    return (struct k25_tensor){buf, 0, rows, cols, cols, dtype};
}

#endif /* K25_BACKEND_H */
