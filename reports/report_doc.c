/*
 * report_doc.c - what the report says, written once through a writer
 * backend (report_md.c, report_html.c):
 *
 *   verdict       the sign-off verdict against the SLA (and health summary)
 *   headline      the figures a reader wants first, per run / sweep / benchmark
 *   SLA           one row per SLA line: verdict, measured figure, margin
 *   health        the health checks: level, value, what to do; n/a where a check
 *                 does not apply to the run's mode; the unmeasured ones listed once
 *   best setting  (sweeps) the best point, its YAML, the infeasible points
 *   plots         grouped by section, each with what to read in it
 *   provenance    build, machine, dataset, config: what makes it reproducible
 *
 * Numbers the sample cannot support are written "n/a" with the reason;
 * metrics a run did not measure are "not measured", never filled in.
 */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void k25_report_sfmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/*
 * A growing string for text whose length depends on the input (a
 * paragraph listing every run's warnings, a YAML block of every axis): no
 * fixed buffer cuts it short.  On out of memory the text stops growing and
 * ends in "..." (never cut silently mid-word without a mark).
 */
struct sbuf {
    char *s;
    size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0)
        return;
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = (b->len + (size_t)need + 1) * 2;
        char *n = realloc(b->s, cap < 256 ? 256 : cap);
        if (!n) {
            if (b->s && b->cap >= 4 && b->len + 4 <= b->cap)
                memcpy(b->s + b->len, "...", 4);
            return;
        }
        b->s = n;
        b->cap = cap < 256 ? 256 : cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

static const char *sb_str(const struct sbuf *b)
{
    return b->s ? b->s : "";
}

void k25_report_fmt(double v, char *buf, size_t n)
{
    if (isnan(v) || isinf(v))
        snprintf(buf, n, "n/a");
    else if (v == floor(v) && fabs(v) < 1e9)
        snprintf(buf, n, "%.0f", v);
    else if (fabs(v) >= 100)
        snprintf(buf, n, "%.1f", v);
    else
        snprintf(buf, n, "%.4g", v);
}

static const json_t *sumobj(const struct k25_report_run *r)
{
    const json_t *s = json_object_get(r->summary, "summary");
    return s ? s : r->summary;
}

