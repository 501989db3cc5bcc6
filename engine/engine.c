/*
 * engine.c - the engine object and its scheduler: continuous batching.
 *
 * Requests wait in a FIFO until admitted (at most max_batch_size run at
 * once; with a memory budget, only when the KV blocks for their prompt and
 * output can be reserved).  Each step builds one batch under the token
 * budget max_num_batched_tokens: first one decode token for every running
 * sequence that has finished its prefill (latency first), then prefill
 * chunks of up to prefill_chunk_size tokens for sequences still
 * prefilling, in admission order, until the budget is spent.  One forward
 * pass runs the whole batch; sequences whose last prompt chunk or decode
 * token ran get a sampled token; finished sequences free their blocks at
 * once, so a new request can join in the next step.
 *
 * Elastic queue (docs/engine.md "Elastic request queue"): the waiting FIFO
 * is the memory queue of queue_memory_capacity requests (high priority
 * goes ahead of the others and is never turned away).  Beyond it a request
 * spills to the durable disk queue (spill.c) as low priority, or, without
 * queue_spill_dir, is rejected with a reason.  Spilled requests move to
 * the memory queue in arrival order as it frees.  A request waiting longer
 * than queue_timeout_ms ends timed_out.  While the circuit breaker
 * (breaker.c) is open, new requests are marked degraded and run in their
 * own forward pass over the first degraded_layers layers.
 */
#include "engine.h"
#include "prefix.h"
#include "weights.h"

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

const char *k25_priority_name(enum k25_priority p)
{
    switch (p) {
    case K25_PRIORITY_HIGH: return "high";
    case K25_PRIORITY_STANDARD: return "standard";
    case K25_PRIORITY_LOW: return "low";
    }
    return "?";
}

int k25_priority_parse(const char *name, enum k25_priority *out, struct k25_error *err)
{
    static const enum k25_priority all[] = {K25_PRIORITY_HIGH, K25_PRIORITY_STANDARD, K25_PRIORITY_LOW};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (name && !strcmp(name, k25_priority_name(all[i]))) {
            *out = all[i];
            return K25_OK;
        }
    return k25_error_set(err, K25_EINVAL, NULL, 0, "priority", "unknown priority '%s' (high, standard or low)",
                         name ? name : "");
}

static uint64_t default_clock(void *user)
{
    (void)user;
    return k25_now_ns();
}

/* The engine's clock (k25_now_ns unless a test replaced it). */
static inline uint64_t now_ns(const struct k25_engine *e)
{
    return e->clock(e->clock_user);
}

void k25_engine_set_clock(k25_engine_t *e, k25_clock_fn fn, void *user)
{
    e->clock = fn ? fn : default_clock;
    e->clock_user = fn ? user : NULL;
    k25_breaker_init(&e->breaker, &e->cfg, now_ns(e)); /* its window starts on the new clock */
}

void k25_engine_set_spill_io(k25_engine_t *e, const struct k25_spill_io *io)
{
    k25_spill_set_io(&e->spill, io);
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

static int submit(struct k25_engine *e, const struct k25_request *req, const struct k25_spill_entry *replayed,
                  int *handle, struct k25_error *err);

/*
 * Opens the spill log and re-submits its unfinished requests (arrival
 * order) into the disk queue.  A request this engine cannot take (a log
 * written for another model) is marked done with a warning in the log.
 */
static int spill_start(struct k25_engine *e, const struct k25_spill_io *io, struct k25_error *err)
{
    struct k25_spill_replay rep;
    int rc = k25_spill_open(&e->spill, e->cfg.queue_spill_dir, io, &rep, err);
    if (rc != K25_OK)
        return rc;
    e->replay.n_records = rep.n_records;
    e->replay.n_done = rep.n_done;
    e->replay.torn_bytes = rep.torn_bytes;
    snprintf(e->replay.warning, sizeof(e->replay.warning), "%s", rep.warning);
    if (rep.torn_bytes > 0)
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=torn_record bytes=%lld path=%s",
                      (long long)rep.torn_bytes, e->spill.path);
    if (rep.n_pend > 0 && !(e->replayed = malloc(sizeof(int) * (size_t)rep.n_pend))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (replay)");
        goto out_free;
    }
    for (int i = 0; i < rep.n_pend; i++) {
        struct k25_error serr;
        int h;
        if ((rc = submit(e, &rep.pend[i].req, &rep.pend[i], &h, &serr)) == K25_OK) {
            e->replayed[e->replay.n_replayed++] = h;
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=replay req_id=%s seq=%llu", rep.pend[i].id,
                          (unsigned long long)rep.pend[i].seq);
            continue;
        }
        if (rc == K25_ENOMEM)
            goto out_free;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=replay_skip req_id=%s seq=%llu reason=\"%s\"",
                      rep.pend[i].id, (unsigned long long)rep.pend[i].seq, serr.msg);
        if ((rc = k25_spill_done(&e->spill, rep.pend[i].seq, err)) != K25_OK)
            goto out_free;
    }
    e->replay.handles = e->replayed;
    rc = K25_OK;
