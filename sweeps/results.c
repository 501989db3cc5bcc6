/*
 * results.c - the result files of a sweep: OUT/summary.json (the verdict
 * on a best point with the data behind it, the Pareto front, the
 * infeasible points, every point) and OUT/sweep.h5 (one row per point),
 * both written atomically from what analyze.c concluded.
 */
#include "sweep.h"

#include "harness.h"

#include "k25util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const verdict_names[] = {
    [K25_VERDICT_SIGNIFICANT] = "significant",
    [K25_VERDICT_NOT_SIGNIFICANT] = "not_significant",
    [K25_VERDICT_ONE_REPETITION] = "one_repetition",
    [K25_VERDICT_NO_REFERENCE] = "no_reference",
    [K25_VERDICT_REFERENCE_INFEASIBLE] = "reference_infeasible",
    [K25_VERDICT_NO_FEASIBLE] = "no_feasible_point",
};

static double metric_of(const struct k25_sweep_point *p, const char *name)
{
    const json_t *v = p->metrics ? json_object_get(p->metrics, name) : NULL;
    return v && json_is_number(v) ? json_number_value(v) : NAN;
}

static json_t *num_or_null(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* The point against the reference, or null (the reference itself, or nothing paired). */
static json_t *paired_json(const struct k25_sweep_paired *c)
{
    if (c->pairs == 0)
        return json_null();
    return json_pack("{s:i, s:s, s:o, s:[o, o], s:b}", "pairs", c->pairs, "method",
                     c->log_ratio ? "log_ratio" : "difference", "ratio", num_or_null(c->ratio), "ratio_ci",
                     num_or_null(c->lo), num_or_null(c->hi), "significantly_better", c->better);
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
        struct k25_sweep_workload w;
        if (p->idx[a] >= 0) {
            snprintf(buf, sizeof(buf), "%s", spec->axes[a].values[p->idx[a]]);
        } else if (spec->axes[a].client) { /* the reference's load: the spec workload's */
            k25_sweep_point_workload(spec, p, &w);
            if (!strcmp(spec->axes[a].key, "concurrency"))
                snprintf(buf, sizeof(buf), "%d", w.concurrency);
            else
                k25_fmt_double(w.rate_rps, buf, sizeof(buf));
        } else if (json_is_string(v))
            snprintf(buf, sizeof(buf), "%s", json_string_value(v));
        else if (json_is_boolean(v))
            snprintf(buf, sizeof(buf), "%s", json_is_true(v) ? "true" : "false");
        else if (json_is_integer(v))
            snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        else
            k25_fmt_double(json_number_value(v), buf, sizeof(buf)); /* 0.85, not 0.84999999999999998 */
        json_object_set_new(axes, spec->axes[a].key, json_string(buf));
    }
    json_decref(cfg);
    json_t *reps = json_array();
    for (int r = 0; r < spec->repeats && r < K25_SWEEP_MAX_REPEATS; r++)
        json_array_append_new(reps, num_or_null(p->rep_obj[r]));
    return json_pack("{s:s, s:s, s:o, s:b, s:i, s:O, s:O, s:o, s:o, s:b, s:s, s:s}", "id", p->id, "label", label,
                     "axes", axes, "reference", p->reference, "repetitions", p->reps_done, "metrics",
                     p->metrics ? p->metrics : json_null(), "metrics_ci95", p->metrics_ci ? p->metrics_ci : json_null(),
                     "objective_by_repetition", reps, "vs_reference", paired_json(&p->vs_ref), "feasible",
                     p->feasible, "violations", p->violations, "knob_warning", p->knob_warning);
}

/* summary.json "significance": the verdict, the rule, and the data it rests on. */
static json_t *significance_json(const struct k25_sweep_spec *spec, const struct k25_sweep_point *pts,
                                 const struct k25_sweep_verdict *v)
{
    json_t *s = json_pack("{s:s, s:s, s:s, s:f, s:i}", "verdict", verdict_names[v->kind], "message", v->message,
                          "rule",
                          "rep k of a point against rep k of the reference (the same interleaved round): "
                          "Student-t interval of the mean log ratio, Bonferroni over the points compared; "
                          "best only when the whole interval is on the better side of 1",
                          "confidence", v->confidence, "comparisons", v->comparisons);
    json_object_set_new(s, "reference",
                        v->reference >= 0
                            ? json_pack("{s:s, s:o}", "id", pts[v->reference].id, "objective",
                                        num_or_null(metric_of(&pts[v->reference], spec->objective)))
                            : json_null());
    if (v->leader >= 0) {
        const struct k25_sweep_point *l = &pts[v->leader];
        char label[1024];
        k25_sweep_point_label(spec, l, label, sizeof(label));
        json_object_set_new(s, "leader",
                            json_pack("{s:s, s:s, s:o, s:o}", "id", l->id, "label", label, "objective",
                                      num_or_null(metric_of(l, spec->objective)), "vs_reference",
                                      paired_json(&l->vs_ref)));
    } else {
        json_object_set_new(s, "leader", json_null());
    }
    return s;
}

