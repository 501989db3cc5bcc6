/*
 * kvtier.h - KV tiers: hot / warm / cold residency of the paged cache's
 * blocks, with a prefetch thread (engine-internal; docs/engine.md "KV tiers").
 *
 *   hot   the block's backend buffer (pool->blocks[id]).  The blocks holding
 *         a sequence's first kv_hot_tokens tokens and its newest
 *         (write-target) block stay hot; the rest are hot in a step only
 *         when the step may write them.
 *   warm  a host-memory pool of kv_warm_budget_mb (K25_MEM_KV), one slot
 *         per block; its tail is the prefetch staging area (in units of
 *         one layer of one block) when there is a cold tier: 2 blocks,
 *         grown between steps to what the steps stream (kvtier.c).
 *   cold  one unlinked file in kv_cold_dir, block id at id * block_bytes,
 *         written with pwrite by the engine thread and read with pread by
 *         the prefetch thread (or by the engine thread on a miss).
 *
 * Copies into a whole-hot block are the backend's buf_set (one layer at a
 * time) and copies out its kv_block_get.  A streamed block's layer is read
 * where it lies (its warm slot or staging slot, host memory): that is the
 * CPU backend's path, k25_kv_layer being its host implementation of the KV
 * ops; a GPU backend would buf_set each unit into device memory.  The
 * int8/int4 residual and the compression statistics are per-sequence
 * buffers and stay resident.
 *
 * Per step: k25_kv_tier_acquire prepares a sequence's blocks (forward.c,
 * after its reserve): blocks the step may write become whole-hot, the
 * other warm/cold blocks *stream*: before layer l's KV writes and
 * attention, k25_kv_tier_layer points pool->stream[id] at layer l of each
 * (k25_kv_layer reads it), and the freed
 * staging slots take the next cold units, so layer l+1 loads while layer l
 * computes.  After the step (and after compression) k25_kv_tier_release
 * ends the streaming and demotes whole-hot blocks that need not stay hot
 * (clean ones just give their buffer back; written ones are copied out),
 * and k25_kv_tier_prefetch queues the cold units the sequence's next step
 * reads first.  A block read that had to wait (a cold unit not yet staged)
 * is a miss; the wait is timed.
 *
 * kv_tier_policy hotness (issue 36): blocks are ranked by the attention they
 * received (decayed per step, per span: kvspan.c), and the warm pool keeps the
 * best-ranked spans; cold -> warm promotions go through the prefetch thread,
 * with hysteresis (kvtier.c, docs/engine.md "Hotness policy and spans").
 */
#ifndef K25_KVTIER_H
#define K25_KVTIER_H

#include "kvcache.h"
#include "log.h"

struct k25_kv_tier;

/* Run totals of the tiers (the per-request ones are in struct k25_kv_seq). */
struct k25_kv_tier_totals {
    int64_t reads, hits;       /* block reads by steps; those served without waiting */
    uint64_t wait_ns;          /* time steps waited for cold blocks */
    uint64_t max_step_wait_ns; /* the longest wait of one step (all its sequences) */
    int64_t bytes_moved;       /* bytes copied between tiers: cold units read, warm units copied into
                                * whole-hot blocks, blocks copied out (a streamed warm unit is read
                                * where it lies: nothing moves) */
    uint64_t copy_ns;          /* time spent in tier copies (buf_set, kv_block_get, pread, pwrite) */
    int64_t evictions;         /* blocks moved down a tier */
    int64_t promotions;        /* hotness: cold blocks read into the warm pool by the prefetch thread */
    int64_t demotions;         /* hotness: warm blocks sent cold for a hotter span (STALE_ACCESS_PATTERN) */
    int staging_blocks, warm_blocks; /* the warm budget's split now: prefetch staging, warm slots */
};

