/*
 * report.c - k25_report_generate: the whole `k25 report`, start to end.
 *
 *   1. find gnuplot and the templates, check --out (fail first, before any
 *      work) and create the work folder OUT.tmp.PID beside it
 *   2. read the SLA file and the input(s)
 *   3. write the data files and render every plot (WORK/plots/), each
 *      picture checked complete (gnuplot exits 0 on a write error)
 *   4. evaluate the SLA lines and the health checks
 *   5. write WORK/report.md, WORK/report.html and WORK/verdict.json
 *   6. swap WORK into place as OUT, all at once (report_out.c)
 *
 * Any failure removes WORK and leaves OUT as it was: the previous report
 * intact, never a half-written one.
 */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int k25_report_write_file(const char *path, const char *data, size_t len, struct k25_error *err)
{
    char tmp[PATH_MAX + 64];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create: %s", strerror(errno));
    bool ok = fwrite(data, 1, len, f) == len;
    if (!ok)
        k25_error_set(err, K25_EIO, path, 0, NULL, "writing %s failed: %s", tmp, strerror(errno));
    return k25_atomic_finish(f, tmp, path, ok, err);
}

/* Writes the document through one backend into path (temporary + rename). */
static int write_doc(const struct k25_report_doc *d, bool html, const char *out_dir, const char *path,
                     struct k25_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    struct k25_doc_out o = {.f = f, .out_dir = out_dir, .rc = K25_OK, .err = err};
    if (html)
        k25_doc_out_html(&o);
    else
        k25_doc_out_md(&o);
    k25_report_doc_write(d, &o);
    bool bad = ferror(f);
    fclose(f);
    int rc = o.rc;
    if (!rc && (bad || !buf))
        rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory while writing");
    if (!rc)
        rc = k25_report_write_file(path, buf, len, err);
    free(buf);
    return rc;
}

static json_t *num_or_null(double v)
{
    return isnan(v) || isinf(v) ? json_null() : json_real(v);
}

static int write_verdict_json(const struct k25_report_doc *d, const char *path, struct k25_error *err)
{
    const struct k25_report_outcome *oc = d->outcome;
    json_t *root = json_object(), *inputs = json_array(), *sla = json_array(), *health = json_array(),
           *plots = json_array(), *cols = json_array();
    for (int i = 0; i < d->opts->n_inputs; i++)
        json_array_append_new(inputs, json_string(d->opts->inputs[i]));
    for (int c = 0; c < d->n_cols; c++)
        json_array_append_new(cols, json_string(d->col_label[c]));
    for (int i = 0; i < d->sla->n_lines && d->n_cols; i++) {
        json_t *res = json_array();
        for (int c = 0; c < d->n_cols; c++) {
            const struct k25_sla_result *r = &d->sla_res[i][c];
            json_array_append_new(res, json_pack("{s:s, s:s, s:o, s:o, s:o, s:I, s:[o, o], s:s}", "column",
                                                 d->col_label[c], "verdict", k25_verdict_name(r->verdict), "value",
                                                 num_or_null(r->value), "margin", num_or_null(r->margin),
                                                 "margin_pct", num_or_null(r->margin_pct), "n", (json_int_t)r->n,
                                                 "ci95", num_or_null(r->ci_lo), num_or_null(r->ci_hi), "note", r->note));
        }
        json_array_append_new(sla, json_pack("{s:s, s:i, s:s, s:s, s:f, s:o}", "line", d->sla->lines[i].text, "file_line",
                                             d->sla->lines[i].line, "metric", d->sla->lines[i].metric, "op",
                                             k25_sla_op_text(d->sla->lines[i].op), "limit", d->sla->lines[i].limit,
                                             "results", res));
    }
    for (int h = 0; h < d->sla->n_health && d->n_cols; h++) {
        const struct k25_health_check *c = &d->sla->health[h];
        if (!c->enabled)
            continue;
        json_t *res = json_array();
        for (int k = 0; k < d->n_cols; k++) {
            const struct k25_health_result *r = &d->health_res[h][k];
            json_array_append_new(res, json_pack("{s:s, s:s, s:o, s:s}", "column", d->col_label[k], "level",
                                                 k25_health_level_name(r->level), "value", num_or_null(r->value),
                                                 "note", r->note));
        }
        json_array_append_new(health, json_pack("{s:s, s:o}", "check", c->metric, "results", res));
    }
    for (int i = 0; i < d->n_plots; i++)
        json_array_append_new(plots, json_string(d->plots[i].file));
    const char *v = d->sla->n_lines == 0 || d->in->kind == K25_REPORT_ATTN ? "none"
                    : oc->overall == K25_VERDICT_PASS                    ? "PASS"
                    : oc->overall == K25_VERDICT_FAIL                    ? "FAIL"
                                                                         : "INCONCLUSIVE";
    json_object_set_new(root, "kind", json_string(k25_report_kind_name(d->in->kind)));
    json_object_set_new(root, "title", json_string(d->title));
    json_object_set_new(root, "generated_utc", json_string(d->generated_utc));
    json_object_set_new(root, "inputs", inputs);
    json_object_set_new(root, "sla_file", d->sla->path[0] ? json_string(d->sla->path) : json_null());
    json_object_set_new(root, "verdict", json_string(v));
    json_object_set_new(root, "columns", cols);
    json_object_set_new(root, "sla", sla);
    json_object_set_new(root, "health", health);
    json_object_set_new(root, "plots", plots);
    char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!txt)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    size_t l = strlen(txt);
    txt[l] = 0;
    char *withnl = realloc(txt, l + 2);
    if (!withnl) {
        free(txt);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    withnl[l] = '\n';
    withnl[l + 1] = 0;
    int rc = k25_report_write_file(path, withnl, l + 1, err);
    free(withnl);
    return rc;
}

