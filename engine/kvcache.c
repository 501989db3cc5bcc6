/*
 * kvcache.c - paged KV cache: a block pool with a free list, block tables
 * per sequence, fp32/fp16 storage, INT8/INT4 storage with an fp32
 * residual window, and the slot bookkeeping compression needs.  See
 * kvcache.h for the layout.
 */
#include "kvcache.h"
#include "kvquant.h"
#include "prefix.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

int k25_kv_pool_init(struct k25_kv_pool *p, const struct k25_model_shape *s, const struct k25_config *cfg,
                     int64_t max_blocks, struct k25_bctx *be, struct k25_error *err)
{
    memset(p, 0, sizeof(*p));
    p->be = be;
    const int bs = cfg->kv_block_size, hd = s->head_dim, nkv = s->n_kv_heads;
    p->block_size = bs;
    p->n_layers = s->n_layers;
    p->n_kv_heads = nkv;
    p->head_dim = hd;
    p->dtype = cfg->kv_cache_dtype;
    p->quant = p->dtype == K25_DTYPE_INT8 || p->dtype == K25_DTYPE_INT4;
    p->compress = k25_kv_compress_active(cfg);
    if (p->quant) {
        p->bits = p->dtype == K25_DTYPE_INT8 ? 8 : 4;
        p->group = cfg->kv_quant_group;
        p->vgroup = cfg->kv_quant_group < hd ? cfg->kv_quant_group : hd;
        p->residual = cfg->kv_quant_residual;
        p->res_cap = p->residual + p->group;
        if (bs % p->group != 0)
            return k25_error_set(err, K25_ERANGE, NULL, 0, "kv_quant_group",
                                 "%d does not divide kv_block_size (%d)", p->group, bs);
        if (hd % p->vgroup != 0 || (p->bits == 4 && (hd % 2 || p->vgroup % 2)))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_quant_group",
                                 "value groups of %d channels do not tile head_dim %d%s", p->vgroup, hd,
                                 p->bits == 4 ? " in whole bytes (int4 needs even groups)" : "");
        p->row_bytes = k25_kvq_row_bytes(hd, p->bits);
        p->ks_head_bytes = (size_t)(bs / p->group) * 2 * hd * sizeof(uint16_t);
        p->vs_head_bytes = (size_t)bs * (hd / p->vgroup) * 2 * sizeof(uint16_t);
    } else {
        p->elem_bytes = p->dtype == K25_DTYPE_FP32 ? 4 : 2;
        p->row_bytes = (size_t)hd * p->elem_bytes;
    }
    p->meta_head_bytes = p->compress ? (size_t)bs : 0; /* one count byte per slot */
    p->head_bytes = (size_t)bs * p->row_bytes;
    p->half_bytes = (size_t)nkv * p->head_bytes;
    p->ks_off = 2 * p->half_bytes;
    p->vs_off = p->ks_off + (size_t)nkv * p->ks_head_bytes;
    p->meta_off = p->vs_off + (size_t)nkv * p->vs_head_bytes;
    p->layer_bytes = p->meta_off + (size_t)nkv * p->meta_head_bytes;
    p->layer_bytes = (p->layer_bytes + 63) / 64 * 64; /* keep every layer 64-byte aligned */
    p->block_bytes = (size_t)s->n_layers * p->layer_bytes;
    p->max_blocks = max_blocks;
    return K25_OK;
}

void k25_kv_pool_free(struct k25_kv_pool *p)
{
    free(p->res_tmp);
    p->res_tmp = NULL;
    for (int64_t i = 0; i < p->n_alloc; i++)
        p->be->be->buf_free(p->be, p->blocks[i]);
    free(p->blocks);
    free(p->free_ids);
    free(p->refs);
    for (int i = 0; i < p->n_spare; i++)
        p->be->be->buf_free(p->be, p->spare[i]);
    free(p->spare);
    k25_prefix_destroy(p);
    memset(p, 0, sizeof(*p));
}

int k25_kv_buf_take(struct k25_kv_pool *p, struct k25_buf **out, struct k25_error *err)
{
    p->spare_taken++;
    if (p->n_spare > 0) {
        *out = p->spare[--p->n_spare];
        return K25_OK;
    }
    if (p->be->be->buf_alloc(p->be, K25_MEM_KV, p->block_bytes, out, NULL) != K25_OK)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (a KV block buffer of %zu bytes)",
                             p->block_bytes);
    return K25_OK;
}

