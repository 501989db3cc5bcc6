/*
 * kvstore.c - the CPU backend's KV storage: the bytes of the paged KV
 * cache's blocks, residuals and slot statistics in host memory (the
 * write, read, rewind, view and score functions of kvstore.h), and the KV
 * rows the attention kernels read, dequantizing.  The pool's bookkeeping
 * (block ids, block tables, reference counts) is engine/kvcache.c's.
 */
#include "kvstore.h"
#include "kvquant.h"
#include "prefix.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

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
