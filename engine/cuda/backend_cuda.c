/*
 * backend_cuda.c - the CUDA backend's table (backend.h): instance set-up
 * and device checks, device buffers, the upload arena, the translation of
 * tensors and KV bookkeeping into the kernels' plain arguments
 * (k25_cuda_ops.h), and the error record the engine reads once per step.
 * C11, compiled by the host compiler with the CUDA runtime's C API; the
 * kernels live in the .cu files beside it, one per operation.
 *
 * Streams.  Every op runs in order on the instance's compute stream; the
 * KV tier copies (kv_block_get / kv_block_set) run on a copy stream of
 * their own through pinned staging memory, ordered against the compute
 * stream by events.  buf_get returns when the bytes are on the host.
 *
 * Host arguments (token ids, positions, row numbers, block tables, work
 * items) go through the upload arena: a pinned host ring and a device
 * ring of the same size; each upload is copied asynchronously on the
 * compute stream, and the ring is reused only after a stream
 * synchronization, so no pending copy's source is overwritten.  An op
 * makes one upload (its arguments packed), so a wrap never lands on an
 * upload the same op still needs.
 *
 * Errors.  Every CUDA, cuBLAS(Lt) and cuDNN call is checked (K25_CUDA ...,
 * k25_cuda_ops.h); the first failure is recorded with the statement, file,
 * line and device, later ops of the instance do nothing, and status()
 * reports it (the engine checks after every forward pass: forward.c).
 * Allocation failures are returned where they happen (K25_ENOMEM), not
 * recorded.
 *
 * Not on this backend (refused by name when a config asks): int8/int4
 * weights, KV compression (kv_add_scores / kv_compact), KV tiers (the
 * tiers stream layers through host memory), the flash2 and naive
 * baselines (CPU reference implementations).
 */
#include "backend.h"
#include "kvcache.h"
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BYTES (8u << 20)
/* cuda_gemm exact: weight rows widened to fp32 per GEMM call (at least 64 rows) */
#define GEMM_TILE_BYTES (64u << 20)

struct cuda_priv {
    struct k25cu_err err;
    int device;
    char name[200];
    int cc_major, cc_minor;
    cudaStream_t stream, copy;
    cudaEvent_t ev_compute, ev_copy;
    struct k25cu_lt *lt;
    bool gemm_fast;   /* cuda_gemm fast: prefill GEMMs on activations rounded to the weights' type */
    /* upload arena */
    unsigned char *arena_host, *arena_dev;
    size_t arena_cap, arena_off;
    /* pinned staging of the tier copies */
    unsigned char *stage;
    size_t stage_cap;
    bool stage_busy; /* a copy from stage may still be running on the copy stream */
    /* scratch grown as needed (device) */
    uint16_t *x16;    /* a prefill GEMM's activations in the weights' 16-bit type (cuda_gemm fast) */
    size_t x16_cap;
    float *wtile;     /* rows of fp16/bf16 weights widened to fp32 (cuda_gemm exact) */
    size_t wtile_cap;
    float *part;      /* split-KV partials */
    size_t part_cap;
    /* host scratch: what one op uploads, packed (one upload per op: see upload) */
    unsigned char *hblob;
    size_t hblob_cap;
};

/* ------------------------------------------------------------------ errors */

bool k25cu_note(struct k25cu_err *e, bool ok, const char *lib, long code, const char *name, const char *stmt,
                const char *file, int line)
{
    if (ok)
        return true;
    if (e->failed) {
        e->n_later++;
        return false;
    }
    e->failed = 1;
    e->code = code;
    snprintf(e->lib, sizeof(e->lib), "%s", lib);
    snprintf(e->name, sizeof(e->name), "%s", name ? name : "?");
    snprintf(e->stmt, sizeof(e->stmt), "%s", stmt);
    e->file = file;
    e->line = line;
    return false;
}

const char *k25cu_cublas_name(int status)
{
    return cublasLtGetStatusName((cublasStatus_t)status);
}

const char *k25cu_cudnn_name(int status)
{
    return cudnnGetErrorString((cudnnStatus_t)status);
}

static int cuda_status(struct k25_bctx *ctx, struct k25_error *err)
{
    const struct cuda_priv *p = ctx->priv;
    if (!p || !p->err.failed)
        return K25_OK;
    const struct k25cu_err *e = &p->err;
    char later[48] = "";
    if (e->n_later)
        snprintf(later, sizeof(later), " (%d later calls failed too)", e->n_later);
    return k25_error_set(err, K25_EIO, NULL, 0, "backend", "CUDA backend: %s failed: %s %s (%ld) at %s:%d on device %d%s",
                         e->stmt, e->lib, e->name, e->code, e->file ? e->file : "?", e->line, e->device, later);
}

/* ---------------------------------------------------------------- instance */