void k25_kv_buf_give(struct k25_kv_pool *p, struct k25_buf *b)
{
    if (p->n_spare < p->spare_keep) {
        if (p->n_spare == p->spare_cap) {
            int ncap = p->spare_cap ? 2 * p->spare_cap : 8;
            struct k25_buf **ns = realloc(p->spare, sizeof(*ns) * (size_t)ncap);
            if (ns) {
                p->spare = ns;
                p->spare_cap = ncap;
            }
        }
        if (p->n_spare < p->spare_cap) {
            p->spare[p->n_spare++] = b;
            return;
        }
    }
    p->be->be->buf_free(p->be, b);
}

void k25_kv_spare_trim(struct k25_kv_pool *p, int min)
{
    int keep = p->spare_taken > min ? p->spare_taken : min;
    while (p->n_spare > keep)
        p->be->be->buf_free(p->be, p->spare[--p->n_spare]);
    p->spare_taken = 0;
}

/* One block id from the free list, or a new block, or (at the budget) a
 * cached block no sequence holds, evicted.  -1 when full.  Its refs is 1. */
static int32_t block_get(struct k25_kv_pool *p)
{
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
        /* freed while in the warm or cold tier (kvtier.c): it gets a hot buffer again */
        if (!p->blocks[id] && k25_kv_buf_take(p, &p->blocks[id], NULL) != K25_OK) {
            p->free_ids[p->n_free++] = id;
            return -1;
        }
    } else if (p->max_blocks > 0 && p->n_alloc >= p->max_blocks) {
        if ((id = k25_prefix_evict(p)) < 0)
            return -1;
    } else {
        if (p->n_alloc == p->cap) {
            int64_t ncap = p->cap ? 2 * p->cap : 64;
            struct k25_buf **nb = realloc(p->blocks, sizeof(*nb) * (size_t)ncap);
            if (!nb)
                return -1;
            p->blocks = nb;
            int32_t *nf = realloc(p->free_ids, sizeof(int32_t) * (size_t)ncap);
            if (!nf)
                return -1;
            p->free_ids = nf;
            int32_t *nr = realloc(p->refs, sizeof(int32_t) * (size_t)ncap);
            if (!nr)
                return -1;
            p->refs = nr;
            p->cap = ncap;
        }
        K25_ASSERT(p->be != NULL); /* a layout-only pool holds no blocks */
        struct k25_buf *b;
        if (p->be->be->buf_alloc(p->be, K25_MEM_KV, p->block_bytes, &b, NULL) != K25_OK)
            return -1;
        id = (int32_t)p->n_alloc;
        p->blocks[p->n_alloc++] = b;
    }
    p->refs[id] = 1;
    if (++p->in_use > p->peak_in_use)
        p->peak_in_use = p->in_use;
    return id;
}

/* Drops one reference to block id; true when the block went to the free
 * list (false: still shared, or kept idle by the prefix cache). */
static bool block_put(struct k25_kv_pool *p, int32_t id)
{
    K25_ASSERT(p->refs[id] > 0);
    if (--p->refs[id] > 0)
        return false;
    p->in_use--;
    if (k25_prefix_cached(p, id)) {
        k25_prefix_park(p, id);
        return false;
    }
    p->free_ids[p->n_free++] = id;
    return true;
}

/* A block about to be written: held by this sequence alone and not in the
 * prefix cache (shared blocks are read-only: prefix.h). */
static inline void assert_writable(const struct k25_kv_pool *p, int32_t id)
{
    K25_ASSERT(p->refs[id] == 1 && !k25_prefix_cached(p, id));
}

/* Residual rows of (layer, K|V, head g). */
static uint16_t *res_rows(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int l, int kv, int g)
{
    return (uint16_t *)seq->res->data + (((size_t)l * 2 + kv) * p->n_kv_heads + g) * p->res_cap * p->head_dim;
}

