/*
 * backend.c - the backend registry (the one place that knows which
 * backends are built in: the only #ifdef for CUDA in a .c file), instance
 * set-up, and the check that a backend can run a config.
 */
#include "backend.h"
#include "kvcache.h"

#include <string.h>

#ifdef K25_WITH_CUDA
extern const struct k25_backend k25_backend_cuda; /* engine/cuda/ */
#endif

static const struct k25_backend *const g_backends[] = {
    &k25_backend_cpu,
#ifdef K25_WITH_CUDA
    &k25_backend_cuda,
#endif
};
#define N_BACKENDS ((int)(sizeof(g_backends) / sizeof(g_backends[0])))

int k25_backend_count(void)
{
    return N_BACKENDS;
}

const struct k25_backend *k25_backend_at(int i)
{
    return i >= 0 && i < N_BACKENDS ? g_backends[i] : NULL;
}

const struct k25_backend *k25_backend_find(const char *name)
{
    for (int i = 0; i < N_BACKENDS; i++)
        if (!strcmp(g_backends[i]->name, name))
            return g_backends[i];
    return NULL;
}

bool k25_backend_find_name(const char *name)
{
    return k25_backend_find(name) != NULL;
}

int k25_backend_names(char *buf, size_t size)
{
    size_t n = 0;
    if (size)
        buf[0] = '\0';
    for (int i = 0; i < N_BACKENDS; i++) {
        int w = snprintf(buf + n, size > n ? size - n : 0, "%s%s", i ? "|" : "", g_backends[i]->name);
        if (w < 0 || (size_t)w >= (size > n ? size - n : 0))
            return K25_ERANGE;
        n += (size_t)w;
    }
    return K25_OK;
}

const char *k25_op_name(enum k25_op op)
{
    static const char *const names[K25_OP_N] = {
        [K25_OP_GEMM] = "gemm",
        [K25_OP_RMSNORM] = "rmsnorm",
        [K25_OP_ROPE] = "rope",
        [K25_OP_SWIGLU] = "swiglu",
        [K25_OP_EMBED] = "embed",
        [K25_OP_ROWS] = "rows_gather",
        [K25_OP_KV_WRITE] = "kv_write",
        [K25_OP_ATTN_CHUNKED] = "attention (chunked)",
        [K25_OP_ATTN_FLASH2] = "attention (flash2)",
        [K25_OP_ATTN_NAIVE] = "attention (naive)",
        [K25_OP_KV_SCORE] = "kv_add_scores",
        [K25_OP_KV_COMPACT] = "kv_compact",
        [K25_OP_KV_TIER_COPY] = "kv_block_get/set",
    };
    return op >= 0 && op < K25_OP_N && names[op] ? names[op] : "?";
}

enum k25_op k25_op_attention(enum k25_attn_impl impl)
{
    switch (impl) {
    case K25_ATTN_CHUNKED: return K25_OP_ATTN_CHUNKED;
    case K25_ATTN_FLASH2: return K25_OP_ATTN_FLASH2;
    case K25_ATTN_NAIVE: return K25_OP_ATTN_NAIVE;
    case K25_ATTN_NIMPL: break;
    }
    K25_ASSERT(!"unknown attention implementation");
    return K25_OP_N;
}

size_t k25_dtype_bytes(enum k25_dtype t)
{
    switch (t) {
    case K25_DTYPE_FP32: return 4;
    case K25_DTYPE_FP16:
    case K25_DTYPE_BF16: return 2;
    case K25_DTYPE_INT8: return 1;
    case K25_DTYPE_INT4:
    case K25_DTYPE_N: break;
    }
    return 0;
}

int k25_bctx_init(struct k25_bctx *ctx, const struct k25_backend *be, struct k25_mem_acct *acct,
                  struct k25_error *err)
{
    *ctx = (struct k25_bctx){be, acct, NULL};
    return be->init(ctx, err);
}