/* Why no device can be used, as one line (K25_EUNSUPPORTED), or K25_OK with the device chosen. */
static int pick_device(struct cuda_priv *p, struct k25_error *err)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (drv)
            dlclose(drv);
        if (rc == cudaErrorInsufficientDriver && !drv)
            return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend",
                                 "CUDA backend: no NVIDIA driver on this machine (libcuda.so.1 not found)");
        if (rc == cudaErrorInsufficientDriver)
            return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend",
                                 "CUDA backend: the NVIDIA driver is older than the CUDA runtime this binary "
                                 "was built with (%d.%d)",
                                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        if (rc == cudaErrorNoDevice)
            return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend", "CUDA backend: no CUDA device (%s)",
                                 cudaGetErrorName(rc));
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend", "CUDA backend: no usable device: %s: %s",
                             cudaGetErrorName(rc), cudaGetErrorString(rc));
    }
    if (n < 1)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend", "CUDA backend: no CUDA device");
    struct cudaDeviceProp prop;
    if (!K25_CUDA(&p->err, cudaGetDeviceProperties(&prop, 0)))
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend", "CUDA backend: %s failed: %s",
                             p->err.stmt, p->err.name);
    p->device = 0;
    p->cc_major = prop.major;
    p->cc_minor = prop.minor;
    snprintf(p->name, sizeof(p->name), "%.199s", prop.name);
    if (prop.major < 8)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend",
                             "CUDA backend: %s has compute capability %d.%d, too old (built for 8.0 and newer)",
                             prop.name, prop.major, prop.minor);
    return K25_OK;
}

static void cuda_destroy(struct k25_bctx *ctx);

static int cuda_init(struct k25_bctx *ctx, struct k25_error *err)
{
    struct cuda_priv *p = calloc(1, sizeof(*p));
    if (!(ctx->priv = p))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (CUDA backend)");
    int rc = pick_device(p, err);
    if (rc != K25_OK)
        goto out_fail;
    p->err.device = p->device;
    struct k25cu_err *e = &p->err;
    if (!K25_CUDA(e, cudaSetDevice(p->device)) ||
        !K25_CUDA(e, cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking)) ||
        !K25_CUDA(e, cudaStreamCreateWithFlags(&p->copy, cudaStreamNonBlocking)) ||
        !K25_CUDA(e, cudaEventCreateWithFlags(&p->ev_compute, cudaEventDisableTiming)) ||
        !K25_CUDA(e, cudaEventCreateWithFlags(&p->ev_copy, cudaEventDisableTiming)) ||
        !K25_CUDA(e, cudaHostAlloc((void **)&p->arena_host, ARENA_BYTES, cudaHostAllocDefault)) ||
        !K25_CUDA(e, cudaMalloc((void **)&p->arena_dev, ARENA_BYTES)) || !k25cu_lt_create(e, &p->lt)) {
        rc = cuda_status(ctx, err);
        goto out_fail;
    }
    p->arena_cap = ARENA_BYTES;
    return K25_OK;
out_fail:
    cuda_destroy(ctx);
    return rc;
}

static void cuda_destroy(struct k25_bctx *ctx)
{
    struct cuda_priv *p = ctx->priv;
    if (!p)
        return;
    if (p->stream)
        cudaStreamSynchronize(p->stream);
    if (p->copy)
        cudaStreamSynchronize(p->copy);
    k25cu_lt_destroy(p->lt);
    cudaFree(p->arena_dev);
    cudaFreeHost(p->arena_host);
    cudaFreeHost(p->stage);
    cudaFree(p->x16);
    cudaFree(p->wtile);
    cudaFree(p->part);
    if (p->ev_compute)
        cudaEventDestroy(p->ev_compute);
    if (p->ev_copy)
        cudaEventDestroy(p->ev_copy);
    if (p->stream)
        cudaStreamDestroy(p->stream);
    if (p->copy)
        cudaStreamDestroy(p->copy);
    free(p->hblob);
    free(p);
    ctx->priv = NULL;
}

static bool cuda_supports(const struct k25_bctx *ctx, enum k25_op op, enum k25_dtype dtype)
{
    (void)ctx;
    bool kv = dtype == K25_DTYPE_FP32 || dtype == K25_DTYPE_FP16 || dtype == K25_DTYPE_INT8 ||
              dtype == K25_DTYPE_INT4;
    switch (op) {
    case K25_OP_GEMM:
    case K25_OP_EMBED:
        return dtype == K25_DTYPE_FP32 || dtype == K25_DTYPE_BF16 || dtype == K25_DTYPE_FP16;
    case K25_OP_RMSNORM:
    case K25_OP_ROPE:
    case K25_OP_SWIGLU:
    case K25_OP_ROWS:
        return dtype == K25_DTYPE_FP32;
    case K25_OP_KV_WRITE:
    case K25_OP_ATTN_CHUNKED:
    case K25_OP_KV_TIER_COPY:
        return kv;
    case K25_OP_ATTN_FLASH2: /* CPU reference baselines */
    case K25_OP_ATTN_NAIVE:
    case K25_OP_KV_SCORE:    /* compression: host code over the blocks (kvcompress.c) */
    case K25_OP_KV_COMPACT:
    case K25_OP_N: break;
    }
    return false;
}

