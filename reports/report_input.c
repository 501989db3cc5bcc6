/*
 * report_input.c - what `k25 report INPUT...` was given, and loading it.
 *
 *   a folder with summary.json   a sweep (k25 sweep --out DIR): the points
 *                                from summary.json, plus the run traces of
 *                                the best and the reference point
 *   an HDF5 file of kind run     one `k25 bench` run (k25_trace_read)
 *   an HDF5 file, attn-bench     an attention benchmark (/machine, /attn/results)
 *   two or more run files        a comparison, the first one the baseline
 *
 * Every error names the path and what is wrong with it; nothing is
 * guessed from file names.
 */
#include "report.h"

#include "k25util.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *k25_report_kind_name(enum k25_report_kind k)
{
    switch (k) {
    case K25_REPORT_RUN: return "run";
    case K25_REPORT_SWEEP: return "sweep";
    case K25_REPORT_ATTN: return "attention benchmark";
    case K25_REPORT_COMPARE: return "comparison";
    }
    return "?";
}

static json_t *parse_json(const char *text)
{
    json_error_t je;
    return text ? json_loads(text, 0, &je) : NULL;
}

/* "results/c4.h5" -> "c4" */
static void label_of(const char *path, char *buf, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(buf, n, "%s", b);
    size_t l = strlen(buf);
    if (l > 3 && !strcmp(buf + l - 3, ".h5"))
        buf[l - 3] = 0;
}

void k25_report_run_free(struct k25_report_run *r)
{
    if (!r)
        return;
    k25_trace_free(&r->t);
    json_decref(r->summary);
    json_decref(r->provenance);
    json_decref(r->config);
    json_decref(r->workload);
    memset(r, 0, sizeof(*r));
}

int k25_report_run_load(const char *path, struct k25_report_run *r, struct k25_error *err)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->path, sizeof(r->path), "%s", path);
    label_of(path, r->label, sizeof(r->label));
    int rc = k25_trace_read(path, &r->t, err);
    if (rc)
        return rc;
    r->summary = parse_json(r->t.summary_json);
    r->provenance = parse_json(r->t.provenance_json);
    r->config = parse_json(r->t.config_json);
    r->workload = parse_json(r->t.workload_json);
    if (!r->summary)
        return k25_error_set(err, K25_EFORMAT, path, 0, NULL, "/summary holds no readable JSON summary");
    return K25_OK;
}

/* ------------------------------------------------------ attention bench */

#define AC(n, t) {#n, t, offsetof(struct k25_report_attn_row, n), 0}
#define AS(n) {#n, K25_H5_STR, offsetof(struct k25_report_attn_row, n), sizeof(((struct k25_report_attn_row *)0)->n)}
static const struct k25_h5_col attn_cols[] = {
    AS(impl), AS(mode), AS(dtype), AC(context, K25_H5_I64), AC(chunk, K25_H5_I64),
    AC(heads, K25_H5_I32), AC(kv_heads, K25_H5_I32), AC(head_dim, K25_H5_I32), AC(threads, K25_H5_I32),
    AC(repeat, K25_H5_I32), AC(layers, K25_H5_I32), AS(status), AS(reason),
    AC(median_ms, K25_H5_F64), AC(min_ms, K25_H5_F64), AC(max_ms, K25_H5_F64), AC(spread_pct, K25_H5_F64),
    AC(gflops, K25_H5_F64), AC(kv_gbps, K25_H5_F64), AC(frac_fma_peak, K25_H5_F64),
    AC(frac_bandwidth, K25_H5_F64), AC(scratch_peak_bytes, K25_H5_I64), AC(calc_scratch_bytes, K25_H5_I64),
    AC(work_bytes, K25_H5_I64),
};
#undef AC
#undef AS

static void attn_free(struct k25_report_attn *a)
{
    if (!a)
        return;
    free(a->rows);
    json_decref(a->meta);
    free(a);
}

