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
#include <stdarg.h>
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
    /* whole captions, however long (issue 32: fixed buffers cut them mid-word) */
    p->title = strdup(title);
    p->note = strdup(note ? note : "");
    K25_ASSERT(p->title && p->note);
    char q[sizeof(j->val[0])];
    k25_plot_quote(title, q, sizeof(q));
    k25_plot_set(j, "TITLE", "%s", q);
    return j;
}

void k25_plot_list_free(struct k25_plot_list *pl)
{
    for (int i = 0; i < pl->n; i++) {
        free(pl->plots[i].title);
        free(pl->plots[i].note);
        pl->plots[i].title = pl->plots[i].note = NULL;
    }
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

/* Input-length bucket of n tokens: the smallest power of two >= n (at least 128), as its log2. */
static int len_bucket(int n)
{
    int b = 7;
    while (b < 30 && (1 << b) < n)
        b++;
    return b;
}

/* "<= 2048" / "<= 32k" for a bucket's label. */
static void bucket_label(int b, char *buf, size_t n)
{
    if (b >= 10)
        snprintf(buf, n, "<= %dk", 1 << (b - 10));
    else
        snprintf(buf, n, "<= %d", 1 << b);
}

static double median_of(double *v, size_t n)
{
    if (!n)
        return NAN;
    qsort(v, n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * Throughput against context length (the "throughput decay" curve): per
 * completed request, prefill tokens/s (input tokens over admission to
 * first token) and decode tokens/s (tokens after the first over first
 * token to finish), and the median of each per input-length bucket.
 * Block 0: requests (input, prefill tok/s, decode tok/s); block 1: bucket
 * medians (bucket's median input, prefill, decode, requests).
 */
static int data_tput_len(const struct k25_bench_run *r, const char *plot_dir, const char *prefix,
                         const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    snprintf(name, sizeof(name), "%stput_len.tsv", prefix);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    double *pf = malloc(sizeof(double) * (r->n_reqs + 1) * 3);
    if (!pf) {
        fclose(f);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    double *dc = pf + r->n_reqs + 1, *ln = dc + r->n_reqs + 1;
    size_t k = 0;
    double xmin = INFINITY, xmax = -INFINITY;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const struct k25_bench_req *q = &r->reqs[i];
        if (q->state != K25_REQ_COMPLETED || q->first_ns < 0 || q->admit_ns < 0 || q->first_ns <= q->admit_ns)
            continue;
        double p = q->n_input / ((double)(q->first_ns - q->admit_ns) / 1e9);
        double d = q->n_output > 1 && q->finish_ns > q->first_ns
                       ? (q->n_output - 1) / ((double)(q->finish_ns - q->first_ns) / 1e9)
                       : NAN;
        fprintf(f, "%d\t", q->n_input);
        num(f, p);
        fputc('\t', f);
        num(f, d);
        fputc('\n', f);
        pf[k] = p;
        dc[k] = d;
        ln[k] = q->n_input;
        xmin = q->n_input < xmin ? q->n_input : xmin;
        xmax = q->n_input > xmax ? q->n_input : xmax;
        k++;
    }
    if (!k)
        fputs("nan\tnan\tnan\n", f);
    fputs("\n\n", f);
    /* bucket medians, buckets ascending */
    int nb = 0;
    for (int b = 7; b <= 30; b++) {
        double xs[1024], ps[1024], ds[1024];
        size_t m = 0, md = 0;
        for (size_t i = 0; i < k && m < 1024; i++)
            if (len_bucket((int)ln[i]) == b) {
                xs[m] = ln[i];
                ps[m++] = pf[i];
                if (!isnan(dc[i]))
                    ds[md++] = dc[i];
            }
        if (!m)
            continue;
        size_t nreq = m;
        double mx = median_of(xs, m), mp = median_of(ps, m), mdc = median_of(ds, md);
        num(f, mx);
        fputc('\t', f);
        num(f, mp);
        fputc('\t', f);
        num(f, mdc);
        fprintf(f, "\t%zu\n", nreq);
        nb++;
    }
    if (!nb)
        fputs("nan\tnan\tnan\t0\n", f);
    free(pf);
    int rc = dclose(f, path, err);
    if (rc || !k)
        return rc;
    snprintf(stem, sizeof(stem), "%srun_tput_len", prefix);
    snprintf(title, sizeof(title), "%s: throughput against context length", heading);
    struct k25_plot_job *j =
        add(pl, "run_tput_len", stem, "run", title,
            "Throughput decay: each dot is a request; prefill tokens/s is its input over admission to first token, "
            "decode tokens/s its later tokens over first token to finish; the line joins the medians per "
            "input-length bucket (powers of two). Concurrent requests share the engine, so these are the rates a "
            "request saw, not the engine's total.");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "LOGX", "%d", wide_range(xmin, xmax, 7.9) ? 1 : 0);
    k25_plot_set(j, "HEIGHT", "680");
    return K25_OK;
}

/*
 * Memory jitter: the spread of tracked memory over the timeline, per
 * input-length bucket.  A window counts for a bucket when a request of
 * that bucket was in the engine (admitted, not finished) during it; the
 * warm-up is left out: the --warmup requests never reach the timeline,
 * and each repetition's windows before its first token (the first
 * allocation of activations and KV) are skipped.  Rows: bucket label,
 * windows, mean, stdev, max - min, min, max (MiB); the last row is all
 * windows after warm-up.
 */
static int data_mem_jitter(const struct k25_bench_run *r, const char *plot_dir, const char *prefix,
                           const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    if (r->n_win == 0)
        return K25_OK;
    uint32_t *mask = calloc(r->n_win, sizeof(uint32_t)); /* [window] bit b-7: a request of bucket b ran */
    double *v = malloc(sizeof(double) * r->n_win);
    if (!mask || !v) {
        free(mask);
        free(v);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    int64_t first_tok[K25_BENCH_MAX_REPEAT];
    for (int k = 0; k < K25_BENCH_MAX_REPEAT; k++)
        first_tok[k] = INT64_MAX;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const struct k25_bench_req *q = &r->reqs[i];
        if (q->first_ns >= 0 && q->rep >= 0 && q->rep < K25_BENCH_MAX_REPEAT && q->first_ns < first_tok[q->rep])
            first_tok[q->rep] = q->first_ns;
        if (q->admit_ns < 0)
            continue;
        int64_t end = q->finish_ns > q->admit_ns ? q->finish_ns : q->admit_ns;
        size_t w0 = (size_t)(q->admit_ns / K25_BENCH_WINDOW_NS), w1 = (size_t)(end / K25_BENCH_WINDOW_NS);
        for (size_t w = w0; w <= w1 && w < r->n_win; w++)
            mask[w] |= 1u << (len_bucket(q->n_input) - 7);
    }
    snprintf(name, sizeof(name), "%smem_jitter.tsv", prefix);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f) {
        free(mask);
        free(v);
        return K25_EIO;
    }
    int rows = 0;
    double ymax = 0;
    for (int b = 7; b <= 31; b++) { /* 31: every window after warm-up */
        size_t n = 0;
        for (size_t w = 0; w < r->n_win; w++) {
            const struct k25_bench_window *x = &r->win[w];
            /* after warm-up: windows that start at or after the repetition's first token */
            bool warm = x->rep >= 0 && x->rep < K25_BENCH_MAX_REPEAT && x->t_ns >= first_tok[x->rep];
            if (x->n_waiting < 0 || !warm)
                continue;
            if (b < 31 && !(mask[w] & (1u << (b - 7))))
                continue;
            v[n++] = (double)x->mem_bytes / 1048576.0;
        }
        if (!n)
            continue;
        struct k25_dist d;
        k25_stats_describe(v, n, &d);
        char lab[32];
        if (b < 31)
            bucket_label(b, lab, sizeof(lab));
        else
            snprintf(lab, sizeof(lab), "all");
        ymax = fmax(ymax, d.max - d.min);
        fprintf(f, "%s\t%zu\t", lab, n);
        num(f, d.mean);
        fputc('\t', f);
        num(f, n >= 2 ? d.stdev : 0);
        fputc('\t', f);
        num(f, d.max - d.min);
        fputc('\t', f);
        num(f, d.min);
        fputc('\t', f);
        num(f, d.max);
        fputc('\n', f);
        rows++;
    }
    free(mask);
    free(v);
    int rc = dclose(f, path, err);
    if (rc || !rows)
        return rc;
    snprintf(stem, sizeof(stem), "%srun_mem_jitter", prefix);
    snprintf(title, sizeof(title), "%s: memory jitter per input length", heading);
    struct k25_plot_job *j =
        add(pl, "run_mem_jitter", stem, "run", title,
            "Spread of tracked engine memory over the 100 ms windows after warm-up (from each repetition's first "
            "token), per input-length bucket: a window counts for a bucket when one of its requests was in the "
            "engine. Bars: standard deviation and max - min; 'all' is every window.");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "N", "%d", rows);
    k25_plot_set(j, "YMAX", "%.6g", ymax > 0 ? ymax * 1.25 : 1); /* all flat: a 0..1 MiB axis, not an empty one */
    return K25_OK;
}

/*
 * TTFT by priority class (the elastic queue, issue 17): P50 and P99 of the completed requests of
 * each priority, degraded or not, from the trace's /requests.  Drawn only when the run had more
 * than one class (a plain run has one: its CDF says it all).
 */
static int data_ttft_priority(const struct k25_bench_run *r, const char *plot_dir, const char *prefix,
                              const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    struct k25_dist d[3][2];
    double *v = malloc(sizeof(double) * (r->n_reqs + 1));
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int classes = 0;
    for (int p = 0; p < 3; p++)
        for (int g = 0; g < 2; g++) {
            size_t n = 0;
            for (size_t i = 0; i < r->n_reqs; i++) {
                const struct k25_bench_req *q = &r->reqs[i];
                double t = k25_bench_req_ttft_ms(q);
                if (q->state == K25_REQ_COMPLETED && (int)q->priority == p && (int)q->degraded == g && !isnan(t))
                    v[n++] = t;
            }
            k25_stats_describe(v, n, &d[p][g]);
            classes += n > 0;
        }
    free(v);
    if (classes < 2)
        return K25_OK;
    snprintf(name, sizeof(name), "%sttft_priority.tsv", prefix);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    static const enum k25_priority order[3] = {K25_PRIORITY_HIGH, K25_PRIORITY_STANDARD, K25_PRIORITY_LOW};
    int rows = 0;
    double ymax = 0;
    for (int k = 0; k < 3; k++)
        for (int g = 0; g < 2; g++) {
            const struct k25_dist *x = &d[order[k]][g];
            if (x->n == 0)
                continue;
            fprintf(f, "%s%s\t%lld\t", k25_priority_name(order[k]), g ? "-degraded" : "", (long long)x->n);
            num(f, x->p[0].supported ? x->p[0].value : x->mean); /* one sample: its value */
            fputc('\t', f);
            num(f, x->p[3].supported ? x->p[3].value : x->max); /* the tail: P99, or the max under 100 samples */
            fputc('\t', f);
            num(f, x->max);
            fputc('\n', f);
            ymax = fmax(ymax, x->max);
            rows++;
        }
    int rc = dclose(f, path, err);
    if (rc)
        return rc;
    snprintf(stem, sizeof(stem), "%srun_ttft_priority", prefix);
    snprintf(title, sizeof(title), "%s: TTFT by priority class", heading);
    struct k25_plot_job *j =
        add(pl, "run_ttft_priority", stem, "run", title,
            "Time to first token of the completed requests of each priority, as they ran (a spilled request "
            "runs as low), split by whether they ran on the degraded model: P50 and P99 (the max where the class "
            "has fewer than 100 requests).");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "N", "%d", rows);
    k25_plot_set(j, "YMAX", "%.6g", ymax > 0 ? ymax * 1.2 : 1);
    return K25_OK;
}

