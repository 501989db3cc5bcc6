/*
 * analyze.c - what a sweep learned: the metrics of each point (averaged
 * over its repetitions, with a 95% interval), the constraints each point
 * breaks, every point against the reference (paired by repetition), the
 * verdict on a best point, and the Pareto front with tolerances.  The
 * result files are written by results.c.
 *
 * The significance rule.  Repetition k of every point runs in the same
 * interleaved round, so rep k of a point and rep k of the reference saw
 * the same machine state; the per-round ratio cancels what the round
 * shared (a neighbour's load, thermal drift).  For each point with at
 * least two such pairs: d_k = ln(point_k / reference_k), and the ratio
 * exp(mean d) with the Student-t interval exp(mean d +- t s / sqrt(n)).
 * The level is family-wise: with m points compared, each interval is at
 * 1 - 0.05 / m (Bonferroni), so "some point beat the reference" is wrong
 * at most 5% of the time when none did.  A best point is named only when
 * its whole interval lies on the better side of 1; among several such
 * points, the one with the best mean.  Objectives that can be 0 or less
 * (a queue time of 0 ms) use differences instead of log ratios.
 */
#include "sweep.h"

#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/*
 * The metrics a spec may name.  path is where `k25 bench --json` keeps the
 * figure (dot-separated, inside its "summary" object); scale converts units.
 */
struct metric {
    const char *name;
    const char *path;
    double scale;
    bool lower_better;
};

#define DIST(m, key)                                                                                    \
    {m "_p50_ms", key ".p50", 1, true}, {m "_p90_ms", key ".p90", 1, true}, {m "_p95_ms", key ".p95", 1, true}, \
        {m "_p99_ms", key ".p99", 1, true}, {m "_mean_ms", key ".mean", 1, true}, {m "_max_ms", key ".max", 1, true}

static const struct metric metrics[] = {
    DIST("ttft", "ttft_ms"),
    DIST("tpot", "tpot_ms"),
    DIST("itl", "itl_ms"),
    DIST("e2e", "e2e_ms"),
    DIST("queue", "queue_ms"),
    {"output_tok_per_s", "output_tok_per_s", 1, false},
    {"requests_per_s", "requests_per_s", 1, false},
    {"goodput_rps", "goodput_rps", 1, false},
    {"busy_p95", "busy_fraction.p95", 1, true},
    {"peak_memory_mb", "memory.peak_tracked_bytes", 1.0 / 1048576.0, true},
    {"peak_kv_mb", "memory.peak_kv_bytes", 1.0 / 1048576.0, true},
    {"kv_cache_hit_rate", "kv_cache_hit_rate", 1, false},
    {"degraded_requests_ratio", "degraded_requests_ratio", 1, true},
    {"fidelity_kl_mean", "fidelity.kl_mean", 1, true},
    {"fidelity_attn_rel_err", "fidelity.attn_rel_err", 1, true},
    {"fidelity_kl_p999", "fidelity.kl_p999", 1, true},
    {"fidelity_top1_agreement", "fidelity.top1_agreement", 1, false},
    {"fidelity_token_agreement", "fidelity.token_agreement", 1, false},
    {"max_rate_rps", NULL, 1, false}, /* computed by the rate search */
};
#define NMETRICS (sizeof(metrics) / sizeof(metrics[0]))

int k25_sweep_metric_count(void)
{
    return (int)NMETRICS;
}

const char *k25_sweep_metric_name(int i)
{
    return metrics[i].name;
}

static const struct metric *find_metric(const char *name)
{
    for (size_t i = 0; i < NMETRICS; i++)
        if (!strcmp(metrics[i].name, name))
            return &metrics[i];
    return NULL;
}

bool k25_sweep_metric_known(const char *name)
{
    return find_metric(name) != NULL;
}

bool k25_sweep_metric_lower_better(const char *name)
{
    const struct metric *m = find_metric(name);
    return m ? m->lower_better : true;
}