static int attn_load(const char *path, struct k25_report_attn **out, struct k25_error *err)
{
    struct k25_report_attn *a = calloc(1, sizeof(*a));
    if (!a)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    snprintf(a->path, sizeof(a->path), "%s", path);
    a->meta = json_object();
    struct k25_h5 h;
    hid_t mach = H5I_INVALID_HID, grp = H5I_INVALID_HID;
    int rc = k25_h5_open_read(&h, path, "attn-bench", err);
    if (rc)
        goto out_free;
    static const char *const smeta[] = {"k25_version", "git_commit", "compiler", "cflags", "cpu_model",
                                        "blas_core", "command_line", "start_time"};
    for (size_t i = 0; i < sizeof(smeta) / sizeof(smeta[0]); i++) {
        char *s = NULL;
        if (k25_h5_has_attr(h.meta, smeta[i]) && k25_h5_get_attr_str(h.meta, smeta[i], &s, NULL) == K25_OK)
            json_object_set_new(a->meta, smeta[i], json_string(s));
        free(s);
    }
    static const char *const imeta[] = {"threads", "seed"};
    for (size_t i = 0; i < 2; i++) {
        int64_t v;
        if (k25_h5_has_attr(h.meta, imeta[i]) && k25_h5_get_attr_i64(h.meta, imeta[i], &v, NULL) == K25_OK)
            json_object_set_new(a->meta, imeta[i], json_integer(v));
    }
    if ((mach = k25_h5_group(&h, "machine", err)) < 0) {
        rc = K25_EFORMAT;
        goto out_close;
    }
    int64_t threads = 0, triad_bytes = 0, llc = 0;
    if ((rc = k25_h5_get_attr_f64(mach, "fma_peak_gflops", &a->machine.fma_peak_gflops, err)) ||
        (rc = k25_h5_get_attr_f64(mach, "triad_gbps", &a->machine.triad_gbps, err)) ||
        (rc = k25_h5_get_attr_i64(mach, "threads", &threads, err)))
        goto out_close;
    if (k25_h5_has_attr(mach, "triad_array_bytes"))
        k25_h5_get_attr_i64(mach, "triad_array_bytes", &triad_bytes, NULL);
    if (k25_h5_has_attr(mach, "llc_bytes"))
        k25_h5_get_attr_i64(mach, "llc_bytes", &llc, NULL);
    a->machine.threads = (int)threads;
    a->machine.triad_array_bytes = triad_bytes;
    a->machine.llc_bytes = llc;
    if ((grp = k25_h5_group(&h, "attn", err)) < 0) {
        rc = K25_EFORMAT;
        goto out_close;
    }
    void *rows = NULL;
    rc = k25_h5_read_table(grp, "results", attn_cols, (int)(sizeof(attn_cols) / sizeof(attn_cols[0])),
                           sizeof(struct k25_report_attn_row), K25_H5_ANY_COUNT, &rows, &a->n_rows, err);
    a->rows = rows;
    if (rc == K25_OK && a->n_rows == 0)
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL, "/attn/results has no rows");
out_close:
    if (grp >= 0)
        H5Gclose(grp);
    if (mach >= 0)
        H5Gclose(mach);
    k25_h5_close(&h);
out_free:
    if (rc) {
        if (err && !strstr(err->msg, path)) {
            char m[sizeof(err->msg)];
            snprintf(m, sizeof(m), "%s", err->msg);
            k25_error_set(err, rc, path, 0, NULL, "%s", m);
        }
        attn_free(a);
        return rc;
    }
    *out = a;
    return K25_OK;
}

/* -------------------------------------------------------------- sweeps */