/* --- The run's plots, one helper each; each writes its data file under plot_dir, queues its job on pl, and
 * returns K25_OK or the error it set in err (a data file left behind by a failure is never queued). */

/* Latency CDFs of TTFT and E2E (nt >= 1). Sorts ttft and e2e in place. */
static int data_cdfs(double *ttft, size_t nt, double *e2e, size_t ne, const char *plot_dir, const char *prefix,
                     const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char name[128], stem[96], title[200];
    int rc;
    struct k25_dist dt, de;
    k25_stats_describe(ttft, nt, &dt); /* sorts */
    k25_stats_describe(e2e, ne, &de);
    snprintf(name, sizeof(name), "%sttft_cdf.tsv", prefix);
    if ((rc = write_cdf_file(plot_dir, name, ttft, nt, err)))
        return rc;
    snprintf(name, sizeof(name), "%se2e_cdf.tsv", prefix);
    if ((rc = write_cdf_file(plot_dir, name, e2e, ne, err)))
        return rc;
    snprintf(stem, sizeof(stem), "%srun_cdf", prefix);
    snprintf(title, sizeof(title), "%s: latency CDFs", heading);
    struct k25_plot_job *j = add(pl, "run_cdf", stem, "run", title,
                                 "Fraction of requests finished within a latency; dashed lines mark P50, P95 "
                                 "and P99 (only where the sample supports them).");
    k25_plot_set(j, "TTFT_DATA", "'data/%sttft_cdf.tsv'", prefix);
    k25_plot_set(j, "E2E_DATA", "'data/%se2e_cdf.tsv'", prefix);
    set_dist_vars(j, "TTFT", &dt);
    set_dist_vars(j, "E2E", &de);
    return K25_OK;
}

