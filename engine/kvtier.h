/*
 * kvtier.h - KV tiers: hot / warm / cold residency of the paged cache's
 * blocks, with a prefetch thread (engine-internal; docs/engine.md "KV tiers").
 *
 *   hot   the block's backend buffer (pool->blocks[id]): what attention
 *         reads.  The blocks holding a sequence's first kv_hot_tokens
 *         tokens and its newest (write-target) block stay hot; the rest
 *         are hot only while a step that reads them runs.
 *   warm  a host-memory pool of kv_warm_budget_mb (K25_MEM_KV), one slot
 *         per block; part of it is reserved as prefetch staging slots.
 *   cold  one unlinked file in kv_cold_dir, block id at id * block_bytes,
 *         written with pwrite by the engine thread and read with pread by
 *         the prefetch thread (or by the engine thread on a miss).
 *
 * Every copy between hot and the host tiers is the backend's
 * kv_block_get / kv_block_set (whole blocks), so a GPU backend maps hot to
 * device memory and warm/cold to pinned host memory / disk without this
 * file changing.  The int8/int4 residual and the compression statistics
 * are per-sequence buffers and stay resident.
 *
 * Per step: k25_kv_tier_acquire makes a sequence's blocks hot before its
 * attention (forward.c); after the step (and after compression)
 * k25_kv_tier_release demotes the non-hot ones (clean blocks just drop
 * their hot copy; dirty ones are copied out), and k25_kv_tier_prefetch
 * queues the cold blocks the sequence's next decode step reads.  A block
 * read that had to wait (a cold block not yet staged) is a miss; the wait
 * is timed.
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
    uint64_t max_step_wait_ns; /* the longest wait of one sequence in one step */
    int64_t bytes_moved;       /* bytes copied between tiers (any direction) */
    uint64_t copy_ns;          /* time spent in tier copies (kv_block_get/set, pread, pwrite) */
    int64_t evictions;         /* blocks moved down a tier */
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

/* Makes every block of seq hot (backend memory) for a step writing from slot
 * `first_written` on; counts the reads, hits, misses and wait into seq and the totals.
 * K25_ENOMEM / K25_EIO on failure (the step fails). */
int k25_kv_tier_acquire(struct k25_kv_tier *t, struct k25_kv_seq *seq, int first_written, struct k25_error *err);
/* After the step: demotes seq's blocks that need not stay hot (MEMORY_PRESSURE).
 * Slots from seq->tier_dirty_from on were written since acquire. */
int k25_kv_tier_release(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err);
/* Queues seq's cold blocks (in block order) on the prefetch thread's free staging slots. */
void k25_kv_tier_prefetch(struct k25_kv_tier *t, const struct k25_kv_seq *seq);
/* End of a step: warm blocks unread for K25_KV_STALE_STEPS steps go cold (STALE_ACCESS_PATTERN). */
int k25_kv_tier_end_step(struct k25_kv_tier *t, struct k25_error *err);
/* Before k25_kv_seq_release: drops the tier copies of the blocks seq alone holds (their
 * ids go back to the pool without a hot buffer: the pool allocates one when it reuses the
 * id); with prefix caching on, a block that may stay cached is brought back hot first. */
int k25_kv_tier_forget(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err);

void k25_kv_tier_totals(const struct k25_kv_tier *t, struct k25_kv_tier_totals *out);

/* TEST-ONLY: false turns the prefetch thread's work off (every cold read is a miss). */
void k25_kv_tier_set_prefetch(struct k25_kv_tier *t, bool on);

/* Steps a warm block may go unread before it moves cold. */
#define K25_KV_STALE_STEPS 64

#endif
