/*
 * engine.c - the engine object and its scheduler: continuous batching.
 *
 * Requests wait in a FIFO until admitted (at most max_batch_size run at
 * once, and the degraded model's own share beside them; with a memory
 * budget, only when the KV blocks for their prompt and output can be
 * reserved).  Each step builds one batch under the token
 * budget max_num_batched_tokens: first one decode token for every running
 * sequence that has finished its prefill (latency first), then prefill
 * chunks of up to prefill_chunk_size tokens for sequences still
 * prefilling, in admission order, until the budget is spent.  One forward
 * pass runs the whole batch; sequences whose last prompt chunk or decode
 * token ran get a sampled token; finished sequences free their blocks at
 * once, so a new request can join in the next step.
 *
 * The waiting requests belong to the elastic queue (queue.c, docs/engine.md
 * "Elastic request queue"): submission, routing to the memory, disk or
 * degraded queue, admission into the batch, timeouts, and FINISH events
 * once a request's done record is durable.  A step calls it at its start
 * (admission) and after retiring finished sequences.  Degraded requests
 * (the circuit breaker was open at their arrival) run in their own
 * forward pass over the first degraded_layers layers.
 */
#include "engine.h"
#include "prefix.h"
#include "k25_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *k25_req_state_name(enum k25_req_state s)
{
    switch (s) {
    case K25_REQ_WAITING: return "waiting";
    case K25_REQ_PREFILL: return "prefill";
    case K25_REQ_DECODE: return "decode";
    case K25_REQ_COMPLETED: return "completed";
    case K25_REQ_REJECTED: return "rejected";
    case K25_REQ_TIMED_OUT: return "timed_out";
    }
    return "?";
}

const char *k25_finish_reason_name(enum k25_finish_reason f)
{
    switch (f) {
    case K25_FINISH_NONE: return "none";
    case K25_FINISH_LENGTH: return "length";
    case K25_FINISH_STOP: return "stop";
    case K25_FINISH_CANCELLED: return "cancelled";
    }
    return "?";
}

/*
 * Quantizes the [rows][cols] matrix host (the model's, in m->wdtype) into a
 * new backend buffer of q rows (backend.h layout), RQ_ROWS rows at a time
 * through a host staging buffer.  K25_EINVAL when weight_quant_group does
 * not divide cols, K25_ENOMEM when memory runs out.
 */
static int weights_quantize(struct k25_engine *e, const void *host, enum k25_dtype src_dt, int64_t rows, int64_t cols,
                            enum k25_dtype q, struct k25_buf **out, struct k25_error *err)
{
    enum { RQ_ROWS = 1024 };
    const int g = e->cfg.weight_quant_group;
    if (cols % g != 0)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "weight_quant_group",
                             "%d does not divide a weight row of %lld values (dim, heads*head_dim and ffn_dim "
                             "must be multiples of it)", g, (long long)cols);
    const size_t rb = k25_wquant_row_bytes(q, cols, g), eb = src_dt == K25_DTYPE_FP32 ? 4 : 2;
    int rc = K25_BE(e)->buf_alloc(&e->be, K25_MEM_WEIGHTS, rb * (size_t)rows, out, err);
    if (rc != K25_OK)
        return rc;
    unsigned char *stage = malloc(rb * RQ_ROWS);
    if (!stage)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (quantizing weights)");
    for (int64_t r0 = 0; r0 < rows; r0 += RQ_ROWS) {
        int64_t n = rows - r0 < RQ_ROWS ? rows - r0 : RQ_ROWS;
        k25_wquant_rows(q, g, (const unsigned char *)host + eb * (size_t)(r0 * cols), src_dt, (size_t)cols, n, cols,
                        stage);
        K25_BE(e)->buf_set(&e->be, *out, rb * (size_t)r0, stage, rb * (size_t)n);
    }
    free(stage);
    return K25_OK;
}

/*
 * Gives the model's weights to the backend: norms (fp32) and matrices in
 * the model's format are mapped (the CPU maps them in place, no copy);
 * with quantize_weights the matrices (embeddings and head included) are
 * quantized into buffers of the engine's own, so engines with and without
 * it share one loaded model (the fidelity run's exact engine).  Configures
 * the backend's own keys (cpu_kernels) first.
 */