static int cuda_configure(struct k25_bctx *ctx, const struct k25_config *cfg, struct k25_error *err)
{
    struct cuda_priv *p = ctx->priv;
    if (cfg->cpu_kernels != K25_CPU_KERNELS_AUTO)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "cpu_kernels",
                             "cpu_kernels applies to backend cpu, not cuda");
    p->gemm_fast = cfg->cuda_gemm == K25_CUDA_GEMM_FAST;
    if (cfg->kv_hot_tokens > 0)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "kv_hot_tokens",
                             "KV tiers stream layers through host memory, which the CUDA backend's kernels do not "
                             "read: set kv_hot_tokens to 0 with backend cuda");
    return K25_OK;
}

/* ------------------------------------------------------------------ memory */

static void *dev(const struct k25_buf *b, size_t off)
{
    return (unsigned char *)b->data + off;
}

static float *f32(const struct k25_tensor *t)
{
    K25_ASSERT(t->dtype == K25_DTYPE_FP32);
    return (float *)dev(t->buf, t->off);
}

static int cuda_buf_alloc(struct k25_bctx *ctx, enum k25_mem_cat cat, size_t bytes, struct k25_buf **out,
                          struct k25_error *err)
{
    struct cuda_priv *p = ctx->priv;
    struct k25_buf *b = calloc(1, sizeof(*b));
    void *d = NULL;
    cudaError_t rc = b ? cudaMalloc(&d, bytes ? bytes : 1) : cudaErrorMemoryAllocation;
    if (rc != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the next launch check must not see it */
        free(b);
        *out = NULL;
        return err ? k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of device memory (%s, %zu bytes: %s)",
                                   k25_mem_cat_name(cat), bytes, cudaGetErrorName(rc))
                   : K25_ENOMEM;
    }
    K25_CUDA(&p->err, cudaMemsetAsync(d, 0, bytes, p->stream));
    *b = (struct k25_buf){ctx->be, d, bytes, cat, false, false}; /* device memory */
    if (ctx->acct)
        k25_mem_acct_add(ctx->acct, cat, (int64_t)bytes);
    *out = b;
    return K25_OK;
}

static int cuda_buf_map_host(struct k25_bctx *ctx, enum k25_mem_cat cat, const void *host, size_t bytes,
                             struct k25_buf **out, struct k25_error *err)
{
    struct cuda_priv *p = ctx->priv;
    int rc = cuda_buf_alloc(ctx, cat, bytes, out, err);
    if (rc != K25_OK)
        return rc;
    if (!K25_CUDA(&p->err, cudaMemcpyAsync((*out)->data, host, bytes, cudaMemcpyHostToDevice, p->stream)) ||
        !K25_CUDA(&p->err, cudaStreamSynchronize(p->stream)))
        return cuda_status(ctx, err);
    return K25_OK;
}

static void cuda_buf_free(struct k25_bctx *ctx, struct k25_buf *b)
{
    struct cuda_priv *p = ctx->priv;
    if (!b)
        return;
    K25_CUDA(&p->err, cudaStreamSynchronize(p->stream));
    K25_CUDA(&p->err, cudaFree(b->data));
    if (ctx->acct)
        k25_mem_acct_add(ctx->acct, b->cat, -(int64_t)b->bytes);
    free(b);
}

static void cuda_buf_set(struct k25_bctx *ctx, struct k25_buf *b, size_t off, const void *src, size_t bytes)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(off + bytes <= b->bytes);
    if (!p->err.failed && bytes) /* pageable source: staged before the call returns */
        K25_CUDA(&p->err, cudaMemcpyAsync(dev(b, off), src, bytes, cudaMemcpyHostToDevice, p->stream));
}

static void cuda_buf_get(struct k25_bctx *ctx, const struct k25_buf *b, size_t off, void *dst, size_t bytes)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(off + bytes <= b->bytes);
    if (p->err.failed) { /* the engine's status check reports it; no stale bytes meanwhile */
        memset(dst, 0, bytes);
        return;
    }
    if (bytes && (!K25_CUDA(&p->err, cudaMemcpyAsync(dst, dev(b, off), bytes, cudaMemcpyDeviceToHost, p->stream)) ||
                  !K25_CUDA(&p->err, cudaStreamSynchronize(p->stream))))
        memset(dst, 0, bytes);
}

static void cuda_buf_clear(struct k25_bctx *ctx, struct k25_buf *b, size_t off, size_t bytes)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(off + bytes <= b->bytes);
    if (!p->err.failed && bytes)
        K25_CUDA(&p->err, cudaMemsetAsync(dev(b, off), 0, bytes, p->stream));
}

