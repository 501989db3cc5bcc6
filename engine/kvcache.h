/*
 * kvcache.h - the paged KV cache (engine-internal).
 *
 * Memory is handed out in blocks of block_size tokens.  One block holds
 * those tokens' keys and values for every layer:
 *   block = [layer][K|V][kv_head][token][head_dim]
 * so a sequence needs one block-table entry per block_size tokens, and
 * attention for (layer, KV head) reads contiguous [token][head_dim] rows.
 * Freed blocks go to a free list and are reused; the pool can be capped
 * (memory budget) and then admits requests by reservation.
 */
#ifndef K25_KVCACHE_H
#define K25_KVCACHE_H

#include "backend.h"

struct k25_kv_pool {
    int block_size, n_layers, n_kv_heads, head_dim;
    enum k25_dtype dtype;
    size_t elem_bytes;   /* 4 (fp32) or 2 (fp16) */
    size_t half_bytes;   /* K (or V) of one layer: n_kv_heads*block_size*head_dim*elem */
    size_t block_bytes;  /* n_layers * 2 * half_bytes */
    int64_t max_blocks;  /* 0 = no cap */
    int64_t reserved;    /* blocks promised to admitted requests */
    void **blocks;       /* [n_alloc] k25_alloc(K25_MEM_KV) */
    int64_t n_alloc, cap;
    int32_t *free_ids;   /* stack of free block ids */
    int64_t n_free;
    int64_t in_use, peak_in_use;
};

/* The blocks of one sequence. */
struct k25_kv_seq {
    int32_t *ids;       /* [n_blocks] block table (malloc'd) */
    int n_blocks, cap;
    int n_tokens;       /* tokens written */
};

int k25_kv_pool_init(struct k25_kv_pool *p, const struct k25_model_shape *s, int block_size,
                     enum k25_dtype dtype, int64_t max_blocks, struct k25_error *err);
void k25_kv_pool_free(struct k25_kv_pool *p);

/* Blocks needed to hold n tokens. */
static inline int64_t k25_kv_blocks_for(const struct k25_kv_pool *p, int64_t n)
{
    return (n + p->block_size - 1) / p->block_size;
}

/*
 * Makes room for n more tokens in seq (allocating blocks), then writes
 * their keys and values for one layer: k/v are [n][n_kv_heads*head_dim].
 * k25_kv_seq_reserve allocates; k25_kv_seq_write only copies.
 */
int k25_kv_seq_reserve(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n, struct k25_error *err);
void k25_kv_seq_write(struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer, int pos0, int n,
                      const float *k, const float *v, int stride);
/* Returns every block of seq to the pool (calling on_free for each id). */
void k25_kv_seq_release(struct k25_kv_pool *p, struct k25_kv_seq *seq,
                        void (*on_free)(int32_t id, void *user), void *user);

/*
 * Fills view for (seq, layer); kptr/vptr are caller arrays of at least
 * seq->n_blocks entries that the view points into.
 */
void k25_kv_seq_view(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer,
                     const void **kptr, const void **vptr, struct k25_kv_view *view);

#endif