json_t *k25_sweep_metrics_from_bench(const json_t *bench)
{
    const json_t *s = json_object_get(bench, "summary");
    if (!s)
        s = bench;
    json_t *out = json_object();
    if (!out)
        return NULL;
    for (size_t i = 0; i < NMETRICS; i++) {
        if (!metrics[i].path)
            continue;
        const json_t *v = k25_json_path(s, metrics[i].path);
        if (v && json_is_number(v))
            json_object_set_new(out, metrics[i].name, json_real(json_number_value(v) * metrics[i].scale));
    }
    return out;
}

/* Mean and 95% Student-t interval of n values (the harness's statistics). */
static void mean_ci(const double *v, int n, double *mean, double *lo, double *hi)
{
    int used;
    k25_stats_mean_ci(v, (size_t)n, mean, lo, hi, &used);
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    return json_load_file(path, 0, &je);
}

int k25_sweep_collect(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                      struct k25_error *err)
{
    (void)err;
    for (int i = 0; i < n; i++) {
        struct k25_sweep_point *p = &pts[i];
        json_decref(p->metrics);
        json_decref(p->metrics_ci);
        p->metrics = json_object();
        p->metrics_ci = json_object();
        p->reps_done = 0;
        p->reps_mask = 0;
        for (int r = 0; r < K25_SWEEP_MAX_REPEATS; r++)
            p->rep_obj[r] = NAN;
        json_t *reps[K25_SWEEP_MAX_REPEATS] = {0};
        for (int r = 0; r < spec->repeats && r < K25_SWEEP_MAX_REPEATS; r++) {
            char path[2048];
            snprintf(path, sizeof(path), "%s/points/%s/rep-%d.json", out, p->id, r);
            json_t *j = load_json(path);
            if (!j)
                continue;
            json_t *m = k25_sweep_metrics_from_bench(j);
            const json_t *rate = json_object_get(j, "max_rate_rps"); /* rate search */
            if (m && rate && json_is_number(rate))
                json_object_set(m, "max_rate_rps", (json_t *)rate);
            json_decref(j);
            if (!m)
                continue;
            const json_t *o = json_object_get(m, spec->objective);
            if (o && json_is_number(o) && isfinite(json_number_value(o)))
                p->rep_obj[r] = json_number_value(o);
            p->reps_mask |= (uint64_t)1 << r;
            reps[p->reps_done++] = m;
        }
        for (size_t m = 0; m < NMETRICS; m++) {
            double v[K25_SWEEP_MAX_REPEATS];
            int nv = 0;
            for (int r = 0; r < p->reps_done; r++) {
                const json_t *x = json_object_get(reps[r], metrics[m].name);
                if (x && json_is_number(x) && isfinite(json_number_value(x)))
                    v[nv++] = json_number_value(x);
            }
            if (!nv)
                continue;
            double mean, lo, hi;
            mean_ci(v, nv, &mean, &lo, &hi);
            json_object_set_new(p->metrics, metrics[m].name, json_real(mean));
            json_object_set_new(p->metrics_ci, metrics[m].name,
                                json_pack("[o, o]", isfinite(lo) ? json_real(lo) : json_null(),
                                          isfinite(hi) ? json_real(hi) : json_null()));
        }
        for (int r = 0; r < p->reps_done; r++)
            json_decref(reps[r]);
    }
    return K25_OK;
}

static double metric_of(const struct k25_sweep_point *p, const char *name)
{
    const json_t *v = p->metrics ? json_object_get(p->metrics, name) : NULL;
    return v && json_is_number(v) ? json_number_value(v) : NAN;
}

/* Half the width of a metric's 95% interval over repetitions (0 when there is none). */
static double ci_half(const struct k25_sweep_point *p, const char *name)
{
    const json_t *ci = p->metrics_ci ? json_object_get(p->metrics_ci, name) : NULL;
    const json_t *lo = json_array_get(ci, 0), *hi = json_array_get(ci, 1);
    if (!json_is_number(lo) || !json_is_number(hi))
        return 0;
    double h = 0.5 * (json_number_value(hi) - json_number_value(lo));
    return isfinite(h) && h > 0 ? h : 0;
}

