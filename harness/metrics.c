/*
 * metrics.c - per-request metrics and the run summary, computed from the
 * recorded times exactly as docs/metrics.md defines them.
 *
 * Every latency counts from the request's arrival: its scheduled arrival
 * in open loop, the moment its user was ready in closed loop.  Token counts
 * are the engine's (k25_result.n_input / n_output), never re-derived.
 * Latency distributions pool the completed requests of every repetition;
 * the headline figures are also computed per repetition, for the
 * across-repetition confidence intervals.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const k25_metric_names[K25_M_NMETRICS] = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms",
                                                     "sched_lag_ms"};
const char *const k25_headline_names[K25_H_NHEAD] = {"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p50_ms",
                                                     "output_tok_per_s", "requests_per_s", "goodput_rps"};

static double ms(int64_t ns)
{
    return (double)ns / 1e6;
}

double k25_bench_req_ttft_ms(const struct k25_bench_req *r)
{
    return r->first_ns >= 0 ? ms(r->first_ns - r->arrival_ns) : NAN;
}

double k25_bench_req_tpot_ms(const struct k25_bench_req *r)
{
    if (r->n_output < 2 || !r->token_ns)
        return NAN;
    return ms(r->token_ns[r->n_output - 1] - r->token_ns[0]) / (r->n_output - 1);
}

/* Last token (or the finish, for a request without tokens) minus arrival. */
double k25_bench_req_e2e_ms(const struct k25_bench_req *r)
{
    int64_t end = r->n_output > 0 && r->token_ns ? r->token_ns[r->n_output - 1] : r->finish_ns;
    return ms(end - r->arrival_ns);
}

double k25_bench_req_queue_ms(const struct k25_bench_req *r)
{
    return r->admit_ns >= 0 ? ms(r->admit_ns - r->arrival_ns) : NAN;
}

double k25_bench_req_lag_ms(const struct k25_bench_req *r)
{
    return ms(r->submit_ns - r->arrival_ns);
}

double k25_bench_req_out_tps(const struct k25_bench_req *r)
{
    double e2e = k25_bench_req_e2e_ms(r);
    return e2e > 0 ? r->n_output / (e2e / 1e3) : NAN;
}

static double max_itl_ms(const struct k25_bench_req *r)
{
    double m = NAN;
    for (int i = 1; i < r->n_output; i++) {
        double d = ms(r->token_ns[i] - r->token_ns[i - 1]);
        if (isnan(m) || d > m)
            m = d;
    }
    return m;
}

bool k25_bench_req_meets_slo(const struct k25_bench_req *r, const struct k25_bench_slo *slo)
{
    if (r->state != K25_REQ_COMPLETED)
        return false;
    double v;
    if (slo->ttft_ms > 0 && !((v = k25_bench_req_ttft_ms(r)) <= slo->ttft_ms))
        return false;
    /* one-token answers have no TPOT/ITL: nothing to violate */
    if (slo->tpot_ms > 0 && !isnan(v = k25_bench_req_tpot_ms(r)) && v > slo->tpot_ms)
        return false;
    if (slo->itl_ms > 0 && !isnan(v = max_itl_ms(r)) && v > slo->itl_ms)
        return false;
    if (slo->e2e_ms > 0 && k25_bench_req_e2e_ms(r) > slo->e2e_ms)
        return false;
    return true;
}

int k25_bench_slo_parse(const char *s, struct k25_bench_slo *out, struct k25_error *err)
{
    memset(out, 0, sizeof(*out));
    char *copy = strdup(s), *save = NULL;
    if (!copy)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int rc = K25_OK;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : NAN;
        if (!eq || end == eq + 1 || *end || !(v > 0) || isinf(v)) {
            rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--slo",
                               "expected KEY=MILLISECONDS (> 0), got \"%s\"", tok);
            goto out;
        }
        *eq = '\0';
        if (!strcmp(tok, "ttft_ms"))
            out->ttft_ms = v;
        else if (!strcmp(tok, "tpot_ms"))
            out->tpot_ms = v;
        else if (!strcmp(tok, "itl_ms"))
            out->itl_ms = v;
        else if (!strcmp(tok, "e2e_ms"))
            out->e2e_ms = v;
        else {
            rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--slo",
                               "unknown objective '%s' (ttft_ms, tpot_ms, itl_ms, e2e_ms)", tok);
            goto out;
        }
        out->any = true;
    }
    if (!out->any)
        rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--slo", "no objective given");
out:
    free(copy);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Per-metric sample vectors of the requests of repetition rep (-1: all). */
