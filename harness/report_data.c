/*
 * report_data.c - the data files gnuplot reads (plot_dir/data/NAME.tsv,
 * tab-separated, "nan" where a figure is missing) and the plot jobs that
 * pair each with its template:
 *
 *   run          run_cdf (TTFT and E2E CDFs, P50/P95/P99 marked),
 *                run_itl_hist (ITL histogram), run_ttft_len (TTFT against
 *                input length with a least-squares trend), run_timeline
 *                (queue depth, KV blocks and memory, busy fraction)
 *   comparison   cmp_cdf (TTFT and E2E CDFs of every run), cmp_ratio
 *                (headline figures as ratios to the first run)
 *   sweep        sweep_heatmap (objective over each pair of axes, other
 *                axes at the best point), sweep_pareto (objective against
 *                fidelity KL, else peak memory; marker size by memory),
 *                sweep_axis (objective along each axis through the best point)
 *   attention    attn_time, attn_scratch, attn_roofline against context length
 *
 * Scales are chosen from the data: an axis whose values span more than
 * ~30x is logarithmic.  Percentiles use the harness's nearest-rank rule
 * and are marked only where the sample supports them.
 */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- helpers */

static FILE *dopen(const char *plot_dir, const char *name, char *path, size_t n, struct k25_error *err)
{
    snprintf(path, n, "%s/data/%s", plot_dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create: %s", strerror(errno));
    return f;
}

static int dclose(FILE *f, const char *path, struct k25_error *err)
{
    bool bad = ferror(f) || fflush(f) != 0;
    if (fclose(f) != 0 || bad)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "writing failed: %s", strerror(errno ? errno : EIO));
    return K25_OK;
}

/* A number for a data file or a template: "nan" / "NaN" for missing. */
static void num(FILE *f, double v)
{
    if (isnan(v) || isinf(v))
        fputs("nan", f);
    else
        fprintf(f, "%.9g", v);
}

static const char *gnum(double v, char *buf, size_t n)
{
    if (isnan(v) || isinf(v))
        snprintf(buf, n, "NaN");
    else
        snprintf(buf, n, "%.9g", v);
    return buf;
}

