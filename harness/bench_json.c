/*
 * bench_json.c - the run summary as JSON (stable keys, for jq) and as the
 * text table `k25 bench` prints.  A figure that is not known (an
 * unsupported percentile, a missing confidence bound, goodput without an
 * SLO) is null in JSON and "n/a" in text, never a number.
 */
#include "harness.h"

#include <math.h>
#include <string.h>

static json_t *num(double x)
{
    return isnan(x) || isinf(x) ? json_null() : json_real(x);
}

static json_t *dist_json(const struct k25_dist *d)
{
    json_t *o = json_object();
    json_object_set_new(o, "n", json_integer(d->n));
    json_object_set_new(o, "mean", num(d->mean));
    json_object_set_new(o, "stdev", num(d->stdev));
    json_object_set_new(o, "min", num(d->min));
    json_object_set_new(o, "max", num(d->max));
    for (int i = 0; i < K25_NPCTL; i++) {
        const struct k25_pctl *p = &d->p[i];
        char key[32];
        int pc = (int)lround(p->q * 100);
        snprintf(key, sizeof(key), "p%d", pc);
        json_object_set_new(o, key, p->supported ? num(p->value) : json_null());
        snprintf(key, sizeof(key), "p%d_ci95", pc);
        json_object_set_new(o, key, json_pack("[o, o]", num(p->ci_lo), num(p->ci_hi)));
        snprintf(key, sizeof(key), "p%d_ci_coverage", pc);
        json_object_set_new(o, key, num(p->coverage));
    }
    return o;
}

/* The KV tiers' figures (kv_tiers on): the measured requests' reads, hits, waits and bytes moved, their
 * distributions, and the engine's own counters over the measurement. */
static json_t *kv_tiers_json(const struct k25_bench_summary *s)
{
    const struct k25_bench_engine_totals *e = &s->eng;
    json_t *kt = json_object();
    json_object_set_new(kt, "kv_cache_hit_rate", num(s->kv_cache_hit_rate));
    json_object_set_new(kt, "block_reads", json_integer(s->kv_block_reads));
    json_object_set_new(kt, "block_hits", json_integer(s->kv_block_hits));
    json_object_set_new(kt, "wait_ms", num((double)s->kv_tier_wait_ns / 1e6));
    json_object_set_new(kt, "bytes_moved", json_integer(s->kv_tier_bytes_moved));
    json_object_set_new(kt, "wait_ms_per_request", dist_json(&s->kv_wait_ms));
    json_object_set_new(kt, "bytes_moved_per_request", dist_json(&s->kv_bytes_moved));
    json_object_set_new(kt, "hit_rate_per_request", dist_json(&s->kv_hit_rate_req));
    /* the engine's own counters over the measurement (every sequence's steps) */
    json_object_set_new(
        kt, "engine",
        json_pack("{s:I, s:I, s:o, s:o, s:I, s:o, s:o, s:I}", "block_reads", (json_int_t)e->kv_block_reads,
                  "block_hits", (json_int_t)e->kv_block_hits, "wait_ms", num((double)e->kv_tier_wait_ns / 1e6),
                  "max_step_wait_ms", num((double)e->kv_tier_max_step_wait_ns / 1e6), "bytes_moved",
                  (json_int_t)e->kv_tier_bytes_moved, "copy_s", num((double)e->kv_tier_copy_ns / 1e9),
                  "copy_bytes_per_s",
                  num(e->kv_tier_copy_ns > 0 ? (double)e->kv_tier_bytes_moved / ((double)e->kv_tier_copy_ns / 1e9)
                                             : NAN),
                  "evictions", (json_int_t)e->kv_tier_evictions));
    /* issue 36: the hotness policy's moves (the policy itself is in the config) */
    json_object_set_new(kt, "promotions", json_integer(e->kv_tier_promotions));
    json_object_set_new(kt, "demotions", json_integer(e->kv_tier_demotions));
    return kt;
}

