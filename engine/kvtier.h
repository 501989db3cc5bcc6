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

#endif