/* Which runs each verdict column is evaluated on. */
static void set_columns(struct k25_report_doc *d)
{
    const struct k25_report_input *in = d->in;
    d->n_cols = 0;
    if (in->kind == K25_REPORT_RUN || in->kind == K25_REPORT_COMPARE) {
        for (int i = 0; i < in->n_runs && d->n_cols < K25_REPORT_MAX_COLS; i++) {
            snprintf(d->col_label[d->n_cols], sizeof(d->col_label[0]), "%s", in->runs[i].label);
            d->col_runs[d->n_cols] = &in->runs[i];
            d->col_nruns[d->n_cols++] = 1;
        }
    } else if (in->kind == K25_REPORT_SWEEP && in->sweep->n_best_runs) {
        const struct k25_report_sweep *s = in->sweep;
        snprintf(d->col_label[0], sizeof(d->col_label[0]), "best point (%.100s)", s->pts[s->best].label);
        d->col_runs[0] = s->best_runs;
        d->col_nruns[0] = s->n_best_runs;
        d->n_cols = 1;
    } else if (in->kind == K25_REPORT_SWEEP && in->sweep->n_ref_runs) {
        /* no setting is significantly better: the sign-off is on the settings the reader keeps */
        snprintf(d->col_label[0], sizeof(d->col_label[0]), "reference point (defaults)");
        d->col_runs[0] = in->sweep->ref_runs;
        d->col_nruns[0] = in->sweep->n_ref_runs;
        d->n_cols = 1;
    }
}

