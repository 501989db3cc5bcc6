/*
 * queue.c - the elastic request queue: where a submitted request waits
 * until the engine admits it into the running batch (docs/engine.md
 * "Elastic request queue").
 *
 * Three queues of handles.  The memory queue holds up to
 * queue_memory_capacity requests for the full model (high priority goes
 * ahead of the others and is never turned away).  Beyond it a request
 * spills to the durable disk queue (spill.c) as low priority, or, without
 * queue_spill_dir, is rejected with a reason; spilled requests move to the
 * memory queue in arrival order as it frees.  While the circuit breaker
 * (breaker.c) is open, new requests are degraded and wait in the degraded
 * queue, which has its own batch slots (q.deg_slots beside max_batch_size),
 * so they never wait behind the standard backlog; a degraded arrival whose
 * first token could not come within degraded_ttft_ms (predicted from the
 * degraded requests served so far) is rejected on arrival with a reason.
 * A request that waits longer than queue_timeout_ms ends timed_out.
 *
 * Durability with a spill folder (group commit): submission writes each
 * request's record and k25_engine_submit_batch makes the whole batch
 * durable with one fsync before any of it is acknowledged; a failed fsync
 * rejects every request of the batch.  A request's done record is written
 * when it ends, and its FINISH event (the caller's cue to answer the
 * client) is emitted only once that record is durable: one fsync for every
 * request that ended in the same step.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

/* Where a submission goes once its batch is durable. */
enum route { R_MEM, R_HIGH, R_DISK, R_DEG, R_REPLAY, R_REJECT_FULL, R_REJECT_DEG };

#define DEG_EWMA 0.2 /* weight of the newest degraded-service sample */
#define STEP_WINDOW K25_QUEUE_STEP_WINDOW
/* Share of degraded_ttft_ms a predicted first token may use: the rest absorbs what the
 * prediction does not foresee - steps that lengthen as the surge fills the batch, and the
 * time an arrival waits for the step in progress before it is even submitted (up to a
 * long prefill step: 100-200 ms on `tiny` under a 5x surge).  Measured on `tiny` under
 * the 5x surge of docs/metrics.md: at 0.7, 1 to 3 of ~190 admitted degraded requests
 * missed 1200 ms (up to 1390 ms). */
#define DEG_HEADROOM 0.6

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

/* ------------------------------------------------------------- clock */

uint64_t k25_queue_now(const struct k25_engine *e)
{
    return e->clock ? e->clock(e->clock_user) : k25_now_ns();
}

void k25_engine_set_clock(k25_engine_t *e, k25_clock_fn fn, void *user)
{
    e->clock = fn;
    e->clock_user = fn ? user : NULL;
    k25_breaker_init(&e->q.breaker, &e->cfg, k25_queue_now(e)); /* its window starts on the new clock */
}

void k25_engine_set_spill_io(k25_engine_t *e, const struct k25_spill_io *io)
{
    k25_spill_set_io(&e->q.spill, io);
}

/* ------------------------------------------------------------- FIFOs */

static int fifo_len(const struct k25_fifo *f)
{
    return f->end - f->head;
}

/* Makes room for extra more handles at the end (compacting before growing). 0 or K25_ENOMEM. */
static int fifo_reserve(struct k25_fifo *f, int extra)
{
    if (f->end + extra <= f->cap)
        return K25_OK;
    if (f->head > 0) {
        memmove(f->h, f->h + f->head, sizeof(int) * (size_t)(f->end - f->head));
        f->end -= f->head;
        f->head = 0;
        if (f->end + extra <= f->cap)
            return K25_OK;
    }
    int ncap = f->cap ? f->cap : 64;
    while (ncap < f->end + extra)
        ncap *= 2;
    int *nh = realloc(f->h, sizeof(int) * (size_t)ncap);
    if (!nh)
        return K25_ENOMEM;
    f->h = nh;
    f->cap = ncap;
    return K25_OK;
}

/* Appends h (room reserved). */
static void fifo_push(struct k25_fifo *f, int h)
{
    K25_ASSERT(f->end < f->cap);
    f->h[f->end++] = h;
}

/* Inserts h after the high-priority handles at the front (room reserved): FIFO among highs. */
static void fifo_push_high(struct k25_engine *e, struct k25_fifo *f, int h)
{
    K25_ASSERT(f->end < f->cap);
    int at = f->head;
    while (at < f->end && e->slots[f->h[at]]->res.priority == K25_PRIORITY_HIGH)
        at++;
    memmove(f->h + at + 1, f->h + at, sizeof(int) * (size_t)(f->end - at));
    f->h[at] = h;
    f->end++;
}

/* Removes h if present, keeping the others' order. */
static void fifo_remove(struct k25_fifo *f, int h)
{
    int w = f->head;
    for (int i = f->head; i < f->end; i++)
        if (f->h[i] != h)
            f->h[w++] = f->h[i];
    f->end = w;
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

/* Degraded requests in the running batch. */
static int running_degraded(const struct k25_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_running; i++)
        n += e->slots[e->running[i]]->res.degraded;
    return n;
}