static int weights_map(struct k25_engine *e, struct k25_error *err)
{
    const struct k25_model *m = e->model;
    const struct k25_model_shape *s = &m->shape;
    const struct k25_backend *B = K25_BE(e);
    struct k25_weights *w = &e->w;
    const int64_t d = s->dim, qkv = (int64_t)(s->n_heads + 2 * s->n_kv_heads) * s->head_dim,
                  att = (int64_t)s->n_heads * s->head_dim, ffn = s->ffn_dim;
    int rc;
    if (B->configure && (rc = B->configure(&e->be, &e->cfg, err)) != K25_OK)
        return rc;
    w->dtype = k25_weight_quant_dtype(e->cfg.quantize_weights, m->wdtype);
    const bool quant = w->dtype != m->wdtype;
    w->layers = calloc((size_t)s->n_layers, sizeof(*w->layers));
    w->bufs = calloc((size_t)s->n_layers * 6 + 3, sizeof(*w->bufs));
    if (!w->layers || !w->bufs)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (weights)");
    struct wmap {
        const void *host;
        int64_t rows, cols;
        struct k25_tensor *t;
        bool matrix; /* in the weight format; else an fp32 norm */
    } list[6 * s->n_layers + 3];
    int n = 0;
    list[n++] = (struct wmap){m->embed, s->vocab_size, d, &w->embed, true};
    list[n++] = (struct wmap){m->final_norm, 1, d, &w->final_norm, false};
    if (m->lm_head != m->embed)
        list[n++] = (struct wmap){m->lm_head, s->vocab_size, d, &w->lm_head, true};
    for (int l = 0; l < s->n_layers; l++) {
        const struct k25_layer *L = &m->layers[l];
        struct k25_layer_w *W = &w->layers[l];
        list[n++] = (struct wmap){L->attn_norm, 1, d, &W->attn_norm, false};
        list[n++] = (struct wmap){L->wqkv, qkv, d, &W->wqkv, true};
        list[n++] = (struct wmap){L->wo, d, att, &W->wo, true};
        list[n++] = (struct wmap){L->ffn_norm, 1, d, &W->ffn_norm, false};
        list[n++] = (struct wmap){L->w_gate_up, 2 * ffn, d, &W->w_gate_up, true};
        list[n++] = (struct wmap){L->w_down, d, ffn, &W->w_down, true};
    }
    for (int i = 0; i < n; i++) {
        struct k25_buf **bp = &w->bufs[w->n_bufs];
        const int64_t rows = list[i].rows, cols = list[i].cols;
        const enum k25_dtype dt = list[i].matrix ? m->wdtype : K25_DTYPE_FP32;
        if (list[i].matrix && quant) {
            rc = weights_quantize(e, list[i].host, m->wdtype, rows, cols, w->dtype, bp, err);
            if (*bp)
                w->n_bufs++;
            if (rc != K25_OK)
                return rc;
            *list[i].t = k25_tensor_of(*bp, rows, cols, w->dtype);
            list[i].t->stride = (int64_t)k25_wquant_row_bytes(w->dtype, cols, e->cfg.weight_quant_group);
            continue;
        }
        size_t bytes = k25_dtype_bytes(dt) * (size_t)(rows * cols);
        if ((rc = B->buf_map_host(&e->be, K25_MEM_WEIGHTS, list[i].host, bytes, bp, err)) != K25_OK)
            return rc;
        *list[i].t = k25_tensor_of(w->bufs[w->n_bufs++], rows, cols, dt);
    }
    if (m->lm_head == m->embed) /* tied: one buffer, counted once */
        w->lm_head = w->embed;
    return K25_OK;
}

/* Frees what k25_engine_create made, in any state of completion. */
static void engine_free(struct k25_engine *e)
{
    const struct k25_backend *B = K25_BE(e);
    if (B) {
        struct k25_buf *bufs[] = {e->x, e->xn, e->qkv, e->att, e->gu, e->h, e->cs, e->last, e->logits};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            B->buf_free(&e->be, bufs[i]);
        k25_kv_tier_destroy(e->tier); /* before the pool: its thread reads into staging, not blocks */
        e->tier = NULL;
        if (e->pool.be)
            k25_kv_pool_free(&e->pool);
        for (int i = 0; i < e->w.n_bufs; i++)
            B->buf_free(&e->be, e->w.bufs[i]);
        k25_bctx_destroy(&e->be);
    }
    free(e->w.bufs);
    free(e->w.layers);
    free(e->tok);
    free(e->pos);
    free(e->rows);
    k25_free(e->sample_work);
    k25_free(e->sample_idx);
    k25_free(e->inv_freq);
    k25_free(e->running);
    k25_free(e);
}

/* A cached block leaves the prefix cache to make room (prefix.c's on_evict). */
static void log_block_evict(int32_t id, void *user)
{
    struct k25_engine *e = user;
    if (k25_log_on(&e->log, K25_LOG_DEBUG))
        k25_log_write(&e->log, K25_LOG_DEBUG, "KV_CACHE", "block_id=%d evict_reason=MEMORY_PRESSURE", id);
}

int k25_engine_create(const struct k25_config *cfg, const k25_model_t *model, k25_engine_t **out,
                      struct k25_error *err)
{
    return k25_engine_create_io(cfg, model, NULL, out, err);
}

