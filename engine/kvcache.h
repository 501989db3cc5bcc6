/*
 * kvcache.h - the paged KV cache (engine-internal).
 *
 * Memory is handed out in blocks of block_size slots.  One block holds
 * those slots' keys and values for every layer:
 *   block = [layer][K|V][kv_head][slot][head_dim]
 *           + (int8/int4) [layer][K scales][kv_head][group][scale|zero][head_dim]
 *                         [layer][V scales][kv_head][slot][head_dim/vgroup][scale|zero]
 *           + (compression) [layer][kv_head][slot] uint8 count (tokens the slot stands for)
 * (the per-layer parts are contiguous: layer l starts at l*layer_bytes),
 * so a sequence needs one block-table entry per block_size slots, and
 * attention for (layer, KV head) reads contiguous [slot][head_dim] rows.
 *
 * Slots and positions.  A sequence has n_pos positions (tokens written)
 * and n_tokens slots (KV entries kept), the same for every layer and KV
 * head.  Without compression they are equal.  Compression (kvcompress.c)
 * removes the same number of slots from every (layer, KV head) of a
 * region [lo, hi) that excludes the first kv_sink_tokens and the last
 * kv_recent_tokens, then shifts the later slots down: kept slots stay in
 * position order and keep their original RoPE rotation, and the
 * uncompressed tail stays contiguous, so slot order is a valid causal
 * order for every later query.
 *
 * INT8/INT4.  The most recent slots of each layer, [n_quant[layer],
 * n_tokens), live in an fp16 residual (res_cap = kv_quant_residual +
 * kv_quant_group rows per (layer, K|V, KV head)); when it fills, its
 * oldest group of kv_quant_group slots is quantized into the block (the
 * key group's per-channel scales are fixed from then on) and the residual
 * shifts down.
 *
 * Compression statistics.  What pruning ranks by (score: attention
 * received, seen: the (query, head) pairs that could see the slot) is
 * needed only for slots that have not passed through compression yet:
 * slots [comp_hi, n_tokens), the recent tail plus what entered since the
 * last pass.  It lives in a per-sequence buffer seq->stats (K25_MEM_KV,
 * [slot - comp_hi]([layer][kv_head] score, seen) fp32: a slot there has
 * never been merged and every layer of a step scores the same queries, so
 * one seen serves every layer and head), not in the blocks,
 * so a compressed block carries one byte per slot (the count) and decode
 * reads no statistics.  A whole-sequence tier move moves it with the
 * residual.
 *
 * Freed blocks go to a free list and are reused; the pool can be capped
 * (memory budget) and then admits requests by reservation.
 */
#ifndef K25_KVCACHE_H
#define K25_KVCACHE_H

#include "backend.h"

struct k25_kv_pool {
    int block_size, n_layers, n_kv_heads, head_dim;
    enum k25_dtype dtype;
    bool quant;          /* int8/int4 */
    int bits;            /* 8 or 4 when quant */
    int group, vgroup;   /* key group (slots), value group (channels) */
    int residual;        /* kv_quant_residual */
    int res_cap;         /* residual rows: residual + group */
    float *res_tmp;      /* [2][group][head_dim]: a closing group as floats (malloc'd on first use) */
    bool compress;       /* slot metadata kept (compression active) */
    size_t elem_bytes;   /* 4 (fp32) or 2 (fp16); 0 when quant */
    size_t row_bytes;    /* one stored row of head_dim values */
    size_t head_bytes;   /* K (or V) data of one (layer, KV head): block_size rows */
    size_t half_bytes;   /* K (or V) of one layer: n_kv_heads * head_bytes */
    size_t ks_head_bytes, vs_head_bytes, meta_head_bytes; /* per (layer, KV head) */
    size_t ks_off, vs_off, meta_off; /* from the layer's start */
    size_t layer_bytes;  /* everything of one layer in a block */
    size_t block_bytes;  /* n_layers * layer_bytes */
    int64_t max_blocks;  /* 0 = no cap */
    int64_t reserved;    /* blocks promised to admitted requests */
    struct k25_bctx *be; /* the backend holding the blocks (NULL: layout only) */
    struct k25_buf **blocks; /* [n_alloc] the backend's buffers (K25_MEM_KV) */
    int64_t n_alloc, cap;
    int32_t *free_ids;   /* stack of free block ids */
    int64_t n_free;
    int64_t in_use, peak_in_use; /* blocks with refs > 0 */
    int32_t *refs;       /* [cap] block tables holding each block (prefix caching shares blocks; 0: free or cached idle) */
    struct k25_prefix *px; /* the prefix cache (prefix.c), NULL when enable_prefix_caching is off (owned) */
    /* KV tiers (kvtier.c).  A block streamed through a step has blocks[id] == NULL and its layer
     * stream_l[id] in the host area stream[id] (kvtier.c owns both arrays, [cap]; NULL with tiers off).
     * Whole-block buffers that left an id wait in spare for the next id that needs one, so tier
     * moves do not allocate, zero and free a block buffer per step. */
    unsigned char **stream; /* [cap] one layer of a streamed block, or NULL */
    int16_t *stream_l;      /* [cap] the layer stream[id] holds */
    struct k25_buf **spare; /* [n_spare] block buffers without an id (K25_MEM_KV, owned) */
    int n_spare, spare_cap, spare_keep; /* spare_keep: the most kept; more are freed */
    int spare_taken;        /* buffers taken since the last trim */
};