static void cuda_buf_copy(struct k25_bctx *ctx, struct k25_buf *dst, size_t dst_off, const struct k25_buf *src,
                          size_t src_off, size_t bytes)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(dst_off + bytes <= dst->bytes && src_off + bytes <= src->bytes);
    if (!p->err.failed && bytes)
        K25_CUDA(&p->err, cudaMemcpyAsync(dev(dst, dst_off), (const unsigned char *)src->data + src_off, bytes,
                                          cudaMemcpyDeviceToDevice, p->stream));
}

static int cuda_memory_info(struct k25_bctx *ctx, size_t *free_bytes, size_t *total_bytes, struct k25_error *err)
{
    struct cuda_priv *p = ctx->priv;
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess)
        return k25_error_set(err, K25_EIO, NULL, 0, "backend", "CUDA backend: cudaMemGetInfo failed on device %d: %s",
                             p ? p->err.device : -1, cudaGetErrorString(e));
    return K25_OK;
}

static void cuda_synchronize(struct k25_bctx *ctx)
{
    struct cuda_priv *p = ctx->priv;
    K25_CUDA(&p->err, cudaStreamSynchronize(p->stream));
    K25_CUDA(&p->err, cudaStreamSynchronize(p->copy));
}

/* A device copy of bytes host bytes, valid for work queued on the compute stream after this call
 * (the upload arena, above); NULL after a failure (recorded). */
static void *upload(struct cuda_priv *p, const void *host, size_t bytes)
{
    const size_t need = (bytes + 15) / 16 * 16;
    if (p->arena_off + need > p->arena_cap) {
        if (!K25_CUDA(&p->err, cudaStreamSynchronize(p->stream)))
            return NULL;
        p->arena_off = 0;
        if (need > p->arena_cap) { /* a bigger ring (a long batch's block tables) */
            size_t cap = p->arena_cap;
            while (cap < need)
                cap *= 2;
            cudaFreeHost(p->arena_host);
            cudaFree(p->arena_dev);
            p->arena_host = NULL, p->arena_dev = NULL, p->arena_cap = 0;
            if (!K25_CUDA(&p->err, cudaHostAlloc((void **)&p->arena_host, cap, cudaHostAllocDefault)) ||
                !K25_CUDA(&p->err, cudaMalloc((void **)&p->arena_dev, cap)))
                return NULL;
            p->arena_cap = cap;
        }
    }
    unsigned char *h = p->arena_host + p->arena_off, *d = p->arena_dev + p->arena_off;
    memcpy(h, host, bytes);
    p->arena_off += need;
    return K25_CUDA(&p->err, cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, p->stream)) ? d : NULL;
}

/* The host blob of at least bytes (NULL and an error recorded when memory is short). */
static unsigned char *blob(struct cuda_priv *p, size_t bytes)
{
    if (bytes > p->hblob_cap) {
        size_t cap = bytes > 2 * p->hblob_cap ? bytes : 2 * p->hblob_cap;
        unsigned char *n = realloc(p->hblob, cap);
        if (!n) {
            k25cu_note(&p->err, false, "k25", 0, "out of memory", "host argument blob", __FILE__, __LINE__);
            return NULL;
        }
        p->hblob = n;
        p->hblob_cap = cap;
    }
    return p->hblob;
}

/* Bytes rounded up to 16 (the packing unit of one op's arguments). */
static size_t pad16(size_t n)
{
    return (n + 15) / 16 * 16;
}

/* Device scratch *buf of at least bytes (grown after the stream drains). */
static bool scratch(struct cuda_priv *p, void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return true;
    if (!K25_CUDA(&p->err, cudaStreamSynchronize(p->stream)))
        return false;
    cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    if (!K25_CUDA(&p->err, cudaMalloc(buf, bytes)))
        return false;
    *cap = bytes;
    return true;
}

/* ----------------------------------------------------------------- compute */

static enum k25cu_type cu_type(enum k25_dtype t)
{
    switch (t) {
    case K25_DTYPE_FP16: return K25CU_F16;
    case K25_DTYPE_BF16: return K25CU_BF16;
    case K25_DTYPE_INT8: return K25CU_I8;
    case K25_DTYPE_INT4: return K25CU_I4;
    default: return K25CU_F32;
    }
}