/* The repetitions: their count, each one's headline figures and the 95% interval of each over them. */
static json_t *reps_json(const struct k25_bench_summary *s)
{
    json_t *reps = json_object(), *per = json_array(), *ci = json_object();
    for (int k = 0; k < s->n_reps && k < K25_BENCH_MAX_REPEAT; k++) {
        json_t *r = json_object();
        for (int j = 0; j < K25_H_NHEAD; j++)
            json_object_set_new(r, k25_headline_names[j], num(s->head[k][j]));
        json_array_append_new(per, r);
    }
    for (int j = 0; j < K25_H_NHEAD; j++)
        json_object_set_new(ci, k25_headline_names[j],
                            json_pack("{s:o, s:o, s:o}", "mean", num(s->head_mean[j]), "lo", num(s->head_lo[j]),
                                      "hi", num(s->head_hi[j])));
    json_object_set_new(reps, "count", json_integer(s->n_reps));
    json_object_set_new(reps, "per_repetition", per);
    json_object_set_new(reps, "ci95", ci);
    return reps;
}

json_t *k25_bench_summary_json(const struct k25_bench_summary *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "requests", json_pack("{s:I, s:I, s:I, s:o}", "total", (json_int_t)s->n_total,
                                                 "completed", (json_int_t)s->n_completed, "rejected",
                                                 (json_int_t)s->n_rejected, "meeting_slo",
                                                 isnan(s->goodput_rps) ? json_null()
                                                                       : json_integer(s->n_slo_ok)));
    json_t *rq = json_object_get(o, "requests");
    json_object_set_new(rq, "timed_out", json_integer(s->n_timed_out));
    json_object_set_new(rq, "degraded", json_integer(s->n_degraded));
    json_object_set_new(rq, "spilled", json_integer(s->n_spilled));
    json_object_set_new(rq, "replayed", json_integer(s->n_replayed));
    json_object_set_new(rq, "lost", json_integer(s->n_lost));
    /* the elastic queue's figures (docs/metrics.md): the gate checks degraded_requests_ratio exactly */
    json_object_set_new(o, "degraded_requests_ratio", num(s->degraded_requests_ratio));
    json_object_set_new(o, "spilled_requests", json_integer(s->n_spilled));
    json_object_set_new(o, "timed_out_requests", json_integer(s->n_timed_out));
    json_object_set_new(o, "input_tokens", json_integer(s->input_tokens));
    json_object_set_new(o, "output_tokens", json_integer(s->output_tokens));
    json_object_set_new(o, "duration_s", num(s->duration_s));
    json_object_set_new(o, "requests_per_s", num(s->requests_per_s));
    json_object_set_new(o, "output_tok_per_s", num(s->output_tok_per_s));
    json_object_set_new(o, "input_tok_per_s", num(s->input_tok_per_s));
    json_object_set_new(o, "goodput_rps", num(s->goodput_rps));
    json_object_set_new(o, "percentile_method", json_string(k25_pctl_method_name(s->pctl_method)));
    if (isfinite(s->offered_rps))
        json_object_set_new(o, "open_loop", json_pack("{s:o, s:o, s:b}", "offered_rps", num(s->offered_rps),
                                                      "achieved_rps", num(s->achieved_rps), "fell_behind",
                                                      s->fell_behind));
    else
        json_object_set_new(o, "open_loop", json_null());
    for (int m = 0; m < K25_M_NMETRICS; m++)
        json_object_set_new(o, k25_metric_names[m], dist_json(&s->d[m]));
    if (s->n_prefix_hit > 0) /* prefix caching: only when some request hit (off by default) */
        json_object_set_new(o, "prefix_cache",
                            json_pack("{s:I, s:I, s:o, s:o}", "hit_requests", (json_int_t)s->n_prefix_hit,
                                      "hit_tokens", (json_int_t)s->prefix_hit_tokens, "ttft_hit_ms",
                                      dist_json(&s->ttft_hit), "ttft_miss_ms", dist_json(&s->ttft_miss)));
    /* prefix caching: prompt tokens reused by the measured requests (0 with it off) */
    json_object_set_new(o, "cached_tokens", json_integer(s->prefix_hit_tokens));
    /* KV tiers (docs/metrics.md "KV tiers"): the health check reads kv_cache_hit_rate; null with tiers
     * off (kv_tiers_enabled false) or when the run could not measure it (an endpoint: null too) */
    json_object_set_new(o, "kv_tiers_enabled", s->eng.measured ? json_boolean(s->kv_tiers) : json_null());
    json_object_set_new(o, "kv_cache_hit_rate", s->kv_tiers ? num(s->kv_cache_hit_rate) : json_null());
    if (s->kv_tiers)
        json_object_set_new(o, "kv_tiers", kv_tiers_json(s));
    /* elastic queue: TTFT by priority, degraded or not (issue 17) */
    json_t *bp = json_object();
    for (int p = 0; p < 3; p++)
        json_object_set_new(bp, k25_priority_name((enum k25_priority)p),
                            json_pack("{s:o, s:o}", "normal", dist_json(&s->ttft_prio[p][0]), "degraded",
                                      dist_json(&s->ttft_prio[p][1])));
    json_object_set_new(o, "ttft_ms_by_priority", bp);
    if (s->eng.measured)
        json_object_set_new(o, "queue",
                            json_pack("{s:I, s:I, s:I}", "rejected_degraded", (json_int_t)s->eng.rejected_degraded,
                                      "spill_fsyncs", (json_int_t)s->eng.spill_fsyncs, "breaker_opens",
                                      (json_int_t)s->eng.breaker_opens));
    json_t *busy = dist_json(&s->busy);
    json_object_set_new(busy, "window_ms", json_integer(K25_BENCH_WINDOW_NS / 1000000));
    if (s->client_view) /* the server's busy time is not visible from the client */
        json_object_set_new(busy, "note", json_string(K25_NOT_VISIBLE));
    json_object_set_new(o, "busy_fraction", busy);

    /* an endpoint run: the server's memory and the harness's loop split are not visible: null, not 0 */
    bool cv = s->client_view;
    json_t *mem = json_object();
    for (int c = 0; c < K25_MEM_NCAT; c++) {
        char key[64];
        snprintf(key, sizeof(key), "peak_%s_bytes", k25_mem_cat_name(c));
        json_object_set_new(mem, key, cv ? json_null() : json_integer(s->mem.peak_bytes[c]));
    }
    json_object_set_new(mem, "peak_tracked_bytes", cv ? json_null() : json_integer(s->mem.total_peak_bytes));
    json_object_set_new(mem, "kv_blocks_peak", cv ? json_null() : json_integer(s->kv_blocks_peak));
    if (cv)
        json_object_set_new(mem, "note", json_string(K25_NOT_VISIBLE));
    json_object_set_new(o, "memory", mem);

    const struct k25_bench_overhead *v = &s->ov;
    json_t *h = json_pack("{s:o, s:o, s:f, s:o, s:o, s:o, s:f, s:f, s:o}", "overhead_per_request_us",
                          cv ? json_null() : num(s->overhead_per_request_us), "overhead_per_token_us",
                          cv ? json_null() : num(s->overhead_per_token_us), "loop_s", (double)v->loop_ns / 1e9,
                          "engine_step_s", cv ? json_null() : json_real((double)v->step_ns / 1e9), "engine_busy_s",
                          cv ? json_null() : json_real((double)v->busy_ns / 1e9), "submit_s",
                          cv ? json_null() : json_real((double)v->submit_ns / 1e9), "sleep_s",
                          (double)v->sleep_ns / 1e9, "overhead_s", (double)v->harness_ns / 1e9, "steps",
                          cv ? json_null() : json_integer((json_int_t)v->steps));
    if (cv && h)
        json_object_set_new(h, "note", json_string("engine steps and the per-request overhead split are "
                                                   K25_NOT_VISIBLE));
    json_object_set_new(o, "harness", h);

    json_object_set_new(o, "repetitions", reps_json(s));
    return o;
}