static int collect_samples(const struct k25_bench_run *run, int rep, double *v[K25_M_NMETRICS],
                           size_t n[K25_M_NMETRICS])
{
    size_t n_itl = 0;
    for (size_t i = 0; i < run->n_reqs; i++)
        if ((rep < 0 || run->reqs[i].rep == rep) && run->reqs[i].state == K25_REQ_COMPLETED &&
            run->reqs[i].n_output > 1)
            n_itl += (size_t)run->reqs[i].n_output - 1;
    for (int m = 0; m < K25_M_NMETRICS; m++) {
        size_t cap = (m == K25_M_ITL ? n_itl : run->n_reqs) + 1;
        n[m] = 0;
        if (!(v[m] = malloc(sizeof(double) * cap)))
            return -1;
    }
    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *r = &run->reqs[i];
        if ((rep >= 0 && r->rep != rep) || r->state != K25_REQ_COMPLETED)
            continue;
        double x[K25_M_NMETRICS] = {k25_bench_req_ttft_ms(r), k25_bench_req_tpot_ms(r), NAN,
                                    k25_bench_req_e2e_ms(r), k25_bench_req_queue_ms(r), k25_bench_req_lag_ms(r)};
        for (int m = 0; m < K25_M_NMETRICS; m++)
            if (m != K25_M_ITL && !isnan(x[m]))
                v[m][n[m]++] = x[m];
        for (int t = 1; t < r->n_output; t++)
            v[K25_M_ITL][n[K25_M_ITL]++] = ms(r->token_ns[t] - r->token_ns[t - 1]);
    }
    return 0;
}

/* Prefix caching: hit requests and tokens, TTFT of completed hits and misses.  -1 out of memory. */
static int prefix_split(const struct k25_bench_run *run, enum k25_pctl_method method, struct k25_bench_summary *s)
{
    double *hit = malloc(sizeof(double) * (run->n_reqs + 1)), *miss = malloc(sizeof(double) * (run->n_reqs + 1));
    size_t nh = 0, nm = 0;
    if (!hit || !miss) {
        free(hit);
        free(miss);
        return -1;
    }
    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *r = &run->reqs[i];
        if (r->state != K25_REQ_COMPLETED)
            continue;
        double t = k25_bench_req_ttft_ms(r);
        if (r->cached_tokens > 0) {
            s->n_prefix_hit++;
            s->prefix_hit_tokens += r->cached_tokens;
            if (!isnan(t))
                hit[nh++] = t;
        } else if (!isnan(t)) {
            miss[nm++] = t;
        }
    }
    k25_stats_describe_method(hit, nh, method, &s->ttft_hit);
    k25_stats_describe_method(miss, nm, method, &s->ttft_miss);
    free(hit);
    free(miss);
    return 0;
}

void k25_bench_engine_totals_diff(const struct k25_engine_stats *a, const struct k25_engine_stats *b,
                                  bool kv_tiers, struct k25_bench_engine_totals *out)
{
    memset(out, 0, sizeof(*out));
    out->measured = true;
    out->kv_tiers = kv_tiers;
    out->kv_block_reads = b->kv_block_reads - a->kv_block_reads;
    out->kv_block_hits = b->kv_block_hits - a->kv_block_hits;
    out->kv_tier_wait_ns = (int64_t)(b->kv_tier_wait_ns - a->kv_tier_wait_ns);
    out->kv_tier_max_step_wait_ns = (int64_t)b->kv_tier_max_step_wait_ns;
    out->kv_tier_bytes_moved = b->kv_tier_bytes_moved - a->kv_tier_bytes_moved;
    out->kv_tier_copy_ns = (int64_t)(b->kv_tier_copy_ns - a->kv_tier_copy_ns);
    out->kv_tier_evictions = b->kv_tier_evictions - a->kv_tier_evictions;
    out->kv_tier_promotions = b->kv_tier_promotions - a->kv_tier_promotions;
    out->kv_tier_demotions = b->kv_tier_demotions - a->kv_tier_demotions;
    out->prefix_hit_tokens = b->prefix_hit_tokens - a->prefix_hit_tokens;
    out->rejected_degraded = b->rejected_degraded - a->rejected_degraded;
    out->spill_fsyncs = b->spill_fsyncs - a->spill_fsyncs;
    out->breaker_opens = b->breaker_opens - a->breaker_opens;
}

