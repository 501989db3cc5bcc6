/*
 * analyze.c - what a sweep learned: the metrics of each point (averaged
 * over its repetitions, with a 95% interval), the constraints each point
 * breaks, the best feasible point, the Pareto front, and the result files
 * (OUT/sweep.h5 index and OUT/summary.json).
 */
#include "sweep.h"

#include "harness.h"

#include "h5store.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* two-sided 97.5% t quantiles for df 1..30, then the normal's */
    static const double t975[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                  2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                  2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    *mean = n ? s / n : NAN;
    *lo = *hi = NAN;
    if (n < 2)
        return;
    for (int i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    double sd = sqrt(ss / (n - 1)), t = n - 1 <= 30 ? t975[n - 2] : 1.96;
    *lo = *mean - t * sd / sqrt(n);
    *hi = *mean + t * sd / sqrt(n);
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
        json_t *reps[64] = {0};
        for (int r = 0; r < spec->repeats; r++) {
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
            reps[p->reps_done++] = m;
        }
        for (size_t m = 0; m < NMETRICS; m++) {
            double v[64];
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

/* Is a at least as good as b on every criterion and better on one? */
static bool dominates(const double *a, const double *b, int k)
{
    bool better = false;
    for (int i = 0; i < k; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return false;
        if (a[i] > b[i])
            return false;
        if (a[i] < b[i])
            better = true;
    }
    return better;
}

void k25_sweep_analyze(const struct k25_sweep_spec *spec, struct k25_sweep_point *pts, int n, int *best,
                       bool *pareto)
{
    *best = -1;
    double best_v = NAN;
    double sign = spec->maximize ? -1.0 : 1.0;
    for (int i = 0; i < n; i++) {
        struct k25_sweep_point *p = &pts[i];
        size_t used = 0;
        p->violations[0] = 0;
        p->feasible = p->reps_done == spec->repeats;
        if (!p->feasible)
            used += (size_t)snprintf(p->violations, sizeof(p->violations), "%d of %d repetitions missing",
                                     spec->repeats - p->reps_done, spec->repeats);
        double obj = metric_of(p, spec->objective);
        if (isnan(obj) && p->feasible) {
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
        if (p->feasible && (*best < 0 || sign * obj < sign * best_v)) {
            *best = i;
            best_v = obj;
        }
    }
    /* Pareto front over (objective, fidelity KL when measured, peak memory), all as "lower is better". */
    const char *crit[3] = {spec->objective, spec->fidelity ? "fidelity_kl_mean" : NULL, "peak_memory_mb"};
    for (int i = 0; i < n; i++) {
        double a[3];
        int k = 0;
        for (int c = 0; c < 3; c++)
            if (crit[c] && (c == 0 || strcmp(crit[c], spec->objective) != 0))
                a[k++] = (c == 0 ? sign : 1.0) * metric_of(&pts[i], crit[c]);
        pareto[i] = pts[i].reps_done > 0 && !isnan(a[0]);
        for (int j = 0; j < n && pareto[i]; j++) {
            if (j == i || pts[j].reps_done == 0)
                continue;
            double b[3];
            int kb = 0;
            for (int c = 0; c < 3; c++)
                if (crit[c] && (c == 0 || strcmp(crit[c], spec->objective) != 0))
                    b[kb++] = (c == 0 ? sign : 1.0) * metric_of(&pts[j], crit[c]);
            if (dominates(b, a, k))
                pareto[i] = false;
        }
    }
}

static json_t *point_json(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p)
{
    char label[1024];
    k25_sweep_point_label(spec, p, label, sizeof(label));
    /* each axis's effective value (for the reference point: the default) */
    json_t *axes = json_object();
    char *cj = k25_config_to_json(&p->cfg);
    json_error_t je;
    json_t *cfg = cj ? json_loads(cj, 0, &je) : NULL;
    free(cj);
    for (int a = 0; a < spec->n_axes; a++) {
        char buf[128];
        const json_t *v = json_object_get(cfg, spec->axes[a].key);
        if (p->idx[a] >= 0)
            snprintf(buf, sizeof(buf), "%s", spec->axes[a].values[p->idx[a]]);
        else if (json_is_string(v))
            snprintf(buf, sizeof(buf), "%s", json_string_value(v));
        else if (json_is_boolean(v))
            snprintf(buf, sizeof(buf), "%s", json_is_true(v) ? "true" : "false");
        else if (json_is_integer(v))
            snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        else
            snprintf(buf, sizeof(buf), "%.17g", json_number_value(v));
        json_object_set_new(axes, spec->axes[a].key, json_string(buf));
    }
    json_decref(cfg);
    return json_pack("{s:s, s:s, s:o, s:b, s:i, s:O, s:O, s:b, s:s}", "id", p->id, "label", label, "axes", axes,
                     "reference", p->reference, "repetitions", p->reps_done, "metrics",
                     p->metrics ? p->metrics : json_null(), "metrics_ci95", p->metrics_ci ? p->metrics_ci : json_null(),
                     "feasible", p->feasible, "violations", p->violations);
}

int k25_sweep_write_results(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                            struct k25_error *err)
{
    int best = -1, rc = K25_OK;
    bool *pareto = calloc((size_t)n + 1, sizeof(bool));
    if (!pareto)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    k25_sweep_analyze(spec, pts, n, &best, pareto);

    /* summary.json */
    json_t *root = json_object(), *front = json_array(), *bad = json_array(), *all = json_array();
    int ref = -1;
    for (int i = 0; i < n; i++) {
        json_t *pj = point_json(spec, &pts[i]);
        json_array_append(all, pj);
        if (pareto[i])
            json_array_append(front, pj);
        if (!pts[i].feasible)
            json_array_append(bad, pj);
        json_decref(pj);
        bool is_default = pts[i].reference;
        if (!is_default) { /* a grid point equal to the defaults serves as reference too */
            struct k25_config d;
            k25_config_init(&d);
            snprintf(d.model, sizeof(d.model), "%s", spec->model);
            d.seed = spec->seed;
            for (int f = 0; f < spec->n_fixed; f++)
                k25_config_set(&d, spec->fixed_key[f], spec->fixed_val[f], NULL, 0, NULL);
            is_default = !memcmp(&d, &pts[i].cfg, sizeof(d));
        }
        if (is_default)
            ref = i;
    }
    json_object_set_new(root, "name", json_string(spec->name));
    json_object_set_new(root, "spec", json_string(spec->path));
    json_object_set_new(root, "objective", json_pack("{s:s, s:s}", spec->maximize ? "maximize" : "minimize",
                                                     spec->objective, "metric", spec->objective));
    json_t *cons = json_array();
    for (int c = 0; c < spec->n_cons; c++)
        json_array_append_new(cons, json_string(spec->cons[c].text));
    json_object_set_new(root, "subject_to", cons);
    json_object_set_new(root, "points", json_integer(n));
    json_object_set_new(root, "repeats", json_integer(spec->repeats));
    json_object_set_new(root, "dataset_sha256", json_string(spec->dataset_sha256));
    json_object_set_new(root, "best", best >= 0 ? point_json(spec, &pts[best]) : json_null());
    json_object_set_new(root, "reference", ref >= 0 ? point_json(spec, &pts[ref]) : json_null());
    if (best >= 0 && ref >= 0) {
        double b = metric_of(&pts[best], spec->objective), r = metric_of(&pts[ref], spec->objective);
        /* improvement > 0 means the best point beats the defaults */
        double imp = spec->maximize ? (b - r) / r : (r - b) / r;
        json_object_set_new(root, "improvement_over_reference", isfinite(imp) ? json_real(imp) : json_null());
    }
    json_object_set_new(root, "pareto_front", front);
    json_object_set_new(root, "infeasible", bad);
    json_object_set_new(root, "all_points", all);
    char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    char path[2048];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    if (!txt)
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    else
        rc = k25_write_text_atomic(path, txt, err);
    free(txt);
    if (rc)
        goto out_free;

    /* sweep.h5: one row per point, a column per axis (as text) and per metric (NaN when absent) */
    {
        int na = spec->n_axes, nm = (int)NMETRICS, ncols = 0;
        size_t row_size = 0;
        struct k25_h5_col *cols = calloc((size_t)(na + nm + 6), sizeof(*cols));
        char (*names)[80] = calloc((size_t)(na + nm + 6), sizeof(*names));
        if (!cols || !names) {
            free(cols);
            free(names);
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out_free;
        }
#define ADD(nm_, type_, size_)                                                                       \
    do {                                                                                             \
        snprintf(names[ncols], sizeof(names[0]), "%s", nm_);                                        \
        cols[ncols] = (struct k25_h5_col){names[ncols], type_, row_size, (type_) == K25_H5_STR ? (size_) : 0}; \
        row_size += (size_);                                                                         \
        ncols++;                                                                                     \
    } while (0)
        ADD("point_id", K25_H5_STR, 17);
        ADD("file", K25_H5_STR, 64);
        row_size = (row_size + 7) & ~(size_t)7;
        ADD("feasible", K25_H5_I32, 4);
        ADD("pareto", K25_H5_I32, 4);
        ADD("repetitions", K25_H5_I32, 4);
        ADD("reference", K25_H5_I32, 4);
        for (int a = 0; a < na; a++)
            ADD(spec->axes[a].key, K25_H5_STR, 128);
        row_size = (row_size + 7) & ~(size_t)7;
        for (int m = 0; m < nm; m++)
            ADD(metrics[m].name, K25_H5_F64, 8);
#undef ADD
        unsigned char *rows = calloc((size_t)n + 1, row_size);
        if (!rows) {
            free(cols);
            free(names);
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out_free;
        }
        for (int i = 0; i < n; i++) {
            unsigned char *r = rows + (size_t)i * row_size;
            int c = 0;
            snprintf((char *)r + cols[c++].offset, 17, "%s", pts[i].id);
            snprintf((char *)r + cols[c++].offset, 64, "points/%s", pts[i].id);
            int32_t flags[4] = {pts[i].feasible, pareto[i], pts[i].reps_done, pts[i].reference};
            for (int k = 0; k < 4; k++)
                memcpy(r + cols[c++].offset, &flags[k], 4);
            for (int a = 0; a < na; a++)
                snprintf((char *)r + cols[c++].offset, 128, "%s",
                         pts[i].idx[a] >= 0 ? spec->axes[a].values[pts[i].idx[a]] : "default");
            for (int m = 0; m < nm; m++) {
                double v = metric_of(&pts[i], metrics[m].name);
                memcpy(r + cols[c++].offset, &v, 8);
            }
        }
        snprintf(path, sizeof(path), "%s/sweep.h5", out);
        struct k25_h5 h;
        if ((rc = k25_h5_create(&h, path, "sweep", err)) == K25_OK) {
            if ((rc = k25_h5_write_table(h.file, "points", cols, ncols, row_size, rows, (size_t)n, err)) ||
                (rc = k25_h5_attr_str(h.meta, "name", spec->name, err)) ||
                (rc = k25_h5_attr_str(h.meta, "objective", spec->objective, err)) ||
                (rc = k25_h5_attr_i64(h.meta, "best_row", best, err)) ||
                (rc = k25_h5_attr_str(h.meta, "summary_json", "summary.json", err)))
                k25_h5_abort(&h);
            else
                rc = k25_h5_commit(&h, err);
        }
        free(rows);
        free(cols);
        free(names);
    }

out_free:
    free(pareto);
    return rc;
}