int k25_engine_create_io(const struct k25_config *cfg, const k25_model_t *model, const struct k25_spill_io *io,
                         k25_engine_t **out, struct k25_error *err)
{
    *out = NULL;
    int rc = k25_config_validate(cfg, err);
    if (rc != K25_OK)
        return rc;
    struct k25_engine *e = k25_alloc(K25_MEM_OTHER, sizeof(*e));
    if (!e)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    e->cfg = *cfg;
    e->model = model;
    e->q.spill.fd = -1;
    /* the context limit: the model's unless max_model_len lowers it (k25_engine_max_model_len) */
    const int model_len = model->shape.max_position > 0 ? model->shape.max_position : K25_PRESET_MAX_POSITION;
    if (cfg->max_model_len > model_len) {
        rc = k25_error_set(err, K25_ERANGE, NULL, 0, "max_model_len",
                           "%d exceeds the model's context limit %d (max_position_embeddings)",
                           cfg->max_model_len, model_len);
        goto out_free;
    }
    e->cfg.max_model_len = cfg->max_model_len > 0 ? cfg->max_model_len : model_len;
    const struct k25_backend *B = k25_backend_find(cfg->backend); /* validated: built in */
    if ((rc = k25_bctx_init(&e->be, B, &e->acct, err)) != K25_OK)
        goto out_free;
    if ((rc = weights_map(e, err)) != K25_OK || (rc = k25_backend_status(&e->be, err)) != K25_OK)
        goto out_free;
    if ((rc = k25_backend_check(&e->be, cfg, e->w.dtype, err)) != K25_OK)
        goto out_free;
    int threads = k25_set_threads(cfg->threads);
    e->threads = threads;
    const struct k25_model_shape *s = &model->shape;

    /* With a budget, the KV pool gets what weights and activations leave. */
    int64_t max_blocks = 0;
    struct k25_kv_pool probe;
    if ((rc = k25_kv_pool_init(&probe, s, cfg, 0, NULL, err)) != K25_OK)
        goto out_free;
    if (cfg->memory_budget_mb > 0) {
        int64_t budget = cfg->memory_budget_mb * 1024 * 1024;
        int64_t weights = k25_model_weight_bytes(s, cfg); /* in the format the engine reads */
        int64_t step_tokens = cfg->max_num_batched_tokens > cfg->prefill_chunk_size
                                  ? cfg->max_num_batched_tokens
                                  : cfg->prefill_chunk_size;
        /* the backend's own scratch (the CPU: its attention kernels'), as it reports it */
        int64_t scratch = e->be.be->scratch_bytes ? e->be.be->scratch_bytes(&e->be, cfg, s, step_tokens, threads) : 0;
        size_t mem_free, mem_total;
        if (k25_memory_info(&e->be, &mem_free, &mem_total, NULL) == K25_OK && (uint64_t)budget > mem_total) {
            rc = k25_error_set(err, K25_ERANGE, NULL, 0, "memory_budget_mb",
                               "%lld MB is more than backend %s has (%.0f MB in all, memory_info)",
                               (long long)cfg->memory_budget_mb, e->be.be->name, (double)mem_total / (1 << 20));
            goto out_free;
        }
        int64_t left = budget - weights - k25_activation_bytes(s, step_tokens, NULL) - scratch;
        max_blocks = left / (int64_t)probe.block_bytes;
        if (max_blocks < 1) {
            rc = k25_error_set(err, K25_ERANGE, NULL, 0, "memory_budget_mb",
                               "%lld MB cannot hold the weights (%.1f MB), activations and one KV block",
                               (long long)cfg->memory_budget_mb, (double)weights / (1 << 20));
            goto out_free;
        }
    }
    if ((rc = k25_kv_tier_block_cap(cfg, probe.block_bytes, &max_blocks, err)) != K25_OK)
        goto out_free; /* KV tiers: block ids past the RAM pool (kvtier.h) */
    if ((rc = k25_kv_pool_init(&e->pool, s, cfg, max_blocks, &e->be, err)) != K25_OK)
        goto out_free;
    if (cfg->enable_prefix_caching &&
        (rc = k25_prefix_create(&e->pool, k25_prefix_seed(cfg, s), log_block_evict, e, err)) != K25_OK)
        goto out_free;
    if ((rc = k25_log_open(&e->log, cfg->log_level, cfg->log_file, err)) != K25_OK)
        goto out_free;
    if ((rc = k25_kv_tier_create(&e->pool, cfg, &e->log, &e->tier, err)) != K25_OK)
        goto out_log;

    e->sample_work = k25_alloc_acct(&e->acct, K25_MEM_OTHER, sizeof(float) * (size_t)s->vocab_size);
    e->sample_idx = k25_alloc_acct(&e->acct, K25_MEM_OTHER, sizeof(int32_t) * (size_t)s->vocab_size);
    e->inv_freq = k25_alloc_acct(&e->acct, K25_MEM_OTHER, sizeof(double) * (size_t)(s->head_dim / 2));
    k25_queue_init(e); /* sizes the degraded batch share; starts the breaker */
    e->running = k25_alloc_acct(&e->acct, K25_MEM_OTHER, sizeof(int) * (size_t)(cfg->max_batch_size + e->q.deg_slots));
    if (!e->sample_work || !e->sample_idx || !e->inv_freq || !e->running) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_log;
    }
    for (int j = 0; j < s->head_dim / 2; j++)
        e->inv_freq[j] = pow(s->rope_theta, -2.0 * j / s->head_dim);
    k25_mem_acct_add(&e->acct, K25_MEM_OTHER, (int64_t)sizeof(*e)); /* the engine object itself */
    /* early exit after ceil(f * n_layers) layers, at least 1 */
    e->degraded_layers = (int)ceil(cfg->degraded_layer_fraction * s->n_layers - 1e-9);
    e->degraded_layers = e->degraded_layers < 1 ? 1 : e->degraded_layers > s->n_layers ? s->n_layers : e->degraded_layers;
    if (cfg->queue_spill_dir[0] && (rc = k25_queue_spill_start(e, io, err)) != K25_OK) {
        *out = e;
        k25_engine_destroy(e);
        *out = NULL;
        return rc;
    }
    if (e->q.replay.torn_bytes > 0 && err) { /* a warning, not a failure (k25.h) */
        k25_error_set(err, K25_EFORMAT, e->q.spill.path, 0, "queue_spill_dir", "%s", e->q.replay.warning);
        err->code = K25_OK;
    }
    *out = e;
    return K25_OK;

out_log:
    k25_log_close(&e->log, NULL);
out_free:
    engine_free(e);
    return rc;
}

void k25_engine_mem(const k25_engine_t *e, struct k25_mem_stats *out)
{
    k25_mem_acct_get(&e->acct, out);
}

void k25_engine_mem_reset_peak(k25_engine_t *e)
{
    k25_mem_acct_reset_peak(&e->acct);
}

