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

struct pair {
    float sim;
    int j; /* merges region slots j and j+1 */
};

static int pair_cmp(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    if (x->sim != y->sim)
        return x->sim > y->sim ? -1 : 1;
    return x->j - y->j;
}

struct cand {
    float mean;
    int j;
};

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->mean != y->mean)
        return x->mean < y->mean ? -1 : 1;
    return x->j - y->j;
}

/*
 * Edits one (layer, KV head): K, V [n][hd] and meta [n] hold slots
 * [a0, a0+n); the region is [r0, r1) in these arrays.  Removes D slots of
 * the region, compacting the arrays in place.  Returns merges done.
 */
static int edit_head(float *K, float *V, struct k25_kv_slot *meta, int n, int hd, int r0, int r1, int D,
                     int bs, int a0, double thr, struct pair *pairs, struct cand *cands, unsigned char *gone)
{
    const int M = r1 - r0;
    int np = 0, merges = 0;
    memset(gone, 0, (size_t)n);
    for (int j = r0; j + 1 < r1; j++) {
        if ((a0 + j) / bs != (a0 + j + 1) / bs)
            continue; /* neighbours in the same block only */
        const float *x = K + (size_t)j * hd, *y = x + hd;
        double xy = 0, xx = 0, yy = 0;
        for (int d = 0; d < hd; d++) {
            xy += (double)x[d] * y[d];
            xx += (double)x[d] * x[d];
            yy += (double)y[d] * y[d];
        }
        double c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : (xx == 0 && yy == 0 ? 1.0 : 0.0);
        if (c > thr)
            pairs[np++] = (struct pair){(float)c, j};
    }
    qsort(pairs, (size_t)np, sizeof(*pairs), pair_cmp);
    /* gone[j]: 0 kept, 1 merged into j+1, 2 pruned, 3 a prototype made in this call */
    for (int i = 0; i < np && merges < D; i++) {
        int j = pairs[i].j;
        if (gone[j] || gone[j + 1] || meta[j].count + meta[j + 1].count > 255.0f)
            continue; /* counts are one byte in the block */
        struct k25_kv_slot *a = &meta[j], *b = &meta[j + 1];
        float ca = a->count, cb = b->count, c = ca + cb;
        float *ka = K + (size_t)j * hd, *kb = ka + hd, *va = V + (size_t)j * hd, *vb = va + hd;
        for (int d = 0; d < hd; d++) {
            kb[d] = (ca * ka[d] + cb * kb[d]) / c;
            vb[d] = (ca * va[d] + cb * vb[d]) / c;
        }
        /* the prototype takes the later slot (the later position) */
        b->count = c;
        b->logc = logf(c);
        b->score += a->score;
        b->seen = a->seen > b->seen ? a->seen : b->seen;
        gone[j] = 1;
        gone[j + 1] = 3;
        merges++;
    }
    int prune = D - merges, nc = 0;
    for (int j = r0; j < r1; j++)
        if (gone[j] != 1)
            cands[nc++] = (struct cand){meta[j].seen > 0 ? meta[j].score / meta[j].seen : 0.0f, j};
    K25_ASSERT(nc >= prune && M >= D);
    qsort(cands, (size_t)nc, sizeof(*cands), cand_cmp);
    for (int i = 0; i < prune; i++)
        gone[cands[i].j] = 2;
    int w = 0;
    for (int j = 0; j < n; j++) {
        if (gone[j] == 1 || gone[j] == 2)
            continue;
        if (w != j) {
            memcpy(K + (size_t)w * hd, K + (size_t)j * hd, sizeof(float) * hd);
            memcpy(V + (size_t)w * hd, V + (size_t)j * hd, sizeof(float) * hd);
            meta[w] = meta[j];
        }
        w++;
    }
    K25_ASSERT(w == n - D);
    return merges;
}