/* Submissions of the batch being staged that go to route r. */
static int staged_to(const struct k25_queue *q, enum route r)
{
    int n = 0;
    for (int i = 0; i < q->n_staged; i++)
        n += q->staged[i].route == (int)r;
    return n;
}

/* ------------------------------------------------------------ set-up */

void k25_queue_init(struct k25_engine *e)
{
    e->q.deg_slots = (e->cfg.max_batch_size + 3) / 4; /* a quarter of a batch, at least 1 */
    k25_breaker_init(&e->q.breaker, &e->cfg, k25_queue_now(e));
}

void k25_queue_free(struct k25_engine *e)
{
    struct k25_queue *q = &e->q;
    free(q->mem.h);
    free(q->disk.h);
    free(q->deg.h);
    free(q->announce);
    free(q->fin);
    free(q->staged);
    free(q->replayed);
    if (q->spill.fd >= 0) { /* compaction at shutdown: answered requests never come back */
        struct k25_error err;
        int kept = 0;
        if (k25_spill_shutdown(&q->spill, &kept, &err) != K25_OK)
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill_compact_failed path=%s reason=\"%s\"",
                          q->spill.path, err.msg);
        else
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill_compact path=%s kept=%d", q->spill.path, kept);
    }
    k25_spill_close(&q->spill);
}

/* ------------------------------------------------------------ submission */

/*
 * Whether a degraded arrival can get its first token within
 * degraded_ttft_ms: it is admitted after `ahead` degraded requests finish,
 * which on deg_slots busy slots takes ahead * service / deg_slots steps,
 * then needs `first` steps for its first token; times the current step
 * period, admitted when that fits DEG_HEADROOM of degraded_ttft_ms.
 * Counting in steps and timing them by the latest steps (not by the
 * service times of requests that finished, which were admitted when steps
 * were shorter) follows a surge as it lengthens the steps.  Before any
 * degraded request has finished there is no estimate: at most one batch's
 * worth may be ahead of it.  *pred_ms: the prediction (-1 without one).
 */
static bool degraded_admissible(const struct k25_engine *e, double *pred_ms)
{
    const struct k25_queue *q = &e->q;
    int waiting = fifo_len(&q->deg) + staged_to(q, R_DEG);
    int ahead = waiting + running_degraded(e) + 1 - q->deg_slots;
    *pred_ms = -1;
    if (ahead <= 0)
        return true;
    if (q->deg_samples == 0)
        return ahead <= q->deg_slots;
    *pred_ms = ((double)ahead * q->deg_service_steps / q->deg_slots + q->deg_first_steps) * q->step_period_ns / 1e6;
    return *pred_ms <= DEG_HEADROOM * e->cfg.degraded_ttft_ms;
}

void k25_queue_step_timed(struct k25_engine *e, uint64_t t0, uint64_t t1)
{
    struct k25_queue *q = &e->q;
    /* Steps alternate between short decode steps and long ones that prefill admitted prompts, so a
     * request's service spans both: the period is the mean over the last STEP_WINDOW steps run
     * back to back - end to end, so submission and spill fsyncs between them count.  After an idle
     * gap (no work when the step began, see k25_queue_admit) the window restarts at this step. */
    if (!q->chained || q->n_step_ends == 0 || t0 < q->step_ends[(q->n_step_ends - 1) % STEP_WINDOW]) {
        q->n_step_ends = 0;
        q->step_ends[q->n_step_ends++ % STEP_WINDOW] = t0;
    }
    q->step_ends[q->n_step_ends++ % STEP_WINDOW] = t1;
    int n = q->n_step_ends < STEP_WINDOW ? q->n_step_ends : STEP_WINDOW;
    uint64_t oldest = q->step_ends[(q->n_step_ends - n) % STEP_WINDOW];
    q->step_period_ns = (double)(t1 - oldest) / (n - 1);
}

/*
 * Validates and copies a request, routes it, and (with a spill folder)
 * writes its record - not yet durable: it joins the staged batch that
 * commit() makes durable and places.  replayed: a request read back from
 * the spill log at create (already in the log: goes to the disk queue).
 * On failure nothing is staged and no handle is used.  Over ~120 lines
 * on purpose: validate, reserve room, copy, route, record is one sequence
 * whose order keeps "on failure nothing is staged" true; read it whole.
 */