json_t *k25_bench_workload_json(const struct k25_bench_opts *o, uint64_t seed, size_t n_selected)
{
    json_t *w = json_object();
    if (!w)
        return NULL;
    json_object_set_new(w, "mode", json_string(o->mode == K25_BENCH_OPEN ? "open" : "closed"));
    json_object_set_new(w, "concurrency", json_integer(o->concurrency));
    json_object_set_new(w, "requests", o->requests > 0 ? json_integer(o->requests) : json_null());
    json_object_set_new(w, "duration_s", o->duration_s > 0 ? json_real(o->duration_s) : json_null());
    json_object_set_new(w, "rate_rps", o->mode == K25_BENCH_OPEN ? json_real(o->rate_rps) : json_null());
    json_object_set_new(w, "burstiness", o->mode == K25_BENCH_OPEN ? json_real(o->burstiness) : json_null());
    json_object_set_new(w, "arrivals", o->mode == K25_BENCH_OPEN ? json_string(k25_arrival_names[o->arrivals])
                                                                 : json_null());
    if (o->mode == K25_BENCH_OPEN && o->arrivals == K25_ARR_RAMP)
        json_object_set_new(w, "ramp_up", json_pack("{s:s, s:f, s:f}", "strategy", "linear", "start_rps",
                                                    o->ramp_start_rps, "end_rps", o->ramp_end_rps));
    if (o->mode == K25_BENCH_OPEN && o->arrivals == K25_ARR_TRACE)
        json_object_set_new(w, "trace_file", json_string(o->trace_file));
    json_object_set_new(w, "warmup", json_integer(o->warmup));
    json_object_set_new(w, "repeat", json_integer(o->repeat));
    json_object_set_new(w, "seed", json_integer((json_int_t)seed));
    json_object_set_new(w, "dataset", json_string(o->dataset ? o->dataset : ""));
    json_object_set_new(w, "filter", o->filter ? json_string(o->filter) : json_null());
    json_object_set_new(w, "selected_requests", json_integer((json_int_t)n_selected));
    json_t *slo = json_object();
    if (o->slo.ttft_ms > 0)
        json_object_set_new(slo, "ttft_ms", json_real(o->slo.ttft_ms));
    if (o->slo.tpot_ms > 0)
        json_object_set_new(slo, "tpot_ms", json_real(o->slo.tpot_ms));
    if (o->slo.itl_ms > 0)
        json_object_set_new(slo, "itl_ms", json_real(o->slo.itl_ms));
    if (o->slo.e2e_ms > 0)
        json_object_set_new(slo, "e2e_ms", json_real(o->slo.e2e_ms));
    json_object_set_new(w, "slo", slo);
    json_object_set_new(w, "surge", o->surge_factor > 0
                                        ? json_pack("{s:f, s:f, s:f}", "factor", o->surge_factor, "start_s",
                                                    o->surge_start_s, "duration_s", o->surge_duration_s)
                                        : json_null());
    return w;
}

