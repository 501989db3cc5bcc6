/*
 * kvcache.c - paged KV cache bookkeeping: a block pool with a free list,
 * block tables per sequence, reference counts, and the room a step needs
 * (blocks, the int8/int4 residual, compression statistics), all through
 * backend calls.  See kvcache.h for the layout; the blocks' bytes (fp32/fp16
 * rows, INT8/INT4 groups with their fp16 residual window, slot metadata) are
 * the CPU backend's engine/cpu/kvstore.c.
 */
#include "kvcache.h"
#include "prefix.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int k25_kv_pool_init(struct k25_kv_pool *p, const struct k25_model_shape *s, const struct k25_config *cfg,
                     int64_t max_blocks, struct k25_bctx *be, struct k25_error *err)
{
    memset(p, 0, sizeof(*p));
    p->be = be;
    const int bs = cfg->kv_block_size, hd = s->head_dim, nkv = s->n_kv_heads;
    p->block_size = bs;
    p->n_layers = s->n_layers;
    p->n_kv_heads = nkv;
    p->head_dim = hd;
    p->dtype = cfg->kv_cache_dtype;
    p->quant = p->dtype == K25_DTYPE_INT8 || p->dtype == K25_DTYPE_INT4;
    p->compress = k25_kv_compress_active(cfg);
    if (p->quant) {
        p->bits = p->dtype == K25_DTYPE_INT8 ? 8 : 4;
        p->group = cfg->kv_quant_group;
        p->vgroup = cfg->kv_quant_group < hd ? cfg->kv_quant_group : hd;
        p->residual = cfg->kv_quant_residual;
        p->res_cap = p->residual + p->group;
        if (bs % p->group != 0)
            return k25_error_set(err, K25_ERANGE, NULL, 0, "kv_quant_group",
                                 "%d does not divide kv_block_size (%d)", p->group, bs);
        if (hd % p->vgroup != 0 || (p->bits == 4 && (hd % 2 || p->vgroup % 2)))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_quant_group",
                                 "value groups of %d channels do not tile head_dim %d%s", p->vgroup, hd,
                                 p->bits == 4 ? " in whole bytes (int4 needs even groups)" : "");
        p->row_bytes = k25_kvq_row_bytes(hd, p->bits);
        p->ks_head_bytes = (size_t)(bs / p->group) * 2 * hd * sizeof(uint16_t);
        p->vs_head_bytes = (size_t)bs * (hd / p->vgroup) * 2 * sizeof(uint16_t);
    } else {
        p->elem_bytes = p->dtype == K25_DTYPE_FP32 ? 4 : 2;
        p->row_bytes = (size_t)hd * p->elem_bytes;
    }
    p->meta_head_bytes = p->compress ? (size_t)bs : 0; /* one count byte per slot */
    p->head_bytes = (size_t)bs * p->row_bytes;
    p->half_bytes = (size_t)nkv * p->head_bytes;
    p->ks_off = 2 * p->half_bytes;
    p->vs_off = p->ks_off + (size_t)nkv * p->ks_head_bytes;
    p->meta_off = p->vs_off + (size_t)nkv * p->vs_head_bytes;
    p->layer_bytes = p->meta_off + (size_t)nkv * p->meta_head_bytes;
    p->layer_bytes = (p->layer_bytes + 63) / 64 * 64; /* keep every layer 64-byte aligned */
    p->block_bytes = (size_t)s->n_layers * p->layer_bytes;
    p->max_blocks = max_blocks;
    return K25_OK;
}

void k25_kv_pool_free(struct k25_kv_pool *p)
{
    free(p->res_tmp);
    p->res_tmp = NULL;
    for (int64_t i = 0; i < p->n_alloc; i++)
        p->be->be->buf_free(p->be, p->blocks[i]);
    free(p->blocks);
    free(p->free_ids);
    free(p->refs);
    for (int i = 0; i < p->n_spare; i++)
        p->be->be->buf_free(p->be, p->spare[i]);
    free(p->spare);
    k25_prefix_destroy(p);
    memset(p, 0, sizeof(*p));
}