/*
 * KV tiers: the hit rate of the measured requests' block reads (sum of hits / sum of reads, so a
 * long request weighs by its reads, as the engine's run figure does), and per completed request
 * the wait, the bytes moved and its own hit rate.  Tiers off or unknown (an endpoint run, a trace
 * before schema 4): the rate is NaN, "n/a (tiers off)" / "not measured" in the report.
 * -1 out of memory.
 */
static int kv_tier_split(const struct k25_bench_run *run, enum k25_pctl_method method, struct k25_bench_summary *s)
{
    s->eng = run->eng;
    s->kv_tiers = run->eng.measured && run->eng.kv_tiers;
    s->kv_cache_hit_rate = NAN;
    size_t cap = run->n_reqs + 1, n = 0;
    double *w = malloc(sizeof(double) * cap), *b = malloc(sizeof(double) * cap), *h = malloc(sizeof(double) * cap);
    size_t nh = 0;
    if (!w || !b || !h) {
        free(w);
        free(b);
        free(h);
        return -1;
    }
    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *r = &run->reqs[i];
        s->kv_block_reads += r->kv_block_reads;
        s->kv_block_hits += r->kv_block_hits;
        s->kv_tier_wait_ns += r->kv_tier_wait_ns;
        s->kv_tier_bytes_moved += r->kv_tier_bytes_moved;
        if (r->state != K25_REQ_COMPLETED)
            continue;
        w[n] = (double)r->kv_tier_wait_ns / 1e6;
        b[n++] = (double)r->kv_tier_bytes_moved;
        if (r->kv_block_reads > 0)
            h[nh++] = (double)r->kv_block_hits / (double)r->kv_block_reads;
    }
    if (s->kv_tiers) {
        /* no block read at all (every request ran inside its hot blocks): nothing waited */
        s->kv_cache_hit_rate = s->kv_block_reads > 0 ? (double)s->kv_block_hits / (double)s->kv_block_reads : 1.0;
        k25_stats_describe_method(w, n, method, &s->kv_wait_ms);
        k25_stats_describe_method(b, n, method, &s->kv_bytes_moved);
        k25_stats_describe_method(h, nh, method, &s->kv_hit_rate_req);
    } else {
        k25_stats_describe_method(w, 0, method, &s->kv_wait_ms);
        k25_stats_describe_method(b, 0, method, &s->kv_bytes_moved);
        k25_stats_describe_method(h, 0, method, &s->kv_hit_rate_req);
    }
    free(w);
    free(b);
    free(h);
    return 0;
}

/* Elastic queue: TTFT of completed requests by priority and degraded or not.  -1 out of memory. */
static int priority_split(const struct k25_bench_run *run, enum k25_pctl_method method, struct k25_bench_summary *s)
{
    double *v = malloc(sizeof(double) * (run->n_reqs + 1));
    if (!v)
        return -1;
    for (int p = 0; p < 3; p++)
        for (int d = 0; d < 2; d++) {
            size_t n = 0;
            for (size_t i = 0; i < run->n_reqs; i++) {
                const struct k25_bench_req *r = &run->reqs[i];
                double t = k25_bench_req_ttft_ms(r);
                if (r->state == K25_REQ_COMPLETED && (int)r->priority == p && (int)r->degraded == d && !isnan(t))
                    v[n++] = t;
            }
            k25_stats_describe_method(v, n, method, &s->ttft_prio[p][d]);
        }
    free(v);
    return 0;
}

int k25_bench_summarize(const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                        struct k25_bench_summary *s, struct k25_error *err)
{
    return k25_bench_summarize_method(run, slo, K25_PCTL_NEAREST_RANK, s, err);
}