/* "%9.2f" or "n/a" right-aligned in width w. */
static void cell(FILE *out, double x, int w, bool unsupported_mark)
{
    if (isnan(x))
        fprintf(out, " %*s", w, unsupported_mark ? "n/a*" : "n/a");
    else
        fprintf(out, " %*.2f", w, x);
}

void k25_bench_open_loop_check(struct k25_bench_summary *s, double offered_rps)
{
    s->offered_rps = offered_rps;
    s->achieved_rps = s->requests_per_s;
    double q = s->d[K25_M_QUEUE].p[0].value, e = s->d[K25_M_E2E].p[0].value;
    s->fell_behind = offered_rps > 0 && s->achieved_rps < K25_OPEN_LOOP_MIN_SERVED * offered_rps && isfinite(q) &&
                     isfinite(e) && e > 0 && q > K25_OPEN_LOOP_MAX_QUEUE_SHARE * e;
}

/* The summary's request lines: counts, the accounting identity, the elastic queue, prefix-cache hits, KV
 * tiers and TTFT by priority (each of the last four only where the run has something to say). */
static void print_requests(FILE *out, const struct k25_bench_summary *s)
{
    fprintf(out, "k25 bench: %lld requests (%lld completed, %lld rejected) in %.2f s over %d repetition%s\n",
            (long long)s->n_total, (long long)s->n_completed, (long long)s->n_rejected, s->duration_s, s->n_reps,
            s->n_reps == 1 ? "" : "s");
    /* the accounting identity of the elastic queue: every request sent ends in exactly one final state */
    int64_t unfinished = s->n_total - s->n_completed - s->n_timed_out - s->n_rejected;
    fprintf(out, "  accounting: %lld sent = %lld completed + %lld timed out + %lld rejected", (long long)s->n_total,
            (long long)s->n_completed, (long long)s->n_timed_out, (long long)s->n_rejected);
    if (unfinished)
        fprintf(out, " + %lld without a final state", (long long)unfinished);
    if (s->n_lost)
        fprintf(out, ": %lld LOST (no final state, or rejected without a reason)\n", (long long)s->n_lost);
    else
        fprintf(out, ", each with its reason: none lost\n");
    if (s->n_degraded || s->n_spilled || s->n_timed_out || s->n_replayed) {
        fprintf(out, "  elastic queue: %lld degraded (ratio ", (long long)s->n_degraded);
        if (isnan(s->degraded_requests_ratio))
            fprintf(out, "n/a");
        else
            fprintf(out, "%.4f%%", 100 * s->degraded_requests_ratio);
        fprintf(out, "), %lld spilled, %lld replayed, %lld timed out\n", (long long)s->n_spilled,
                (long long)s->n_replayed, (long long)s->n_timed_out);
    }
    if (s->n_prefix_hit > 0) { /* TTFT by hit / miss: P50, or the mean where too few samples support it */
        const struct k25_dist *hm[2] = {&s->ttft_hit, &s->ttft_miss};
        fprintf(out, "  prefix cache: %lld of %lld completed requests hit, %lld prompt tokens reused; TTFT",
                (long long)s->n_prefix_hit, (long long)s->n_completed, (long long)s->prefix_hit_tokens);
        for (int i = 0; i < 2; i++) {
            const struct k25_dist *d = hm[i];
            if (d->n == 0)
                fprintf(out, "%s %s n/a (n=0)", i ? "," : "", i ? "miss" : "hit");
            else
                fprintf(out, "%s %s %s %.1f ms (n=%lld)", i ? "," : "", i ? "miss" : "hit",
                        isnan(d->p[0].value) ? "mean" : "P50", isnan(d->p[0].value) ? d->mean : d->p[0].value,
                        (long long)d->n);
        }
        fprintf(out, "\n");
    }
    if (s->kv_tiers) {
        fprintf(out, "  KV tiers: kv_cache_hit_rate %.4f (%lld of %lld block reads without waiting), waited %.1f ms, "
                     "moved %.1f MB (%.1f KB per completed request)\n",
                s->kv_cache_hit_rate, (long long)s->kv_block_hits, (long long)s->kv_block_reads,
                (double)s->kv_tier_wait_ns / 1e6, (double)s->kv_tier_bytes_moved / (1 << 20),
                s->kv_bytes_moved.n > 0 ? s->kv_bytes_moved.mean / 1024 : 0.0);
        if (s->eng.kv_tier_promotions || s->eng.kv_tier_demotions)
            fprintf(out, "  KV tiers (hotness): %lld blocks promoted, %lld demoted\n",
                    (long long)s->eng.kv_tier_promotions, (long long)s->eng.kv_tier_demotions);
    }
    if (s->n_degraded > 0 || s->ttft_prio[K25_PRIORITY_HIGH][0].n > 0 || s->ttft_prio[K25_PRIORITY_LOW][0].n > 0) {
        fprintf(out, "  TTFT by priority:");
        for (int p = 0; p < 3; p++)
            for (int d = 0; d < 2; d++) {
                const struct k25_dist *x = &s->ttft_prio[p][d];
                if (x->n == 0)
                    continue;
                bool p99 = x->p[3].supported;
                fprintf(out, " %s%s P50 %.1f ms %s %.1f ms (n=%lld);", k25_priority_name((enum k25_priority)p),
                        d ? " degraded" : "", isnan(x->p[0].value) ? x->mean : x->p[0].value, p99 ? "P99" : "max",
                        p99 ? x->p[3].value : x->max, (long long)x->n);
            }
        fputc('\n', out);
    }
}