/* Decode steps on the GEMV kernel (batch-invariant), larger ones on cuBLASLt (gemm.cu). */
static void cuda_gemm(struct k25_bctx *ctx, const struct k25_tensor *x, const struct k25_tensor *w,
                      const struct k25_tensor *y, bool acc)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(x->cols == w->cols && y->rows == x->rows && y->cols == w->rows);
    K25_ASSERT(w->dtype == K25_DTYPE_FP32 || w->dtype == K25_DTYPE_FP16 || w->dtype == K25_DTYPE_BF16);
    if (p->err.failed)
        return;
    const int m = (int)x->rows, n = (int)w->rows, k = (int)x->cols;
    const enum k25cu_type t = cu_type(w->dtype);
    const void *wd = dev(w->buf, w->off);
    if (m <= K25CU_GEMV_MAX_M) {
        k25cu_gemv(&p->err, p->stream, f32(x), (size_t)x->stride, m, wd, (size_t)w->stride, t, n, k, f32(y),
                   (size_t)y->stride, acc);
        return;
    }
    if (t == K25CU_F32) {
        k25cu_lt_gemm(&p->err, p->lt, p->stream, f32(x), (size_t)x->stride, m, wd, (size_t)w->stride, t, n, k, f32(y),
                      (size_t)y->stride, acc);
        return;
    }
    if (p->gemm_fast) {
        if (!scratch(p, (void **)&p->x16, &p->x16_cap, sizeof(uint16_t) * (size_t)m * k) ||
            !k25cu_convert(&p->err, p->stream, f32(x), (size_t)x->stride, m, k, t, p->x16))
            return;
        k25cu_lt_gemm(&p->err, p->lt, p->stream, p->x16, (size_t)k, m, wd, (size_t)w->stride, t, n, k, f32(y),
                      (size_t)y->stride, acc);
        return;
    }
    /* exact: GEMM_TILE_BYTES of weight rows at a time widened to fp32 (exact), then an fp32 GEMM */
    int64_t rows = (int64_t)(GEMM_TILE_BYTES / (sizeof(float) * (size_t)k));
    rows = rows < 64 ? 64 : rows > n ? n : rows;
    if (!scratch(p, (void **)&p->wtile, &p->wtile_cap, sizeof(float) * (size_t)rows * k))
        return;
    for (int64_t j0 = 0; j0 < n; j0 += rows) {
        const int nb = (int)(n - j0 < rows ? n - j0 : rows);
        const size_t eb = k25_dtype_bytes(w->dtype);
        if (!k25cu_widen(&p->err, p->stream, (const unsigned char *)wd + (size_t)j0 * w->stride * eb,
                         (size_t)w->stride, t, nb, k, p->wtile) ||
            !k25cu_lt_gemm(&p->err, p->lt, p->stream, f32(x), (size_t)x->stride, m, p->wtile, (size_t)k, K25CU_F32,
                           nb, k, f32(y) + j0, (size_t)y->stride, acc))
            return;
    }
}

static void cuda_rmsnorm(struct k25_bctx *ctx, const struct k25_tensor *x, const struct k25_tensor *w, float eps,
                         const struct k25_tensor *y)
{
    struct cuda_priv *p = ctx->priv;
    if (!p->err.failed)
        k25cu_rmsnorm(&p->err, p->stream, f32(x), (size_t)x->stride, f32(w), eps, f32(y), (size_t)y->stride,
                      (int)x->rows, (int)x->cols);
}

static void cuda_rope_cache(struct k25_bctx *ctx, const int32_t *pos, const double *inv_freq,
                            const struct k25_tensor *cs)
{
    struct cuda_priv *p = ctx->priv;
    if (p->err.failed || cs->rows <= 0)
        return;
    const size_t pb = pad16(sizeof(int32_t) * (size_t)cs->rows), ib = sizeof(double) * (size_t)(cs->cols / 2);
    unsigned char *h = blob(p, pb + ib), *d;
    if (!h)
        return;
    memcpy(h, pos, sizeof(int32_t) * (size_t)cs->rows);
    memcpy(h + pb, inv_freq, ib);
    if ((d = upload(p, h, pb + ib)))
        k25cu_rope_cache(&p->err, p->stream, (const int32_t *)d, (const double *)(d + pb), f32(cs), (size_t)cs->stride,
                         (int)cs->rows, (int)cs->cols);
}

static void cuda_rope(struct k25_bctx *ctx, const struct k25_tensor *x, int n_heads, int hd,
                      const struct k25_tensor *cs)
{
    struct cuda_priv *p = ctx->priv;
    if (!p->err.failed)
        k25cu_rope(&p->err, p->stream, f32(x), (size_t)x->stride, (int)x->rows, n_heads, hd, f32(cs),
                   (size_t)cs->stride);
}

static void cuda_swiglu(struct k25_bctx *ctx, const struct k25_tensor *gu, const struct k25_tensor *h)
{
    struct cuda_priv *p = ctx->priv;
    if (!p->err.failed)
        k25cu_swiglu(&p->err, p->stream, f32(gu), (size_t)gu->stride, f32(h), (size_t)h->stride, (int)gu->rows,
                     (int)h->cols);
}

static void gather(struct k25_bctx *ctx, const struct k25_tensor *src, const int32_t *rows,
                   const struct k25_tensor *dst)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(src->cols == dst->cols);
    if (p->err.failed || dst->rows <= 0)
        return;
    for (int64_t i = 0; i < dst->rows; i++)
        K25_ASSERT(rows[i] >= 0 && rows[i] < src->rows);
    const int32_t *drows = upload(p, rows, sizeof(int32_t) * (size_t)dst->rows);
    if (drows)
        k25cu_gather(&p->err, p->stream, dev(src->buf, src->off), (size_t)src->stride, cu_type(src->dtype), drows,
                     (int)dst->rows, (int)dst->cols, f32(dst), (size_t)dst->stride);
}

