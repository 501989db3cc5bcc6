/*
 * attn_impl.c - the attention dispatch table: every implementation the
 * engine can run (`attention` config key), each registered by the file
 * that holds its kernels (engine/cpu/attention.c, engine/cpu/flash2.c,
 * engine/cpu/naive.c) as a struct k25_attn_impl_desc.  The CPU backend's
 * attention op, the memory calculator and `k25 attn-bench` look
 * implementations up here and nowhere else.
 */
#include "attn.h"
#include "internal.h"

static const struct k25_attn_impl_desc *const g_impls[K25_ATTN_NIMPL] = {
    [K25_ATTN_CHUNKED] = &k25_attn_chunked,
    [K25_ATTN_FLASH2] = &k25_attn_flash2,
    [K25_ATTN_NAIVE] = &k25_attn_naive,
};

const struct k25_attn_impl_desc *k25_attn_impl_get(enum k25_attn_impl impl)
{
    K25_ASSERT(impl >= 0 && impl < K25_ATTN_NIMPL && g_impls[impl] && g_impls[impl]->id == impl);
    return g_impls[impl];
}

int64_t k25_attn_scratch_bytes(enum k25_attn_impl impl, int n_heads, int n_kv_heads, int head_dim,
                               int block_size, enum k25_dtype kv_dtype, int n_seqs, int64_t n_q,
                               int64_t n_kv, int threads)
{
    if (impl < 0 || impl >= K25_ATTN_NIMPL)
        return 0;
    return k25_attn_impl_get(impl)->scratch_bytes(n_heads, n_kv_heads, head_dim, block_size, kv_dtype, n_seqs,
                                                  n_q, n_kv, threads);
}