/* The data files and plot jobs of the input's kind, into plot_dir and pl. */
static int write_data(const struct k25_report_input *in, const char *plot_dir, struct k25_plot_list *pl,
                      struct k25_error *err)
{
    int rc = K25_OK;
    switch (in->kind) {
    case K25_REPORT_RUN: rc = k25_report_data_run(&in->runs[0], plot_dir, "", in->runs[0].label, pl, err); break;
    case K25_REPORT_COMPARE:
        rc = k25_report_data_compare(in->runs, in->n_runs, plot_dir, "", "comparison", pl, err);
        for (int i = 0; i < in->n_runs && i < 4 && !rc; i++) {
            char pfx[16];
            snprintf(pfx, sizeof(pfx), "r%d_", i + 1);
            rc = k25_report_data_run(&in->runs[i], plot_dir, pfx, in->runs[i].label, pl, err);
        }
        break;
    case K25_REPORT_SWEEP: {
        const struct k25_report_sweep *s = in->sweep;
        rc = k25_report_data_sweep(s, plot_dir, pl, err);
        if (!rc && s->n_best_runs && s->n_ref_runs) {
            struct k25_report_run pair[2] = {s->ref_runs[0], s->best_runs[0]};
            snprintf(pair[0].label, sizeof(pair[0].label), "defaults");
            snprintf(pair[1].label, sizeof(pair[1].label), "best point");
            rc = k25_report_data_compare(pair, 2, plot_dir, "bvd_", "best point against the defaults", pl, err);
        }
        if (!rc && s->n_best_runs)
            rc = k25_report_data_run(&s->best_runs[0], plot_dir, "best_", "best point", pl, err);
        else if (!rc && s->n_ref_runs) /* no significant best: the point the SLA is judged on */
            rc = k25_report_data_run(&s->ref_runs[0], plot_dir, "ref_", "reference point", pl, err);
        break;
    }
    case K25_REPORT_ATTN: rc = k25_report_data_attn(in->attn, plot_dir, pl, err); break;
    }
    return rc;
}

/*
 * Renders every job of pl in the chosen format (a PDF report also in PNG,
 * for the HTML page) and records each plot's file names relative to the
 * report folder.
 */
static int render_plots(const struct k25_report_opts *o, const char *gnuplot, const char *tmpl, const char *plot_dir,
                        struct k25_plot_list *pl, struct k25_error *err)
{
    int rc;
    const char *ext = o->format == K25_FMT_SVG ? "svg" : (o->format == K25_FMT_PDF ? "pdf" : "png");
    if ((rc = k25_plot_render_all(gnuplot, tmpl, plot_dir, pl->jobs, pl->n, o->format, "", err)))
        return rc;
    if (o->format == K25_FMT_PDF && (rc = k25_plot_render_all(gnuplot, tmpl, plot_dir, pl->jobs, pl->n, K25_FMT_PNG,
                                                              "_png", err)))
        return rc;
    for (int i = 0; i < pl->n; i++) {
        char stem[sizeof(pl->jobs[i].stem)], file[sizeof(pl->plots[i].file)];
        memcpy(stem, pl->jobs[i].stem, sizeof(stem)); /* separate buffers: -Wrestrict */
        k25_report_sfmt(file, sizeof(file), "plots/%s.%s", stem, ext);
        memcpy(pl->plots[i].file, file, sizeof(file));
        if (o->format == K25_FMT_PDF)
            k25_report_sfmt(pl->plots[i].html_file, sizeof(pl->plots[i].html_file), "plots/%s_png.png", stem);
        else
            memcpy(pl->plots[i].html_file, file, sizeof(file));
    }
    return K25_OK;
}

/* The title: --title, else the SLA file's, else one for the input's kind. */
static void set_title(struct k25_report_doc *d)
{
    const struct k25_report_input *in = d->in;
    if (d->opts->title && *d->opts->title)
        snprintf(d->title, sizeof(d->title), "%s", d->opts->title);
    else if (d->sla->title[0])
        snprintf(d->title, sizeof(d->title), "%s", d->sla->title);
    else if (in->kind == K25_REPORT_SWEEP)
        snprintf(d->title, sizeof(d->title), "Tuning report: sweep %s", in->sweep->name);
    else if (in->kind == K25_REPORT_ATTN)
        snprintf(d->title, sizeof(d->title), "Attention benchmark report");
    else if (in->kind == K25_REPORT_COMPARE)
        snprintf(d->title, sizeof(d->title), "Comparison: %.100s against %.100s", in->runs[in->n_runs - 1].label,
                 in->runs[0].label);
    else
        snprintf(d->title, sizeof(d->title), "Run report: %.200s", in->runs[0].label);
}