static void cuda_embed(struct k25_bctx *ctx, const struct k25_tensor *table, const int32_t *ids,
                       const struct k25_tensor *out)
{
    gather(ctx, table, ids, out);
}

static void cuda_rows_gather(struct k25_bctx *ctx, const struct k25_tensor *src, const int32_t *rows,
                             const struct k25_tensor *dst)
{
    gather(ctx, src, rows, dst);
}

/* ---------------------------------------------------------------- KV cache */

static struct k25cu_kv_layout layout_of(const struct k25_kv_pool *pool)
{
    return (struct k25cu_kv_layout){pool->block_size,   pool->n_kv_heads,    pool->head_dim,  pool->quant ? pool->bits : 0,
                                    (int)pool->elem_bytes, pool->group,       pool->vgroup,    pool->res_cap,
                                    pool->row_bytes,    pool->head_bytes,    pool->half_bytes, pool->ks_off,
                                    pool->vs_off,       pool->ks_head_bytes, pool->vs_head_bytes};
}

/* Device address of layer l of block id. */
static uint64_t layer_addr(const struct k25_kv_pool *pool, int32_t id, int l)
{
    K25_ASSERT(id >= 0 && id < pool->n_alloc && pool->blocks[id] != NULL); /* no tiers on this backend */
    return (uint64_t)(uintptr_t)pool->blocks[id]->data + (uint64_t)l * pool->layer_bytes;
}

/* The fp16 residual of layer l of seq (int8/int4): [K|V][n_kv_heads][res_cap][head_dim]. */
static uint16_t *res_of(const struct k25_kv_pool *pool, const struct k25_kv_seq *seq, int l)
{
    return (uint16_t *)seq->res->data + (size_t)l * 2 * pool->n_kv_heads * pool->res_cap * pool->head_dim;
}

static void cuda_kv_write(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq, int layer,
                          int slot0, const struct k25_tensor *k, const struct k25_tensor *v)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(k->stride == v->stride && k->rows == v->rows && !pool->compress);
    const int n = (int)k->rows, bs = pool->block_size;
    K25_ASSERT(slot0 >= 0 && slot0 + n <= seq->n_tokens);
    if (p->err.failed || n <= 0)
        return;
    const struct k25cu_kv_layout L = layout_of(pool);
    if (!pool->quant) {
        const int b0 = slot0 / bs, nb = (slot0 + n - 1) / bs - b0 + 1;
        uint64_t *ht = (uint64_t *)blob(p, sizeof(uint64_t) * (size_t)nb);
        if (!ht)
            return;
        for (int b = 0; b < nb; b++)
            ht[b] = layer_addr(pool, seq->ids[b0 + b], layer);
        unsigned char *const *table = upload(p, ht, sizeof(uint64_t) * (size_t)nb);
        if (table)
            k25cu_kv_write_rows(&p->err, p->stream, &L, table, slot0, n, f32(k), f32(v), (size_t)k->stride);
        return;
    }
    /* int8/int4: runs of rows into the residual; a full residual quantizes its oldest group */
    uint16_t *res = res_of(pool, seq, layer);
    for (int i = 0; i < n;) {
        const int idx = slot0 + i - seq->n_quant[layer];
        K25_ASSERT(idx >= 0 && idx < pool->res_cap);
        const int c = n - i < pool->res_cap - idx ? n - i : pool->res_cap - idx;
        if (!k25cu_kv_write_res(&p->err, p->stream, &L, res, idx, c, f32(k) + (size_t)i * k->stride,
                                f32(v) + (size_t)i * v->stride, (size_t)k->stride))
            return;
        i += c;
        if (idx + c >= pool->res_cap) {
            const int s0 = seq->n_quant[layer];
            unsigned char *lay = (unsigned char *)(uintptr_t)layer_addr(pool, seq->ids[s0 / bs], layer);
            if (!k25cu_kv_quant_group(&p->err, p->stream, &L, res, lay, s0 % bs))
                return;
            seq->n_quant[layer] += pool->group;
        }
    }
}