/* A string member, "" when absent. */
static const char *jstr_or(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static const char *js(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

/* A figure of a summary by dotted path, formatted; "n/a" for null. */
static void fig(const json_t *s, const char *path, double scale, const char *unit, char *buf, size_t n)
{
    char p[128];
    snprintf(p, sizeof(p), "%s", path);
    const json_t *v = s;
    char *save = NULL;
    for (char *t = strtok_r(p, ".", &save); t && v; t = strtok_r(NULL, ".", &save))
        v = json_object_get(v, t);
    if (!json_is_number(v)) {
        snprintf(buf, n, "n/a");
        return;
    }
    char b[64];
    k25_report_fmt(json_number_value(v) * scale, b, sizeof(b));
    snprintf(buf, n, "%s%s%s", b, *unit ? " " : "", unit);
}

/* Percentile figure, with the reason when unsupported: "n/a (n=8; P95 needs 20)". */
static void pfig(const json_t *s, const char *metric, const char *pk, int need, char *buf, size_t n)
{
    const json_t *d = json_object_get(s, metric);
    const json_t *v = json_object_get(d, pk);
    if (json_is_number(v)) {
        char b[64];
        k25_report_fmt(json_number_value(v), b, sizeof(b));
        snprintf(buf, n, "%s%s", b, strstr(metric, "_ms") ? " ms" : "");
    } else if (d) {
        snprintf(buf, n, "n/a (n=%lld, needs %d)", (long long)json_integer_value(json_object_get(d, "n")), need);
    } else {
        snprintf(buf, n, "not measured");
    }
}

/* ------------------------------------------------------------ headline */

/* One table, a column per run: the figures of `k25 bench` that matter for sign-off. */
static void headline_runs(struct k25_doc_out *o, const struct k25_report_run *const *runs, int n)
{
    const char *head[K25_REPORT_MAX_COLS + 1];
    head[0] = "figure";
    for (int i = 0; i < n; i++)
        head[i + 1] = runs[i]->label;
    o->table_begin(o, n + 1, head);
    static const struct {
        const char *label, *metric, *pk; /* pk NULL: a plain figure at metric */
        int need;
        double scale;
        const char *unit;
    } rows[] = {
        {"TTFT P50", "ttft_ms", "p50", 2, 1, ""},        {"TTFT P95", "ttft_ms", "p95", 20, 1, ""},
        {"TTFT P99", "ttft_ms", "p99", 100, 1, ""},      {"TPOT P50", "tpot_ms", "p50", 2, 1, ""},
        {"ITL P50", "itl_ms", "p50", 2, 1, ""},          {"ITL P99", "itl_ms", "p99", 100, 1, ""},
        {"E2E P50", "e2e_ms", "p50", 2, 1, ""},          {"E2E P99", "e2e_ms", "p99", 100, 1, ""},
        {"output tokens/s", "output_tok_per_s", NULL, 0, 1, "tok/s"},
        {"requests/s", "requests_per_s", NULL, 0, 1, "req/s"},
        {"goodput", "goodput_rps", NULL, 0, 1, "req/s"},
        {"engine busy P95", "busy_fraction", "p95", 20, 1, ""},
        {"peak tracked memory", "memory.peak_tracked_bytes", NULL, 0, 1.0 / 1048576.0, "MiB"},
        {"peak KV cache", "memory.peak_kv_bytes", NULL, 0, 1.0 / 1048576.0, "MiB"},
    };
    char cells[K25_REPORT_MAX_COLS + 1][160];
    const char *cp[K25_REPORT_MAX_COLS + 1];
    for (int i = 0; i <= n; i++)
        cp[i] = cells[i];
    /* requests */
    snprintf(cells[0], sizeof(cells[0]), "requests");
    for (int i = 0; i < n; i++) {
        const json_t *rq = json_object_get(sumobj(runs[i]), "requests");
        snprintf(cells[i + 1], sizeof(cells[0]), "%lld (%lld completed, %lld rejected), %d repetition(s)",
                 (long long)json_integer_value(json_object_get(rq, "total")),
                 (long long)json_integer_value(json_object_get(rq, "completed")),
                 (long long)json_integer_value(json_object_get(rq, "rejected")), runs[i]->t.run.n_reps);
    }
    o->table_row(o, n + 1, cp);
    snprintf(cells[0], sizeof(cells[0]), "workload");
    for (int i = 0; i < n; i++) {
        const json_t *w = runs[i]->workload, *c = runs[i]->config;
        char rate[64] = "";
        if (json_is_number(json_object_get(w, "rate_rps")))
            snprintf(rate, sizeof(rate), ", %.3g req/s", json_number_value(json_object_get(w, "rate_rps")));
        snprintf(cells[i + 1], sizeof(cells[0]), "%s loop, concurrency %lld%s; model %s", js(w, "mode"),
                 (long long)json_integer_value(json_object_get(w, "concurrency")), rate, js(c, "model"));
    }
    o->table_row(o, n + 1, cp);
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        snprintf(cells[0], sizeof(cells[0]), "%s%s", rows[r].label,
                 rows[r].pk && strstr(rows[r].metric, "_ms") ? " (ms)" : "");
        for (int i = 0; i < n; i++) {
            const json_t *s = sumobj(runs[i]);
            if (rows[r].pk)
                pfig(s, rows[r].metric, rows[r].pk, rows[r].need, cells[i + 1], sizeof(cells[0]));
            else
                fig(s, rows[r].metric, rows[r].scale, rows[r].unit, cells[i + 1], sizeof(cells[0]));
            char *ms = strstr(cells[i + 1], " ms"); /* the unit is in the row's name */
            if (ms && !ms[3])
                *ms = 0;
        }
        o->table_row(o, n + 1, cp);
    }
    o->table_end(o);
}

/* ------------------------------------------------------------- verdict */

static void verdict_section(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    const struct k25_report_outcome *oc = d->outcome;
    char line[512], v[64];
    o->heading(o, 2, "Sign-off verdict");
    if (d->in->kind == K25_REPORT_ATTN) {
        o->para(o, "An attention benchmark carries no SLA verdict: it measures kernels against the machine's "
                   "limits (see the tables and plots below).");
        return;
    }
    if (d->sla->n_lines == 0) {
        o->para(o, "No SLA lines were given (`--sla sla.yaml`), so there is no sign-off verdict; "
                   "reports/sla-example.yaml shows the format. The health checks below still apply.");
    } else {
        snprintf(v, sizeof(v), "%s", oc->overall == K25_VERDICT_PASS   ? "PASS"
                                     : oc->overall == K25_VERDICT_FAIL ? "FAIL"
                                                                       : "INCONCLUSIVE");
        const char *head[] = {"verdict", "SLA lines", "health checks", "judged on"};
        char sla[128], hl[160], on[256];
        snprintf(sla, sizeof(sla), "%d pass, %d fail, %d unsupported", oc->n_pass, oc->n_fail, oc->n_unsupported);
        snprintf(hl, sizeof(hl), "%d fail, %d warn, %d not measured", oc->health_fail, oc->health_warn,
                 oc->health_not_measured);
        snprintf(on, sizeof(on), "%s", d->col_label[d->n_cols - 1]);
        const char *row[] = {v, sla, hl, on};
        o->table_begin(o, 4, head);
        o->table_row(o, 4, row);
        o->table_end(o);
        snprintf(line, sizeof(line),
                 "%s: every SLA line must PASS. A percentile the sample cannot support is UNSUPPORTED and makes "
                 "the verdict INCONCLUSIVE, never PASS: measure more requests.%s",
                 v, d->n_cols > 1 ? " With several runs the verdict is the last run's (the candidate)." : "");
        o->para(o, line);
    }
}

static void sla_section(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    if (d->in->kind == K25_REPORT_ATTN || d->sla->n_lines == 0)
        return;
    char t[2400];
    o->heading(o, 2, "SLA");
    const char *on = "";
    if (d->in->kind == K25_REPORT_SWEEP)
        on = d->in->sweep->n_best_runs ? " Evaluated on the best point's requests (all its repetitions)."
             : d->in->sweep->n_ref_runs
                 ? " Evaluated on the reference point's requests (all its repetitions): no setting is significantly "
                   "better than the defaults, so the sign-off is on the settings you keep."
                 : "";
    snprintf(t, sizeof(t), "From `%s`.%s", d->sla->path, on);
    o->para(o, t);
    char cells[2 + K25_REPORT_MAX_COLS * 4][800];
    const char *cp[2 + K25_REPORT_MAX_COLS * 4];
    for (size_t i = 0; i < sizeof(cp) / sizeof(cp[0]); i++)
        cp[i] = cells[i];
    if (d->n_cols == 1) {
        const char *head[] = {"SLA line", "verdict", "measured", "margin", "sample"};
        o->table_begin(o, 5, head);
    } else {
        const char *head[1 + K25_REPORT_MAX_COLS];
        head[0] = "SLA line";
        for (int c = 0; c < d->n_cols; c++)
            head[c + 1] = d->col_label[c];
        o->table_begin(o, d->n_cols + 1, head);
    }
    for (int i = 0; i < d->sla->n_lines; i++) {
        const struct k25_sla_line *l = &d->sla->lines[i];
        const char *unit = strstr(l->metric, "_ms") ? " ms" : "";
        snprintf(cells[0], sizeof(cells[0]), "%s", l->text);
        for (int c = 0; c < d->n_cols; c++) {
            const struct k25_sla_result *r = &d->sla_res[i][c];
            char val[64], ci[128] = "", mg[64], mp[64];
            k25_report_fmt(r->value, val, sizeof(val));
            if (!isnan(r->ci_lo) || !isnan(r->ci_hi)) {
                char a[64], b[64];
                k25_report_fmt(r->ci_lo, a, sizeof(a));
                k25_report_fmt(r->ci_hi, b, sizeof(b));
                k25_report_sfmt(ci, sizeof(ci), " (95%% CI %s .. %s)", a, b);
            }
            k25_report_fmt(r->margin, mg, sizeof(mg));
            k25_report_fmt(r->margin_pct, mp, sizeof(mp));
            if (d->n_cols == 1) {
                snprintf(cells[1], sizeof(cells[1]), "%s", k25_verdict_name(r->verdict));
                if (r->verdict == K25_VERDICT_UNSUPPORTED) {
                    snprintf(cells[2], sizeof(cells[2]), "n/a");
                    snprintf(cells[3], sizeof(cells[3]), "-");
                } else {
                    snprintf(cells[2], sizeof(cells[2]), "%s%s%s", val, unit, ci);
                    if (isnan(r->margin))
                        snprintf(cells[3], sizeof(cells[3]), "-");
                    else if (isnan(r->margin_pct)) /* a limit of 0: no percentage of it */
                        snprintf(cells[3], sizeof(cells[3]), "%s%s%s", r->margin >= 0 ? "+" : "", mg, unit);
                    else
                        snprintf(cells[3], sizeof(cells[3]), "%s%s%s (%s%s%%)", r->margin >= 0 ? "+" : "", mg, unit,
                                 r->margin_pct >= 0 ? "+" : "", mp);
                }
                snprintf(cells[4], sizeof(cells[4]), "%s", r->note);
            } else if (r->verdict == K25_VERDICT_UNSUPPORTED) {
                snprintf(cells[c + 1], sizeof(cells[0]), "UNSUPPORTED (%s)", r->note);
            } else {
                snprintf(cells[c + 1], sizeof(cells[0]), "%s %s%s, margin %s%s%s", k25_verdict_name(r->verdict), val,
                         unit, r->margin >= 0 ? "+" : "", mg, unit);
            }
        }
        o->table_row(o, d->n_cols == 1 ? 5 : d->n_cols + 1, cp);
    }
    o->table_end(o);
    o->para(o, "Margin: the room left before the limit (negative: by how much it is missed), also as a percentage "
               "of the limit. Percentiles are nearest-rank over completed requests; the 95% interval is "
               "distribution-free (order statistics).");
}

/* Is check h "not measured" in every column? */
static bool health_unmeasured(const struct k25_report_doc *d, int h)
{
    for (int k = 0; k < d->n_cols; k++)
        if (d->health_res[h][k].level != K25_HEALTH_NOT_MEASURED)
            return false;
    return true;
}

/*
 * The health checks: one row per check the runs measured (level, value,
 * advice; "n/a (closed loop)" where a check does not apply to the run's
 * mode), then the checks no run measured, named once in a sentence.
 */
static void health_section(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    if (d->in->kind == K25_REPORT_ATTN)
        return;
    o->heading(o, 2, "Health checks");
    o->para(o, d->sla->path[0] ? "Defaults from field practice (docs/reports.md, \"Health checks\"), with the SLA "
                                 "file's `health:` overrides."
                               : "Defaults from field practice (docs/reports.md, \"Health checks\"); an SLA file's "
                                 "`health:` section overrides them.");
    if (d->n_cols == 0) {
        o->para(o, d->in->kind == K25_REPORT_SWEEP
                       ? "Not evaluated: no run trace (points/ID/rep-K.h5) was found for the best or the reference point."
                       : "Not evaluated: no run was given.");
        return;
    }
    const char *head[3 + K25_REPORT_MAX_COLS];
    int nh = 0;
    head[nh++] = "check";
    head[nh++] = "healthy";
    for (int c = 0; c < d->n_cols; c++)
        head[nh++] = d->col_label[c];
    char cells[3 + K25_REPORT_MAX_COLS][320];
    const char *cp[3 + K25_REPORT_MAX_COLS];
    for (int i = 0; i < 3 + K25_REPORT_MAX_COLS; i++)
        cp[i] = cells[i];
    bool table = false;
    for (int h = 0; h < d->sla->n_health; h++) {
        const struct k25_health_check *c = &d->sla->health[h];
        if (!c->enabled || health_unmeasured(d, h))
            continue;
        if (!table) {
            o->table_begin(o, nh, head);
            table = true;
        }
        snprintf(cells[0], sizeof(cells[0]), "%s", c->metric);
        k25_health_describe(c, cells[1], sizeof(cells[1]));
        for (int k = 0; k < d->n_cols; k++) {
            const struct k25_health_result *r = &d->health_res[h][k];
            char v[64];
            k25_report_fmt(r->value, v, sizeof(v));
            if (r->level == K25_HEALTH_NOT_MEASURED)
                snprintf(cells[2 + k], sizeof(cells[0]), "not measured");
            else if (r->level == K25_HEALTH_NA)
                snprintf(cells[2 + k], sizeof(cells[0]), "n/a %s", r->note);
            else
                snprintf(cells[2 + k], sizeof(cells[0]), "%s %s%s%s", k25_health_level_name(r->level), v,
                         *r->note ? ": " : "", r->note);
        }
        o->table_row(o, nh, cp);
    }
    if (table)
        o->table_end(o);
    char t[2400];
    size_t u = 0;
    int nm = 0;
    for (int h = 0; h < d->sla->n_health; h++) /* each with the reason the (last) run gives */
        if (d->sla->health[h].enabled && health_unmeasured(d, h) && u < sizeof(t))
            u += (size_t)snprintf(t + u, sizeof(t) - u, "%s`%s` (%s)", nm++ ? "; " : "", d->sla->health[h].metric,
                                  d->health_res[h][d->n_cols - 1].note);
    if (nm) {
        char p[2600];
        snprintf(p, sizeof(p), "Not measured by %s, so not checked (never estimated): %s.",
                 d->n_cols > 1 ? "these runs" : "this run", t);
        o->para(o, p);
    }
    int off = 0;
    for (int h = 0; h < d->sla->n_health; h++)
        off += !d->sla->health[h].enabled;
    if (off) {
        char t[512];
        size_t u = (size_t)snprintf(t, sizeof(t), "Turned off in the SLA file:");
        for (int h = 0; h < d->sla->n_health && u < sizeof(t); h++)
            if (!d->sla->health[h].enabled)
                u += (size_t)snprintf(t + u, sizeof(t) - u, " `%s`", d->sla->health[h].metric);
        o->para(o, t);
    }
}

/* -------------------------------------------------- measurement conditions */

/* Appends the warnings one run's record carries (load guard, calibration spread, open loop). */
static int run_conditions(const struct k25_report_run *r, struct sbuf *b)
{
    int k = 0;
    const json_t *lg = json_object_get(json_object_get(r->provenance, "machine"), "load_guard");
    if (json_is_true(json_object_get(lg, "busy"))) {
        sb_printf(b, "%s: the machine was already busy before the run (%s). ", r->label, js(lg, "reason"));
        k++;
    }
    const json_t *sp = json_object_get(json_object_get(r->provenance, "calibration"), "spread");
    if (json_is_number(sp) && json_number_value(sp) > K25_CALIB_MAX_SPREAD) {
        sb_printf(b, "%s: the calibration spread by %.0f%% (> %.0f%%): the machine's speed changed during the run. ",
                  r->label, 100 * json_number_value(sp), 100 * K25_CALIB_MAX_SPREAD);
        k++;
    }
    const json_t *ol = json_object_get(r->summary, "open_loop");
    if (json_is_true(json_object_get(ol, "fell_behind"))) {
        sb_printf(b,
                  "%s: the open loop fell behind (offered %.3g req/s, served %.3g req/s): it measured the queue, "
                  "not the engine. ",
                  r->label, json_number_value(json_object_get(ol, "offered_rps")),
                  json_number_value(json_object_get(ol, "achieved_rps")));
        k++;
    }
    return k;
}

/*
 * How trustworthy the timings are: the load guard sampled before each run
 * (and before a sweep), the calibration's spread, and whether an open loop
 * kept up.  Said plainly whether or not anything was wrong.
 */
static void conditions_section(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    const struct k25_report_input *in = d->in;
    if (in->kind == K25_REPORT_ATTN)
        return;
    struct sbuf t = {0};
    int k = 0, n_runs = 0;
    if (in->kind == K25_REPORT_SWEEP) {
        const json_t *lg = json_object_get(in->sweep->summary, "load_guard");
        if (json_is_true(json_object_get(lg, "busy"))) {
            sb_printf(&t, "The sweep: the machine was already busy before its first point (%s). ", js(lg, "reason"));
            k++;
        }
        for (int i = 0; i < in->sweep->n_best_runs; i++, n_runs++)
            k += run_conditions(&in->sweep->best_runs[i], &t);
        for (int i = 0; i < in->sweep->n_ref_runs; i++, n_runs++)
            k += run_conditions(&in->sweep->ref_runs[i], &t);
    } else {
        for (int i = 0; i < in->n_runs; i++, n_runs++)
            k += run_conditions(&in->runs[i], &t);
    }
    o->heading(o, 2, "Measurement conditions");
    struct sbuf w = {0};
    if (k == 0)
        sb_printf(&w,
                  "OK: no warning on the %d run%s checked%s: the machine was not busy before the runs (load guard: "
                  "load from other work at most half the cores, CPU steal at most 10%%), calibrations were steady "
                  "(spread at most %.0f%%), and open-loop runs kept up with their offered rate.",
                  n_runs, n_runs == 1 ? "" : "s", in->kind == K25_REPORT_SWEEP ? " (the best and reference points)" : "",
                  100 * K25_CALIB_MAX_SPREAD);
    else
        sb_printf(&w, "WARN: %d warning%s: timings may include interference, so read differences smaller than their "
                      "intervals as noise. %s", k, k == 1 ? "" : "s", sb_str(&t));
    size_t l = w.len;
    while (l && w.s[l - 1] == ' ') /* the last warning's trailing space */
        w.s[--l] = 0;
    o->para(o, sb_str(&w));
    free(t.s);
    free(w.s);
}

/* --------------------------------------------------------------- sweep */

static double pmetric(const struct k25_report_point *p, const char *m)
{
    const json_t *v = json_object_get(p->metrics, m);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void sweep_sections(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    const struct k25_report_sweep *s = d->in->sweep;
    char t[2048], ol[128], a[64], b[64];
    k25_report_metric_label(s->objective, ol, sizeof(ol));
    o->heading(o, 2, "Sweep");
    int feas = 0;
    for (int i = 0; i < s->n_pts; i++)
        feas += s->pts[i].feasible;
    const json_t *subj = json_object_get(s->summary, "subject_to");
    size_t u = (size_t)snprintf(t, sizeof(t), "Sweep `%s` (`%s`): %d points (%d feasible), %lld repetition(s) each, "
                                              "%s `%s`",
                                s->name, js(s->summary, "spec"), s->n_pts, feas,
                                (long long)json_integer_value(json_object_get(s->summary, "repeats")),
                                s->maximize ? "maximize" : "minimize", s->objective);
    size_t k;
    const json_t *c;
    json_array_foreach(subj, k, c) u += (size_t)snprintf(t + u, sizeof(t) - u, "%s `%s`", k ? "," : " subject to",
                                                          json_string_value(c) ? json_string_value(c) : "?");
    if (u < sizeof(t))
        snprintf(t + u, sizeof(t) - u, ".");
    o->para(o, t);
    const json_t *warns = json_object_get(s->summary, "warnings");
    json_array_foreach(warns, k, c) {
        char w[1800];
        snprintf(w, sizeof(w), "WARN: %s: the sweep compared settings that stored the same KV, so it says nothing "
                               "about this knob on these prompts (longer prompts, or a smaller ratio, let it act).",
                 json_string_value(c) ? json_string_value(c) : "?");
        o->para(o, w);
    }

    o->heading(o, 2, "Best setting");
    const json_t *sig = json_object_get(s->summary, "significance");
    const char *verdict = js(sig, "verdict"), *message = js(sig, "message");
    if (s->best < 0 && json_is_string(json_object_get(sig, "verdict")) && strcmp(verdict, "no_feasible_point") != 0) {
        /* k25 sweep names a best point only when it beats the reference significantly (docs/sweeps.md) */
        char lead[700] = "";
        if (s->leader >= 0 && s->leader == s->reference)
            snprintf(lead, sizeof(lead), " The reference itself has the best mean objective; the plots anchor on it.");
        else if (s->leader >= 0)
            snprintf(lead, sizeof(lead), " The plots anchor on the point with the best mean objective (%s), "
                                         "which is not significantly better.", s->pts[s->leader].label);
        snprintf(t, sizeof(t), "**No setting to recommend**: %s. Keep the reference settings: the SLA and the health "
                               "checks below are judged on the reference point.%s", message, lead);
        o->para(o, t);
    } else if (s->best < 0) {
        o->para(o, "**No feasible point**: every point breaks a constraint or lacks a measurement (see the table "
                   "of infeasible points). The plots anchor on the point with the best objective instead.");
    } else {
        const struct k25_report_point *bp = &s->pts[s->best];
        k25_report_fmt(pmetric(bp, s->objective), a, sizeof(a));
        snprintf(t, sizeof(t), "**%s**: %s = %s.", bp->label, ol, a);
        if (s->reference >= 0 && s->reference != s->best) {
            k25_report_fmt(pmetric(&s->pts[s->reference], s->objective), b, sizeof(b));
            const json_t *imp = json_object_get(s->summary, "improvement_over_reference");
            size_t l = strlen(t);
            /* the reference's label is "defaults" unless a grid point stands for them */
            char rl[600] = "";
            if (strcmp(s->pts[s->reference].label, "defaults") != 0)
                snprintf(rl, sizeof(rl), " (%s)", s->pts[s->reference].label);
            if (json_is_number(imp))
                snprintf(t + l, sizeof(t) - l, " The defaults%s give %s: the best point is %.1f%% better.", rl, b,
                         json_number_value(imp) * 100);
            else
                snprintf(t + l, sizeof(t) - l, " The defaults%s give %s.", rl, b);
        } else if (s->reference == s->best) {
            size_t l = strlen(t);
            snprintf(t + l, sizeof(t) - l, " The defaults are the best point.");
        }
        o->para(o, t);
        const char *head[] = {"setting", "best", "default"};
        o->table_begin(o, 3, head);
        struct sbuf yaml = {0};
        sb_printf(&yaml, "# k25.yaml: the best point of sweep %s\n", s->name);
        for (int ax = 0; ax < s->n_axes; ax++) {
            const char *row[] = {s->axis[ax], bp->value[ax], s->reference >= 0 ? s->pts[s->reference].value[ax] : "-"};
            o->table_row(o, 3, row);
            sb_printf(&yaml, "%s: %s\n", s->axis[ax], bp->value[ax]);
        }
        o->table_end(o);
        o->para(o, "To use it, put these lines in the engine config (`--config k25.yaml`):");
        o->code(o, sb_str(&yaml));
        free(yaml.s);
    }
    o->heading(o, 3, "All points");
    const char *head[] = {"point", "objective", "peak memory (MiB)", "fidelity KL", "feasible", "Pareto", "notes"};
    o->table_begin(o, 7, head);
    for (int i = 0; i < s->n_pts && i < 200; i++) {
        const struct k25_report_point *p = &s->pts[i];
        char ob[64], mem[64], kl[64], lab[600];
        k25_report_fmt(pmetric(p, s->objective), ob, sizeof(ob));
        k25_report_fmt(pmetric(p, "peak_memory_mb"), mem, sizeof(mem));
        k25_report_fmt(pmetric(p, "fidelity_kl_mean"), kl, sizeof(kl));
        /* the reference's label is "defaults" already: mark it once */
        snprintf(lab, sizeof(lab), "%s%s%s", p->label,
                 p->reference ? (strcmp(p->label, "defaults") != 0 ? " (the reference: defaults)" : " (the reference)") : "",
                 i == s->best ? " (best)" : i == s->leader ? " (best mean)" : "");
        char notes[1200];
        const char *kw = jstr_or(json_array_get(json_object_get(s->summary, "all_points"), (size_t)i), "knob_warning");
        snprintf(notes, sizeof(notes), "%s%s%s%s", p->violations, *p->violations && *kw ? "; " : "",
                 *kw ? "WARN: " : "", kw);
        const char *row[] = {lab, ob, mem, s->has_fidelity ? kl : "not measured", p->feasible ? "yes" : "no",
                             p->pareto ? "yes" : "", notes};
        o->table_row(o, 7, row);
    }
    o->table_end(o);
}

/* ----------------------------------------------------------- attention */

static void attn_sections(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    const struct k25_report_attn *a = d->in->attn;
    char b[6][96];
    o->heading(o, 2, "Machine");
    const char *mh[] = {"threads", "FMA peak (GFLOP/s)", "STREAM triad (GB/s)", "last-level cache"};
    o->table_begin(o, 4, mh);
    snprintf(b[0], sizeof(b[0]), "%d", a->machine.threads);
    k25_report_fmt(a->machine.fma_peak_gflops, b[1], sizeof(b[1]));
    k25_report_fmt(a->machine.triad_gbps, b[2], sizeof(b[2]));
    if (a->machine.llc_bytes > 0)
        snprintf(b[3], sizeof(b[3]), "%.1f MiB", (double)a->machine.llc_bytes / 1048576.0);
    else
        snprintf(b[3], sizeof(b[3]), "unknown");
    const char *mr[] = {b[0], b[1], b[2], b[3]};
    o->table_row(o, 4, mr);
    o->table_end(o);
    o->heading(o, 2, "Results");
    const char *head[] = {"impl", "mode", "dtype", "context", "chunk", "median (ms)", "spread", "GFLOP/s",
                          "roofline", "peak scratch", "status"};
    o->table_begin(o, 11, head);
    for (size_t i = 0; i < a->n_rows; i++) {
        const struct k25_report_attn_row *r = &a->rows[i];
        char c[11][300];
        snprintf(c[0], sizeof(c[0]), "%s", r->impl);
        snprintf(c[1], sizeof(c[1]), "%s", r->mode);
        snprintf(c[2], sizeof(c[2]), "%s", r->dtype);
        snprintf(c[3], sizeof(c[3]), "%lld", (long long)r->context);
        snprintf(c[4], sizeof(c[4]), "%s", r->chunk ? "" : "one pass");
        if (r->chunk)
            snprintf(c[4], sizeof(c[4]), "%lld", (long long)r->chunk);
        bool ok = !strcmp(r->status, "ok");
        if (ok) {
            k25_report_fmt(r->median_ms, c[5], sizeof(c[5]));
            snprintf(c[6], sizeof(c[6]), "%.1f%%", r->spread_pct);
            k25_report_fmt(r->gflops, c[7], sizeof(c[7]));
            snprintf(c[8], sizeof(c[8]), "%.1f%% of %s", 100 * (!strcmp(r->mode, "decode") ? r->frac_bandwidth : r->frac_fma_peak),
                     !strcmp(r->mode, "decode") ? "bandwidth" : "FMA peak");
            snprintf(c[9], sizeof(c[9]), "%.2f MiB", (double)r->scratch_peak_bytes / 1048576.0);
            snprintf(c[10], sizeof(c[10]), "ok");
        } else {
            for (int k = 5; k < 10; k++)
                snprintf(c[k], sizeof(c[k]), "-");
            snprintf(c[10], sizeof(c[10]), "%s: %s", r->status, r->reason);
        }
        const char *row[11];
        for (int k = 0; k < 11; k++)
            row[k] = c[k];
        o->table_row(o, 11, row);
    }
    o->table_end(o);
    o->para(o, "Spread: (max - min) / median over the timed repetitions; above ~10% the figure is noisy "
               "(repeat with --repeat or on a quieter machine). How to read these figures: docs/attention.md.");
}

/* ---------------------------------------------------------- provenance */

static void provenance_runs(struct k25_doc_out *o, const struct k25_report_run *const *runs, int n)
{
    const char *head[K25_REPORT_MAX_COLS + 1];
    head[0] = "item";
    for (int i = 0; i < n; i++)
        head[i + 1] = runs[i]->label;
    o->table_begin(o, n + 1, head);
    static const char *const items[] = {"file", "k25bench", "compiler", "flags / BLAS", "CPU", "cores / threads",
                                        "GPUs", "kernel", "host", "dataset", "dataset SHA-256", "filter",
                                        "model / seed", "started (UTC)", "finished (UTC)", "command line"};
    enum { NI = sizeof(items) / sizeof(items[0]) };
    char cells[K25_REPORT_MAX_COLS + 1][2048];
    const char *cp[K25_REPORT_MAX_COLS + 1];
    for (int i = 0; i <= n; i++)
        cp[i] = cells[i];
    for (int it = 0; it < NI; it++) {
        snprintf(cells[0], sizeof(cells[0]), "%s", items[it]);
        for (int i = 0; i < n; i++) {
            const json_t *p = runs[i]->provenance, *b = json_object_get(p, "build"), *m = json_object_get(p, "machine"),
                         *ds = json_object_get(p, "dataset"), *c = json_object_get(p, "config");
            char *x = cells[i + 1];
            size_t xn = sizeof(cells[0]);
            switch (it) {
            case 0: k25_report_sfmt(x, xn, "%s", runs[i]->path); break;
            case 1:
                snprintf(x, xn, "%s (git %s%s)", js(b, "k25_version"), js(b, "git"),
                         json_is_true(json_object_get(b, "git_dirty")) ? ", dirty tree" : "");
                break;
            case 2: snprintf(x, xn, "%s", js(b, "compiler")); break;
            case 3: snprintf(x, xn, "%s / %s", js(b, "cflags"), js(b, "blas_core")); break;
            case 4: snprintf(x, xn, "%s", js(m, "cpu_model")); break;
            case 5:
                snprintf(x, xn, "%lld cores online, %lld threads used",
                         (long long)json_integer_value(json_object_get(m, "cores_online")),
                         (long long)json_integer_value(json_object_get(m, "threads_used")));
                break;
            case 6: {
                const json_t *g = json_object_get(m, "gpus");
                size_t ng = json_array_size(g);
                if (!ng) {
                    snprintf(x, xn, "none");
                    break;
                }
                size_t u = 0;
                size_t k;
                const json_t *e;
                json_array_foreach(g, k, e) {
                    char *txt = json_dumps(e, JSON_ENCODE_ANY | JSON_COMPACT);
                    u += (size_t)snprintf(x + u, u < xn ? xn - u : 0, "%s%s", k ? "; " : "", txt ? txt : "?");
                    free(txt);
                    if (u >= xn)
                        break;
                }
                if (u < xn)
                    snprintf(x + u, xn - u, " (driver %s)", js(m, "gpu_driver"));
                break;
            }
            case 7: {
                const json_t *k = json_object_get(m, "kernel");
                snprintf(x, xn, "%s %s %s", js(k, "sysname"), js(k, "release"), js(k, "machine"));
                break;
            }
            case 8: snprintf(x, xn, "%s", js(m, "hostname")); break;
            case 9: snprintf(x, xn, "%s", js(ds, "path")); break;
            case 10: snprintf(x, xn, "%s", js(ds, "sha256")); break;
            case 11: snprintf(x, xn, "%s", json_is_string(json_object_get(ds, "filter")) ? js(ds, "filter") : "none"); break;
            case 12:
                snprintf(x, xn, "%s / %lld", js(c, "model"), (long long)json_integer_value(json_object_get(p, "seed")));
                break;
            case 13: snprintf(x, xn, "%s", js(p, "start_time_utc")); break;
            case 14: snprintf(x, xn, "%s", js(p, "end_time_utc")); break;
            case 15: snprintf(x, xn, "k25 %s", js(p, "command_line")); break;
            }
        }
        o->table_row(o, n + 1, cp);
    }
    o->table_end(o);
    /* the effective config of each run */
    for (int i = 0; i < n; i++) {
        char *txt = runs[i]->config ? json_dumps(runs[i]->config, JSON_INDENT(0) | JSON_COMPACT) : NULL;
        char t[256];
        snprintf(t, sizeof(t), "Effective engine config of %s:", runs[i]->label);
        o->para(o, t);
        o->code(o, txt ? txt : "(not recorded)");
        free(txt);
        if (i > 0 && runs[i]->config && runs[0]->config && json_equal(runs[i]->config, runs[0]->config))
            o->para(o, "(identical to the first run's)");
    }
}

static void provenance_section(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    o->heading(o, 2, "Provenance");
    const struct k25_report_input *in = d->in;
    if (in->kind == K25_REPORT_ATTN) {
        const char *head[] = {"item", "value"};
        o->table_begin(o, 2, head);
        const char *row0[] = {"file", in->attn->path};
        o->table_row(o, 2, row0);
        const char *key;
        const json_t *v;
        json_object_foreach(in->attn->meta, key, v) {
            char b[1024];
            if (json_is_string(v))
                snprintf(b, sizeof(b), "%s", json_string_value(v));
            else
                snprintf(b, sizeof(b), "%lld", (long long)json_integer_value(v));
            const char *row[] = {key, b};
            o->table_row(o, 2, row);
        }
        o->table_end(o);
        return;
    }
    const struct k25_report_run *runs[K25_REPORT_MAX_COLS];
    int n = 0;
    if (in->kind == K25_REPORT_SWEEP) {
        char t[2400];
        const struct k25_report_sweep *sw = in->sweep;
        const char *which = sw->n_best_runs  ? "the best point's first repetition"
                            : sw->n_ref_runs ? "the reference point's first repetition (the point judged)"
                            : sw->any_run    ? "the first trace found in the sweep folder"
                                             : NULL;
        k25_report_sfmt(t, sizeof(t), "Sweep folder `%s`, dataset SHA-256 `%s`.%s%s%s", sw->dir,
                        js(sw->summary, "dataset_sha256"), which ? " Build and machine from " : "",
                        which ? which : "", which ? " (every point ran on the same build and machine):" : "");
        o->para(o, t);
        if (sw->n_best_runs)
            runs[n++] = &sw->best_runs[0];
        else if (sw->n_ref_runs)
            runs[n++] = &sw->ref_runs[0];
        else if (sw->any_run)
            runs[n++] = sw->any_run;
    } else {
        for (int i = 0; i < in->n_runs && n < K25_REPORT_MAX_COLS; i++)
            runs[n++] = &in->runs[i];
    }
    if (n)
        provenance_runs(o, runs, n);
    else
        o->para(o, in->kind == K25_REPORT_SWEEP
                       ? "No run trace (points/ID/rep-K.h5) was found in the sweep folder: the build and machine "
                         "are not known."
                       : "No run was given.");
}

/* --------------------------------------------------------------- plots */

static void plots_section(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    static const struct {
        const char *section, *heading;
    } order[] = {{"sweep", "Sweep plots"}, {"comparison", "Comparison"}, {"run", "Run plots"},
                 {"attention", "Attention benchmark plots"}};
    for (size_t s = 0; s < sizeof(order) / sizeof(order[0]); s++) {
        bool any = false;
        for (int i = 0; i < d->n_plots; i++) {
            if (strcmp(d->plots[i].section, order[s].section))
                continue;
            if (!any) {
                o->heading(o, 2, order[s].heading);
                any = true;
            }
            o->image(o, &d->plots[i]);
        }
        if (!strcmp(order[s].section, "sweep") && d->n_skipped) { /* a missing plot is said, not left out silently */
            if (!any)
                o->heading(o, 2, order[s].heading);
            for (int k = 0; k < d->n_skipped; k++) {
                char t[600];
                snprintf(t, sizeof(t), "Not drawn: %s.", d->skipped[k]);
                o->para(o, t);
            }
        }
    }
}

void k25_report_doc_write(const struct k25_report_doc *d, struct k25_doc_out *o)
{
    char t[2048];
    o->begin(o, d->title);
    size_t u = (size_t)snprintf(t, sizeof(t), "Generated %s by k25 %s (`k25 report`) from %s `", d->generated_utc,
                                K25_VERSION, k25_report_kind_name(d->in->kind));
    for (int i = 0; i < d->opts->n_inputs && u < sizeof(t); i++)
        u += (size_t)snprintf(t + u, sizeof(t) - u, "%s%s", i ? "`, `" : "", d->opts->inputs[i]);
    if (u < sizeof(t))
        u += (size_t)snprintf(t + u, sizeof(t) - u, "`.");
    /* the box this signs off, up front (issue 32: nothing identified the hardware) */
    const struct k25_report_input *in0 = d->in;
    const struct k25_report_run *pr = in0->kind == K25_REPORT_RUN || in0->kind == K25_REPORT_COMPARE ? &in0->runs[0]
                                      : in0->kind != K25_REPORT_SWEEP ? NULL
                                      : in0->sweep->n_best_runs      ? &in0->sweep->best_runs[0]
                                      : in0->sweep->n_ref_runs       ? &in0->sweep->ref_runs[0]
                                                                     : in0->sweep->any_run;
    const json_t *m = pr ? json_object_get(pr->provenance, "machine") : NULL;
    if (m && u < sizeof(t))
    {
        long long cores = (long long)json_integer_value(json_object_get(m, "cores_online"));
        long long thr = (long long)json_integer_value(json_object_get(m, "threads_used"));
        snprintf(t + u, sizeof(t) - u, " Measured on %s (%s, %lld core%s online, %lld thread%s used).",
                 js(m, "hostname"), js(m, "cpu_model"), cores, cores == 1 ? "" : "s", thr, thr == 1 ? "" : "s");
    }
    else if (in0->kind == K25_REPORT_ATTN && u < sizeof(t))
        snprintf(t + u, sizeof(t) - u, " Measured on %s.", js(in0->attn->meta, "cpu_model"));
    o->para(o, t);
    verdict_section(d, o);
    conditions_section(d, o);

    const struct k25_report_input *in = d->in;
    switch (in->kind) {
    case K25_REPORT_RUN:
    case K25_REPORT_COMPARE: {
        o->heading(o, 2, "Headline");
        const struct k25_report_run *runs[K25_REPORT_MAX_COLS];
        int n = 0;
        for (int i = 0; i < in->n_runs && n < K25_REPORT_MAX_COLS; i++)
            runs[n++] = &in->runs[i];
        headline_runs(o, runs, n);
        if (in->n_runs > K25_REPORT_MAX_COLS)
            o->para(o, "(only the first 8 runs are tabulated)");
        break;
    }
    case K25_REPORT_SWEEP: {
        sweep_sections(d, o);
        const struct k25_report_run *runs[2];
        int n = 0;
        if (in->sweep->n_best_runs)
            runs[n++] = &in->sweep->best_runs[0];
        if (in->sweep->n_ref_runs)
            runs[n++] = &in->sweep->ref_runs[0];
        if (n) {
            o->heading(o, 3, n == 2                      ? "Best point against the defaults (first repetition)"
                             : in->sweep->n_best_runs ? "Best point (first repetition)"
                                                      : "Reference point (first repetition)");
            headline_runs(o, runs, n);
        }
        break;
    }
    case K25_REPORT_ATTN: attn_sections(d, o); break;
    }
    sla_section(d, o);
    health_section(d, o);
    plots_section(d, o);
    provenance_section(d, o);
    o->end(o);
}