static struct k25_plot_job *add(struct k25_plot_list *pl, const char *tmpl, const char *stem, const char *section,
                                const char *title, const char *note)
{
    K25_ASSERT(pl->n < K25_REPORT_MAX_PLOTS);
    struct k25_plot_job *j = &pl->jobs[pl->n];
    struct k25_report_plot *p = &pl->plots[pl->n];
    pl->n++;
    memset(j, 0, sizeof(*j));
    memset(p, 0, sizeof(*p));
    snprintf(j->template_name, sizeof(j->template_name), "%s", tmpl);
    snprintf(j->stem, sizeof(j->stem), "%s", stem);
    snprintf(p->name, sizeof(p->name), "%s", stem);
    snprintf(p->section, sizeof(p->section), "%s", section);
    snprintf(p->title, sizeof(p->title), "%s", title);
    snprintf(p->note, sizeof(p->note), "%s", note ? note : "");
    char q[400];
    k25_plot_quote(title, q, sizeof(q));
    k25_plot_set(j, "TITLE", "%s", q);
    return j;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bool wide_range(double lo, double hi, double ratio)
{
    return lo > 0 && hi > 0 && hi / lo > ratio;
}

void k25_report_metric_label(const char *m, char *buf, size_t n)
{
    static const struct {
        const char *name, *label;
    } fixed[] = {
        {"output_tok_per_s", "output tokens/s"},
        {"input_tok_per_s", "input tokens/s"},
        {"requests_per_s", "requests/s"},
        {"goodput_rps", "goodput (requests/s meeting the SLO)"},
        {"peak_memory_mb", "peak tracked memory (MiB)"},
        {"peak_kv_mb", "peak KV cache (MiB)"},
        {"busy_p95", "engine busy fraction P95"},
        {"kv_cache_hit_rate", "KV cache hit rate"},
        {"degraded_requests_ratio", "degraded requests ratio"},
        {"kv_usage_ratio", "KV usage ratio (peak)"},
        {"fidelity_kl_mean", "fidelity: mean next-token KL (nats)"},
        {"fidelity_rel_err_mean", "fidelity: attention relative error"},
        {"fidelity_token_agreement", "fidelity: greedy token agreement"},
        {"max_rate_rps", "max sustainable rate (requests/s)"},
        {"rejected_ratio", "rejected requests ratio"},
        {"kv_blocks_peak", "peak KV blocks"},
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (!strcmp(m, fixed[i].name)) {
            snprintf(buf, n, "%s", fixed[i].label);
            return;
        }
    /* ttft_p95_ms -> "TTFT P95 (ms)" */
    char name[64], stat[32];
    const char *us = strchr(m, '_');
    size_t l = strlen(m);
    if (us && l > 3 && !strcmp(m + l - 3, "_ms") && (size_t)(us - m) < sizeof(name)) {
        snprintf(name, sizeof(name), "%.*s", (int)(us - m), m);
        snprintf(stat, sizeof(stat), "%.*s", (int)(m + l - 3 - us - 1), us + 1);
        for (char *c = name; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        if (!strcmp(name, "QUEUE"))
            snprintf(name, sizeof(name), "queue time");
        if (stat[0] == 'p')
            stat[0] = 'P';
        snprintf(buf, n, "%s %s (ms)", name, stat);
        return;
    }
    snprintf(buf, n, "%s", m);
}

/* Axis names with their units. */
static void axis_label(const char *key, char *buf, size_t n)
{
    static const struct {
        const char *key, *unit;
    } u[] = {
        {"prefill_chunk_size", "tokens"}, {"max_batch_size", "sequences"}, {"max_num_batched_tokens", "tokens"},
        {"kv_compression_ratio", "fraction of KV kept"}, {"kv_merge_threshold", "cosine"},
        {"kv_block_size", "tokens"}, {"decode_max_tokens", "tokens"}, {"queue_timeout_ms", "ms"},
        {"memory_budget_mb", "MiB"}, {"threads", "threads"},
    };
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
        if (!strcmp(key, u[i].key)) {
            snprintf(buf, n, "%s (%s)", key, u[i].unit);
            return;
        }
    snprintf(buf, n, "%s", key);
}

/* ------------------------------------------------------------------ run */

/* Per-request values of one metric (completed requests), malloc'd. */
static double *req_values(const struct k25_bench_run *r, int metric, size_t *n)
{
    double *v = malloc(sizeof(double) * (r->n_reqs + 1));
    *n = 0;
    if (!v)
        return NULL;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const struct k25_bench_req *q = &r->reqs[i];
        if (q->state != K25_REQ_COMPLETED)
            continue;
        double x = metric == K25_M_TTFT ? k25_bench_req_ttft_ms(q) : k25_bench_req_e2e_ms(q);
        if (!isnan(x))
            v[(*n)++] = x;
    }
    return v;
}

static double *itl_values(const struct k25_bench_run *r, size_t *n)
{
    size_t cap = 1;
    for (size_t i = 0; i < r->n_reqs; i++)
        cap += (size_t)(r->reqs[i].n_output > 0 ? r->reqs[i].n_output : 0);
    double *v = malloc(sizeof(double) * cap);
    *n = 0;
    if (!v)
        return NULL;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const struct k25_bench_req *q = &r->reqs[i];
        if (q->state != K25_REQ_COMPLETED)
            continue;
        for (int k = 1; k < q->n_output; k++)
            v[(*n)++] = (double)(q->token_ns[k] - q->token_ns[k - 1]) / 1e6;
    }
    return v;
}

/* "n=8; P95 needs 20, P99 100 samples" for a plot's caption. */
static void support_note(const struct k25_dist *d, char *buf, size_t n)
{
    size_t u = (size_t)snprintf(buf, n, "n=%lld", (long long)d->n);
    const char *names[K25_NPCTL] = {"P50", "P90", "P95", "P99"};
    int need[K25_NPCTL] = {2, 10, 20, 100};
    bool first = true;
    for (int k = 0; k < K25_NPCTL && u < n; k++) {
        if (k == 1 || d->p[k].supported)
            continue;
        u += (size_t)snprintf(buf + u, n - u, "%s%s needs %d", first ? "; " : ", ", names[k], need[k]);
        first = false;
    }
    if (!first && u < n)
        snprintf(buf + u, n - u, " samples");
}

/* Writes a CDF (value, fraction) of sorted v[n] to f. */
static void write_cdf(FILE *f, const double *v, size_t n)
{
    if (n)
        fprintf(f, "%.9g\t0\n", v[0]);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.9g\t%.9g\n", v[i], (double)(i + 1) / (double)n);
}

/* One sorted sample as a CDF data file plot_dir/data/name. */
static int write_cdf_file(const char *plot_dir, const char *name, const double *v, size_t n, struct k25_error *err)
{
    char path[2048];
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    write_cdf(f, v, n);
    return dclose(f, path, err);
}

/* Sets PFX_P50/P95/P99 (NaN when unsupported), PFX_LOGX, PFX_NOTE from a distribution. */
static void set_dist_vars(struct k25_plot_job *j, const char *pfx, const struct k25_dist *d)
{
    char key[32], b[64], note[200], q[260];
    static const int idx[3] = {0, 2, 3};
    static const char *const nm[3] = {"P50", "P95", "P99"};
    for (int k = 0; k < 3; k++) {
        snprintf(key, sizeof(key), "%s_%s", pfx, nm[k]);
        k25_plot_set(j, key, "%s", gnum(d->p[idx[k]].supported ? d->p[idx[k]].value : NAN, b, sizeof(b)));
    }
    snprintf(key, sizeof(key), "%s_LOGX", pfx);
    k25_plot_set(j, key, "%d", wide_range(d->min, d->max, 30) ? 1 : 0);
    support_note(d, note, sizeof(note));
    k25_plot_quote(note, q, sizeof(q));
    snprintf(key, sizeof(key), "%s_NOTE", pfx);
    k25_plot_set(j, key, "%s", q);
}

int k25_report_data_run(const struct k25_report_run *run, const char *plot_dir, const char *prefix,
                        const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    const struct k25_bench_run *r = &run->t.run;
    char path[PATH_MAX + 256], name[128], stem[96], title[200], q[300];
    int rc = K25_OK;
    double *ttft = NULL, *e2e = NULL, *itl = NULL;
    size_t nt, ne, ni;
    ttft = req_values(r, K25_M_TTFT, &nt);
    e2e = req_values(r, K25_M_E2E, &ne);
    itl = itl_values(r, &ni);
    if (!ttft || !e2e || !itl) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    if (nt == 0) {
        /* nothing completed: there is no latency to draw, only the timeline */
        goto timeline;
    }

    /* --- CDFs */
    {
        struct k25_dist dt, de;
        k25_stats_describe(ttft, nt, &dt); /* sorts */
        k25_stats_describe(e2e, ne, &de);
        snprintf(name, sizeof(name), "%sttft_cdf.tsv", prefix);
        if ((rc = write_cdf_file(plot_dir, name, ttft, nt, err)))
            goto out;
        snprintf(name, sizeof(name), "%se2e_cdf.tsv", prefix);
        if ((rc = write_cdf_file(plot_dir, name, e2e, ne, err)))
            goto out;
        snprintf(stem, sizeof(stem), "%srun_cdf", prefix);
        snprintf(title, sizeof(title), "%s: latency CDFs", heading);
        struct k25_plot_job *j = add(pl, "run_cdf", stem, "run", title,
                                     "Fraction of requests finished within a latency; dashed lines mark P50, P95 "
                                     "and P99 (only where the sample supports them).");
        k25_plot_set(j, "TTFT_DATA", "'data/%sttft_cdf.tsv'", prefix);
        k25_plot_set(j, "E2E_DATA", "'data/%se2e_cdf.tsv'", prefix);
        set_dist_vars(j, "TTFT", &dt);
        set_dist_vars(j, "E2E", &de);
    }

    /* --- ITL histogram */
    if (ni > 0) {
        struct k25_dist di;
        k25_stats_describe(itl, ni, &di);
        bool logx = wide_range(di.min, di.max, 30);
        int nb = (int)sqrt((double)ni);
        nb = nb < 10 ? 10 : (nb > 60 ? 60 : nb);
        double lo = di.min, hi = di.max;
        if (hi <= lo)
            hi = lo + (lo > 0 ? lo * 0.1 : 1);
        int *cnt = calloc((size_t)nb, sizeof(int));
        if (!cnt) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < ni; i++) {
            double x = logx ? (log(itl[i]) - log(lo)) / (log(hi) - log(lo)) : (itl[i] - lo) / (hi - lo);
            int b = (int)(x * nb);
            cnt[b < 0 ? 0 : (b >= nb ? nb - 1 : b)]++;
        }
        int maxc = 0;
        for (int b = 0; b < nb; b++)
            maxc = cnt[b] > maxc ? cnt[b] : maxc;
        FILE *f;
        snprintf(name, sizeof(name), "%sitl_hist.tsv", prefix);
        if (!(f = dopen(plot_dir, name, path, sizeof(path), err))) {
            free(cnt);
            rc = K25_EIO;
            goto out;
        }
        for (int b = 0; b < nb; b++) {
            double e0 = logx ? exp(log(lo) + (log(hi) - log(lo)) * b / nb) : lo + (hi - lo) * b / nb;
            double e1 = logx ? exp(log(lo) + (log(hi) - log(lo)) * (b + 1) / nb) : lo + (hi - lo) * (b + 1) / nb;
            fprintf(f, "%.9g\t%.9g\t%.9g\t%d\n", logx ? sqrt(e0 * e1) : (e0 + e1) / 2, e0, e1, cnt[b]);
        }
        free(cnt);
        if ((rc = dclose(f, path, err)))
            goto out;
        snprintf(stem, sizeof(stem), "%srun_itl_hist", prefix);
        snprintf(title, sizeof(title), "%s: inter-token latency", heading);
        struct k25_plot_job *j = add(pl, "run_itl_hist", stem, "run", title,
                                     "Gaps between consecutive tokens of a request; a second mode far right is "
                                     "decode steps stalled behind other requests' prefill chunks.");
        k25_plot_set(j, "DATA", "'data/%s'", name);
        set_dist_vars(j, "ITL", &di);
        k25_plot_set(j, "LOGY", "%d", maxc > 50 ? 1 : 0);
    }

    /* --- TTFT against input length, least-squares line ttft = a + b x */
    {
        FILE *f;
        snprintf(name, sizeof(name), "%sttft_len.tsv", prefix);
        if (!(f = dopen(plot_dir, name, path, sizeof(path), err))) {
            rc = K25_EIO;
            goto out;
        }
        double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0, xmin = INFINITY, xmax = -INFINITY;
        size_t k = 0;
        for (size_t i = 0; i < r->n_reqs; i++) {
            const struct k25_bench_req *qq = &r->reqs[i];
            double y = k25_bench_req_ttft_ms(qq), x = qq->n_input;
            if (qq->state != K25_REQ_COMPLETED || isnan(y))
                continue;
            fprintf(f, "%.9g\t%.9g\t%d\n", x, y, qq->rep);
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
            syy += y * y;
            xmin = x < xmin ? x : xmin;
            xmax = x > xmax ? x : xmax;
            k++;
        }
        if ((rc = dclose(f, path, err)))
            goto out;
        double den = (double)k * sxx - sx * sx, a = NAN, b = NAN, r2 = NAN;
        if (k >= 3 && den > 0 && xmax > xmin) {
            b = ((double)k * sxy - sx * sy) / den;
            a = (sy - b * sx) / (double)k;
            double vy = (double)k * syy - sy * sy;
            r2 = vy > 0 ? ((double)k * sxy - sx * sy) * ((double)k * sxy - sx * sy) / (den * vy) : NAN;
        }
        snprintf(stem, sizeof(stem), "%srun_ttft_len", prefix);
        snprintf(title, sizeof(title), "%s: TTFT against input length", heading);
        struct k25_plot_job *j = add(pl, "run_ttft_len", stem, "run", title,
                                     "Each dot is a request; the line is a least-squares fit TTFT = a + b x input "
                                     "tokens (prefill cost per token and fixed overhead).");
        k25_plot_set(j, "DATA", "'data/%s'", name);
        char fa[64], fb[64], fit[200];
        k25_plot_set(j, "FIT_A", "%s", gnum(a, fa, sizeof(fa)));
        k25_plot_set(j, "FIT_B", "%s", gnum(b, fb, sizeof(fb)));
        k25_plot_set(j, "XMIN", "%.9g", isfinite(xmin) ? xmin : 0);
        k25_plot_set(j, "XMAX", "%.9g", isfinite(xmax) ? xmax : 1);
        if (!isnan(b))
            snprintf(fit, sizeof(fit), "fit: TTFT = %.3g ms + %.3g ms per 1k tokens x input (R2 = %.2f, %zu requests)",
                     a, b * 1000, r2, k);
        else
            snprintf(fit, sizeof(fit), "no trend fitted (%zu requests, %s)", k,
                     k < 3 ? "fewer than 3" : "one input length");
        k25_plot_quote(fit, q, sizeof(q));
        k25_plot_set(j, "FIT_NOTE", "%s", q);
        k25_plot_set(j, "LOGX", "%d", wide_range(xmin, xmax, 30) ? 1 : 0);
    }

timeline:
    /* --- timeline */
    if (r->n_win > 0) {
        FILE *f;
        snprintf(name, sizeof(name), "%stimeline.tsv", prefix);
        if (!(f = dopen(plot_dir, name, path, sizeof(path), err))) {
            rc = K25_EIO;
            goto out;
        }
        for (size_t w = 0; w < r->n_win; w++) {
            const struct k25_bench_window *x = &r->win[w];
            bool st = x->n_waiting >= 0;
            num(f, (double)x->t_ns / 1e9);
            fputc('\t', f);
            num(f, st ? x->n_waiting : NAN);
            fputc('\t', f);
            num(f, st ? x->n_running : NAN);
            fputc('\t', f);
            num(f, st ? (double)x->kv_blocks : NAN);
            fputc('\t', f);
            double bf = x->len_ns > 0 ? x->busy_ns / (double)x->len_ns : NAN;
            num(f, bf > 1 ? 1 : bf);
            fputc('\t', f);
            num(f, st ? (double)x->mem_bytes / 1048576.0 : NAN);
            fputc('\n', f);
        }
        if ((rc = dclose(f, path, err)))
            goto out;
        snprintf(stem, sizeof(stem), "%srun_timeline", prefix);
        snprintf(title, sizeof(title), "%s: engine timeline (100 ms windows)", heading);
        struct k25_plot_job *j = add(pl, "run_timeline", stem, "run", title,
                                     "Requests waiting and running, KV blocks in use with tracked memory, and the "
                                     "engine's busy fraction; the shaded band is the healthy 0.75-0.85.");
        k25_plot_set(j, "DATA", "'data/%s'", name);
        k25_plot_set(j, "HEIGHT", "760");
    }
out:
    free(ttft);
    free(e2e);
    free(itl);
    return rc;
}

