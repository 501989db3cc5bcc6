/*
 * forward.c - one forward pass of the decoder over a step's batch.
 *
 * The step's spans (prefill chunks and decode tokens of several
 * sequences) are flattened into one [T][dim] matrix so every projection
 * is a single GEMM over all T tokens; only attention is per sequence.
 * Keys and values of the step's tokens are written to the paged cache
 * before attention, so each chunk attends to earlier KV plus itself.
 * Positions (RoPE) count tokens; attention works on KV slots, which
 * differ from positions once a sequence has been compressed.  With
 * compression on, each attention call also returns the attention every
 * slot received, which is added to the slots' scores (kvcache.c).
 */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Grows the activation buffers to hold t tokens. */
static int ensure_buffers(struct k25_engine *e, int t, struct k25_error *err)
{
    if (t <= e->t_cap)
        return K25_OK;
    const struct k25_model_shape *s = &e->model->shape;
    int cap = e->t_cap ? e->t_cap : 64;
    while (cap < t)
        cap *= 2;
    float **bufs[] = {&e->x, &e->xn, &e->qkv, &e->att, &e->gu, &e->h, &e->cs, &e->last, &e->logits};
    size_t widths[] = {(size_t)s->dim,
                       (size_t)s->dim,
                       (size_t)(s->n_heads + 2 * s->n_kv_heads) * s->head_dim,
                       (size_t)s->n_heads * s->head_dim,
                       2 * (size_t)s->ffn_dim,
                       (size_t)s->ffn_dim,
                       (size_t)s->head_dim,
                       (size_t)s->dim,
                       (size_t)s->vocab_size};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        k25_free(*bufs[i]);
        *bufs[i] = k25_alloc(K25_MEM_ACTIVATIONS, sizeof(float) * widths[i] * (size_t)cap);
        if (!*bufs[i]) {
            e->t_cap = 0;
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL,
                                 "cannot allocate activations for %d tokens", cap);
        }
    }
    e->t_cap = cap;
    return K25_OK;
}

/* cs[i] = cos(pos*f) for the first half, sin(pos*f) for the second. */
static void rope_table(const struct k25_engine *e, const struct k25_span *spans, int n_spans)
{
    int hd = e->model->shape.head_dim, half = hd / 2, row = 0;
    for (int s = 0; s < n_spans; s++)
        for (int i = 0; i < spans[s].n; i++, row++) {
            float *c = e->cs + (size_t)row * hd;
            double pos = spans[s].pos0 + i;
            for (int j = 0; j < half; j++) {
                double a = pos * e->inv_freq[j]; /* double: positions reach 256K+ */
                c[j] = (float)cos(a);
                c[half + j] = (float)sin(a);
            }
        }
}