static int stage(struct k25_engine *e, const struct k25_request *req, const struct k25_spill_entry *replayed,
                 int *handle, struct k25_error *err)
{
    struct k25_queue *q = &e->q;
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
    if (k25_engine_fit_max_new(e, req->n_input, req->max_new_tokens) < 0) {
        if (req->max_new_tokens > 0)
            return k25_error_set(err, K25_EINVAL, NULL, 0, "max_model_len",
                                 "request '%s': the prompt (%d tokens) + max_tokens (%d) = %lld tokens exceeds the "
                                 "context limit max_model_len %d", id, req->n_input, req->max_new_tokens,
                                 (long long)req->n_input + req->max_new_tokens, e->cfg.max_model_len);
        return k25_error_set(err, K25_EINVAL, NULL, 0, "max_model_len",
                             "request '%s': the prompt is %d tokens, the context limit max_model_len is %d "
                             "(no room for a generated token)", id, req->n_input, e->cfg.max_model_len);
    }
    if (req->has_sampling && !(req->temperature >= 0.0 && req->temperature <= 100.0))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "temperature",
                             "request '%s': temperature %g outside [0, 100]", id, req->temperature);
    if (req->has_sampling && !(req->top_p > 0.0 && req->top_p <= 1.0))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "top_p", "request '%s': top_p %g outside (0, 1]", id,
                             req->top_p);
    if ((unsigned)req->block_pattern_hint > K25_HINT_PLAIN_TEXT)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "block_pattern_hint", "request '%s': unknown hint %d", id,
                             (int)req->block_pattern_hint);
    if (req->n_section_starts < 0 || (req->n_section_starts > 0 && !req->section_starts))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "section_starts", "request '%s': bad section starts", id);
    for (int i = 0; i < req->n_section_starts; i++)
        if (req->section_starts[i] < 0 || req->section_starts[i] >= req->n_input ||
            (i > 0 && req->section_starts[i] <= req->section_starts[i - 1]))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "section_starts",
                                 "request '%s': section start %d is %d: starts must ascend strictly within the "
                                 "prompt's %d tokens", id, i, req->section_starts[i], req->n_input);
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
    /* every queue gets room for the whole staged batch: after the fsync nothing can fail */
    int more = q->n_staged + 1;
    if (fifo_reserve(&q->mem, more) != K25_OK || fifo_reserve(&q->disk, more) != K25_OK ||
        fifo_reserve(&q->deg, more) != K25_OK || grow_ints(&q->announce, &q->announce_cap, q->n_announce + more - 1) != K25_OK)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    if (q->n_staged == q->staged_cap) {
        int ncap = q->staged_cap ? 2 * q->staged_cap : 16;
        struct k25_staged *ns = realloc(q->staged, sizeof(*ns) * (size_t)ncap);
        if (!ns)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        q->staged = ns;
        q->staged_cap = ncap;
    }

    struct k25_slot *sl = calloc(1, sizeof(*sl));
    if (!sl || !(sl->prompt = malloc(sizeof(int32_t) * (size_t)req->n_input))) {
        free(sl);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    memcpy(sl->prompt, req->input_ids, sizeof(int32_t) * (size_t)req->n_input);
    snprintf(sl->res.id, sizeof(sl->res.id), "%s", id);
    sl->res.state = K25_REQ_WAITING;
    sl->res.n_input = req->n_input;
    sl->res.submit_t_ns = k25_queue_now(e);
    sl->max_new = k25_engine_fit_max_new(e, req->n_input, req->max_new_tokens); /* checked above: fits */
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
                k25_engine_slot_free(e, sl);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            memcpy(sl->stop[i], req->stop_ids[i], sizeof(int32_t) * (size_t)req->stop_lens[i]);
            sl->stop_len[i] = req->stop_lens[i];
        }
        if (sl->n_stop == 0) {
            k25_engine_slot_free(e, sl);
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
    }
    if (e->cfg.kv_hot_tokens > 0 && e->cfg.kv_tier_policy == K25_TIER_HOTNESS) {
        /* the tier spans (kvspan.c): a hint set in the config (or its flag) wins; with auto there the
         * request's own (a gold set's field) applies; auto on both decides from the section density */
        enum k25_hint h = e->cfg.block_pattern_hint != K25_HINT_AUTO ? e->cfg.block_pattern_hint : req->block_pattern_hint;
        int src = k25_kv_spans_cut(h, req->section_starts, req->n_section_starts, req->n_input, e->cfg.kv_block_size,
                                   &sl->spans, err);
        if (src != K25_OK) {
            k25_engine_slot_free(e, sl);
            return src;
        }
        sl->res.kv_span_mode = sl->spans.mode;
        sl->res.kv_span_auto = sl->spans.decided;
        sl->res.kv_spans = sl->spans.n;
        sl->res.kv_sections = sl->spans.n_sections;
        if (k25_log_on(&e->log, K25_LOG_INFO))
            k25_log_write(&e->log, K25_LOG_INFO, "KV_CACHE",
                          "req_id=%s event=spans hint=%s mode=%s decided=%s sections=%d density=%.3f spans=%d "
                          "block_size=%d",
                          sl->res.id, k25_hint_name(h), k25_hint_name(sl->spans.mode),
                          sl->spans.decided ? "True" : "False", sl->spans.n_sections, sl->spans.density,
                          sl->spans.n, e->cfg.kv_block_size);
    } else {
        sl->res.kv_sections = req->n_section_starts;
    }
    sl->ignore_eos = req->ignore_eos || e->cfg.ignore_eos;
    if (req->has_sampling) {
        sl->temperature = req->temperature;
        sl->top_p = req->top_p;
        sl->rng = req->seed ? req->seed : 1; /* xorshift needs a non-zero state */
    } else {
        sl->temperature = e->cfg.temperature;
        sl->top_p = e->cfg.top_p;
        sl->rng = k25_sample_seed(e->cfg.seed, sl->res.id);
    }

    /* routing */
    int h = e->n_slots;
    enum route r;
    double pred_ms = -1;
    k25_queue_breaker_tick(e, sl->res.submit_t_ns);
    sl->res.priority = req->priority;
    sl->res.degraded = q->breaker.open || (req->force_degraded && !replayed);
    if (replayed)
        r = R_REPLAY;
    else if (sl->res.degraded)
        r = req->force_degraded || req->priority == K25_PRIORITY_HIGH || degraded_admissible(e, &pred_ms)
                ? R_DEG
                : R_REJECT_DEG;
    else if (req->priority != K25_PRIORITY_HIGH &&
             fifo_len(&q->mem) + staged_to(q, R_MEM) >= e->cfg.queue_memory_capacity)
        r = q->spill.fd >= 0 ? R_DISK : R_REJECT_FULL;
    else
        r = req->priority == K25_PRIORITY_HIGH ? R_HIGH : R_MEM;

    uint64_t lsn = 0;
    sl->res.spill_seq = -1;
    if (replayed) {
        sl->spill_seq = replayed->seq;
        sl->spill_live = true;
        sl->res.spill_seq = (int64_t)replayed->seq;
    } else if (q->spill.fd >= 0 && r != R_REJECT_DEG && r != R_REJECT_FULL) {
        /* with a spill folder every accepted request is durable before it is acknowledged */
        struct k25_request rec = *req;
        rec.priority = r == R_DISK ? K25_PRIORITY_LOW : req->priority;
        rec.id = sl->res.id;
        int rc = k25_spill_append(&q->spill, &rec, &sl->spill_seq, &lsn, err);
        if (rc != K25_OK) { /* nothing accepted: the caller must not acknowledge it */
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                          "req_id=%s priority=%s queue_time=0ms degraded=%s state=rejected reason=spill_failed",
                          sl->res.id, k25_priority_name(req->priority), sl->res.degraded ? "True" : "False");
            k25_engine_slot_free(e, sl);
            return rc;
        }
        sl->spill_live = true;
        sl->res.spill_seq = (int64_t)sl->spill_seq;
    }
    if (r == R_REJECT_DEG)
        snprintf(sl->res.reason, sizeof(sl->res.reason),
                 "degraded queue full: %d waiting, first token predicted in %.0f ms, over the admission bound of "
                 "%.0f ms (headroom %.1f x degraded_ttft_ms %d: room is kept for the prediction's error)",
                 fifo_len(&q->deg) + staged_to(q, R_DEG), pred_ms, DEG_HEADROOM * e->cfg.degraded_ttft_ms,
                 DEG_HEADROOM, e->cfg.degraded_ttft_ms);
    else if (r == R_REJECT_FULL)
        snprintf(sl->res.reason, sizeof(sl->res.reason),
                 "queue full: %d requests waiting (queue_memory_capacity), no queue_spill_dir",
                 fifo_len(&q->mem) + staged_to(q, R_MEM));
    q->staged[q->n_staged++] = (struct k25_staged){h, (int)r, lsn};
    e->slots[h] = sl;
    e->n_slots++;
    *handle = h;
    return K25_OK;
}