int k25_sweep_reference_index(const struct k25_sweep_spec *spec, const struct k25_sweep_point *pts, int n)
{
    struct k25_config d;
    k25_config_init(&d);
    snprintf(d.model, sizeof(d.model), "%s", spec->model);
    d.seed = spec->seed;
    for (int f = 0; f < spec->n_fixed; f++)
        k25_config_set(&d, spec->fixed_key[f], spec->fixed_val[f], NULL, 0, NULL);
    for (int i = 0; i < n; i++)
        if (pts[i].reference)
            return i;
    /* a grid point equal to the defaults serves as the reference */
    for (int i = 0; i < n; i++)
        if (!memcmp(&d, &pts[i].cfg, sizeof(d)) && k25_sweep_point_client_default(spec, &pts[i]))
            return i;
    return -1;
}

/*
 * p against the reference r, paired by repetition, with an interval at
 * confidence 1 - alpha (two-sided).  Leaves pairs = 0 with fewer than one
 * pair; the interval stays NaN with fewer than two.
 */
static void paired(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p,
                   const struct k25_sweep_point *r, double alpha, struct k25_sweep_paired *out)
{
    double a[K25_SWEEP_MAX_REPEATS], b[K25_SWEEP_MAX_REPEATS], d[K25_SWEEP_MAX_REPEATS];
    int n = 0;
    bool positive = true;
    *out = (struct k25_sweep_paired){0, true, NAN, NAN, NAN, false};
    for (int k = 0; k < spec->repeats && k < K25_SWEEP_MAX_REPEATS; k++) {
        if (!isfinite(p->rep_obj[k]) || !isfinite(r->rep_obj[k]))
            continue;
        a[n] = p->rep_obj[k];
        b[n] = r->rep_obj[k];
        positive = positive && a[n] > 0 && b[n] > 0;
        n++;
    }
    if (n == 0)
        return;
    double ref_mean = 0, mean = 0, ss = 0;
    for (int k = 0; k < n; k++) {
        d[k] = positive ? log(a[k] / b[k]) : a[k] - b[k];
        mean += d[k] / n;
        ref_mean += b[k] / n;
    }
    for (int k = 0; k < n; k++)
        ss += (d[k] - mean) * (d[k] - mean);
    double half = NAN;
    if (n >= 2)
        half = k25_stats_t_quantile(n - 1, 1 - alpha / 2) * sqrt(ss / (n - 1)) / sqrt(n);
    out->pairs = n;
    out->log_ratio = positive;
    double dlo = mean - half, dhi = mean + half;
    if (positive) {
        out->ratio = exp(mean);
        out->lo = exp(dlo);
        out->hi = exp(dhi);
    } else if (ref_mean > 0) {
        out->ratio = 1 + mean / ref_mean;
        out->lo = 1 + dlo / ref_mean;
        out->hi = 1 + dhi / ref_mean;
    }
    /* better: the whole interval on the good side of "no change" */
    out->better = n >= 2 && isfinite(half) && (spec->maximize ? dlo > 0 : dhi < 0);
}

/* Evaluates the constraints on p's mean metrics into p->feasible / p->violations. */
static void check_constraints(const struct k25_sweep_spec *spec, struct k25_sweep_point *p)
{
    size_t used = 0;
    p->violations[0] = 0;
    p->feasible = p->reps_done == spec->repeats;
    if (!p->feasible)
        used += (size_t)snprintf(p->violations, sizeof(p->violations), "%d of %d repetitions missing",
                                 spec->repeats - p->reps_done, spec->repeats);
    if (isnan(metric_of(p, spec->objective)) && p->feasible) {
        p->feasible = false;
        used += (size_t)snprintf(p->violations + used, sizeof(p->violations) - used, "%s%s not measured",
                                 used ? "; " : "", spec->objective);
    }
    for (int c = 0; c < spec->n_cons && used < sizeof(p->violations); c++) {
        double v = metric_of(p, spec->cons[c].metric);
        if (!k25_sweep_constraint_holds(&spec->cons[c], v)) {
            p->feasible = false;
            used += (size_t)snprintf(p->violations + used, sizeof(p->violations) - used, "%s%s (is %.4g)",
                                     used ? "; " : "", spec->cons[c].text, v);
        }
    }
}