int k25_bench_summarize_method(const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                               enum k25_pctl_method method, struct k25_bench_summary *s, struct k25_error *err)
{
    memset(s, 0, sizeof(*s));
    int rc = K25_OK;
    double *v[K25_M_NMETRICS] = {0};
    size_t n[K25_M_NMETRICS];
    double *busy = NULL;

    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *r = &run->reqs[i];
        s->n_total++;
        if (r->state == K25_REQ_COMPLETED) {
            s->n_completed++;
            s->input_tokens += r->n_input;
            s->output_tokens += r->n_output;
            if (slo->any && k25_bench_req_meets_slo(r, slo))
                s->n_slo_ok++;
        } else if (r->state == K25_REQ_REJECTED) {
            s->n_rejected++;
            s->n_lost += r->reason[0] == '\0'; /* a rejection must say why */
        } else if (r->state == K25_REQ_TIMED_OUT) {
            s->n_timed_out++; /* final, not completed: its reason says how long it waited */
        } else {
            s->n_lost++; /* no final state */
        }
        s->n_degraded += r->degraded;
        s->n_spilled += r->spilled;
        s->n_replayed += r->replayed;
    }
    int64_t accepted = s->n_total - s->n_rejected;
    s->degraded_requests_ratio = accepted > 0 ? (double)s->n_degraded / (double)accepted : NAN;
    s->n_reps = run->n_reps;
    for (int k = 0; k < run->n_reps; k++)
        s->duration_s += (double)(run->rep_end_ns[k] - run->rep_start_ns[k]) / 1e9;
    s->requests_per_s = s->duration_s > 0 ? (double)s->n_completed / s->duration_s : NAN;
    s->output_tok_per_s = s->duration_s > 0 ? (double)s->output_tokens / s->duration_s : NAN;
    s->input_tok_per_s = s->duration_s > 0 ? (double)s->input_tokens / s->duration_s : NAN;
    s->goodput_rps = slo->any && s->duration_s > 0 ? (double)s->n_slo_ok / s->duration_s : NAN;

    if (collect_samples(run, -1, v, n) != 0)
        goto out_nomem;
    for (int m = 0; m < K25_M_NMETRICS; m++)
        k25_stats_describe_method(v[m], n[m], method, &s->d[m]);
    if (prefix_split(run, method, s) != 0 || kv_tier_split(run, method, s) != 0 ||
        priority_split(run, method, s) != 0)
        goto out_nomem;

    /* busy fraction of each 100 ms window (a final window under 50 ms is too short to count) */
    if (!(busy = malloc(sizeof(double) * (run->n_win + 1))))
        goto out_nomem;
    size_t nb = 0;
    for (size_t w = 0; w < run->n_win; w++) {
        const struct k25_bench_window *x = &run->win[w];
        if (x->len_ns < K25_BENCH_WINDOW_NS / 2)
            continue;
        double f = x->busy_ns / (double)x->len_ns;
        busy[nb++] = f < 0 ? 0 : (f > 1 ? 1 : f);
    }
    k25_stats_describe_method(busy, nb, method, &s->busy);

    /* headline figures per repetition */
    for (int k = 0; k < run->n_reps && k < K25_BENCH_MAX_REPEAT; k++) {
        double *rv[K25_M_NMETRICS] = {0};
        size_t rn[K25_M_NMETRICS];
        if (collect_samples(run, k, rv, rn) != 0) {
            for (int m = 0; m < K25_M_NMETRICS; m++)
                free(rv[m]);
            goto out_nomem;
        }
        struct k25_dist ttft, tpot, e2e;
        k25_stats_describe_method(rv[K25_M_TTFT], rn[K25_M_TTFT], method, &ttft);
        k25_stats_describe_method(rv[K25_M_TPOT], rn[K25_M_TPOT], method, &tpot);
        k25_stats_describe_method(rv[K25_M_E2E], rn[K25_M_E2E], method, &e2e);
        for (int m = 0; m < K25_M_NMETRICS; m++)
            free(rv[m]);
        int64_t done = 0, out_tok = 0, ok = 0;
        for (size_t i = 0; i < run->n_reqs; i++) {
            const struct k25_bench_req *r = &run->reqs[i];
            if (r->rep != k || r->state != K25_REQ_COMPLETED)
                continue;
            done++;
            out_tok += r->n_output;
            ok += slo->any && k25_bench_req_meets_slo(r, slo);
        }
        double dur = (double)(run->rep_end_ns[k] - run->rep_start_ns[k]) / 1e9;
        double *h = s->head[k];
        h[K25_H_TTFT_P50] = ttft.p[0].value;
        h[K25_H_TTFT_P99] = ttft.p[3].value;
        h[K25_H_TPOT_P50] = tpot.p[0].value;
        h[K25_H_E2E_P50] = e2e.p[0].value;
        h[K25_H_OUT_TPS] = dur > 0 ? (double)out_tok / dur : NAN;
        h[K25_H_RPS] = dur > 0 ? (double)done / dur : NAN;
        h[K25_H_GOODPUT] = slo->any && dur > 0 ? (double)ok / dur : NAN;
    }
    for (int j = 0; j < K25_H_NHEAD; j++) {
        double col[K25_BENCH_MAX_REPEAT];
        int nr = run->n_reps < K25_BENCH_MAX_REPEAT ? run->n_reps : K25_BENCH_MAX_REPEAT;
        for (int k = 0; k < nr; k++)
            col[k] = s->head[k][j];
        k25_stats_mean_ci(col, (size_t)nr, &s->head_mean[j], &s->head_lo[j], &s->head_hi[j], &s->head_n[j]);
        /* a figure some repetition could not support is not known across them either */
        if (s->head_n[j] != nr)
            s->head_mean[j] = s->head_lo[j] = s->head_hi[j] = NAN;
    }

    s->ov = run->ov;
    s->overhead_per_request_us = s->n_total > 0 ? (double)run->ov.harness_ns / 1e3 / (double)s->n_total : NAN;
    s->overhead_per_token_us =
        run->output_tokens > 0 ? (double)run->ov.harness_ns / 1e3 / (double)run->output_tokens : NAN;
    s->mem = run->mem;
    s->kv_blocks_peak = run->kv_blocks_peak;
    goto out;

