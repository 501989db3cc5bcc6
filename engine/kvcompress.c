/*
 * kvcompress.c - KV compression under one knob, kv_compression_ratio r:
 * position-aware pruning and similarity merging of a sequence's slots.
 *
 * A sequence of n positions keeps k25_kv_kept_for(r, sink, recent, n)
 * slots per layer and KV head: about r n, never fewer than the protected
 * sink + recent tokens.  Each call works on the region of slots that
 * entered the compressible middle since the last call, [lo, hi) with
 * lo = max(comp_hi, sink) and hi = n_tokens - recent (the first sink
 * tokens and the last recent tokens are never touched), and removes the
 * excess D = n_tokens - kept from it, in every (layer, KV head):
 *
 *  1. Merging: neighbouring slots (adjacent in the region and in the same
 *     block) whose keys have cosine similarity above kv_merge_threshold
 *     are candidates; the most similar non-overlapping pairs merge first,
 *     at most D of them.  A merged slot is the count-weighted mean of both
 *     keys and of both values, stands for c = c_a + c_b tokens and carries
 *     ln c, which the attention kernels add to its logit: c identical keys
 *     merged into one give exactly the attention they had.
 *  2. Pruning: the remaining D - merges slots with the lowest mean
 *     attention received (score / seen: the softmax probability the slot
 *     got from the queries that could see it, summed over the KV head's
 *     query heads, during prefill chunks and decode steps) are dropped;
 *     ties drop the older slot.
 *
 * RoPE policy: keys are stored after RoPE at their original positions and
 * keep them: a kept slot keeps its rotation, a merged slot is the mean of
 * its members' rotated keys.  Later queries get their own positions
 * (positions keep counting tokens, not slots).
 *
 * Every (layer, KV head) removes the same D slots, so all keep the same
 * slot count and the block table stays shared.  The slots from the start
 * of the region's quantization group to the end are re-read (dequantized)
 * and rewritten, so int8/int4 groups that straddle the region are
 * re-quantized once.  If the region is smaller than D (only when r was
 * lowered mid-sequence) the pass removes what the region holds: slots
 * below comp_hi keep no statistics (kvcache.h) and are not revisited.
 * Merged counts stop at 255 (one byte per slot in the block).
 *
 * This file is the policy (when compression is active, the kept count, a
 * call's options); the mechanism above, in the blocks' bytes, is the CPU
 * backend's kv_compact op (engine/cpu/kvcompact.c).
 */
#include "kvcache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ policy */

bool k25_kv_compress_active(const struct k25_config *cfg)
{
    /* only implementations that read slot metadata (merged slots' ln count) run on a compressed
     * cache; one-pass prefill is the exact reference */
    return cfg->kv_compression_ratio < 1.0 && cfg->attention >= 0 && cfg->attention < K25_ATTN_NIMPL &&
           k25_attn_impl_get(cfg->attention)->compression &&
           !cfg->disable_prefill_optimization;
}

int64_t k25_kv_kept_tokens(const struct k25_config *cfg, int64_t n)
{
    if (!k25_kv_compress_active(cfg))
        return n;
    return k25_kv_kept_for(cfg->kv_compression_ratio, cfg->kv_sink_tokens, cfg->kv_recent_tokens, n);
}

void k25_kv_compress_opts_for(const struct k25_config *cfg, const struct k25_kv_pool *p, bool prefill,
                               struct k25_kv_compress_opts *o)
{
    *o = (struct k25_kv_compress_opts){cfg->kv_compression_ratio, cfg->kv_merge_threshold, cfg->kv_sink_tokens,
                                       cfg->kv_recent_tokens, 0};
    /* prefill chunks: to the kept count exactly; decode: once the excess reaches a quantization
     * group (32 slots for fp32/fp16), so the work per call stays proportional to the tokens that
     * entered the region since the last one */
    o->slack = prefill ? 0 : (p->quant ? p->group : 32);
}

int64_t k25_kv_peak_slots(const struct k25_config *cfg, int64_t n_prompt, int64_t n_total)
{
    if (!k25_kv_compress_active(cfg))
        return n_total;
    n_prompt = n_prompt < n_total ? n_prompt : n_total;
    /* prefill: a chunk ending at e holds kept(e - len) + len slots, at most
     * kept(n_prompt - ch) + ch (kept grows by at most one slot a position) */
    int64_t ch = cfg->prefill_chunk_size < n_prompt ? cfg->prefill_chunk_size : n_prompt;
    int64_t pre = k25_kv_kept_tokens(cfg, n_prompt - ch) + ch;
    /* decode: compressed once the excess reaches the slack (k25_kv_compress_opts_for) */
    bool quant = cfg->kv_cache_dtype == K25_DTYPE_INT8 || cfg->kv_cache_dtype == K25_DTYPE_INT4;
    int64_t dec = k25_kv_kept_tokens(cfg, n_total) + (quant ? cfg->kv_quant_group : 32);
    int64_t peak = pre > dec ? pre : dec;
    return peak < n_total ? peak : n_total;
}

int64_t k25_kv_kept_for(double ratio, int sink, int recent, int64_t n)
{
    if (ratio >= 1.0)
        return n;
    int64_t keep = (int64_t)llround(ratio * (double)n);
    int64_t prot = (int64_t)sink + recent;
    if (prot > n)
        prot = n;
    return keep > prot ? keep : prot;
}