/* Puts a durable (or record-less) staged request where its route says; counts and logs it. */
static void place(struct k25_engine *e, int h, enum route r)
{
    struct k25_queue *q = &e->q;
    struct k25_slot *sl = e->slots[h];
    const char *why = NULL;
    switch (r) {
    case R_REPLAY:
        sl->res.spilled = sl->res.replayed = true;
        sl->res.priority = K25_PRIORITY_LOW;
        fifo_push(&q->disk, h);
        e->stats.spilled_requests++;
        e->stats.replayed_requests++;
        break;
    case R_DISK:
        sl->res.spilled = true;
        sl->res.priority = K25_PRIORITY_LOW;
        fifo_push(&q->disk, h);
        e->stats.spilled_requests++;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill req_id=%s seq=%llu spill_depth=%d", sl->res.id,
                      (unsigned long long)sl->spill_seq, fifo_len(&q->disk));
        break;
    case R_HIGH:
        fifo_push_high(e, &q->mem, h);
        break;
    case R_MEM:
        fifo_push(&q->mem, h);
        break;
    case R_DEG:
        if (sl->res.priority == K25_PRIORITY_HIGH)
            fifo_push_high(e, &q->deg, h);
        else
            fifo_push(&q->deg, h);
        break;
    case R_REJECT_DEG:
        why = "degraded_full";
        q->rejected_degraded++;
        /* fall through */
    case R_REJECT_FULL:
        why = why ? why : "queue_full";
        sl->res.degraded = false; /* turned away: it never ran on the degraded model */
        sl->res.state = K25_REQ_REJECTED;
        sl->res.finish_t_ns = sl->res.submit_t_ns;
        q->announce[q->n_announce++] = h;
        e->stats.rejected_queue_full++;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                      "req_id=%s priority=%s queue_time=0ms degraded=%s state=rejected reason=%s", sl->res.id,
                      k25_priority_name(sl->res.priority), sl->res.degraded ? "True" : "False", why);
        break;
    }
    if (sl->res.degraded)
        e->stats.degraded_requests++;
    sl->res.ttft_sla_ms = sl->res.degraded                        ? e->cfg.degraded_ttft_ms
                          : sl->res.priority == K25_PRIORITY_LOW ? e->cfg.queue_low_priority_ttft_ms
                                                                 : 0;
}

