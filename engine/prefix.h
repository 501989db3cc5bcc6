/*
 * prefix.h - prefix caching over the paged KV cache (engine-internal).
 *
 * A full KV block is named by a hash chained over the token ids it holds:
 * h(block i) = H(h(block i-1), tokens of block i), with h(-1) a seed made
 * from everything that changes the KV content (model, its shape, weight
 * format, KV dtype and block size, quantization groups, RoPE base,
 * compression ratio).  When a request finishes, its full blocks are
 * published into a hash table (k25_prefix_publish); a new request reuses
 * every leading full block of its prompt that matches (k25_prefix_attach)
 * and its prefill starts after them.
 *
 * Blocks are reference counted (pool->refs): a block is free (on the free
 * list, refs 0), in use (refs >= 1: the sequences whose block tables hold
 * it), or cached and unreferenced (refs 0, in the table and on an LRU
 * list).  Shared blocks are only ever read: a request that diverges inside
 * a block does not share it and prefills it itself (copy-on-write at the
 * first divergent block, without a copy), and the KV writes assert that a
 * block they touch has refs == 1 and is not cached (kvcache.c).  When the
 * pool needs a block and has no free one under its budget, the
 * least-recently released cached block is evicted (k25_prefix_evict);
 * without a budget the cache keeps at most max(K25_PREFIX_IDLE_BYTES of
 * blocks, the pool's peak in use) unreferenced blocks.
 *
 * Compression is not combined with sharing: k25_config_validate refuses
 * enable_prefix_caching when compression is active (a compressed block's
 * slots are not its tokens' positions and its statistics live in the
 * sequence).  INT8/INT4: only blocks whose every slot is quantized (none in
 * the fp16 residual) are published; a hit starts with an empty residual.
 */
#ifndef K25_PREFIX_H
#define K25_PREFIX_H

#include "kvcache.h"

/* Without memory_budget_mb: idle cached blocks kept, in bytes (at least the pool's peak in use). */
#define K25_PREFIX_IDLE_BYTES ((size_t)256 << 20)

struct k25_prefix_stats {
    int64_t lookups;       /* attach calls */
    int64_t hits;          /* attach calls that matched at least one block */
    int64_t hit_tokens;    /* tokens served from the cache */
    int64_t cached_blocks; /* blocks in the table now (referenced or not) */
    int64_t evictions;     /* cached blocks evicted to make room */
};

/*
 * Creates p's prefix cache (p->px) with chain seed `seed`; on_evict (may be
 * NULL) is called with each block id evicted under memory pressure.
 * K25_ENOMEM on failure (p->px stays NULL).
 */
int k25_prefix_create(struct k25_kv_pool *p, uint64_t seed, void (*on_evict)(int32_t id, void *user), void *user,
                      struct k25_error *err);
/* Frees p->px (the blocks themselves belong to the pool). */
void k25_prefix_destroy(struct k25_kv_pool *p);

/* The chain seed of an engine: a hash of what makes its KV (see above). */
uint64_t k25_prefix_seed(const struct k25_config *cfg, const struct k25_model_shape *s);

/*
 * Looks up the leading full blocks of tokens[0, n) (the caller passes the
 * prompt less its last token, which must be prefilled for logits) and puts
 * every matching block into seq's empty block table, referenced; sets
 * seq->n_tokens = n_pos = *matched (a multiple of the block size, 0 on a
 * miss).  K25_ENOMEM leaves seq empty and *matched 0.
 */
int k25_prefix_attach(struct k25_kv_pool *p, struct k25_kv_seq *seq, const int32_t *tokens, int n, int *matched,
                      struct k25_error *err);

/*
 * Publishes seq's full blocks among the first n_written slots, whose
 * token ids are tokens[0, n_written), into the table (blocks already
 * there, or whose hash another block holds, are skipped).  For int8/int4
 * only blocks below every layer's n_quant.  Call before releasing seq; the
 * blocks then stay cached when their last reference goes.  Out of memory:
 * publishes less.
 */
void k25_prefix_publish(struct k25_kv_pool *p, const struct k25_kv_seq *seq, const int32_t *tokens,
                        int n_written);

/* kvcache.c's side: whether block id is in the table; parks a cached block
 * whose last reference went (LRU tail); takes the LRU block out of the
 * table for reuse (-1 when none is unreferenced). */
bool k25_prefix_cached(const struct k25_kv_pool *p, int32_t id);
void k25_prefix_park(struct k25_kv_pool *p, int32_t id);
int32_t k25_prefix_evict(struct k25_kv_pool *p);

void k25_prefix_get_stats(const struct k25_kv_pool *p, struct k25_prefix_stats *out);

#endif