static int write_index(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                       const bool *pareto, const struct k25_sweep_verdict *v, struct k25_error *err);

int k25_sweep_write_results(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                            const json_t *missing, struct k25_error *err)
{
    int rc = K25_OK;
    struct k25_sweep_verdict v;
    bool *pareto = calloc((size_t)n + 1, sizeof(bool));
    if (!pareto)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    k25_sweep_analyze(spec, pts, n, &v, pareto);

    json_t *root = json_object(), *front = json_array(), *bad = json_array(), *all = json_array();
    for (int i = 0; i < n; i++) {
        json_t *pj = point_json(spec, &pts[i]);
        json_array_append(all, pj);
        if (pareto[i])
            json_array_append(front, pj);
        if (!pts[i].feasible)
            json_array_append(bad, pj);
        json_decref(pj);
    }
    json_object_set_new(root, "name", json_string(spec->name));
    json_object_set_new(root, "spec", json_string(spec->path));
    /* what was measured: the in-process engine, a running server, or a server started per point */
    json_object_set_new(root, "target",
                        spec->launch[0]     ? json_pack("{s:s, s:s}", "kind", "launch", "launch", spec->launch)
                        : spec->endpoint[0] ? json_pack("{s:s, s:s}", "kind", "endpoint", "endpoint", spec->endpoint)
                                            : json_pack("{s:s}", "kind", "engine"));
    json_object_set_new(root, "objective", json_pack("{s:s, s:s}", spec->maximize ? "maximize" : "minimize",
                                                     spec->objective, "metric", spec->objective));
    json_t *cons = json_array();
    for (int c = 0; c < spec->n_cons; c++)
        json_array_append_new(cons, json_string(spec->cons[c].text));
    json_object_set_new(root, "subject_to", cons);
    json_object_set_new(root, "points", json_integer(n));
    json_object_set_new(root, "repeats", json_integer(spec->repeats));
    json_object_set_new(root, "dataset_sha256", json_string(spec->dataset_sha256));
    json_object_set_new(root, "partial", json_boolean(missing && json_array_size(missing) > 0));
    if (missing && json_array_size(missing) > 0)
        json_object_set(root, "missing_runs", (json_t *)missing);
    /* the load guard the runner sampled before its first point (docs/metrics.md) */
    char gp[2048];
    json_error_t je;
    snprintf(gp, sizeof(gp), "%s/load_guard.json", out);
    json_t *guard = json_load_file(gp, 0, &je);
    json_object_set_new(root, "load_guard", guard ? guard : json_null());
    json_object_set_new(root, "significance", significance_json(spec, pts, &v));
    json_object_set_new(root, "best", v.best >= 0 ? point_json(spec, &pts[v.best]) : json_null());
    json_object_set_new(root, "leader", v.leader >= 0 ? point_json(spec, &pts[v.leader]) : json_null());
    json_object_set_new(root, "reference", v.reference >= 0 ? point_json(spec, &pts[v.reference]) : json_null());
    if (v.best >= 0 && v.reference >= 0) {
        double b = metric_of(&pts[v.best], spec->objective), r = metric_of(&pts[v.reference], spec->objective);
        /* improvement > 0 means the best point beats the defaults */
        double imp = spec->maximize ? (b - r) / r : (r - b) / r;
        json_object_set_new(root, "improvement_over_reference", num_or_null(imp));
    }
    /* knobs that did not change what they control (analyze.c), one line per point */
    json_t *warn = json_array();
    for (int i = 0; i < n; i++)
        if (pts[i].knob_warning[0]) {
            char label[1024], w[1600];
            k25_sweep_point_label(spec, &pts[i], label, sizeof(label));
            snprintf(w, sizeof(w), "%s: %s", label, pts[i].knob_warning);
            json_array_append_new(warn, json_string(w));
        }
    json_object_set_new(root, "warnings", warn);
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
    if (rc == K25_OK)
        rc = write_index(spec, out, pts, n, pareto, &v, err);
    free(pareto);
    return rc;
}

