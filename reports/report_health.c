/*
 * report_health.c - the health checks every report applies (from field
 * practice; docs/reports.md, "Health checks"), each a metric with up to
 * four bounds:
 *
 *   kv_cache_hit_rate         >= 0.92 ok, below 0.92 fail (the runtime's bar; the
 *                             KV tiers' measured figure, "n/a (tiers off)" when the
 *                             run had no tiers)
 *   busy_p95                  0.75 .. 0.85 ok, outside warn, above 0.90 fail
 *   degraded_requests_ratio   <= 0.005 ok, above warn, above 0.01 fail
 *   kv_usage_ratio            <= 0.92 ok, above fail (endpoint runs: the server's own gauge,
 *                             --server-metrics)
 *   gpu_utilization_p95       0.75 .. 0.85 ok, outside warn, above 0.90 fail (NVML)
 *   queue_waiting_mean        <= 1 ok, above warn, above 4 fail: requests waiting in the
 *                             server's queue on average (in-process: the /timeline
 *                             windows; endpoint runs: the server's own gauge)
 *
 * A value equal to a bound is within it.  The SLA file's `health:`
 * section overrides bounds or turns a check off.  A metric the run did
 * not measure is reported as "not measured" with the reason the run gives
 * (k25_health_missing_why), never guessed or OK; a check that
 * does not apply to the run's mode (busy fraction, closed loop) is "n/a".
 */
#include "report.h"
#include "harness.h"

#include <math.h>
#include <string.h>

const char *k25_health_level_name(enum k25_health_level l)
{
    switch (l) {
    case K25_HEALTH_OK: return "OK";
    case K25_HEALTH_WARN: return "WARN";
    case K25_HEALTH_FAIL: return "FAIL";
    case K25_HEALTH_NOT_MEASURED: return "not measured";
    case K25_HEALTH_NA: return "n/a";
    }
    return "?";
}

static void set(struct k25_health_check *c, const char *metric, double fail_below, double warn_below,
                double warn_above, double fail_above, const char *low, const char *high)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->metric, sizeof(c->metric), "%s", metric);
    c->enabled = true;
    c->fail_below = fail_below;
    c->warn_below = warn_below;
    c->warn_above = warn_above;
    c->fail_above = fail_above;
    snprintf(c->advice_low, sizeof(c->advice_low), "%s", low);
    snprintf(c->advice_high, sizeof(c->advice_high), "%s", high);
}

int k25_health_defaults(struct k25_health_check *h, int max)
{
    if (max < 6)
        return 0;
    set(&h[0], "kv_cache_hit_rate", 0.92, 0.92, NAN, NAN,
        "below 0.92 block reads wait for the cold tier: a larger kv_warm_budget_mb or kv_hot_tokens, or "
        "prefetch falling behind",
        "");
    set(&h[1], "busy_p95", NAN, 0.75, 0.85, 0.90, "the engine has headroom: more load or a larger batch would fit",
        "above 0.90: scale out or shrink the batch");
    set(&h[2], "degraded_requests_ratio", NAN, NAN, 0.005, 0.01, "",
        "above 0.01 the degradation is too eager (circuit-breaker thresholds)");
    set(&h[3], "kv_usage_ratio", NAN, NAN, NAN, 0.92, "", "above 0.92 the next request may fail to fit");
    set(&h[4], "gpu_utilization_p95", NAN, 0.75, 0.85, 0.90,
        "the GPU has headroom: more load or a larger batch would fit", "above 0.90: scale out or shrink the batch");
    set(&h[5], "queue_waiting_mean", NAN, NAN, 1, 4, "",
        "requests wait for a batch slot on average (at the batch limit); above 4 the queue sets the latencies: "
        "lower the rate or scale out");
    return 6;
}

void k25_health_describe(const struct k25_health_check *c, char *buf, size_t n)
{
    char lo[32] = "", hi[32] = "";
    if (!isnan(c->warn_below) || !isnan(c->fail_below))
        snprintf(lo, sizeof(lo), "%g", !isnan(c->warn_below) ? c->warn_below : c->fail_below);
    if (!isnan(c->warn_above) || !isnan(c->fail_above))
        snprintf(hi, sizeof(hi), "%g", !isnan(c->warn_above) ? c->warn_above : c->fail_above);
    size_t u = 0;
    if (*lo && *hi)
        u = (size_t)snprintf(buf, n, "between %s and %s", lo, hi);
    else if (*lo)
        u = (size_t)snprintf(buf, n, ">= %s", lo);
    else if (*hi)
        u = (size_t)snprintf(buf, n, "<= %s", hi);
    else
        u = (size_t)snprintf(buf, n, "(no bounds)");
    /* a fail bound beside a warn bound (alone it is the bound already named) */
    if (u < n && !isnan(c->fail_below) && !isnan(c->warn_below) && c->fail_below != c->warn_below)
        u += (size_t)snprintf(buf + u, n - u, "; fail below %g", c->fail_below);
    if (u < n && !isnan(c->fail_above) && !isnan(c->warn_above) && c->fail_above != c->warn_above)
        snprintf(buf + u, n - u, "; fail above %g", c->fail_above);
}