static void sweep_free(struct k25_report_sweep *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_best_runs; i++)
        k25_report_run_free(&s->best_runs[i]);
    free(s->best_runs);
    for (int i = 0; i < s->n_ref_runs; i++)
        k25_report_run_free(&s->ref_runs[i]);
    free(s->ref_runs);
    if (s->any_run) {
        k25_report_run_free(s->any_run);
        free(s->any_run);
    }
    free(s->pts);
    json_decref(s->summary);
    free(s);
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Loads points/ID/rep-K.h5 for K = 0, 1, ... (those present). */
static int load_point_runs(const char *dir, const char *id, const char *label, struct k25_report_run **out, int *n,
                           struct k25_error *err)
{
    *out = NULL;
    *n = 0;
    struct k25_report_run *runs = calloc(K25_BENCH_MAX_REPEAT, sizeof(*runs));
    if (!runs)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (int k = 0; k < K25_BENCH_MAX_REPEAT; k++) {
        char path[2100];
        snprintf(path, sizeof(path), "%s/points/%s/rep-%d.h5", dir, id, k);
        if (!is_file(path))
            break;
        int rc = k25_report_run_load(path, &runs[*n], err);
        if (rc) {
            for (int i = 0; i <= *n; i++)
                k25_report_run_free(&runs[i]);
            free(runs);
            *n = 0;
            return rc;
        }
        snprintf(runs[*n].label, sizeof(runs[*n].label), "%s rep %d", label, k);
        (*n)++;
    }
    *out = runs;
    return K25_OK;
}

/*
 * The leader every plot anchors on, the way `k25 sweep` defines it
 * (summary.json "leader", sweeps/analyze.c): the significant best when
 * there is one, else the best mean among the feasible points, the
 * reference included.  Summaries older than that rule (a leader that
 * excluded the reference, or none) are corrected here so the text and the
 * plots still agree.
 */
static void leader_fix(struct k25_report_sweep *s)
{
    if (s->best >= 0) {
        s->leader = s->best;
        return;
    }
    int lead = -1;
    for (int i = 0; i < s->n_pts; i++) {
        const json_t *v = json_object_get(s->pts[i].metrics, s->objective);
        if (!s->pts[i].feasible || !json_is_number(v))
            continue;
        double x = json_number_value(v);
        const json_t *l = lead >= 0 ? json_object_get(s->pts[lead].metrics, s->objective) : NULL;
        if (lead < 0 || (s->maximize ? x > json_number_value(l) : x < json_number_value(l)))
            lead = i;
    }
    if (lead >= 0)
        s->leader = lead;
}