int k25_kv_seq_reserve(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n, struct k25_error *err)
{
    if (p->quant && !p->res_tmp && /* a closing group's rows as floats, for the quantizers (one writer) */
        !(p->res_tmp = malloc(sizeof(float) * 2 * (size_t)p->group * p->head_dim)))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV residual scratch)");
    if (p->quant && !seq->res) {
        seq->n_quant = calloc((size_t)p->n_layers, sizeof(int));
        size_t rb = sizeof(uint16_t) * (size_t)p->n_layers * 2 * p->n_kv_heads * p->res_cap * p->head_dim;
        if (!seq->n_quant || p->be->be->buf_alloc(p->be, K25_MEM_KV, rb, &seq->res, NULL) != K25_OK) {
            free(seq->n_quant);
            seq->n_quant = NULL;
            seq->res = NULL;
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV residual)");
        }
    }
    if (p->compress && seq->n_tokens + n - seq->comp_hi > seq->stat_cap) { /* statistics of the tail */
        /* sized to the tail in steps of 64 slots, not doubled: a prefill chunk's tail (chunk + recent)
         * is the peak, and doubling would hold up to twice that (counted in the KV bytes) */
        const size_t per = sizeof(float) * k25_kv_stat_floats(p);
        int have = seq->n_tokens - seq->comp_hi, ncap = (have + n + 63) / 64 * 64;
        struct k25_buf *nb;
        if (p->be->be->buf_alloc(p->be, K25_MEM_KV, per * (size_t)ncap, &nb, NULL) != K25_OK)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV compression statistics)");
        if (seq->stats) {
            memcpy(nb->data, seq->stats->data, per * (size_t)have);
            p->be->be->buf_free(p->be, seq->stats);
        }
        seq->stats = nb;
        seq->stat_cap = ncap;
    }
    if (p->compress) /* the new slots start with nothing received */
        memset((float *)seq->stats->data + (size_t)(seq->n_tokens - seq->comp_hi) * k25_kv_stat_floats(p), 0,
               sizeof(float) * k25_kv_stat_floats(p) * n);
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
    seq->n_pos += n;
    return K25_OK;
}

/* Quantizes the oldest residual group of layer l into its block and shifts the residual down. */
static void quantize_group(struct k25_kv_pool *p, struct k25_kv_seq *seq, int l)
{
    const int G = p->group, hd = p->head_dim, bs = p->block_size, s0 = seq->n_quant[l];
    unsigned char *lay = k25_kv_layer(p, seq->ids[s0 / bs], l);
    const int o = s0 % bs;
    assert_writable(p, seq->ids[s0 / bs]);
    float *tk = p->res_tmp, *tv = p->res_tmp + (size_t)G * hd; /* the group's rows as floats */
    for (int g = 0; g < p->n_kv_heads; g++) {
        uint16_t *rk = res_rows(p, seq, l, 0, g), *rv = res_rows(p, seq, l, 1, g);
        k25_fp16_to_fp32_row(rk, tk, (size_t)G * hd);
        k25_fp16_to_fp32_row(rv, tv, (size_t)G * hd);
        uint8_t *kq = lay + (size_t)g * p->head_bytes + (size_t)o * p->row_bytes;
        uint16_t *ksz = (uint16_t *)(lay + p->ks_off + (size_t)g * p->ks_head_bytes) + (size_t)(o / G) * 2 * hd;
        k25_kvq_quant_keys(tk, hd, G, hd, p->bits, kq, ksz);
        uint8_t *vq = lay + p->half_bytes + (size_t)g * p->head_bytes + (size_t)o * p->row_bytes;
        uint16_t *vsz = (uint16_t *)(lay + p->vs_off + (size_t)g * p->vs_head_bytes);
        const int nvg = hd / p->vgroup;
        for (int t = 0; t < G; t++)
            k25_kvq_quant_value_row(tv + (size_t)t * hd, hd, p->vgroup, p->bits, vq + (size_t)t * p->row_bytes,
                                    vsz + (size_t)(o + t) * nvg * 2);
        int keep = p->res_cap - G;
        memmove(rk, rk + (size_t)G * hd, sizeof(uint16_t) * (size_t)keep * hd);
        memmove(rv, rv + (size_t)G * hd, sizeof(uint16_t) * (size_t)keep * hd);
    }
    seq->n_quant[l] += G;
}

