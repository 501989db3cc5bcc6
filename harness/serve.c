/*
 * serve.c - `k25 serve`: the reference engine behind an OpenAI-compatible
 * HTTP API on libmicrohttpd (docs/serve.md).
 *
 * Threads and ownership:
 *   - libmicrohttpd's internal polling threads (a pool of o.http_threads, epoll) read the
 *     body, validate it (serve_api.c: k25_serve_parse, k25_serve_check_len), and put a
 *     `struct sreq` on the pending queue.  They never call the engine and never block: a
 *     connection that waits for the engine (a non-streamed answer, a stream's start or its
 *     next token) is suspended (wait_news) and resumed by whoever sees its news - the engine
 *     thread after each round, the watchdog (serve_limits.c) for keep-alives.
 *   - One engine thread (engine_main) owns the engine: it submits pending
 *     requests, runs k25_engine_step, cancels requests whose client went
 *     away, and publishes tokens, finishes and statistics.
 *   - One mutex (S->mu) guards the queue, every sreq's shared fields and the
 *     metrics; cv_work wakes the engine thread, cv_out wakes the HTTP
 *     threads waiting for tokens.  The engine's event callback only buffers
 *     events (engine thread, no lock); they are applied under the mutex
 *     once per step, so a step takes the lock once.
 *   - A sreq is reference counted (engine side + HTTP side), freed by
 *     whoever drops the last reference, under the mutex.
 *
 * Streaming: one SSE chunk per generated token, with the token's text
 * (bytes repaired to valid UTF-8, sse.c) and its id in the extension field
 * "token_ids".  Tokens that may be the start of a stop sequence are held
 * back until it is clear, and a matched stop sequence is never sent
 * (OpenAI semantics); usage counts every generated token.  A stream that
 * waits (queued, long prefill) gets an SSE comment every second, which is
 * also how a vanished client is noticed before its first token.  When the
 * connection closes before the answer ended (streamed or not: the watchdog
 * polls suspended sockets), the request is cancelled and its KV blocks are
 * freed.
 */
#include "serve_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void k25_serve_opts_init(struct k25_serve_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->max_body_bytes = 8u << 20;
    o->max_waiting = 256;
    o->max_connections = 512;
    o->max_connections_per_ip = 0;
    o->header_timeout_s = 20;
    o->body_timeout_s = 120;
    o->idle_timeout_s = 120;
    o->http_threads = 4;
}

/* ------------------------------------------------------------ metrics */

static const double ttft_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double itl_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

static void hist_add(struct hist *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->le[i])
        i++;
    if (i < h->n)
        h->count[i]++;
    h->total++;
    h->sum += v;
}

/* ------------------------------------------------------------ requests */

/* Drops one reference (S->mu held); frees the request with the last one. */
static void sreq_unref(struct sreq *r)
{
    if (--r->refs > 0)
        return;
    k25_serve_req_clear(r);
    k25_serve_logprobs_free(r);
    free(r);
}

/* ------------------------------------------------------- engine thread */

static void on_event(const struct k25_event *ev, void *user)
{
    struct k25_serve *S = user;
    if (ev->type != K25_EV_TOKEN && ev->type != K25_EV_FINISH)
        return;
    if (S->n_evs == S->cap_evs) {
        int nc = S->cap_evs ? 2 * S->cap_evs : 256;
        struct sev *ne = realloc(S->evs, sizeof(*ne) * (size_t)nc);
        if (!ne) {
            S->ev_oom = true;
            return;
        }
        S->evs = ne;
        S->cap_evs = nc;
    }
    S->evs[S->n_evs++] = (struct sev){ev->type, ev->handle, ev->token_id, ev->t_ns};
}

static void count_code(struct k25_serve *S, int code)
{
    for (int i = 0; i < SERVE_N_CODES; i++)
        if (k25_serve_http_codes[i] == code)
            S->http[i]++;
}

/* Removes r from the active list (engine thread). */
static void drop_active(struct k25_serve *S, struct sreq *r)
{
    for (int i = 0; i < S->n_active; i++)
        if (S->active[i] == r) {
            S->active[i] = S->active[--S->n_active];
            return;
        }
}