/* Health check h on column c; one that does not apply is NA with its value and the reason. */
static void eval_health(struct k25_report_doc *d, int h, int c)
{
    const struct k25_health_check *chk = &d->sla->health[h];
    struct k25_health_result *hr = &d->health_res[h][c];
    char why[64];
    if (k25_health_applies(chk, d->col_runs[c], d->col_nruns[c], why, sizeof(why))) {
        k25_health_eval(chk, k25_health_value(chk, d->col_runs[c], d->col_nruns[c]), hr);
        if (hr->level == K25_HEALTH_NOT_MEASURED) /* no data says why, never OK */
            k25_health_missing_why(chk, d->col_runs[c], d->col_nruns[c], hr->note, sizeof(hr->note));
        return;
    }
    memset(hr, 0, sizeof(*hr));
    hr->level = K25_HEALTH_NA;
    hr->value = k25_health_value(chk, d->col_runs[c], d->col_nruns[c]);
    char v[64];
    k25_report_fmt(hr->value, v, sizeof(v));
    if (strcmp(why, "closed loop") != 0) { /* e.g. "tiers off": nothing more to say */
        k25_report_sfmt(hr->note, sizeof(hr->note), "(%s)", why);
    } else if (isnan(hr->value)) { /* n/a, and nothing measured either: why */
        char miss[200];
        k25_health_missing_why(chk, d->col_runs[c], d->col_nruns[c], miss, sizeof(miss));
        k25_report_sfmt(hr->note, sizeof(hr->note), "(%s; not measured: %s)", why, miss);
    } else if (!strcmp(chk->metric, "queue_waiting_mean")) {
        k25_report_sfmt(hr->note, sizeof(hr->note),
                        "(%s): measured %s, but a closed loop keeps every user's request queued that the batch "
                        "cannot hold, by construction; the check applies to open-loop runs at a target rate",
                        why, v);
    } else {
        k25_report_sfmt(hr->note, sizeof(hr->note),
                 "(%s): measured %s, but a closed loop keeps the engine saturated (busy near 1 by "
                 "construction); the check applies to open-loop runs at a target rate",
                 why, v);
    }
}

/* Every SLA line and health check on every column, and the counts of the verdict into oc. */
static void evaluate(struct k25_report_doc *d, struct k25_report_outcome *oc)
{
    const struct k25_sla *sla = d->sla;
    for (int c = 0; c < d->n_cols; c++) {
        for (int i = 0; i < sla->n_lines; i++)
            k25_sla_eval(&sla->lines[i], d->col_runs[c], d->col_nruns[c], &d->sla_res[i][c]);
        for (int h = 0; h < sla->n_health; h++)
            eval_health(d, h, c);
    }
    if (d->n_cols) { /* the verdict is the last column's: the only run, or the candidate */
        int c = d->n_cols - 1;
        for (int i = 0; i < sla->n_lines; i++) {
            enum k25_verdict v = d->sla_res[i][c].verdict;
            oc->n_pass += v == K25_VERDICT_PASS;
            oc->n_fail += v == K25_VERDICT_FAIL;
            oc->n_unsupported += v == K25_VERDICT_UNSUPPORTED;
        }
        for (int h = 0; h < sla->n_health; h++) {
            if (!sla->health[h].enabled)
                continue;
            enum k25_health_level l = d->health_res[h][c].level;
            oc->health_fail += l == K25_HEALTH_FAIL;
            oc->health_warn += l == K25_HEALTH_WARN;
            oc->health_not_measured += l == K25_HEALTH_NOT_MEASURED;
        }
    } else {
        oc->n_unsupported = sla->n_lines;
    }
    oc->overall = oc->n_fail ? K25_VERDICT_FAIL
                             : (oc->n_unsupported || sla->n_lines == 0 ? K25_VERDICT_UNSUPPORTED : K25_VERDICT_PASS);
}