/* Histogram of the inter-token gaps (ni >= 1; sorts itl), on a log axis where they span a wide range. */
static int data_itl_hist(double *itl, size_t ni, const char *plot_dir, const char *prefix, const char *heading,
                         struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    int rc;
    struct k25_dist di;
    k25_stats_describe(itl, ni, &di);
    bool logx = wide_range(di.min, di.max, 30);
    int nb = (int)sqrt((double)ni);
    nb = nb < 10 ? 10 : (nb > 60 ? 60 : nb);
    double lo = di.min, hi = di.max;
    if (hi <= lo)
        hi = lo + (lo > 0 ? lo * 0.1 : 1);
    int *cnt = calloc((size_t)nb, sizeof(int));
    if (!cnt)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
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
        return K25_EIO;
    }
    for (int b = 0; b < nb; b++) {
        double e0 = logx ? exp(log(lo) + (log(hi) - log(lo)) * b / nb) : lo + (hi - lo) * b / nb;
        double e1 = logx ? exp(log(lo) + (log(hi) - log(lo)) * (b + 1) / nb) : lo + (hi - lo) * (b + 1) / nb;
        fprintf(f, "%.9g\t%.9g\t%.9g\t%d\n", logx ? sqrt(e0 * e1) : (e0 + e1) / 2, e0, e1, cnt[b]);
    }
    free(cnt);
    if ((rc = dclose(f, path, err)))
        return rc;
    snprintf(stem, sizeof(stem), "%srun_itl_hist", prefix);
    snprintf(title, sizeof(title), "%s: inter-token latency", heading);
    struct k25_plot_job *j = add(pl, "run_itl_hist", stem, "run", title,
                                 "Gaps between consecutive tokens of a request; a second mode far right is "
                                 "decode steps stalled behind other requests' prefill chunks.");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    set_dist_vars(j, "ITL", &di);
    k25_plot_set(j, "LOGY", "%d", maxc > 50 ? 1 : 0);
    return K25_OK;
}

/*
 * Least squares y = a + b x with a >= 0 and b >= 0, from the sums (n
 * points): the unconstrained fit when both come out non-negative, else the
 * better of the two one-parameter fits on the boundary (through the origin:
 * a = 0; flat: b = 0), which is where the constrained optimum of a convex
 * quadratic lies.  r2 = 1 - SSE / SST of the fit chosen (NaN when y is
 * constant).
 */
void k25_report_fit_nonneg(double sx, double sy, double sxx, double sxy, double syy, double n, double *a, double *b,
                           double *r2)
{
    double den = n * sxx - sx * sx;
    double ua = NAN, ub = NAN;
    if (den > 0) {
        ub = (n * sxy - sx * sy) / den;
        ua = (sy - ub * sx) / n;
    }
    /* SSE of y = A + B x from the sums */
#define SSE(A, B) (syy - 2 * (A) * sy - 2 * (B) * sxy + n * (A) * (A) + 2 * (A) * (B) * sx + (B) * (B) * sxx)
    if (ua >= 0 && ub >= 0) {
        *a = ua;
        *b = ub;
    } else {
        double b0 = sxx > 0 ? fmax(sxy / sxx, 0) : 0; /* a = 0 */
        double a1 = fmax(sy / n, 0);                  /* b = 0 */
        if (SSE(0, b0) <= SSE(a1, 0)) {
            *a = 0;
            *b = b0;
        } else {
            *a = a1;
            *b = 0;
        }
    }
    double sst = syy - sy * sy / n;
    *r2 = sst > 0 ? 1 - SSE(*a, *b) / sst : NAN;
#undef SSE
}

/* TTFT against input length, each completed request a dot, with the non-negative least-squares line. */
static int data_ttft_len(const struct k25_bench_run *r, const char *plot_dir, const char *prefix,
                         const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200], q[900];
    int rc;
    FILE *f;
    snprintf(name, sizeof(name), "%sttft_len.tsv", prefix);
    if (!(f = dopen(plot_dir, name, path, sizeof(path), err)))
        return K25_EIO;
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
        return rc;
    double a = NAN, b = NAN, r2 = NAN;
    if (k >= 3 && xmax > xmin)
        k25_report_fit_nonneg(sx, sy, sxx, sxy, syy, (double)k, &a, &b, &r2);
    snprintf(stem, sizeof(stem), "%srun_ttft_len", prefix);
    snprintf(title, sizeof(title), "%s: TTFT against input length", heading);
    struct k25_plot_job *j = add(pl, "run_ttft_len", stem, "run", title,
                                 "Each dot is a request; the line is a least-squares fit TTFT = a + b x input "
                                 "tokens with a and b at least 0 (a fixed overhead and a prefill cost per token "
                                 "cannot be negative). Where R2 is low, TTFT here depends on more than the input "
                                 "length (queueing behind other requests, mostly): read the dots, not the line.");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    char fa[64], fb[64], fit[400];
    k25_plot_set(j, "FIT_A", "%s", gnum(a, fa, sizeof(fa)));
    k25_plot_set(j, "FIT_B", "%s", gnum(b, fb, sizeof(fb)));
    k25_plot_set(j, "XMIN", "%.9g", isfinite(xmin) ? xmin : 0);
    k25_plot_set(j, "XMAX", "%.9g", isfinite(xmax) ? xmax : 1);
    if (!isnan(b))
    {
        char fa2[64], fb2[64]; /* plain decimals: "1170 ms per 1k", never "1.17e+03" */
        k25_report_fmt(a, fa2, sizeof(fa2));
        k25_report_fmt(b * 1000, fb2, sizeof(fb2));
        snprintf(fit, sizeof(fit), "%s: TTFT = %s ms + %s ms per 1k input tokens (R2 = %.2f, %zu requests)",
                 !(r2 >= 0.5) ? "poor fit, input length explains little" : "fit", fa2, fb2, isnan(r2) ? 0 : r2, k);
    }
    else
        snprintf(fit, sizeof(fit), "no trend fitted (%zu requests, %s)", k,
                 k < 3 ? "fewer than 3" : "one input length");
    k25_plot_quote(fit, q, sizeof(q));
    k25_plot_set(j, "FIT_NOTE", "%s", q);
    k25_plot_set(j, "LOGX", "%d", wide_range(xmin, xmax, 30) ? 1 : 0);
    return K25_OK;
}