/* Does the measured reference break a constraint (not merely miss repetitions)? */
static const char *broken_constraint(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p)
{
    if (p->reps_done == 0)
        return NULL;
    for (int c = 0; c < spec->n_cons; c++)
        if (!k25_sweep_constraint_holds(&spec->cons[c], metric_of(p, spec->cons[c].metric)))
            return spec->cons[c].text;
    return NULL;
}

void k25_sweep_msgf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* "ratio 0.93 [0.71, 1.22] over 3 paired repetitions" */
static void fmt_paired(const struct k25_sweep_paired *c, char *buf, size_t n)
{
    if (c->pairs >= 2 && isfinite(c->lo))
        snprintf(buf, n, "ratio %.3g [%.3g, %.3g] over %d paired repetitions", c->ratio, c->lo, c->hi, c->pairs);
    else if (c->pairs >= 1 && isfinite(c->ratio))
        snprintf(buf, n, "ratio %.3g from %d paired repetition", c->ratio, c->pairs);
    else
        snprintf(buf, n, "no paired repetitions");
}

/* The verdict: reference, comparisons, best point (see the rule at the top). */
static void verdict(const struct k25_sweep_spec *spec, struct k25_sweep_point *pts, int n,
                    struct k25_sweep_verdict *v)
{
    double sign = spec->maximize ? -1.0 : 1.0;
    char rl[512] = "none", ll[512] = "", cmp[160] = "";
    *v = (struct k25_sweep_verdict){K25_VERDICT_NO_FEASIBLE, -1, -1, -1, 0, 0.95, ""};
    v->reference = k25_sweep_reference_index(spec, pts, n);
    int ref = v->reference, any_feasible = 0, max_pairs = 0;
    if (ref >= 0)
        k25_sweep_point_label(spec, &pts[ref], rl, sizeof(rl));
    for (int i = 0; i < n; i++) {
        pts[i].vs_ref = (struct k25_sweep_paired){0, true, NAN, NAN, NAN, false};
        any_feasible += pts[i].feasible;
        /* the leader: the best mean among the feasible points, the reference included (one
           definition for the message, summary.json and every plot of the report) */
        double o = metric_of(&pts[i], spec->objective);
        if (!pts[i].feasible || isnan(o))
            continue;
        if (v->leader < 0 || sign * o < sign * metric_of(&pts[v->leader], spec->objective) ||
            (i == ref && o == metric_of(&pts[v->leader], spec->objective)))
            v->leader = i;
    }
    /* m: the feasible points that pair with the reference at least twice */
    if (ref >= 0 && pts[ref].reps_done > 0)
        for (int i = 0; i < n; i++) {
            if (i == ref || !pts[i].feasible)
                continue;
            paired(spec, &pts[i], &pts[ref], 0.05, &pts[i].vs_ref);
            max_pairs = pts[i].vs_ref.pairs > max_pairs ? pts[i].vs_ref.pairs : max_pairs;
            v->comparisons += pts[i].vs_ref.pairs >= 2;
        }
    if (v->comparisons > 1) /* again at the family-wise level */
        for (int i = 0; i < n; i++)
            if (i != ref && pts[i].feasible)
                paired(spec, &pts[i], &pts[ref], 0.05 / v->comparisons, &pts[i].vs_ref);
    if (v->leader >= 0 && v->leader == ref) {
        snprintf(ll, sizeof(ll), "the reference itself");
        snprintf(cmp, sizeof(cmp), "%.4g, no other point's mean is better", metric_of(&pts[ref], spec->objective));
    } else if (v->leader >= 0) {
        k25_sweep_point_label(spec, &pts[v->leader], ll, sizeof(ll));
        fmt_paired(&pts[v->leader].vs_ref, cmp, sizeof(cmp));
    }
    const char *broken = ref >= 0 ? broken_constraint(spec, &pts[ref]) : NULL;
    if (!any_feasible) {
        v->kind = K25_VERDICT_NO_FEASIBLE;
        k25_sweep_msgf(v->message, sizeof(v->message), "no point meets every constraint (see infeasible)");
    } else if (ref < 0 || pts[ref].reps_done == 0) {
        v->kind = K25_VERDICT_NO_REFERENCE;
        k25_sweep_msgf(v->message, sizeof(v->message),
                 "the reference (%s) has no finished repetition: no setting can be compared with it", rl);
    } else if (broken) {
        v->kind = K25_VERDICT_REFERENCE_INFEASIBLE;
        v->best = v->leader; /* the reference is infeasible, so the leader is another point */
        k25_sweep_msgf(v->message, sizeof(v->message),
                 "the reference (%s) breaks \"%s\": every feasible point improves on it; best: %s, the feasible "
                 "point with the best mean %s (its lead over the other feasible points is not tested)",
                 rl, broken, ll, spec->objective);
    } else if (v->leader < 0 || (v->leader == ref && any_feasible == 1)) {
        v->kind = K25_VERDICT_NOT_SIGNIFICANT;
        k25_sweep_msgf(v->message, sizeof(v->message),
                 "no setting is significantly better than the reference (%s): no other point meets every "
                 "constraint", rl);
    } else if (v->comparisons == 0) {
        v->kind = K25_VERDICT_ONE_REPETITION;
        k25_sweep_msgf(v->message, sizeof(v->message),
                 "%s: no significance can be claimed (set repeats: 3 or more); best mean: %s, %s %.4g vs %.4g "
                 "for the reference (%s)",
                 max_pairs <= 1 && spec->repeats <= 1 ? "one repetition per point"
                                                     : "fewer than 2 repetitions pair with the reference",
                 ll, spec->objective, metric_of(&pts[v->leader], spec->objective),
                 metric_of(&pts[ref], spec->objective), rl);
        if (v->leader == ref)
            k25_sweep_msgf(v->message, sizeof(v->message),
                     "%s: no significance can be claimed (set repeats: 3 or more); best mean: the reference (%s), "
                     "%s %.4g",
                     max_pairs <= 1 && spec->repeats <= 1 ? "one repetition per point"
                                                         : "fewer than 2 repetitions pair with the reference",
                     rl, spec->objective, metric_of(&pts[ref], spec->objective));
    } else {
        for (int i = 0; i < n; i++)
            if (i != ref && pts[i].feasible && pts[i].vs_ref.better &&
                (v->best < 0 ||
                 sign * metric_of(&pts[i], spec->objective) < sign * metric_of(&pts[v->best], spec->objective)))
                v->best = i;
        char fw[96];
        snprintf(fw, sizeof(fw), "95%% family-wise, %d comparison%s", v->comparisons, v->comparisons == 1 ? "" : "s");
        if (v->best >= 0) {
            char bl[512], bc[160];
            k25_sweep_point_label(spec, &pts[v->best], bl, sizeof(bl));
            fmt_paired(&pts[v->best].vs_ref, bc, sizeof(bc));
            v->kind = K25_VERDICT_SIGNIFICANT;
            k25_sweep_msgf(v->message, sizeof(v->message), "%s is significantly better than the reference (%s): %s %s (%s)",
                     bl, rl, spec->objective, bc, fw);
        } else {
            v->kind = K25_VERDICT_NOT_SIGNIFICANT;
            if (v->leader == ref)
                k25_sweep_msgf(v->message, sizeof(v->message),
                         "no setting is significantly better than the reference (%s); best mean: the reference "
                         "itself, %s %s (%s)", rl, spec->objective, cmp, fw);
            else
                k25_sweep_msgf(v->message, sizeof(v->message),
                         "no setting is significantly better than the reference (%s); best mean: %s, %s %s (%s)", rl,
                         ll, spec->objective, cmp, fw);
        }
    }
}