/* The percentile table: one row per metric plus the busy fraction, P50 with its 95% interval, and a
 * footnote where a percentile lacks the samples to support it. */
static void print_percentiles(FILE *out, const struct k25_bench_summary *s)
{
    fprintf(out, "\n  percentiles: %s\n",
            s->pctl_method == K25_PCTL_LINEAR ? "linear (interpolated, as numpy's default)"
                                              : "nearest-rank (an observed value)");
    fprintf(out, "  %-13s %7s %9s %9s %9s %21s %9s %9s %9s %9s\n", "metric", "n", "mean", "stdev", "P50",
            "[95% CI of P50]", "P90", "P95", "P99", "max");
    bool any_unsup = false;
    for (int m = 0; m <= K25_M_NMETRICS; m++) {
        const struct k25_dist *d = m < K25_M_NMETRICS ? &s->d[m] : &s->busy;
        fprintf(out, "  %-13s %7lld", m < K25_M_NMETRICS ? k25_metric_names[m] : "busy_fraction", (long long)d->n);
        cell(out, d->mean, 9, false);
        cell(out, d->stdev, 9, false);
        cell(out, d->p[0].value, 9, d->n > 0 && !d->p[0].supported);
        char ci[64] = "-", a[24] = "?", b[24] = "?";
        if (d->p[0].supported) {
            if (!isnan(d->p[0].ci_lo))
                snprintf(a, sizeof(a), "%.2f", d->p[0].ci_lo);
            if (!isnan(d->p[0].ci_hi))
                snprintf(b, sizeof(b), "%.2f", d->p[0].ci_hi);
            snprintf(ci, sizeof(ci), "[%s, %s]", a, b);
        }
        fprintf(out, " %21s", ci);
        for (int i = 1; i < K25_NPCTL; i++) {
            bool un = d->n > 0 && !d->p[i].supported;
            any_unsup |= un;
            cell(out, d->p[i].value, 9, un);
        }
        cell(out, d->max, 9, false);
        fputc('\n', out);
    }
    if (any_unsup)
        fprintf(out, "  * n/a*: too few samples for that percentile (P90 needs 10, P95 20, P99 100)\n");
}