/*
 * Creates the tiers of pool for cfg (kv_hot_tokens > 0), charging the warm
 * pool to the pool backend's accounting; *out = NULL when tiers are off.
 * The cold file (when kv_cold_dir is set) is created and unlinked at once.
 * K25_EINVAL when the warm budget holds fewer than 2 blocks with a cold
 * dir set (the prefetch staging slots); K25_EIO when the file cannot be made;
 * K25_ENOMEM.
 */
int k25_kv_tier_create(struct k25_kv_pool *pool, const struct k25_config *cfg, struct k25_log *log,
                       struct k25_kv_tier **out, struct k25_error *err);
void k25_kv_tier_destroy(struct k25_kv_tier *t);

/* Prepares seq's blocks for a step writing from slot `first_written` on (whole-hot or
 * streamed, see above); counts the reads, hits, misses and wait into seq and the totals.
 * K25_ENOMEM / K25_EIO on failure (the step fails). */
int k25_kv_tier_acquire(struct k25_kv_tier *t, struct k25_kv_seq *seq, int first_written, struct k25_error *err);
/* Before layer `layer`'s KV writes and attention: seq's streamed blocks get that layer in their
 * stream areas.  K25_EIO when the cold file cannot be read (the step fails). */
int k25_kv_tier_layer(struct k25_kv_tier *t, struct k25_kv_seq *seq, int layer, struct k25_error *err);
/* After the step: demotes seq's blocks that need not stay hot (MEMORY_PRESSURE).
 * Slots from seq->tier_dirty_from on were written since acquire. */
int k25_kv_tier_release(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err);
/* Queues seq's cold units (layer-major from layer 0, blocks in order) on the prefetch thread's free staging slots. */
void k25_kv_tier_prefetch(struct k25_kv_tier *t, const struct k25_kv_seq *seq);
/* End of a step: warm blocks unread for K25_KV_STALE_STEPS steps go cold (STALE_ACCESS_PATTERN). */
int k25_kv_tier_end_step(struct k25_kv_tier *t, struct k25_error *err);
/* Before k25_kv_seq_release: drops the tier copies of the blocks seq alone holds (their
 * ids go back to the pool without a hot buffer: the pool gives one from its spares when it
 * reuses the id); with prefix caching on, a block that may stay cached is brought back hot first. */
int k25_kv_tier_forget(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err);

void k25_kv_tier_totals(const struct k25_kv_tier *t, struct k25_kv_tier_totals *out);

/* Blocks one sequence holds hot at most under cfg's tiers: the first kv_hot_tokens' blocks, a
 * prefill chunk's new blocks, the newest block and one a closing int8/int4 group writes. */
int64_t k25_kv_tier_hot_blocks(const struct k25_config *cfg);
/*
 * Admission with tiers (engine.c, with memory_budget_mb): *max_blocks is what
 * the RAM left for KV holds.  With tiers that RAM holds the warm pool, the
 * hot blocks and the copy buffer; other blocks' bytes are warm or cold, so
 * block ids are not RAM: with a cold tier *max_blocks becomes 0 (no cap - a
 * request whose KV exceeds the RAM pool is admitted and runs through the
 * cold file), without one the RAM's blocks less the copy buffer.
 * K25_ERANGE (field kv_warm_budget_mb) when that RAM cannot hold the warm
 * pool, one sequence's hot blocks and the copy buffer.  Tiers off: unchanged.
 */
int k25_kv_tier_block_cap(const struct k25_config *cfg, size_t block_bytes, int64_t *max_blocks,
                          struct k25_error *err);

/* TEST-ONLY: false turns the prefetch thread's work off (every cold read is a miss). */
void k25_kv_tier_set_prefetch(struct k25_kv_tier *t, bool on);

/* Steps a warm block may go unread before it moves cold. */
#define K25_KV_STALE_STEPS 64

/* ------------------------------------------------ spans (kvspan.c, issue 36) */

/* How a sequence is cut into spans: runs of whole blocks that the hotness policy scores and
 * moves as one unit (the physical block stays kv_block_size tokens). */