/* The engine timeline (r->n_win >= 1): queue, running, KV blocks, busy fraction, memory, offered load and the
 * elastic queue per 100 ms window. */
static int data_timeline(const struct k25_bench_run *r, const char *plot_dir, const char *prefix,
                         const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    int rc;
    FILE *f;
    snprintf(name, sizeof(name), "%stimeline.tsv", prefix);
    if (!(f = dopen(plot_dir, name, path, sizeof(path), err)))
        return K25_EIO;
    /* the offered load beside the queue: arrivals per window, as requests/s */
    int64_t *arr = calloc(r->n_win + 1, sizeof(int64_t));
    if (!arr) {
        fclose(f);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    bool queue = false;    /* schema 3: the elastic queue was sampled */
    bool degraded = false; /* schema 5: so was the degraded queue's depth */
    for (size_t i = 0; i < r->n_reqs; i++) {
        int64_t a = r->reqs[i].arrival_ns;
        if (a >= 0 && (size_t)(a / K25_BENCH_WINDOW_NS) < r->n_win)
            arr[a / K25_BENCH_WINDOW_NS]++;
    }
    int n_spill = 0, n_breaker = 0, n_degq = 0; /* windows where each was in use: only those are drawn */
    for (size_t w = 0; w < r->n_win; w++) {
        queue = queue || r->win[w].n_waiting_memory >= 0;
        degraded = degraded || r->win[w].n_waiting_degraded >= 0;
        n_spill += r->win[w].n_waiting_memory >= 0 && r->win[w].n_waiting_spill > 0;
        n_breaker += r->win[w].n_waiting_memory >= 0 && r->win[w].breaker_open > 0;
        n_degq += r->win[w].n_waiting_degraded > 0;
    }
    for (size_t w = 0; w < r->n_win; w++) {
        const struct k25_bench_window *x = &r->win[w];
        bool st = x->n_waiting >= 0, qs = x->n_waiting_memory >= 0;
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
        fputc('\t', f);
        num(f, x->len_ns > 0 ? (double)arr[w] * 1e9 / (double)K25_BENCH_WINDOW_NS : NAN);
        fputc('\t', f);
        num(f, qs ? x->n_waiting_memory : NAN);
        fputc('\t', f);
        num(f, qs ? x->n_waiting_spill : NAN);
        fputc('\t', f);
        num(f, qs ? x->breaker_open : NAN);
        fputc('\t', f);
        num(f, st && x->n_waiting_degraded >= 0 ? x->n_waiting_degraded : NAN);
        fputc('\n', f);
    }
    free(arr);
    if ((rc = dclose(f, path, err)))
        return rc;
    snprintf(stem, sizeof(stem), "%srun_timeline", prefix);
    snprintf(title, sizeof(title), "%s: engine timeline (100 ms windows)", heading);
    char note[900];
    size_t u = (size_t)snprintf(note, sizeof(note),
                                "Requests waiting and running, KV blocks in use with tracked memory, the engine's "
                                "busy fraction (the shaded band is the healthy 0.75-0.85), and the request rate "
                                "against the elastic queue's memory queue");
    if (queue) {
        u += (size_t)snprintf(note + u, sizeof(note) - u, "%s%s%s.", n_spill ? ", the spill queue (disk)" : "",
                              n_degq ? ", the degraded queue" : "",
                              n_breaker ? " and the circuit breaker (shaded while open)" : "");
        const char *unused[3];
        int nu = 0;
        if (!n_spill)
            unused[nu++] = "the spill queue (it never held a request)";
        if (degraded && !n_degq)
            unused[nu++] = "the degraded queue (it never held a request)";
        if (!n_breaker)
            unused[nu++] = "the circuit breaker (it never opened)";
        for (int k = 0; k < nu && u < sizeof(note); k++)
            u += (size_t)snprintf(note + u, sizeof(note) - u, "%s%s%s", k ? (k == nu - 1 ? " and " : ", ")
                                                                          : " Not drawn, unused in this run: ",
                                  unused[k], k == nu - 1 ? "." : "");
    } else {
        snprintf(note + u, sizeof(note) - u, " (not sampled by this older trace: the request rate alone).");
    }
    struct k25_plot_job *j = add(pl, "run_timeline", stem, "run", title, note);
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "QUEUE", "%d", queue ? 1 : 0);
    k25_plot_set(j, "DEGRADED", "%d", queue && degraded && n_degq ? 1 : 0);
    k25_plot_set(j, "N_SPILL", "%d", n_spill);
    k25_plot_set(j, "N_BREAKER", "%d", n_breaker);
    k25_plot_set(j, "WIDTH", "1040");
    k25_plot_set(j, "HEIGHT", "960");
    return K25_OK;
}