out_nomem:
    rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
out:
    for (int m = 0; m < K25_M_NMETRICS; m++)
        free(v[m]);
    free(busy);
    return rc;
}

/* ------------------------------------------------- chosen percentiles */

int k25_bench_percentiles(const struct k25_bench_run *run, const struct k25_pctl_spec *spec,
                          struct k25_pctl_table *tab, struct k25_error *err)
{
    double *v[K25_M_NMETRICS] = {0};
    size_t n[K25_M_NMETRICS];
    int rc = K25_OK;
    memset(tab, 0, sizeof(*tab));
    tab->spec = *spec;
    if (collect_samples(run, -1, v, n) != 0) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_free;
    }
    for (int i = 0; i < spec->n_metrics; i++) {
        int m = spec->metric[i];
        K25_ASSERT(m >= 0 && m < K25_M_NMETRICS);
        qsort(v[m], n[m], sizeof(double), cmp_double);
        tab->row[i].n = (int64_t)n[m];
        for (int k = 0; k < spec->n_q; k++)
            tab->row[i].value[k] = k25_stats_supported(n[m], spec->q[k])
                                       ? k25_stats_quantile(v[m], n[m], spec->q[k], spec->method)
                                       : NAN;
    }
out_free:
    for (int m = 0; m < K25_M_NMETRICS; m++)
        free(v[m]);
    return rc;
}

json_t *k25_pctl_table_json(const struct k25_pctl_table *tab)
{
    const struct k25_pctl_spec *sp = &tab->spec;
    json_t *o = json_object(), *qs = json_array();
    if (!o || !qs)
        goto out_nomem;
    json_object_set_new(o, "method", json_string(k25_pctl_method_name(sp->method)));
    for (int k = 0; k < sp->n_q; k++)
        json_array_append_new(qs, json_real(sp->q[k] * 100.0));
    json_object_set_new(o, "percentiles", qs);
    qs = NULL;
    for (int i = 0; i < sp->n_metrics; i++) {
        json_t *r = json_object();
        if (!r)
            goto out_nomem;
        json_object_set_new(r, "n", json_integer(tab->row[i].n));
        for (int k = 0; k < sp->n_q; k++) {
            char key[32];
            k25_pctl_label(sp->q[k], key, sizeof(key));
            double x = tab->row[i].value[k];
            json_object_set_new(r, key, isnan(x) ? json_null() : json_real(x));
        }
        json_object_set_new(o, k25_metric_names[sp->metric[i]], r);
    }
    return o;
out_nomem:
    json_decref(qs);
    json_decref(o);
    return NULL;
}

void k25_pctl_table_print(FILE *out, const struct k25_pctl_table *tab)
{
    const struct k25_pctl_spec *sp = &tab->spec;
    fprintf(out, "percentiles (%s):\n",
            sp->method == K25_PCTL_LINEAR ? "linear interpolation, as numpy's default"
                                          : "nearest rank, an observed value");
    fprintf(out, "  %-13s %7s", "metric", "n");
    for (int k = 0; k < sp->n_q; k++) {
        char key[32];
        k25_pctl_label(sp->q[k], key, sizeof(key));
        key[0] = 'P';
        fprintf(out, " %9s", key);
    }
    fputc('\n', out);
    for (int i = 0; i < sp->n_metrics; i++) {
        fprintf(out, "  %-13s %7lld", k25_metric_names[sp->metric[i]], (long long)tab->row[i].n);
        for (int k = 0; k < sp->n_q; k++) {
            double x = tab->row[i].value[k];
            if (isnan(x))
                fprintf(out, " %9s", "n/a*");
            else
                fprintf(out, " %9.2f", x);
        }
        fputc('\n', out);
    }
}