/* Applies the buffered events (S->mu held, engine thread). */
/* Appends decoded text to r->text (S->mu held).  -1: out of memory. */
static int text_add(struct sreq *r, const char *t, size_t n)
{
    if (r->text_len + n + 1 > r->text_cap) {
        size_t nc = r->text_cap ? r->text_cap : 256;
        while (nc < r->text_len + n + 1)
            nc *= 2;
        char *nt = realloc(r->text, nc);
        if (!nt)
            return -1;
        r->text = nt;
        r->text_cap = nc;
    }
    memcpy(r->text + r->text_len, t, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return 0;
}

/* Whether stop sequence s (bytes kept as ids) equals text[len] bytes. */
static bool stop_eq(const struct sreq *r, int s, const char *text, size_t len)
{
    if ((size_t)r->stop_len[s] < len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (r->stop[s][i] != (unsigned char)text[i])
            return false;
    return true;
}

/*
 * A generated id of a text-mode request (S->mu held, engine thread): decoded
 * through the streaming decoder (a chunk never ends inside a UTF-8
 * sequence), appended to r->text, and the stop strings looked for where the
 * new text could complete one.  A match cuts the text at its start and marks
 * the request for cancellation (engine_main): finish "stop", as OpenAI's API.
 */
static int text_push(struct sreq *r, int32_t id)
{
    const char *t;
    size_t n = 0;
    struct k25_error e;
    if (k25_tok_stream_push(r->dec, id, &t, &n, &e) != K25_OK)
        return -1;
    size_t before = r->text_len;
    if (n == 0)
        return 0;
    if (text_add(r, t, n) != 0)
        return -1;
    size_t best = SIZE_MAX;
    for (int s = 0; s < r->n_stop; s++) {
        size_t sl = (size_t)r->stop_len[s];
        size_t from = before >= sl - 1 ? before - (sl - 1) : 0;
        for (size_t p = from; p + sl <= r->text_len && p < best; p++)
            if (stop_eq(r, s, r->text + p, sl)) {
                best = p;
                break;
            }
    }
    if (best != SIZE_MAX) {
        r->text_len = best;
        r->text[best] = '\0';
        r->stop_hit = true;
    }
    return 0;
}

static void apply_events(struct k25_serve *S)
{
    for (int i = 0; i < S->n_evs; i++) {
        const struct sev *ev = &S->evs[i];
        struct sreq *r = ev->handle < S->cap_handle ? S->by_handle[ev->handle] : NULL;
        if (!r && ev->type == K25_EV_FINISH) {
            /* a request replayed from the spill log at start: no client waits for it; it ran to
             * its end so the log marks it done (docs/serve.md "Elastic queue") */
            const struct k25_result *res = k25_engine_result(S->eng, ev->handle);
            if (res) {
                fprintf(stderr, "k25 serve: replayed request %s (spill seq %lld) ended %s%s%s\n", res->id,
                        (long long)res->spill_seq, k25_req_state_name(res->state), res->reason[0] ? ": " : "",
                        res->reason);
                S->replayed_finished++;
                k25_engine_release(S->eng, ev->handle);
            }
            continue;
        }
        if (!r)
            continue;
        if (ev->type == K25_EV_TOKEN) {
            if (r->n_out == r->cap_out) {
                int nc = r->cap_out ? 2 * r->cap_out : 64;
                int32_t *no = realloc(r->out, sizeof(int32_t) * (size_t)nc);
                if (!no) {
                    r->gone = true; /* cancelled below; the client gets an error */
                    r->err_status = 500;
                    snprintf(r->err_msg, sizeof(r->err_msg), "out of memory");
                    continue;
                }
                r->out = no;
                r->cap_out = nc;
            }
            if (r->stop_hit)
                continue; /* past a matched stop string (cancelled before the next step) */
            r->out[r->n_out++] = ev->tok;
            if (r->text_mode && text_push(r, ev->tok) != 0) {
                r->gone = true;
                r->err_status = 500;
                snprintf(r->err_msg, sizeof(r->err_msg), "out of memory decoding the output");
            }
            if (k25_serve_logprobs_add(S, r, ev->handle, r->n_out - 1) != 0 && !r->err_status) {
                r->gone = true; /* cancelled below; the client gets an error */
                r->err_status = 500;
                snprintf(r->err_msg, sizeof(r->err_msg), "out of memory computing logprobs");
            }
            double dt = (double)(ev->t_ns - (r->n_out == 1 ? r->arrival_ns : r->last_t_ns)) / 1e9;
            hist_add(r->n_out == 1 ? &S->ttft : &S->itl, dt);
            r->last_t_ns = ev->t_ns;
            S->gen_tokens++;
        } else { /* K25_EV_FINISH */
            const struct k25_result *res = k25_engine_result(S->eng, ev->handle);
            r->state = res->state;
            r->finish = res->finish;
            if (r->stop_hit) { /* cancelled by us at a stop string: a normal end */
                r->state = K25_REQ_COMPLETED;
                r->finish = K25_FINISH_STOP;
            } else if (r->text_mode && r->dec) { /* what the decoder still held back */
                const char *t;
                size_t tl = 0;
                struct k25_error e;
                if (k25_tok_stream_flush(r->dec, &t, &tl, &e) != K25_OK || text_add(r, t, tl) != 0) {
                    r->err_status = 500;
                    snprintf(r->err_msg, sizeof(r->err_msg), "decoding the output failed");
                }
            }
            r->n_prompt = res->n_input;
            snprintf(r->reason, sizeof(r->reason), "%s", res->reason);
            if (res->state != K25_REQ_COMPLETED && !r->err_status) {
                /* rejected: it can never fit (the KV budget); any other end: the server's trouble */
                r->err_status = res->state == K25_REQ_REJECTED ? 400 : 503;
                snprintf(r->err_msg, sizeof(r->err_msg), "the request cannot be served (%s): %s",
                         k25_req_state_name(res->state), res->reason);
            }
            S->prompt_tokens += res->n_input;
            int fin = res->state == K25_REQ_COMPLETED ? (int)res->finish : K25_FINISH_NONE;
            S->finished[fin >= 0 && fin < 4 ? fin : K25_FINISH_NONE]++;
            r->done = true;
            k25_engine_release(S->eng, ev->handle);
            S->by_handle[ev->handle] = NULL;
            drop_active(S, r);
            sreq_unref(r);
        }
    }
    S->n_evs = 0;
}

/* r ends without reaching the engine (S->mu held): done, counted, the queue's reference dropped. */
static void finish_unsubmitted(struct k25_serve *S, struct sreq *r)
{
    r->done = true;
    S->finished[K25_FINISH_NONE]++;
    sreq_unref(r);
}

/*
 * Registers r under its engine handle h after a successful submit (S->mu held, engine thread):
 * records how the engine routed it (priority, degraded, spilled, its SLA) and marks it submitted,
 * so its stream may send the HTTP status line.  A request the engine rejected on arrival (its
 * queue was full: "queue full" / "degraded queue full") gets 503 with the reason; its FINISH event
 * follows with the next step.  Out of memory: the request is cancelled and fails with 503.
 */
static void register_submitted(struct k25_serve *S, struct sreq *r, int h)
{
    const struct k25_result *res = k25_engine_result(S->eng, h);
    r->priority = res->priority;
    r->degraded = res->degraded;
    r->spilled = res->spilled;
    r->ttft_sla_ms = res->ttft_sla_ms;
    if (res->state == K25_REQ_REJECTED) {
        r->err_status = 503; /* overload, as for any full queue */
        snprintf(r->err_msg, sizeof(r->err_msg), "the server is overloaded: %s", res->reason);
    }
    r->submitted = true; /* engine_main broadcasts cv_out after this intake round */
    if (h >= S->cap_handle) {
        int nc = S->cap_handle ? S->cap_handle : 256;
        while (nc <= h)
            nc *= 2;
        struct sreq **nb = realloc(S->by_handle, sizeof(*nb) * (size_t)nc);
        if (!nb)
            goto out_nomem;
        memset(nb + S->cap_handle, 0, sizeof(*nb) * (size_t)(nc - S->cap_handle));
        S->by_handle = nb;
        S->cap_handle = nc;
    }
    if (S->n_active == S->cap_active) {
        int nc = S->cap_active ? 2 * S->cap_active : 64;
        struct sreq **na = realloc(S->active, sizeof(*na) * (size_t)nc);
        if (!na)
            goto out_nomem;
        S->active = na;
        S->cap_active = nc;
    }
    r->handle = h;
    S->by_handle[h] = r;
    S->active[S->n_active++] = r;
    return; /* the engine's reference now lives in by_handle */

out_nomem:
    k25_engine_cancel(S->eng, h, "out of memory");
    S->n_evs = 0; /* its FINISH event: nobody tracks the handle */
    k25_engine_release(S->eng, h);
    r->err_status = 503;
    snprintf(r->err_msg, sizeof(r->err_msg), "out of memory");
    finish_unsubmitted(S, r);
}

/*
 * One intake round (S->mu held, engine thread): every pending request goes to the engine with
 * one k25_engine_submit_batch, so with a spill folder their records share one fsync (group
 * commit).  A request whose client left, or that arrives while the server stops, ends without
 * reaching the engine.  Per request: rcs[i] == 0 -> registered (register_submitted); K25_EIO
 * (its spill record could not be made durable: nothing accepted) or K25_ENOMEM -> 503 with the
 * engine's reason; any other failure (a bad request) -> 400.
 */
static void intake(struct k25_serve *S)
{
    int n = S->n_pend, k = 0;
    struct sreq **rs = malloc(sizeof(*rs) * (size_t)(n ? n : 1));
    struct k25_request *q = calloc((size_t)(n ? n : 1), sizeof(*q));
    const int32_t *(*stops)[SERVE_MAX_STOP] = malloc(sizeof(*stops) * (size_t)(n ? n : 1));
    int *hs = malloc(sizeof(int) * (size_t)(n ? n : 1)), *rcs = malloc(sizeof(int) * (size_t)(n ? n : 1));
    struct k25_error *errs = malloc(sizeof(*errs) * (size_t)(n ? n : 1));
    bool oom = !rs || !q || !stops || !hs || !rcs || !errs;
    while (S->pend_head) {
        struct sreq *r = S->pend_head;
        S->pend_head = r->next;
        if (!S->pend_head)
            S->pend_tail = NULL;
        S->n_pend--;
        if (r->gone || S->stopping || S->broken || oom) {
            r->finish = K25_FINISH_CANCELLED;
            r->state = K25_REQ_COMPLETED;
            if (S->broken || oom) {
                r->err_status = 503;
                snprintf(r->err_msg, sizeof(r->err_msg), "%s", S->broken ? S->broken_msg : "out of memory");
            }
            finish_unsubmitted(S, r);
            continue;
        }
        for (int i = 0; i < r->n_stop; i++)
            stops[k][i] = r->stop[i];
        q[k] = (struct k25_request){.id = r->id, .input_ids = r->ids, .n_input = r->n_ids,
                                    .max_new_tokens = r->max_tokens, .has_sampling = r->has_sampling,
                                    .temperature = r->temperature, .top_p = r->top_p, .seed = r->seed,
                                    .stop_ids = r->n_stop && !r->text_mode ? stops[k] : NULL,
                                    .stop_lens = r->n_stop && !r->text_mode ? r->stop_len : NULL,
                                    .n_stop = r->text_mode ? 0 : r->n_stop, /* text mode: matched on the text */
                                    .priority = r->priority, .ignore_eos = r->ignore_eos,
                                    .keep_logits = r->logprobs >= 0};
        rs[k++] = r;
    }
    if (k > 0)
        k25_engine_submit_batch(S->eng, q, k, hs, rcs, errs); /* per-request outcomes in rcs */
    for (int i = 0; i < k; i++) {
        struct sreq *r = rs[i];
        if (rcs[i] == K25_OK) {
            register_submitted(S, r, hs[i]);
            continue;
        }
        r->err_status = rcs[i] == K25_ENOMEM || rcs[i] == K25_EIO ? 503 : 400;
        snprintf(r->err_msg, sizeof(r->err_msg), "%s", errs[i].msg);
        r->state = K25_REQ_REJECTED;
        finish_unsubmitted(S, r);
    }
    free(rs);
    free(q);
    free(stops);
    free(hs);
    free(rcs);
    free(errs);
}

#define SERVE_IDLE_TICK_NS 200000000L /* breaker evaluation period while idle */

/* The engine's life: intake, cancellations, one step, publish; sleeps when idle. */
static void *engine_main(void *arg)
{
    struct k25_serve *S = arg;
    struct k25_error err;
    pthread_mutex_lock(&S->mu);
    for (;;) {
        if (S->pend_head)
            intake(S);
        for (int i = 0; i < S->n_active; i++) {
            struct sreq *r = S->active[i];
            if ((r->gone || r->stop_hit || S->stopping || S->broken) && !r->cancel_sent) {
                r->cancel_sent = true;
                k25_engine_cancel(S->eng, r->handle,
                                  r->gone ? "client disconnected" : S->broken ? "engine failed"
                                  : r->stop_hit ? "stop string matched" : "server stopping");
            }
        }
        apply_events(S);
        k25_engine_get_stats(S->eng, &S->st);
        pthread_cond_broadcast(&S->cv_out);
        int n_wake = k25_serve_collect_ready(S, k25_now_ns(), &S->wake, &S->cap_wake);
        if (n_wake > 0) { /* suspended connections whose news came: resumed without the lock */
            pthread_mutex_unlock(&S->mu);
            for (int i = 0; i < n_wake; i++)
                MHD_resume_connection(S->wake[i]);
            pthread_mutex_lock(&S->mu);
            continue; /* requests queued while the lock was dropped signalled no one: look again */
        }
        if ((S->stopping || S->broken) && S->n_active == 0 && !S->pend_head)
            break;
        if (k25_engine_idle(S->eng)) {
            if (!S->cfg.breaker_enabled) {
                pthread_cond_wait(&S->cv_work, &S->mu);
                continue;
            }
            /* the breaker's state moves while idle (its busy window empties, memory falls): an idle
             * step every SERVE_IDLE_TICK_NS evaluates it, so /metrics' k25_breaker_open stays true */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
            ts.tv_nsec += SERVE_IDLE_TICK_NS;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            if (pthread_cond_timedwait(&S->cv_work, &S->mu, &ts) != ETIMEDOUT)
                continue;
        }
        pthread_mutex_unlock(&S->mu);
        int rc = k25_engine_step(S->eng, &err);
        pthread_mutex_lock(&S->mu);
        if ((rc != K25_OK || S->ev_oom) && !S->broken) {
            /* a failed step leaves the engine in an unknown state: fail what runs, refuse the rest */
            S->broken = true;
            snprintf(S->broken_msg, sizeof(S->broken_msg), "engine failed: %s",
                     rc != K25_OK ? err.msg : "out of memory recording events");
            fprintf(stderr, "k25 serve: %s; refusing new requests\n", S->broken_msg);
            for (int i = 0; i < S->n_active; i++) {
                S->active[i]->err_status = 500;
                snprintf(S->active[i]->err_msg, sizeof(S->active[i]->err_msg), "%s", S->broken_msg);
            }
        }
    }
    pthread_mutex_unlock(&S->mu);
    return NULL;
}

/* ------------------------------------------------------------ responses */

static enum MHD_Result reply_text(struct k25_serve *S, struct MHD_Connection *c, int status, char *body,
                                  const char *ctype)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    pthread_mutex_lock(&S->mu);
    count_code(S, status);
    pthread_mutex_unlock(&S->mu);
    return ret;
}

/* Replies with j (a new reference, consumed) as JSON. */
static enum MHD_Result reply_json(struct k25_serve *S, struct MHD_Connection *c, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return reply_text(S, c, status, s, "application/json");
}

static enum MHD_Result reply_error(struct k25_serve *S, struct MHD_Connection *c, int status, const char *param,
                                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result reply_error(struct k25_serve *S, struct MHD_Connection *c, int status, const char *param,
                                   const char *fmt, ...)
{
    char msg[1200]; /* room for an engine reason whole (K25_REASON_MAX) after a prefix */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return reply_json(S, c, status, k25_serve_error_json(status, param, msg));
}

/* ------------------------------------------------------------- streams */

static int obuf_add(struct sreq *r, const char *s, size_t n)
{
    if (r->olen + n > r->ocap) {
        size_t nc = r->ocap ? r->ocap : 1024;
        while (nc < r->olen + n)
            nc *= 2;
        char *nb = realloc(r->obuf, nc);
        if (!nb)
            return -1;
        r->obuf = nb;
        r->ocap = nc;
    }
    memcpy(r->obuf + r->olen, s, n);
    r->olen += n;
    return 0;
}

/* Appends "data: JSON\n\n" (j consumed). */
static int obuf_event(struct sreq *r, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return -1;
    int rc = obuf_add(r, "data: ", 6) || obuf_add(r, s, strlen(s)) || obuf_add(r, "\n\n", 2) ? -1 : 0;
    free(s);
    return rc;
}

/*
 * Tokens that may be released to the client now (S->mu held): all of them,
 * less a suffix that could still grow into a stop sequence; at the end, all
 * but a matched stop sequence.
 */
static int releasable(const struct sreq *r)
{
    int n = r->n_out, hold = 0;
    for (int s = 0; s < r->n_stop; s++) {
        int len = r->stop_len[s];
        if (r->done) {
            if (r->finish == K25_FINISH_STOP && n >= len &&
                !memcmp(r->out + n - len, r->stop[s], sizeof(int32_t) * (size_t)len))
                return n - len > r->sent ? n - len : r->sent;
            continue;
        }
        for (int k = len - 1; k > hold; k--)
            if (k <= n - r->sent && !memcmp(r->out + n - k, r->stop[s], sizeof(int32_t) * (size_t)k)) {
                hold = k;
                break;
            }
    }
    return n - hold;
}

/*
 * Text-mode streams (S->mu held): the bytes of r->text that may go out now:
 * all of them at the end, else all but a suffix that could still grow into
 * a stop string.
 */
static size_t releasable_text(const struct sreq *r)
{
    size_t n = r->text_len, hold = 0;
    if (r->done || r->stop_hit)
        return n;
    for (int s = 0; s < r->n_stop; s++)
        for (size_t k = (size_t)r->stop_len[s] - 1; k > hold; k--)
            if (k <= n - r->text_sent && stop_eq(r, s, r->text + n - k, k)) {
                hold = k;
                break;
            }
    return n - hold;
}

/* Whether a stream has something to send (S->mu held). */
static bool stream_news(const struct sreq *r)
{
    return r->text_mode ? r->n_out > r->sent || releasable_text(r) > r->text_sent : releasable(r) > r->sent;
}

/* Decodes ids[i] to text for the stream (bytes; ids past a byte are '?', as k25_tok_decode). */
static size_t token_text(struct sreq *r, int32_t id, char *out)
{
    size_t n = 0;
    k25_utf8_push(&r->u8, id >= 0 && id < 256 ? (unsigned char)id : (unsigned char)'?', out, &n);
    return n;
}

/* Formats what the stream can send now into r->obuf (S->mu held).  -1: out of memory. */
static int stream_fill(struct sreq *r)
{
    const char *model = r->S->model_name;
    if (r->phase == 0) {
        r->phase = 1;
        if (r->chat && !r->err_status && obuf_event(r, k25_serve_chunk_json(r, model, NULL, 0, NULL, 0, NULL, true)) != 0)
            return -1;
    }
    if (r->text_mode) { /* one chunk: the text released now and the ids generated since the last one */
        size_t rel_t = releasable_text(r);
        if ((rel_t > r->text_sent || r->n_out > r->sent) && !r->err_status) {
            if (obuf_event(r, k25_serve_chunk_json(r, model, r->text ? r->text + r->text_sent : "", rel_t - r->text_sent,
                                                   &r->out[r->sent], r->n_out - r->sent, NULL, false)) != 0)
                return -1;
            r->text_sent = rel_t;
            r->sent = r->n_out;
        }
    }
    int rel = r->text_mode ? r->sent : releasable(r);
    for (; r->sent < rel; r->sent++) {
        char text[16];
        size_t n = token_text(r, r->out[r->sent], text);
        if (obuf_event(r, k25_serve_chunk_json(r, model, text, n, &r->out[r->sent], 1, NULL, false)) != 0)
            return -1;
    }
    if (!r->done || r->phase == 2)
        return 0;
    r->phase = 2;
    if (r->err_status) {
        if (obuf_event(r, k25_serve_error_json(r->err_status, NULL, r->err_msg)) != 0)
            return -1;
    } else {
        char text[8];
        size_t n = 0;
        k25_utf8_flush(&r->u8, text, &n);
        if (obuf_event(r, k25_serve_chunk_json(r, model, text, n, NULL, 0, k25_serve_finish_name(r), false)) != 0)
            return -1;
        if (r->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", r->id, "object",
                                  r->chat ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)r->created, "model", model, "choices", "usage", k25_serve_usage_json(r));
            if (obuf_event(r, u) != 0)
                return -1;
        }
    }
    return obuf_add(r, "data: [DONE]\n\n", 14);
}