void k25_health_eval(const struct k25_health_check *c, double v, struct k25_health_result *r)
{
    memset(r, 0, sizeof(*r));
    r->value = v;
    if (isnan(v)) {
        r->level = K25_HEALTH_NOT_MEASURED;
        snprintf(r->note, sizeof(r->note), "not measured: the run reports no %s", c->metric);
        return;
    }
    r->level = K25_HEALTH_OK;
    if (v < c->fail_below) {
        r->level = K25_HEALTH_FAIL;
        snprintf(r->note, sizeof(r->note), "%s", *c->advice_low ? c->advice_low : "below the fail bound");
    } else if (v > c->fail_above) {
        r->level = K25_HEALTH_FAIL;
        snprintf(r->note, sizeof(r->note), "%s", *c->advice_high ? c->advice_high : "above the fail bound");
    } else if (v < c->warn_below) {
        r->level = K25_HEALTH_WARN;
        snprintf(r->note, sizeof(r->note), "below %g: %s", c->warn_below, c->advice_low);
    } else if (v > c->warn_above) {
        r->level = K25_HEALTH_WARN;
        snprintf(r->note, sizeof(r->note), "above %g: %s", c->warn_above, c->advice_high);
    }
}

bool k25_health_applies(const struct k25_health_check *c, const struct k25_report_run *runs, int n_runs, char *why,
                        size_t n)
{
    if (n)
        why[0] = 0;
    if (!strcmp(c->metric, "kv_cache_hit_rate") && n_runs > 0) {
        /* the hit rate of KV tiers: a run without tiers has no cold reads to miss (summary
         * kv_tiers_enabled false); a run that predates the figure has no key: "not measured" */
        for (int i = 0; i < n_runs; i++) {
            const json_t *s = json_object_get(runs[i].summary, "summary");
            const json_t *t = json_object_get(s ? s : runs[i].summary, "kv_tiers_enabled");
            if (!json_is_false(t))
                return true;
        }
        snprintf(why, n, "tiers off");
        return false;
    }
    /* a closed loop saturates the engine (and its GPU) by construction, and keeps its queue at the users
     * beyond the batch */
    if ((strncmp(c->metric, "busy_", 5) != 0 && strcmp(c->metric, "gpu_utilization_p95") != 0 &&
         strcmp(c->metric, "queue_waiting_mean") != 0) ||
        n_runs <= 0)
        return true;
    for (int i = 0; i < n_runs; i++) {
        const char *mode = json_string_value(json_object_get(runs[i].workload, "mode"));
        if (!mode || strcmp(mode, "closed") != 0)
            return true; /* an open loop (or an unknown mode): the check applies */
    }
    snprintf(why, n, "closed loop");
    return false;
}

double k25_health_value(const struct k25_health_check *c, const struct k25_report_run *runs, int n_runs)
{
    double s = 0;
    int k = 0;
    for (int i = 0; i < n_runs; i++) {
        double x = k25_report_scalar(runs[i].summary, c->metric);
        if (!isnan(x)) {
            s += x;
            k++;
        }
    }
    return k ? s / k : NAN;
}

/* The run's .summary (a --json summary nests it; a trace's summary is it). */
static const json_t *summary_of(const struct k25_report_run *r)
{
    const json_t *s = json_object_get(r->summary, "summary");
    return s ? s : r->summary;
}

void k25_health_missing_why(const struct k25_health_check *c, const struct k25_report_run *runs, int n_runs,
                            char *buf, size_t n)
{
    if (!n)
        return;
    snprintf(buf, n, "the run reports no such figure");
    if (n_runs <= 0)
        return;
    const json_t *s = summary_of(&runs[0]);
    const char *target = json_string_value(json_object_get(s, "target"));
    bool endpoint = target && !strcmp(target, "endpoint");
    const json_t *sm = json_object_get(s, "server_metrics");
    if (!strcmp(c->metric, "gpu_utilization_p95")) {
        const char *why = json_string_value(json_object_get(json_object_get(s, "gpu"), "reason"));
        snprintf(buf, n, "%s", why ? why : "the run predates GPU telemetry (trace schema 6)");
    } else if (!strcmp(c->metric, "kv_usage_ratio")) {
        if (endpoint)
            snprintf(buf, n, "%s", k25_srvmet_kv_why(sm));
        else
            snprintf(buf, n, "the in-process engine records KV blocks (memory.kv_blocks_peak), not a usage ratio");
    } else if (!strcmp(c->metric, "queue_waiting_mean")) {
        const char *why = json_string_value(json_object_get(json_object_get(s, "queue_waiting"), "reason"));
        if (why)
            snprintf(buf, n, "%s", why);
        else if (endpoint && !json_is_object(sm))
            snprintf(buf, n, "the client cannot see the server's queue: the run did not scrape its metrics "
                             "(--server-metrics)");
        else if (endpoint)
            snprintf(buf, n, "the server's metrics expose no queue depth k25 knows (summary.server_metrics)");
        else if (!json_object_get(s, "queue_waiting"))
            snprintf(buf, n, "the run predates the figure (summary.queue_waiting)");
        else
            snprintf(buf, n, "no timeline window was sampled");
    } else if (!strcmp(c->metric, "kv_cache_hit_rate") && endpoint) {
        snprintf(buf, n, "the server's KV-tier hit rate is %s", K25_NOT_VISIBLE);
    } else if (!strncmp(c->metric, "busy_", 5) && endpoint) {
        snprintf(buf, n, "the server's busy fraction is %s", K25_NOT_VISIBLE);
    } else if (!strncmp(c->metric, "busy_", 5)) {
        const json_t *bf = json_object_get(s, "busy_fraction");
        if (json_is_object(bf))
            snprintf(buf, n, "its percentiles need more 100 ms timeline windows than the run's %lld",
                     (long long)json_integer_value(json_object_get(bf, "n")));
    }
}