out_free:
    k25_spill_replay_free(&rep);
    return rc;
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
    e->spill.fd = -1;
    e->clock = default_clock;
    const struct k25_backend *B = k25_backend_find(cfg->backend); /* validated: built in */
    if ((rc = k25_bctx_init(&e->be, B, &e->acct, err)) != K25_OK)
        goto out_free;
    if ((rc = weights_map(e, err)) != K25_OK)
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
        int64_t scratch = k25_attn_scratch_bytes(cfg->attention, s->n_heads, s->n_kv_heads, s->head_dim,
                                                 cfg->kv_block_size, cfg->kv_cache_dtype, 1, step_tokens,
                                                 step_tokens, threads);
        int64_t left = budget - weights - k25_activation_bytes(s, step_tokens, NULL) - scratch;
        max_blocks = left / (int64_t)probe.block_bytes;
        if (max_blocks < 1) {
            rc = k25_error_set(err, K25_ERANGE, NULL, 0, "memory_budget_mb",
                               "%lld MB cannot hold the weights (%.1f MB), activations and one KV block",
                               (long long)cfg->memory_budget_mb, (double)weights / (1 << 20));
            goto out_free;
        }
    }
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
    e->running = k25_alloc_acct(&e->acct, K25_MEM_OTHER, sizeof(int) * (size_t)cfg->max_batch_size);
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
    k25_breaker_init(&e->breaker, cfg, now_ns(e));
    if (cfg->queue_spill_dir[0] && (rc = spill_start(e, io, err)) != K25_OK) {
        *out = e;
        k25_engine_destroy(e);
        *out = NULL;
        return rc;
    }
    if (e->replay.torn_bytes > 0 && err) { /* a warning, not a failure (k25.h) */
        k25_error_set(err, K25_EFORMAT, e->spill.path, 0, "queue_spill_dir", "%s", e->replay.warning);
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

static void slot_free(struct k25_engine *e, struct k25_slot *sl)
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
    free(sl);
}

void k25_engine_destroy(k25_engine_t *e)
{
    if (!e)
        return;
    if (k25_threads_applied() != e->threads)
        k25_threads_apply(e->threads); /* leave the pools as configured */
    for (int i = 0; i < e->n_slots; i++)
        slot_free(e, e->slots[i]);
    free(e->slots);
    free(e->waiting);
    free(e->spillq);
    free(e->announce);
    free(e->replayed);
    k25_spill_close(&e->spill);
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

static void emit(struct k25_engine *e, enum k25_event_type type, int handle, int32_t tok, int index,
                 uint64_t t_ns)
{
    if (!e->cb)
        return;
    struct k25_event ev = {type, handle, e->slots[handle]->res.id, tok, index, t_ns};
    e->cb(&ev, e->cb_user);
}

/* Makes room for one more int in a growable array. */
static int grow_ints(int **a, int *cap, int n)
{
    if (n < *cap)
        return K25_OK;
    int ncap = *cap ? 2 * *cap : 64;
    int *na = realloc(*a, sizeof(int) * (size_t)ncap);
    if (!na)
        return K25_ENOMEM;
    *a = na;
    *cap = ncap;
    return K25_OK;
}

/* Makes room at the end of a FIFO [*head, *end) of capacity *cap. */
static int grow_fifo(int **a, int *head, int *end, int *cap)
{
    if (*end == *cap && *head > 0) { /* compact before growing */
        memmove(*a, *a + *head, sizeof(int) * (size_t)(*end - *head));
        *end -= *head;
        *head = 0;
    }
    return grow_ints(a, cap, *end);
}

static int mem_waiting(const struct k25_engine *e)
{
    return e->wait_end - e->wait_head;
}

static void breaker_tick(struct k25_engine *e, uint64_t now);

int k25_engine_submit(k25_engine_t *e, const struct k25_request *req, int *handle, struct k25_error *err)
{
    return submit(e, req, NULL, handle, err);
}

/*
 * Appends req's record (with priority prio) to the spill log, fsync'd,
 * before the request is acknowledged: with a spill folder every accepted
 * request is durable, whichever queue it waits in, so a crash loses none
 * that a client saw accepted (replayed at the next start).  On failure the
 * slot is freed and nothing is accepted.
 */
static int log_accepted(struct k25_engine *e, struct k25_slot *sl, const struct k25_request *req,
                        enum k25_priority prio, struct k25_error *err)
{
    struct k25_request r = *req;
    r.priority = prio;
    r.id = sl->res.id;
    int rc = k25_spill_append(&e->spill, &r, &sl->spill_seq, err);
    if (rc != K25_OK) { /* nothing accepted: the caller must not acknowledge it */
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                      "req_id=%s priority=%s queue_time=0ms degraded=%s state=rejected reason=spill_failed", sl->res.id,
                      k25_priority_name(req->priority), sl->res.degraded ? "True" : "False");
        slot_free(e, sl);
        return rc;
    }
    sl->spill_live = true;
    return K25_OK;
}

