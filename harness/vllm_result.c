/*
 * vllm_result.c - `k25 bench --save-result`: the result fields of `vllm
 * bench serve` beside k25's own (top level of the JSON summary), so scripts
 * written for vLLM's result files read k25's.
 *
 * Names and meanings as vLLM writes them: duration (s), completed,
 * total_input_tokens, total_output_tokens, request_throughput,
 * output_throughput, total_token_throughput (tokens/s), request_goodput
 * (with an SLO), and for ttft, tpot, itl and e2el: mean_*_ms, median_*_ms,
 * std_*_ms (population, as numpy's default) and p{P}_*_ms for each
 * --metric-percentiles (default 99).  Percentiles are read by
 * --percentile-method (linear = numpy's default, what vLLM prints); unlike
 * k25's own summary, where a percentile the sample cannot support is null,
 * these are always given, as vLLM does - and `k25_percentile_support`
 * flags each unsupported one with its sample size and the 95%
 * distribution-free interval (null bounds where no order statistic is far
 * enough out).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static json_t *num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* The samples of metric m (0 ttft, 1 tpot, 2 itl, 3 e2el) over the completed requests; malloc'd. */
static double *samples(const struct k25_bench_run *run, int m, size_t *n)
{
    size_t cap = 0, k = 0;
    for (size_t i = 0; i < run->n_reqs; i++)
        cap += run->reqs[i].state == K25_REQ_COMPLETED ? (size_t)run->reqs[i].n_output + 1 : 0;
    double *v = malloc(sizeof(double) * (cap + 1));
    if (!v)
        return NULL;
    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *q = &run->reqs[i];
        if (q->state != K25_REQ_COMPLETED)
            continue;
        double x = m == 0 ? k25_bench_req_ttft_ms(q) : m == 1 ? k25_bench_req_tpot_ms(q) : k25_bench_req_e2e_ms(q);
        if (m == 2) { /* every gap between consecutive tokens */
            for (int t = 1; t < q->n_output; t++)
                v[k++] = (double)(q->token_ns[t] - q->token_ns[t - 1]) / 1e6;
        } else if (isfinite(x)) {
            v[k++] = x;
        }
    }
    qsort(v, k, sizeof(double), cmp_dbl);
    *n = k;
    return v;
}

json_t *k25_bench_vllm_fields(const struct k25_bench_run *run, const struct k25_bench_summary *s,
                              const struct k25_bench_opts *o)
{
    static const char *const names[4] = {"ttft", "tpot", "itl", "e2el"};
    json_t *j = json_object(), *support = json_object();
    if (!j || !support) {
        json_decref(j);
        json_decref(support);
        return NULL;
    }
    double dur = s->duration_s;
    json_object_set_new(j, "duration", num(dur));
    json_object_set_new(j, "completed", json_integer(s->n_completed));
    json_object_set_new(j, "num_prompts", json_integer(s->n_total));
    json_object_set_new(j, "request_rate", o->mode == K25_BENCH_OPEN && o->arrivals != K25_ARR_TRACE &&
                                                   o->arrivals != K25_ARR_RAMP
                                               ? json_real(o->rate_rps)
                                               : json_string("inf"));
    json_object_set_new(j, "burstiness", json_real(o->burstiness));
    json_object_set_new(j, "max_concurrency", o->concurrency > 0 ? json_integer(o->concurrency) : json_null());
    json_object_set_new(j, "total_input_tokens", json_integer(s->input_tokens));
    json_object_set_new(j, "total_output_tokens", json_integer(s->output_tokens));
    json_object_set_new(j, "request_throughput", num(s->requests_per_s));
    json_object_set_new(j, "request_goodput", num(s->goodput_rps));
    json_object_set_new(j, "output_throughput", num(s->output_tok_per_s));
    json_object_set_new(j, "total_token_throughput",
                        num(dur > 0 ? (double)(s->input_tokens + s->output_tokens) / dur : NAN));
    /* the percentiles: --metric-percentiles when given, else vLLM's default (99) */
    double qs[K25_PCTL_MAX];
    int nq = 0;
    if (o->pctl_table)
        for (int i = 0; i < o->pctl.n_q; i++)
            qs[nq++] = o->pctl.q[i];
    else
        qs[nq++] = 0.99;
    for (int m = 0; m < 4; m++) {
        size_t n = 0;
        double *v = samples(run, m, &n);
        if (!v) {
            json_decref(j);
            json_decref(support);
            return NULL;
        }
        double mean = 0, var = 0;
        for (size_t i = 0; i < n; i++)
            mean += v[i];
        mean = n ? mean / (double)n : NAN;
        for (size_t i = 0; i < n; i++)
            var += (v[i] - mean) * (v[i] - mean);
        char key[64];
        snprintf(key, sizeof(key), "mean_%s_ms", names[m]);
        json_object_set_new(j, key, num(mean));
        snprintf(key, sizeof(key), "median_%s_ms", names[m]);
        json_object_set_new(j, key, num(n ? k25_stats_quantile(v, n, 0.5, o->pctl_method) : NAN));
        snprintf(key, sizeof(key), "std_%s_ms", names[m]);
        json_object_set_new(j, key, num(n ? sqrt(var / (double)n) : NAN));
        for (int i = 0; i < nq; i++) {
            char lab[32];
            k25_pctl_label(qs[i], lab, sizeof(lab)); /* "p99", "p99.9" */
            snprintf(key, sizeof(key), "%s_%s_ms", lab, names[m]);
            json_object_set_new(j, key, num(n ? k25_stats_quantile(v, n, qs[i], o->pctl_method) : NAN));
            if (n == 0 || k25_stats_supported(n, qs[i]))
                continue;
            size_t lo = 0, hi = 0;
            k25_stats_quantile_ci(n, qs[i], 0.95, &lo, &hi, NULL);
            json_object_set_new(support, key,
                                json_pack("{s:b, s:I, s:[o, o]}", "supported", 0, "n", (json_int_t)n, "ci95",
                                          lo >= 1 ? json_real(v[lo - 1]) : json_null(),
                                          hi <= n ? json_real(v[hi - 1]) : json_null()));
        }
        free(v);
    }
    json_object_set_new(j, "percentile_method", json_string(k25_pctl_method_name(o->pctl_method)));
    json_object_set_new(j, "k25_percentile_support", support);
    return j;
}