/*
 * Waits for sc's news without blocking the worker thread (S->mu held, held again on return): true
 * when it is there now; otherwise the connection is suspended (whoever sees its news resumes it:
 * k25_serve_collect_ready) and false is returned - the caller returns to MHD, which calls it
 * again once resumed.  The news is looked at again after suspending, since it may have come while
 * the lock was dropped (no one resumes a connection that is not marked suspended).
 */
static bool wait_news(struct k25_serve *S, struct MHD_Connection *c, struct sconn *sc, enum sconn_wait w,
                      struct sreq *r)
{
    sc->wait = w;
    sc->r = r;
    if (S->no_suspend || k25_serve_conn_ready(sc, k25_now_ns())) {
        sc->wait = SC_WAIT_NONE;
        sc->r = NULL;
        return true;
    }
    pthread_mutex_unlock(&S->mu);
    MHD_suspend_connection(c);
    pthread_mutex_lock(&S->mu);
    if (S->no_suspend || k25_serve_conn_ready(sc, k25_now_ns())) {
        sc->wait = SC_WAIT_NONE;
        sc->r = NULL;
        pthread_mutex_unlock(&S->mu);
        MHD_resume_connection(c);
        pthread_mutex_lock(&S->mu);
        return false;
    }
    sc->suspended = true;
    return false;
}