void k25_engine_slot_free(struct k25_engine *e, struct k25_slot *sl)
{
    if (!sl)
        return;
    if (sl->seq.ids)
        k25_kv_seq_release(&e->pool, &sl->seq, NULL, NULL);
    free(sl->prompt);
    free(sl->forced);
    for (int i = 0; i < sl->n_stop; i++)
        free(sl->stop[i]);
    free(sl->stop);
    free(sl->stop_len);
    free(sl->res.attn_probe);
    free(sl->res.output_ids);
    free(sl->res.token_t_ns);
    free(sl->res.logits);
    free(sl->res.margins);
    k25_kv_spans_free(&sl->spans);
    free(sl);
}

void k25_engine_destroy(k25_engine_t *e)
{
    if (!e)
        return;
    if (k25_threads_applied() != e->threads)
        k25_threads_apply(e->threads); /* leave the pools as configured */
    for (int i = 0; i < e->n_slots; i++)
        k25_engine_slot_free(e, e->slots[i]);
    free(e->slots);
    k25_queue_free(e);
    k25_log_close(&e->log, NULL);
    engine_free(e);
}

void k25_engine_set_event_cb(k25_engine_t *e, k25_event_cb cb, void *user)
{
    e->cb = cb;
    e->cb_user = user;
}

void k25_engine_set_step_hook(k25_engine_t *e, k25_step_hook fn, void *user)
{
    e->step_hook = fn;
    e->step_user = user;
}

/* Calls the step hook with the rows of this step that get a token. */
static void call_step_hook(struct k25_engine *e, const struct k25_span *spans, int n_spans, uint64_t t0)
{
    float *rows[n_spans];
    int pos[n_spans], n = 0;
    for (int i = 0; i < n_spans; i++)
        if (spans[i].logits) {
            rows[n] = spans[i].logits;
            pos[n++] = spans[i].pos0 + spans[i].n;
        }
    struct k25_step_info info = {n, rows, pos, e->model->shape.vocab_size, t0};
    e->step_hook(&info, e->step_user);
}

void k25_engine_emit(struct k25_engine *e, enum k25_event_type type, int handle, int32_t tok, int index,
                 uint64_t t_ns)
{
    if (!e->cb)
        return;
    struct k25_event ev = {type, handle, e->slots[handle]->res.id, tok, index, t_ns};
    e->cb(&ev, e->cb_user);
}


/*
 * Prefix caching: an admitted request takes the cached blocks that match
 * its prompt's leading full blocks (less the last token, which must be
 * prefilled for logits), and its prefill starts after them.  Its
 * reservation stays the whole sequence's (shared blocks are counted once
 * in the pool, so reservations still bound it).  Degraded requests neither
 * take nor give blocks: their KV has fewer layers.  Out of memory: a miss.
 */
void k25_engine_prefix_attach(struct k25_engine *e, struct k25_slot *sl)
{
    if (!e->pool.px || sl->res.degraded || sl->res.n_input < 2)
        return;
    int matched = 0;
    if (k25_prefix_attach(&e->pool, &sl->seq, sl->prompt, sl->res.n_input - 1, &matched, NULL) != K25_OK)
        matched = 0;
    sl->n_prefilled = matched;
    sl->res.cached_tokens = matched;
    if (matched > 0)
        k25_log_write(&e->log, K25_LOG_DEBUG, "KV_CACHE", "req_id=%s event=prefix_hit tokens=%d blocks=%d",
                      sl->res.id, matched, sl->seq.n_blocks);
}

/* Publishes a finishing request's full blocks into the prefix cache: the
 * KV it holds is its prompt and every output token but the last. */
static void prefix_publish(struct k25_engine *e, struct k25_slot *sl)
{
    if (!e->pool.px || sl->res.degraded || !sl->seq.ids)
        return;
    int n_out = sl->res.n_output > 0 ? sl->res.n_output - 1 : 0;
    int n = sl->n_prefilled + (sl->n_prefilled == sl->res.n_input ? n_out : 0);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!tok)
        return; /* nothing published */
    int np = sl->n_prefilled;
    memcpy(tok, sl->prompt, sizeof(int32_t) * (size_t)np);
    if (n > np)
        memcpy(tok + np, sl->res.output_ids, sizeof(int32_t) * (size_t)(n - np));
    k25_prefix_publish(&e->pool, &sl->seq, tok, n);
    free(tok);
}

static const char *const tier_names[] = {"hot", "warm", "cold"}; /* kvcache.h tier_access */

static void log_block_free(int32_t id, void *user)
{
    struct k25_engine *e = user;
    k25_log_write(&e->log, K25_LOG_DEBUG, "KV_CACHE", "block_id=%d evict_reason=REQUEST_FINISHED", id);
}

