/*
 * kvcompact.c - the CPU backend's KV compaction (the mechanism of
 * engine/kvcompress.c's rules): merges neighbouring similar keys, then
 * prunes the lowest-scored slots of a sequence's compressible region, in
 * the blocks' host memory.  The policy (when compression is active, the
 * kept count, the options of a call) stays in engine/kvcompress.c.
 */
#include "kvstore.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