bool k25_serve_conn_ready(const struct sconn *sc, uint64_t now_ns)
{
    const struct sreq *r = sc->r;
    switch (sc->wait) {
    case SC_WAIT_DONE:
        return r->done;
    case SC_WAIT_START:
        return r->done || r->submitted || r->err_status;
    case SC_WAIT_TOKENS:
        return r->done || stream_news(r) || now_ns - r->last_out_ns >= SERVE_KEEPALIVE_NS;
    default:
        return true;
    }
}

/*
 * MHD content reader of a stream (its worker thread): what is formatted, or, when nothing is,
 * suspends the connection and returns 0 until tokens, the end or a keep-alive comment are due.
 */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sreq *r = cls;
    struct k25_serve *S = r->S;
    for (;;) {
        if (r->ooff < r->olen) {
            size_t n = r->olen - r->ooff < max ? r->olen - r->ooff : max;
            memcpy(buf, r->obuf + r->ooff, n);
            r->ooff += n;
            r->last_out_ns = k25_now_ns();
            return (ssize_t)n;
        }
        if (r->phase == 2)
            return MHD_CONTENT_READER_END_OF_STREAM;
        r->olen = r->ooff = 0;
        pthread_mutex_lock(&S->mu);
        if (r->phase != 0 && !wait_news(S, r->conn, r->sc, SC_WAIT_TOKENS, r)) {
            pthread_mutex_unlock(&S->mu);
            return 0; /* suspended: called again once resumed */
        }
        int rc = stream_fill(r);
        pthread_mutex_unlock(&S->mu);
        if (rc != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r->olen == 0 && obuf_add(r, ": keep-alive\n\n", 14) != 0) /* also finds a vanished client */
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* The stream's response is gone (finished, or the connection closed): cancel if unfinished. */
static void stream_free(void *cls)
{
    struct sreq *r = cls;
    struct k25_serve *S = r->S;
    pthread_mutex_lock(&S->mu);
    if (!r->done) {
        r->gone = true;
        pthread_cond_signal(&S->cv_work);
    }
    sreq_unref(r);
    pthread_mutex_unlock(&S->mu);
}

/* ------------------------------------------------------------ handlers */

/* Per-request state (MHD's con_cls, made by the URI log callback): the body read so far, and the
 * completion request it waits for once submitted. */
struct conn {
    char *body;
    size_t n, cap;
    bool too_large;
    bool handled;     /* the access handler ran: k25 saw the request */
    bool replied;     /* k25 queued a response */
    uint64_t t_ns;    /* body complete */
    struct sreq *r;   /* submitted, waiting (a reference) */
    struct sconn *sc;
};

/* A completion request's answer, once wait_news says it is there (r: cn's reference, dropped). */
static enum MHD_Result answer(struct k25_serve *S, struct MHD_Connection *c, struct conn *cn)
{
    struct sreq *r = cn->r;
    cn->r = NULL;
    pthread_mutex_lock(&S->mu);
    int status = r->err_status;
    char msg[1100];
    snprintf(msg, sizeof(msg), "%s", r->err_msg);
    if (r->stream && !status) {
        /* accepted: the stream's response owns this reference from now on (stream_free drops it) */
        r->conn = c;
        r->sc = cn->sc;
        r->last_out_ns = k25_now_ns();
        pthread_mutex_unlock(&S->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r,
                                                                      stream_free);
        if (!resp) {
            stream_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "X-Request-Id", r->id); /* the id before the first chunk carries it */
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        pthread_mutex_lock(&S->mu);
        count_code(S, 200);
        pthread_mutex_unlock(&S->mu);
        return ret;
    }
    json_t *j = status ? NULL : k25_serve_result_json(r, S->model_name);
    sreq_unref(r);
    pthread_mutex_unlock(&S->mu);
    if (status)
        return reply_error(S, c, status, NULL, "%s", msg);
    return j ? reply_json(S, c, 200, j) : reply_error(S, c, 503, NULL, "out of memory");
}

/* A submitted request: its answer when it is there, else the connection suspends until it is. */
static enum MHD_Result wait_answer(struct k25_serve *S, struct MHD_Connection *c, struct conn *cn)
{
    pthread_mutex_lock(&S->mu);
    /* a stream's status line goes out once the engine accepted the request (a spilled one's record
     * is then fsync'd): until then a failure can still be a plain error status */
    bool ready = wait_news(S, c, cn->sc, cn->r->stream ? SC_WAIT_START : SC_WAIT_DONE, cn->r);
    pthread_mutex_unlock(&S->mu);
    return ready ? answer(S, c, cn) : MHD_YES;
}

static enum MHD_Result handle_completion(struct k25_serve *S, struct MHD_Connection *c, struct conn *cn, bool chat)
{
    struct sreq *r = calloc(1, sizeof(*r));
    struct k25_serve_bad b = {0};
    if (!r)
        return reply_error(S, c, 503, NULL, "out of memory");
    r->S = S;
    r->refs = 1;
    r->arrival_ns = cn->t_ns;
    r->created = (int64_t)time(NULL);
    if (k25_serve_parse(S, cn->body ? cn->body : "", cn->n, chat, r, &b) != 0 ||
        k25_serve_check_len(S, r, chat, &b) != 0) {
        sreq_unref(r); /* not shared yet: no lock needed */
        return reply_error(S, c, b.status, b.param[0] ? b.param : NULL, "%s", b.msg);
    }
    pthread_mutex_lock(&S->mu);
    /* queued beyond what the batch admits at its next step (the engine admits inside a step, so a
     * request just submitted to an idle batch still counts as waiting in the stats) */
    int room = S->cfg.max_batch_size - S->st.n_running;
    int waiting = S->n_pend + S->st.n_waiting - (room > 0 ? room : 0);
    if (S->stopping || S->broken) {
        pthread_mutex_unlock(&S->mu);
        sreq_unref(r);
        return reply_error(S, c, 503, NULL, "%s", S->broken ? S->broken_msg : "the server is shutting down");
    }
    if (waiting >= S->o.max_waiting) {
        pthread_mutex_unlock(&S->mu);
        sreq_unref(r);
        return reply_error(S, c, 429, NULL, "the server is overloaded: %d requests are waiting (--max-waiting %d); "
                           "retry later", waiting, S->o.max_waiting);
    }
    snprintf(r->id, sizeof(r->id), "%s-%s-%llu", chat ? "chatcmpl" : "cmpl", S->start_token,
             (unsigned long long)++S->next_id);
    r->refs = 2; /* this connection, and the engine side until the request finishes */
    if (S->pend_tail)
        S->pend_tail->next = r;
    else
        S->pend_head = r;
    S->pend_tail = r;
    S->n_pend++;
    pthread_cond_signal(&S->cv_work);
    pthread_mutex_unlock(&S->mu);
    cn->r = r;
    return wait_answer(S, c, cn);
}

static bool authorized(struct k25_serve *S, struct MHD_Connection *c)
{
    if (!S->api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return false;
    return k25_serve_key_equal(S->api_key, S->api_key_len, h + 7);
}

/* MHD_OPTION_URI_LOG_CALLBACK: the request line was read; its state (con_cls) starts here, so a
 * request that libmicrohttpd refuses itself (no access handler call) is still seen at its end. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)uri;
    struct sconn *sc = k25_serve_sconn(c);
    struct conn *cn = sc ? calloc(1, sizeof(*cn)) : NULL;
    if (cn)
        cn->sc = sc;
    return cn; /* NULL (out of memory): the access handler fails the connection */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    struct k25_serve *S = cls;
    struct conn *cn = *con_cls;
    if (!cn)
        return MHD_NO; /* out of memory at the request line or the connection's start */
    if (!cn->handled) { /* the header is complete */
        cn->handled = true;
        pthread_mutex_lock(&S->mu);
        cn->sc->body_start_ns = k25_now_ns();
        pthread_mutex_unlock(&S->mu);
        return MHD_YES;
    }
    if (cn->r) /* resumed: the request it waits for has news */
        return wait_answer(S, c, cn);
    if (*upload_size > 0) { /* more of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (cn->too_large || cn->n + n > S->o.max_body_bytes) {
            cn->too_large = true; /* read and drop the rest, then answer 413 */
            return MHD_YES;
        }
        if (cn->n + n + 1 > cn->cap) {
            size_t nc = cn->cap ? cn->cap : 4096;
            while (nc < cn->n + n + 1)
                nc *= 2;
            char *nb = realloc(cn->body, nc);
            if (!nb)
                return MHD_NO;
            cn->body = nb;
            cn->cap = nc;
        }
        memcpy(cn->body + cn->n, upload_data, n);
        cn->n += n;
        cn->body[cn->n] = '\0';
        return MHD_YES;
    }
    cn->t_ns = k25_now_ns();
    pthread_mutex_lock(&S->mu);
    cn->sc->body_done = true;
    pthread_mutex_unlock(&S->mu);
    cn->replied = true; /* every path below queues a response, or fails the connection */
    bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
    bool is_cmpl = !strcmp(url, "/v1/completions"), is_chat = !strcmp(url, "/v1/chat/completions");
    bool is_models = !strcmp(url, "/v1/models"), is_health = !strcmp(url, "/health"),
         is_metrics = !strcmp(url, "/metrics");
    if (cn->too_large)
        return reply_error(S, c, 413, NULL, "the request body is larger than %zu bytes (--max-body-bytes)",
                           S->o.max_body_bytes);
    if (!strncmp(url, "/v1/", 4) && !authorized(S, c))
        return reply_error(S, c, 401, NULL, "missing or wrong API key (Authorization: Bearer KEY)");
    if (is_cmpl || is_chat) {
        if (!post)
            return reply_error(S, c, 405, NULL, "%s takes POST", url);
        return handle_completion(S, c, cn, is_chat);
    }
    if (is_models || is_health || is_metrics) {
        if (!get)
            return reply_error(S, c, 405, NULL, "%s takes GET", url);
        if (is_metrics)
            return reply_text(S, c, 200, k25_serve_metrics_text(S), "text/plain; version=0.0.4");
        if (is_health) {
            pthread_mutex_lock(&S->mu);
            bool ok = !S->broken && !S->stopping;
            pthread_mutex_unlock(&S->mu);
            return reply_json(S, c, ok ? 200 : 503, json_pack("{s:s}", "status", ok ? "ok" : "unavailable"));
        }
        const struct k25_model_shape *sh = k25_model_get_shape(S->model);
        return reply_json(S, c, 200,
                          json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i, s:i, s:i, s:s}]}", "object", "list", "data",
                                    "id", S->model_name, "object", "model", "created", (json_int_t)S->start_unix,
                                    "owned_by", "k25bench", "vocab_size", sh->vocab_size, "max_tokens",
                                    S->cfg.decode_max_tokens, "max_model_len", k25_engine_max_model_len(S->eng),
                                    "source", k25_model_source(S->model)));
    }
    return reply_error(S, c, 404, NULL, "no such endpoint: %s %s", method, url);
}