/* ----------------------------------------------------------- comparison */

/* gnuplot array of labels: "array L[3]; L[1] = 'a'; ..." */
static void set_labels(struct k25_plot_job *j, const char *key, const char *const *labels, int n)
{
    char buf[1536], q[300];
    size_t u = (size_t)snprintf(buf, sizeof(buf), "array L[%d]", n);
    for (int i = 0; i < n && u < sizeof(buf); i++) {
        k25_plot_quote(labels[i], q, sizeof(q));
        u += (size_t)snprintf(buf + u, sizeof(buf) - u, "; L[%d] = %s", i + 1, q);
    }
    k25_plot_set(j, key, "%s", buf);
}

int k25_report_data_compare(const struct k25_report_run *runs, int n, const char *plot_dir, const char *prefix,
                            const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    const char *labels[64];
    int rc = K25_OK;
    if (n > 64)
        n = 64;
    bool logx[2] = {false, false};
    for (int m = 0; m < 2 && !rc; m++) {
        snprintf(name, sizeof(name), "%scmp_%s_cdf.tsv", prefix, m == 0 ? "ttft" : "e2e");
        FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
        if (!f)
            return K25_EIO;
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n; i++) {
            size_t nv;
            double *v = req_values(&runs[i].t.run, m == 0 ? K25_M_TTFT : K25_M_E2E, &nv);
            if (!v) {
                fclose(f);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            qsort(v, nv, sizeof(double), cmp_double);
            if (nv) {
                lo = v[0] < lo ? v[0] : lo;
                hi = v[nv - 1] > hi ? v[nv - 1] : hi;
            }
            write_cdf(f, v, nv);
            if (!nv) /* an empty block would shift the index of the next run */
                fputs("nan\tnan\n", f);
            fputs("\n\n", f);
            free(v);
        }
        logx[m] = wide_range(lo, hi, 30);
        rc = dclose(f, path, err);
    }
    if (rc)
        return rc;
    for (int i = 0; i < n; i++)
        labels[i] = runs[i].label;
    snprintf(stem, sizeof(stem), "%scmp_cdf", prefix);
    snprintf(title, sizeof(title), "%s: latency CDFs", heading);
    struct k25_plot_job *j = add(pl, "cmp_cdf", stem, "comparison", title,
                                 "One curve per run: a curve to the left is faster.");
    k25_plot_set(j, "TTFT_DATA", "'data/%scmp_ttft_cdf.tsv'", prefix);
    k25_plot_set(j, "E2E_DATA", "'data/%scmp_e2e_cdf.tsv'", prefix);
    k25_plot_set(j, "N", "%d", n);
    k25_plot_set(j, "TTFT_LOGX", "%d", logx[0]);
    k25_plot_set(j, "E2E_LOGX", "%d", logx[1]);
    set_labels(j, "LABELS", labels, n);

    /* headline ratios to the first run */
    static const struct {
        const char *label, *metric;
    } heads[] = {
        {"TTFT P50", "ttft_ms.p50"}, {"TTFT P90", "ttft_ms.p90"}, {"E2E P50", "e2e_ms.p50"},
        {"TPOT P50", "tpot_ms.p50"}, {"ITL P50", "itl_ms.p50"},   {"ITL P99", "itl_ms.p99"},
        {"output tok/s", "output_tok_per_s"}, {"requests/s", "requests_per_s"},
        {"peak memory", "memory.peak_tracked_bytes"},
    };
    snprintf(name, sizeof(name), "%scmp_ratio.tsv", prefix);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
        double base = NAN;
        fprintf(f, "%s", heads[h].label);
        for (int i = 0; i < n; i++) {
            const json_t *s = json_object_get(runs[i].summary, "summary");
            if (!s)
                s = runs[i].summary;
            char key[64];
            snprintf(key, sizeof(key), "%s", heads[h].metric);
            char *dot = strchr(key, '.');
            const json_t *v = s;
            if (dot) {
                *dot = 0;
                v = json_object_get(json_object_get(s, key), dot + 1);
            } else {
                v = json_object_get(s, key);
            }
            double x = json_is_number(v) ? json_number_value(v) : NAN;
            if (i == 0)
                base = x;
            fputc('\t', f);
            num(f, base > 0 ? x / base : NAN);
        }
        fputc('\n', f);
    }
    if ((rc = dclose(f, path, err)))
        return rc;
    snprintf(stem, sizeof(stem), "%scmp_ratio", prefix);
    snprintf(title, sizeof(title), "%s: headline figures relative to %s", heading, runs[0].label);
    j = add(pl, "cmp_ratio", stem, "comparison", title,
            "Each run's figure divided by the first run's: for latency and memory below 1 is better, for "
            "throughput above 1 is better. Missing bars: the figure is unsupported for that run's sample.");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "N", "%d", n);
    set_labels(j, "LABELS", labels, n);
    return K25_OK;
}