int k25_report_data_run(const struct k25_report_run *run, const char *plot_dir, const char *prefix,
                        const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    const struct k25_bench_run *r = &run->t.run;
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
    /* nothing completed: there is no latency to draw, only the timeline */
    if (nt > 0) {
        if ((rc = data_cdfs(ttft, nt, e2e, ne, plot_dir, prefix, heading, pl, err)))
            goto out;
        if (ni > 0 && (rc = data_itl_hist(itl, ni, plot_dir, prefix, heading, pl, err)))
            goto out;
        if ((rc = data_ttft_len(r, plot_dir, prefix, heading, pl, err)))
            goto out;
        if ((rc = data_tput_len(r, plot_dir, prefix, heading, pl, err)))
            goto out;
    }
    if (r->n_win > 0) {
        if ((rc = data_timeline(r, plot_dir, prefix, heading, pl, err)))
            goto out;
        if ((rc = data_mem_jitter(r, plot_dir, prefix, heading, pl, err)))
            goto out;
    }
    if ((rc = data_ttft_priority(r, plot_dir, prefix, heading, pl, err)))
        goto out;
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

/* The TTFT and E2E CDFs of every run, one curve each, in one plot.  K25_EIO, K25_ENOMEM. */
static int compare_cdfs(const struct k25_report_run *runs, int n, const char *const *labels, const char *plot_dir,
                        const char *prefix, const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    int rc = K25_OK;
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
    return K25_OK;
}

/*
 * The headline ratios to the first run, each with its 95% interval where
 * the run has one: lower-is-better figures left of a divider,
 * higher-is-better right of it.  K25_EIO.
 */
static int compare_ratios(const struct k25_report_run *runs, int n, const char *const *labels, const char *plot_dir,
                          const char *prefix, const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[200];
    int rc;
    static const struct {
        const char *label, *metric, *ci; /* ci: the interval's key beside the figure, NULL: none */
        bool lower_better;
    } heads[] = {
        {"TTFT P50", "ttft_ms.p50", "p50_ci95", true},   {"TTFT P90", "ttft_ms.p90", "p90_ci95", true},
        {"E2E P50", "e2e_ms.p50", "p50_ci95", true},     {"TPOT P50", "tpot_ms.p50", "p50_ci95", true},
        {"ITL P50", "itl_ms.p50", "p50_ci95", true},     {"ITL P99", "itl_ms.p99", "p99_ci95", true},
        {"peak memory", "memory.peak_tracked_bytes", NULL, true},
        {"output tok/s", "output_tok_per_s", NULL, false}, {"requests/s", "requests_per_s", NULL, false},
    };
    enum { NH = sizeof(heads) / sizeof(heads[0]) };
    int n_lower = 0;
    for (int h = 0; h < NH; h++)
        n_lower += heads[h].lower_better;
    snprintf(name, sizeof(name), "%scmp_ratio.tsv", prefix);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    /* one row per (figure, run >= 2): x position, ratio, lo, hi, better (1) / worse (-1) / same (0), label */
    double ymax = 1.2;
    int n_side[3] = {0, 0, 0}, n_ci = 0; /* bars worse / same / better, and with an interval */
    for (int h = 0; h < NH; h++) {
        double base = NAN;
        for (int i = 0; i < n; i++) {
            const json_t *s = json_object_get(runs[i].summary, "summary");
            if (!s)
                s = runs[i].summary;
            const json_t *v = k25_json_path(s, heads[h].metric);
            double x = json_is_number(v) ? json_number_value(v) : NAN, lo = NAN, hi = NAN;
            if (heads[h].ci) {
                char key[64];
                snprintf(key, sizeof(key), "%s", heads[h].metric);
                char *dot = strchr(key, '.');
                if (dot)
                    snprintf(dot + 1, sizeof(key) - (size_t)(dot + 1 - key), "%s", heads[h].ci);
                const json_t *ci = k25_json_path(s, key);
                if (json_is_number(json_array_get(ci, 0)) && json_is_number(json_array_get(ci, 1))) {
                    lo = json_number_value(json_array_get(ci, 0));
                    hi = json_number_value(json_array_get(ci, 1));
                }
            }
            if (i == 0) {
                base = x;
                continue;
            }
            double r = base > 0 ? x / base : NAN, rlo = base > 0 ? lo / base : NAN, rhi = base > 0 ? hi / base : NAN;
            /* better / worse: which side of 1, and whether the run's own interval leaves 1 out */
            int side = isnan(r) || fabs(r - 1) <= K25_REPORT_SAME_TOL ? 0 : ((r < 1) == heads[h].lower_better ? 1 : -1);
            if (!isnan(rlo) && !isnan(rhi) && rlo <= 1 && rhi >= 1)
                side = 0;
            double width = 0.8 / (n - 1);
            fprintf(f, "%.6g\t", h + (h >= n_lower ? 0.6 : 0) - 0.4 + width * (i - 0.5));
            num(f, r);
            fputc('\t', f);
            num(f, rlo);
            fputc('\t', f);
            num(f, rhi);
            fprintf(f, "\t%d\t%d\t%.6g\n", side, i, width * 0.9);
            if (!isnan(r)) {
                n_side[side + 1]++;
                n_ci += !isnan(rlo) && !isnan(rhi);
            }
            if (isfinite(r))
                ymax = fmax(ymax, r * 1.15);
            if (isfinite(rhi))
                ymax = fmax(ymax, fmin(rhi, r * 3) * 1.05);
        }
    }
    if ((rc = dclose(f, path, err)))
        return rc;
    snprintf(stem, sizeof(stem), "%scmp_ratio", prefix);
    snprintf(title, sizeof(title), "%s: headline figures relative to %s", heading, runs[0].label);
    struct k25_plot_job *j = add(pl, "cmp_ratio", stem, "comparison", title,
            "Each run's figure divided by the first run's. Left of the divider lower is better (latency, memory), "
            "right of it higher is better (throughput). Green: better, red: worse, grey: within +-2% of the first "
            "run, or the run's own 95% interval (error bar, percentiles only) holds 1, so no difference is shown. "
            "Missing bars: the figure is unsupported for that run's sample.");
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "N", "%d", n);
    set_labels(j, "LABELS", labels, n);
    {
        char t[1024];
        size_t u = (size_t)snprintf(t, sizeof(t), "(");
        for (int h = 0; h < NH && u < sizeof(t); h++)
            u += (size_t)snprintf(t + u, sizeof(t) - u, "%s'%s' %.3g", h ? ", " : "", heads[h].label,
                                  h + (h >= n_lower ? 0.6 : 0));
        if (u < sizeof(t))
            snprintf(t + u, sizeof(t) - u, ")");
        k25_plot_set(j, "XTICS", "%s", t);
    }
    k25_plot_set(j, "N_WORSE", "%d", n_side[0]);
    k25_plot_set(j, "N_SAME", "%d", n_side[1]);
    k25_plot_set(j, "N_BETTER", "%d", n_side[2]);
    k25_plot_set(j, "N_CI", "%d", n_ci);
    k25_plot_set(j, "DIVIDER", "%.3g", n_lower - 0.2);
    k25_plot_set(j, "XMAX", "%.3g", NH - 1 + 0.6 + 0.6);
    k25_plot_set(j, "YMAX", "%.4g", ymax);
    return K25_OK;
}
int k25_report_data_compare(const struct k25_report_run *runs, int n, const char *plot_dir, const char *prefix,
                            const char *heading, struct k25_plot_list *pl, struct k25_error *err)
{
    const char *labels[64];
    int rc;
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++)
        labels[i] = runs[i].label;
    if ((rc = compare_cdfs(runs, n, labels, plot_dir, prefix, heading, pl, err)) != K25_OK)
        return rc;
    return compare_ratios(runs, n, labels, plot_dir, prefix, heading, pl, err);
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