int k25_forward(struct k25_engine *e, struct k25_span *spans, int n_spans, struct k25_error *err)
{
    const struct k25_model *m = e->model;
    const struct k25_model_shape *s = &m->shape;
    const struct k25_backend *be = e->be;
    const int d = s->dim, hd = s->head_dim, nh = s->n_heads, nkv = s->n_kv_heads;
    const int qkv_w = (nh + 2 * nkv) * hd, att_w = nh * hd;
    int rc = K25_OK;

    K25_ASSERT(n_spans > 0);
    int T = 0, max_blocks = 0, slot0[n_spans];
    float *scores = NULL;
    size_t score_off[n_spans + 1];
    int probe_l[3], n_probe = k25_attn_probe_layers(s->n_layers, probe_l);
    for (int i = 0; i < n_spans; i++)
        T += spans[i].n;
    if ((rc = ensure_buffers(e, T, err)) != K25_OK)
        return rc;
    for (int i = 0; i < n_spans; i++) {
        K25_ASSERT(spans[i].seq->n_pos == spans[i].pos0);
        slot0[i] = spans[i].seq->n_tokens;
        if ((rc = k25_kv_seq_reserve(&e->pool, spans[i].seq, spans[i].n, err)) != K25_OK)
            return rc;
        if (spans[i].seq->n_blocks > max_blocks)
            max_blocks = spans[i].seq->n_blocks;
    }

    score_off[0] = 0;
    for (int i = 0; i < n_spans; i++)
        score_off[i + 1] = score_off[i] + (e->pool.compress ? (size_t)nkv * spans[i].seq->n_tokens : 0);
    if (score_off[n_spans] > 0 &&
        !(scores = k25_alloc(K25_MEM_ATTN_SCRATCH, sizeof(float) * score_off[n_spans])))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (attention scores)");

    struct k25_attn_job *jobs = calloc((unsigned)n_spans, sizeof(*jobs));
    const void **ptrs = calloc((unsigned)n_spans * 2u * (unsigned)max_blocks, sizeof(void *));
    if (!jobs || !ptrs) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (attention jobs)");
        goto out_free;
    }

    for (int i = 0, row = 0; i < n_spans; i++)
        for (int t = 0; t < spans[i].n; t++, row++)
            memcpy(e->x + (size_t)row * d, m->embed + (size_t)spans[i].tokens[t] * d,
                   sizeof(float) * d);
    rope_table(e, spans, n_spans);

    for (int l = 0; l < s->n_layers; l++) {
        const struct k25_layer *L = &m->layers[l];
        be->rmsnorm(T, d, e->x, L->attn_norm, s->norm_eps, e->xn);
        be->gemm_xwt(T, qkv_w, d, e->xn, L->wqkv, e->qkv, false);
        be->rope(T, nh, hd, e->qkv, qkv_w, e->cs);
        be->rope(T, nkv, hd, e->qkv + att_w, qkv_w, e->cs);

        for (int i = 0, row = 0; i < n_spans; i++) {
            const float *kr = e->qkv + (size_t)row * qkv_w + att_w;
            k25_kv_seq_write(&e->pool, spans[i].seq, l, slot0[i], spans[i].n, kr, kr + nkv * hd, qkv_w);
            const void **kp = ptrs + (size_t)i * 2 * max_blocks, **vp = kp + max_blocks;
            k25_kv_seq_view(&e->pool, spans[i].seq, l, kp, vp, &jobs[i].kv);
            jobs[i].q = e->qkv + (size_t)row * qkv_w;
            jobs[i].q_stride = qkv_w;
            jobs[i].n_q = spans[i].n;
            jobs[i].q_pos0 = slot0[i];
            jobs[i].score = scores ? scores + score_off[i] : NULL;
            jobs[i].out = e->att + (size_t)row * att_w;
            jobs[i].out_stride = att_w;
            row += spans[i].n;
            e->stats.kv_block_accesses += spans[i].seq->n_blocks;
        }
        if (scores)
            memset(scores, 0, sizeof(float) * score_off[n_spans]);
        e->attn(jobs, n_spans, nh, 1.0f / sqrtf((float)hd));
        for (int i = 0; scores && i < n_spans; i++)
            k25_kv_seq_add_scores(&e->pool, spans[i].seq, l, jobs[i].score, slot0[i], spans[i].n, nh / nkv);
        for (int pl = 0; pl < n_probe; pl++) /* attention output of the row that gets logits */
            if (probe_l[pl] == l)
                for (int i = 0, row = 0; i < n_spans; i++) {
                    row += spans[i].n;
                    if (spans[i].probe)
                        memcpy(spans[i].probe + (size_t)pl * att_w, e->att + (size_t)(row - 1) * att_w,
                               sizeof(float) * att_w);
                }
        be->gemm_xwt(T, d, att_w, e->att, L->wo, e->x, true);

        be->rmsnorm(T, d, e->x, L->ffn_norm, s->norm_eps, e->xn);
        be->gemm_xwt(T, 2 * s->ffn_dim, d, e->xn, L->w_gate_up, e->gu, false);
        be->swiglu(T, s->ffn_dim, e->gu, e->h);
        be->gemm_xwt(T, d, s->ffn_dim, e->h, L->w_down, e->x, true);
    }

    /* Logits only where a token is sampled: the last row of a span that asks. */
    int n_want = 0;
    for (int i = 0, row = 0; i < n_spans; i++) {
        row += spans[i].n;
        if (spans[i].logits)
            memcpy(e->last + (size_t)n_want++ * d, e->x + (size_t)(row - 1) * d, sizeof(float) * d);
    }
    if (n_want > 0) {
        be->rmsnorm(n_want, d, e->last, m->final_norm, s->norm_eps, e->xn);
        be->gemm_xwt(n_want, s->vocab_size, d, e->xn, m->lm_head, e->logits, false);
        for (int i = 0, w = 0; i < n_spans; i++)
            if (spans[i].logits)
                memcpy(spans[i].logits, e->logits + (size_t)w++ * s->vocab_size,
                       sizeof(float) * s->vocab_size);
    }

out_free:
    k25_free(scores);
    free(jobs);
    free(ptrs);
    return rc;
}