/* ---------------------------------------------------------------- sweep */

static double metric(const struct k25_report_point *p, const char *m)
{
    const json_t *v = json_object_get(p->metrics, m);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static double metric_ci(const struct k25_report_point *p, const char *m, int k)
{
    const json_t *v = json_array_get(json_object_get(p->ci, m), (size_t)k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Distinct values of axis a, numeric ascending when all numeric, else in order seen. */
static int axis_values(const struct k25_report_sweep *s, int a, char vals[][128], int max, bool *numeric)
{
    int n = 0;
    for (int i = 0; i < s->n_pts; i++) {
        bool seen = false;
        for (int k = 0; k < n; k++)
            if (!strcmp(vals[k], s->pts[i].value[a]))
                seen = true;
        if (!seen && n < max)
            snprintf(vals[n++], 128, "%s", s->pts[i].value[a]);
    }
    *numeric = true;
    for (int k = 0; k < n; k++) {
        char *end;
        strtod(vals[k], &end);
        if (end == vals[k] || *end)
            *numeric = false;
    }
    if (*numeric) /* insertion sort by value */
        for (int i = 1; i < n; i++)
            for (int k = i; k > 0 && strtod(vals[k], NULL) < strtod(vals[k - 1], NULL); k--) {
                char t[128];
                memcpy(t, vals[k], 128);
                memcpy(vals[k], vals[k - 1], 128);
                memcpy(vals[k - 1], t, 128);
            }
    return n;
}

static int index_of(char vals[][128], int n, const char *v)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(vals[k], v))
            return k;
    return -1;
}

/* "('512' 0, '2048' 1)" */
static void tics(char vals[][128], int n, char *buf, size_t bn)
{
    size_t u = (size_t)snprintf(buf, bn, "(");
    for (int k = 0; k < n && u < bn; k++) {
        char q[300];
        k25_plot_quote(vals[k], q, sizeof(q));
        u += (size_t)snprintf(buf + u, bn - u, "%s%s %d", k ? ", " : "", q, k);
    }
    if (u < bn)
        snprintf(buf + u, bn - u, ")");
}

/* Do p and the best point agree on every axis but the listed ones? */
static bool others_at_best(const struct k25_report_sweep *s, const struct k25_report_point *p, int a, int b)
{
    const struct k25_report_point *best = &s->pts[s->best];
    for (int k = 0; k < s->n_axes; k++)
        if (k != a && k != b && strcmp(p->value[k], best->value[k]) != 0)
            return false;
    return true;
}

int k25_report_data_sweep(const struct k25_report_sweep *s, const char *plot_dir, struct k25_plot_list *pl,
                          struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[256], ol[128], q[300];
    int rc = K25_OK;
    static char vals[2][64][128];
    bool numeric[2];
    k25_report_metric_label(s->objective, ol, sizeof(ol));
    int anchor = s->best >= 0 ? s->best : -1;
    if (anchor < 0) /* no feasible point: anchor on the point with the best objective */
        for (int i = 0; i < s->n_pts; i++) {
            double v = metric(&s->pts[i], s->objective);
            if (!isnan(v) && (anchor < 0 || (s->maximize ? v > metric(&s->pts[anchor], s->objective)
                                                        : v < metric(&s->pts[anchor], s->objective))))
                anchor = i;
        }
    if (anchor < 0)
        return K25_OK; /* nothing measured: the report says so */
    struct k25_report_sweep tmp = *s;
    tmp.best = anchor;
    s = &tmp;

    /* --- heatmaps over each pair of axes */
    for (int a = 0; a < s->n_axes; a++)
        for (int b = a + 1; b < s->n_axes; b++) {
            int na = axis_values(s, a, vals[0], 64, &numeric[0]);
            int nb = axis_values(s, b, vals[1], 64, &numeric[1]);
            if (na < 2 && nb < 2)
                continue;
            if (pl->n >= K25_REPORT_MAX_PLOTS - 8)
                break;
            snprintf(name, sizeof(name), "heat_%d_%d.tsv", a, b);
            FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
            if (!f)
                return K25_EIO;
            double lo = INFINITY, hi = -INFINITY;
            int cells = 0;
            for (int i = 0; i < s->n_pts; i++) {
                const struct k25_report_point *p = &s->pts[i];
                double v = metric(p, s->objective);
                if (!others_at_best(s, p, a, b) || isnan(v))
                    continue;
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
                fprintf(f, "%d\t%d\t%.9g\t%d\n", index_of(vals[0], na, p->value[a]),
                        index_of(vals[1], nb, p->value[b]), v, p->feasible ? 1 : 0);
                cells++;
            }
            if ((rc = dclose(f, path, err)))
                return rc;
            if (!cells)
                continue;
            snprintf(stem, sizeof(stem), "sweep_heatmap_%d_%d", a, b);
            k25_report_sfmt(title, sizeof(title), "%s over %s x %s", s->objective, s->axis[a], s->axis[b]);
            char note[256];
            snprintf(note, sizeof(note),
                     "Each cell is a grid point with the other axes at the best point's values; the best point "
                     "is framed, infeasible points are marked, blank cells were not run.");
            struct k25_plot_job *j = add(pl, "sweep_heatmap", stem, "sweep", title, note);
            k25_plot_set(j, "DATA", "'data/%s'", name);
            char t[1536], al[160];
            tics(vals[0], na, t, sizeof(t));
            k25_plot_set(j, "XTICS", "%s", t);
            tics(vals[1], nb, t, sizeof(t));
            k25_plot_set(j, "YTICS", "%s", t);
            k25_plot_set(j, "NX", "%d", na);
            k25_plot_set(j, "NY", "%d", nb);
            axis_label(s->axis[a], al, sizeof(al));
            k25_plot_quote(al, q, sizeof(q));
            k25_plot_set(j, "XLABEL", "%s", q);
            axis_label(s->axis[b], al, sizeof(al));
            k25_plot_quote(al, q, sizeof(q));
            k25_plot_set(j, "YLABEL", "%s", q);
            k25_plot_quote(ol, q, sizeof(q));
            k25_plot_set(j, "CBLABEL", "%s", q);
            k25_plot_set(j, "BEST_X", "%d", index_of(vals[0], na, s->pts[s->best].value[a]));
            k25_plot_set(j, "BEST_Y", "%d", index_of(vals[1], nb, s->pts[s->best].value[b]));
            /* green = better, whichever way the objective goes */
            k25_plot_set(j, "PALETTE", "%s",
                         s->maximize ? "(0 '#d73027', 0.5 '#fee08b', 1 '#1a9850')"
                                     : "(0 '#1a9850', 0.5 '#fee08b', 1 '#d73027')");
            k25_plot_set(j, "CBLOG", "%d", wide_range(lo, hi, 30));
        }

    /* --- Pareto front: objective against fidelity KL (else peak memory), size by memory */
    {
        const char *xm = s->has_fidelity ? "fidelity_kl_mean" : "peak_memory_mb";
        double mlo = INFINITY, mhi = -INFINITY, xlo = INFINITY, xhi = -INFINITY;
        for (int i = 0; i < s->n_pts; i++) {
            double m = metric(&s->pts[i], "peak_memory_mb"), x = metric(&s->pts[i], xm);
            if (!isnan(m)) {
                mlo = m < mlo ? m : mlo;
                mhi = m > mhi ? m : mhi;
            }
            if (!isnan(x)) {
                xlo = x < xlo ? x : xlo;
                xhi = x > xhi ? x : xhi;
            }
        }
        /* front sorted by x, so the line joins neighbours */
        int order[1024], nf = 0;
        for (int i = 0; i < s->n_pts && nf < 1024; i++)
            if (s->pts[i].pareto && !isnan(metric(&s->pts[i], xm)) && !isnan(metric(&s->pts[i], s->objective)))
                order[nf++] = i;
        for (int i = 1; i < nf; i++)
            for (int k = i; k > 0 && metric(&s->pts[order[k]], xm) < metric(&s->pts[order[k - 1]], xm); k--) {
                int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        snprintf(name, sizeof(name), "pareto.tsv");
        FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
        if (!f)
            return K25_EIO;
        int np = 0;
        /* block 0: every point; block 1: the front in x order; block 2: the best point */
        for (int i = 0; i < s->n_pts; i++) {
            const struct k25_report_point *p = &s->pts[i];
            double x = metric(p, xm), y = metric(p, s->objective), m = metric(p, "peak_memory_mb");
            if (isnan(x) || isnan(y))
                continue;
            double ps = isnan(m) || !(mhi > mlo) ? 1.6 : 0.9 + 2.6 * (m - mlo) / (mhi - mlo);
            fprintf(f, "%.9g\t%.9g\t%.4g\t%d\t%s\n", x, y, ps, p->feasible ? 1 : 0, p->id);
            np++;
        }
        if (!np)
            fputs("nan\tnan\t1\t0\tnone\n", f);
        fputs("\n\n", f);
        for (int k = 0; k < nf; k++) {
            const struct k25_report_point *p = &s->pts[order[k]];
            double m = metric(p, "peak_memory_mb");
            double ps = isnan(m) || !(mhi > mlo) ? 1.6 : 0.9 + 2.6 * (m - mlo) / (mhi - mlo);
            fprintf(f, "%.9g\t%.9g\t%.4g\t1\t%s\n", metric(p, xm), metric(p, s->objective), ps, p->id);
        }
        if (!nf)
            fputs("nan\tnan\t1\t0\tnone\n", f);
        fputs("\n\n", f);
        {
            const struct k25_report_point *p = &s->pts[s->best];
            double x = metric(p, xm), y = metric(p, s->objective);
            fprintf(f, "%.9g\t%.9g\t3\t1\tbest\n", x, y);
        }
        if ((rc = dclose(f, path, err)))
            return rc;
        if (np) {
            k25_report_sfmt(title, sizeof(title), "Pareto front: %s against %s", s->objective, xm);
            struct k25_plot_job *j =
                add(pl, "sweep_pareto", "sweep_pareto", "sweep", title,
                    s->has_fidelity ? "Every point of the sweep; marker size grows with peak memory; the line joins "
                                      "the Pareto front (no other point is better on the objective, fidelity and "
                                      "memory at once)."
                                    : "Fidelity was not measured in this sweep, so the front is the objective against "
                                      "peak memory (marker size grows with memory too).");
            k25_plot_set(j, "DATA", "'data/pareto.tsv'");
            char al[160];
            k25_report_metric_label(xm, al, sizeof(al));
            k25_plot_quote(al, q, sizeof(q));
            k25_plot_set(j, "XLABEL", "%s", q);
            k25_plot_quote(ol, q, sizeof(q));
            k25_plot_set(j, "YLABEL", "%s", q);
            k25_plot_set(j, "LOGX", "%d", wide_range(xlo, xhi, 30));
            char ml[160];
            snprintf(ml, sizeof(ml), "marker size: peak memory %.0f .. %.0f MiB", isfinite(mlo) ? mlo : 0,
                     isfinite(mhi) ? mhi : 0);
            k25_plot_quote(ml, q, sizeof(q));
            k25_plot_set(j, "SIZE_NOTE", "%s", q);
        }
    }

    /* --- one line per axis through the best point */
    for (int a = 0; a < s->n_axes && pl->n < K25_REPORT_MAX_PLOTS - 1; a++) {
        int na = axis_values(s, a, vals[0], 64, &numeric[0]);
        if (na < 2)
            continue;
        snprintf(name, sizeof(name), "axis_%d.tsv", a);
        FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
        if (!f)
            return K25_EIO;
        double xlo = INFINITY, xhi = -INFINITY;
        int rows = 0;
        for (int k = 0; k < na; k++)
            for (int i = 0; i < s->n_pts; i++) {
                const struct k25_report_point *p = &s->pts[i];
                if (strcmp(p->value[a], vals[0][k]) != 0 || !others_at_best(s, p, a, a))
                    continue;
                double x = numeric[0] ? strtod(vals[0][k], NULL) : k, y = metric(p, s->objective);
                if (isnan(y))
                    continue;
                xlo = x < xlo ? x : xlo;
                xhi = x > xhi ? x : xhi;
                fprintf(f, "%.9g\t%.9g\t", x, y);
                num(f, metric_ci(p, s->objective, 0));
                fputc('\t', f);
                num(f, metric_ci(p, s->objective, 1));
                fprintf(f, "\t%d\t%d\n", p->feasible ? 1 : 0, i == s->best ? 1 : 0);
                rows++;
            }
        if ((rc = dclose(f, path, err)))
            return rc;
        if (rows < 2)
            continue;
        snprintf(stem, sizeof(stem), "sweep_axis_%d", a);
        k25_report_sfmt(title, sizeof(title), "%s along %s (other axes at the best point)", s->objective, s->axis[a]);
        struct k25_plot_job *j = add(pl, "sweep_axis", stem, "sweep", title,
                                     "The objective as one axis moves and the others stay at the best point; "
                                     "error bars are 95% intervals over repetitions (none with one repetition); "
                                     "hollow markers are infeasible points, the star is the best.");
        k25_plot_set(j, "DATA", "'data/%s'", name);
        char al[160], t[1536];
        axis_label(s->axis[a], al, sizeof(al));
        k25_plot_quote(al, q, sizeof(q));
        k25_plot_set(j, "XLABEL", "%s", q);
        k25_plot_quote(ol, q, sizeof(q));
        k25_plot_set(j, "YLABEL", "%s", q);
        if (numeric[0]) {
            size_t u = (size_t)snprintf(t, sizeof(t), "set xtics (");
            for (int k = 0; k < na && u < sizeof(t); k++)
                u += (size_t)snprintf(t + u, sizeof(t) - u, "%s%.9g", k ? ", " : "", strtod(vals[0][k], NULL));
            if (u < sizeof(t))
                snprintf(t + u, sizeof(t) - u, ")");
            k25_plot_set(j, "XTICS", "%s", t);
            k25_plot_set(j, "LOGX", "%d", wide_range(xlo, xhi, 7.9) ? 1 : 0);
        } else {
            tics(vals[0], na, t, sizeof(t));
            k25_plot_set(j, "XTICS", "set xtics %s; set xrange [-0.5:%d.5]", t, na - 1);
            k25_plot_set(j, "LOGX", "0");
        }
    }
    return K25_OK;
}

/* ------------------------------------------------------------ attention */

int k25_report_data_attn(const struct k25_report_attn *at, const char *plot_dir, struct k25_plot_list *pl,
                         struct k25_error *err)
{
    char path[PATH_MAX + 256], q[400];
    /* series: (impl, mode, dtype, chunk) in order of first appearance */
    struct series {
        char impl[16], mode[16], dtype[8];
        int64_t chunk;
        char label[96];
    } ser[64];
    int ns = 0;
    bool dtypes_differ = false, modes_differ = false;
    for (size_t i = 0; i < at->n_rows; i++) {
        const struct k25_report_attn_row *r = &at->rows[i];
        if (strcmp(r->dtype, at->rows[0].dtype))
            dtypes_differ = true;
        if (strcmp(r->mode, at->rows[0].mode))
            modes_differ = true;
    }
    for (size_t i = 0; i < at->n_rows; i++) {
        const struct k25_report_attn_row *r = &at->rows[i];
        int k;
        for (k = 0; k < ns; k++)
            if (!strcmp(ser[k].impl, r->impl) && !strcmp(ser[k].mode, r->mode) && !strcmp(ser[k].dtype, r->dtype) &&
                ser[k].chunk == r->chunk)
                break;
        if (k == ns && ns < 64) {
            struct series *s = &ser[ns++];
            snprintf(s->impl, sizeof(s->impl), "%s", r->impl);
            snprintf(s->mode, sizeof(s->mode), "%s", r->mode);
            snprintf(s->dtype, sizeof(s->dtype), "%s", r->dtype);
            s->chunk = r->chunk;
            size_t u = (size_t)snprintf(s->label, sizeof(s->label), "%s", r->impl);
            if (!strcmp(r->impl, "chunked"))
                u += r->chunk > 0 ? (size_t)snprintf(s->label + u, sizeof(s->label) - u, " (chunk %lld)", (long long)r->chunk)
                                  : (size_t)snprintf(s->label + u, sizeof(s->label) - u, " (one pass)");
            if (modes_differ)
                u += (size_t)snprintf(s->label + u, sizeof(s->label) - u, " %s", r->mode);
            if (dtypes_differ)
                snprintf(s->label + u, sizeof(s->label) - u, " %s", r->dtype);
        }
    }
    FILE *f = dopen(plot_dir, "attn.tsv", path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    double tlo = INFINITY, thi = -INFINITY, slo = INFINITY, shi = -INFINITY, clo = INFINITY, chi = -INFINITY,
           fhi = 0;
    for (int k = 0; k < ns; k++) {
        int rows = 0;
        for (size_t i = 0; i < at->n_rows; i++) {
            const struct k25_report_attn_row *r = &at->rows[i];
            if (strcmp(ser[k].impl, r->impl) || strcmp(ser[k].mode, r->mode) || strcmp(ser[k].dtype, r->dtype) ||
                ser[k].chunk != r->chunk || strcmp(r->status, "ok") != 0)
                continue;
            double frac = !strcmp(r->mode, "decode") ? r->frac_bandwidth : r->frac_fma_peak;
            double mib = (double)r->scratch_peak_bytes / 1048576.0;
            fprintf(f, "%lld\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\n", (long long)r->context, r->median_ms, r->min_ms,
                    r->max_ms, mib > 0 ? mib : NAN, frac * 100, (double)r->work_bytes / 1048576.0);
            tlo = r->median_ms < tlo ? r->median_ms : tlo;
            thi = r->median_ms > thi ? r->median_ms : thi;
            if (mib > 0) {
                slo = mib < slo ? mib : slo;
                shi = mib > shi ? mib : shi;
            }
            clo = (double)r->context < clo ? (double)r->context : clo;
            chi = (double)r->context > chi ? (double)r->context : chi;
            fhi = frac * 100 > fhi ? frac * 100 : fhi;
            rows++;
        }
        if (!rows)
            fputs("nan\tnan\tnan\tnan\tnan\tnan\tnan\n", f);
        fputs("\n\n", f);
    }
    int rc = dclose(f, path, err);
    if (rc)
        return rc;
    if (!isfinite(tlo))
        return K25_OK; /* every setting skipped: the report's table says why */
    const char *labels[64];
    for (int k = 0; k < ns; k++)
        labels[k] = ser[k].label;
    char mach[200];
    snprintf(mach, sizeof(mach), "%d threads, FMA peak %.0f GFLOP/s, STREAM triad %.1f GB/s", at->machine.threads,
             at->machine.fma_peak_gflops, at->machine.triad_gbps);
    static const struct {
        const char *tmpl, *title, *note;
    } plots[] = {
        {"attn_time", "Attention time against context length",
         "Median time of one pass (the whole prompt for prefill, one step for decode); bars span min..max of "
         "the repetitions."},
        {"attn_scratch", "Peak attention scratch memory against context length",
         "Measured peak of the attn_scratch category in one pass; naive attention materializes the score "
         "matrix, chunked and flash2 stay bounded by the chunk/tile."},
        {"attn_roofline", "Fraction of the machine's roofline",
         "Prefill: useful FLOP/s as a fraction of the FMA peak; decode: KV bytes/s as a fraction of the STREAM "
         "triad bandwidth, both measured on this machine in the same run."},
    };
    for (size_t p = 0; p < sizeof(plots) / sizeof(plots[0]); p++) {
        struct k25_plot_job *j = add(pl, plots[p].tmpl, plots[p].tmpl, "attention", plots[p].title, plots[p].note);
        k25_plot_set(j, "DATA", "'data/attn.tsv'");
        k25_plot_set(j, "N", "%d", ns);
        set_labels(j, "LABELS", labels, ns);
        k25_plot_quote(mach, q, sizeof(q));
        k25_plot_set(j, "MACHINE", "%s", q);
        k25_plot_set(j, "LOGX", "%d", wide_range(clo, chi, 7.9) ? 1 : 0);
        k25_plot_set(j, "LOGY", "%d", p == 0   ? wide_range(tlo, thi, 20)
                                      : p == 1 ? wide_range(slo, shi, 20)
                                               : 0);
        k25_plot_set(j, "FMAX", "%.6g", fhi > 0 ? fhi : 1);
    }
    return K25_OK;
}