/*
 * MHD_OPTION_NOTIFY_COMPLETED: the request ended (answered, or the connection failed).  A request
 * k25 never answered although libmicrohttpd parsed its request line was refused by libmicrohttpd
 * itself (a malformed header, 431, 505, bad chunked framing: docs/serve.md) or its client left
 * early; it is counted as k25_http_layer_errors_total.  The connection's header clock restarts.
 */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct k25_serve *S = cls;
    struct conn *cn = *con_cls;
    struct sconn *sc = k25_serve_sconn(c);
    pthread_mutex_lock(&S->mu);
    if (sc) {
        sc->read_start_ns = k25_now_ns();
        sc->body_start_ns = 0;
        sc->body_done = false;
    }
    if (cn && !cn->replied && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
        S->http_layer_errors++;
    if (cn && cn->r) { /* never answered (the connection failed while it waited) */
        if (!cn->r->done) {
            cn->r->gone = true;
            pthread_cond_signal(&S->cv_work);
        }
        sreq_unref(cn->r);
    }
    pthread_mutex_unlock(&S->mu);
    if (cn) {
        free(cn->body);
        free(cn);
    }
    *con_cls = NULL;
}

/*
 * libmicrohttpd's error log.  When it answers a request itself (its HTML error pages: a malformed
 * header 400, bad chunked framing 400, 413, 414, 431, 505 - it offers no hook to replace them) the
 * only place that says which status it sent is this line, "... (HTTP response code is N ...":
 * that status is counted in k25_http_responses_total (docs/serve.md "Limits and hostile clients").
 */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct k25_serve *S = cls;
    char line[1024];
    vsnprintf(line, sizeof(line), fmt, ap);
    fprintf(stderr, "k25 serve: libmicrohttpd: %s", line);
    const char *p = strstr(line, "HTTP response code is ");
    int code = p ? atoi(p + strlen("HTTP response code is ")) : 0;
    if (code >= 100 && code <= 599) {
        pthread_mutex_lock(&S->mu);
        count_code(S, code);
        pthread_mutex_unlock(&S->mu);
    }
}