void k25_bctx_destroy(struct k25_bctx *ctx)
{
    if (ctx->be)
        ctx->be->destroy(ctx);
    ctx->be = NULL;
}

int k25_backend_status(struct k25_bctx *ctx, struct k25_error *err)
{
    return ctx->be && ctx->be->status ? ctx->be->status(ctx, err) : K25_OK;
}

int k25_device_probe(const char *name, struct k25_device_probe *out, struct k25_error *err)
{
    const struct k25_backend *be = k25_backend_find(name);
    memset(out, 0, sizeof(*out));
    if (!be)
        return k25_error_set(err, K25_ENOTFOUND, NULL, 0, "backend", "'%s' is not built into this binary", name);
    if (!be->probe)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend", "backend '%s' has no device probe", name);
    struct k25_bctx ctx;
    int rc = k25_bctx_init(&ctx, be, NULL, err);
    if (rc != K25_OK)
        return rc;
    rc = be->probe(&ctx, out, err);
    k25_bctx_destroy(&ctx);
    return rc;
}

int k25_backend_check(const struct k25_bctx *ctx, const struct k25_config *cfg, enum k25_dtype weight_dtype,
                      struct k25_error *err)
{
    const struct k25_backend *be = ctx->be;
    struct need {
        enum k25_op op;
        enum k25_dtype dtype;
        const char *key; /* the config key that asks for it */
    } needs[] = {
        {K25_OP_GEMM, weight_dtype, "model"},
        {K25_OP_EMBED, weight_dtype, "model"},
        {K25_OP_RMSNORM, K25_DTYPE_FP32, NULL},
        {K25_OP_ROPE, K25_DTYPE_FP32, NULL},
        {K25_OP_SWIGLU, K25_DTYPE_FP32, NULL},
        {K25_OP_ROWS, K25_DTYPE_FP32, NULL},
        {K25_OP_KV_WRITE, cfg->kv_cache_dtype, "kv_cache_dtype"},
        {k25_op_attention(cfg->attention), cfg->kv_cache_dtype, "attention"},
        {K25_OP_KV_SCORE, cfg->kv_cache_dtype, "kv_compression_ratio"},
        {K25_OP_KV_COMPACT, cfg->kv_cache_dtype, "kv_compression_ratio"},
    };
    int n = (int)(sizeof(needs) / sizeof(needs[0]));
    if (!k25_kv_compress_active(cfg))
        n -= 2; /* the compression ops are the last two */
    for (int i = 0; i < n; i++)
        if (!be->supports(ctx, needs[i].op, needs[i].dtype))
            return k25_error_set(err, K25_EINVAL, NULL, 0, needs[i].key ? needs[i].key : "backend",
                                 "backend '%s' cannot run %s on %s data%s%s", be->name, k25_op_name(needs[i].op),
                                 k25_dtype_name(needs[i].dtype),
                                 needs[i].key ? "; change this key or choose another backend" : "",
                                 needs[i].key ? "" : " (an incomplete backend)");
    return K25_OK;
}

int k25_memory_info(struct k25_bctx *ctx, size_t *free_bytes, size_t *total_bytes, struct k25_error *err)
{
    if (!ctx->be->memory_info)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "backend", "backend %s cannot tell its free memory",
                             ctx->be->name);
    return ctx->be->memory_info(ctx, free_bytes, total_bytes, err);
}

int k25_backend_memory(const char *name, size_t *free_bytes, size_t *total_bytes, struct k25_error *err)
{
    const struct k25_backend *be = k25_backend_find(name);
    *free_bytes = *total_bytes = 0;
    if (!be)
        return k25_error_set(err, K25_ENOTFOUND, NULL, 0, "backend", "'%s' is not built into this binary", name);
    struct k25_bctx ctx;
    int rc = k25_bctx_init(&ctx, be, NULL, err);
    if (rc != K25_OK)
        return rc;
    rc = k25_memory_info(&ctx, free_bytes, total_bytes, err);
    k25_bctx_destroy(&ctx);
    return rc;
}