/* The blocks of one sequence. */
struct k25_kv_seq {
    int32_t *ids;       /* [n_blocks] block table (malloc'd) */
    int n_blocks, cap;
    int n_tokens;       /* slots */
    int n_pos;          /* positions (tokens written) */
    int comp_hi;        /* slots [0, comp_hi) already passed through compression: they get no more scores */
    int score_window;   /* queries of a step that score its slots (the last ones; 0 = all; forward.c) */
    struct k25_buf *stats; /* compression: [stat_cap]([n_layers][n_kv_heads] score, seen) fp32 for slots
                            * comp_hi.. (see above), a backend buffer (K25_MEM_KV); NULL before first use */
    int stat_cap;          /* slots stats holds */
    int *n_quant;       /* [n_layers] slots quantized into blocks (int8/int4; malloc'd) */
    struct k25_buf *res; /* [n_layers][K|V][n_kv_heads][res_cap][head_dim] fp16, a backend buffer (K25_MEM_KV) */
    /* compression totals over every (layer, KV head) */
    int64_t pruned_slots, merged_slots;
    /* KV tiers (kvtier.c; all 0 / unused with tiers off, where forward.c counts every read a hit).
     * A block of a sequence whose bytes sit in the warm or cold tier has pool->blocks[id] == NULL
     * between steps; k25_kv_tier_acquire makes it hot, or streams it (pool->stream), for a step. */
    int64_t tier_reads, tier_hits; /* block reads by steps; those served without waiting */
    int64_t tier_bytes;            /* bytes this sequence's blocks moved between tiers */
    uint64_t tier_wait_ns;         /* time its steps waited for cold blocks */
    int tier_dirty_from;           /* first slot written since the blocks were last released */
    int tier_qdirty_lo, tier_qdirty_hi; /* int8/int4: slots [lo, hi) quantization may write below
                                         * tier_dirty_from since then (empty when lo >= hi) */
    int tier_access;               /* the last step's slowest tier read: 0 hot, 1 warm, 2 cold */
    int32_t tier_access_id;        /* a block read from that tier (the newest block when hot) */
    bool tier_step_hit;            /* the last step read every block without waiting */
    /* KV tiers, hotness policy (issue 36, kvtier.c) */
    const struct k25_kv_spans *tier_spans; /* the request's spans (its slot owns them), NULL: fixed */
    float *tier_mass;              /* [tier_mass_cap] attention mass each block got this step (malloc'd) */
    int tier_mass_cap;
    bool score_all;                /* the layer being computed scores every slot, not from comp_hi */
};

/*
 * Sets up a pool for shape s with cfg's block size, dtype, quantization
 * group and residual; slot metadata when k25_kv_compress_active(cfg).
 * Blocks and residuals are buffers of backend be (NULL: the layout
 * figures only, no block may be taken).  K25_EINVAL when the group does
 * not fit the shape (value groups must divide head_dim; int4 needs even
 * head_dim and groups).
 */
int k25_kv_pool_init(struct k25_kv_pool *p, const struct k25_model_shape *s, const struct k25_config *cfg,
                     int64_t max_blocks, struct k25_bctx *be, struct k25_error *err);
void k25_kv_pool_free(struct k25_kv_pool *p);

/*
 * Compression scoring window: in a step, only the last K25_KV_SCORE_WINDOW
 * queries of a sequence's chunk score its slots (SnapKV's observation
 * window), so scoring a prefill chunk costs a window's worth of Q K^T over
 * the slots not yet compressed, not a second pass over the chunk; decode
 * steps (one query) always score.
 */
#define K25_KV_SCORE_WINDOW 64

/* Blocks needed to hold n slots. */
static inline int64_t k25_kv_blocks_for(const struct k25_kv_pool *p, int64_t n)
{
    return (n + p->block_size - 1) / p->block_size;
}


/* Floats per slot in seq->stats: a score per (layer, KV head), then the slot's seen. */
static inline size_t k25_kv_stat_floats(const struct k25_kv_pool *p)
{
    return (size_t)p->n_layers * p->n_kv_heads + 1;
}