/* The step's sequences as work items (k25_cuda_ops.h), uploaded packed, then the kernels (attention.cu). */
static void cuda_attention(struct k25_bctx *ctx, const struct k25_attn_call *c)
{
    struct cuda_priv *p = ctx->priv;
    const struct k25_kv_pool *pool = c->pool;
    K25_ASSERT(c->impl == K25_ATTN_CHUNKED && !c->score && !pool->compress);
    if (p->err.failed || c->n_seqs <= 0)
        return;
    const int nkv = pool->n_kv_heads, hd = pool->head_dim, group = c->n_heads / nkv;
    int n_items = 0, n_table = 0, part_rows = 0, max_split = 1;
    for (int i = 0; i < c->n_seqs; i++) {
        n_items += k25cm_attn_items(c->seqs[i].n_q, group);
        n_table += c->seqs[i].seq->n_blocks;
    }
    const size_t sb = pad16(sizeof(struct k25cu_attn_seq) * (size_t)c->n_seqs),
                 ib = pad16(sizeof(struct k25cu_attn_item) * (size_t)n_items),
                 tb = sizeof(uint64_t) * (size_t)(n_table > 0 ? n_table : 1);
    unsigned char *h = blob(p, sb + ib + tb);
    if (!h)
        return;
    struct k25cu_attn_seq *hs = (struct k25cu_attn_seq *)h;
    struct k25cu_attn_item *hi = (struct k25cu_attn_item *)(h + sb);
    uint64_t *ht = (uint64_t *)(h + sb + ib);
    int it = 0, t = 0;
    for (int i = 0; i < c->n_seqs; i++) {
        const struct k25_attn_seq *s = &c->seqs[i];
        const struct k25_kv_seq *sq = s->seq;
        struct k25cu_attn_seq *q = &hs[i];
        *q = (struct k25cu_attn_seq){sq->n_tokens, sq->n_tokens, s->row0, s->n_q, s->q_slot0, t, 1, NULL, NULL};
        if (pool->quant) {
            uint16_t *res = res_of(pool, sq, c->layer);
            q->n_quant = sq->n_quant[c->layer];
            q->res_k = res;
            q->res_v = res + (size_t)nkv * pool->res_cap * hd;
        }
        if (s->n_q == 1) /* decode: split-KV by the length alone */
            q->n_split = k25cm_split_count(s->q_slot0 + 1);
        max_split = q->n_split > max_split ? q->n_split : max_split;
        for (int b = 0; b < sq->n_blocks; b++)
            ht[t++] = layer_addr(pool, sq->ids[b], c->layer);
        const int rows = s->n_q * group;
        for (int r0 = 0; r0 < rows; r0 += K25CU_ATTN_ROWS) {
            int nr = rows - r0 < K25CU_ATTN_ROWS ? rows - r0 : K25CU_ATTN_ROWS;
            hi[it++] = (struct k25cu_attn_item){i, r0, nr, q->n_split > 1 ? part_rows + r0 : 0};
        }
        if (q->n_split > 1)
            part_rows += rows;
    }
    if (part_rows > 0 && !scratch(p, (void **)&p->part, &p->part_cap, k25cm_part_bytes(part_rows, nkv, hd)))
        return;
    unsigned char *d = upload(p, h, sb + ib + tb);
    if (!d)
        return;
    struct k25cu_attn_args a = {
        .q = f32(c->q), .q_stride = (size_t)c->q->stride, .out = f32(c->out), .out_stride = (size_t)c->out->stride,
        .n_heads = c->n_heads, .group = group, .scale = c->scale, .kv = layout_of(pool),
        .seqs = (const struct k25cu_attn_seq *)d, .items = (const struct k25cu_attn_item *)(d + sb),
        .n_items = n_items, .max_split = max_split, .table = (const unsigned char *const *)(d + sb + ib),
        .part = p->part, .n_part_rows = part_rows,
    };
    k25cu_attention(&p->err, p->stream, &a);
}

static void cuda_kv_add_scores(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq, int layer,
                               const struct k25_tensor *score, int q_slot0, int n_q, int group)
{
    (void)ctx, (void)pool, (void)seq, (void)layer, (void)score, (void)q_slot0, (void)n_q, (void)group;
    K25_ASSERT(!"kv_add_scores on the CUDA backend (refused by k25_backend_check)");
}

static int cuda_kv_compact(struct k25_bctx *ctx, struct k25_kv_pool *pool, struct k25_kv_seq *seq,
                           const struct k25_kv_compress_opts *o, int *removed, struct k25_error *err)
{
    (void)ctx, (void)pool, (void)seq, (void)o;
    *removed = 0;
    return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "kv_compression_ratio",
                         "KV compression does not run on the CUDA backend: set kv_compression_ratio to 1");
}

/* Pinned staging of at least bytes, free of pending copies. */
static bool stage_ready(struct cuda_priv *p, size_t bytes)
{
    if (p->stage_busy && !K25_CUDA(&p->err, cudaStreamSynchronize(p->copy)))
        return false;
    p->stage_busy = false;
    if (bytes <= p->stage_cap)
        return true;
    cudaFreeHost(p->stage);
    p->stage = NULL;
    p->stage_cap = 0;
    if (!K25_CUDA(&p->err, cudaHostAlloc((void **)&p->stage, bytes, cudaHostAllocDefault)))
        return false;
    p->stage_cap = bytes;
    return true;
}