/*
 * Validates and copies a request, then routes it: memory queue, disk queue
 * (spill record fsync'd first), or rejected on arrival (memory queue full,
 * no spill tier).  replayed: a request read back from the spill log at
 * create (already in the log: goes to the disk queue as it was).
 */
static int submit(struct k25_engine *e, const struct k25_request *req, const struct k25_spill_entry *replayed,
                  int *handle, struct k25_error *err)
{
    const int V = e->model->shape.vocab_size;
    const char *id = req->id ? req->id : "";
    if (req->n_input <= 0)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "input_ids", "request '%s': empty prompt", id);
    for (int i = 0; i < req->n_input; i++)
        if (req->input_ids[i] < 0 || req->input_ids[i] >= V)
            return k25_error_set(err, K25_EINVAL, NULL, 0, "input_ids",
                                 "request '%s': token %d is %d, outside the vocabulary [0, %d)", id, i,
                                 req->input_ids[i], V);
    if (req->n_forced < 0 || (req->n_forced > 0 && !req->forced_ids))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "forced_ids", "request '%s': bad forced tokens", id);
    for (int i = 0; i < req->n_forced; i++)
        if (req->forced_ids[i] < 0 || req->forced_ids[i] >= V)
            return k25_error_set(err, K25_EINVAL, NULL, 0, "forced_ids",
                                 "request '%s': forced token %d is %d, outside the vocabulary [0, %d)", id, i,
                                 req->forced_ids[i], V);
    if ((unsigned)req->priority > K25_PRIORITY_LOW)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "priority", "request '%s': unknown priority %d", id,
                             (int)req->priority);
    if (req->max_new_tokens < 0)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "max_new_tokens",
                             "request '%s': negative max_new_tokens %d", id, req->max_new_tokens);
    if (req->has_sampling && !(req->temperature >= 0.0 && req->temperature <= 100.0))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "temperature",
                             "request '%s': temperature %g outside [0, 100]", id, req->temperature);
    if (req->has_sampling && !(req->top_p > 0.0 && req->top_p <= 1.0))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "top_p", "request '%s': top_p %g outside (0, 1]", id,
                             req->top_p);
    if (req->n_stop < 0 || (req->n_stop > 0 && (!req->stop_ids || !req->stop_lens)))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "stop", "request '%s': bad stop sequences", id);
    for (int i = 0; i < req->n_stop; i++) {
        if (req->stop_lens[i] < 1 || !req->stop_ids[i])
            return k25_error_set(err, K25_EINVAL, NULL, 0, "stop", "request '%s': stop sequence %d is empty", id, i);
        for (int j = 0; j < req->stop_lens[i]; j++)
            if (req->stop_ids[i][j] < 0 || req->stop_ids[i][j] >= V)
                return k25_error_set(err, K25_EINVAL, NULL, 0, "stop",
                                     "request '%s': stop sequence %d has token %d outside the vocabulary", id, i,
                                     req->stop_ids[i][j]);
    }

    if (e->n_slots == e->cap_slots) {
        int ncap = e->cap_slots ? 2 * e->cap_slots : 64;
        struct k25_slot **ns = realloc(e->slots, sizeof(*ns) * (size_t)ncap);
        if (!ns)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        e->slots = ns;
        e->cap_slots = ncap;
    }
    if (grow_fifo(&e->waiting, &e->wait_head, &e->wait_end, &e->wait_cap) != K25_OK ||
        grow_fifo(&e->spillq, &e->spill_head, &e->spill_end, &e->spill_cap) != K25_OK ||
        grow_ints(&e->announce, &e->announce_cap, e->n_announce) != K25_OK)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");

    struct k25_slot *sl = calloc(1, sizeof(*sl));
    if (!sl || !(sl->prompt = malloc(sizeof(int32_t) * (size_t)req->n_input))) {
        free(sl);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    memcpy(sl->prompt, req->input_ids, sizeof(int32_t) * (size_t)req->n_input);
    snprintf(sl->res.id, sizeof(sl->res.id), "%s", id);
    sl->res.state = K25_REQ_WAITING;
    sl->res.n_input = req->n_input;
    sl->res.submit_t_ns = now_ns(e);
    int cap = e->cfg.decode_max_tokens;
    sl->max_new = (req->max_new_tokens > 0 && req->max_new_tokens < cap) ? req->max_new_tokens : cap;
    sl->keep_logits = req->keep_logits;
    sl->keep_attn = req->keep_attn;
    if (req->n_forced > 0) {
        if (!(sl->forced = malloc(sizeof(int32_t) * (size_t)req->n_forced))) {
            free(sl->prompt);
            free(sl);
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
        memcpy(sl->forced, req->forced_ids, sizeof(int32_t) * (size_t)req->n_forced);
        sl->n_forced = req->n_forced;
    }
    if (req->n_stop > 0) {
        sl->stop = calloc((size_t)req->n_stop, sizeof(*sl->stop));
        sl->stop_len = malloc(sizeof(int) * (size_t)req->n_stop);
        sl->n_stop = sl->stop && sl->stop_len ? req->n_stop : 0;
        for (int i = 0; i < sl->n_stop; i++) {
            if (!(sl->stop[i] = malloc(sizeof(int32_t) * (size_t)req->stop_lens[i]))) {
                slot_free(e, sl);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            memcpy(sl->stop[i], req->stop_ids[i], sizeof(int32_t) * (size_t)req->stop_lens[i]);
            sl->stop_len[i] = req->stop_lens[i];
        }
        if (sl->n_stop == 0) {
            slot_free(e, sl);
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
    }
    if (req->has_sampling) {
        sl->temperature = req->temperature;
        sl->top_p = req->top_p;
        sl->rng = req->seed ? req->seed : 1; /* xorshift needs a non-zero state */
    } else {
        sl->temperature = e->cfg.temperature;
        sl->top_p = e->cfg.top_p;
        sl->rng = k25_sample_seed(e->cfg.seed, sl->res.id);
    }

    /* routing: every allocation is done, so after a spill append nothing can fail */
    int h = e->n_slots, rc0;
    breaker_tick(e, sl->res.submit_t_ns);
    sl->res.priority = req->priority;
    sl->res.degraded = e->breaker.open;
    if (replayed) {
        sl->res.spilled = sl->res.replayed = true;
        sl->res.priority = K25_PRIORITY_LOW;
        sl->spill_seq = replayed->seq;
        sl->spill_live = true;
        e->spillq[e->spill_end++] = h;
        e->stats.spilled_requests++;
        e->stats.replayed_requests++;
    } else if (req->priority != K25_PRIORITY_HIGH && mem_waiting(e) >= e->cfg.queue_memory_capacity) {
        if (e->spill.fd >= 0) {
            int rc = log_accepted(e, sl, req, K25_PRIORITY_LOW, err);
            if (rc != K25_OK)
                return rc;
            sl->res.spilled = true;
            sl->res.priority = K25_PRIORITY_LOW;
            e->spillq[e->spill_end++] = h;
            e->stats.spilled_requests++;
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill req_id=%s seq=%llu spill_depth=%d",
                          sl->res.id, (unsigned long long)sl->spill_seq, e->spill_end - e->spill_head);
        } else {
            sl->res.state = K25_REQ_REJECTED;
            sl->res.finish_t_ns = sl->res.submit_t_ns;
            snprintf(sl->res.reason, sizeof(sl->res.reason),
                     "queue full: %d requests waiting (queue_memory_capacity), no queue_spill_dir",
                     mem_waiting(e));
            e->announce[e->n_announce++] = h;
            e->stats.rejected_queue_full++;
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                          "req_id=%s priority=%s queue_time=0ms degraded=%s state=rejected reason=queue_full",
                          sl->res.id, k25_priority_name(req->priority), sl->res.degraded ? "True" : "False");
        }
    } else if (e->spill.fd >= 0 && (rc0 = log_accepted(e, sl, req, req->priority, err)) != K25_OK) {
        return rc0; /* with a spill log every accepted request is durable before it is acknowledged */
    } else if (req->priority == K25_PRIORITY_HIGH) { /* ahead of every non-high request */
        int at = e->wait_head;
        while (at < e->wait_end && e->slots[e->waiting[at]]->res.priority == K25_PRIORITY_HIGH)
            at++;
        memmove(e->waiting + at + 1, e->waiting + at, sizeof(int) * (size_t)(e->wait_end - at));
        e->waiting[at] = h;
        e->wait_end++;
    } else {
        e->waiting[e->wait_end++] = h;
    }
    if (sl->res.degraded)
        e->stats.degraded_requests++;
    sl->res.ttft_sla_ms = sl->res.degraded                           ? e->cfg.degraded_ttft_ms
                          : sl->res.priority == K25_PRIORITY_LOW ? e->cfg.queue_low_priority_ttft_ms
                                                                 : 0;
    e->n_slots++;
    e->slots[h] = sl;
    *handle = h;
    return K25_OK;
}

/* Writes the request's done record when it has a live one in the spill log. */
static void spill_mark_done(struct k25_engine *e, struct k25_slot *sl)
{
    if (!sl->spill_live)
        return;
    sl->spill_live = false;
    struct k25_error err;
    if (k25_spill_done(&e->spill, sl->spill_seq, &err) != K25_OK) /* it may come back at replay */
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill_error req_id=%s reason=\"%s\"", sl->res.id,
                      err.msg);
}