/*
 * Do a and b tie on the objective?  With at least two paired repetitions:
 * when the 95% paired interval of their ratio (rep k against rep k, as for
 * the verdict, one comparison) contains 1, i.e. they are not told apart.
 * Otherwise: when either mean lies within the other's 95% interval over
 * repetitions; with no interval (one repetition), only when equal.
 */
static bool objective_tie(const struct k25_sweep_spec *spec, const struct k25_sweep_point *a,
                          const struct k25_sweep_point *b)
{
    struct k25_sweep_paired c;
    paired(spec, a, b, 0.05, &c);
    if (c.pairs >= 2 && isfinite(c.lo) && isfinite(c.hi))
        return c.lo <= 1 && 1 <= c.hi;
    double x = metric_of(a, spec->objective), y = metric_of(b, spec->objective);
    return fabs(x - y) <= fmax(ci_half(a, spec->objective), ci_half(b, spec->objective));
}

/* Memory and fidelity KL (the same on every repetition) tie within 1%. */
static bool relative_tie(double x, double y)
{
    return fabs(x - y) <= 0.01 * fmax(fabs(x), fabs(y));
}

/*
 * Does a dominate b: at least as good on every Pareto criterion (objective,
 * fidelity_kl_mean when measured, peak_memory_mb; ties allowed) and better
 * beyond a tie on one?  A point that uses 8 bytes less memory and is slower
 * is dominated, not a trade-off.
 */