/* No trace of the best or reference point: the first rep-K.h5 under points/ (the provenance's run). */
static int load_any_run(struct k25_report_sweep *s, struct k25_error *err)
{
    for (int i = 0; i < s->n_pts; i++)
        for (int k = 0; k < K25_BENCH_MAX_REPEAT; k++) {
            char path[2100];
            snprintf(path, sizeof(path), "%s/points/%s/rep-%d.h5", s->dir, s->pts[i].id, k);
            if (!is_file(path))
                continue;
            s->any_run = calloc(1, sizeof(*s->any_run));
            if (!s->any_run)
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            int rc = k25_report_run_load(path, s->any_run, err);
            if (rc) {
                k25_report_run_free(s->any_run);
                free(s->any_run);
                s->any_run = NULL;
            }
            return rc;
        }
    return K25_OK;
}

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static int sweep_load(const char *dir, struct k25_report_sweep **out, struct k25_error *err)
{
    char path[2100];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return k25_error_set(err, K25_EFORMAT, path, je.line > 0 ? je.line : 0, NULL, "not readable JSON: %s",
                             je.text);
    struct k25_report_sweep *s = calloc(1, sizeof(*s));
    if (!s) {
        json_decref(root);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    s->summary = root;
    s->best = s->reference = s->leader = -1;
    snprintf(s->dir, sizeof(s->dir), "%s", dir);
    int rc = K25_OK;
    const json_t *all = json_object_get(root, "all_points"), *obj = json_object_get(root, "objective");
    if (!json_is_array(all) || json_array_size(all) == 0 || !json_is_object(obj)) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                           "not a k25 sweep summary (no all_points or objective; written by `k25 sweep`)");
        goto out;
    }
    snprintf(s->name, sizeof(s->name), "%s", jstr(root, "name"));
    snprintf(s->objective, sizeof(s->objective), "%s", jstr(obj, "metric"));
    s->maximize = json_object_get(obj, "maximize") != NULL;
    /* axes in the order of the first point's object (jansson keeps insertion order) */
    const json_t *axes0 = json_object_get(json_array_get(all, 0), "axes");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)axes0, key, val) {
        if (s->n_axes < K25_REPORT_MAX_AXES)
            snprintf(s->axis[s->n_axes++], sizeof(s->axis[0]), "%s", key);
    }
    s->n_pts = (int)json_array_size(all);
    s->pts = calloc((size_t)s->n_pts, sizeof(*s->pts));
    if (!s->pts) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    const json_t *front = json_object_get(root, "pareto_front");
    const char *best_id = jstr(json_object_get(root, "best"), "id");
    const char *ref_id = jstr(json_object_get(root, "reference"), "id");
    const char *leader_id = jstr(json_object_get(root, "leader"), "id");
    for (int i = 0; i < s->n_pts; i++) {
        const json_t *pj = json_array_get(all, (size_t)i);
        struct k25_report_point *p = &s->pts[i];
        snprintf(p->id, sizeof(p->id), "%s", jstr(pj, "id"));
        snprintf(p->label, sizeof(p->label), "%s", jstr(pj, "label"));
        snprintf(p->violations, sizeof(p->violations), "%s", jstr(pj, "violations"));
        const json_t *ax = json_object_get(pj, "axes");
        for (int a = 0; a < s->n_axes; a++)
            snprintf(p->value[a], sizeof(p->value[a]), "%s", jstr(ax, s->axis[a]));
        p->metrics = json_object_get(pj, "metrics");
        p->ci = json_object_get(pj, "metrics_ci95");
        p->feasible = json_is_true(json_object_get(pj, "feasible"));
        p->reference = json_is_true(json_object_get(pj, "reference"));
        p->reps = (int)json_integer_value(json_object_get(pj, "repetitions"));
        p->obj_by_rep = json_object_get(pj, "objective_by_repetition");
        p->vs_ref = json_object_get(pj, "vs_reference");
        size_t k;
        const json_t *f;
        json_array_foreach(front, k, f)
            if (!strcmp(jstr(f, "id"), p->id))
                p->pareto = true;
        if (*best_id && !strcmp(best_id, p->id))
            s->best = i;
        if (*ref_id && !strcmp(ref_id, p->id))
            s->reference = i;
        if (*leader_id && !strcmp(leader_id, p->id))
            s->leader = i;
        if (json_is_number(json_object_get(p->metrics, "fidelity_kl_mean")))
            s->has_fidelity = true;
    }
    s->significant = s->best >= 0;
    leader_fix(s);
    {
        const json_t *sig = json_object_get(root, "significance");
        const json_t *c = json_object_get(sig, "confidence"), *k = json_object_get(sig, "comparisons");
        s->confidence = json_is_number(c) ? json_number_value(c) : 0.95;
        s->comparisons = json_is_integer(k) && json_integer_value(k) > 0 ? (int)json_integer_value(k) : 1;
    }
    if (s->best >= 0 && (rc = load_point_runs(dir, s->pts[s->best].id, "best", &s->best_runs, &s->n_best_runs, err)))
        goto out;
    if (s->reference >= 0 && s->reference != s->best &&
        (rc = load_point_runs(dir, s->pts[s->reference].id, "reference", &s->ref_runs, &s->n_ref_runs, err)))
        goto out;
    if (!s->n_best_runs && !s->n_ref_runs && (rc = load_any_run(s, err)))
        goto out;
out:
    if (rc) {
        sweep_free(s);
        return rc;
    }
    *out = s;
    return K25_OK;
}

/* ---------------------------------------------------------- detection */

