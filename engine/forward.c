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
 * compression on, each attention call also returns the attention the
 * slots not yet compressed (>= comp_hi) received from the last
 * K25_KV_SCORE_WINDOW queries of each span, which is added to the slots'
 * scores: the cost stays proportional to the uncompressed tail, not to
 * the context.
 * The degraded (early-exit) model of the elastic queue is the same pass
 * stopped after its first n_layers layers (engine.c runs its spans in a
 * pass of their own); its sequences get KV for those layers only.
 *
 * With KV tiers on (kvtier.c), each span's blocks are prepared right
 * after its reserve (hot, or streamed layer by layer: k25_kv_tier_layer
 * before each layer's KV writes); engine.c gives them back after the step.
 * Every touch of tensor memory is a backend call (backend.h): this file
 * holds the order of operations and host bookkeeping (token ids,
 * positions, row numbers) only.
 */
#include "engine.h"

#include <math.h>
#include <stdlib.h>

/* Grows the activation buffers to hold t tokens. */
static int ensure_buffers(struct k25_engine *e, int t, struct k25_error *err)
{
    if (t <= e->t_cap)
        return K25_OK;
    const struct k25_model_shape *s = &e->model->shape;
    const struct k25_backend *B = K25_BE(e);
    int cap = e->t_cap ? e->t_cap : 64;
    while (cap < t)
        cap *= 2;
    struct k25_buf **bufs[] = {&e->x, &e->xn, &e->qkv, &e->att, &e->gu, &e->h, &e->cs, &e->last, &e->logits};
    size_t widths[] = {(size_t)s->dim,
                       (size_t)s->dim,
                       (size_t)(s->n_heads + 2 * s->n_kv_heads) * s->head_dim,
                       (size_t)s->n_heads * s->head_dim,
                       2 * (size_t)s->ffn_dim,
                       (size_t)s->ffn_dim,
                       (size_t)s->head_dim,
                       (size_t)s->dim,
                       (size_t)s->vocab_size};
    e->t_cap = 0;
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        B->buf_free(&e->be, *bufs[i]);
        *bufs[i] = NULL;
    }
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (B->buf_alloc(&e->be, K25_MEM_ACTIVATIONS, sizeof(float) * widths[i] * (size_t)cap, bufs[i], NULL) !=
            K25_OK)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "cannot allocate activations for %d tokens", cap);
    int32_t **host[] = {&e->tok, &e->pos, &e->rows};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) {
        free(*host[i]);
        if (!(*host[i] = malloc(sizeof(int32_t) * (size_t)cap)))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (step of %d tokens)", cap);
    }
    e->t_cap = cap;
    return K25_OK;
}

/* rows x cols fp32 over a whole activation buffer. */
static struct k25_tensor act(struct k25_buf *b, int rows, int cols)
{
    return k25_tensor_of(b, rows, cols, K25_DTYPE_FP32);
}

/*
 * k25_forward (engine.h): the model over one step's spans.  Over ~120
 * lines on purpose: like llama2.c's forward it is read top to bottom
 * (reserve and make hot each span's KV, embed, per layer norm, QKV, RoPE,
 * attention, output, FFN, then the final norm and the head); splitting it
 * would hide the order.
 */