/* The [QUEUE] line of a request leaving the queue (admitted, timed out, rejected). */
static void log_queue(struct k25_engine *e, const struct k25_slot *sl, uint64_t now, const char *state,
                      const char *reason)
{
    if (!k25_log_on(&e->log, K25_LOG_INFO))
        return;
    k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                  "req_id=%s priority=%s queue_time=%.0fms degraded=%s spilled=%s state=%s%s%s", sl->res.id,
                  k25_priority_name(sl->res.priority), (double)(now - sl->res.submit_t_ns) / 1e6,
                  sl->res.degraded ? "True" : "False", sl->res.spilled ? "True" : "False", state,
                  reason ? " reason=" : "", reason ? reason : "");
}

/* Ends a waiting request (already out of its queue) as rejected or timed out. */
static void end_waiting(struct k25_engine *e, int h, enum k25_req_state st, uint64_t now)
{
    struct k25_slot *sl = e->slots[h];
    sl->res.state = st;
    sl->res.finish_t_ns = now;
    spill_mark_done(e, sl);
    emit(e, K25_EV_FINISH, h, -1, 0, now);
}

/* Times out requests of one FIFO [*head, *end) that waited longer than queue_timeout_ms, keeping the order. */
static void expire_fifo(struct k25_engine *e, int *q, int head, int *end, uint64_t now)
{
    uint64_t lim = (uint64_t)e->cfg.queue_timeout_ms * 1000000ull;
    int w = head;
    for (int i = head; i < *end; i++) {
        int h = q[i];
        struct k25_slot *sl = e->slots[h];
        if (now - sl->res.submit_t_ns <= lim) {
            q[w++] = h;
            continue;
        }
        snprintf(sl->res.reason, sizeof(sl->res.reason), "waited %.0f ms in the %s queue (queue_timeout_ms %d)",
                 (double)(now - sl->res.submit_t_ns) / 1e6, sl->res.spilled ? "disk" : "memory",
                 e->cfg.queue_timeout_ms);
        e->stats.timed_out_requests++;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=timeout req_id=%s", sl->res.id);
        log_queue(e, sl, now, "timed_out", "queue_timeout");
        end_waiting(e, h, K25_REQ_TIMED_OUT, now);
    }
    *end = w;
}