/*
 * Makes the staged batch durable with one fsync (group commit) and places
 * its requests in order.  When the fsync fails, every staged request that
 * has a record is taken back (its slot freed, its handle unused) and
 * K25_EIO with the reason is returned: none of them may be acknowledged.
 */
static int commit(struct k25_engine *e, struct k25_error *err)
{
    struct k25_queue *q = &e->q;
    uint64_t lsn = 0;
    int rc = K25_OK;
    for (int i = 0; i < q->n_staged; i++)
        lsn = q->staged[i].lsn > lsn ? q->staged[i].lsn : lsn;
    if (lsn > 0)
        rc = k25_spill_sync(&q->spill, lsn, err);
    int64_t lost = 0;
    for (int i = 0; i < q->n_staged; i++) {
        int h = q->staged[i].handle;
        if (rc == K25_OK || q->staged[i].lsn == 0) {
            place(e, h, (enum route)q->staged[i].route);
            continue;
        }
        struct k25_slot *sl = e->slots[h];
        lost++;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE",
                      "req_id=%s priority=%s queue_time=0ms degraded=%s state=rejected reason=spill_failed",
                      sl->res.id, k25_priority_name(sl->res.priority), sl->res.degraded ? "True" : "False");
        k25_engine_slot_free(e, sl);
        e->slots[h] = NULL;
    }
    if (lost > 0) /* their records were cut off the log: no longer live */
        k25_spill_retire(&q->spill, lost);
    while (e->n_slots > 0 && !e->slots[e->n_slots - 1]) /* handles taken back at the end are reused */
        e->n_slots--;
    q->n_staged = 0;
    return rc;
}

int k25_engine_submit_batch(k25_engine_t *e, const struct k25_request *reqs, int n, int *handles, int *rcs,
                            struct k25_error *errs)
{
    struct k25_queue *q = &e->q;
    int first = K25_OK;
    K25_ASSERT(q->n_staged == 0);
    for (int i = 0; i < n; i++) {
        struct k25_error tmp;
        rcs[i] = stage(e, &reqs[i], NULL, &handles[i], errs ? &errs[i] : &tmp);
        if (rcs[i] != K25_OK)
            handles[i] = -1;
        else if (errs)
            k25_error_clear(&errs[i]);
    }
    struct k25_error cerr;
    uint64_t t0 = k25_queue_now(e);
    int crc = commit(e, &cerr);
    /* the fsync held the engine's thread: busy time for the breaker, weighted like a step's */
    k25_breaker_record(&q->breaker, t0, k25_queue_now(e),
                       k25_queue_waiting(e) ? 1.0 : (double)e->n_running / e->cfg.max_batch_size);
    if (crc != K25_OK) /* the fsync failed: every request with a record was taken back */
        for (int i = 0; i < n; i++)
            if (rcs[i] == K25_OK && (handles[i] >= e->n_slots || !e->slots[handles[i]])) {
                rcs[i] = cerr.code;
                handles[i] = -1;
                if (errs)
                    errs[i] = cerr;
            }
    for (int i = 0; i < n; i++)
        if (first == K25_OK && rcs[i] != K25_OK)
            first = rcs[i];
    return first;
}

int k25_engine_max_model_len(const k25_engine_t *e)
{
    return e->cfg.max_model_len;
}

int k25_engine_fit_max_new(const k25_engine_t *e, int n_input, int max_new_tokens)
{
    const int64_t room = (int64_t)e->cfg.max_model_len - n_input, cap = e->cfg.decode_max_tokens;
    if (max_new_tokens > 0) /* explicit: must fit whole; larger than decode_max_tokens is capped to it */
        return (int64_t)max_new_tokens <= room ? (max_new_tokens < cap ? max_new_tokens : (int)cap) : -1;
    if (room < 1)
        return -1;
    return (int)(room < cap ? room : cap);
}

int k25_engine_submit(k25_engine_t *e, const struct k25_request *req, int *handle, struct k25_error *err)
{
    int h, rc;
    struct k25_error tmp;
    k25_engine_submit_batch(e, req, 1, &h, &rc, err ? err : &tmp);
    if (rc == K25_OK)
        *handle = h;
    return rc;
}

/*
 * Opens the spill log and re-submits its unfinished requests (arrival
 * order) into the disk queue.  A request this engine cannot take (a log
 * written for another model) is marked done with a warning in the log.
 */