int k25_forward(struct k25_engine *e, struct k25_span *spans, int n_spans, int n_layers, struct k25_error *err)
{
    const struct k25_model_shape *s = &e->model->shape;
    const struct k25_backend *B = K25_BE(e);
    struct k25_bctx *ctx = &e->be;
    const struct k25_weights *w = &e->w;
    const int d = s->dim, hd = s->head_dim, nh = s->n_heads, nkv = s->n_kv_heads;
    const int qkv_w = (nh + 2 * nkv) * hd, att_w = nh * hd;
    int rc = K25_OK;

    K25_ASSERT(n_spans > 0);
    K25_ASSERT(n_layers >= 1 && n_layers <= s->n_layers);
    int T = 0;
    struct k25_buf *scores = NULL;
    size_t score_off[n_spans + 1];
    int probe_l[3], n_probe = k25_attn_probe_layers(s->n_layers, probe_l);
    for (int i = 0; i < n_spans; i++)
        T += spans[i].n;
    if ((rc = ensure_buffers(e, T, err)) != K25_OK)
        return rc;
    struct k25_attn_seq *aseq = calloc((unsigned)n_spans, sizeof(*aseq));
    if (!aseq)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (attention jobs)");
    for (int i = 0, row = 0; i < n_spans; i++) {
        K25_ASSERT(spans[i].seq->n_pos == spans[i].pos0);
        aseq[i] = (struct k25_attn_seq){spans[i].seq, row, spans[i].n, spans[i].seq->n_tokens, 0};
        if ((rc = k25_kv_seq_reserve(&e->pool, spans[i].seq, spans[i].n, err)) != K25_OK)
            goto out_free;
        /* every block attention reads must be hot (KV tiers); without tiers every read is a hit */
        struct k25_kv_seq *sq = spans[i].seq;
        if (e->tier) {
            if ((rc = k25_kv_tier_acquire(e->tier, sq, aseq[i].q_slot0, err)) != K25_OK)
                goto out_free;
        } else {
            sq->tier_reads += sq->n_blocks;
            sq->tier_hits += sq->n_blocks;
            e->stats.kv_block_reads += sq->n_blocks;
            e->stats.kv_block_hits += sq->n_blocks;
            sq->tier_access = 0;
            sq->tier_access_id = sq->ids[sq->n_blocks - 1];
            sq->tier_step_hit = true;
        }
        for (int t = 0; t < spans[i].n; t++, row++) {
            e->tok[row] = spans[i].tokens[t];
            e->pos[row] = spans[i].pos0 + t;
        }
    }

    /* scores: compression's (every layer, slots from comp_hi) and the hotness policy's (its sampled
     * layers, every slot: k25_kv_tier_observes) */
    const bool hot = k25_kv_tier_observes(e->tier, k25_kv_hot_stride(s->n_layers) - 1);
    score_off[0] = 0;
    for (int i = 0; i < n_spans; i++) {
        aseq[i].score_off = score_off[i];
        score_off[i + 1] = score_off[i] + (e->pool.compress || hot ? (size_t)nkv * spans[i].seq->n_tokens : 0);
        spans[i].seq->score_window = K25_KV_SCORE_WINDOW;
    }
    if (score_off[n_spans] > 0 &&
        B->buf_alloc(ctx, K25_MEM_ATTN_SCRATCH, sizeof(float) * score_off[n_spans], &scores, NULL) != K25_OK) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (attention scores)");
        goto out_free;
    }

    const struct k25_tensor X = act(e->x, T, d), XN = act(e->xn, T, d), QKV = act(e->qkv, T, qkv_w),
                            ATT = act(e->att, T, att_w), GU = act(e->gu, T, 2 * s->ffn_dim),
                            H = act(e->h, T, s->ffn_dim), CS = act(e->cs, T, hd);
    const struct k25_tensor Q = k25_tensor_view(&QKV, 0, T, 0, att_w), K = k25_tensor_view(&QKV, 0, T, att_w, nkv * hd),
                            V = k25_tensor_view(&QKV, 0, T, att_w + nkv * hd, nkv * hd);
    struct k25_tensor SC = scores ? act(scores, 1, (int)score_off[n_spans]) : (struct k25_tensor){0};
    const struct k25_attn_call call = {e->cfg.attention, &e->pool, 0, nh, 1.0f / sqrtf((float)hd), aseq, n_spans,
                                       &QKV, &ATT, scores ? &SC : NULL};

    B->embed(ctx, &w->embed, e->tok, &X);
    B->rope_cache(ctx, e->pos, e->inv_freq, &CS);

    for (int l = 0; l < n_layers; l++) {
        const struct k25_layer_w *L = &w->layers[l];
        B->rmsnorm(ctx, &X, &L->attn_norm, s->norm_eps, &XN);
        B->gemm(ctx, &XN, &L->wqkv, &QKV, false);
        B->rope(ctx, &Q, nh, hd, &CS);
        B->rope(ctx, &K, nkv, hd, &CS);

        for (int i = 0; i < n_spans; i++) {
            struct k25_tensor k = k25_tensor_view(&K, aseq[i].row0, spans[i].n, 0, nkv * hd),
                              v = k25_tensor_view(&V, aseq[i].row0, spans[i].n, 0, nkv * hd);
            if (e->tier && (rc = k25_kv_tier_layer(e->tier, spans[i].seq, l, err)) != K25_OK)
                goto out_free; /* KV tiers: layer l of the streamed blocks */
            B->kv_write(ctx, &e->pool, spans[i].seq, l, aseq[i].q_slot0, &k, &v);
            e->stats.kv_block_accesses += spans[i].seq->n_blocks;
        }
        const bool observe = k25_kv_tier_observes(e->tier, l);
        for (int i = 0; scores && (e->pool.compress || observe) && i < n_spans; i++) { /* only the columns that get scores */
            spans[i].seq->score_all = observe;
            const int n = spans[i].seq->n_tokens, k0 = observe ? 0 : spans[i].seq->comp_hi;
            for (int g = 0; g < nkv && k0 < n; g++)
                B->buf_clear(ctx, scores, sizeof(float) * (score_off[i] + (size_t)g * n + k0),
                             sizeof(float) * (size_t)(n - k0));
        }
        struct k25_attn_call c = call;
        c.layer = l;
        if (!e->pool.compress && !observe)
            c.score = NULL;
        B->attention(ctx, &c);
        for (int i = 0; observe && i < n_spans; i++) { /* hotness: the attention mass of each block */
            struct k25_kv_seq *sq = spans[i].seq;
            const size_t nf = score_off[i + 1] - score_off[i];
            float *host = k25_kv_tier_obs_buf(e->tier, nf);
            if (!host) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV hotness scores)");
                goto out_free;
            }
            B->buf_get(ctx, scores, sizeof(float) * score_off[i], host, sizeof(float) * nf);
            int w = spans[i].n < K25_KV_SCORE_WINDOW ? spans[i].n : K25_KV_SCORE_WINDOW;
            if ((rc = k25_kv_tier_observe(e->tier, sq, host, sq->n_tokens, w, nh, err)) != K25_OK)
                goto out_free;
            sq->score_all = false;
        }
        for (int i = 0; e->pool.compress && scores && i < n_spans; i++) {
            struct k25_tensor sc = k25_tensor_view(&SC, 0, 1, (int64_t)score_off[i],
                                                   (int64_t)(score_off[i + 1] - score_off[i]));
            int w = spans[i].n < K25_KV_SCORE_WINDOW ? spans[i].n : K25_KV_SCORE_WINDOW;
            B->kv_add_scores(ctx, &e->pool, spans[i].seq, l, &sc, aseq[i].q_slot0 + spans[i].n - w, w, nh / nkv);
        }
        for (int pl = 0; pl < n_probe; pl++) /* attention output of the row that gets logits */
            if (probe_l[pl] == l)
                for (int i = 0; i < n_spans; i++)
                    if (spans[i].probe)
                        B->buf_get(ctx, e->att, sizeof(float) * (size_t)(aseq[i].row0 + spans[i].n - 1) * att_w,
                                   spans[i].probe + (size_t)pl * att_w, sizeof(float) * att_w);
        B->gemm(ctx, &ATT, &L->wo, &X, true);

        B->rmsnorm(ctx, &X, &L->ffn_norm, s->norm_eps, &XN);
        B->gemm(ctx, &XN, &L->w_gate_up, &GU, false);
        B->swiglu(ctx, &GU, &H);
        B->gemm(ctx, &H, &L->w_down, &X, true);
    }

    /* Logits only where a token is sampled: the last row of a span that asks. */
    int n_want = 0;
    for (int i = 0; i < n_spans; i++)
        if (spans[i].logits)
            e->rows[n_want++] = aseq[i].row0 + spans[i].n - 1;
    if (n_want > 0) {
        const struct k25_tensor LAST = act(e->last, n_want, d), LN = act(e->xn, n_want, d),
                                LG = act(e->logits, n_want, s->vocab_size);
        B->rows_gather(ctx, &X, e->rows, &LAST);
        B->rmsnorm(ctx, &LAST, &w->final_norm, s->norm_eps, &LN);
        B->gemm(ctx, &LN, &w->lm_head, &LG, false);
        const size_t vb = sizeof(float) * (size_t)s->vocab_size;
        for (int i = 0, k = 0; i < n_spans; i++)
            if (spans[i].logits)
                B->buf_get(ctx, e->logits, vb * (size_t)k++, spans[i].logits, vb);
    }

out_free:
    if (scores)
        B->buf_free(ctx, scores);
    free(aseq);
    if (rc == K25_OK) /* a device backend's first failed call of the pass, if any (backend.h) */
        rc = k25_backend_status(ctx, err);
    return rc;
}