void k25_bench_summary_print(FILE *out, const struct k25_bench_summary *s)
{
    print_requests(out, s);
    fprintf(out, "  throughput: %.3f req/s, %.1f output tok/s, %.1f input tok/s, goodput ", s->requests_per_s,
            s->output_tok_per_s, s->input_tok_per_s);
    if (isnan(s->goodput_rps))
        fprintf(out, "n/a (no --slo)\n");
    else
        fprintf(out, "%.3f req/s (%lld of %lld meet the SLO)\n", s->goodput_rps, (long long)s->n_slo_ok,
                (long long)s->n_total);
    if (isfinite(s->offered_rps))
        fprintf(out, "  open loop: offered %.3f req/s, achieved %.3f req/s%s\n", s->offered_rps, s->achieved_rps,
                s->fell_behind ? ": FELL BEHIND (the queue grew; this run measured the queue, not the engine)" : "");
    print_percentiles(out, s);
    if (s->client_view) {
        fprintf(out, "\n  engine busy fraction, peak memory, harness overhead: %s\n", K25_NOT_VISIBLE);
        goto out_reps;
    }
    fprintf(out, "\n  engine busy fraction: P95 ");
    if (s->busy.p[2].supported)
        fprintf(out, "%.3f", s->busy.p[2].value);
    else
        fprintf(out, "n/a (needs 20 windows)");
    fprintf(out, " over %lld windows of %lld ms\n", (long long)s->busy.n,
            (long long)(K25_BENCH_WINDOW_NS / 1000000));
    fprintf(out, "  peak memory:");
    for (int c = 0; c < K25_MEM_NCAT; c++)
        fprintf(out, " %s %.1f MB%s", k25_mem_cat_name(c), (double)s->mem.peak_bytes[c] / (1 << 20),
                c + 1 < K25_MEM_NCAT ? "," : "");
    fprintf(out, " (tracked total %.1f MB, %lld KV blocks)\n", (double)s->mem.total_peak_bytes / (1 << 20),
            (long long)s->kv_blocks_peak);
    double loop = (double)s->ov.loop_ns;
    fprintf(out,
            "  harness overhead: %.1f us/request, %.3f us/token (%.3f%% of the loop; engine steps %.1f%%, "
            "idle wait %.1f%%)\n",
            s->overhead_per_request_us, s->overhead_per_token_us, loop > 0 ? 100.0 * (double)s->ov.harness_ns / loop : 0,
            loop > 0 ? 100.0 * (double)s->ov.step_ns / loop : 0, loop > 0 ? 100.0 * (double)s->ov.sleep_ns / loop : 0);
out_reps:
    if (s->n_reps > 1) {
        fprintf(out, "\n  across %d repetitions (mean [95%% CI]):\n", s->n_reps);
        for (int j = 0; j < K25_H_NHEAD; j++) {
            if (isnan(s->head_mean[j]))
                fprintf(out, "    %-18s n/a\n", k25_headline_names[j]);
            else
                fprintf(out, "    %-18s %.3f [%.3f, %.3f]\n", k25_headline_names[j], s->head_mean[j], s->head_lo[j],
                        s->head_hi[j]);
        }
    }
}