int k25_kv_buf_take(struct k25_kv_pool *p, struct k25_buf **out, struct k25_error *err)
{
    p->spare_taken++;
    if (p->n_spare > 0) {
        *out = p->spare[--p->n_spare];
        return K25_OK;
    }
    if (p->be->be->buf_alloc(p->be, K25_MEM_KV, p->block_bytes, out, NULL) != K25_OK)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (a KV block buffer of %zu bytes)",
                             p->block_bytes);
    return K25_OK;
}

void k25_kv_buf_give(struct k25_kv_pool *p, struct k25_buf *b)
{
    if (p->n_spare < p->spare_keep) {
        if (p->n_spare == p->spare_cap) {
            int ncap = p->spare_cap ? 2 * p->spare_cap : 8;
            struct k25_buf **ns = realloc(p->spare, sizeof(*ns) * (size_t)ncap);
            if (ns) {
                p->spare = ns;
                p->spare_cap = ncap;
            }
        }
        if (p->n_spare < p->spare_cap) {
            p->spare[p->n_spare++] = b;
            return;
        }
    }
    p->be->be->buf_free(p->be, b);
}

void k25_kv_spare_trim(struct k25_kv_pool *p, int min)
{
    int keep = p->spare_taken > min ? p->spare_taken : min;
    while (p->n_spare > keep)
        p->be->be->buf_free(p->be, p->spare[--p->n_spare]);
    p->spare_taken = 0;
}

/* One block id from the free list, or a new block, or (at the budget) a
 * cached block no sequence holds, evicted.  -1 when full.  Its refs is 1. */
static int32_t block_get(struct k25_kv_pool *p)
{
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
        /* freed while in the warm or cold tier (kvtier.c): it gets a hot buffer again */
        if (!p->blocks[id] && k25_kv_buf_take(p, &p->blocks[id], NULL) != K25_OK) {
            p->free_ids[p->n_free++] = id;
            return -1;
        }
    } else if (p->max_blocks > 0 && p->n_alloc >= p->max_blocks) {
        if ((id = k25_prefix_evict(p)) < 0)
            return -1;
    } else {
        if (p->n_alloc == p->cap) {
            int64_t ncap = p->cap ? 2 * p->cap : 64;
            struct k25_buf **nb = realloc(p->blocks, sizeof(*nb) * (size_t)ncap);
            if (!nb)
                return -1;
            p->blocks = nb;
            int32_t *nf = realloc(p->free_ids, sizeof(int32_t) * (size_t)ncap);
            if (!nf)
                return -1;
            p->free_ids = nf;
            int32_t *nr = realloc(p->refs, sizeof(int32_t) * (size_t)ncap);
            if (!nr)
                return -1;
            p->refs = nr;
            p->cap = ncap;
        }
        K25_ASSERT(p->be != NULL); /* a layout-only pool holds no blocks */
        struct k25_buf *b;
        if (p->be->be->buf_alloc(p->be, K25_MEM_KV, p->block_bytes, &b, NULL) != K25_OK)
            return -1;
        id = (int32_t)p->n_alloc;
        p->blocks[p->n_alloc++] = b;
    }
    p->refs[id] = 1;
    if (++p->in_use > p->peak_in_use)
        p->peak_in_use = p->in_use;
    return id;
}

/* Drops one reference to block id; true when the block went to the free
 * list (false: still shared, or kept idle by the prefix cache). */
static bool block_put(struct k25_kv_pool *p, int32_t id)
{
    K25_ASSERT(p->refs[id] > 0);
    if (--p->refs[id] > 0)
        return false;
    p->in_use--;
    if (k25_prefix_cached(p, id)) {
        k25_prefix_park(p, id);
        return false;
    }
    p->free_ids[p->n_free++] = id;
    return true;
}