int k25_queue_spill_start(struct k25_engine *e, const struct k25_spill_io *io, struct k25_error *err)
{
    struct k25_queue *q = &e->q;
    struct k25_spill_replay rep;
    int rc = k25_spill_open(&q->spill, e->cfg.queue_spill_dir, io, &rep, err);
    if (rc != K25_OK)
        return rc;
    q->replay.n_records = rep.n_records;
    q->replay.n_done = rep.n_done;
    q->replay.torn_bytes = rep.torn_bytes;
    snprintf(q->replay.warning, sizeof(q->replay.warning), "%s", rep.warning);
    if (rep.torn_bytes > 0)
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=torn_record bytes=%lld path=%s",
                      (long long)rep.torn_bytes, q->spill.path);
    if (rep.n_pend > 0 && !(q->replayed = malloc(sizeof(int) * (size_t)rep.n_pend))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (replay)");
        goto out_free;
    }
    for (int i = 0; i < rep.n_pend; i++) {
        struct k25_error serr;
        int h;
        if ((rc = stage(e, &rep.pend[i].req, &rep.pend[i], &h, &serr)) == K25_OK &&
            (rc = commit(e, &serr)) == K25_OK) { /* no record to write: cannot fail */
            q->replayed[q->replay.n_replayed++] = h;
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=replay req_id=%s seq=%llu", rep.pend[i].id,
                          (unsigned long long)rep.pend[i].seq);
            continue;
        }
        if (rc == K25_ENOMEM)
            goto out_free;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=replay_skip req_id=%s seq=%llu reason=\"%s\"",
                      rep.pend[i].id, (unsigned long long)rep.pend[i].seq, serr.msg);
        if ((rc = k25_spill_done(&q->spill, rep.pend[i].seq, err)) != K25_OK)
            goto out_free;
    }
    q->replay.handles = q->replayed;
    rc = K25_OK;
out_free:
    k25_spill_replay_free(&rep);
    return rc;
}

/* ------------------------------------------------------- ending requests */

void k25_queue_ended(struct k25_engine *e, int h, uint64_t now)
{
    struct k25_queue *q = &e->q;
    struct k25_slot *sl = e->slots[h];
    if (sl->res.degraded && now && sl->res.state == K25_REQ_COMPLETED && sl->res.prefill_done_t_ns) {
        /* a degraded request ran to its end: a service sample for degraded admission */
        double first = (double)sl->res.prefill_chunks, serv = (double)(e->stats.steps - sl->admit_step);
        double a = q->deg_samples ? DEG_EWMA : 1.0;
        q->deg_first_steps += a * (first - q->deg_first_steps);
        q->deg_service_steps += a * (serv - q->deg_service_steps);
        q->deg_samples++;
    }
    uint64_t lsn = 0;
    if (sl->spill_live) {
        struct k25_error err;
        if (k25_spill_append_done(&q->spill, sl->spill_seq, &lsn, &err) == K25_OK) {
            q->fin_lsn = lsn > q->fin_lsn ? lsn : q->fin_lsn; /* spill_live stays until it is durable */
        } else { /* owed: retried at every flush, dropped from the log at shutdown */
            sl->spill_live = false;
            k25_spill_owe(&q->spill, sl->spill_seq);
            k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill_error req_id=%s seq=%llu reason=\"%s\"",
                          sl->res.id, (unsigned long long)sl->spill_seq, err.msg);
        }
    }
    if (grow_ints(&q->fin, &q->fin_cap, q->n_fin) != K25_OK) { /* cannot defer: durable first, then report */
        if (sl->spill_live && k25_spill_sync(&q->spill, lsn, NULL) == K25_OK)
            k25_spill_retire(&q->spill, 1);
        sl->spill_live = false;
        k25_engine_emit(e, K25_EV_FINISH, h, -1, sl->res.n_output, sl->res.finish_t_ns);
        return;
    }
    q->fin[q->n_fin++] = h;
}

/*
 * One fsync for the done records of every request that ended since the
 * last flush, then their FINISH events - a caller that answers a client on
 * FINISH never answers for a request a crash could replay.  A failed fsync
 * cut the records off: they are written and synced once more; if that
 * fails too the requests are reported anyway with a spill_error line (the
 * log still holds them live: they may be replayed after a crash).
 */