static int append_token(struct k25_engine *e, struct k25_slot *sl, int32_t tok, float margin, const float *logits,
                        const float *probe, uint64_t t_ns, struct k25_error *err)
{
    int V = e->model->shape.vocab_size;
    const struct k25_model_shape *ms = &e->model->shape;
    int pl[3], np = k25_attn_probe_layers(ms->n_layers, pl);
    size_t pw = (size_t)np * ms->n_heads * ms->head_dim;
    if (sl->res.n_output == sl->out_cap) {
        int ncap = sl->out_cap ? 2 * sl->out_cap : 16;
        if (ncap > sl->max_new)
            ncap = sl->max_new;
        int32_t *o = realloc(sl->res.output_ids, sizeof(int32_t) * (size_t)ncap);
        if (o)
            sl->res.output_ids = o;
        uint64_t *t = realloc(sl->res.token_t_ns, sizeof(uint64_t) * (size_t)ncap);
        if (t)
            sl->res.token_t_ns = t;
        float *mg = realloc(sl->res.margins, sizeof(float) * (size_t)ncap);
        if (mg)
            sl->res.margins = mg;
        float *lg = sl->keep_logits ? realloc(sl->res.logits, sizeof(float) * (size_t)ncap * V) : NULL;
        if (lg)
            sl->res.logits = lg;
        float *pb = sl->keep_attn ? realloc(sl->res.attn_probe, sizeof(float) * (size_t)ncap * pw) : NULL;
        if (pb)
            sl->res.attn_probe = pb;
        if (!o || !t || !mg || (sl->keep_logits && !lg) || (sl->keep_attn && !pb))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (outputs)");
        sl->out_cap = ncap;
    }
    if (sl->keep_logits)
        memcpy(sl->res.logits + (size_t)sl->res.n_output * V, logits, sizeof(float) * V);
    if (sl->keep_attn) {
        memcpy(sl->res.attn_probe + (size_t)sl->res.n_output * pw, probe, sizeof(float) * pw);
        sl->res.n_probe = np;
    }
    sl->res.output_ids[sl->res.n_output] = tok;
    sl->res.token_t_ns[sl->res.n_output] = t_ns;
    sl->res.margins[sl->res.n_output] = margin;
    sl->res.n_output++;
    return K25_OK;
}

int k25_attn_probe_layers(int n_layers, int out[3])
{
    int n = 0, cand[3] = {0, n_layers / 2, n_layers - 1};
    for (int i = 0; i < 3; i++)
        if (cand[i] >= 0 && (n == 0 || cand[i] > out[n - 1]))
            out[n++] = cand[i];
    return n;
}

/*
 * Compresses one sequence after a step (pool.compress) through the backend,
 * with the options kvcompress.c's policy gives for a prefill chunk or a
 * decode token, and logs what it removed.
 */
static int compress_seq(struct k25_engine *e, struct k25_slot *sl, bool prefill, struct k25_error *err)
{
    struct k25_kv_compress_opts o;
    k25_kv_compress_opts_for(&e->cfg, &e->pool, prefill, &o);
    int64_t pr = sl->seq.pruned_slots, mg = sl->seq.merged_slots;
    int removed = 0, rc = K25_BE(e)->kv_compact(&e->be, &e->pool, &sl->seq, &o, &removed, err);
    if (removed > 0) /* compaction moved slots anywhere past the sinks: every tier copy is stale */
        sl->seq.tier_dirty_from = 0;
    if (rc == K25_OK && removed > 0 && k25_log_on(&e->log, K25_LOG_DEBUG)) {
        double hl = (double)e->pool.n_layers * e->pool.n_kv_heads;
        k25_log_write(&e->log, K25_LOG_DEBUG, "KV_CACHE",
                      "req_id=%s event=prune tokens=%.1f positions=%d slots=%d", sl->res.id,
                      (double)(sl->seq.pruned_slots - pr) / hl, sl->seq.n_pos, sl->seq.n_tokens);
        k25_log_write(&e->log, K25_LOG_DEBUG, "KV_CACHE",
                      "req_id=%s event=merge tokens=%.1f threshold=%.3f positions=%d slots=%d", sl->res.id,
                      (double)(sl->seq.merged_slots - mg) / hl, o.merge_threshold, sl->seq.n_pos,
                      sl->seq.n_tokens);
    }
    return rc;
}

/* Fills the result's KV compression figures from the sequence before its blocks are freed. */
static void kv_result_stats(struct k25_engine *e, struct k25_slot *sl)
{
    struct k25_kv_layout lay;
    k25_kv_layout(&e->cfg, &e->model->shape, &lay);
    double hl = (double)e->pool.n_layers * e->pool.n_kv_heads;
    sl->res.kv_tokens_pruned = (double)sl->seq.pruned_slots / hl;
    sl->res.kv_tokens_merged = (double)sl->seq.merged_slots / hl;
    sl->res.kv_slots = sl->seq.n_tokens;
    sl->res.kv_block_reads = sl->seq.tier_reads;
    sl->res.kv_block_hits = sl->seq.tier_hits;
    sl->res.kv_cache_hit_rate = sl->seq.tier_reads > 0 ? (double)sl->seq.tier_hits / sl->seq.tier_reads : 1.0;
    sl->res.kv_tier_wait_ns = sl->seq.tier_wait_ns;
    sl->res.kv_tier_bytes_moved = sl->seq.tier_bytes;
    sl->res.kv_bytes_before = (int64_t)(lay.bytes_per_token * sl->seq.n_pos + 0.5);
    sl->res.kv_bytes_after = (int64_t)((lay.bytes_per_token + lay.meta_bytes_per_token) * sl->seq.n_tokens + 0.5);
    if (k25_log_on(&e->log, K25_LOG_DEBUG) && e->pool.compress)
        k25_log_write(&e->log, K25_LOG_DEBUG, "KV_CACHE",
                      "req_id=%s tokens_pruned=%.1f tokens_merged=%.1f kv_bytes_before=%lld kv_bytes_after=%lld",
                      sl->res.id, sl->res.kv_tokens_pruned, sl->res.kv_tokens_merged,
                      (long long)sl->res.kv_bytes_before, (long long)sl->res.kv_bytes_after);
}

/* Whether the output now ends with one of the request's stop sequences. */
static bool ends_with_stop(const struct k25_slot *sl)
{
    for (int i = 0; i < sl->n_stop; i++) {
        int n = sl->stop_len[i];
        if (n <= sl->res.n_output &&
            !memcmp(sl->res.output_ids + sl->res.n_output - n, sl->stop[i], sizeof(int32_t) * (size_t)n))
            return true;
    }
    return false;
}