/* sweep.h5: one row per point, a column per axis (as text) and per metric (NaN when absent). */
static int write_index(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                       const bool *pareto, const struct k25_sweep_verdict *v, struct k25_error *err)
{
    int na = spec->n_axes, nm = k25_sweep_metric_count(), ncols = 0, rc;
    int maxcols = na + nm + 12;
    size_t row_size = 0;
    struct k25_h5_col *cols = calloc((size_t)maxcols, sizeof(*cols));
    char(*names)[80] = calloc((size_t)maxcols, sizeof(*names));
    unsigned char *rows = NULL;
    if (!cols || !names) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_free;
    }
#define ADD(nm_, type_, size_)                                                                              \
    do {                                                                                                    \
        snprintf(names[ncols], sizeof(names[0]), "%s", nm_);                                               \
        cols[ncols] = (struct k25_h5_col){names[ncols], type_, row_size, (type_) == K25_H5_STR ? (size_) : 0}; \
        row_size += (size_);                                                                                \
        ncols++;                                                                                            \
    } while (0)
    ADD("point_id", K25_H5_STR, 17);
    ADD("file", K25_H5_STR, 64);
    row_size = (row_size + 7) & ~(size_t)7;
    ADD("feasible", K25_H5_I32, 4);
    ADD("pareto", K25_H5_I32, 4);
    ADD("repetitions", K25_H5_I32, 4);
    ADD("reference", K25_H5_I32, 4);
    ADD("significantly_better", K25_H5_I32, 4);
    ADD("pairs", K25_H5_I32, 4);
    for (int a = 0; a < na; a++)
        ADD(spec->axes[a].key, K25_H5_STR, 128);
    row_size = (row_size + 7) & ~(size_t)7;
    ADD("vs_reference_ratio", K25_H5_F64, 8);
    ADD("vs_reference_lo", K25_H5_F64, 8);
    ADD("vs_reference_hi", K25_H5_F64, 8);
    for (int m = 0; m < nm; m++)
        ADD(k25_sweep_metric_name(m), K25_H5_F64, 8);
#undef ADD
    rows = calloc((size_t)n + 1, row_size);
    if (!rows) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_free;
    }
    for (int i = 0; i < n; i++) {
        unsigned char *r = rows + (size_t)i * row_size;
        const struct k25_sweep_point *p = &pts[i];
        int c = 0;
        snprintf((char *)r + cols[c++].offset, 17, "%s", p->id);
        snprintf((char *)r + cols[c++].offset, 64, "points/%s", p->id);
        int32_t flags[6] = {p->feasible, pareto[i], p->reps_done, i == v->reference, p->vs_ref.better,
                            p->vs_ref.pairs};
        for (int k = 0; k < 6; k++)
            memcpy(r + cols[c++].offset, &flags[k], 4);
        for (int a = 0; a < na; a++)
            snprintf((char *)r + cols[c++].offset, 128, "%s", p->idx[a] >= 0 ? spec->axes[a].values[p->idx[a]] : "default");
        double cmp[3] = {p->vs_ref.ratio, p->vs_ref.lo, p->vs_ref.hi};
        for (int k = 0; k < 3; k++)
            memcpy(r + cols[c++].offset, &cmp[k], 8);
        for (int m = 0; m < nm; m++) {
            double x = metric_of(p, k25_sweep_metric_name(m));
            memcpy(r + cols[c++].offset, &x, 8);
        }
    }
    char path[2048];
    snprintf(path, sizeof(path), "%s/sweep.h5", out);
    struct k25_h5 h;
    if ((rc = k25_h5_create(&h, path, "sweep", err)) == K25_OK) {
        if ((rc = k25_h5_write_table(h.file, "points", cols, ncols, row_size, rows, (size_t)n, err)) ||
            (rc = k25_h5_attr_str(h.meta, "name", spec->name, err)) ||
            (rc = k25_h5_attr_str(h.meta, "objective", spec->objective, err)) ||
            (rc = k25_h5_attr_i64(h.meta, "best_row", v->best, err)) ||
            (rc = k25_h5_attr_i64(h.meta, "reference_row", v->reference, err)) ||
            (rc = k25_h5_attr_str(h.meta, "verdict", verdict_names[v->kind], err)) ||
            (rc = k25_h5_attr_str(h.meta, "summary_json", "summary.json", err)))
            k25_h5_abort(&h);
        else
            rc = k25_h5_commit(&h, err);
    }
out_free:
    free(rows);
    free(cols);
    free(names);
    return rc;
}
