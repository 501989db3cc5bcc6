/*
 * kvcache.c - paged KV cache: a block pool with a free list, block tables
 * per sequence, fp32 and fp16 storage.  See kvcache.h for the layout.
 */
#include "kvcache.h"

#include <stdlib.h>
#include <string.h>

int k25_kv_pool_init(struct k25_kv_pool *p, const struct k25_model_shape *s, int block_size,
                     enum k25_dtype dtype, int64_t max_blocks, struct k25_error *err)
{
    memset(p, 0, sizeof(*p));
    if (dtype != K25_DTYPE_FP32 && dtype != K25_DTYPE_FP16)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "kv_cache_dtype",
                             "'%s' KV storage is not implemented yet (fp32 and fp16 are)",
                             k25_dtype_name(dtype));
    p->block_size = block_size;
    p->n_layers = s->n_layers;
    p->n_kv_heads = s->n_kv_heads;
    p->head_dim = s->head_dim;
    p->dtype = dtype;
    p->elem_bytes = dtype == K25_DTYPE_FP32 ? 4 : 2;
    p->half_bytes = (size_t)s->n_kv_heads * block_size * s->head_dim * p->elem_bytes;
    p->block_bytes = (size_t)s->n_layers * 2 * p->half_bytes;
    p->max_blocks = max_blocks;
    return K25_OK;
}

void k25_kv_pool_free(struct k25_kv_pool *p)
{
    for (int64_t i = 0; i < p->n_alloc; i++)
        k25_free(p->blocks[i]);
    free(p->blocks);
    free(p->free_ids);
    memset(p, 0, sizeof(*p));
}

/* One block id from the free list, or a new block.  -1 when full. */
static int32_t block_get(struct k25_kv_pool *p)
{
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
    } else {
        if (p->max_blocks > 0 && p->n_alloc >= p->max_blocks)
            return -1;
        if (p->n_alloc == p->cap) {
            int64_t ncap = p->cap ? 2 * p->cap : 64;
            void **nb = realloc(p->blocks, sizeof(void *) * (size_t)ncap);
            if (!nb)
                return -1;
            p->blocks = nb;
            int32_t *nf = realloc(p->free_ids, sizeof(int32_t) * (size_t)ncap);
            if (!nf)
                return -1;
            p->free_ids = nf;
            p->cap = ncap;
        }
        void *b = k25_alloc(K25_MEM_KV, p->block_bytes);
        if (!b)
            return -1;
        id = (int32_t)p->n_alloc;
        p->blocks[p->n_alloc++] = b;
    }
    if (++p->in_use > p->peak_in_use)
        p->peak_in_use = p->in_use;
    return id;
}

int k25_kv_seq_reserve(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n, struct k25_error *err)
{
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
    return K25_OK;
}

void k25_kv_seq_write(struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer, int pos0, int n,
                      const float *k, const float *v, int stride)
{
    const int bs = p->block_size, hd = p->head_dim;
    K25_ASSERT(pos0 + n <= seq->n_tokens);
    for (int i = 0; i < n; i++) {
        int pos = pos0 + i, b = pos / bs, t = pos % bs;
        unsigned char *blk = (unsigned char *)p->blocks[seq->ids[b]] + (size_t)layer * 2 * p->half_bytes;
        for (int g = 0; g < p->n_kv_heads; g++) {
            size_t off = ((size_t)g * bs + t) * hd;
            const float *ks = k + (size_t)i * stride + (size_t)g * hd;
            const float *vs = v + (size_t)i * stride + (size_t)g * hd;
            if (p->dtype == K25_DTYPE_FP32) {
                memcpy((float *)blk + off, ks, sizeof(float) * hd);
                memcpy((float *)(blk + p->half_bytes) + off, vs, sizeof(float) * hd);
            } else {
                uint16_t *kd = (uint16_t *)blk + off, *vd = (uint16_t *)(blk + p->half_bytes) + off;
                for (int d = 0; d < hd; d++) {
                    kd[d] = k25_fp32_to_fp16(ks[d]);
                    vd[d] = k25_fp32_to_fp16(vs[d]);
                }
            }
        }
    }
}

void k25_kv_seq_release(struct k25_kv_pool *p, struct k25_kv_seq *seq,
                        void (*on_free)(int32_t id, void *user), void *user)
{
    for (int i = 0; i < seq->n_blocks; i++) {
        p->free_ids[p->n_free++] = seq->ids[i];
        p->in_use--;
        if (on_free)
            on_free(seq->ids[i], user);
    }
    free(seq->ids);
    memset(seq, 0, sizeof(*seq));
}

void k25_kv_seq_view(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer,
                     const void **kptr, const void **vptr, struct k25_kv_view *view)
{
    for (int b = 0; b < seq->n_blocks; b++) {
        const unsigned char *blk =
            (const unsigned char *)p->blocks[seq->ids[b]] + (size_t)layer * 2 * p->half_bytes;
        kptr[b] = blk;
        vptr[b] = blk + p->half_bytes;
    }
    view->n_tokens = seq->n_tokens;
    view->block_size = p->block_size;
    view->n_kv_heads = p->n_kv_heads;
    view->head_dim = p->head_dim;
    view->dtype = p->dtype;
    view->k_blocks = kptr;
    view->v_blocks = vptr;
}