/* Whether the last output token is one of the model's EOS ids (not while teacher-forced: a
 * replay follows the stored tokens to their end). */
static bool ends_with_eos(const struct k25_engine *e, const struct k25_slot *sl)
{
    const struct k25_model_shape *sh = k25_model_get_shape(e->model);
    if (sl->ignore_eos || sh->n_eos == 0 || sl->res.n_output == 0 || sl->res.n_output <= sl->n_forced)
        return false;
    int32_t last = sl->res.output_ids[sl->res.n_output - 1];
    for (int i = 0; i < sh->n_eos; i++)
        if (sh->eos_ids[i] == last)
            return true;
    return false;
}

/*
 * Completes a request (running, or waiting when cancelled): result
 * figures, blocks back to the pool; queue.c writes its done record and
 * emits its FINISH event at the next k25_queue_flush.  now: the engine
 * clock when it ran to its end (a degraded-service sample), 0 otherwise.
 */
void k25_engine_finish(struct k25_engine *e, int h, enum k25_finish_reason f, uint64_t now)
{
    struct k25_slot *sl = e->slots[h];
    sl->res.state = K25_REQ_COMPLETED;
    sl->res.finish = f;
    sl->res.finish_t_ns = k25_now_ns();
    if (sl->seq.ids) {
        kv_result_stats(e, sl);
        prefix_publish(e, sl);
        struct k25_error terr;
        if (e->tier && k25_kv_tier_forget(e->tier, &sl->seq, &terr) != K25_OK) /* only with prefix caching */
            k25_log_write(&e->log, K25_LOG_INFO, "KV_CACHE", "req_id=%s event=tier_error %s", sl->res.id, terr.msg);
        k25_kv_seq_release(&e->pool, &sl->seq, k25_log_on(&e->log, K25_LOG_DEBUG) ? log_block_free : NULL, e);
    }
    e->pool.reserved -= sl->reserved_blocks;
    sl->reserved_blocks = 0;
    k25_queue_ended(e, h, now);
}

/*
 * Threads for one step.  Every parallel region costs a fork-join, and on a
 * loaded machine a descheduled worker stalls each region for a scheduler
 * time slice (decode of `tiny` on 2 threads fell from ~800 to ~10 tok/s
 * beside a second busy process).  A step whose work is too small to gain
 * from threads - a few decode tokens of a small model - runs on one.  The
 * choice depends only on the step's tokens and the configured count, so the
 * same config gives the same arithmetic.  (It matters: OpenBLAS's Haswell,
 * Zen and Prescott SGEMM kernels round differently for different thread
 * counts and row counts M - last bits only, ~1e-6 on tiny's logits - so
 * results are bit-identical for the same config, thread count and batch
 * shapes, and within the token-identity rule's tolerance otherwise;
 * docs/engine.md.)
 */
#define K25_SERIAL_STEP_FLOPS 2e7
static int step_threads(const struct k25_engine *e, const struct k25_span *spans, int n)
{
    const struct k25_model_shape *s = &e->model->shape;
    double per_token = 2.0 * (double)(k25_model_param_count(s) - (int64_t)s->vocab_size * s->dim);
    double flops = 0;
    for (int i = 0; i < n; i++)
        flops += per_token * spans[i].n +
                 4.0 * spans[i].n * (spans[i].pos0 + spans[i].n) * (double)s->n_heads * s->head_dim * s->n_layers;
    return flops < K25_SERIAL_STEP_FLOPS ? 1 : e->threads;
}

/*
 * Runs the step's spans: one forward pass, or two when degraded requests
 * share the step (the full model's spans first, then the degraded ones
 * over the first degraded_layers layers).  Reorders spans/span_h stably.
 */
static int forward_groups(struct k25_engine *e, struct k25_span *spans, int *span_h, int n, uint64_t *t_deg,
                          struct k25_error *err)
{
    int n_deg = 0;
    *t_deg = 0;
    for (int i = 0; i < n; i++)
        n_deg += e->slots[span_h[i]]->res.degraded;
    if (n_deg == 0)
        return k25_forward(e, spans, n, e->model->shape.n_layers, err);
    /* the degraded model's pass first: its tokens are out (stamped *t_deg) while the full model runs */
    struct k25_span tmp[n];
    int th[n], a = 0, b = n_deg;
    for (int i = 0; i < n; i++) {
        int at = e->slots[span_h[i]]->res.degraded ? a++ : b++;
        tmp[at] = spans[i];
        th[at] = span_h[i];
    }
    for (int i = 0; i < n; i++) {
        spans[i] = tmp[i];
        span_h[i] = th[i];
    }
    int rc = k25_forward(e, spans, n_deg, e->degraded_layers, err);
    *t_deg = k25_queue_now(e);
    if (rc == K25_OK && n_deg < n)
        rc = k25_forward(e, spans + n_deg, n - n_deg, e->model->shape.n_layers, err);
    return rc;
}

/*
 * k25_engine_step (k25.h): admit, batch decode tokens then prefill chunks,
 * forward, sample, retire, hand KV back to the tiers.  Over ~120 lines on
 * purpose: it is one sequence whose order is the scheduler's contract
 * (docs/engine.md "One step of the engine"), best read whole; its self-contained parts are already
 * named (forward_groups, compress_seq, append_token, the queue's verbs).
 */