/* ------------------------------------------------------------ lifecycle */

/*
 * This process's part of every response id: 8 hex digits from getrandom(2) (the clock and the pid
 * when it fails), so ids of two runs differ (a restarted server does not reuse "cmpl-1").
 */
static void k25_serve_start_token(char *out, size_t n)
{
    uint32_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
        z = (z ^ (z >> 31)) * 0x9e3779b97f4a7c15ULL;
        v = (uint32_t)(z >> 32);
    }
    snprintf(out, n, "%08x", v);
}

/*
 * The model's tokenizer (S->tok) and chat template.  A preset: bytes (tok
 * NULL), and --chat-template is refused by name.  A folder without
 * tokenizer.json serves token-id prompts only: text is refused per request
 * with the loader's message (S->text_err), never silently bytes.  A broken
 * tokenizer.json or an unknown --chat-template fails the start.  An
 * unrecognised tokenizer_config.json chat_template refuses chat per request
 * (S->chat_err); completions still work.
 */
static int serve_tokenizer(struct k25_serve *S, const struct k25_config *cfg, const char *tpl_name,
                           struct k25_error *err)
{
    struct k25_error e;
    k25_error_clear(&e);
    int rc = k25_tokenizer_for_model(cfg, &S->tok, &e);
    if (rc == K25_ENOTFOUND && e.file[0]) {
        snprintf(S->text_err, sizeof(S->text_err), "text prompts need the model's tokenizer: %s; send token ids "
                 "instead", e.msg);
        fprintf(stderr, "k25 serve: warning: %s\n", S->text_err);
        return tpl_name ? k25_error_set(err, K25_EINVAL, "command line", 0, "--chat-template",
                                        "the model has no tokenizer.json: %s", e.msg)
                        : K25_OK;
    }
    if (rc != K25_OK) {
        *err = e;
        return rc;
    }
    if (!S->tok)
        return tpl_name ? k25_error_set(err, K25_EINVAL, "command line", 0, "--chat-template",
                                        "the preset '%s' has the byte tokenizer and no chat templates; "
                                        "--chat-template needs a model folder with tokenizer.json", cfg->model)
                        : K25_OK;
    if (tpl_name)
        return k25_chat_template_parse(tpl_name, &S->chat_tpl, err);
    if (k25_tokenizer_chat_template(S->tok, &S->chat_tpl, &e) != K25_OK) {
        S->chat_tpl = K25_CHAT_NONE;
        snprintf(S->chat_err, sizeof(S->chat_err), "chat is not available: %s", e.msg);
    }
    return K25_OK;
}