static bool dominates(const struct k25_sweep_spec *spec, const struct k25_sweep_point *a,
                      const struct k25_sweep_point *b)
{
    double sign = spec->maximize ? -1.0 : 1.0;
    double ao = sign * metric_of(a, spec->objective), bo = sign * metric_of(b, spec->objective);
    if (isnan(ao) || isnan(bo))
        return false;
    /* no worse on the objective: a's mean at least as good (a tie in the noise never lets a
       point with a worse mean push a better-mean one off the front), better only beyond a tie */
    if (ao > bo)
        return false;
    bool better = !objective_tie(spec, a, b) && ao < bo;
    const char *other[2] = {spec->fidelity ? "fidelity_kl_mean" : NULL, "peak_memory_mb"};
    for (int c = 0; c < 2; c++) {
        if (!other[c] || !strcmp(other[c], spec->objective))
            continue;
        double x = metric_of(a, other[c]), y = metric_of(b, other[c]);
        if (isnan(x) || isnan(y))
            return false;
        if (relative_tie(x, y))
            continue;
        if (x > y)
            return false;
        better = true;
    }
    return better;
}

/*
 * KV bytes per token a setting should store, relative to the same config
 * with that knob at its neutral value: the fraction kept for
 * kv_compression_ratio, bytes per element for kv_cache_dtype (the scales
 * aside).  NaN for a knob whose effect is not measured this way.
 */
static double kv_share(const char *knob, const struct k25_config *c)
{
    if (!strcmp(knob, "kv_compression_ratio"))
        return c->kv_compression_ratio;
    if (!strcmp(knob, "kv_cache_dtype")) {
        switch (c->kv_cache_dtype) {
        case K25_DTYPE_FP32: return 4;
        case K25_DTYPE_FP16:
        case K25_DTYPE_BF16: return 2;
        case K25_DTYPE_INT8: return 1;
        case K25_DTYPE_INT4: return 0.5;
        default: return NAN;
        }
    }
    return NAN;
}