/* Do p and the point at index `at` agree on every axis but the listed ones? */
static bool others_at(const struct k25_report_sweep *s, int at, const struct k25_report_point *p, int a, int b)
{
    const struct k25_report_point *o = &s->pts[at];
    for (int k = 0; k < s->n_axes; k++)
        if (k != a && k != b && strcmp(p->value[k], o->value[k]) != 0)
            return false;
    return true;
}

static bool others_at_best(const struct k25_report_sweep *s, const struct k25_report_point *p, int a, int b)
{
    return others_at(s, s->best, p, a, b);
}

/* Points with a measured objective on the line along axis a through point `at`. */
static int line_points(const struct k25_report_sweep *s, int at, int a)
{
    int n = 0;
    for (int i = 0; i < s->n_pts; i++)
        n += others_at(s, at, &s->pts[i], a, a) && !isnan(metric(&s->pts[i], s->objective));
    return n;
}

/* Says why a plot the reader expects is not drawn (listed under the section's plots). */
static void skip_note(struct k25_plot_list *pl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void skip_note(struct k25_plot_list *pl, const char *fmt, ...)
{
    if (pl->n_skipped >= K25_REPORT_MAX_SKIPPED)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pl->skipped[pl->n_skipped++], sizeof(pl->skipped[0]), fmt, ap);
    va_end(ap);
}

/*
 * Can p be told apart from the anchor (best) point?  The sweep analysis's
 * own rule (docs/sweeps.md), applied to p against the anchor instead of
 * the reference: rep k of one against rep k of the other (the same
 * interleaved round), Student-t interval of the mean log ratio (of the
 * difference when a value is <= 0) at the analysis's family-wise level.
 * True when the interval holds "no change", or with fewer than two pairs
 * (nothing tells them apart then).
 */
static bool same_as_best(const struct k25_report_sweep *s, const struct k25_report_point *p,
                         const struct k25_report_point *best)
{
    double x[64], y[64], d[64];
    int n = 0;
    bool positive = true;
    for (size_t k = 0; k < json_array_size(p->obj_by_rep) && n < 64; k++) {
        const json_t *a = json_array_get(p->obj_by_rep, k), *b = json_array_get(best->obj_by_rep, k);
        if (!json_is_number(a) || !json_is_number(b))
            continue;
        x[n] = json_number_value(a);
        y[n] = json_number_value(b);
        positive = positive && x[n] > 0 && y[n] > 0;
        n++;
    }
    for (int i = 0; i < n; i++)
        d[i] = positive ? log(x[i] / y[i]) : x[i] - y[i];
    if (n < 2)
        return true;
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++)
        mean += d[i] / n;
    for (int i = 0; i < n; i++)
        ss += (d[i] - mean) * (d[i] - mean);
    double alpha = (1 - s->confidence) / (s->comparisons > 0 ? s->comparisons : 1);
    double half = k25_stats_t_quantile(n - 1, 1 - alpha / 2) * sqrt(ss / (n - 1)) / sqrt(n);
    return mean - half <= 0 && mean + half >= 0;
}

/* p's paired ratio to the reference and its interval (NaN when not compared; 1 for the reference). */
static void ref_ratio(const struct k25_report_point *p, double *r, double *lo, double *hi)
{
    *r = *lo = *hi = NAN;
    if (p->reference) {
        *r = 1;
        return;
    }
    const json_t *ci = json_object_get(p->vs_ref, "ratio_ci");
    const json_t *x = json_object_get(p->vs_ref, "ratio");
    if (json_is_number(x))
        *r = json_number_value(x);
    if (json_is_number(json_array_get(ci, 0)) && json_is_number(json_array_get(ci, 1))) {
        *lo = json_number_value(json_array_get(ci, 0));
        *hi = json_number_value(json_array_get(ci, 1));
    }
}

/*
 * The heatmap of the objective over axes a x b (the other axes at the
 * leader), coloured by significance and magnitude (issue 32): a cell whose
 * paired interval against the reference leaves 1 out is coloured by its
 * ratio on a fixed scale (saturating at x1/K25_HEAT_SPAN and x K25_HEAT_SPAN,
 * never fitted to the data's extremes, so a colour means the same in every
 * report); a cell whose interval holds 1, or that has no interval (one
 * repetition), is neutral, because no difference was shown; the reference
 * is neutral by definition.  Cells of the grid that were not run, or ran
 * without a result, are drawn blank and labelled so.  No plot when neither
 * axis has two values or no cell was measured; K25_EIO when its data file
 * cannot be written.
 */
#define K25_HEAT_SPAN 1.5

enum heat_state { HEAT_SIG, HEAT_NS, HEAT_NOT_COMPARED, HEAT_REF, HEAT_NOT_RUN, HEAT_NO_RESULT };