int k25_serve_start(const struct k25_config *cfg, const struct k25_serve_opts *o, k25_serve_t **out,
                    struct k25_error *err)
{
    int rc;
    struct k25_serve *S = calloc(1, sizeof(*S));
    if (!S)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    S->cfg = *cfg;
    S->o = *o;
    snprintf(S->host, sizeof(S->host), "%s", o->host ? o->host : "127.0.0.1");
    const char *slash = strrchr(cfg->model, '/');
    snprintf(S->model_name, sizeof(S->model_name), "%s",
             o->model_name ? o->model_name : slash && slash[1] ? slash + 1 : cfg->model);
    S->o.host = S->o.api_key = S->o.model_name = NULL; /* the copies above stand for them */
    S->ttft = (struct hist){.le = ttft_le, .n = (int)(sizeof(ttft_le) / sizeof(ttft_le[0]))};
    S->itl = (struct hist){.le = itl_le, .n = (int)(sizeof(itl_le) / sizeof(itl_le[0]))};
    S->start_unix = (int64_t)time(NULL);
    if (o->port < 0 || o->port > 65535) {
        rc = k25_error_set(err, K25_ERANGE, "command line", 0, "--port", "must be 0..65535 (0 = a free port)");
        goto out_free;
    }
    if (o->max_waiting < 0 || o->max_body_bytes < 64 || o->max_connections < 1 || o->max_connections_per_ip < 0 ||
        o->header_timeout_s < 1 || o->body_timeout_s < 1 || o->idle_timeout_s < 1 || o->http_threads < 1) {
        rc = k25_error_set(err, K25_ERANGE, "command line", 0, NULL, "bad server limits");
        goto out_free;
    }
    if (o->http_threads > o->max_connections) { /* libmicrohttpd splits the limit among its threads */
        rc = k25_error_set(err, K25_ERANGE, "command line", 0, "--http-threads",
                           "%d threads for --max-connections %d: each thread needs one connection at least",
                           o->http_threads, o->max_connections);
        goto out_free;
    }
    if (o->api_key && *o->api_key) {
        size_t nk = strlen(o->api_key);
        if (nk > SERVE_MAX_API_KEY) {
            rc = k25_error_set(err, K25_ERANGE, "command line", 0, "--api-key",
                               "the key is %zu bytes; at most %d are accepted (an HTTP header line must hold it)",
                               nk, SERVE_MAX_API_KEY);
            goto out_free;
        }
        for (size_t i = 0; i < nk; i++)
            if ((unsigned char)o->api_key[i] < 0x21 || (unsigned char)o->api_key[i] > 0x7e) {
                rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--api-key",
                                   "byte %zu of the key is not a printable ASCII character (a client cannot send "
                                   "it in an Authorization header)", i);
                goto out_free;
            }
        if (!(S->api_key = strdup(o->api_key))) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out_free;
        }
        S->api_key_len = nk;
    }
    k25_serve_start_token(S->start_token, sizeof(S->start_token));

    /* the address first: a bad --host fails before the model is loaded */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%d", o->port);
    int gai = getaddrinfo(S->host, port_s, &hints, &ai);
    if (gai != 0) {
        rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--host", "cannot resolve '%s': %s", S->host,
                           gai_strerror(gai));
        goto out_free;
    }
    struct sockaddr_storage sa;
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);

    if ((rc = serve_tokenizer(S, cfg, o->chat_template, err)) != K25_OK)
        goto out_free;
    if ((rc = k25_model_load(cfg, &S->model, err)) != K25_OK)
        goto out_free;
    if ((rc = k25_engine_create(cfg, S->model, &S->eng, err)) != K25_OK)
        goto out_model;
    S->vocab = k25_model_get_shape(S->model)->vocab_size;
    /* GPU telemetry for the server's life: each GPU's last NVML sample on /metrics (k25_gpu_*) */
    if ((rc = k25_gputel_start_latest(&S->gpu, err)) != K25_OK)
        goto out_engine0;
    char gdesc[1400];
    fprintf(stderr, "k25 serve: GPU telemetry: %s\n", k25_gputel_describe(S->gpu, gdesc, sizeof(gdesc)));
    struct k25_replay_info ri;
    k25_engine_replay_info(S->eng, &ri);
    if (ri.warning[0])
        fprintf(stderr, "k25 serve: warning: %s\n", ri.warning); /* a torn record: dropped, not fatal */
    if (ri.n_records > 0)
        fprintf(stderr, "k25 serve: spill log: %d records, %d already done, %d replayed (run to completion; "
                "their clients are gone)\n", ri.n_records, ri.n_done, ri.n_replayed);
    S->replayed = ri.n_replayed;
    k25_engine_set_event_cb(S->eng, on_event, S);
    k25_engine_get_stats(S->eng, &S->st);
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv_work, NULL);
    pthread_cond_init(&S->cv_out, NULL);
    if (pthread_create(&S->th, NULL, engine_main, S) != 0) {
        rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "cannot start the engine thread: %s", strerror(errno));
        goto out_engine;
    }
    S->th_started = true;
    if ((rc = k25_serve_watchdog_start(S)) != 0) {
        rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "cannot start the watchdog thread: %s", strerror(rc));
        goto out_thread;
    }
    /* a pool of polling threads; a connection waiting for the engine is suspended, not a thread */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    unsigned per_ip = o->max_connections_per_ip > 0 ? (unsigned)o->max_connections_per_ip
                                                    : (unsigned)(o->max_connections > 1 ? o->max_connections / 2 : 1);
    S->o.max_connections_per_ip = (int)per_ip;
    S->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, S, MHD_OPTION_EXTERNAL_LOGGER,
                            mhd_log, S, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, S, MHD_OPTION_NOTIFY_CONNECTION, k25_serve_on_connection, S,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, S, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->http_threads, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)o->idle_timeout_s, MHD_OPTION_END);
    if (!S->d) {
        k25_serve_watchdog_stop(S);
        rc = k25_error_set(err, K25_EIO, "command line", 0, "--port",
                           "cannot listen on %s port %d (in use, or not an address of this machine)", S->host,
                           o->port);
        goto out_thread;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->d, MHD_DAEMON_INFO_BIND_PORT);
    S->port = di ? di->port : o->port;
    *out = S;
    return K25_OK;