/* Does b differ from a in the knob alone (engine config and client workload)? */
static bool differs_in_alone(const struct k25_sweep_spec *spec, const struct k25_sweep_point *a,
                             const struct k25_sweep_point *b, const char *knob)
{
    struct k25_config x = b->cfg;
    if (!strcmp(knob, "kv_compression_ratio"))
        x.kv_compression_ratio = a->cfg.kv_compression_ratio;
    else
        x.kv_cache_dtype = a->cfg.kv_cache_dtype;
    if (memcmp(&x, &a->cfg, sizeof(x)) != 0 || !memcmp(&a->cfg, &b->cfg, sizeof(x)))
        return false;
    struct k25_sweep_workload wa, wb;
    k25_sweep_point_workload(spec, a, &wa);
    k25_sweep_point_workload(spec, b, &wb);
    return wa.concurrency == wb.concurrency && (wa.rate_rps == wb.rate_rps || (isnan(wa.rate_rps) && isnan(wb.rate_rps)));
}

/*
 * A knob that did nothing (issue 32): for each KV-size knob the sweep
 * varies, a point whose setting should store less KV than a point that
 * differs from it in that knob alone, but whose measured peak_kv_mb moved
 * by less than a quarter of the expected change (in log terms), gets a
 * warning saying so with both figures.  On short prompts the protected
 * sink and recent windows keep every token, so kv_compression_ratio 0.5
 * can store the same bytes as 1.0: the sweep then compared nothing.
 */
static void knob_effects(const struct k25_sweep_spec *spec, struct k25_sweep_point *pts, int n)
{
    static const char *const knobs[] = {"kv_compression_ratio", "kv_cache_dtype"};
    for (int i = 0; i < n; i++)
        pts[i].knob_warning[0] = 0;
    for (size_t k = 0; k < sizeof(knobs) / sizeof(knobs[0]); k++) {
        bool swept = false;
        for (int a = 0; a < spec->n_axes; a++)
            swept = swept || !strcmp(spec->axes[a].key, knobs[k]);
        if (!swept)
            continue;
        for (int i = 0; i < n; i++) {
            double mi = metric_of(&pts[i], "peak_kv_mb"), si = kv_share(knobs[k], &pts[i].cfg);
            if (!(mi > 0) || !(si > 0) || pts[i].knob_warning[0])
                continue;
            for (int j = 0; j < n; j++) {
                double mj = metric_of(&pts[j], "peak_kv_mb"), sj = kv_share(knobs[k], &pts[j].cfg);
                if (j == i || !(mj > 0) || !(sj > si) || !differs_in_alone(spec, &pts[i], &pts[j], knobs[k]))
                    continue;
                double expect = log(si / sj), got = log(mi / mj);
                if (fabs(got) >= 0.25 * fabs(expect))
                    continue;
                char lj[512];
                k25_sweep_point_label(spec, &pts[j], lj, sizeof(lj));
                k25_sweep_msgf(pts[i].knob_warning, sizeof(pts[i].knob_warning),
                               "%s had almost no effect on what it controls: peak KV %.4g MiB against %.4g MiB at %s "
                               "(expected about %.0f%% of it, measured %.0f%%)",
                               knobs[k], mi, mj, lj, 100 * si / sj, 100 * mi / mj);
                break;
            }
        }
    }
}

void k25_sweep_analyze(const struct k25_sweep_spec *spec, struct k25_sweep_point *pts, int n,
                       struct k25_sweep_verdict *v, bool *pareto)
{
    for (int i = 0; i < n; i++)
        check_constraints(spec, &pts[i]);
    knob_effects(spec, pts, n);
    verdict(spec, pts, n, v);
    for (int i = 0; i < n; i++) {
        pareto[i] = pts[i].reps_done > 0 && !isnan(metric_of(&pts[i], spec->objective));
        for (int j = 0; j < n && pareto[i]; j++)
            if (j != i && pts[j].reps_done > 0 && dominates(spec, &pts[j], &pts[i]))
                pareto[i] = false;
    }
}

