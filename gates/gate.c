/*
 * gate.c - `k25 gate` as library calls: compare a candidate set of bench
 * runs with a baseline under a policy, print the table and the JSON, and
 * run interleaved A/B measurements.
 *
 * Runs pair by key (sweep point and repetition, A/B round); requests pair
 * inside a run pair by (repetition, position in the sequence) when their
 * ids agree, which is the case for the same config, seed and gold set.
 * Each metric is compared as docs/gates.md describes:
 *   statistical  log(candidate / baseline) of every request pair (or run
 *                pair for per-run figures), less the log of the two runs'
 *                calibration ratio when normalized; the median, with a
 *                hierarchical bootstrap interval; verdict from the interval
 *                against the tolerance
 *   threshold    the worst per-run change against the tolerance
 *   exact        every run identical; generated tokens by the token-identity
 *                rule (compare_tokens)
 */
#include "gate.h"
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Follows a dot-separated path inside the bench summary; NULL when missing. */
static const json_t *summary_at(const struct k25_gate_run *r, const char *path)
{
    return k25_json_path(json_object_get(r->doc, "summary"), path);
}

static double summary_num(const struct k25_gate_run *r, const char *path)
{
    const json_t *v = summary_at(r, path);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Per-repetition headline figure standing in for a request column when a run has no trace. */
static const char *fallback_of(const char *col)
{
    if (!strcmp(col, "ttft_ms"))
        return "ttft_p50_ms";
    if (!strcmp(col, "tpot_ms"))
        return "tpot_p50_ms";
    if (!strcmp(col, "e2e_ms"))
        return "e2e_p50_ms";
    if (!strcmp(col, "output_tok_s"))
        return "output_tok_per_s";
    return NULL;
}

static double rep_headline(const struct k25_gate_run *r, int rep, const char *fig)
{
    const json_t *a = summary_at(r, "repetitions.per_repetition");
    const json_t *v = json_object_get(json_array_get(a, (size_t)rep), fig);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int req_col(const char *name)
{
    for (int i = 0; i < K25_GATE_NREQ; i++)
        if (!strcmp(name, k25_gate_req_names[i]))
            return i;
    return -1;
}

/* Requests of b and c pair when they are the same requests in the same order. */
static bool requests_pair(const struct k25_gate_run *b, const struct k25_gate_run *c)
{
    if (!b->has_trace || !c->has_trace || b->n_req != c->n_req || b->n_req == 0)
        return false;
    for (int i = 0; i < b->n_req; i++)
        if (b->req[i].rep != c->req[i].rep || b->req[i].seq != c->req[i].seq || strcmp(b->req[i].id, c->req[i].id))
            return false;
    return true;
}

struct pairing {
    int n;
    int (*idx)[2]; /* [n] {baseline run, candidate run} */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A growable vector of doubles. */
struct vec {
    double *v;
    int n, cap;
};

static void vec_push(struct vec *a, double x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->v = realloc(a->v, sizeof(double) * (size_t)a->cap);
        K25_ASSERT(a->v);
    }
    a->v[a->n++] = x;
}

static void vec_free(struct vec *a)
{
    free(a->v);
    memset(a, 0, sizeof(*a));
}

/*
 * The statistical comparison.  Runs that measured the same benchmark (same
 * identity: a sweep point's repetitions, the rounds of an A/B measurement)
 * are replicates of one group.  Inside a group every "cell" - a request
 * position when all runs sent the same requests, else the whole run - has
 * one value per run on each side.  Interference on a shared machine only
 * ever adds time, so each side's cell is summarized by its best replicate
 * (the fastest time, the highest rate): the floor that the engine reaches
 * whenever the neighbours let it.  The cell's log-ratio is
 * log(best candidate / best baseline), less the log-ratio of the two sides'
 * calibration floors when normalized.  The estimate is the median over all
 * cells; the interval is a bootstrap that resamples groups, then each
 * side's runs (replicates) and the cells inside each group.
 */
/* Value of run r for a cell: a request's column, or a per-run figure. */
static double cell_value(const struct k25_gate_run *r, const struct k25_gate_metric *m, int col, int cell, int mode)
{
    if (mode == 0) { /* request cell */
        const struct k25_gate_req *q = &r->req[cell];
        double v = q->v[col];
        return q->completed && v > 0 && isfinite(v) ? v : NAN;
    }
    if (mode == 1) { /* the run's median of the column */
        double *t = malloc(sizeof(double) * (size_t)(r->n_req + 1));
        int n = 0;
        for (int i = 0; t && i < r->n_req; i++)
            if (r->req[i].completed && r->req[i].v[col] > 0 && isfinite(r->req[i].v[col]))
                t[n++] = r->req[i].v[col];
        double v = t ? median_of(t, n) : NAN;
        free(t);
        return v;
    }
    /* mode 2: per-repetition stand-in for a request column; mode 3: summary path */
    double v = mode == 2 ? rep_headline(r, cell, fallback_of(m->path)) : summary_num(r, m->path);
    return v > 0 && isfinite(v) ? v : NAN;
}

/* Groups the pairs by their baseline run's identity: gid[p] for pair p; returns the number of groups. */
static int group_pairs(const struct k25_gate_set *B, const struct pairing *pr, int *gid)
{
    int n_groups = 0;
    for (int p = 0; p < pr->n; p++) {
        gid[p] = -1;
        for (int q = 0; q < p && gid[p] < 0; q++)
            if (!strcmp(B->runs[pr->idx[q][0]].identity, B->runs[pr->idx[p][0]].identity))
                gid[p] = gid[q];
        if (gid[p] < 0)
            gid[p] = n_groups++;
    }
    return n_groups;
}

/* The same estimate without the calibration division (what the baseline and candidate columns
 * show) into row->raw_ratio; row->norm_factor from the mean log factor. */
static void unnormalized_ratio(struct k25_gate_cells *g, int n_groups, const struct k25_gate_metric *m,
                               const struct k25_gate_policy *pol, struct k25_gate_row *row, double mean_log_factor)
{
    double raw, rlo, rhi, *keep = malloc(sizeof(double) * (size_t)(n_groups > 0 ? n_groups : 1));
    K25_ASSERT(keep);
    for (int k = 0; k < n_groups; k++) {
        keep[k] = g[k].norm;
        g[k].norm = 0;
    }
    k25_gate_best_ratio(g, n_groups, m->lower_better, 0, pol->confidence, pol->seed, &raw, &rlo, &rhi);
    for (int k = 0; k < n_groups; k++)
        g[k].norm = keep[k];
    free(keep);
    row->raw_ratio = exp(raw);
    row->norm_factor = exp(mean_log_factor);
}

/* The verdict of row's ratio and interval against its tolerance (no interval: the ratio alone). */
static enum k25_gate_verdict verdict_of(const struct k25_gate_row *row, bool has_interval, bool lower_better)
{
    /* "worse" ratio: > 1 is a regression whichever way the metric is better */
    double w = lower_better ? row->ratio : 1 / row->ratio;
    double wlo = lower_better ? row->lo : 1 / row->hi, whi = lower_better ? row->hi : 1 / row->lo;
    double up = 1 + row->tol, down = 1 / (1 + row->tol);
    if (!has_interval)
        return w <= up && w >= down ? K25_V_SAME : K25_V_UNSURE;
    if (w > up && wlo > 1)
        return K25_V_WORSE; /* worse beyond the tolerance, and surely worse */
    if (w < down && whi < 1)
        return K25_V_BETTER;
    if (wlo >= down && whi <= up)
        return K25_V_SAME; /* the whole interval inside the tolerance */
    return K25_V_UNSURE;
}

/* Says what the calibration division did, so the change agrees with the raw columns beside it. */
static void note_normalized(struct k25_gate_row *row)
{
    size_t l = strlen(row->note);
    snprintf(row->note + l, sizeof(row->note) - l,
             "%schange normalized by calibration: candidate/baseline %.2fx, raw change %+.1f%%", l ? "; " : "",
             row->norm_factor, 100 * (row->raw_ratio - 1));
}

/* Says that the calibration could not be trusted, so the raw change was judged (the change column
 * shows it); on another machine a raw SLOWER/FASTER cannot tell the engine from the machine. */
static void note_untrusted(struct k25_gate_row *row, double spread, bool other_machine)
{
    size_t l = strlen(row->note);
    snprintf(row->note + l, sizeof(row->note) - l,
             "%scalibration spread %.0f%% > %.0f%%: not normalized (machine not steady enough to normalize by), "
             "raw change judged (calibration factor %.2fx not applied)",
             l ? "; " : "", 100 * spread, 100 * K25_CALIB_MAX_SPREAD, row->norm_factor);
    if (other_machine && (row->verdict == K25_V_WORSE || row->verdict == K25_V_BETTER)) {
        row->verdict = K25_V_UNSURE;
        snprintf(row->unsure_why, sizeof(row->unsure_why),
                 "another machine with an unsteady calibration: the raw change may be the machine's");
        l = strlen(row->note);
        snprintf(row->note + l, sizeof(row->note) - l,
                 "; UNSURE: on another machine the raw change cannot tell the engine from the machine");
    }
}

static void compare_statistical(const struct k25_gate_set *B, const struct k25_gate_set *C, const struct pairing *pr,
                                const struct k25_gate_policy *pol, const struct k25_gate_metric *m,
                                struct k25_gate_row *row, bool other_machine, bool *unnormalized)
{
    int col = m->src == K25_GATE_SRC_REQUEST ? req_col(m->path) : -1;
    *unnormalized = false;
    int *gid = calloc((size_t)pr->n + 1, sizeof(int));
    struct k25_gate_cells *g = calloc((size_t)pr->n + 1, sizeof(*g));
    struct vec tyb = {0}, tyc = {0};
    K25_ASSERT(gid && g);
    int n_groups = group_pairs(B, pr, gid);
    int any_mode[4] = {0}, n_norm = 0;
    double log_factor = 0, spread = NAN;
    for (int k = 0; k < n_groups; k++) {
        int members[pr->n], nm = 0;
        for (int p = 0; p < pr->n; p++)
            if (gid[p] == k)
                members[nm++] = p;
        const struct k25_gate_run *b0 = &B->runs[pr->idx[members[0]][0]];
        int mode = 3, n_cells = 1;
        if (col >= 0) {
            bool same = b0->has_trace;
            for (int i = 0; i < nm && same; i++)
                same = requests_pair(b0, &B->runs[pr->idx[members[i]][0]]) &&
                       requests_pair(b0, &C->runs[pr->idx[members[i]][1]]);
            bool traces = true;
            for (int i = 0; i < nm; i++)
                traces &= B->runs[pr->idx[members[i]][0]].has_trace && C->runs[pr->idx[members[i]][1]].has_trace;
            if (same) {
                mode = 0;
                n_cells = b0->n_req;
            } else if (traces) {
                mode = 1;
            } else if (fallback_of(m->path)) {
                mode = 2;
                n_cells = (int)json_array_size(summary_at(b0, "repetitions.per_repetition"));
            } else {
                continue;
            }
        }
        any_mode[mode]++;
        struct k25_gate_cells *cs = &g[k];
        cs->n_runs = nm;
        cs->n_cells = n_cells;
        cs->b = malloc(sizeof(double) * (size_t)(nm * n_cells + 1));
        cs->c = malloc(sizeof(double) * (size_t)(nm * n_cells + 1));
        K25_ASSERT(cs->b && cs->c);
        double cal_b = NAN, cal_c = NAN;
        for (int i = 0; i < nm; i++) {
            const struct k25_gate_run *rb = &B->runs[pr->idx[members[i]][0]], *rc = &C->runs[pr->idx[members[i]][1]];
            for (int j = 0; j < n_cells; j++) {
                cs->b[i * n_cells + j] = cell_value(rb, m, col, j, mode);
                cs->c[i * n_cells + j] = cell_value(rc, m, col, j, mode);
                if (isfinite(cs->b[i * n_cells + j]) && isfinite(cs->c[i * n_cells + j])) {
                    vec_push(&tyb, cs->b[i * n_cells + j]);
                    vec_push(&tyc, cs->c[i * n_cells + j]);
                }
            }
            if (isfinite(rb->calib_ms) && !(rb->calib_ms >= cal_b))
                cal_b = rb->calib_ms;
            if (isfinite(rc->calib_ms) && !(rc->calib_ms >= cal_c))
                cal_c = rc->calib_ms;
        }
        bool norm_on = m->norm == K25_NORM_ALWAYS ||
                       (m->norm == K25_NORM_OTHER_MACHINE && strcmp(b0->machine, C->runs[pr->idx[members[0]][1]].machine));
        if (norm_on) {
            if (isfinite(cal_b) && isfinite(cal_c)) {
                cs->norm = log(cal_c / cal_b) * (m->lower_better ? 1 : -1);
                log_factor += log(cal_c / cal_b);
                n_norm++;
                for (int i = 0; i < nm; i++) {
                    double sb = B->runs[pr->idx[members[i]][0]].calib_spread;
                    double sc = C->runs[pr->idx[members[i]][1]].calib_spread;
                    if (isfinite(sb) && !(sb <= spread))
                        spread = sb;
                    if (isfinite(sc) && !(sc <= spread))
                        spread = sc;
                }
            } else {
                *unnormalized = true;
            }
        }
    }
    /* a calibration that spread too much says anything between 1x and 3x: judge the raw change */
    bool untrusted = n_norm > 0 && isfinite(spread) && spread > K25_CALIB_MAX_SPREAD;
    double est, lo, hi;
    if (untrusted)
        for (int k = 0; k < n_groups; k++)
            g[k].norm = 0;
    int n_cells = k25_gate_best_ratio(g, n_groups, m->lower_better, pol->resamples, pol->confidence, pol->seed, &est,
                                      &lo, &hi);
    row->paired = any_mode[0] > 0;
    row->n = n_cells;
    row->base = median_of(tyb.v, tyb.n);
    row->cand = median_of(tyc.v, tyc.n);
    if (n_cells == 0) {
        row->verdict = K25_V_NA;
        snprintf(row->note, sizeof(row->note), "no values to compare");
        goto out;
    }
    row->ratio = exp(est);
    row->lo = exp(lo);
    row->hi = exp(hi);
    row->calib_spread = spread;
    row->normalized = n_norm > 0 && !untrusted;
    row->calib_untrusted = untrusted;
    if (untrusted) {
        row->raw_ratio = row->ratio;
        row->norm_factor = exp(log_factor / n_norm);
    } else if (n_norm > 0) {
        unnormalized_ratio(g, n_groups, m, pol, row, log_factor / n_norm);
    }
    row->noise = isfinite(lo) ? fmax(row->hi / row->ratio, row->ratio / row->lo) - 1 : NAN;
    row->verdict = verdict_of(row, isfinite(lo), m->lower_better);
    if (row->verdict == K25_V_UNSURE) {
        if (!isfinite(lo))
            snprintf(row->unsure_why, sizeof(row->unsure_why), "one value per side: no interval");
        else if (row->noise > row->tol)
            snprintf(row->unsure_why, sizeof(row->unsure_why), "noise +-%.0f%% exceeds the %.0f%% tolerance",
                     100 * row->noise, 100 * row->tol);
        else
            snprintf(row->unsure_why, sizeof(row->unsure_why),
                     "%+.1f%% [%+.1f, %+.1f] reaches past the %.0f%% tolerance", 100 * (row->ratio - 1),
                     100 * (row->lo - 1), 100 * (row->hi - 1), 100 * row->tol);
    }
    if (any_mode[2])
        snprintf(row->note, sizeof(row->note), "no trace: per-repetition %s", fallback_of(m->path));
    else if (any_mode[1])
        snprintf(row->note, sizeof(row->note), "requests differ: ratio of run medians");
    if (untrusted)
        note_untrusted(row, spread, other_machine);
    else if (n_norm > 0)
        note_normalized(row);
out:
    for (int k = 0; k < n_groups; k++) {
        free(g[k].b);
        free(g[k].c);
    }
    free(g);
    free(gid);
    vec_free(&tyb);
    vec_free(&tyc);
}

/* Threshold and exact comparisons of a per-run summary figure. */
static void compare_summary(const struct k25_gate_set *B, const struct k25_gate_set *C, const struct pairing *pr,
                            const struct k25_gate_metric *m, struct k25_gate_row *row)
{
    int n = 0, n_b_only = 0, n_c_only = 0, n_diff = 0, n_better = 0;
    double worst = -INFINITY;
    struct vec tb = {0}, tc = {0};
    for (int p = 0; p < pr->n; p++) {
        double x = summary_num(&B->runs[pr->idx[p][0]], m->path), y = summary_num(&C->runs[pr->idx[p][1]], m->path);
        bool hx = isfinite(x), hy = isfinite(y);
        n_b_only += hx && !hy;
        n_c_only += hy && !hx;
        if (!hx || !hy)
            continue;
        n++;
        vec_push(&tb, x);
        vec_push(&tc, y);
        double ch = m->relative ? (x != 0 ? (y - x) / fabs(x) : (y == x ? 0 : INFINITY)) : y - x;
        double wch = m->lower_better ? ch : -ch; /* > 0: worse */
        if (m->cmp == K25_GATE_EXACT)
            n_diff += fabs(y - x) > 1e-9 * fmax(fabs(x), 1);
        else
            n_better += wch < -row->tol;
        if (wch > worst)
            worst = wch;
    }
    row->n = n;
    row->base = median_of(tb.v, tb.n);
    row->cand = median_of(tc.v, tc.n);
    vec_free(&tb);
    vec_free(&tc);
    if (n == 0) {
        row->verdict = n_b_only ? K25_V_UNSURE : K25_V_NA;
        snprintf(row->note, sizeof(row->note), "%s", n_b_only ? "missing from the candidate"
                                                    : n_c_only ? "not in the baseline"
                                                               : "not measured");
        return;
    }
    row->change = worst;
    if (m->cmp == K25_GATE_EXACT) {
        row->verdict = n_diff ? K25_V_WORSE : K25_V_SAME;
        if (n_diff)
            snprintf(row->note, sizeof(row->note), "differs in %d of %d runs", n_diff, n);
    } else {
        row->verdict = worst > row->tol ? K25_V_WORSE : n_better == n ? K25_V_BETTER : K25_V_SAME;
    }
    if (n_b_only && row->verdict == K25_V_SAME) {
        row->verdict = K25_V_UNSURE;
        snprintf(row->note, sizeof(row->note), "missing from %d candidate runs", n_b_only);
    }
}

/* Appends printf-style text to a row's note, "; "-separated. */
static void note_add(struct k25_gate_row *row, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_add(struct k25_gate_row *row, const char *fmt, ...)
{
    size_t l = strlen(row->note);
    if (l + 3 >= sizeof(row->note))
        return;
    if (l) {
        memcpy(row->note + l, "; ", 3);
        l += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(row->note + l, sizeof(row->note) - l, fmt, ap);
    va_end(ap);
}

/* "margin 0.41" / "no margin (sampled)" / "lengths 32 vs 31" for a divergence, into buf. */
static void divergence_text(const struct k25_tok_cmp *c, char *buf, size_t n)
{
    if (c->n_ref != c->n_cand)
        snprintf(buf, n, "lengths %d vs %d", c->n_ref, c->n_cand);
    else if (isnan(c->margin_ref))
        snprintf(buf, n, "no margin (sampled token)");
    else if (!(c->margin_ref <= c->bound))
        snprintf(buf, n, "margin %.3g > bound %.3g", (double)c->margin_ref, c->bound);
    else
        snprintf(buf, n, "baseline margin %.3g, candidate %.3g > bound %.3g", (double)c->margin_ref,
                 (double)c->margin_cand, c->bound);
}

/*
 * Generated tokens, request by request, under the token-identity rule
 * (k25_tok_compare; docs/engine.md, docs/gates.md).  Each candidate
 * sequence must equal the baseline's up to their first divergence.  There
 * both runs had the same prefix, so the rule applies exactly: accepted when
 * the baseline's margin (and the candidate's, when stored) is within the
 * near-tie bound 2 K25_TOK_TAU - another BLAS kernel, thread count or
 * batch may flip such a token - and the tokens after it are unverified (a
 * free-running sequence cannot be compared past a flip); otherwise a
 * regression, on this machine or another.  A baseline without margins (a
 * schema-1 trace) is compared exactly, as before the rule: any difference
 * fails on the same machine, the policy's other-machine tolerance on the
 * agreeing prefix applies on another.
 */
static void compare_tokens(const struct k25_gate_set *B, const struct k25_gate_set *C, const struct pairing *pr,
                           struct k25_gate_row *row, bool exact_required)
{
    int64_t same_prefix = 0, total = 0, unverified = 0;
    int n = 0, n_same = 0, n_tie = 0, n_bad = 0, n_strict = 0, n_strict_diff = 0, runs_no_trace = 0,
        runs_unpaired = 0;
    struct k25_tok_cmp tie = {0}, bad = {0};
    const char *tie_id = "", *bad_id = "";
    for (int p = 0; p < pr->n; p++) {
        const struct k25_gate_run *b = &B->runs[pr->idx[p][0]], *c = &C->runs[pr->idx[p][1]];
        if (!b->has_trace || !c->has_trace) {
            runs_no_trace++;
            continue;
        }
        if (!requests_pair(b, c)) {
            runs_unpaired++;
            continue;
        }
        for (int i = 0; i < b->n_req; i++) {
            const struct k25_gate_req *x = &b->req[i], *y = &c->req[i];
            struct k25_tok_cmp cmp;
            k25_tok_compare(x->tok, x->margin, x->n_tok, y->tok, y->margin, y->n_tok, K25_TOK_TAU, &cmp);
            n++;
            n_strict += cmp.strict;
            same_prefix += cmp.n_same;
            total += x->n_tok > y->n_tok ? x->n_tok : y->n_tok;
            if (cmp.diverged_at < 0) {
                n_same++;
            } else if (cmp.strict) {
                n_strict_diff++;
            } else if (cmp.pass) {
                if (n_tie++ == 0) {
                    tie = cmp;
                    tie_id = x->id;
                }
                unverified += cmp.n_unverified;
            } else if (n_bad++ == 0) {
                bad = cmp;
                bad_id = x->id;
            }
        }
    }
    row->n = n;
    row->base = n;
    row->cand = n_same;
    double agree = total ? (double)same_prefix / (double)total : 1;
    row->change = agree - 1;
    if (n == 0) {
        row->verdict = runs_no_trace || runs_unpaired ? K25_V_UNSURE : K25_V_NA;
        snprintf(row->note, sizeof(row->note), "%s",
                 runs_unpaired ? "requests differ between the runs" : runs_no_trace ? "no trace (token ids)" : "no requests");
        return;
    }
    row->verdict = K25_V_SAME;
    if (n_bad > 0 || (n_strict_diff > 0 && (exact_required || 1 - agree > row->tol)))
        row->verdict = K25_V_WORSE;
    snprintf(row->note, sizeof(row->note), "%d of %d sequences identical", n_same, n);
    if (n_tie > 0) {
        size_t l = strlen(row->note);
        snprintf(row->note + l, sizeof(row->note) - l,
                 ", %d diverged at a near-tie (%smargin %.2g <= bound %.3g at position %d of %s); %lld tokens unverified",
                 n_tie, n_tie > 1 ? "first: " : "", (double)tie.margin_ref, tie.bound, tie.diverged_at, tie_id,
                 (long long)unverified);
    }
    if (n_bad > 0) {
        char why[96];
        divergence_text(&bad, why, sizeof(why));
        note_add(row, "%d diverged above the near-tie bound (%sat position %d of %s: %s)", n_bad,
                 n_bad > 1 ? "first " : "", bad.diverged_at, bad_id, why);
    }
    if (n_strict > 0)
        note_add(row, "%d compared exactly: the baseline trace has no token margins (schema 1)", n_strict);
    if (n_bad > 0 || n_strict_diff > 0)
        note_add(row, "%.1f%% of tokens agree (prefix)", 100 * agree);
}

/* First top-level difference between two identity documents, for the message. */
static void identity_diff(const char *a, const char *b, char *out, size_t n)
{
    json_error_t je;
    json_t *x = json_loads(a, 0, &je), *y = json_loads(b, 0, &je);
    snprintf(out, n, "identities differ");
    const char *sec;
    json_t *xs;
    json_object_foreach(x, sec, xs)
    {
        json_t *ys = json_object_get(y, sec);
        const char *k;
        json_t *xv;
        json_object_foreach(xs, k, xv)
        {
            json_t *yv = json_object_get(ys, k);
            if (!yv || !json_equal(xv, yv)) {
                char *sx = json_dumps(xv, JSON_ENCODE_ANY | JSON_COMPACT), *sy = yv ? json_dumps(yv, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
                snprintf(out, n, "%s.%s: baseline %s, candidate %s", sec, k, sx ? sx : "?", sy ? sy : "(absent)");
                free(sx);
                free(sy);
                goto done;
            }
        }
        if (json_object_size(ys) != json_object_size(xs)) {
            snprintf(out, n, "%s: the candidate has keys the baseline lacks", sec);
            goto done;
        }
    }
done:
    json_decref(x);
    json_decref(y);
}

/* The run's `k25 bench` command line without its output options (NULL when the run lacks it). */
static char *bench_args(const struct k25_gate_run *r)
{
    const json_t *cl = k25_json_path(json_object_get(r->doc, "provenance"), "command_line");
    if (!json_is_string(cl))
        return NULL;
    const char *src = json_string_value(cl);
    char *out = malloc(strlen(src) + 1), *p = out;
    if (!out)
        return NULL;
    bool skip_next = false;
    for (const char *c = src; *c;) {
        size_t n = strcspn(c, " ");
        bool is_out = (n == 5 && !strncmp(c, "--out", 5)) || (n == 6 && !strncmp(c, "--json", 6)) ||
                      (n == 5 && !strncmp(c, "--csv", 5)) || (n == 17 && !strncmp(c, "--result-filename", 17));
        if (!skip_next && !is_out) {
            if (p != out)
                *p++ = ' ';
            memcpy(p, c, n);
            p += n;
        }
        skip_next = is_out;
        c += n;
        while (*c == ' ')
            c++;
    }
    *p = 0;
    return out;
}

/*
 * res->settle: what would turn an INCONCLUSIVE gate into a verdict.  After
 * --ab, more rounds of the same commands (up to the 32 k25 gate allows); for
 * stored results, measuring both builds here, interleaved, on the runs' own
 * workload (their command line, when the runs carry it).
 */
static void settle_command(const struct k25_gate_set *B, const struct k25_gate_set *C, const struct k25_gate_opts *o,
                           struct k25_gate_result *res)
{
    (void)B;
    if (o->ab_cmd_a && o->ab_cmd_b) {
        int more = o->ab_max_rounds * 2 > 32 ? 32 : o->ab_max_rounds * 2;
        if (o->ab_max_rounds >= 32)
            snprintf(res->settle, sizeof(res->settle),
                     "%d rounds is the most k25 gate runs: measure on a quieter machine (or count instructions: "
                     "ci/instr-gate.sh)",
                     o->ab_max_rounds);
        else
            snprintf(res->settle, sizeof(res->settle), "k25 gate --ab '%s' '%s' --rounds %d --max-rounds %d", o->ab_cmd_a,
                     o->ab_cmd_b, o->ab_max_rounds, more);
        return;
    }
    char *args = C->n_runs > 0 ? bench_args(&C->runs[0]) : NULL;
    snprintf(res->settle, sizeof(res->settle),
             "measure both builds here, interleaved: k25 gate --ab 'BASELINE/k25 %s' 'CANDIDATE/k25 %s' --rounds 6 "
             "--max-rounds 12 (BASELINE/k25: the baseline's commit built; or more repetitions of each run)",
             args ? args : "bench ARGS", args ? args : "bench ARGS");
    free(args);
}

int k25_gate_exit_status(const struct k25_gate_result *res)
{
    if (res->n_fail)
        return K25_GATE_EXIT_REGRESSION;
    return res->inconclusive ? K25_GATE_EXIT_INCONCLUSIVE : K25_GATE_EXIT_PASS;
}

int k25_gate_compare(const struct k25_gate_set *B, const struct k25_gate_set *C, const struct k25_gate_policy *pol,
                     const struct k25_gate_opts *o, struct k25_gate_result *res, struct k25_error *err)
{
    memset(res, 0, sizeof(*res));
    struct pairing pr = {0};
    pr.idx = calloc((size_t)B->n_runs + 1, sizeof(*pr.idx));
    if (!pr.idx)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int rc = K25_OK;
    char msg[1024] = "";
    /* pair runs by key; two single runs pair whatever their keys */
    if (B->n_runs == 1 && C->n_runs == 1) {
        pr.idx[0][0] = pr.idx[0][1] = 0;
        pr.n = 1;
    } else {
        for (int i = 0; i < B->n_runs; i++) {
            int j = 0;
            while (j < C->n_runs && strcmp(B->runs[i].key, C->runs[j].key))
                j++;
            if (j < C->n_runs) {
                pr.idx[pr.n][0] = i;
                pr.idx[pr.n][1] = j;
                pr.n++;
            } else if (!msg[0]) {
                snprintf(msg, sizeof(msg), "%s is only in the baseline", B->runs[i].label);
            }
        }
        for (int j = 0; j < C->n_runs && !msg[0]; j++) {
            int i = 0;
            while (i < B->n_runs && strcmp(B->runs[i].key, C->runs[j].key))
                i++;
            if (i == B->n_runs)
                snprintf(msg, sizeof(msg), "%s is only in the candidate", C->runs[j].label);
        }
    }
    res->n_pairs = pr.n;
    if (pr.n == 0) {
        rc = k25_error_set(err, K25_EINVAL, C->path, 0, NULL,
                           "nothing to compare: no run of the candidate pairs with one of the baseline (%s)", msg);
        goto out;
    }
    for (int p = 0; p < pr.n && !msg[0]; p++) {
        const struct k25_gate_run *b = &B->runs[pr.idx[p][0]], *c = &C->runs[pr.idx[p][1]];
        if (strcmp(b->identity, c->identity)) {
            char d[700];
            identity_diff(b->identity, c->identity, d, sizeof(d));
            snprintf(msg, sizeof(msg), "%s: %s", c->label, d);
        }
    }
    for (int p = 0; p < pr.n; p++)
        res->other_machine |= strcmp(B->runs[pr.idx[p][0]].machine, C->runs[pr.idx[p][1]].machine) != 0;
    if (msg[0]) {
        res->mismatch = true;
        snprintf(res->mismatch_msg, sizeof(res->mismatch_msg), "%s", msg);
        if (!o->allow_mismatch) {
            rc = k25_error_set(err, K25_EINVAL, NULL, 0, NULL,
                               "baseline and candidate are not the same benchmark (%s); refusing to compare "
                               "(--allow-mismatch compares the runs that pair anyway)",
                               msg);
            goto out;
        }
    }

    for (int i = 0; i < pol->n; i++) {
        const struct k25_gate_metric *m = &pol->m[i];
        struct k25_gate_row *row = &res->rows[res->n_rows++];
        memset(row, 0, sizeof(*row));
        row->m = m;
        row->ratio = row->lo = row->hi = row->change = row->noise = NAN;
        row->norm_factor = row->raw_ratio = row->calib_spread = NAN;
        row->tol = m->tol;
        if (res->other_machine) {
            if (isnan(m->tol_other))
                row->advisory = true;
            else
                row->tol = m->tol_other;
        }
        bool unnormalized = false;
        if (m->src == K25_GATE_SRC_TOKENS)
            compare_tokens(B, C, &pr, row, !res->other_machine);
        else if (m->cmp == K25_GATE_STATISTICAL)
            compare_statistical(B, C, &pr, pol, m, row, res->other_machine, &unnormalized);
        else
            compare_summary(B, C, &pr, m, row);
        if (unnormalized) {
            /* raw times cannot speak for another machine */
            if (res->other_machine)
                row->advisory = true;
            snprintf(row->note + strlen(row->note), sizeof(row->note) - strlen(row->note), "%snot normalized (no calibration)",
                     row->note[0] ? "; " : "");
        }
        if (row->advisory)
            snprintf(row->note + strlen(row->note), sizeof(row->note) - strlen(row->note),
                     "%sadvisory: another machine", row->note[0] ? "; " : "");
        if (m->cmp == K25_GATE_STATISTICAL && isfinite(row->noise) && row->noise > row->tol &&
            row->verdict == K25_V_UNSURE)
            snprintf(row->note + strlen(row->note), sizeof(row->note) - strlen(row->note),
                     "%snoise +-%.0f%% exceeds the tolerance: more repetitions", row->note[0] ? "; " : "",
                     100 * row->noise);
        bool counts = m->gate && !row->advisory;
        row->fails = counts && (row->verdict == K25_V_WORSE ||
                                (row->verdict == K25_V_UNSURE && pol->unsure == K25_UNSURE_FAIL));
        if (row->verdict == K25_V_UNSURE && !row->unsure_why[0])
            snprintf(row->unsure_why, sizeof(row->unsure_why), "%s", row->note[0] ? row->note : "too noisy to tell");
        res->n_fail += row->fails;
        res->n_unsure += row->verdict == K25_V_UNSURE;
        res->n_gated_unsure += counts && row->verdict == K25_V_UNSURE && !row->fails;
    }
    if (res->n_fail == 0 && res->n_gated_unsure > 0) {
        res->inconclusive = pol->unsure == K25_UNSURE_INCONCLUSIVE;
        res->unsure_passed = pol->unsure == K25_UNSURE_PASS;
        settle_command(B, C, o, res);
    }
out:
    free(pr.idx);
    return rc;
}

const char *k25_gate_verdict_name(const struct k25_gate_row *r)
{
    switch (r->verdict) {
    case K25_V_SAME:
        return "SAME";
    case K25_V_BETTER:
        return r->m->timing ? "FASTER" : "BETTER";
    case K25_V_WORSE:
        return r->m->cmp == K25_GATE_EXACT ? "DIFFERENT" : r->m->timing ? "SLOWER" : "WORSE";
    case K25_V_UNSURE:
        return "UNSURE";
    case K25_V_NA:
        break;
    }
    return "n/a";
}

static void fmt_val(char *buf, size_t n, double v)
{
    if (!isfinite(v))
        snprintf(buf, n, "-");
    else if (fabs(v) >= 1e6)
        snprintf(buf, n, "%.4g", v);
    else if (fabs(v) >= 100 || v == floor(v))
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.3g", v);
}

static void fmt_change(char *buf, size_t n, const struct k25_gate_row *r)
{
    if (r->m->src == K25_GATE_SRC_TOKENS)
        snprintf(buf, n, "%d/%d same", (int)r->cand, (int)r->base);
    else if (r->m->cmp == K25_GATE_EXACT)
        snprintf(buf, n, "%s", r->verdict == K25_V_SAME ? "identical" : r->verdict == K25_V_WORSE ? "differs" : "-");
    else if (r->m->cmp == K25_GATE_STATISTICAL && isfinite(r->ratio)) {
        if (isfinite(r->lo))
            snprintf(buf, n, "%+.1f%% [%+.1f, %+.1f]", 100 * (r->ratio - 1), 100 * (r->lo - 1), 100 * (r->hi - 1));
        else
            snprintf(buf, n, "%+.1f%%", 100 * (r->ratio - 1));
    } else if (isfinite(r->change))
        snprintf(buf, n, r->m->relative ? "%+.1f%% worst" : "%+.3g worst", r->m->relative ? 100 * r->change : r->change);
    else
        snprintf(buf, n, "-");
}

void k25_gate_print(FILE *out, const struct k25_gate_set *b, const struct k25_gate_set *c,
                    const struct k25_gate_result *res)
{
    fprintf(out, "k25 gate: baseline %s (%s, %d runs)\n          candidate %s (%s, %d runs); %d run pairs%s\n",
            b->path, b->kind, b->n_runs, c->path, c->kind, c->n_runs, res->n_pairs,
            res->other_machine ? "; ANOTHER MACHINE (other-machine tolerances)" : "");
    if (res->mismatch)
        fprintf(out, "  mismatch allowed: %s\n", res->mismatch_msg);
    fprintf(out, "\n  %-26s %12s %12s  %-26s %-10s %s\n", "metric", "baseline", "candidate", "change [95% CI]",
            "verdict", "tolerance / note");
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_gate_row *r = &res->rows[i];
        char bv[32], cv[32], ch[64], tol[32];
        if (r->m->src == K25_GATE_SRC_TOKENS) {
            snprintf(bv, sizeof(bv), "%d seqs", (int)r->base);
            snprintf(cv, sizeof(cv), "%d seqs", r->n);
        } else {
            fmt_val(bv, sizeof(bv), r->base);
            fmt_val(cv, sizeof(cv), r->cand);
        }
        fmt_change(ch, sizeof(ch), r);
        if (r->m->cmp == K25_GATE_EXACT)
            snprintf(tol, sizeof(tol), "exact");
        else
            snprintf(tol, sizeof(tol), r->m->relative ? "%.0f%%" : "%g", r->m->relative ? 100 * r->tol : r->tol);
        fprintf(out, "  %-26s %12s %12s  %-26s %s%-10s %s%s%s%s\n", r->m->name, bv, cv, ch, r->fails ? "*" : " ",
                k25_gate_verdict_name(r), tol, r->m->gate ? "" : " (report only)", r->note[0] ? "; " : "", r->note);
    }
    fprintf(out, "\n");
    if (res->n_fail) {
        fprintf(out, "GATE FAILED: %d regression%s (marked *)\n", res->n_fail, res->n_fail == 1 ? "" : "s");
        return;
    }
    if (res->inconclusive || res->unsure_passed) {
        if (res->inconclusive)
            fprintf(out, "INCONCLUSIVE: no regression found, but %d gated metric%s UNSURE (too noisy to tell):\n",
                    res->n_gated_unsure, res->n_gated_unsure == 1 ? "" : "s");
        else
            fprintf(out, "gate passed with %d gated metric%s UNSURE (the policy says `unsure: pass`):\n",
                    res->n_gated_unsure, res->n_gated_unsure == 1 ? "" : "s");
        for (int i = 0; i < res->n_rows; i++) {
            const struct k25_gate_row *r = &res->rows[i];
            if (r->verdict == K25_V_UNSURE && r->m->gate && !r->advisory && !r->fails)
                fprintf(out, "  %s: %s\n", r->m->name, r->unsure_why);
        }
        fprintf(out, "to settle it: %s\n", res->settle);
        return;
    }
    fprintf(out, "gate passed%s\n", res->n_unsure ? " (metrics UNSURE only where they do not gate; see notes)" : "");
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *set_json(const struct k25_gate_set *s)
{
    json_t *runs = json_array();
    for (int i = 0; i < s->n_runs; i++)
        json_array_append_new(runs, json_pack("{s:s, s:s, s:b, s:o}", "key", s->runs[i].key, "file", s->runs[i].file,
                                              "trace", s->runs[i].has_trace, "calibration_ms",
                                              num(s->runs[i].calib_ms)));
    return json_pack("{s:s, s:s, s:o}", "path", s->path, "kind", s->kind, "runs", runs);
}

json_t *k25_gate_json(const struct k25_gate_set *b, const struct k25_gate_set *c, const struct k25_gate_policy *p,
                      const struct k25_gate_result *res)
{
    static const char *const cmp[] = {"statistical", "threshold", "exact"};
    json_t *rows = json_array();
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_gate_row *r = &res->rows[i];
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:b, s:b, s:b, s:i, s:o, s:o, s:o, s:s}", "metric", r->m->name,
                              "compare", cmp[r->m->cmp], "better", r->m->lower_better ? "lower" : "higher", "verdict",
                              k25_gate_verdict_name(r), "regression", r->fails, "advisory", r->advisory, "gated",
                              r->m->gate, "n", r->n, "baseline", num(r->base), "candidate", num(r->cand), "tolerance",
                              num(r->tol), "note", r->note);
        if (r->verdict == K25_V_UNSURE)
            json_object_set_new(o, "unsure_why", json_string(r->unsure_why));
        if (r->m->cmp == K25_GATE_STATISTICAL) {
            json_object_set_new(o, "ratio", num(r->ratio));
            json_object_set_new(o, "ci", json_pack("[o, o]", num(r->lo), num(r->hi)));
            json_object_set_new(o, "noise_floor", num(r->noise));
            json_object_set_new(o, "paired", json_boolean(r->paired));
            static const char *const nn[] = {"none", "other-machine", "always"};
            json_object_set_new(o, "normalize", json_string(nn[r->m->norm]));
            json_object_set_new(o, "calibration_factor", num(r->norm_factor));
            json_object_set_new(o, "raw_ratio", num(r->raw_ratio));
            json_object_set_new(o, "calibration_spread", num(r->calib_spread));
            json_object_set_new(o, "normalized", json_boolean(r->normalized));
        } else {
            json_object_set_new(o, "change", num(r->change));
        }
        json_array_append_new(rows, o);
    }
    int status = k25_gate_exit_status(res);
    static const char *const un[] = {"inconclusive", "pass", "fail"};
    json_t *j = json_pack("{s:s, s:i, s:b, s:s, s:i, s:o, s:o, s:{s:s, s:f, s:i, s:s}, s:b, s:b, s:s*, s:i, s:i, s:i, s:o}",
                     "kind", "k25-gate", "schema_version", 1, "pass", status == K25_GATE_EXIT_PASS, "result",
                     status == K25_GATE_EXIT_REGRESSION ? "failed" : status == K25_GATE_EXIT_INCONCLUSIVE ? "inconclusive" : "passed",
                     "exit_status", status, "baseline",
                     set_json(b), "candidate", set_json(c), "policy", "path", p->path, "confidence", p->confidence,
                     "resamples", p->resamples, "unsure", un[p->unsure], "other_machine",
                     res->other_machine, "mismatch", res->mismatch, "mismatch_reason",
                     res->mismatch ? res->mismatch_msg : NULL, "run_pairs", res->n_pairs, "regressions", res->n_fail,
                     "unsure", res->n_unsure, "metrics", rows);
    if (j) {
        json_object_set_new(j, "gated_unsure", json_integer(res->n_gated_unsure));
        json_object_set_new(j, "settle", res->settle[0] ? json_string(res->settle) : json_null());
    }
    return j;
}

/* ------------------------------------------------------------------ A/B */

/* cmd with {h5} / {json} replaced (appended as --out / --json when absent). */
static char *expand(const char *cmd, const char *base)
{
    bool has = strstr(cmd, "{h5}") || strstr(cmd, "{json}");
    size_t n = strlen(cmd) * 2 + strlen(base) * 8 + 64;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    for (const char *c = cmd; *c;) {
        if (!strncmp(c, "{h5}", 4)) {
            p += sprintf(p, "%s.h5", base);
            c += 4;
        } else if (!strncmp(c, "{json}", 6)) {
            p += sprintf(p, "%s.json", base);
            c += 6;
        } else {
            *p++ = *c++;
        }
    }
    *p = 0;
    if (!has)
        sprintf(p, " --out '%s.h5' --json '%s.json'", base, base);
    return s;
}

static int mkdir_p(const char *d)
{
    return mkdir(d, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int k25_gate_ab_run(const struct k25_gate_ab_opts *o, struct k25_error *err)
{
    char a[1100], b[1100];
    snprintf(a, sizeof(a), "%s/a", o->dir);
    snprintf(b, sizeof(b), "%s/b", o->dir);
    if (mkdir_p(o->dir) || mkdir_p(a) || mkdir_p(b))
        return k25_error_set(err, K25_EIO, o->dir, 0, NULL, "cannot create the A/B folder: %s", strerror(errno));
    char old[1200];
    snprintf(old, sizeof(old), "%s/round-0.json", a);
    if (o->first_round == 0 && access(old, F_OK) == 0) /* stale rounds would join the comparison */
        return k25_error_set(err, K25_EINVAL, o->dir, 0, "--dir", "already holds A/B runs; give a new folder");
    for (int r = o->first_round; r < o->rounds; r++) {
        for (int k = 0; k < 2; k++) {
            /* A B, B A, A B, ...: neither side always runs first (drift, caches, thermal) */
            bool is_a = (r % 2 == 0) == (k == 0);
            char base[1200], log[1300];
            snprintf(base, sizeof(base), "%s/round-%d", is_a ? a : b, r);
            snprintf(log, sizeof(log), "%s.log", base);
            unlink(log);
            char *cmd = expand(is_a ? o->cmd_a : o->cmd_b, base), *full = NULL;
            if (!cmd || asprintf(&full, "( %s ) > '%s' 2>&1", cmd, log) < 0) {
                free(cmd);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            if (!o->quiet)
                fprintf(stderr, "k25 gate: round %d/%d, %s\n", r + 1, o->rounds, is_a ? "A (baseline)" : "B (candidate)");
            int st = system(full);
            free(full);
            int code = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (code != 0) {
                int rc = k25_error_set(err, K25_EIO, log, 0, NULL, "%s run of round %d failed (status %d): %s; see %s",
                                       is_a ? "A" : "B", r, code, cmd, log);
                free(cmd);
                return rc;
            }
            free(cmd);
        }
    }
    return K25_OK;
}