int k25_kv_seq_reserve(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n, struct k25_error *err)
{
    if (p->quant && !p->res_tmp && /* a closing group's rows as floats, for the quantizers (one writer) */
        !(p->res_tmp = malloc(sizeof(float) * 2 * (size_t)p->group * p->head_dim)))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV residual scratch)");
    if (p->quant && !seq->res) {
        seq->n_quant = calloc((size_t)p->n_layers, sizeof(int));
        size_t rb = sizeof(uint16_t) * (size_t)p->n_layers * 2 * p->n_kv_heads * p->res_cap * p->head_dim;
        if (!seq->n_quant || p->be->be->buf_alloc(p->be, K25_MEM_KV, rb, &seq->res, NULL) != K25_OK) {
            free(seq->n_quant);
            seq->n_quant = NULL;
            seq->res = NULL;
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV residual)");
        }
    }
    if (p->compress && seq->n_tokens + n - seq->comp_hi > seq->stat_cap) { /* statistics of the tail */
        /* sized to the tail in steps of 64 slots, not doubled: a prefill chunk's tail (chunk + recent)
         * is the peak, and doubling would hold up to twice that (counted in the KV bytes) */
        const size_t per = sizeof(float) * k25_kv_stat_floats(p);
        int have = seq->n_tokens - seq->comp_hi, ncap = (have + n + 63) / 64 * 64;
        struct k25_buf *nb;
        if (k25_buf_alloc(p->be, K25_MEM_KV, per * (size_t)ncap, &nb, NULL) != K25_OK)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV compression statistics)");
        if (seq->stats) {
            k25_buf_copy(p->be, nb, 0, seq->stats, 0, per * (size_t)have);
            k25_buf_free(p->be, seq->stats);
        }
        seq->stats = nb;
        seq->stat_cap = ncap;
    }
    if (p->compress) /* the new slots start with nothing received */
        k25_buf_clear(p->be, seq->stats, sizeof(float) * (size_t)(seq->n_tokens - seq->comp_hi) * k25_kv_stat_floats(p),
                      sizeof(float) * k25_kv_stat_floats(p) * n);
    int need = (int)k25_kv_blocks_for(p, (int64_t)seq->n_tokens + n);
    if (need > seq->cap) {
        int ncap = seq->cap ? seq->cap : 16;
        while (ncap < need)
            ncap *= 2;
        int32_t *ni = realloc(seq->ids, sizeof(int32_t) * (size_t)ncap);
        if (!ni)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (block table)");
        seq->ids = ni;
        seq->cap = ncap;
    }
    while (seq->n_blocks < need) {
        int32_t id = block_get(p);
        if (id < 0)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL,
                                 "KV cache full: %lld blocks of %d tokens in use",
                                 (long long)p->in_use, p->block_size);
        seq->ids[seq->n_blocks++] = id;
    }
    seq->n_tokens += n;
    seq->n_pos += n;
    return K25_OK;
}

void k25_kv_seq_release(struct k25_kv_pool *p, struct k25_kv_seq *seq,
                        void (*on_free)(int32_t id, void *user), void *user)
{
    for (int i = 0; i < seq->n_blocks; i++)
        if (block_put(p, seq->ids[i]) && on_free)
            on_free(seq->ids[i], user);
    free(seq->ids);
    free(seq->n_quant);
    free(seq->tier_mass);
    if (seq->res)
        p->be->be->buf_free(p->be, seq->res);
    if (seq->stats)
        p->be->be->buf_free(p->be, seq->stats);
    memset(seq, 0, sizeof(*seq));
}

void k25_kv_seq_truncate(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n)
{
    K25_ASSERT(n <= seq->n_tokens);
    seq->n_tokens = n;
    int need = (int)k25_kv_blocks_for(p, n);
    while (seq->n_blocks > need)
        block_put(p, seq->ids[--seq->n_blocks]);
}
