/*
 * csv.c - one CSV row per request of a `k25 bench` run (`--csv FILE`),
 * for spreadsheets and pandas: the same records the trace's /requests
 * table holds (trace.c), with the per-request metrics of metrics.c, so a
 * figure in the CSV is the figure in the trace.
 *
 * RFC 4180: a header row, CRLF line ends, a field holding a comma, a
 * double quote, CR or LF enclosed in double quotes with its quotes
 * doubled.  Times are milliseconds from the run's origin; a value that
 * does not exist (no first token, TPOT of a one-token answer) is an empty
 * field, never 0 or NaN.  The file is written through k25_afile: under
 * PATH.tmp.PID, renamed onto PATH when complete.
 *
 * Columns added later are appended after meets_slo, so a column keeps its
 * position: the elastic queue's (priority ... ttft_sla_ms) and prefix
 * caching's and the KV tiers' (cached_tokens ... kv_tier_bytes_moved),
 * named and valued as in the trace's /requests (docs/trace-schema.md; the
 * flags as true/false like meets_slo, the tiers' wait in nanoseconds).
 */
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const csv_header[] = {
    "id", "rep", "seq", "user", "line", "state", "reason", "input_tokens", "output_tokens", "max_new_tokens",
    "prefill_chunks", "arrival_ms", "submit_ms", "admit_ms", "first_token_ms", "finish_ms", "queue_ms",
    "ttft_ms", "tpot_ms", "itl_mean_ms", "itl_max_ms", "e2e_ms", "sched_lag_ms", "output_tok_s", "meets_slo",
    /* the elastic queue */
    "priority", "degraded", "spilled", "replayed", "timed_out", "ttft_sla_ms",
    /* prefix caching and the KV tiers */
    "cached_tokens", "kv_block_reads", "kv_block_hits", "kv_cache_hit_rate", "kv_tier_wait_ns",
    "kv_tier_bytes_moved",
};
#define N_CSV_COLS (sizeof(csv_header) / sizeof(csv_header[0]))

/* One text field, quoted when RFC 4180 requires it. */
static void put_text(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

/* A number with enough digits to read back, or an empty field for NaN. */
static void put_num(FILE *f, double x)
{
    if (isnan(x) || isinf(x))
        return;
    fprintf(f, "%.17g", x);
}

/* A time in ms from the run's origin, or empty when the event never happened (< 0). */
static void put_time(FILE *f, int64_t t_ns)
{
    if (t_ns >= 0)
        fprintf(f, "%.6f", (double)t_ns / 1e6);
}

/* Mean and largest gap between consecutive tokens (NaN without two tokens). */
static void itl_stats(const struct k25_bench_req *r, double *mean_ms, double *max_ms)
{
    *mean_ms = *max_ms = NAN;
    if (r->n_output < 2 || !r->token_ns)
        return;
    double sum = 0, mx = 0;
    for (int i = 1; i < r->n_output; i++) {
        double d = (double)(r->token_ns[i] - r->token_ns[i - 1]) / 1e6;
        sum += d;
        if (i == 1 || d > mx)
            mx = d;
    }
    *mean_ms = sum / (r->n_output - 1);
    *max_ms = mx;
}

static const char *yes_no(bool b)
{
    return b ? "true" : "false";
}

/* One request's row; kv_tiers: the run had KV tiers (its hit rate is then defined). */
static void put_row(FILE *f, const struct k25_bench_req *r, const struct k25_bench_slo *slo, bool kv_tiers)
{
    put_text(f, r->id);
    fprintf(f, ",%d,%lld,%d,%lld,", r->rep, (long long)r->seq, r->user, (long long)r->line);
    put_text(f, k25_req_state_name(r->state));
    fputc(',', f);
    put_text(f, r->reason);
    fprintf(f, ",%d,%d,%d,%d,", r->n_input, r->n_output, r->max_new, r->n_chunks);
    put_time(f, r->arrival_ns);
    fputc(',', f);
    put_time(f, r->submit_ns);
    fputc(',', f);
    put_time(f, r->admit_ns);
    fputc(',', f);
    put_time(f, r->first_ns);
    fputc(',', f);
    put_time(f, r->finish_ns);
    double itl_mean, itl_max;
    itl_stats(r, &itl_mean, &itl_max);
    const double nums[] = {k25_bench_req_queue_ms(r), k25_bench_req_ttft_ms(r), k25_bench_req_tpot_ms(r),
                           itl_mean, itl_max, k25_bench_req_e2e_ms(r), k25_bench_req_lag_ms(r),
                           r->state == K25_REQ_COMPLETED ? k25_bench_req_out_tps(r) : NAN};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        fputc(',', f);
        put_num(f, nums[i]);
    }
    fputc(',', f);
    if (slo && slo->any)
        fputs(yes_no(k25_bench_req_meets_slo(r, slo)), f);
    fprintf(f, ",%s,%s,%s,%s,%s,%d,%d,%lld,%lld,", k25_priority_name(r->priority), yes_no(r->degraded),
            yes_no(r->spilled), yes_no(r->replayed), yes_no(r->state == K25_REQ_TIMED_OUT), r->ttft_sla_ms,
            r->cached_tokens, (long long)r->kv_block_reads, (long long)r->kv_block_hits);
    put_num(f, k25_bench_req_kv_hit_rate(r, kv_tiers)); /* empty with tiers off */
    fprintf(f, ",%lld,%lld\r\n", (long long)r->kv_tier_wait_ns, (long long)r->kv_tier_bytes_moved);
}

int k25_bench_csv_write(const char *path, const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                        struct k25_error *err)
{
    struct k25_afile a;
    int rc = k25_afile_open(&a, path, err);
    if (rc)
        return rc;
    for (size_t c = 0; c < N_CSV_COLS; c++) {
        if (c)
            fputc(',', a.f);
        fputs(csv_header[c], a.f);
    }
    fputs("\r\n", a.f);
    for (size_t i = 0; i < run->n_reqs; i++) {
        put_row(a.f, &run->reqs[i], slo, run->eng.kv_tiers);
        if (ferror(a.f))
            break; /* a full disk: stop early, commit reports the error */
    }
    /* commit checks the stream's error flag, flushes, fsyncs and renames; on failure removes the temporary */
    return k25_afile_commit(&a, err);
}