/* report.md, report.html and verdict.json into the work folder. */
static int write_docs(const struct k25_report_doc *d, const char *work, struct k25_error *err)
{
    char path[PATH_MAX + 80];
    int rc;
    k25_report_sfmt(path, sizeof(path), "%s/report.md", work);
    if ((rc = write_doc(d, false, work, path, err)))
        return rc;
    k25_report_sfmt(path, sizeof(path), "%s/report.html", work);
    if ((rc = write_doc(d, true, work, path, err)))
        return rc;
    k25_report_sfmt(path, sizeof(path), "%s/verdict.json", work);
    return write_verdict_json(d, path, err);
}

/* The steps of the file's header, in order; a failure aborts the work folder. */
int k25_report_generate(const struct k25_report_opts *o, struct k25_report_outcome *outcome, struct k25_error *err)
{
    uint64_t t0 = k25_now_ns();
    char gnuplot[PATH_MAX], tmpl[PATH_MAX], plot_dir[PATH_MAX + 64], data_dir[PATH_MAX + 80];
    struct k25_report_dest dest = {.work = ""};
    struct k25_report_outcome oc;
    memset(&oc, 0, sizeof(oc));
    struct k25_sla *sla = malloc(sizeof(*sla));
    struct k25_plot_list *pl = calloc(1, sizeof(*pl));
    struct k25_report_doc *d = calloc(1, sizeof(*d));
    struct k25_report_input in;
    memset(&in, 0, sizeof(in));
    int rc = K25_OK;
    if (!sla || !pl || !d) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    if ((rc = k25_plot_find_gnuplot(gnuplot, sizeof(gnuplot), err)) ||
        (rc = k25_plot_find_templates(tmpl, sizeof(tmpl), err)) || (rc = k25_report_dest_open(&dest, o->out, err)))
        goto out;
    /* progress by stage: inputs, data, plots (gnuplot, one batch), documents */
    struct k25_progress prog;
    k25_progress_begin(&prog, k25_progress_resolve(o->progress, o->quiet), "k25 report", "stages", 4, 0);
    prog.period_ns = 0; /* a line per stage: the stages are the unit of work */
    k25_progress_update(&prog, 0, "loading %d input(s)", o->n_inputs);
    if (o->sla_path)
        rc = k25_sla_load(o->sla_path, sla, err);
    else
        k25_sla_init(sla);
    if (rc || (rc = k25_report_load(o->inputs, o->n_inputs, &in, err)))
        goto out;
    k25_report_sfmt(plot_dir, sizeof(plot_dir), "%s/plots", dest.work);
    k25_report_sfmt(data_dir, sizeof(data_dir), "%s/data", plot_dir);
    if (mkdir(plot_dir, 0755) != 0 || mkdir(data_dir, 0755) != 0) {
        rc = k25_error_set(err, K25_EIO, data_dir, 0, NULL, "cannot create the folder: %s", strerror(errno));
        goto out;
    }
    k25_progress_update(&prog, 1, "writing the plots' data");
    if ((rc = write_data(&in, plot_dir, pl, err)))
        goto out;
    k25_progress_update(&prog, 2, "rendering %d plots with gnuplot", pl->n);
    if ((rc = render_plots(o, gnuplot, tmpl, plot_dir, pl, err)))
        goto out;
    k25_progress_update(&prog, 3, "verdicts and documents");

    /* verdicts */
    d->opts = o;
    d->in = &in;
    d->sla = sla;
    d->plots = pl->plots;
    d->n_plots = pl->n;
    d->skipped = (const char(*)[512])pl->skipped;
    d->n_skipped = pl->n_skipped;
    d->outcome = &oc;
    k25_utc_now(d->generated_utc);
    set_title(d);
    set_columns(d);
    evaluate(d, &oc);
    oc.n_plots = pl->n;

    if ((rc = write_docs(d, dest.work, err)) || (rc = k25_report_dest_commit(&dest, err)))
        goto out;
    k25_progress_end(&prog, 4, "%d plots", pl->n);
    oc.seconds = (double)(k25_now_ns() - t0) / 1e9;
    if (outcome)
        *outcome = oc;
out:
    if (rc)
        k25_report_dest_abort(&dest);
    k25_report_input_free(&in);
    free(sla);
    if (pl)
        k25_plot_list_free(pl);
    free(pl);
    free(d);
    return rc;
}