void k25_queue_flush(struct k25_engine *e)
{
    struct k25_queue *q = &e->q;
    if (q->n_fin == 0)
        return;
    struct k25_error oerr;
    k25_spill_pay_owed(&q->spill, &oerr); /* done records an earlier flush could not write: once more */
    int n = q->n_fin, live = 0;
    int fin[n];
    memcpy(fin, q->fin, sizeof(int) * (size_t)n);
    q->n_fin = 0; /* before the events: a callback may end more requests */
    for (int i = 0; i < n; i++)
        live += e->slots[fin[i]] && e->slots[fin[i]]->spill_live;
    if (live > 0) {
        struct k25_error err;
        int rc = k25_spill_sync(&q->spill, q->fin_lsn, &err);
        if (rc != K25_OK) { /* the failed fsync cut the done records off: write them once more */
            uint64_t lsn = 0;
            bool wrote = true;
            for (int i = 0; i < n && wrote; i++) {
                struct k25_slot *sl = e->slots[fin[i]];
                if (sl && sl->spill_live)
                    wrote = k25_spill_append_done(&q->spill, sl->spill_seq, &lsn, &err) == K25_OK;
            }
            rc = wrote ? k25_spill_sync(&q->spill, lsn, &err) : K25_EIO;
        }
        for (int i = 0; i < n; i++) {
            struct k25_slot *sl = e->slots[fin[i]];
            if (!sl || !sl->spill_live)
                continue;
            sl->spill_live = false;
            if (rc != K25_OK) { /* answered anyway (FINISH below): owed, never replayed after a clean stop */
                k25_spill_owe(&q->spill, sl->spill_seq);
                k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=spill_error req_id=%s seq=%llu reason=\"%s\"",
                              sl->res.id, (unsigned long long)sl->spill_seq, err.msg);
            }
        }
        if (rc == K25_OK)
            k25_spill_retire(&q->spill, live);
    }
    q->fin_lsn = 0;
    for (int i = 0; i < n; i++)
        if (e->slots[fin[i]])
            k25_engine_emit(e, K25_EV_FINISH, fin[i], -1, e->slots[fin[i]]->res.n_output,
                            e->slots[fin[i]]->res.finish_t_ns);
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
    k25_queue_ended(e, h, 0);
}

/* Times out the requests of f that waited longer than queue_timeout_ms, keeping the order. */
static void expire(struct k25_engine *e, struct k25_fifo *f, uint64_t now)
{
    uint64_t lim = (uint64_t)e->cfg.queue_timeout_ms * 1000000ull;
    int w = f->head;
    for (int i = f->head; i < f->end; i++) {
        int h = f->h[i];
        struct k25_slot *sl = e->slots[h];
        if (now - sl->res.submit_t_ns <= lim) {
            f->h[w++] = h;
            continue;
        }
        snprintf(sl->res.reason, sizeof(sl->res.reason), "waited %.0f ms in the %s queue (queue_timeout_ms %d)",
                 (double)(now - sl->res.submit_t_ns) / 1e6,
                 sl->res.spilled ? "disk" : sl->res.degraded ? "degraded" : "memory", e->cfg.queue_timeout_ms);
        e->stats.timed_out_requests++;
        k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "event=timeout req_id=%s", sl->res.id);
        log_queue(e, sl, now, "timed_out", "queue_timeout");
        end_waiting(e, h, K25_REQ_TIMED_OUT, now);
    }
    f->end = w;
}

/* Moves spilled requests to the memory queue, in arrival order, while it has room. */
static void unspill(struct k25_engine *e)
{
    struct k25_queue *q = &e->q;
    while (fifo_len(&q->disk) > 0 && fifo_len(&q->mem) < e->cfg.queue_memory_capacity) {
        if (fifo_reserve(&q->mem, 1) != K25_OK)
            return; /* out of memory: stays on disk, tried again next step */
        fifo_push(&q->mem, q->disk.h[q->disk.head++]);
    }
}

/*
 * Admits the requests of f, in order, while fewer than `slots` of its kind
 * run and the KV budget allows (a request that can never fit is rejected;
 * one that must wait for blocks stops the queue: FIFO).
 */
static void admit_from(struct k25_engine *e, struct k25_fifo *f, bool degraded, int slots, uint64_t now)
{
    struct k25_kv_pool *p = &e->pool;
    int running = degraded ? running_degraded(e) : e->n_running - running_degraded(e);
    while (fifo_len(f) > 0 && running < slots) {
        int h = f->h[f->head];
        struct k25_slot *sl = e->slots[h];
        /* the blocks the sequence can hold at once: with compression, the kept
         * slots plus the slack compression needs (k25_kv_peak_slots) */
        int64_t need = k25_kv_blocks_for(p, k25_kv_peak_slots(&e->cfg, sl->res.n_input,
                                                               (int64_t)sl->res.n_input + sl->max_new));
        if (p->max_blocks > 0) {
            if (need > p->max_blocks) {
                f->head++;
                snprintf(sl->res.reason, sizeof(sl->res.reason),
                         "needs %lld KV blocks, the memory budget holds %lld", (long long)need,
                         (long long)p->max_blocks);
                log_queue(e, sl, now, "rejected", "kv_budget");
                end_waiting(e, h, K25_REQ_REJECTED, k25_queue_now(e));
                k25_queue_flush(e); /* its FINISH before the next ADMIT, as it happened */
                if (!degraded)
                    unspill(e);
                continue;
            }
            if (p->reserved + need > p->max_blocks)
                break; /* FIFO: wait until running requests free blocks */
            p->reserved += need;
            sl->reserved_blocks = need;
        }
        f->head++;
        k25_engine_prefix_attach(e, sl);
        sl->res.state = K25_REQ_PREFILL;
        sl->res.admit_t_ns = k25_queue_now(e);
        sl->admit_step = e->stats.steps;
        e->running[e->n_running++] = h;
        running++;
        log_queue(e, sl, sl->res.admit_t_ns, "admitted", NULL);
        k25_engine_emit(e, K25_EV_ADMIT, h, -1, 0, sl->res.admit_t_ns);
        if (!degraded)
            unspill(e);
    }
}