static int sweep_heatmap(const struct k25_report_sweep *s, int a, int b, const char *plot_dir,
                         struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[512], q[600];
    static char vals[2][64][128];
    bool numeric[2];
    int rc;
    int na = axis_values(s, a, vals[0], 64, &numeric[0]);
    int nb = axis_values(s, b, vals[1], 64, &numeric[1]);
    if (na < 2 && nb < 2)
        return K25_OK;
    snprintf(name, sizeof(name), "heat_%d_%d.tsv", a, b);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    /* rows: x, y, objective, feasible, ratio, lo, hi, same as leader, reference, leader, colour, state */
    int cells = 0, n_state[6] = {0}, n_same = 0;
    static bool seen[64][64];
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < s->n_pts; i++) {
        const struct k25_report_point *p = &s->pts[i];
        if (!others_at_best(s, p, a, b))
            continue;
        int x = index_of(vals[0], na, p->value[a]), y = index_of(vals[1], nb, p->value[b]);
        if (x < 0 || y < 0 || seen[x][y])
            continue;
        seen[x][y] = true;
        double v = metric(p, s->objective), r, rlo, rhi;
        ref_ratio(p, &r, &rlo, &rhi);
        enum heat_state st = isnan(v)           ? HEAT_NO_RESULT
                             : p->reference     ? HEAT_REF
                             : isnan(r)         ? HEAT_NOT_COMPARED
                             : isnan(rlo) || isnan(rhi) || (rlo <= 1 && rhi >= 1) ? HEAT_NS
                                                                                  : HEAT_SIG;
        bool same = st != HEAT_NO_RESULT && i != s->best && same_as_best(s, p, &s->pts[s->best]);
        double colour = st == HEAT_SIG ? fmin(fmax(r, 1 / K25_HEAT_SPAN), K25_HEAT_SPAN) : NAN;
        fprintf(f, "%d\t%d\t", x, y);
        num(f, v);
        fprintf(f, "\t%d\t", p->feasible ? 1 : 0);
        num(f, r);
        fputc('\t', f);
        num(f, rlo);
        fputc('\t', f);
        num(f, rhi);
        fprintf(f, "\t%d\t%d\t%d\t", same ? 1 : 0, p->reference ? 1 : 0, i == s->best ? 1 : 0);
        num(f, colour);
        fprintf(f, "\t%d\n", (int)st);
        n_state[st]++;
        n_same += same;
        cells += st != HEAT_NO_RESULT;
    }
    /* the grid's cells no point filled: blank, labelled */
    for (int x = 0; x < na && x < 64; x++)
        for (int y = 0; y < nb && y < 64; y++)
            if (!seen[x][y]) {
                fprintf(f, "%d\t%d\tnan\t0\tnan\tnan\tnan\t0\t0\t0\tnan\t%d\n", x, y, (int)HEAT_NOT_RUN);
                n_state[HEAT_NOT_RUN]++;
            }
    if ((rc = dclose(f, path, err)))
        return rc;
    if (!cells)
        return K25_OK;
    const char *lead = s->significant ? "best" : s->best == s->reference ? "reference (best mean)" : "best-mean";
    snprintf(stem, sizeof(stem), "sweep_heatmap_%d_%d", a, b);
    k25_report_sfmt(title, sizeof(title), "%s over %s x %s", s->objective, s->axis[a], s->axis[b]);
    char *note = NULL;
    if (asprintf(&note,
                 "Each cell is a grid point with the other axes at the %s point's values, and gives the objective "
                 "and its paired ratio to the reference (the defaults) with the ratio's 95%% family-wise interval. "
                 "Colour shows only what the sweep told apart: a cell whose interval leaves 1 out is green (better) "
                 "or red (worse), deeper as the ratio moves from 1, full at x%.3g or x%.3g and beyond (a fixed "
                 "scale, the same in every report); a cell whose interval holds 1 (or has none, with one "
                 "repetition) is pale grey and marked n.s.: no difference was shown.%s%s%s",
                 lead, 1 / K25_HEAT_SPAN, K25_HEAT_SPAN,
                 n_same ? " Hatched cells cannot be told apart from the framed point either (the sweep's paired "
                          "rule, docs/sweeps.md)."
                        : "",
                 n_state[HEAT_NOT_COMPARED] ? " Darker grey: not compared (no paired repetition)." : "",
                 n_state[HEAT_NOT_RUN] || n_state[HEAT_NO_RESULT] ? " White cells were not run, or ran without a "
                                                                    "result, and say so."
                                                                  : "") < 0)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    struct k25_plot_job *j = add(pl, "sweep_heatmap", stem, "sweep", title, note);
    free(note);
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
    char cbl[200];
    k25_report_sfmt(cbl, sizeof(cbl), "%s / reference, where the interval leaves 1 out (log scale)", s->objective);
    k25_plot_quote(cbl, q, sizeof(q));
    k25_plot_set(j, "CBLABEL", "%s", q);
    k25_plot_set(j, "SPAN", "%.6g", K25_HEAT_SPAN);
    k25_plot_set(j, "N_SIG", "%d", n_state[HEAT_SIG]);
    k25_plot_set(j, "N_NS", "%d", n_state[HEAT_NS] + n_state[HEAT_REF]);
    k25_plot_set(j, "N_NC", "%d", n_state[HEAT_NOT_COMPARED]);
    k25_plot_set(j, "N_BLANK", "%d", n_state[HEAT_NOT_RUN] + n_state[HEAT_NO_RESULT]);
    k25_plot_set(j, "N_SAME", "%d", n_same);
    k25_plot_set(j, "BEST_X", "%d", index_of(vals[0], na, s->pts[s->best].value[a]));
    k25_plot_set(j, "BEST_Y", "%d", index_of(vals[1], nb, s->pts[s->best].value[b]));
    k25_plot_quote(s->significant ? "best" : s->best == s->reference ? "reference (best mean)"
                                                                    : "best mean (not significant)",
                   q, sizeof(q));
    k25_plot_set(j, "BEST_NAME", "%s", q);
    /* green = better, whichever way the objective goes */
    k25_plot_set(j, "PALETTE", "%s",
                 s->maximize ? "(0 '#d73027', 0.5 '#f7f7f7', 1 '#1a9850')"
                             : "(0 '#1a9850', 0.5 '#f7f7f7', 1 '#d73027')");
    return K25_OK;
}

/* The Pareto plot: the objective against fidelity KL (else peak memory), marker size by memory.  K25_EIO. */
static int sweep_pareto(const struct k25_report_sweep *s, const char *ol, const char *plot_dir,
                        struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], title[256], q[300];
    int rc;
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
                                  "memory at once); the star is the point the report anchors on."
                                : "Fidelity was not measured in this sweep, so the front is the objective against "
                                  "peak memory (marker size grows with memory too): the line joins the points no "
                                  "other point beats on both; the star is the point the report anchors on.");
        k25_plot_set(j, "DATA", "'data/pareto.tsv'");
        int n_infeas = 0;
        for (int i = 0; i < s->n_pts; i++)
            n_infeas += !s->pts[i].feasible && !isnan(metric(&s->pts[i], xm)) && !isnan(metric(&s->pts[i], s->objective));
        k25_plot_set(j, "N_INFEAS", "%d", n_infeas);
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
        k25_plot_quote(s->significant ? "best (significant)"
                       : s->best == s->reference ? "reference (best mean)"
                                                 : "best mean (not significant)",
                       q, sizeof(q));
        k25_plot_set(j, "BEST_NAME", "%s", q);
    }
    return K25_OK;
}