/* Writes n rows: row i of head g at k + i*row_stride + g*head_stride. */
static void write_rows(struct k25_kv_pool *p, struct k25_kv_seq *seq, int l, int slot0, int n, const float *k,
                       const float *v, size_t row_stride, size_t head_stride)
{
    const int bs = p->block_size, hd = p->head_dim;
    K25_ASSERT(slot0 >= 0 && slot0 + n <= seq->n_tokens);
    for (int i = 0; i < n; i++) {
        int slot = slot0 + i;
        if (p->quant) {
            int idx = slot - seq->n_quant[l];
            K25_ASSERT(idx >= 0 && idx < p->res_cap);
            for (int g = 0; g < p->n_kv_heads; g++) {
                k25_fp32_to_fp16_row(k + i * row_stride + g * head_stride, res_rows(p, seq, l, 0, g) + (size_t)idx * hd,
                                     (size_t)hd);
                k25_fp32_to_fp16_row(v + i * row_stride + g * head_stride, res_rows(p, seq, l, 1, g) + (size_t)idx * hd,
                                     (size_t)hd);
            }
            if (idx + 1 >= p->res_cap)
                quantize_group(p, seq, l);
            continue;
        }
        int t = slot % bs;
        if (i == 0 || t == 0)
            assert_writable(p, seq->ids[slot / bs]);
        unsigned char *blk = k25_kv_layer(p, seq->ids[slot / bs], l);
        for (int g = 0; g < p->n_kv_heads; g++) {
            size_t off = ((size_t)g * bs + t) * hd;
            const float *ks = k + i * row_stride + g * head_stride;
            const float *vs = v + i * row_stride + g * head_stride;
            if (p->dtype == K25_DTYPE_FP32) {
                memcpy((float *)blk + off, ks, sizeof(float) * hd);
                memcpy((float *)(blk + p->half_bytes) + off, vs, sizeof(float) * hd);
            } else {
                k25_fp32_to_fp16_row(ks, (uint16_t *)blk + off, (size_t)hd);
                k25_fp32_to_fp16_row(vs, (uint16_t *)(blk + p->half_bytes) + off, (size_t)hd);
            }
        }
    }
}

void k25_kv_seq_write(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, int slot0, int n,
                      const float *k, const float *v, int stride)
{
    if (p->compress) /* fresh slots: one token each (reserve zeroed their statistics) */
        for (int g = 0; g < p->n_kv_heads; g++)
            for (int s = slot0; s < slot0 + n; s++)
                *k25_kv_slot_count(p, seq, layer, g, s) = 1;
    write_rows(p, seq, layer, slot0, n, k, v, (size_t)stride, (size_t)p->head_dim);
}

void k25_kv_seq_write_heads(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, int slot0, int n,
                            const float *K, const float *V)
{
    write_rows(p, seq, layer, slot0, n, K, V, (size_t)p->head_dim, (size_t)n * p->head_dim);
}

void k25_kv_seq_rewind(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, int s0)
{
    if (!p->quant)
        return;
    K25_ASSERT(s0 % p->group == 0 && s0 <= seq->n_quant[layer]);
    seq->n_quant[layer] = s0;
}

void k25_kv_seq_release(struct k25_kv_pool *p, struct k25_kv_seq *seq,
                        void (*on_free)(int32_t id, void *user), void *user)
{
    for (int i = 0; i < seq->n_blocks; i++)
        if (block_put(p, seq->ids[i]) && on_free)
            on_free(seq->ids[i], user);
    free(seq->ids);
    free(seq->n_quant);
    free(seq->tier_mass);
    if (seq->res)
        p->be->be->buf_free(p->be, seq->res);
    if (seq->stats)
        p->be->be->buf_free(p->be, seq->stats);
    memset(seq, 0, sizeof(*seq));
}

void k25_kv_seq_truncate(struct k25_kv_pool *p, struct k25_kv_seq *seq, int n)
{
    K25_ASSERT(n <= seq->n_tokens);
    seq->n_tokens = n;
    int need = (int)k25_kv_blocks_for(p, n);
    while (seq->n_blocks > need)
        block_put(p, seq->ids[--seq->n_blocks]);
}

void k25_kv_seq_view(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer,
                     const void **kptr, const void **vptr, struct k25_kv_view *view)
{
    for (int b = 0; b < seq->n_blocks; b++) {
        const unsigned char *blk = k25_kv_layer(p, seq->ids[b], layer);
        kptr[b] = blk;
        vptr[b] = blk + p->half_bytes;
    }
    memset(view, 0, sizeof(*view));
    view->n_tokens = seq->n_tokens;
    view->block_size = p->block_size;
    view->n_kv_heads = p->n_kv_heads;
    view->head_dim = p->head_dim;
    view->dtype = p->dtype;
    view->k_blocks = kptr;
    view->v_blocks = vptr;
    view->n_quant = seq->n_tokens;
    if (p->quant) {
        view->group = p->group;
        view->vgroup = p->vgroup;
        view->ks_off = p->ks_off;
        view->vs_off = p->vs_off;
        view->n_quant = seq->n_quant[layer];
        view->res_k = res_rows(p, seq, layer, 0, 0);
        view->res_v = res_rows(p, seq, layer, 1, 0);
        view->res_cap = p->res_cap;
    }
    view->has_meta = p->compress;
    view->meta_off = p->meta_off;
    view->score_k0 = seq->score_all ? 0 : seq->comp_hi < seq->n_tokens ? seq->comp_hi : seq->n_tokens;
    view->score_window = seq->score_window;
}