void k25_report_input_free(struct k25_report_input *in)
{
    if (!in)
        return;
    for (int i = 0; i < in->n_runs; i++)
        k25_report_run_free(&in->runs[i]);
    free(in->runs);
    sweep_free(in->sweep);
    attn_free(in->attn);
    memset(in, 0, sizeof(*in));
}

/* The kind attribute of a k25 HDF5 file ("run", "attn-bench", "sweep"). */
static int h5_kind(const char *path, char *kind, size_t n, struct k25_error *err)
{
    struct k25_h5 h;
    int rc = k25_h5_open_read(&h, path, NULL, err);
    if (rc)
        return rc;
    char *s = NULL;
    rc = k25_h5_get_attr_str(h.meta, "kind", &s, err);
    if (rc == K25_OK)
        snprintf(kind, n, "%s", s);
    free(s);
    k25_h5_close(&h);
    return rc;
}

int k25_report_load(const char *const *paths, int n_paths, struct k25_report_input *in, struct k25_error *err)
{
    memset(in, 0, sizeof(*in));
    if (n_paths < 1)
        return k25_error_set(err, K25_EINVAL, NULL, 0, NULL, "no input given");
    int rc = K25_OK;
    for (int i = 0; i < n_paths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0)
            return k25_error_set(err, errno == ENOENT ? K25_ENOTFOUND : K25_EIO, paths[i], 0, NULL, "%s",
                                 strerror(errno));
        if (S_ISDIR(st.st_mode) && n_paths > 1)
            return k25_error_set(err, K25_EINVAL, paths[i], 0, NULL,
                                 "a sweep folder is reported on its own; several inputs must be run files");
    }
    struct stat st;
    stat(paths[0], &st);
    if (S_ISDIR(st.st_mode)) {
        char sj[2100];
        snprintf(sj, sizeof(sj), "%s/summary.json", paths[0]);
        if (!is_file(sj))
            return k25_error_set(err, K25_EINVAL, paths[0], 0, NULL,
                                 "a folder without summary.json: not a sweep folder (`k25 sweep --out DIR` writes one)");
        in->kind = K25_REPORT_SWEEP;
        return sweep_load(paths[0], &in->sweep, err);
    }
    char kind[64] = "";
    if ((rc = h5_kind(paths[0], kind, sizeof(kind), err)))
        return rc;
    if (!strcmp(kind, "attn-bench")) {
        if (n_paths > 1)
            return k25_error_set(err, K25_EINVAL, paths[1], 0, NULL,
                                 "an attention benchmark is reported on its own (one attn.h5)");
        in->kind = K25_REPORT_ATTN;
        return attn_load(paths[0], &in->attn, err);
    }
    if (!strcmp(kind, "sweep"))
        return k25_error_set(err, K25_EINVAL, paths[0], 0, NULL,
                             "a sweep index: give the sweep folder (the one holding summary.json) instead");
    if (strcmp(kind, "run") != 0)
        return k25_error_set(err, K25_EFORMAT, paths[0], 0, NULL, "k25 file of kind '%s': nothing to report", kind);
    in->runs = calloc((size_t)n_paths, sizeof(*in->runs));
    if (!in->runs)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    in->kind = n_paths > 1 ? K25_REPORT_COMPARE : K25_REPORT_RUN;
    for (int i = 0; i < n_paths; i++) {
        rc = k25_report_run_load(paths[i], &in->runs[i], err);
        in->n_runs = i + 1;
        if (rc) {
            k25_report_input_free(in);
            return rc;
        }
    }
    /* legends must tell the runs apart: number duplicate names */
    for (int i = 1; i < in->n_runs; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(in->runs[i].label, in->runs[j].label)) {
                char b[160];
                snprintf(b, sizeof(b), "%.100s (%d)", in->runs[i].label, i + 1);
                k25_report_sfmt(in->runs[i].label, sizeof(in->runs[i].label), "%s", b);
            }
    return K25_OK;
}