/* Moves spilled requests to the memory queue, in arrival order, while it has room. */
static void unspill(struct k25_engine *e)
{
    while (e->spill_head < e->spill_end && mem_waiting(e) < e->cfg.queue_memory_capacity) {
        if (grow_fifo(&e->waiting, &e->wait_head, &e->wait_end, &e->wait_cap) != K25_OK)
            return; /* out of memory: stays on disk, tried again next step */
        e->waiting[e->wait_end++] = e->spillq[e->spill_head++];
    }
}

/*
 * Prefix caching: an admitted request takes the cached blocks that match
 * its prompt's leading full blocks (less the last token, which must be
 * prefilled for logits), and its prefill starts after them.  Its
 * reservation stays the whole sequence's (shared blocks are counted once
 * in the pool, so reservations still bound it).  Degraded requests neither
 * take nor give blocks: their KV has fewer layers.  Out of memory: a miss.
 */
static void prefix_attach(struct k25_engine *e, struct k25_slot *sl)
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

/* Admits waiting requests while the batch and the KV budget allow. */
static void admit(struct k25_engine *e)
{
    struct k25_kv_pool *p = &e->pool;
    uint64_t now = now_ns(e);
    if (e->cfg.queue_timeout_ms > 0) {
        expire_fifo(e, e->waiting, e->wait_head, &e->wait_end, now);
        expire_fifo(e, e->spillq, e->spill_head, &e->spill_end, now);
    }
    unspill(e);
    while (e->wait_head < e->wait_end && e->n_running < e->cfg.max_batch_size) {
        int h = e->waiting[e->wait_head];
        struct k25_slot *sl = e->slots[h];
        /* the blocks the sequence can hold at once: with compression, the kept
         * slots plus the slack compression needs (k25_kv_peak_slots) */
        int64_t need = k25_kv_blocks_for(p, k25_kv_peak_slots(&e->cfg, sl->res.n_input,
                                                               (int64_t)sl->res.n_input + sl->max_new));
        if (p->max_blocks > 0) {
            if (need > p->max_blocks) {
                e->wait_head++;
                snprintf(sl->res.reason, sizeof(sl->res.reason),
                         "needs %lld KV blocks, the memory budget holds %lld", (long long)need,
                         (long long)p->max_blocks);
                log_queue(e, sl, now, "rejected", "kv_budget");
                end_waiting(e, h, K25_REQ_REJECTED, now_ns(e));
                unspill(e);
                continue;
            }
            if (p->reserved + need > p->max_blocks)
                break; /* FIFO: wait until running requests free blocks */
            p->reserved += need;
            sl->reserved_blocks = need;
        }
        e->wait_head++;
        prefix_attach(e, sl);
        sl->res.state = K25_REQ_PREFILL;
        sl->res.admit_t_ns = now_ns(e);
        e->running[e->n_running++] = h;
        log_queue(e, sl, sl->res.admit_t_ns, "admitted", NULL);
        emit(e, K25_EV_ADMIT, h, -1, 0, sl->res.admit_t_ns);
        unspill(e);
    }
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

/* Completes a running request: result figures, blocks back to the pool, FINISH event. */
static void finish(struct k25_engine *e, int h, enum k25_finish_reason f)
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
    spill_mark_done(e, sl);
    emit(e, K25_EV_FINISH, h, -1, sl->res.n_output, sl->res.finish_t_ns);
}