void k25_kv_seq_read(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer, int g, int s0,
                     int n, float *K, float *V)
{
    const void *kp[seq->n_blocks > 0 ? seq->n_blocks : 1], *vp[seq->n_blocks > 0 ? seq->n_blocks : 1];
    struct k25_kv_view view;
    k25_kv_seq_view(p, seq, layer, kp, vp, &view);
    for (int done = 0; done < n;) { /* k25_kv_rows returns a pointer in place for fp32 inside a block */
        int take = n - done < p->block_size ? n - done : p->block_size;
        const float *r = k25_kv_rows(&view, view.k_blocks, g, s0 + done, take, K + (size_t)done * p->head_dim);
        if (r != K + (size_t)done * p->head_dim)
            memcpy(K + (size_t)done * p->head_dim, r, sizeof(float) * take * p->head_dim);
        r = k25_kv_rows(&view, view.v_blocks, g, s0 + done, take, V + (size_t)done * p->head_dim);
        if (r != V + (size_t)done * p->head_dim)
            memcpy(V + (size_t)done * p->head_dim, r, sizeof(float) * take * p->head_dim);
        done += take;
    }
}

void k25_kv_seq_add_scores(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, const float *acc,
                           int q_slot0, int n_q, int group)
{
    const int n = q_slot0 + n_q;
    for (int g = 0; g < p->n_kv_heads; g++)
        for (int s = seq->comp_hi; s < n; s++)
            *k25_kv_slot_score(p, seq, layer, g, s) += acc[(size_t)g * n + s];
    if (layer == 0) /* one seen for every layer and head: counted once per step */
        for (int s = seq->comp_hi; s < n; s++)
            *k25_kv_slot_seen(p, seq, s) += (float)((s <= q_slot0 ? n_q : n_q - (s - q_slot0)) * group);
}

/* ------------------------------------------- KV rows for the kernels, dequantizing */

void k25_fp32_to_fp16_row(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) /* every fp16 KV write: blocks and the int8/int4 residual */
        dst[i] = k25_fp32_to_fp16(src[i]);
}

void k25_fp16_to_fp32_row(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++)
        dst[i] = k25_fp16_to_fp32(src[i]);
}

/* Dequantizes slots [k0, k0+n) of KV head g (all in block k0/bs, below n_quant) into dst. */
static void dequant_run(const struct k25_kv_view *kv, bool keys, int g, int k0, int n, float *dst)
{
    const int bs = kv->block_size, hd = kv->head_dim, bits = kv->dtype == K25_DTYPE_INT8 ? 8 : 4;
    const size_t rb = (size_t)hd * bits / 8;
    const unsigned char *lay = kv->k_blocks[k0 / bs];
    const int o = k0 % bs;
    if (keys) {
        const uint8_t *q = lay + (size_t)g * bs * rb;
        const uint16_t *sz = (const uint16_t *)(lay + kv->ks_off) + (size_t)g * (bs / kv->group) * 2 * hd;
        float szf[2 * 256];
        int cur = -1;
        K25_ASSERT(hd <= 256);
        for (int t = o; t < o + n; t++) {
            int grp = t / kv->group;
            if (grp != cur) { /* scale and zero rows of the group as floats */
                k25_fp16_to_fp32_row(sz + (size_t)grp * 2 * hd, szf, 2 * (size_t)hd);
                cur = grp;
            }
            k25_kvq_dequant_key_row(q + (size_t)t * rb, szf, hd, bits, dst + (size_t)(t - o) * hd);
        }
    } else {
        const uint8_t *q = (const uint8_t *)kv->v_blocks[k0 / bs] + (size_t)g * bs * rb;
        const int nvg = hd / kv->vgroup;
        const uint16_t *sz = (const uint16_t *)(lay + kv->vs_off) + (size_t)g * bs * nvg * 2;
        for (int t = o; t < o + n; t++)
            k25_kvq_dequant_value_row(q + (size_t)t * rb, sz + (size_t)t * nvg * 2, hd, kv->vgroup, bits,
                                      dst + (size_t)(t - o) * hd);
    }
}