struct k25_kv_spans {
    enum k25_hint mode;  /* legal_doc or plain_text: the mode used (auto resolved) */
    bool decided;        /* auto chose mode */
    double density;      /* section starts per 1000 prompt tokens */
    int n_sections;      /* section starts supplied */
    int32_t *first;      /* [n] first block of each span over the prompt, ascending, first[0] = 0 (malloc'd) */
    int n;
    int doc_blocks;      /* blocks of the prompt; spans past it are fixed_blocks long */
    int fixed_blocks;    /* plain_text span length in blocks */
};
#define K25_KV_SPAN_PLAIN_TOKENS 1024     /* plain_text: fixed spans of this many tokens */
#define K25_KV_SPAN_LEGAL_MAX_TOKENS 4096 /* legal_doc: a longer section is cut in pieces */
#define K25_KV_SPAN_AUTO_MIN_SECTIONS 3   /* auto: legal_doc needs this many section starts ... */
#define K25_KV_SPAN_AUTO_MIN_DENSITY 0.05 /* ... and between these many per 1000 tokens */
#define K25_KV_SPAN_AUTO_MAX_DENSITY 4.0

/* Cuts spans for a prompt of n_tokens with section starts[n_starts] (token positions, strictly
 * ascending, < n_tokens) under hint (auto decides; kvspan.c).  K25_EINVAL naming section_starts
 * for bad starts; K25_ENOMEM.  *out is the caller's (k25_kv_spans_free). */
int k25_kv_spans_cut(enum k25_hint hint, const int32_t *starts, int n_starts, int n_tokens, int block_size,
                     struct k25_kv_spans *out, struct k25_error *err);
void k25_kv_spans_free(struct k25_kv_spans *s);
/* The span holding block `block`, and the blocks [*b0, *b1) of a span. */
int k25_kv_span_of(const struct k25_kv_spans *s, int block);
void k25_kv_span_range(const struct k25_kv_spans *s, int span, int *b0, int *b1);

/* --------------------------------------------------- hotness (issue 36) */

#define K25_KV_HEAT_DECAY 0.9f  /* per step of the sequence: heat = 0.9 heat + mass (half-life 6.6 steps) */
#define K25_KV_HOT_MARGIN 0.5f  /* a cold span displaces warm blocks only when its score > 1.5x theirs */
#define K25_KV_HOT_DWELL 8      /* steps a promoted or demoted block stays where it went */

/* A block's heat after one step in which it received `mass` (a fraction of the step's attention). */
static inline float k25_kv_heat_step(float heat, float mass)
{
    return K25_KV_HEAT_DECAY * heat + mass;
}

/* Hysteresis: whether a cold span of score `cand` may take the warm slot of a block of score
 * `victim` (both mean heats; a protected block's score is +inf). */
static inline bool k25_kv_hot_displaces(float cand, float victim)
{
    return cand > (1.0f + K25_KV_HOT_MARGIN) * victim;
}

/* The layers hotness samples: every stride-th, stride = max(1, n_layers / 4), from stride - 1
 * (tiny, 4 layers: all; small, 8: 1, 3, 5, 7; 32 layers: 7, 15, 23, 31). */
int k25_kv_hot_stride(int n_layers);
/* Whether t runs the hotness policy and samples layer l (forward.c passes scores then). */
bool k25_kv_tier_observes(const struct k25_kv_tier *t, int layer);
/* Adds one sampled layer's attention, score[n_kv][n] (probabilities summed over each KV head's
 * query heads, from n_q queries), to seq's per-block mass of this step, normalized so a step's
 * masses over its blocks sum to about 1. */
int k25_kv_tier_observe(struct k25_kv_tier *t, struct k25_kv_seq *seq, const float *score, int n, int n_q,
                        int n_heads, struct k25_error *err);
/* A host buffer of n floats for a layer's scores (the tier's, reused); NULL when out of memory. */
float *k25_kv_tier_obs_buf(struct k25_kv_tier *t, size_t n);

#endif