/*
 * The objective along axis a through the best point; where that line holds
 * one point (the best is the reference, off the grid), through the grid
 * point with the most neighbours along the axis.  A skip note when the axis
 * has one value or no two points differ in it alone.  K25_EIO.
 */
static int sweep_axis(const struct k25_report_sweep *s, int a, const char *ol, const char *plot_dir,
                      struct k25_plot_list *pl, struct k25_error *err)
{
    char path[PATH_MAX + 256], name[128], stem[96], title[640], q[300];
    static char vals[2][64][128];
    bool numeric[2];
    int rc;
    int na = axis_values(s, a, vals[0], 64, &numeric[0]);
    if (na < 2) {
        skip_note(pl, "%s: no plot along this axis: the sweep ran one value of it (%s)", s->axis[a], vals[0][0]);
        return K25_OK;
    }
    int at = s->best, most = line_points(s, s->best, a);
    for (int i = 0; i < s->n_pts && most < 2; i++) {
        int m = line_points(s, i, a);
        if (m > most) {
            most = m;
            at = i;
        }
    }
    if (most < 2) {
        skip_note(pl, "%s: no plot along this axis: no two measured points differ in it alone", s->axis[a]);
        return K25_OK;
    }
    snprintf(name, sizeof(name), "axis_%d.tsv", a);
    FILE *f = dopen(plot_dir, name, path, sizeof(path), err);
    if (!f)
        return K25_EIO;
    double xlo = INFINITY, xhi = -INFINITY;
    int rows = 0, n_infeas = 0, n_best = 0, n_ci = 0;
    for (int k = 0; k < na; k++)
        for (int i = 0; i < s->n_pts; i++) {
            const struct k25_report_point *p = &s->pts[i];
            if (strcmp(p->value[a], vals[0][k]) != 0 || !others_at(s, at, p, a, a))
                continue;
            double x = numeric[0] ? strtod(vals[0][k], NULL) : k, y = metric(p, s->objective);
            if (isnan(y))
                continue;
            xlo = x < xlo ? x : xlo;
            xhi = x > xhi ? x : xhi;
            fprintf(f, "%.9g\t%.9g\t", x, y);
            /* a t interval of three noisy means can reach below 0; the metric cannot */
            num(f, fmax(metric_ci(p, s->objective, 0), 0));
            fputc('\t', f);
            num(f, metric_ci(p, s->objective, 1));
            fprintf(f, "\t%d\t%d\n", p->feasible ? 1 : 0, i == s->best ? 1 : 0);
            n_infeas += !p->feasible;
            n_ci += !isnan(metric_ci(p, s->objective, 0)) && !isnan(metric_ci(p, s->objective, 1));
            n_best += i == s->best;
            rows++;
        }
    if ((rc = dclose(f, path, err)))
        return rc;
    if (rows < 2)
        return K25_OK;
    snprintf(stem, sizeof(stem), "sweep_axis_%d", a);
    const char *lead = s->significant ? "best" : s->best == s->reference ? "reference (best-mean)" : "best-mean";
    if (at == s->best || s->n_axes < 2) {
        k25_report_sfmt(title, sizeof(title), "%s along %s (other axes at the %s point)", s->objective, s->axis[a],
                        lead);
    } else {
        char others[400] = "";
        size_t u = 0;
        for (int k = 0; k < s->n_axes && u < sizeof(others); k++)
            if (k != a)
                u += (size_t)snprintf(others + u, sizeof(others) - u, "%s%s=%s", u ? ", " : "", s->axis[k],
                                      s->pts[at].value[k]);
        k25_report_sfmt(title, sizeof(title), "%s along %s (at %s: the %s point has no neighbour on this axis)",
                        s->objective, s->axis[a], others, lead);
    }
    char note[600];
    snprintf(note, sizeof(note),
             "The objective as one axis moves and the others stay at the %s point; error bars are 95%% intervals "
             "over repetitions (none with one repetition), cut at 0; hollow markers are infeasible points, the "
             "star is the %s point.",
             at == s->best ? lead : "plotted line's", lead);
    struct k25_plot_job *j = add(pl, "sweep_axis", stem, "sweep", title, note);
    k25_plot_set(j, "DATA", "'data/%s'", name);
    k25_plot_set(j, "N_INFEAS", "%d", n_infeas);
    k25_plot_set(j, "N_BEST", "%d", n_best);
    k25_plot_quote(s->significant ? "best" : s->best == s->reference ? "reference (best mean)"
                                                                    : "best mean (not significant)",
                   q, sizeof(q));
    k25_plot_set(j, "BEST_NAME", "%s", q);
    k25_plot_set(j, "N_CI", "%d", n_ci);
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
    return K25_OK;
}

int k25_report_data_sweep(const struct k25_report_sweep *s, const char *plot_dir, struct k25_plot_list *pl,
                          struct k25_error *err)
{
    char ol[128];
    int rc = K25_OK;
    k25_report_metric_label(s->objective, ol, sizeof(ol));
    /* one leader for the text and every plot (report_input.c): the significant best, else the best mean
       among the feasible points, the reference included */
    int anchor = s->best >= 0 ? s->best : s->leader;
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
    /* heatmaps over each pair of axes, the Pareto front, then one line per axis */
    for (int a = 0; a < s->n_axes; a++)
        for (int b = a + 1; b < s->n_axes && pl->n < K25_REPORT_MAX_PLOTS - 8; b++)
            if ((rc = sweep_heatmap(s, a, b, plot_dir, pl, err)) != K25_OK)
                return rc;
    if ((rc = sweep_pareto(s, ol, plot_dir, pl, err)) != K25_OK)
        return rc;
    for (int a = 0; a < s->n_axes && pl->n < K25_REPORT_MAX_PLOTS - 1; a++)
        if ((rc = sweep_axis(s, a, ol, plot_dir, pl, err)) != K25_OK)
            return rc;
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