/*
 * Step start: times out what waited too long (their FINISH events once
 * their done records are durable), refills the memory queue from disk,
 * then admits degraded requests into their own slots and the others into
 * max_batch_size - so degraded requests never wait behind the backlog.
 */
void k25_queue_admit(struct k25_engine *e)
{
    struct k25_queue *q = &e->q;
    uint64_t now = k25_queue_now(e);
    q->chained = e->n_running > 0 || k25_queue_waiting(e);
    if (e->cfg.queue_timeout_ms > 0) {
        expire(e, &q->mem, now);
        expire(e, &q->disk, now);
        expire(e, &q->deg, now);
        k25_queue_flush(e);
    }
    unspill(e);
    admit_from(e, &q->deg, true, q->deg_slots, now);
    admit_from(e, &q->mem, false, e->cfg.max_batch_size, now);
}

/* FINISH events of requests rejected on arrival (deferred so they come from a step, after submit returned). */
void k25_queue_announce(struct k25_engine *e)
{
    struct k25_queue *q = &e->q;
    k25_queue_flush(e); /* nothing should be pending here; never leave a FINISH behind */
    for (int i = 0; i < q->n_announce; i++) {
        int h = q->announce[i];
        if (e->slots[h])
            k25_engine_emit(e, K25_EV_FINISH, h, -1, 0, e->slots[h]->res.finish_t_ns);
    }
    q->n_announce = 0;
}

void k25_queue_breaker_tick(struct k25_engine *e, uint64_t now)
{
    struct k25_breaker *b = &e->q.breaker;
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

bool k25_queue_waiting(const struct k25_engine *e)
{
    return fifo_len(&e->q.mem) > 0 || fifo_len(&e->q.disk) > 0 || fifo_len(&e->q.deg) > 0;
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
    if (st == K25_REQ_WAITING) { /* out of its queue, keeping the others' order */
        fifo_remove(&e->q.mem, handle);
        fifo_remove(&e->q.disk, handle);
        fifo_remove(&e->q.deg, handle);
    } else {
        int kept = 0;
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i] != handle)
                e->running[kept++] = e->running[i];
        e->n_running = kept;
    }
    k25_log_write(&e->log, K25_LOG_INFO, "QUEUE", "req_id=%s state=cancelled", sl->res.id);
    k25_engine_finish(e, handle, K25_FINISH_CANCELLED, 0);
    k25_queue_flush(e);
}

bool k25_engine_idle(const k25_engine_t *e)
{
    return e->n_running == 0 && !k25_queue_waiting(e) && e->q.n_announce == 0 && e->q.n_fin == 0;
}

void k25_engine_release(k25_engine_t *e, int handle)
{
    if (handle < 0 || handle >= e->n_slots || !e->slots[handle])
        return;
    struct k25_queue *q = &e->q;
    struct k25_slot *sl = e->slots[handle];
    K25_ASSERT(sl->res.state == K25_REQ_COMPLETED || sl->res.state == K25_REQ_REJECTED ||
               sl->res.state == K25_REQ_TIMED_OUT);
    for (int i = 0; i < q->n_announce; i++) /* its FINISH event is no longer due */
        if (q->announce[i] == handle)
            q->announce[i--] = q->announce[--q->n_announce];
    for (int i = 0; i < q->n_fin; i++)
        if (q->fin[i] == handle) {
            memmove(q->fin + i, q->fin + i + 1, sizeof(int) * (size_t)(q->n_fin - i - 1));
            q->n_fin--;
            break;
        }
    k25_engine_slot_free(e, sl);
    e->slots[handle] = NULL;
}

void k25_queue_stats(const struct k25_engine *e, struct k25_engine_stats *out)
{
    const struct k25_queue *q = &e->q;
    out->n_waiting_memory = fifo_len(&q->mem);
    out->n_waiting_spill = fifo_len(&q->disk);
    out->n_waiting_degraded = fifo_len(&q->deg);
    out->n_waiting = out->n_waiting_memory + out->n_waiting_spill + out->n_waiting_degraded;
    out->rejected_degraded = q->rejected_degraded;
    out->breaker_open = q->breaker.open;
    out->busy_fraction = q->breaker.busy;
    out->memory_fraction = q->breaker.mem;
    out->spill_fsyncs = q->spill.fd >= 0 ? q->spill.n_fsyncs : 0;
}

void k25_engine_replay_info(const k25_engine_t *e, struct k25_replay_info *out)
{
    *out = e->q.replay;
    out->handles = e->q.replayed;
}
