/*
 * gate_input.c - what `k25 gate` compares, loaded into one shape: a set of
 * bench runs, each with its summary, provenance, calibration and (when the
 * HDF5 trace is there) every request's timings and generated tokens.
 *
 * Accepted inputs:
 *   results/NAME/            a sweep folder (summary.json + points/ID/rep-K.*):
 *                            one run per (point, repetition), keyed "ID/rep-K"
 *   results/NAME/summary.json  the same
 *   DIR/                     a folder of bench runs (DIR/NAME.json, DIR/NAME.h5),
 *                            keyed by file name (the A/B folders a/ and b/)
 *   run.json                 a `k25 bench --json` summary; its trace is read
 *                            from the sibling run.h5 or the path it names
 *   run.h5                   a `k25 bench` trace
 * A run without its trace still has its summary: per-request metrics then
 * fall back to the per-repetition headline figures (gate.c).
 */
#include "gate.h"

#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static void run_free(struct k25_gate_run *r)
{
    for (int i = 0; i < r->n_req; i++) {
        free(r->req[i].tok);
        free(r->req[i].margin);
    }
    free(r->req);
    free(r->identity);
    json_decref(r->doc);
    memset(r, 0, sizeof(*r));
}

void k25_gate_set_free(struct k25_gate_set *s)
{
    for (int i = 0; i < s->n_runs; i++)
        run_free(&s->runs[i]);
    free(s->runs);
    memset(s, 0, sizeof(*s));
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *x = json_object_get(o, a);
    if (b)
        x = json_object_get(x, b);
    return json_is_string(x) ? json_string_value(x) : "";
}