void k25_engine_cancel(k25_engine_t *e, int handle, const char *reason)
{
    if (handle < 0 || handle >= e->n_slots || !e->slots[handle])
        return;
    struct k25_slot *sl = e->slots[handle];
    enum k25_req_state st = sl->res.state;
    if (st == K25_REQ_COMPLETED || st == K25_REQ_REJECTED || st == K25_REQ_TIMED_OUT)
        return;
    snprintf(sl->res.reason, sizeof(sl->res.reason), "%s", reason ? reason : "cancelled");
    if (st == K25_REQ_WAITING) { /* out of its FIFO (memory or disk), keeping the others' order */
        int w = e->wait_head;
        for (int i = e->wait_head; i < e->wait_end; i++)
            if (e->waiting[i] != handle)
                e->waiting[w++] = e->waiting[i];
        e->wait_end = w;
        w = e->spill_head;
        for (int i = e->spill_head; i < e->spill_end; i++)
            if (e->spillq[i] != handle)
                e->spillq[w++] = e->spillq[i];
        e->spill_end = w;
    } else {
        int kept = 0;
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i] != handle)
                e->running[kept++] = e->running[i];
        e->n_running = kept;
    }
    k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "req_id=%s state=cancelled", sl->res.id);
    finish(e, handle, K25_FINISH_CANCELLED);
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