out_thread:
    pthread_mutex_lock(&S->mu);
    S->stopping = true;
    pthread_cond_signal(&S->cv_work);
    pthread_mutex_unlock(&S->mu);
    pthread_join(S->th, NULL);
out_engine:
    pthread_cond_destroy(&S->cv_out);
    pthread_cond_destroy(&S->cv_work);
    pthread_mutex_destroy(&S->mu);
out_engine0:
    k25_gputel_destroy(S->gpu);
    k25_engine_destroy(S->eng);
out_model:
    k25_model_destroy(S->model);
out_free:
    k25_tokenizer_destroy(S->tok);
    free(S->api_key);
    free(S);
    return rc;
}

int k25_serve_port(const k25_serve_t *s)
{
    return s->port;
}

void k25_serve_stop(k25_serve_t *S)
{
    if (!S)
        return;
    pthread_mutex_lock(&S->mu);
    S->stopping = true;
    pthread_cond_broadcast(&S->cv_work);
    pthread_cond_broadcast(&S->cv_out);
    pthread_mutex_unlock(&S->mu);
    if (S->th_started)
        pthread_join(S->th, NULL); /* cancels and finishes everything in flight, resuming its connections */
    k25_serve_watchdog_stop(S);
    /* libmicrohttpd must not be stopped with a suspended connection: resume every one left, and
     * none suspends any more (every request is done: each has its news) */
    pthread_mutex_lock(&S->mu);
    S->no_suspend = true;
    pthread_cond_broadcast(&S->cv_out);
    int n = k25_serve_collect_ready(S, k25_now_ns(), &S->wake, &S->cap_wake);
    pthread_mutex_unlock(&S->mu);
    for (int i = 0; i < n; i++)
        MHD_resume_connection(S->wake[i]);
    MHD_stop_daemon(S->d); /* streams drain their last chunks; the polling threads end */
    k25_gputel_destroy(S->gpu);
    pthread_cond_destroy(&S->cv_out);
    pthread_cond_destroy(&S->cv_work);
    pthread_mutex_destroy(&S->mu);
    k25_engine_destroy(S->eng);
    k25_model_destroy(S->model);
    k25_tokenizer_destroy(S->tok);
    free(S->by_handle);
    free(S->active);
    free(S->evs);
    free(S->wake);
    free(S->api_key);
    free(S);
}