/* The identity (what must match for a fair comparison) and the machine of a run. */
static int describe(struct k25_gate_run *r, struct k25_error *err)
{
    const json_t *prov = json_object_get(r->doc, "provenance");
    if (!json_is_object(prov) || !json_is_object(json_object_get(r->doc, "summary")))
        return k25_error_set(err, K25_EFORMAT, r->file, 0, NULL,
                             "not a k25 bench result (no summary or provenance object)");
    json_t *cfg = json_deep_copy(json_object_get(prov, "config"));
    json_t *wl = json_deep_copy(json_object_get(r->doc, "workload"));
    if (!cfg)
        cfg = json_object();
    if (!wl)
        wl = json_object();
    /* not part of what is measured: where logs went, where the gold set lives */
    json_object_del(cfg, "log_level");
    json_object_del(cfg, "log_file");
    /* threads change speed, and results only by rounding (tokens agree under the token-identity rule
     * on any thread count, docs/engine.md): machine, not identity */
    json_int_t threads = json_integer_value(json_object_get(cfg, "threads"));
    json_object_del(cfg, "threads");
    /* the backend is the hardware the same benchmark ran on (CPU against CUDA is a fair question):
     * machine, not identity; runs from before the key existed ran on the CPU */
    const char *backend = json_string_value(json_object_get(cfg, "backend"));
    char be_name[32];
    snprintf(be_name, sizeof(be_name), "%s", backend ? backend : "cpu");
    json_object_del(cfg, "backend");
    json_object_del(wl, "dataset");
    json_t *id = json_pack("{s:o, s:o, s:{s:s, s:s}}", "config", cfg, "workload", wl, "dataset", "sha256",
                           str_at(prov, "dataset", "sha256"), "filter", str_at(prov, "dataset", "filter"));
    r->identity = id ? json_dumps(id, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(id);
    if (!r->identity)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    const json_t *mach = json_object_get(prov, "machine");
    json_int_t cores = json_integer_value(json_object_get(mach, "cores_online"));
    snprintf(r->machine, sizeof(r->machine), "%s, %lld cores, threads %lld, %s, BLAS %s, backend %s",
             str_at(mach, "cpu_model", NULL), (long long)cores, (long long)threads, str_at(prov, "build", "cflags"),
             str_at(prov, "build", "blas_core"), be_name);
    const json_t *cal = json_object_get(prov, "calibration");
    const json_t *med = json_object_get(cal, "min_ms");
    r->calib_ms = json_integer_value(json_object_get(cal, "version")) == 1 && json_is_number(med) &&
                          json_number_value(med) > 0
                      ? json_number_value(med)
                      : NAN;
    /* the calibration's own spread: (median - fastest) / fastest of its trials */
    r->calib_spread = NAN;
    const json_t *cmed = json_object_get(cal, "median_ms");
    if (isfinite(r->calib_ms) && json_is_number(cmed))
        r->calib_spread = json_number_value(cmed) / r->calib_ms - 1;
    return K25_OK;
}

/* Per-request values and tokens from a trace. */
static int take_trace(struct k25_gate_run *r, const char *h5, struct k25_error *err)
{
    struct k25_trace t;
    int rc = k25_trace_read(h5, &t, err);
    if (rc != K25_OK)
        return rc;
    if (t.run.interrupted) {
        k25_trace_free(&t);
        return k25_error_set(err, K25_EINVAL, h5, 0, "interrupted",
                             "this run was interrupted before its workload finished: its figures cover only part "
                             "of it; re-run it");
    }
    if (!r->doc) {
        json_error_t je;
        json_t *p = json_loads(t.provenance_json ? t.provenance_json : "null", 0, &je);
        json_t *w = json_loads(t.workload_json ? t.workload_json : "null", 0, &je);
        json_t *s = json_loads(t.summary_json ? t.summary_json : "null", 0, &je);
        r->doc = json_pack("{s:s, s:s, s:o*, s:o*, s:o*}", "kind", "k25-bench", "trace", h5, "workload", w,
                           "summary", s, "provenance", p);
    }
    r->req = calloc(t.run.n_reqs + 1, sizeof(*r->req));
    if (!r->doc || !r->req) {
        k25_trace_free(&t);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    for (size_t i = 0; i < t.run.n_reqs; i++) {
        struct k25_bench_req *q = &t.run.reqs[i];
        struct k25_gate_req *g = &r->req[r->n_req++];
        snprintf(g->id, sizeof(g->id), "%s", q->id);
        g->seq = q->seq;
        g->rep = q->rep;
        g->completed = q->state == K25_REQ_COMPLETED;
        g->v[K25_GATE_REQ_TTFT] = k25_bench_req_ttft_ms(q);
        g->v[K25_GATE_REQ_TPOT] = k25_bench_req_tpot_ms(q);
        g->v[K25_GATE_REQ_E2E] = k25_bench_req_e2e_ms(q);
        g->v[K25_GATE_REQ_QUEUE] = k25_bench_req_queue_ms(q);
        g->v[K25_GATE_REQ_TPS] = k25_bench_req_out_tps(q);
        g->tok = q->token_ids; /* take ownership */
        g->margin = q->token_margins;
        g->n_tok = q->n_output;
        q->token_ids = NULL;
        q->token_margins = NULL;
    }
    r->has_trace = true;
    k25_trace_free(&t);
    return K25_OK;
}

/* Loads one run from a .json summary (and its trace when found) or a .h5 trace. */
static int load_run(const char *file, const char *key, const char *label, struct k25_gate_run *r,
                    struct k25_error *err)
{
    memset(r, 0, sizeof(*r));
    r->calib_ms = NAN;
    r->calib_spread = NAN;
    snprintf(r->file, sizeof(r->file), "%s", file);
    snprintf(r->key, sizeof(r->key), "%s", key);
    snprintf(r->label, sizeof(r->label), "%s", label);
    int rc = K25_OK;
    if (ends_with(file, ".h5")) {
        rc = take_trace(r, file, err);
    } else {
        json_error_t je;
        if (!(r->doc = json_load_file(file, 0, &je)))
            return k25_error_set(err, is_file(file) ? K25_EFORMAT : K25_ENOTFOUND, file, je.line, NULL, "%s",
                                 is_file(file) ? je.text : "no such file");
        if (strcmp(str_at(r->doc, "kind", NULL), "k25-bench") != 0)
            return k25_error_set(err, K25_EFORMAT, file, 0, "kind",
                                 "not a `k25 bench --json` summary (kind is \"%s\")", str_at(r->doc, "kind", NULL));
        /* the trace: the sibling .h5, else the path the summary names */
        char h5[1100];
        snprintf(h5, sizeof(h5), "%.*s.h5", (int)(strlen(file) - 5), file);
        const char *named = str_at(r->doc, "trace", NULL);
        const char *use = is_file(h5) ? h5 : (*named && is_file(named) ? named : NULL);
        if (use)
            rc = take_trace(r, use, err);
    }
    if (rc == K25_OK && json_is_true(json_object_get(r->doc, "interrupted")))
        rc = k25_error_set(err, K25_EINVAL, file, 0, "interrupted",
                           "this run was interrupted before its workload finished: its figures cover only part of "
                           "it; re-run it");
    if (rc == K25_OK)
        rc = describe(r, err);
    return rc;
}

static int grow(struct k25_gate_set *s, int *cap, struct k25_error *err)
{
    if (s->n_runs < *cap)
        return K25_OK;
    int nc = *cap ? *cap * 2 : 16;
    struct k25_gate_run *n = realloc(s->runs, sizeof(*n) * (size_t)nc);
    if (!n)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    s->runs = n;
    *cap = nc;
    return K25_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A sweep folder: every finished repetition of every point in summary.json. */
static int load_sweep(const char *dir, const json_t *summary, struct k25_gate_set *s, struct k25_error *err)
{
    const json_t *pts = json_object_get(summary, "all_points");
    int cap = 0, rc = K25_OK;
    size_t i;
    const json_t *p;
    json_array_foreach(pts, i, p)
    {
        const char *id = str_at(p, "id", NULL), *label = str_at(p, "label", NULL);
        for (int k = 0; k < 64 && rc == K25_OK; k++) {
            char file[2048], key[160], lab[160];
            snprintf(file, sizeof(file), "%s/points/%s/rep-%d.json", dir, id, k);
            if (!is_file(file))
                continue;
            snprintf(key, sizeof(key), "%s/rep-%d", id, k);
            snprintf(lab, sizeof(lab), "%s rep %d (%s)", id, k, label);
            if ((rc = grow(s, &cap, err)) != K25_OK)
                break;
            rc = load_run(file, key, lab, &s->runs[s->n_runs], err);
            s->n_runs++; /* counted even on failure, so it is freed */
        }
        if (rc != K25_OK)
            break;
    }
    return rc;
}

/* A folder of bench runs: DIR/NAME.json (or NAME.h5 alone), keyed by NAME. */
static int load_folder(const char *dir, struct k25_gate_set *s, struct k25_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return k25_error_set(err, K25_EIO, dir, 0, NULL, "cannot read the folder: %s", strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = K25_OK;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp"))
            continue;
        bool js = ends_with(e->d_name, ".json"), h5 = ends_with(e->d_name, ".h5");
        if (!js && !h5)
            continue;
        if (h5) { /* only when no summary sits beside it */
            char j[2048];
            snprintf(j, sizeof(j), "%s/%.*s.json", dir, (int)(strlen(e->d_name) - 3), e->d_name);
            if (is_file(j))
                continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, sizeof(*nn) * cap);
            if (!nn) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                goto out;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out;
        }
        n++;
    }
    qsort(names, n, sizeof(*names), cmp_name);
    int rcap = 0;
    for (size_t i = 0; i < n && rc == K25_OK; i++) {
        char file[2048], key[160];
        snprintf(file, sizeof(file), "%s/%s", dir, names[i]);
        snprintf(key, sizeof(key), "%.*s", (int)(strrchr(names[i], '.') - names[i]), names[i]);
        if ((rc = grow(s, &rcap, err)) != K25_OK)
            break;
        rc = load_run(file, key, key, &s->runs[s->n_runs], err);
        s->n_runs++;
    }
    if (rc == K25_OK && s->n_runs == 0)
        rc = k25_error_set(err, K25_ENOTFOUND, dir, 0, NULL,
                           "no k25 bench result here (expected a sweep folder with summary.json, or *.json / *.h5 runs)");
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

int k25_gate_set_load(const char *path, struct k25_gate_set *s, struct k25_error *err)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "%s", path);
    int rc;
    char dir[1024], sum[1100];
    snprintf(dir, sizeof(dir), "%s", path);
    if (!is_dir(path) && ends_with(path, "/summary.json")) /* results/NAME/summary.json: the sweep */
        dir[strlen(dir) - strlen("/summary.json")] = 0;
    if (is_dir(dir)) {
        snprintf(sum, sizeof(sum), "%s/summary.json", dir);
        json_error_t je;
        json_t *j = is_file(sum) ? json_load_file(sum, 0, &je) : NULL;
        if (j && json_is_array(json_object_get(j, "all_points"))) {
            snprintf(s->kind, sizeof(s->kind), "sweep");
            rc = load_sweep(dir, j, s, err);
            json_decref(j);
            if (rc == K25_OK && s->n_runs == 0)
                rc = k25_error_set(err, K25_ENOTFOUND, dir, 0, NULL, "the sweep has no finished run under points/");
        } else {
            json_decref(j);
            snprintf(s->kind, sizeof(s->kind), "runs");
            rc = load_folder(dir, s, err);
        }
    } else if (!is_file(path)) {
        rc = k25_error_set(err, K25_ENOTFOUND, path, 0, NULL, "no such file or folder");
    } else if (!ends_with(path, ".json") && !ends_with(path, ".h5")) {
        rc = k25_error_set(err, K25_EINVAL, path, 0, NULL,
                           "expected a bench run (.json or .h5), a sweep folder or a folder of runs");
    } else {
        snprintf(s->kind, sizeof(s->kind), "run");
        if (!(s->runs = calloc(1, sizeof(*s->runs))))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        s->n_runs = 1;
        rc = load_run(path, "run", path, &s->runs[0], err);
    }
    if (rc != K25_OK)
        k25_gate_set_free(s);
    return rc;
}