/* One block to the host on the copy stream, after the compute stream's work on it. */
static void cuda_kv_block_get(struct k25_bctx *ctx, const struct k25_kv_pool *pool, int32_t id, void *host)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(id >= 0 && id < pool->n_alloc);
    const size_t n = pool->block_bytes;
    if (p->err.failed || !stage_ready(p, n) || !K25_CUDA(&p->err, cudaEventRecord(p->ev_compute, p->stream)) ||
        !K25_CUDA(&p->err, cudaStreamWaitEvent(p->copy, p->ev_compute, 0)) ||
        !K25_CUDA(&p->err, cudaMemcpyAsync(p->stage, pool->blocks[id]->data, n, cudaMemcpyDeviceToHost, p->copy)) ||
        !K25_CUDA(&p->err, cudaStreamSynchronize(p->copy))) {
        memset(host, 0, n);
        return;
    }
    memcpy(host, p->stage, n);
}

/* One block from the host on the copy stream; later compute waits for it (event). */
static void cuda_kv_block_set(struct k25_bctx *ctx, struct k25_kv_pool *pool, int32_t id, const void *host)
{
    struct cuda_priv *p = ctx->priv;
    K25_ASSERT(id >= 0 && id < pool->n_alloc);
    const size_t n = pool->block_bytes;
    if (p->err.failed || !stage_ready(p, n))
        return;
    memcpy(p->stage, host, n);
    p->stage_busy = true;
    /* the block may still be read by queued compute: the copy waits for it */
    (void)(K25_CUDA(&p->err, cudaEventRecord(p->ev_compute, p->stream)) &&
           K25_CUDA(&p->err, cudaStreamWaitEvent(p->copy, p->ev_compute, 0)) &&
           K25_CUDA(&p->err, cudaMemcpyAsync(pool->blocks[id]->data, p->stage, n, cudaMemcpyHostToDevice, p->copy)) &&
           K25_CUDA(&p->err, cudaEventRecord(p->ev_copy, p->copy)) &&
           K25_CUDA(&p->err, cudaStreamWaitEvent(p->stream, p->ev_copy, 0)));
}

/* ------------------------------------------------------- optional slots */

static void cuda_argmax(struct k25_bctx *ctx, const struct k25_tensor *x, int32_t *ids)
{
    struct cuda_priv *p = ctx->priv;
    const int m = (int)x->rows;
    if (p->err.failed || m <= 0)
        return;
    int32_t *d = NULL;
    size_t cap = 0;
    if (!scratch(p, (void **)&d, &cap, sizeof(int32_t) * (size_t)m))
        return;
    if (k25cu_argmax(&p->err, p->stream, f32(x), (size_t)x->stride, m, (int)x->cols, d))
        (void)(K25_CUDA(&p->err, cudaMemcpyAsync(ids, d, sizeof(int32_t) * (size_t)m, cudaMemcpyDeviceToHost,
                                                 p->stream)) &&
               K25_CUDA(&p->err, cudaStreamSynchronize(p->stream)));
    cudaFree(d);
}

static int cuda_probe(struct k25_bctx *ctx, struct k25_device_probe *out, struct k25_error *err)
{
    struct cuda_priv *p = ctx->priv;
    memset(out, 0, sizeof(*out));
    snprintf(out->device, sizeof(out->device), "%s (compute capability %d.%d)", p->name, p->cc_major, p->cc_minor);
    struct k25cu_probe_out o;
    if (!p->err.failed && k25cu_probe(&p->err, p->lt, p->stream, &o)) {
        out->bf16_gemm_tflops = o.bf16_tflops;
        out->mem_bw_gbs = o.bw_gbs;
        for (int i = 0; i < 2; i++)
            out->gemv_us[i] = o.gemv_us[i], out->lt_us[i] = o.lt_us[i];
    }
    return cuda_status(ctx, err);
}

const struct k25_backend k25_backend_cuda = {
    .name = "cuda",
    .description = "NVIDIA GPU: cuBLASLt GEMMs (prefill), GEMV kernel (decode), tiled online-softmax attention over "
                   "the paged KV cache with fused int8/int4 dequantization",
    .init = cuda_init,
    .destroy = cuda_destroy,
    .supports = cuda_supports,
    .configure = cuda_configure,
    .status = cuda_status,
    .buf_alloc = cuda_buf_alloc,
    .buf_map_host = cuda_buf_map_host,
    .buf_free = cuda_buf_free,
    .buf_set = cuda_buf_set,
    .buf_get = cuda_buf_get,
    .buf_clear = cuda_buf_clear,
    .buf_copy = cuda_buf_copy,
    .memory_info = cuda_memory_info,
    .synchronize = cuda_synchronize,
    .gemm = cuda_gemm,
    .rmsnorm = cuda_rmsnorm,
    .rope_cache = cuda_rope_cache,
    .rope = cuda_rope,
    .swiglu = cuda_swiglu,
    .embed = cuda_embed,
    .rows_gather = cuda_rows_gather,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .kv_add_scores = cuda_kv_add_scores,
    .kv_compact = cuda_kv_compact,
    .kv_block_get = cuda_kv_block_get,
    .kv_block_set = cuda_kv_block_set,
    .argmax = cuda_argmax,
    .probe = cuda_probe,
};