int k25_engine_step(k25_engine_t *e, struct k25_error *err)
{
    k25_queue_announce(e);
    k25_queue_admit(e);
    if (e->n_running == 0) {
        k25_queue_breaker_tick(e, k25_queue_now(e));
        return K25_OK;
    }

    const int V = e->model->shape.vocab_size;
    int n = e->n_running, n_spans = 0, budget = e->cfg.max_num_batched_tokens, rc = K25_OK;
    bool has_prefill = false;
    struct k25_span spans[n];
    int span_h[n];
    const struct k25_model_shape *ms = &e->model->shape;
    int pl[3];
    size_t pw = (size_t)k25_attn_probe_layers(ms->n_layers, pl) * ms->n_heads * ms->head_dim;
    float *logit_buf = malloc(sizeof(float) * (size_t)n * V);
    float *probe_buf = malloc(sizeof(float) * (size_t)n * pw);
    if (!logit_buf || !probe_buf) {
        free(logit_buf);
        free(probe_buf);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }

    /* decode tokens first: one per sequence past its prefill */
    for (int i = 0; i < n && budget > 0; i++) {
        struct k25_slot *sl = e->slots[e->running[i]];
        if (sl->res.state != K25_REQ_DECODE)
            continue;
        sl->seq.tier_spans = sl->spans.first ? &sl->spans : NULL; /* hotness: its span table */
        spans[n_spans] = (struct k25_span){&sl->seq, &sl->res.output_ids[sl->res.n_output - 1], 1,
                                           sl->seq.n_pos, logit_buf + (size_t)n_spans * V,
                                           sl->keep_attn ? probe_buf + (size_t)n_spans * pw : NULL};
        span_h[n_spans++] = e->running[i];
        budget--;
    }
    /* then prefill chunks within the remaining budget.  The first pick rotates among the prefilling
     * sequences from step to step (admission order otherwise), so one long prompt whose chunks fill
     * the budget cannot hold back the prefill of every request behind it: with k sequences
     * prefilling, each goes first at least once in k steps (docs/engine.md "Batch") */
    int pre[n], n_pre = 0;
    for (int i = 0; i < n; i++)
        if (e->slots[e->running[i]]->res.state == K25_REQ_PREFILL)
            pre[n_pre++] = i;
    const int pre_start = n_pre > 0 ? (int)(e->stats.steps % n_pre) : 0;
    for (int k = 0; k < n_pre; k++) {
        const int i = pre[(pre_start + k) % n_pre];
        struct k25_slot *sl = e->slots[e->running[i]];
        int left = sl->res.n_input - sl->n_prefilled;
        int chunk;
        if (e->cfg.disable_prefill_optimization) {
            if (has_prefill)
                break; /* one-pass prefill: one whole prompt per step */
            chunk = left;
        } else {
            if (budget <= 0)
                break;
            chunk = left < e->cfg.prefill_chunk_size ? left : e->cfg.prefill_chunk_size;
            chunk = chunk < budget ? chunk : budget;
            budget -= chunk;
        }
        bool last = chunk == left;
        sl->seq.tier_spans = sl->spans.first ? &sl->spans : NULL;
        spans[n_spans] = (struct k25_span){&sl->seq, sl->prompt + sl->n_prefilled, chunk, sl->n_prefilled,
                                           last ? logit_buf + (size_t)n_spans * V : NULL,
                                           last && sl->keep_attn ? probe_buf + (size_t)n_spans * pw : NULL};
        span_h[n_spans++] = e->running[i];
        has_prefill = true;
    }

    /* small steps run on one thread (see step_threads) */
    int nt = step_threads(e, spans, n_spans);
    if (nt != k25_threads_applied()) /* process-wide: another engine may have changed it */
        k25_threads_apply(nt);

    uint64_t t0 = k25_queue_now(e);
    uint64_t t_deg;
    if ((rc = forward_groups(e, spans, span_h, n_spans, &t_deg, err)) != K25_OK)
        goto out;
    if (e->step_hook)
        call_step_hook(e, spans, n_spans, t0);
    uint64_t t1 = k25_queue_now(e), dt = t1 - t0;
    /* occupancy: full when anything still waits (the engine cannot take more), else the batch's share */
    double occupancy = k25_queue_waiting(e) ? 1.0 : (double)e->n_running / e->cfg.max_batch_size;
    k25_breaker_record(&e->q.breaker, t0, t1, occupancy);
    k25_queue_breaker_tick(e, t1);
    k25_queue_step_timed(e, t0, t1);
    e->stats.steps++;
    e->stats.busy_ns += dt;
    if (has_prefill)
        e->stats.prefill_ns += dt;
    else
        e->stats.decode_ns += dt;

    /* degraded sequences are not compressed: their KV holds only the first degraded_layers layers */
    for (int i = 0; i < n_spans && e->pool.compress; i++)
        if (!e->slots[span_h[i]]->res.degraded &&
            (rc = compress_seq(e, e->slots[span_h[i]], e->slots[span_h[i]]->res.state == K25_REQ_PREFILL, err)) !=
                K25_OK)
            goto out;

    for (int i = 0; i < n_spans; i++) {
        int h = span_h[i];
        struct k25_slot *sl = e->slots[h];
        const uint64_t tt = sl->res.degraded && t_deg ? t_deg : t1; /* when its pass ended */
        if (sl->res.state == K25_REQ_PREFILL) {
            sl->n_prefilled += spans[i].n;
            sl->res.prefill_chunks++;
            sl->res.prefill_ns += dt;
            e->stats.prefill_tokens += spans[i].n;
            k25_engine_emit(e, K25_EV_PREFILL_CHUNK, h, -1, sl->res.prefill_chunks - 1, tt);
            if (!spans[i].logits)
                continue;
            sl->res.state = K25_REQ_DECODE;
            sl->res.prefill_done_t_ns = tt;
            k25_log_write(&e->log, K25_LOG_INFO, "PREFILL",
                          "req_id=%s seq_len=%d chunk_count=%d avg_time_per_chunk=%.1fms", sl->res.id,
                          sl->res.n_input, sl->res.prefill_chunks,
                          (double)sl->res.prefill_ns / 1e6 / sl->res.prefill_chunks);
        } else {
            e->stats.decode_tokens++;
        }
        int32_t tok = k25_sample(e, spans[i].logits, sl->temperature, sl->top_p, &sl->rng);
        /* the token-identity rule's input (k25.h): how far greedy was from another choice */
        float margin = sl->temperature >= K25_SAMPLE_GREEDY_BELOW ? NAN : k25_tok_margin(spans[i].logits, V, NULL);
        if (sl->res.n_output < sl->n_forced)
            tok = sl->forced[sl->res.n_output]; /* teacher forcing: the sampler state still advances */
        if ((rc = append_token(e, sl, tok, margin, spans[i].logits, spans[i].probe, tt, err)) != K25_OK)
            goto out;
        if (k25_log_on(&e->log, K25_LOG_DEBUG))
            k25_log_write(&e->log, K25_LOG_DEBUG, "DECODE", "req_id=%s token_id=%d kv_block_access=%s(%d) cache_hit=%s",
                          sl->res.id, tok, tier_names[sl->seq.tier_access], sl->seq.tier_access_id,
                          sl->seq.tier_step_hit ? "True" : "False");
        k25_engine_emit(e, K25_EV_TOKEN, h, tok, sl->res.n_output - 1, tt);
    }

    /* retire finished sequences, keeping the running list in order */
    int kept = 0;
    for (int i = 0; i < e->n_running; i++) {
        int h = e->running[i];
        struct k25_slot *sl = e->slots[h];
        enum k25_finish_reason f = K25_FINISH_NONE;
        if (sl->res.state == K25_REQ_DECODE && sl->res.n_output >= sl->max_new)
            f = K25_FINISH_LENGTH;
        else if (sl->res.state == K25_REQ_DECODE && (ends_with_stop(sl) || ends_with_eos(e, sl)))
            f = K25_FINISH_STOP;
        if (f != K25_FINISH_NONE) {
            k25_engine_finish(e, h, f, t1);
        } else {
            e->running[kept++] = h;
        }
    }
    e->n_running = kept;
    k25_queue_flush(e); /* done records durable (one fsync), then the FINISH events */

    /* KV tiers: the step's sequences give back what need not stay hot, and the cold blocks of
     * the next decode step start loading while the caller works (double buffering) */
    for (int i = 0; e->tier && i < n_spans; i++) {
        struct k25_slot *sl = e->slots[span_h[i]];
        if (sl->res.state != K25_REQ_PREFILL && sl->res.state != K25_REQ_DECODE)
            continue; /* finished: its blocks went back with it */
        if ((rc = k25_kv_tier_release(e->tier, &sl->seq, err)) != K25_OK)
            goto out;
        k25_kv_tier_prefetch(e->tier, &sl->seq); /* its next step (decode or chunk) reads every block */
    }
    if (e->tier)
        rc = k25_kv_tier_end_step(e->tier, err);

out:
    free(logit_buf);
    free(probe_buf);
    return rc;
}

