/*
 * loadgen.c - the load generator: request order, open-loop arrival
 * schedules, and the event loop that drives the engine.
 *
 * The engine is single-threaded at the API level, so the load generator is
 * an event loop in the calling thread:
 *
 *   loop: issue_due: submit every request whose time has come (closed
 *           loop: a user is free; open loop: its scheduled arrival has
 *           passed and the in-flight cap allows) in one
 *           k25_engine_submit_batch, so a spill folder costs one fsync per
 *           batch, not one per request;
 *         step_once, collect_finished: if the engine has work, run one
 *           step and collect what finished;
 *         if it is idle and the next arrival is in the future, sleep until
 *           then (clock_nanosleep, CLOCK_MONOTONIC, absolute).
 *
 * The arrival clock, the counts and the records (struct k25_loadgen) are
 * shared with the HTTP client's loop (endpoint.c).
 *
 * Latency is counted from the request's *intended* time: its scheduled
 * arrival (open loop) or the moment its user became free (closed loop).
 * The difference between the intended time and the actual submission is
 * the scheduling lag, recorded per request: it shows how late the generator itself was (a request that arrives while a
 * step runs can only be submitted after it).  The loop's wall time minus
 * the time inside the engine (steps, submits) and asleep is the harness's
 * own overhead.
 *
 * Busy fraction: every step's busy_ns increase is spread over the step's
 * wall interval and accumulated into fixed 100 ms windows; queue depth, KV
 * blocks and memory are sampled into each window at the first loop
 * iteration at or after its start.
 */
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ random */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static double unif(uint64_t *s)
{
    return ((double)(splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(uint64_t *s)
{
    double u1 = unif(s), u2 = unif(s);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Gamma(shape k, scale 1): Marsaglia-Tsang; k < 1 via Gamma(k+1) U^(1/k). */
static double gamma_draw(uint64_t *s, double k)
{
    if (k < 1.0) {
        double u = unif(s);
        return gamma_draw(s, k + 1.0) * pow(u, 1.0 / k);
    }
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = normal(s);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = unif(s);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

size_t *k25_loadgen_order(size_t n, uint64_t seed)
{
    size_t *o = malloc(sizeof(size_t) * (n ? n : 1));
    if (!o)
        return NULL;
    uint64_t s = seed ^ 0x6f726465725f6b32ULL; /* "order_k2" */
    for (size_t i = 0; i < n; i++)
        o[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(splitmix64(&s) % i);
        size_t t = o[i - 1];
        o[i - 1] = o[j];
        o[j] = t;
    }
    return o;
}

int k25_loadgen_schedule(double rate_rps, double burstiness, uint64_t seed, int64_t max_n, int64_t duration_ns,
                         int64_t **out, size_t *n_out, struct k25_error *err)
{
    return k25_loadgen_schedule_surge(rate_rps, burstiness, 0, 0, 0, seed, max_n, duration_ns, out, n_out, err);
}

/*
 * Advances now_s by one interval of unit intensity mass x (a gamma draw
 * with mean 1) under a piecewise-constant rate: rate_rps outside the surge
 * window [s0, s1), rate_rps x factor inside.  The mass is spent at the rate
 * of each piece in turn, so an interval that straddles a boundary is
 * exactly what a time-varying Poisson (or gamma-renewal) process gives.
 */
static double advance(double now_s, double x, double rate_rps, double factor, double s0, double s1)
{
    for (;;) {
        bool in = factor > 0 && now_s >= s0 && now_s < s1;
        double r = in ? rate_rps * factor : rate_rps;
        double edge = factor > 0 ? (now_s < s0 ? s0 : (in ? s1 : INFINITY)) : INFINITY;
        double t = now_s + x / r;
        if (t <= edge)
            return t;
        x -= (edge - now_s) * r;
        now_s = edge;
    }
}

int k25_loadgen_schedule_surge(double rate_rps, double burstiness, double factor, int64_t start_ns, int64_t len_ns,
                               uint64_t seed, int64_t max_n, int64_t duration_ns, int64_t **out, size_t *n_out,
                               struct k25_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (!(rate_rps > 0) || !(burstiness > 0) || (max_n <= 0 && duration_ns <= 0))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--rate", "the schedule needs a rate > 0, burstiness > 0 "
                             "and a request count or duration");
    if (factor != 0 && (!(factor > 0) || isinf(factor) || start_ns < 0 || len_ns <= 0))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--surge", "needs a factor > 0, a start >= 0 and a "
                             "duration > 0");
    uint64_t s = seed ^ 0x7363686564756c65ULL; /* "schedule" */
    double s0 = (double)start_ns / 1e9, s1 = (double)(start_ns + len_ns) / 1e9;
    size_t cap = max_n > 0 ? (size_t)max_n : 1024, n = 0;
    int64_t *t = malloc(sizeof(int64_t) * cap);
    if (!t)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    double now_s = 0;
    for (;;) {
        if (max_n > 0 && n == (size_t)max_n)
            break;
        /* gamma(k) / k has mean 1: one unit of intensity mass (the same draws as before surges existed) */
        now_s = advance(now_s, gamma_draw(&s, burstiness) / burstiness, rate_rps, factor, s0, s1);
        int64_t ns = (int64_t)llround(now_s * 1e9);
        if (max_n <= 0 && ns >= duration_ns)
            break;
        if (n == cap) {
            int64_t *nt = realloc(t, sizeof(int64_t) * (cap *= 2));
            if (!nt) {
                free(t);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            t = nt;
        }
        t[n++] = ns;
    }
    *out = t;
    *n_out = n;
    return K25_OK;
}

/* One non-negative finite number of a --surge spec; empty allowed when dflt >= 0. */
static bool surge_num(const char *p, size_t n, double dflt, double *out)
{
    char buf[64];
    if (n == 0 && dflt >= 0) {
        *out = dflt;
        return true;
    }
    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    double x = strtod(buf, &end);
    if (*end || errno || !(x >= 0) || isinf(x))
        return false;
    *out = x;
    return true;
}

int k25_bench_surge_parse(const char *spec, struct k25_bench_opts *o, struct k25_error *err)
{
    const char *c1 = strchr(spec, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    double f, st, du;
    if (!c1 || !c2 || strchr(c2 + 1, ':'))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--surge",
                             "expected FACTOR:START_S:DURATION_S (e.g. 5:10:20), got \"%s\"", spec);
    if (!surge_num(spec, (size_t)(c1 - spec), 5.0, &f) || !(f > 1))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--surge",
                             "FACTOR must be a number > 1 (5 = +400%%; empty = 5), got \"%.*s\"", (int)(c1 - spec),
                             spec);
    if (!surge_num(c1 + 1, (size_t)(c2 - c1 - 1), -1, &st))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--surge",
                             "START_S must be a number of seconds >= 0, got \"%.*s\"", (int)(c2 - c1 - 1), c1 + 1);
    if (!surge_num(c2 + 1, strlen(c2 + 1), -1, &du) || !(du > 0))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--surge",
                             "DURATION_S must be a number of seconds > 0, got \"%s\"", c2 + 1);
    o->surge_factor = f;
    o->surge_start_s = st;
    o->surge_duration_s = du;
    return K25_OK;
}

/* ------------------------------------------------------------ the loop */

/* What the loop knows about a request in flight, by engine handle. */
struct inflight {
    long rec;        /* index into run->reqs, or -1 (warm-up / not recorded) */
    int user;
    int64_t n_chunks, cap_chunks;
    int64_t *cs, *ce;
};

/* The in-process event loop's state: the shared generator plus what only an engine has. */
struct loop {
    k25_engine_t *e;
    struct k25_bench_run *run;
    struct k25_loadgen g;
    struct inflight *fl;      /* [cap_fl], indexed by handle */
    int cap_fl;
    int *finished;            /* handles finished during the current step */
    int n_finished, cap_finished;
    uint64_t step_start;      /* k25_now_ns() when the current step began */
    int oom;
    bool can_issue;           /* requests remain to be issued (as of the last issue_due) */
    bool stall_pending;       /* the --stall test knob has not fired yet */
    uint64_t busy_prev;       /* the engine's busy_ns after the last step */
    int64_t steps0;           /* the engine's step count at the start */
    struct k25_bench_overhead ov;
    /* the batch issue_due submits at once, [cap_batch] each */
    struct k25_loadgen_due *due;
    struct k25_request *reqs;
    int *handles, *rcs;
    struct k25_error *errs;
    int cap_batch;
};

static void on_event(const struct k25_event *ev, void *user)
{
    struct loop *L = user;
    if (ev->type == K25_EV_PREFILL_CHUNK) {
        if (ev->handle >= L->cap_fl || L->fl[ev->handle].rec < 0)
            return;
        struct inflight *f = &L->fl[ev->handle];
        if (f->n_chunks == f->cap_chunks) {
            int64_t nc = f->cap_chunks ? 2 * f->cap_chunks : 8;
            int64_t *a = realloc(f->cs, sizeof(int64_t) * (size_t)nc);
            if (a)
                f->cs = a;
            int64_t *b = realloc(f->ce, sizeof(int64_t) * (size_t)nc);
            if (b)
                f->ce = b;
            if (!a || !b) {
                L->oom = 1;
                return;
            }
            f->cap_chunks = nc;
        }
        f->cs[f->n_chunks] = (int64_t)(L->step_start - L->run->t0_ns);
        f->ce[f->n_chunks++] = (int64_t)(ev->t_ns - L->run->t0_ns);
    } else if (ev->type == K25_EV_FINISH) {
        if (L->n_finished == L->cap_finished) {
            int nc = L->cap_finished ? 2 * L->cap_finished : 64;
            int *nf = realloc(L->finished, sizeof(int) * (size_t)nc);
            if (!nf) {
                L->oom = 1;
                return;
            }
            L->finished = nf;
            L->cap_finished = nc;
        }
        L->finished[L->n_finished++] = ev->handle;
    }
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return -1;
    memset((char *)np + *cap * elem, 0, (nc - *cap) * elem);
    *p = np;
    *cap = nc;
    return 0;
}

/* Adds busy nanoseconds spread over [s0, s1) (relative) into the 100 ms windows. */
static int add_busy(struct k25_bench_run *run, int64_t s0, int64_t s1, double busy, int rep)
{
    if (s1 <= s0)
        s1 = s0 + 1;
    size_t w1 = (size_t)((s1 - 1) / K25_BENCH_WINDOW_NS);
    size_t cap = run->cap_win;
    if (grow((void **)&run->win, &cap, w1 + 1, sizeof(*run->win)) != 0)
        return -1;
    run->cap_win = cap;
    for (size_t w = run->n_win; w <= w1; w++) {
        run->win[w].t_ns = (int64_t)w * K25_BENCH_WINDOW_NS;
        run->win[w].len_ns = K25_BENCH_WINDOW_NS;
        run->win[w].rep = rep;
        run->win[w].n_waiting = -1; /* not sampled yet */
        run->win[w].n_waiting_memory = run->win[w].n_waiting_spill = run->win[w].breaker_open = -1;
        run->win[w].n_waiting_degraded = -1;
        run->win[w].breaker_busy_fraction = NAN;
    }
    if (w1 + 1 > run->n_win)
        run->n_win = w1 + 1;
    for (size_t w = (size_t)(s0 / K25_BENCH_WINDOW_NS); w <= w1; w++) {
        int64_t a = (int64_t)w * K25_BENCH_WINDOW_NS, b = a + K25_BENCH_WINDOW_NS;
        int64_t lo = s0 > a ? s0 : a, hi = s1 < b ? s1 : b;
        if (hi > lo)
            run->win[w].busy_ns += busy * (double)(hi - lo) / (double)(s1 - s0);
    }
    return 0;
}

/* Samples the engine state into every window from the last sampled one to now's. */
static int sample_state(struct loop *L, int64_t now_rel, int n_held, int rep)
{
    struct k25_bench_run *run = L->run;
    if (add_busy(run, now_rel, now_rel + 1, 0.0, rep) != 0)
        return -1;
    size_t w = (size_t)(now_rel / K25_BENCH_WINDOW_NS);
    if (run->win[w].n_waiting >= 0)
        return 0;
    struct k25_engine_stats st;
    struct k25_mem_stats ms;
    k25_engine_get_stats(L->e, &st);
    k25_mem_get(&ms);
    for (size_t k = w + 1; k-- > 0;) {
        if (run->win[k].n_waiting >= 0)
            break;
        run->win[k].n_waiting = st.n_waiting + n_held;
        run->win[k].n_waiting_memory = st.n_waiting_memory;
        run->win[k].n_waiting_spill = st.n_waiting_spill;
        run->win[k].breaker_open = st.breaker_open;
        run->win[k].n_waiting_degraded = st.n_waiting_degraded;
        run->win[k].breaker_busy_fraction = k25_engine_config(L->e)->breaker_enabled ? st.busy_fraction : NAN;
        run->win[k].n_running = st.n_running;
        run->win[k].kv_blocks = st.kv_blocks_in_use;
        run->win[k].mem_bytes = ms.total_cur_bytes;
        run->win[k].rep = rep;
    }
    return 0;
}

/* Copies a finished request's result into its record and releases it. */
static int collect(struct loop *L, int h)
{
    const struct k25_result *r = k25_engine_result(L->e, h);
    struct inflight *f = &L->fl[h];
    uint64_t t0 = L->run->t0_ns;
    if (f->rec >= 0) {
        struct k25_bench_req *q = &L->run->reqs[f->rec];
        q->state = r->state;
        snprintf(q->reason, sizeof(q->reason), "%s", r->reason);
        q->n_input = r->n_input;
        q->n_output = r->n_output;
        q->admit_ns = r->admit_t_ns ? (int64_t)(r->admit_t_ns - t0) : -1;
        q->first_ns = r->n_output > 0 ? (int64_t)(r->token_t_ns[0] - t0) : -1;
        q->finish_ns = (int64_t)(r->finish_t_ns - t0);
        q->priority = r->priority;
        q->spilled = r->spilled;
        q->replayed = r->replayed;
        q->degraded = r->degraded;
        q->ttft_sla_ms = r->ttft_sla_ms;
        q->cached_tokens = r->cached_tokens;
        q->kv_block_reads = r->kv_block_reads; /* KV tiers (issue 18): trace /requests, summary */
        q->kv_block_hits = r->kv_block_hits;
        q->kv_tier_wait_ns = (int64_t)r->kv_tier_wait_ns;
        q->kv_tier_bytes_moved = r->kv_tier_bytes_moved;
        if (r->n_output > 0) {
            q->token_ns = malloc(sizeof(int64_t) * (size_t)r->n_output);
            q->token_ids = malloc(sizeof(int32_t) * (size_t)r->n_output);
            q->token_margins = malloc(sizeof(float) * (size_t)r->n_output);
            if (!q->token_ns || !q->token_ids || !q->token_margins)
                return -1;
            for (int i = 0; i < r->n_output; i++) {
                q->token_ns[i] = (int64_t)(r->token_t_ns[i] - t0);
                q->token_ids[i] = r->output_ids[i];
                q->token_margins[i] = r->margins[i]; /* the token-identity rule's input (trace /tokens/margin) */
            }
        }
        q->n_chunks = (int32_t)f->n_chunks;
        q->chunk_start_ns = f->cs;
        q->chunk_end_ns = f->ce;
        f->cs = f->ce = NULL;
        L->run->output_tokens += r->n_output;
    }
    free(f->cs);
    free(f->ce);
    f->cs = f->ce = NULL;
    k25_loadgen_retire(&L->g, f->user, (int64_t)r->finish_t_ns);
    k25_engine_release(L->e, h);
    return 0;
}

static void sleep_until(uint64_t t_ns)
{
    struct timespec ts = {(time_t)(t_ns / 1000000000ULL), (long)(t_ns % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/*
 * The run's progress (progress.c), when it is due: requests finished over
 * every repetition so far, with the repetition and the P50 TTFT of this
 * one as the note.  Shared by the HTTP client's loop (endpoint.c).
 */
void k25_loadgen_progress(const struct k25_loadgen *g)
{
    const struct k25_bench_opts *o = g->s->opts;
    if (!g->s->record || !k25_progress_due(o->prog))
        return;
    const struct k25_bench_run *run = g->run;
    size_t n = run->n_reqs - g->first_rec, k = 0;
    double *v = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; v && i < n; i++) {
        const struct k25_bench_req *q = &run->reqs[g->first_rec + i];
        if (q->state == K25_REQ_COMPLETED && q->first_ns >= 0)
            v[k++] = (double)(q->first_ns - q->arrival_ns) / 1e6;
    }
    struct k25_dist d;
    if (v)
        k25_stats_describe(v, k, &d);
    free(v);
    char p50[32] = "-";
    if (v && d.p[0].supported)
        snprintf(p50, sizeof(p50), "%.1f ms", d.p[0].value);
    k25_progress_update(o->prog, (int64_t)g->first_rec + g->done, "rep %d/%d, P50 TTFT %s", g->s->rep + 1, o->repeat,
                        p50);
}

int k25_arrivals_init(struct k25_arrivals *a, const struct k25_bench_opts *o, bool open, int users, uint64_t seed,
                      int64_t n_requests, uint64_t start_ns, struct k25_error *err)
{
    memset(a, 0, sizeof(*a));
    a->open = open;
    a->start_ns = (int64_t)start_ns;
    a->duration_ns = o->duration_s > 0 ? (int64_t)llround(o->duration_s * 1e9) : 0;
    if (o->surge_factor > 0 && o->mode != K25_BENCH_OPEN)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--surge", "needs an open loop (--rate)");
    if (open && o->arrivals != K25_ARR_GAMMA) {
        int rc = o->arrivals == K25_ARR_CONSTANT
                     ? k25_arrivals_constant(o->rate_rps, n_requests, a->duration_ns, &a->sched, &a->n_sched, err)
                 : o->arrivals == K25_ARR_RAMP
                     ? k25_arrivals_ramp(o->ramp_start_rps, o->ramp_end_rps, o->burstiness, seed, n_requests,
                                         &a->sched, &a->n_sched, err)
                     : k25_arrivals_trace(o->trace_file, n_requests, &a->sched, &a->n_sched, err);
        a->total = (int64_t)a->n_sched;
        return rc;
    }
    if (open) {
        int rc = k25_loadgen_schedule_surge(o->rate_rps, o->burstiness, o->surge_factor,
                                            (int64_t)llround(o->surge_start_s * 1e9),
                                            (int64_t)llround(o->surge_duration_s * 1e9), seed, n_requests,
                                            a->duration_ns, &a->sched, &a->n_sched, err);
        a->total = (int64_t)a->n_sched;
        return rc;
    }
    a->total = n_requests;
    a->users = a->users_free = users;
    if (!(a->free_at = malloc(sizeof(int64_t) * (size_t)(users > 0 ? users : 1))))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (int u = 0; u < users; u++)
        a->free_at[u] = a->start_ns;
    return K25_OK;
}

void k25_arrivals_free(struct k25_arrivals *a)
{
    free(a->sched);
    free(a->free_at);
    memset(a, 0, sizeof(*a));
}

bool k25_arrivals_more(const struct k25_arrivals *a, int64_t issued, uint64_t now_ns)
{
    if (a->open)
        return (size_t)issued < a->n_sched;
    return a->total > 0 ? issued < a->total : (int64_t)now_ns - a->start_ns < a->duration_ns;
}

bool k25_arrivals_due(struct k25_arrivals *a, int64_t issued, uint64_t now_ns, int64_t *intended, int *user)
{
    *user = -1;
    if (a->open) {
        *intended = a->start_ns + a->sched[issued];
        return *intended <= (int64_t)now_ns;
    }
    if (a->users_free == 0)
        return false;
    int best = -1; /* the user free the longest: each keeps its own clock */
    for (int u = 0; u < a->users; u++)
        if (a->free_at[u] >= 0 && (best < 0 || a->free_at[u] < a->free_at[best]))
            best = u;
    *user = best;
    *intended = a->free_at[best];
    a->free_at[best] = -1;
    a->users_free--;
    return true;
}

void k25_arrivals_user_free(struct k25_arrivals *a, int user, int64_t t_ns)
{
    if (user < 0)
        return;
    a->free_at[user] = t_ns;
    a->users_free++;
}

int64_t k25_arrivals_next_ns(const struct k25_arrivals *a, int64_t issued)
{
    return a->open && (size_t)issued < a->n_sched ? a->start_ns + a->sched[issued] : -1;
}


/* ------------------------------------------------------------ the shared generator */

int k25_loadgen_begin(struct k25_loadgen *g, const struct k25_loadgen_settings *s, struct k25_bench_run *run,
                      struct k25_error *err)
{
    K25_ASSERT(s->n_inputs > 0);
    const struct k25_bench_opts *o = s->opts;
    memset(g, 0, sizeof(*g));
    g->s = s;
    g->run = run;
    g->open = o->mode == K25_BENCH_OPEN && s->record;
    int users = g->open ? 0 : (o->concurrency > 0 ? o->concurrency : 1);
    g->cap = g->open ? o->concurrency : users;
    g->start_ns = k25_now_ns();
    if (s->record && s->rep == 0)
        run->t0_ns = g->start_ns;
    g->rep_start_ns = (int64_t)(g->start_ns - run->t0_ns);
    g->first_rec = run->n_reqs;
    return k25_arrivals_init(&g->arrivals, o, g->open, users, s->seed, s->n_requests, g->start_ns, err);
}

bool k25_loadgen_more(const struct k25_loadgen *g, uint64_t now_ns)
{
    return k25_arrivals_more(&g->arrivals, g->issued, now_ns);
}

/* A new record for request `seq` of the repetition, from its input, WAITING since intended_ns. */
static int new_record(struct k25_loadgen *g, const struct k25_bench_input *bi, int user, int64_t intended_ns,
                      long *rec)
{
    struct k25_bench_run *run = g->run;
    size_t capr = run->cap_reqs;
    if (grow((void **)&run->reqs, &capr, run->n_reqs + 1, sizeof(*run->reqs)) != 0)
        return -1;
    run->cap_reqs = capr;
    *rec = (long)run->n_reqs++;
    struct k25_bench_req *q = &run->reqs[*rec];
    memset(q, 0, sizeof(*q));
    snprintf(q->id, sizeof(q->id), "%s", bi->id);
    q->seq = g->issued;
    q->rep = g->s->rep;
    q->user = user;
    q->line = bi->line;
    q->max_new = bi->max_new;
    q->n_input = bi->n_ids;
    q->state = K25_REQ_WAITING;
    q->arrival_ns = intended_ns - (int64_t)run->t0_ns;
    q->admit_ns = q->first_ns = -1;
    q->priority = bi->priority;
    return 0;
}

int k25_loadgen_take_due(struct k25_loadgen *g, uint64_t now_ns, struct k25_loadgen_due *d,
                         struct k25_error *err)
{
    const struct k25_loadgen_settings *s = g->s;
    int64_t intended;
    if (!k25_loadgen_more(g, now_ns) || (g->cap != 0 && g->inflight >= g->cap) ||
        !k25_arrivals_due(&g->arrivals, g->issued, now_ns, &intended, &d->user))
        return 0;
    d->input = s->order[(s->first + (size_t)g->issued) % s->n_inputs];
    d->rec = -1;
    if (s->record && new_record(g, &s->inputs[d->input], d->user, intended, &d->rec) != 0)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    g->issued++;
    g->inflight++;
    return 1;
}

void k25_loadgen_retire(struct k25_loadgen *g, int user, int64_t t_ns)
{
    k25_arrivals_user_free(&g->arrivals, user, t_ns);
    g->inflight--;
    g->done++;
}

void k25_loadgen_end(struct k25_loadgen *g)
{
    struct k25_bench_run *run = g->run;
    int rep = g->s->rep;
    if (!g->s->record)
        return;
    int64_t last = g->rep_start_ns;
    for (size_t i = g->first_rec; i < run->n_reqs; i++)
        if (run->reqs[i].finish_ns > last)
            last = run->reqs[i].finish_ns;
    run->rep_start_ns[rep] = g->rep_start_ns;
    run->rep_end_ns[rep] = last;
    run->n_reps = rep + 1;
}

void k25_loadgen_free(struct k25_loadgen *g)
{
    k25_arrivals_free(&g->arrivals);
}

/* ------------------------------------------------------------ the in-process loop */

static int oom(struct k25_error *err)
{
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}

/* Room for a batch of n in the submit arrays. */
static int batch_reserve(struct loop *L, int n)
{
    if (n <= L->cap_batch)
        return 0;
    int nc = L->cap_batch ? 2 * L->cap_batch : 16;
    while (nc < n)
        nc *= 2;
    struct k25_loadgen_due *d = realloc(L->due, sizeof(*d) * (size_t)nc);
    if (d)
        L->due = d;
    struct k25_request *r = realloc(L->reqs, sizeof(*r) * (size_t)nc);
    if (r)
        L->reqs = r;
    int *h = realloc(L->handles, sizeof(int) * (size_t)nc);
    if (h)
        L->handles = h;
    int *rc = realloc(L->rcs, sizeof(int) * (size_t)nc);
    if (rc)
        L->rcs = rc;
    struct k25_error *e = realloc(L->errs, sizeof(*e) * (size_t)nc);
    if (e)
        L->errs = e;
    if (!d || !r || !h || !rc || !e)
        return -1;
    L->cap_batch = nc;
    return 0;
}

/*
 * Verb 1: issues every request due at now (closed loop: a user is free;
 * open loop: its arrival has passed and the in-flight cap allows) with one
 * k25_engine_submit_batch, so a spill folder costs one fsync for all.  A
 * request whose spill record could not be made durable (K25_EIO) is
 * recorded as rejected with the engine's reason and its user is free
 * again; any other submit failure fails the run.
 */
static int issue_due(struct loop *L, uint64_t now, struct k25_error *err)
{
    struct k25_bench_run *run = L->run;
    const struct k25_bench_input *in = L->g.s->inputs;
    int n = 0, rc;
    for (;;) {
        if (batch_reserve(L, n + 1) != 0)
            return oom(err);
        if ((rc = k25_loadgen_take_due(&L->g, now, &L->due[n], err)) < 0)
            return rc;
        if (rc == 0)
            break;
        const struct k25_bench_input *bi = &in[L->due[n].input];
        L->reqs[n++] = (struct k25_request){.id = bi->id, .input_ids = bi->ids, .n_input = bi->n_ids,
                                            .max_new_tokens = bi->max_new, .priority = bi->priority,
                                            .section_starts = bi->sections, .n_section_starts = bi->n_sections,
                                            .block_pattern_hint = bi->hint};
    }
    if (n > 0) {
        uint64_t s0 = k25_now_ns();
        k25_engine_submit_batch(L->e, L->reqs, n, L->handles, L->rcs, L->errs);
        uint64_t s1 = k25_now_ns();
        L->ov.submit_ns += (int64_t)(s1 - s0);
        for (int i = 0; i < n; i++) {
            const struct k25_loadgen_due *d = &L->due[i];
            int h = L->handles[i];
            if (L->rcs[i] == K25_EIO) {
                /* nothing was accepted: rejected with the engine's reason (not lost) */
                if (d->rec >= 0) {
                    struct k25_bench_req *q = &run->reqs[d->rec];
                    q->state = K25_REQ_REJECTED;
                    snprintf(q->reason, sizeof(q->reason), "%s",
                             L->errs[i].msg[0] ? L->errs[i].msg : "spill write failed");
                    q->submit_ns = q->finish_ns = (int64_t)(s0 - run->t0_ns);
                }
                k25_loadgen_retire(&L->g, d->user, (int64_t)s1);
                continue;
            }
            if (L->rcs[i] != K25_OK) {
                if (err)
                    *err = L->errs[i];
                return L->rcs[i];
            }
            if (d->rec >= 0)
                run->reqs[d->rec].submit_ns = (int64_t)(k25_engine_result(L->e, h)->submit_t_ns - run->t0_ns);
            if (h >= L->cap_fl) {
                size_t c = (size_t)L->cap_fl;
                if (grow((void **)&L->fl, &c, (size_t)h + 1, sizeof(*L->fl)) != 0)
                    return oom(err);
                L->cap_fl = (int)c;
            }
            L->fl[h] = (struct inflight){.rec = d->rec, .user = d->user};
        }
    }
    L->can_issue = k25_loadgen_more(&L->g, k25_now_ns());
    return K25_OK;
}

/* Samples the windows at now; open-loop arrivals already due but held by the cap count as waiting. */
static int sample(struct loop *L, uint64_t now, struct k25_error *err)
{
    const struct k25_arrivals *A = &L->g.arrivals;
    int n_held = 0;
    if (!L->g.s->record)
        return K25_OK;
    if (L->g.open)
        for (size_t i = (size_t)L->g.issued; i < A->n_sched && A->start_ns + A->sched[i] <= (int64_t)now; i++)
            n_held++;
    if (sample_state(L, (int64_t)(now - L->run->t0_ns), n_held, L->g.s->rep) != 0)
        return oom(err);
    return K25_OK;
}

/*
 * Verb 2: one engine step (after the --stall test knob's sleep, when it is
 * due), its busy time spread over the step's windows.
 */
static int step_once(struct loop *L, struct k25_error *err)
{
    const struct k25_bench_opts *o = L->g.s->opts;
    struct k25_bench_run *run = L->run;
    uint64_t s0 = k25_now_ns();
    L->step_start = s0;
    if (L->stall_pending && (int64_t)(s0 - L->g.start_ns) >= o->stall_at_ns) {
        L->stall_pending = false;
        run->stall_start_ns = (int64_t)(s0 - run->t0_ns);
        sleep_until(s0 + (uint64_t)o->stall_ns);
        run->stall_end_ns = (int64_t)(k25_now_ns() - run->t0_ns);
    }
    L->n_finished = 0;
    int rc = k25_engine_step(L->e, err);
    uint64_t s1 = k25_now_ns();
    L->ov.step_ns += (int64_t)(s1 - s0);
    if (rc != K25_OK)
        return rc;
    if (L->oom)
        return oom(err);
    struct k25_engine_stats st;
    k25_engine_get_stats(L->e, &st);
    if (L->g.s->record && add_busy(run, (int64_t)(s0 - run->t0_ns), (int64_t)(s1 - run->t0_ns),
                                   (double)(st.busy_ns - L->busy_prev), L->g.s->rep) != 0)
        return oom(err);
    L->busy_prev = st.busy_ns;
    return K25_OK;
}

/* Verb 3: collects the requests the last step finished into their records and releases them. */
static int collect_finished(struct loop *L, struct k25_error *err)
{
    for (int i = 0; i < L->n_finished; i++)
        if (collect(L, L->finished[i]) != 0)
            return oom(err);
    L->n_finished = 0;
    return K25_OK;
}

/* The engine is idle: sleeps until the next open-loop arrival (closed loop: the next issue_due sends). */
static void wait_next_arrival(struct loop *L)
{
    int64_t next = k25_arrivals_next_ns(&L->g.arrivals, L->g.issued);
    if (next < 0)
        return;
    uint64_t s0 = k25_now_ns();
    if ((uint64_t)next > s0) {
        sleep_until((uint64_t)next);
        L->ov.sleep_ns += (int64_t)(k25_now_ns() - s0);
    }
}

/* Adds the repetition's overhead and busy time to the run; trims the last window to the run's end. */
static void finish_rep(struct loop *L, uint64_t end)
{
    struct k25_bench_run *run = L->run;
    int rep = L->g.s->rep;
    if (!L->g.s->record)
        return;
    struct k25_engine_stats st;
    k25_engine_get_stats(L->e, &st);
    k25_loadgen_end(&L->g);
    struct k25_bench_overhead *ov = &L->ov;
    ov->loop_ns = (int64_t)(end - L->g.start_ns);
    ov->harness_ns = ov->loop_ns - ov->step_ns - ov->submit_ns - ov->sleep_ns;
    ov->steps = st.steps - L->steps0;
    run->ov.loop_ns += ov->loop_ns;
    run->ov.step_ns += ov->step_ns;
    run->ov.submit_ns += ov->submit_ns;
    run->ov.sleep_ns += ov->sleep_ns;
    run->ov.harness_ns += ov->harness_ns;
    run->ov.steps += ov->steps;
    /* the forward-pass time of these steps */
    double busy = 0;
    for (size_t w = 0; w < run->n_win; w++)
        if (run->win[w].rep == rep)
            busy += run->win[w].busy_ns;
    run->ov.busy_ns += (int64_t)llround(busy);
    /* the last window ends with the last repetition */
    if (rep + 1 == L->g.s->opts->repeat && run->n_win > 0) {
        struct k25_bench_window *lw = &run->win[run->n_win - 1];
        int64_t end_rel = (int64_t)(end - run->t0_ns);
        if (end_rel - lw->t_ns < lw->len_ns)
            lw->len_ns = end_rel - lw->t_ns > 0 ? end_rel - lw->t_ns : 1;
    }
}

static void loop_free(struct loop *L)
{
    k25_engine_set_event_cb(L->e, NULL, NULL);
    for (int h = 0; h < L->cap_fl; h++) {
        free(L->fl[h].cs);
        free(L->fl[h].ce);
    }
    free(L->fl);
    free(L->finished);
    free(L->due);
    free(L->reqs);
    free(L->handles);
    free(L->rcs);
    free(L->errs);
    k25_loadgen_free(&L->g);
}

int k25_loadgen_run(k25_engine_t *e, const struct k25_loadgen_settings *s, struct k25_bench_run *run,
                    struct k25_error *err)
{
    const struct k25_bench_opts *o = s->opts;
    struct loop L = {.e = e, .run = run};
    int rc = k25_loadgen_begin(&L.g, s, run, err);
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    L.busy_prev = st.busy_ns;
    L.steps0 = st.steps;
    L.stall_pending = s->record && s->rep == 0 && o->stall_at_ns >= 0 && o->stall_ns > 0;
    k25_engine_set_event_cb(e, on_event, &L);
    long hold_at = s->record && s->rep == 0 ? k25_testknob_hold_at() : 0;
    while (rc == K25_OK) {
        if (o->stop && *o->stop) {
            run->interrupted = true;
            rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "interrupted");
            break;
        }
        uint64_t now = k25_now_ns();
        if ((rc = issue_due(&L, now, err)) != K25_OK || (rc = sample(&L, now, err)) != K25_OK)
            break;
        if (!k25_engine_idle(e)) {
            if ((rc = step_once(&L, err)) != K25_OK || (rc = collect_finished(&L, err)) != K25_OK)
                break;
            /* TEST-ONLY K25_TEST_HOLD=PREFIX@N (testknob.c): a signal while held is the loop's interruption */
            if (hold_at > 0 && L.g.done >= hold_at) {
                hold_at = 0;
                if ((rc = k25_testknob_hold(o->stop, err)) != K25_OK && !(o->stop && *o->stop))
                    break;
                rc = K25_OK;
            }
        } else if (!L.can_issue && L.g.inflight == 0) {
            finish_rep(&L, k25_now_ns()); /* everything issued and finished */
            break;
        } else {
            wait_next_arrival(&L);
        }
        k25_loadgen_progress(&L.g);
    }
    loop_free(&L);
    return rc;
}