/* seq->stats as host floats: the backend's own address inside a backend, else the buffer's host
 * address (k25_buf_host; the statistics of a backend without host buffers are not readable here:
 * NULL, which the callers check through k25_kv_stats_host). */
static inline float *k25_kv_stats_base(const struct k25_kv_pool *p, const struct k25_kv_seq *seq)
{
#ifdef K25_BACKEND_IMPL
    (void)p;
    return (float *)seq->stats->data;
#else
    return (float *)k25_buf_host(p->be, seq->stats);
#endif
}
/* Whether seq's statistics can be read on the host (k25_kv_slot_score, _seen). */
static inline bool k25_kv_stats_host(const struct k25_kv_pool *p, const struct k25_kv_seq *seq)
{
    return seq->stats && k25_kv_stats_base(p, seq);
}

/* The score of (layer l, KV head g, slot s): comp_hi <= s < n_tokens. */
static inline float *k25_kv_slot_score(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int l, int g,
                                       int s)
{
    K25_ASSERT(s >= seq->comp_hi && s - seq->comp_hi < seq->stat_cap);
    return k25_kv_stats_base(p, seq) + (size_t)(s - seq->comp_hi) * k25_kv_stat_floats(p) +
           (size_t)l * p->n_kv_heads + g;
}

/* The seen of slot s (comp_hi <= s < n_tokens): one figure for every layer
 * and KV head, as every layer of a step scores the same queries and a slot
 * in the statistics has never been merged. */
static inline float *k25_kv_slot_seen(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int s)
{
    K25_ASSERT(s >= seq->comp_hi && s - seq->comp_hi < seq->stat_cap);
    return k25_kv_stats_base(p, seq) + (size_t)(s - seq->comp_hi + 1) * k25_kv_stat_floats(p) - 1;
}


/*
 * Makes room for n more tokens in seq (allocating blocks, and the residual
 * on first use), then writes their keys and values for one layer: k/v are
 * [n][n_kv_heads*head_dim] with row stride `stride`, written at slots
 * slot0.. (slot0 + n <= n_tokens; writes of one layer are sequential).
 * k25_kv_seq_reserve allocates; k25_kv_seq_write only copies (and
 * quantizes a residual group when one fills) and, with compression, starts
 * the written slots' metadata (one token each; reserve zeroed their
 * statistics).
 */
int k25_kv_seq_reserve(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n, struct k25_error *err);
/* A whole-block buffer for an id without one: a spare one, else a new one (K25_MEM_KV).
 * K25_ENOMEM when the backend cannot allocate. */
int k25_kv_buf_take(struct k25_kv_pool *p, struct k25_buf **out, struct k25_error *err);
/* Gives a block buffer back: kept as a spare (up to spare_keep) or freed. */
void k25_kv_buf_give(struct k25_kv_pool *p, struct k25_buf *b);
/* Between steps: frees the spares beyond what the last step took (at least `min`), so a prefill's
 * turnover is not held through decode. */
void k25_kv_spare_trim(struct k25_kv_pool *p, int min);
/* Drops seq's reference to each of its blocks; a block no sequence holds goes
 * to the free list (calling on_free with its id) or, when the prefix cache
 * holds it, stays cached (prefix.h). */
void k25_kv_seq_release(struct k25_kv_pool *p, struct k25_kv_seq *seq,
                        void (*on_free)(int32_t id, void *user), void *user);



/* Sets n_tokens to n (<= n_tokens) and returns blocks past it to the pool. */
void k25_kv_seq_truncate(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n);


/* Compression settings of one call (from the config). */
struct k25_kv_compress_opts {
    double ratio;            /* kv_compression_ratio */
    double merge_threshold;  /* kv_merge_threshold */
    int sink, recent;        /* kv_sink_tokens, kv_recent_tokens */
    int slack;               /* compress only when the excess reaches this many slots */
};


/* The options of the compression call after a step of seq (prefill chunk or decode token). */
void k25_kv_compress_opts_for(const struct k25_config *cfg, const struct k25_kv_pool *p, bool prefill,
                               struct k25_kv_compress_opts *o);

/*
 * The most slots a sequence of n_prompt prompt tokens and n_total positions
 * in all holds at once under cfg: with compression, the kept slots before
 * the last prefill chunk plus that chunk (compression runs after the
 * step), or the kept slots at the end plus the decode slack; n_total
 * without compression.  Admission (engine.c) reserves, and `k25 mem`
 * (memcalc.c) counts, this many slots' blocks.
 */
int64_t k25_kv_peak_slots(const struct k25_config *cfg, int64_t n_prompt, int64_t n_total);

/* Kept slots for n positions (the arithmetic of k25_kv_kept_tokens). */
int64_t k25_kv_kept_for(double ratio, int sink, int recent, int64_t n);

#endif