/* Re-evaluates the circuit breaker at now and logs a transition. */
static void breaker_tick(struct k25_engine *e, uint64_t now)
{
    struct k25_breaker *b = &e->breaker;
    if (!b->enabled)
        return;
    int t = k25_breaker_update(b, now, atomic_load(&e->acct.total_cur));
    if (t == 0)
        return;
    if (t > 0)
        e->stats.breaker_opens++;
    k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                  "event=%s busy=%.3f memory=%.3f busy_threshold=%.2f memory_threshold=%.2f degraded_layers=%d",
                  t > 0 ? "breaker_open" : "breaker_close", b->busy, b->mem, b->busy_thr, b->mem_thr,
                  e->degraded_layers);
}

/* FINISH events of requests rejected on arrival (deferred so they come from a step, after submit returned). */
static void announce(struct k25_engine *e)
{
    for (int i = 0; i < e->n_announce; i++) {
        int h = e->announce[i];
        if (e->slots[h])
            emit(e, K25_EV_FINISH, h, -1, 0, e->slots[h]->res.finish_t_ns);
    }
    e->n_announce = 0;
}

/*
 * Runs the step's spans: one forward pass, or two when degraded requests
 * share the step (the full model's spans first, then the degraded ones
 * over the first degraded_layers layers).  Reorders spans/span_h stably.
 */
static int forward_groups(struct k25_engine *e, struct k25_span *spans, int *span_h, int n, struct k25_error *err)
{
    int n_full = 0;
    for (int i = 0; i < n; i++)
        n_full += !e->slots[span_h[i]]->res.degraded;
    if (n_full == n)
        return k25_forward(e, spans, n, e->model->shape.n_layers, err);
    struct k25_span tmp[n];
    int th[n], a = 0, b = n_full;
    for (int i = 0; i < n; i++) {
        int at = e->slots[span_h[i]]->res.degraded ? b++ : a++;
        tmp[at] = spans[i];
        th[at] = span_h[i];
    }
    for (int i = 0; i < n; i++) {
        spans[i] = tmp[i];
        span_h[i] = th[i];
    }
    int rc = n_full > 0 ? k25_forward(e, spans, n_full, e->model->shape.n_layers, err) : K25_OK;
    if (rc == K25_OK)
        rc = k25_forward(e, spans + n_full, n - n_full, e->degraded_layers, err);
    return rc;
}