int k25_engine_run(k25_engine_t *e, struct k25_error *err)
{
    while (!k25_engine_idle(e)) {
        int rc = k25_engine_step(e, err);
        if (rc != K25_OK)
            return rc;
    }
    return K25_OK;
}

const struct k25_result *k25_engine_result(const k25_engine_t *e, int handle)
{
    if (handle < 0 || handle >= e->n_slots || !e->slots[handle])
        return NULL;
    return &e->slots[handle]->res;
}

void k25_engine_get_stats(const k25_engine_t *e, struct k25_engine_stats *out)
{
    *out = e->stats;
    out->kv_blocks_in_use = e->pool.in_use;
    out->kv_blocks_peak = e->pool.peak_in_use;
    out->kv_blocks_capacity = e->pool.max_blocks;
    out->n_running = e->n_running;
    k25_queue_stats(e, out);
    if (e->tier) {
        struct k25_kv_tier_totals tt;
        k25_kv_tier_totals(e->tier, &tt);
        out->kv_block_reads = tt.reads;
        out->kv_block_hits = tt.hits;
        out->kv_tier_wait_ns = tt.wait_ns;
        out->kv_tier_max_step_wait_ns = tt.max_step_wait_ns;
        out->kv_tier_bytes_moved = tt.bytes_moved;
        out->kv_tier_copy_ns = tt.copy_ns;
        out->kv_tier_evictions = tt.evictions;
        out->kv_tier_promotions = tt.promotions;
        out->kv_tier_demotions = tt.demotions;
    }
    out->kv_cache_hit_rate = out->kv_block_reads > 0 ? (double)out->kv_block_hits / out->kv_block_reads : 1.0;
    struct k25_prefix_stats ps;
    k25_prefix_get_stats(&e->pool, &ps);
    out->prefix_lookups = ps.lookups;
    out->prefix_hits = ps.hits;
    out->prefix_hit_tokens = ps.hit_tokens;
    out->prefix_cached_blocks = ps.cached_blocks;
    out->prefix_evictions = ps.evictions;
}

const struct k25_config *k25_engine_config(const k25_engine_t *e)
{
    return &e->cfg;
}