const float *k25_kv_rows(const struct k25_kv_view *kv, const void *const *blocks, int g, int k0,
                         int n, float *tmp)
{
    const int bs = kv->block_size, hd = kv->head_dim;
    int b = k0 / bs, o = k0 % bs;
    if (kv->dtype == K25_DTYPE_FP32 && o + n <= bs)
        return (const float *)blocks[b] + ((size_t)g * bs + o) * hd;
    if (kv->dtype == K25_DTYPE_INT8 || kv->dtype == K25_DTYPE_INT4) {
        const bool keys = blocks == kv->k_blocks;
        const uint16_t *res = (keys ? kv->res_k : kv->res_v) + (size_t)g * kv->res_cap * hd;
        for (int done = 0; done < n;) {
            int k = k0 + done, take;
            if (k >= kv->n_quant) { /* the fp16 residual */
                take = n - done;
                k25_fp16_to_fp32_row(res + (size_t)(k - kv->n_quant) * hd, tmp + (size_t)done * hd, (size_t)take * hd);
            } else {
                take = bs - k % bs;
                take = take < n - done ? take : n - done;
                take = take < kv->n_quant - k ? take : kv->n_quant - k;
                dequant_run(kv, keys, g, k, take, tmp + (size_t)done * hd);
            }
            done += take;
        }
        return tmp;
    }
    for (int done = 0; done < n;) {
        b = (k0 + done) / bs;
        o = (k0 + done) % bs;
        int take = bs - o < n - done ? bs - o : n - done;
        size_t off = ((size_t)g * bs + o) * hd;
        if (kv->dtype == K25_DTYPE_FP32)
            memcpy(tmp + (size_t)done * hd, (const float *)blocks[b] + off, sizeof(float) * take * hd);
        else
            k25_fp16_to_fp32_row((const uint16_t *)blocks[b] + off, tmp + (size_t)done * hd,
                                 (size_t)take * hd);
        done += take;
    }
    return tmp;
}

bool k25_kv_rows_need_tmp(const struct k25_kv_view *kv, int tile)
{
    return kv->dtype != K25_DTYPE_FP32 || kv->block_size % tile != 0;
}

/* ln(c) for every slot count c (a count is a uint8_t), filled once: the decode
 * tile reads one entry per slot instead of calling logf. */
static float g_logc[256];
static pthread_once_t g_logc_once = PTHREAD_ONCE_INIT;

static void logc_init(void)
{
    for (int c = 0; c < 256; c++)
        g_logc[c] = c == 1 ? 0.0f : logf((float)c);
}

const float *k25_kv_logc_table(void)
{
    pthread_once(&g_logc_once, logc_init);
    return g_logc;
}

/* Whether any of the n counts c[0..n) is not 1 (a merged slot), eight at a time. */
static bool any_merged(const uint8_t *c, int n)
{
    const uint64_t ones = 0x0101010101010101ull;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        if (w != ones)
            return true;
    }
    for (; i < n; i++)
        if (c[i] != 1)
            return true;
    return false;
}

bool k25_kv_logc(const struct k25_kv_view *kv, int g, int k0, int n, float *out)
{
    if (!kv->has_meta)
        return false;
    const int bs = kv->block_size;
    bool any = false;
    for (int done = 0; done < n && !any;) { /* runs inside one block */
        int k = k0 + done, take = bs - k % bs < n - done ? bs - k % bs : n - done;
        any = any_merged((const uint8_t *)kv->k_blocks[k / bs] + kv->meta_off + (size_t)g * bs + k % bs, take);
        done += take;
    }
    if (!any) /* no merged slot in the tile (the common case): every ln 1 = 0, nothing to add */
        return false;
    const float *lt = k25_kv_logc_table();
    for (int done = 0; done < n;) {
        int k = k0 + done, take = bs - k % bs < n - done ? bs - k % bs : n - done;
        const uint8_t *c = (const uint8_t *)kv->k_blocks[k / bs] + kv->meta_off + (size_t)g * bs + k % bs;
        for (int i = 0; i < take; i++)
            out[done + i] = lt[c[i]];
        done += take;
    }
    return true;
}

void k25_kv_seq_slot(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int l, int g, int s,
                     struct k25_kv_slot *out)
{
    float c = (float)*k25_kv_slot_count(p, seq, l, g, s);
    out->count = c;
    out->logc = c == 1.0f ? 0.0f : logf(c);
    out->score = out->seen = 0.0f;
    if (s >= seq->comp_hi && s < seq->n_tokens) {
        out->score = *k25_kv_slot_score(p, seq, l, g, s);
        out->seen = *k25_kv_slot_seen(p, seq, s);
    }
}