int k25_kv_seq_compress(struct k25_kv_pool *p, struct k25_kv_seq *seq, const struct k25_kv_compress_opts *o,
                        int *removed, struct k25_error *err)
{
    *removed = 0;
    if (!p->compress || o->ratio >= 1.0)
        return K25_OK;
    const int n = seq->n_tokens, hd = p->head_dim, nkv = p->n_kv_heads;
    int64_t kept = k25_kv_kept_for(o->ratio, o->sink, o->recent, seq->n_pos);
    int D = (int)(n - kept);
    if (D <= 0 || D < o->slack)
        return K25_OK;
    int hi = n - o->recent, lo = seq->comp_hi > o->sink ? seq->comp_hi : o->sink;
    if (hi - lo < D) /* only when r was lowered: slots below comp_hi keep no statistics, so the rest waits */
        D = hi - lo;
    if (D <= 0)
        return K25_OK;
    int a0 = lo;
    if (p->quant) {
        a0 = lo / p->group * p->group;
        for (int l = 0; l < p->n_layers; l++)
            if (seq->n_quant[l] < a0)
                a0 = seq->n_quant[l];
    }
    const int na = n - a0;
    float *K = malloc(sizeof(float) * (size_t)nkv * na * hd), *V = malloc(sizeof(float) * (size_t)nkv * na * hd);
    struct k25_kv_slot *meta = malloc(sizeof(*meta) * (size_t)na);
    struct pair *pairs = malloc(sizeof(*pairs) * (size_t)na);
    struct cand *cands = malloc(sizeof(*cands) * (size_t)na);
    unsigned char *gone = malloc((size_t)na);
    /* the statistics of the slots that stay uncompressed, [hi - D, n - D) after the pass */
    const size_t per = k25_kv_stat_floats(p);
    float *st = malloc(sizeof(float) * per * (size_t)(n - hi > 0 ? n - hi : 1));
    int rc = K25_OK;
    if (!K || !V || !meta || !pairs || !cands || !gone || !st) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV compression)");
        goto out_free;
    }
    for (int l = 0; l < p->n_layers; l++) {
        for (int g = 0; g < nkv; g++) {
            float *Kg = K + (size_t)g * (n - D - a0) * hd, *Vg = V + (size_t)g * (n - D - a0) * hd;
            float *Kr = malloc(sizeof(float) * (size_t)na * hd), *Vr = malloc(sizeof(float) * (size_t)na * hd);
            if (!Kr || !Vr) {
                free(Kr);
                free(Vr);
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV compression)");
                goto out_free;
            }
            k25_kv_seq_read(p, seq, l, g, a0, na, Kr, Vr);
            for (int s = 0; s < na; s++)
                k25_kv_seq_slot(p, seq, l, g, a0 + s, &meta[s]);
            int m = edit_head(Kr, Vr, meta, na, hd, lo - a0, hi - a0, D, p->block_size, a0, o->merge_threshold,
                              pairs, cands, gone);
            seq->merged_slots += m;
            seq->pruned_slots += D - m;
            memcpy(Kg, Kr, sizeof(float) * (size_t)(na - D) * hd);
            memcpy(Vg, Vr, sizeof(float) * (size_t)(na - D) * hd);
            free(Kr);
            free(Vr);
            for (int s = 0; s < na - D; s++)
                *k25_kv_slot_count(p, seq, l, g, a0 + s) = (uint8_t)meta[s].count;
            for (int s = hi - D; s < n - D; s++) { /* recent slots: never merged, one seen for all heads */
                float *d = st + (size_t)(s - (hi - D)) * per;
                d[(size_t)l * nkv + g] = meta[s - a0].score;
                d[per - 1] = meta[s - a0].seen;
            }
        }
        k25_kv_seq_rewind(p, seq, l, a0);
        int save = seq->n_tokens;
        seq->n_tokens = n - D; /* writes check against the new end */
        k25_kv_seq_write_heads(p, seq, l, a0, na - D, K, V);
        seq->n_tokens = l + 1 < p->n_layers ? save : n - D;
    }
    k25_kv_seq_truncate(p, seq, n - D);
    seq->comp_hi = hi - D; /* the statistics now start there */
    memcpy(seq->stats->data, st, sizeof(float) * per * (size_t)(n - hi));
    *removed = D;
out_free:
    free(st);
    free(K);
    free(V);
    free(meta);
    free(pairs);
    free(cands);
    free(gone);
    return rc;
}