int k25_engine_step(k25_engine_t *e, struct k25_error *err)
{
    announce(e);
    admit(e);
    if (e->n_running == 0) {
        breaker_tick(e, now_ns(e));
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
        spans[n_spans] = (struct k25_span){&sl->seq, &sl->res.output_ids[sl->res.n_output - 1], 1,
                                           sl->seq.n_pos, logit_buf + (size_t)n_spans * V,
                                           sl->keep_attn ? probe_buf + (size_t)n_spans * pw : NULL};
        span_h[n_spans++] = e->running[i];
        budget--;
    }
    /* then prefill chunks, in admission order, within the remaining budget */
    for (int i = 0; i < n; i++) {
        struct k25_slot *sl = e->slots[e->running[i]];
        if (sl->res.state != K25_REQ_PREFILL)
            continue;
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

    uint64_t t0 = now_ns(e);
    if ((rc = forward_groups(e, spans, span_h, n_spans, err)) != K25_OK)
        goto out;
    if (e->step_hook)
        call_step_hook(e, spans, n_spans, t0);
    uint64_t t1 = now_ns(e), dt = t1 - t0;
    /* occupancy: full when anything still waits (the engine cannot take more), else the batch's share */
    double occupancy = e->wait_head < e->wait_end || e->spill_head < e->spill_end
                           ? 1.0
                           : (double)e->n_running / e->cfg.max_batch_size;
    k25_breaker_record(&e->breaker, t0, t1, occupancy);
    breaker_tick(e, t1);
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
        if (sl->res.state == K25_REQ_PREFILL) {
            sl->n_prefilled += spans[i].n;
            sl->res.prefill_chunks++;
            sl->res.prefill_ns += dt;
            e->stats.prefill_tokens += spans[i].n;
            emit(e, K25_EV_PREFILL_CHUNK, h, -1, sl->res.prefill_chunks - 1, t1);
            if (!spans[i].logits)
                continue;
            sl->res.state = K25_REQ_DECODE;
            sl->res.prefill_done_t_ns = t1;
            k25_log_write(&e->log, K25_LOG_INFO, "PREFILL",
                          "req_id=%s seq_len=%d chunk_count=%d avg_time_per_chunk=%.1fms", sl->res.id,
                          sl->res.n_input, sl->res.prefill_chunks,
                          (double)sl->res.prefill_ns / 1e6 / sl->res.prefill_chunks);
        } else {
            e->stats.decode_tokens++;
        }
        int32_t tok = k25_sample(e, spans[i].logits, sl->temperature, sl->top_p, &sl->rng);
        /* the token-identity rule's input (k25.h): how far greedy was from another choice */
        float margin = sl->temperature > 0.0 ? NAN : k25_tok_margin(spans[i].logits, V, NULL);
        if (sl->res.n_output < sl->n_forced)
            tok = sl->forced[sl->res.n_output]; /* teacher forcing: the sampler state still advances */
        if ((rc = append_token(e, sl, tok, margin, spans[i].logits, spans[i].probe, t1, err)) != K25_OK)
            goto out;
        if (k25_log_on(&e->log, K25_LOG_DEBUG))
            k25_log_write(&e->log, K25_LOG_DEBUG, "DECODE", "req_id=%s token_id=%d kv_block_access=%s(%d) cache_hit=%s",
                          sl->res.id, tok, tier_names[sl->seq.tier_access], sl->seq.tier_access_id,
                          sl->seq.tier_step_hit ? "True" : "False");
        emit(e, K25_EV_TOKEN, h, tok, sl->res.n_output - 1, t1);
    }

    /* retire finished sequences, keeping the running list in order */
    int kept = 0;
    for (int i = 0; i < e->n_running; i++) {
        int h = e->running[i];
        struct k25_slot *sl = e->slots[h];
        enum k25_finish_reason f = K25_FINISH_NONE;
        if (sl->res.state == K25_REQ_DECODE && sl->res.n_output >= sl->max_new)
            f = K25_FINISH_LENGTH;
        else if (sl->res.state == K25_REQ_DECODE && ends_with_stop(sl))
            f = K25_FINISH_STOP;
        if (f != K25_FINISH_NONE) {
            finish(e, h, f);
        } else {
            e->running[kept++] = h;
        }
    }
    e->n_running = kept;

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

bool k25_engine_idle(const k25_engine_t *e)
{
    return e->n_running == 0 && e->wait_head == e->wait_end && e->spill_head == e->spill_end && e->n_announce == 0;
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

void k25_engine_release(k25_engine_t *e, int handle)
{
    if (handle < 0 || handle >= e->n_slots || !e->slots[handle])
        return;
    struct k25_slot *sl = e->slots[handle];
    K25_ASSERT(sl->res.state == K25_REQ_COMPLETED || sl->res.state == K25_REQ_REJECTED ||
               sl->res.state == K25_REQ_TIMED_OUT);
    for (int i = 0; i < e->n_announce; i++) /* its FINISH event is no longer due */
        if (e->announce[i] == handle)
            e->announce[i--] = e->announce[--e->n_announce];
    slot_free(e, sl);
    e->slots[handle] = NULL;
}

void k25_engine_get_stats(const k25_engine_t *e, struct k25_engine_stats *out)
{
    *out = e->stats;
    out->kv_blocks_in_use = e->pool.in_use;
    out->kv_blocks_peak = e->pool.peak_in_use;
    out->kv_blocks_capacity = e->pool.max_blocks;
    out->n_waiting_memory = e->wait_end - e->wait_head;
    out->n_waiting_spill = e->spill_end - e->spill_head;
    out->n_waiting = out->n_waiting_memory + out->n_waiting_spill;
    out->n_running = e->n_running;
    out->breaker_open = e->breaker.open;
    out->busy_fraction = e->breaker.busy;
    out->memory_fraction = e->breaker.mem;
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

void k25_engine_replay_info(const k25_engine_t *e, struct k25_replay_info *out)
{
    *out = e->replay;
    out->handles = e->replayed;
}

const struct k25_config *k25_engine_config(const k25_engine_t *e)
{
    return &e->cfg;
}
