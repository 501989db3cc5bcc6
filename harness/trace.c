/*
 * trace.c - the HDF5 file of one `k25 bench` run (kind "run"), written and
 * read through h5store.  Layout (docs/trace-schema.md):
 *
 *   /meta       attributes: schema_version, kind, k25_version, provenance,
 *               config, workload (JSON texts) and a few flat copies
 *   /requests   compound table, one row per measured request
 *   /tokens     offsets[n+1], time_ns[], token_id[], margin[]: ragged per
 *               request (margin: the token-identity rule's top-1 margins,
 *               schema 2; absent in schema 1 files, read as NULL)
 *   /prefill    offsets[n+1], start_ns[], end_ns[]: the prefill chunks
 *               (schema 3 adds priority, spilled, replayed, degraded,
 *               timed_out, ttft_sla_ms: the elastic queue)
 *               (schema 4 adds cached_tokens and the KV tiers' per-request
 *               block reads, hits, hit rate, wait and bytes moved)
 *   /reasons    offsets[n+1], text[] (schema 6): every request's reason whole,
 *               ragged bytes (the /requests column holds its first 127 bytes)
 *   /timeline   compound table, one row per 100 ms window (schema 3 adds
 *               the memory/spill queue depths, breaker state and the
 *               breaker's busy fraction; schema 5 the degraded queue's depth)
 *   /summary    attributes (summary JSON, headline figures; schema 4 the
 *               engine's run totals of the KV tiers and the queue), tables
 *               percentiles and moments, arrays rep_start_ns/rep_end_ns
 *
 * The file is created under a temporary name before the measurement and
 * renamed into place by k25_trace_write only when everything is written.
 */
#include "harness.h"
#include "k25util.h"
#include "fidelity.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One /requests row, as stored. */
struct req_row {
    char id[64];
    int64_t seq;
    int32_t rep, user;
    int64_t line;
    char state[16];
    char reason[128];
    int32_t n_input, n_output, max_new, n_chunks;
    int64_t arrival_ns, submit_ns, admit_ns, first_token_ns, finish_ns;
    double queue_ms, ttft_ms, tpot_ms, e2e_ms, sched_lag_ms, output_tok_s;
    /* schema 3 */
    char priority[16];
    uint8_t spilled, replayed, degraded, timed_out;
    int32_t ttft_sla_ms;
    /* schema 4 */
    int32_t cached_tokens;
    int64_t kv_block_reads, kv_block_hits;
    double kv_cache_hit_rate;
    int64_t kv_tier_wait_ns, kv_tier_bytes_moved;
};

#define RC(name, type, member, len) {name, type, offsetof(struct req_row, member), len}
static const struct k25_h5_col req_cols[] = {
    RC("id", K25_H5_STR, id, 64),
    RC("seq", K25_H5_I64, seq, 0),
    RC("rep", K25_H5_I32, rep, 0),
    RC("user", K25_H5_I32, user, 0),
    RC("line", K25_H5_I64, line, 0),
    RC("state", K25_H5_STR, state, 16),
    RC("reason", K25_H5_STR, reason, 128),
    RC("input_tokens", K25_H5_I32, n_input, 0),
    RC("output_tokens", K25_H5_I32, n_output, 0),
    RC("max_new_tokens", K25_H5_I32, max_new, 0),
    RC("prefill_chunks", K25_H5_I32, n_chunks, 0),
    RC("arrival_ns", K25_H5_I64, arrival_ns, 0),
    RC("submit_ns", K25_H5_I64, submit_ns, 0),
    RC("admit_ns", K25_H5_I64, admit_ns, 0),
    RC("first_token_ns", K25_H5_I64, first_token_ns, 0),
    RC("finish_ns", K25_H5_I64, finish_ns, 0),
    RC("queue_ms", K25_H5_F64, queue_ms, 0),
    RC("ttft_ms", K25_H5_F64, ttft_ms, 0),
    RC("tpot_ms", K25_H5_F64, tpot_ms, 0),
    RC("e2e_ms", K25_H5_F64, e2e_ms, 0),
    RC("sched_lag_ms", K25_H5_F64, sched_lag_ms, 0),
    RC("output_tok_s", K25_H5_F64, output_tok_s, 0),
    /* schema 3: the elastic queue (absent from older traces: standard, false) */
    RC("priority", K25_H5_STR, priority, 16),
    RC("spilled", K25_H5_U8, spilled, 0),
    RC("replayed", K25_H5_U8, replayed, 0),
    RC("degraded", K25_H5_U8, degraded, 0),
    RC("timed_out", K25_H5_U8, timed_out, 0),
    RC("ttft_sla_ms", K25_H5_I32, ttft_sla_ms, 0),
    /* schema 4: prefix caching and the KV tiers (absent from older traces: 0; hit rate NaN) */
    RC("cached_tokens", K25_H5_I32, cached_tokens, 0),
    RC("kv_block_reads", K25_H5_I64, kv_block_reads, 0),
    RC("kv_block_hits", K25_H5_I64, kv_block_hits, 0),
    RC("kv_cache_hit_rate", K25_H5_F64, kv_cache_hit_rate, 0),
    RC("kv_tier_wait_ns", K25_H5_I64, kv_tier_wait_ns, 0),
    RC("kv_tier_bytes_moved", K25_H5_I64, kv_tier_bytes_moved, 0),
};
#define N_REQ_COLS ((int)(sizeof(req_cols) / sizeof(req_cols[0])))
#define N_REQ_COLS_V3 (N_REQ_COLS - 6)     /* the columns of schema 3 */
#define N_REQ_COLS_V2 (N_REQ_COLS_V3 - 6)  /* the columns of schema 1 and 2 */

/* One /timeline row. */
struct win_row {
    int64_t t_ns, len_ns;
    int32_t rep;
    double busy_fraction, busy_ns;
    int32_t n_waiting, n_running;
    int64_t kv_blocks, mem_bytes;
    /* schema 3 */
    int32_t n_waiting_memory, n_waiting_spill, breaker_open;
    double breaker_busy_fraction;
    /* schema 5 */
    int32_t n_waiting_degraded;
};
#define WC(name, type, member) {name, type, offsetof(struct win_row, member), 0}
static const struct k25_h5_col win_cols[] = {
    WC("t_ns", K25_H5_I64, t_ns),
    WC("len_ns", K25_H5_I64, len_ns),
    WC("rep", K25_H5_I32, rep),
    WC("busy_fraction", K25_H5_F64, busy_fraction),
    WC("busy_ns", K25_H5_F64, busy_ns),
    WC("n_waiting", K25_H5_I32, n_waiting),
    WC("n_running", K25_H5_I32, n_running),
    WC("kv_blocks", K25_H5_I64, kv_blocks),
    WC("mem_bytes", K25_H5_I64, mem_bytes),
    /* schema 3 (absent from older traces: -1, NaN) */
    WC("n_waiting_memory", K25_H5_I32, n_waiting_memory),
    WC("n_waiting_spill", K25_H5_I32, n_waiting_spill),
    WC("breaker_open", K25_H5_I32, breaker_open),
    WC("breaker_busy_fraction", K25_H5_F64, breaker_busy_fraction),
    /* schema 5 (absent from older traces: -1) */
    WC("n_waiting_degraded", K25_H5_I32, n_waiting_degraded),
};
#define N_WIN_COLS ((int)(sizeof(win_cols) / sizeof(win_cols[0])))
#define N_WIN_COLS_V4 (N_WIN_COLS - 1)    /* the columns of schema 3 and 4 */
#define N_WIN_COLS_V2 (N_WIN_COLS_V4 - 4) /* the columns of schema 1 and 2 */

struct pctl_row {
    char metric[24];
    double q, value, ci_lo, ci_hi, coverage;
    uint8_t supported;
};
static const struct k25_h5_col pctl_cols[] = {
    {"metric", K25_H5_STR, offsetof(struct pctl_row, metric), 24},
    {"q", K25_H5_F64, offsetof(struct pctl_row, q), 0},
    {"value", K25_H5_F64, offsetof(struct pctl_row, value), 0},
    {"ci95_lo", K25_H5_F64, offsetof(struct pctl_row, ci_lo), 0},
    {"ci95_hi", K25_H5_F64, offsetof(struct pctl_row, ci_hi), 0},
    {"ci_coverage", K25_H5_F64, offsetof(struct pctl_row, coverage), 0},
    {"supported", K25_H5_U8, offsetof(struct pctl_row, supported), 0},
};

struct mom_row {
    char metric[24];
    int64_t n;
    double mean, stdev, min, max;
};
static const struct k25_h5_col mom_cols[] = {
    {"metric", K25_H5_STR, offsetof(struct mom_row, metric), 24},
    {"n", K25_H5_I64, offsetof(struct mom_row, n), 0},
    {"mean", K25_H5_F64, offsetof(struct mom_row, mean), 0},
    {"stdev", K25_H5_F64, offsetof(struct mom_row, stdev), 0},
    {"min", K25_H5_F64, offsetof(struct mom_row, min), 0},
    {"max", K25_H5_F64, offsetof(struct mom_row, max), 0},
};

static int state_parse(const char *s)
{
    for (int k = K25_REQ_WAITING; k <= K25_REQ_TIMED_OUT; k++)
        if (!strcmp(s, k25_req_state_name(k)))
            return k;
    return -1;
}

/* Writes the ragged arrays of one group: offsets + two columns. */
static int write_ragged(struct k25_h5 *h, const char *group, const char *a_name, enum k25_h5_type a_type,
                        const void *a, const char *b_name, enum k25_h5_type b_type, const void *b,
                        const int64_t *offsets, size_t n_reqs, size_t total, struct k25_error *err)
{
    hid_t g = k25_h5_group(h, group, err);
    if (g < 0)
        return K25_EIO;
    int rc;
    if ((rc = k25_h5_write_array(g, "offsets", K25_H5_I64, offsets, n_reqs + 1, err)) == K25_OK &&
        (rc = k25_h5_write_array(g, a_name, a_type, a, total, err)) == K25_OK)
        rc = k25_h5_write_array(g, b_name, b_type, b, total, err);
    if (H5Gclose(g) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, group, "closing the group failed");
    return rc;
}

static int write_summary(struct k25_h5 *h, const struct k25_bench_run *run, const struct k25_bench_summary *s,
                         const char *summary_json, struct k25_error *err)
{
    int rc = K25_OK;
    hid_t g = k25_h5_group(h, "/summary", err);
    if (g < 0)
        return K25_EIO;
    struct pctl_row pr[(K25_M_NMETRICS + 1) * K25_NPCTL];
    struct mom_row mr[K25_M_NMETRICS + 1];
    memset(pr, 0, sizeof(pr));
    memset(mr, 0, sizeof(mr));
    size_t np = 0;
    for (int m = 0; m <= K25_M_NMETRICS; m++) {
        const struct k25_dist *d = m < K25_M_NMETRICS ? &s->d[m] : &s->busy;
        const char *name = m < K25_M_NMETRICS ? k25_metric_names[m] : "busy_fraction";
        snprintf(mr[m].metric, sizeof(mr[m].metric), "%s", name);
        mr[m].n = d->n;
        mr[m].mean = d->mean;
        mr[m].stdev = d->stdev;
        mr[m].min = d->min;
        mr[m].max = d->max;
        for (int i = 0; i < K25_NPCTL; i++, np++) {
            snprintf(pr[np].metric, sizeof(pr[np].metric), "%s", name);
            pr[np].q = d->p[i].q;
            pr[np].value = d->p[i].value;
            pr[np].ci_lo = d->p[i].ci_lo;
            pr[np].ci_hi = d->p[i].ci_hi;
            pr[np].coverage = d->p[i].coverage;
            pr[np].supported = d->p[i].supported;
        }
    }
    const struct { const char *name; double v; } flat[] = {
        {"duration_s", s->duration_s},
        {"requests_per_s", s->requests_per_s},
        {"output_tok_per_s", s->output_tok_per_s},
        {"input_tok_per_s", s->input_tok_per_s},
        {"goodput_rps", s->goodput_rps},
        {"ttft_p50_ms", s->d[K25_M_TTFT].p[0].value},
        {"ttft_p99_ms", s->d[K25_M_TTFT].p[3].value},
        {"tpot_p50_ms", s->d[K25_M_TPOT].p[0].value},
        {"e2e_p50_ms", s->d[K25_M_E2E].p[0].value},
        {"busy_fraction_p95", s->busy.p[2].value},
        {"overhead_per_request_us", s->overhead_per_request_us},
        {"overhead_per_token_us", s->overhead_per_token_us},
        {"degraded_requests_ratio", s->degraded_requests_ratio}, /* schema 3 */
        {"kv_cache_hit_rate", s->kv_cache_hit_rate},             /* schema 4: NaN with tiers off */
    };
    /* schema 4: the engine's run totals over the measurement (eng_measured 0: an endpoint run) */
    const struct k25_bench_engine_totals *e = &run->eng;
    const struct { const char *name; int64_t v; } eng[] = {
        {"eng_measured", e->measured},
        {"kv_tiers", e->kv_tiers},
        {"kv_block_reads", e->kv_block_reads},
        {"kv_block_hits", e->kv_block_hits},
        {"kv_tier_wait_ns", e->kv_tier_wait_ns},
        {"kv_tier_max_step_wait_ns", e->kv_tier_max_step_wait_ns},
        {"kv_tier_bytes_moved", e->kv_tier_bytes_moved},
        {"kv_tier_copy_ns", e->kv_tier_copy_ns},
        {"kv_tier_evictions", e->kv_tier_evictions},
        {"kv_tier_promotions", e->kv_tier_promotions},
        {"kv_tier_demotions", e->kv_tier_demotions},
        {"prefix_hit_tokens", e->prefix_hit_tokens},
        {"rejected_degraded", e->rejected_degraded},
        {"spill_fsyncs", e->spill_fsyncs},
        {"breaker_opens", e->breaker_opens},
    };
    int64_t rs[K25_BENCH_MAX_REPEAT], re[K25_BENCH_MAX_REPEAT];
    for (int k = 0; k < run->n_reps; k++) {
        rs[k] = run->rep_start_ns[k];
        re[k] = run->rep_end_ns[k];
    }
    if ((rc = k25_h5_attr_str(g, "json", summary_json, err)) != K25_OK)
        goto out;
    for (size_t i = 0; i < sizeof(flat) / sizeof(flat[0]); i++)
        if ((rc = k25_h5_attr_f64(g, flat[i].name, flat[i].v, err)) != K25_OK)
            goto out;
    for (size_t i = 0; i < sizeof(eng) / sizeof(eng[0]); i++)
        if ((rc = k25_h5_attr_i64(g, eng[i].name, eng[i].v, err)) != K25_OK)
            goto out;
    if ((rc = k25_h5_attr_i64(g, "requests_total", s->n_total, err)) != K25_OK ||
        (rc = k25_h5_attr_i64(g, "requests_completed", s->n_completed, err)) != K25_OK ||
        (rc = k25_h5_attr_i64(g, "spilled_requests", s->n_spilled, err)) != K25_OK ||
        (rc = k25_h5_attr_i64(g, "timed_out_requests", s->n_timed_out, err)) != K25_OK ||
        (rc = k25_h5_attr_i64(g, "repetitions", run->n_reps, err)) != K25_OK ||
        (rc = k25_h5_write_table(g, "percentiles", pctl_cols, 7, sizeof(struct pctl_row), pr, np, err)) != K25_OK ||
        (rc = k25_h5_write_table(g, "moments", mom_cols, 6, sizeof(struct mom_row), mr, K25_M_NMETRICS + 1, err)) !=
            K25_OK ||
        (rc = k25_h5_write_array(g, "rep_start_ns", K25_H5_I64, rs, (size_t)run->n_reps, err)) != K25_OK ||
        (rc = k25_h5_write_array(g, "rep_end_ns", K25_H5_I64, re, (size_t)run->n_reps, err)) != K25_OK)
        goto out;
out:
    if (H5Gclose(g) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, "/summary", "closing the group failed");
    return rc;
}

/* Flat copies of a few provenance fields on /meta, for h5dump -a readers. */
static int meta_flat(struct k25_h5 *h, const char *provenance_json, struct k25_error *err)
{
    json_t *p = json_loads(provenance_json, 0, NULL);
    if (!p)
        return k25_error_set(err, K25_EINTERNAL, h->path, 0, "provenance", "provenance is not JSON");
    const char *paths[][3] = {{"build", "git", "git"},
                              {"machine", "hostname", "hostname"},
                              {"machine", "cpu_model", "cpu_model"},
                              {NULL, "start_time_utc", "start_time_utc"},
                              {NULL, "end_time_utc", "end_time_utc"},
                              {"dataset", "sha256", "dataset_sha256"},
                              {"dataset", "path", "dataset_path"}};
    int rc = K25_OK;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && rc == K25_OK; i++) {
        json_t *o = paths[i][0] ? json_object_get(p, paths[i][0]) : p;
        const char *v = json_string_value(json_object_get(o, paths[i][1]));
        rc = k25_h5_attr_str(h->meta, paths[i][2], v ? v : "", err);
    }
    if (rc == K25_OK)
        rc = k25_h5_attr_i64(h->meta, "seed", json_integer_value(json_object_get(p, "seed")), err);
    json_decref(p);
    return rc;
}

/* /tokens/margin beside token_id (schema 2): float32 top-1 margins, NaN where unknown. */
static int write_margins(struct k25_h5 *h, const float *margins, size_t n_tok, struct k25_error *err)
{
    hid_t g = k25_h5_group(h, "/tokens", err);
    if (g < 0)
        return K25_EIO;
    int rc = k25_h5_write_array(g, "margin", K25_H5_F32, margins, n_tok, err);
    if (H5Gclose(g) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, "/tokens", "closing the group failed");
    return rc;
}

/* /tokens/margin of a schema-2 trace, exactly `total` long; *out NULL for schema 1 (no margins). */
static int read_margins(struct k25_h5 *h, size_t total, float **out, struct k25_error *err)
{
    size_t n = 0;
    *out = NULL;
    if (h->schema_version < 2)
        return K25_OK;
    hid_t g = k25_h5_group(h, "/tokens", err);
    if (g < 0)
        return K25_EFORMAT;
    int rc = k25_h5_read_array(g, "margin", K25_H5_F32, total, (void **)out, &n, err);
    H5Gclose(g);
    return rc;
}

/* /reasons (schema 6): each request's reason whole, as ragged UTF-8 bytes (offsets[n + 1], text[]). */
static int write_reasons(struct k25_h5 *h, const struct k25_bench_run *run, struct k25_error *err)
{
    size_t n = run->n_reqs, total = 0;
    for (size_t i = 0; i < n; i++)
        total += strlen(run->reqs[i].reason);
    int64_t *off = malloc(sizeof(int64_t) * (n + 1));
    uint8_t *text = malloc(total + 1);
    int rc = K25_OK;
    hid_t g = H5I_INVALID_HID;
    if (!off || !text) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    off[0] = 0;
    for (size_t i = 0, k = 0; i < n; i++) {
        size_t l = strlen(run->reqs[i].reason);
        memcpy(text + k, run->reqs[i].reason, l);
        k += l;
        off[i + 1] = (int64_t)k;
    }
    if ((g = k25_h5_group(h, "/reasons", err)) < 0) {
        rc = K25_EIO;
        goto out;
    }
    if ((rc = k25_h5_write_array(g, "offsets", K25_H5_I64, off, n + 1, err)) == K25_OK)
        rc = k25_h5_write_array(g, "text", K25_H5_U8, text, total, err);
    if (H5Gclose(g) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, "/reasons", "closing the group failed");
out:
    free(off);
    free(text);
    return rc;
}

/* The whole reasons of a schema-6 trace over the /requests column's: offsets checked like /tokens'. */
static int read_reasons(struct k25_h5 *h, struct k25_bench_run *run, struct k25_error *err)
{
    int64_t *off = NULL;
    uint8_t *text = NULL;
    size_t no = 0, nt = 0, n = run->n_reqs;
    int rc;
    hid_t g = k25_h5_group(h, "/reasons", err);
    if (g < 0)
        return K25_EFORMAT;
    if ((rc = k25_h5_read_array(g, "offsets", K25_H5_I64, n + 1, (void **)&off, &no, err)) != K25_OK)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (off[0] != 0 || off[i + 1] < off[i] || off[i + 1] - off[i] >= K25_REQ_REASON_MAX) {
            rc = k25_error_set(err, K25_EFORMAT, h->path, 0, "/reasons/offsets",
                               "offset %zu is out of order or longer than %d bytes", i, K25_REQ_REASON_MAX - 1);
            goto out;
        }
    if ((rc = k25_h5_read_array(g, "text", K25_H5_U8, (size_t)off[n], (void **)&text, &nt, err)) != K25_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        size_t l = (size_t)(off[i + 1] - off[i]);
        memcpy(run->reqs[i].reason, text + off[i], l);
        run->reqs[i].reason[l] = '\0';
    }
out:
    H5Gclose(g);
    free(off);
    free(text);
    return rc;
}

/* Hits / reads; with tiers on a request that read no block waited for none (1); tiers off: NaN. */
double k25_bench_req_kv_hit_rate(const struct k25_bench_req *r, bool kv_tiers)
{
    if (r->kv_block_reads > 0)
        return (double)r->kv_block_hits / (double)r->kv_block_reads;
    return kv_tiers ? 1.0 : NAN;
}

int k25_trace_write(struct k25_h5 *h, const struct k25_bench_run *run, const struct k25_bench_summary *s,
                    const char *provenance_json, const char *config_json, const char *workload_json,
                    const char *summary_json, struct k25_error *err)
{
    int rc = K25_OK;
    size_t n = run->n_reqs, n_tok = 0, n_chk = 0;
    struct req_row *rows = calloc(n + 1, sizeof(*rows));
    struct win_row *wrows = calloc(run->n_win + 1, sizeof(*wrows));
    int64_t *toff = calloc(n + 1, sizeof(int64_t)), *coff = calloc(n + 1, sizeof(int64_t));
    for (size_t i = 0; i < n; i++) {
        n_tok += (size_t)run->reqs[i].n_output;
        n_chk += (size_t)run->reqs[i].n_chunks;
    }
    int64_t *tns = malloc(sizeof(int64_t) * (n_tok + 1)), *cs = malloc(sizeof(int64_t) * (n_chk + 1)),
            *ce = malloc(sizeof(int64_t) * (n_chk + 1));
    int32_t *tid = malloc(sizeof(int32_t) * (n_tok + 1));
    float *tmg = malloc(sizeof(float) * (n_tok + 1));
    if (!rows || !wrows || !toff || !coff || !tns || !cs || !ce || !tid || !tmg) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    size_t kt = 0, kc = 0;
    for (size_t i = 0; i < n; i++) {
        const struct k25_bench_req *q = &run->reqs[i];
        struct req_row *r = &rows[i];
        snprintf(r->id, sizeof(r->id), "%s", q->id);
        r->seq = q->seq;
        r->rep = q->rep;
        r->user = q->user;
        r->line = q->line;
        snprintf(r->state, sizeof(r->state), "%s", k25_req_state_name(q->state));
        snprintf(r->reason, sizeof(r->reason), "%.127s", q->reason); /* whole in /reasons */
        r->n_input = q->n_input;
        r->n_output = q->n_output;
        r->max_new = q->max_new;
        r->n_chunks = q->n_chunks;
        r->arrival_ns = q->arrival_ns;
        r->submit_ns = q->submit_ns;
        r->admit_ns = q->admit_ns;
        r->first_token_ns = q->first_ns;
        r->finish_ns = q->finish_ns;
        r->queue_ms = k25_bench_req_queue_ms(q);
        r->ttft_ms = k25_bench_req_ttft_ms(q);
        r->tpot_ms = k25_bench_req_tpot_ms(q);
        r->e2e_ms = k25_bench_req_e2e_ms(q);
        r->sched_lag_ms = k25_bench_req_lag_ms(q);
        r->output_tok_s = k25_bench_req_out_tps(q);
        snprintf(r->priority, sizeof(r->priority), "%s", k25_priority_name(q->priority));
        r->spilled = q->spilled;
        r->replayed = q->replayed;
        r->degraded = q->degraded;
        r->timed_out = q->state == K25_REQ_TIMED_OUT;
        r->ttft_sla_ms = q->ttft_sla_ms;
        r->cached_tokens = q->cached_tokens;
        r->kv_block_reads = q->kv_block_reads;
        r->kv_block_hits = q->kv_block_hits;
        r->kv_cache_hit_rate = k25_bench_req_kv_hit_rate(q, run->eng.kv_tiers);
        r->kv_tier_wait_ns = q->kv_tier_wait_ns;
        r->kv_tier_bytes_moved = q->kv_tier_bytes_moved;
        for (int t = 0; t < q->n_output; t++, kt++) {
            tns[kt] = q->token_ns[t];
            tid[kt] = q->token_ids[t];
            tmg[kt] = q->token_margins ? q->token_margins[t] : NAN; /* NaN: unknown, compared strictly */
        }
        for (int c = 0; c < q->n_chunks; c++, kc++) {
            cs[kc] = q->chunk_start_ns[c];
            ce[kc] = q->chunk_end_ns[c];
        }
        toff[i + 1] = (int64_t)kt;
        coff[i + 1] = (int64_t)kc;
    }
    for (size_t w = 0; w < run->n_win; w++) {
        const struct k25_bench_window *x = &run->win[w];
        wrows[w] = (struct win_row){x->t_ns, x->len_ns, x->rep, x->len_ns > 0 ? x->busy_ns / (double)x->len_ns : NAN,
                                    x->busy_ns, x->n_waiting, x->n_running, x->kv_blocks, x->mem_bytes,
                                    x->n_waiting_memory, x->n_waiting_spill, x->breaker_open,
                                    x->breaker_busy_fraction, x->n_waiting_degraded};
    }

    if ((rc = k25_h5_attr_str(h->meta, "provenance", provenance_json, err)) != K25_OK ||
        (rc = k25_h5_attr_str(h->meta, "config", config_json, err)) != K25_OK ||
        (rc = k25_h5_attr_str(h->meta, "workload", workload_json, err)) != K25_OK ||
        (rc = meta_flat(h, provenance_json, err)) != K25_OK)
        goto out;
    if ((rc = k25_h5_write_table(h->file, "/requests", req_cols, N_REQ_COLS, sizeof(struct req_row), rows, n,
                                 err)) != K25_OK ||
        (rc = write_ragged(h, "/tokens", "time_ns", K25_H5_I64, tns, "token_id", K25_H5_I32, tid, toff, n, n_tok,
                           err)) != K25_OK ||
        (rc = write_margins(h, tmg, n_tok, err)) != K25_OK || (rc = write_reasons(h, run, err)) != K25_OK ||
        (rc = write_ragged(h, "/prefill", "start_ns", K25_H5_I64, cs, "end_ns", K25_H5_I64, ce, coff, n, n_chk,
                           err)) != K25_OK ||
        (rc = k25_h5_write_table(h->file, "/timeline", win_cols, N_WIN_COLS, sizeof(struct win_row), wrows,
                                 run->n_win, err)) != K25_OK ||
        (rc = write_summary(h, run, s, summary_json, err)) != K25_OK)
        goto out;
    rc = k25_h5_commit(h, err);
out:
    if (rc != K25_OK)
        k25_h5_abort(h);
    free(rows);
    free(wrows);
    free(toff);
    free(coff);
    free(tns);
    free(cs);
    free(ce);
    free(tid);
    free(tmg);
    return rc;
}

/*
 * Reads a ragged group and checks its offsets against the table's counts:
 * n_reqs + 1 offsets, starting at 0, never decreasing; then the two
 * columns, each exactly offsets[n_reqs] long (a length the file claims
 * otherwise is refused before it is allocated).
 */
static int read_ragged(struct k25_h5 *h, const char *group, const char *a_name, enum k25_h5_type a_type, void **a,
                       const char *b_name, enum k25_h5_type b_type, void **b, int64_t **off, size_t n_reqs,
                       struct k25_error *err)
{
    size_t no = 0, na = 0, nb = 0;
    int rc;
    hid_t g = k25_h5_group(h, group, err);
    if (g < 0)
        return K25_EFORMAT;
    if ((rc = k25_h5_read_array(g, "offsets", K25_H5_I64, n_reqs + 1, (void **)off, &no, err)) != K25_OK)
        goto out;
    if ((*off)[0] != 0) {
        rc = k25_error_set(err, K25_EFORMAT, h->path, 0, group, "offsets do not start at 0");
        goto out;
    }
    for (size_t i = 0; i < n_reqs; i++)
        if ((*off)[i + 1] < (*off)[i]) {
            rc = k25_error_set(err, K25_EFORMAT, h->path, 0, group, "offsets decrease at %zu", i);
            goto out;
        }
    size_t total = (size_t)(*off)[n_reqs];
    if ((rc = k25_h5_read_array(g, a_name, a_type, total, a, &na, err)) != K25_OK ||
        (rc = k25_h5_read_array(g, b_name, b_type, total, b, &nb, err)) != K25_OK)
        goto out;
out:
    H5Gclose(g);
    return rc;
}

static int trace_read_h5(struct k25_h5 h, const char *path, struct k25_trace *t, struct k25_error *err);

/* The schema-4 /summary attributes of the engine's run totals (struct k25_bench_engine_totals). */
static int read_engine_totals(hid_t g, struct k25_bench_engine_totals *e, struct k25_error *err)
{
    struct { const char *name; int64_t *v; } a[] = {
        {"kv_block_reads", &e->kv_block_reads},
        {"kv_block_hits", &e->kv_block_hits},
        {"kv_tier_wait_ns", &e->kv_tier_wait_ns},
        {"kv_tier_max_step_wait_ns", &e->kv_tier_max_step_wait_ns},
        {"kv_tier_bytes_moved", &e->kv_tier_bytes_moved},
        {"kv_tier_copy_ns", &e->kv_tier_copy_ns},
        {"kv_tier_evictions", &e->kv_tier_evictions},
        {"prefix_hit_tokens", &e->prefix_hit_tokens},
        {"rejected_degraded", &e->rejected_degraded},
        {"spill_fsyncs", &e->spill_fsyncs},
        {"breaker_opens", &e->breaker_opens},
    };
    int64_t measured = 0, tiers = 0;
    int rc;
    if ((rc = k25_h5_get_attr_i64(g, "eng_measured", &measured, err)) != K25_OK ||
        (rc = k25_h5_get_attr_i64(g, "kv_tiers", &tiers, err)) != K25_OK)
        return rc;
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
        if ((rc = k25_h5_get_attr_i64(g, a[i].name, a[i].v, err)) != K25_OK)
            return rc;
    /* issue 36: the hotness policy's moves (absent in older files: 0) */
    const char *opt[] = {"kv_tier_promotions", "kv_tier_demotions"};
    int64_t *optv[] = {&e->kv_tier_promotions, &e->kv_tier_demotions};
    for (size_t i = 0; i < 2; i++) {
        htri_t ex = H5Aexists(g, opt[i]);
        if (ex < 0)
            return k25_error_set(err, K25_EIO, NULL, 0, opt[i], "cannot read the /summary attribute");
        if (ex > 0 && (rc = k25_h5_get_attr_i64(g, opt[i], optv[i], err)) != K25_OK)
            return rc;
    }
    e->measured = measured != 0;
    e->kv_tiers = tiers != 0;
    return K25_OK;
}

int k25_trace_read(const char *path, struct k25_trace *t, struct k25_error *err)
{
    memset(t, 0, sizeof(*t));
    struct k25_h5 h;
    int rc = k25_h5_open_read(&h, path, "run", err);
    return rc != K25_OK ? rc : trace_read_h5(h, path, t, err);
}

int k25_trace_read_image(const void *buf, size_t len, const char *name, struct k25_trace *t, struct k25_error *err)
{
    memset(t, 0, sizeof(*t));
    struct k25_h5 h;
    int rc = k25_h5_open_read_image(&h, name, buf, len, "run", err);
    return rc != K25_OK ? rc : trace_read_h5(h, name, t, err);
}

/* The /requests and /timeline rows and the ragged columns as read from a run file, owned. */
struct trace_cols {
    struct req_row *rows; /* [n] */
    struct win_row *wrows; /* [nw] */
    int64_t *toff, *coff;  /* [n + 1] offsets into the token and chunk columns */
    int64_t *tns, *cs, *ce;
    int32_t *tid;
    float *tmg; /* NULL in traces without token margins */
    size_t n, nw;
};

static void trace_cols_free(struct trace_cols *c)
{
    free(c->rows);
    free(c->wrows);
    free(c->toff);
    free(c->tns);
    free(c->tid);
    free(c->tmg);
    free(c->coff);
    free(c->cs);
    free(c->ce);
}

/* The tables and ragged groups of the file's schema version into c. */
static int read_cols(struct k25_h5 *h, struct trace_cols *c, struct k25_error *err)
{
    bool v3 = h->schema_version >= 3; /* the elastic queue's columns */
    bool v4 = h->schema_version >= 4; /* prefix caching and the KV tiers */
    bool v5 = h->schema_version >= 5; /* the degraded queue's depth */
    int rc;
    if ((rc = k25_h5_read_table(h->file, "/requests", req_cols, v4 ? N_REQ_COLS : v3 ? N_REQ_COLS_V3 : N_REQ_COLS_V2,
                                sizeof(struct req_row), K25_H5_ANY_COUNT, (void **)&c->rows, &c->n, err)) != K25_OK ||
        (rc = read_ragged(h, "/tokens", "time_ns", K25_H5_I64, (void **)&c->tns, "token_id", K25_H5_I32,
                          (void **)&c->tid, &c->toff, c->n, err)) != K25_OK ||
        (rc = read_margins(h, (size_t)c->toff[c->n], &c->tmg, err)) != K25_OK ||
        (rc = read_ragged(h, "/prefill", "start_ns", K25_H5_I64, (void **)&c->cs, "end_ns", K25_H5_I64,
                          (void **)&c->ce, &c->coff, c->n, err)) != K25_OK ||
        (rc = k25_h5_read_table(h->file, "/timeline", win_cols,
                                v5 ? N_WIN_COLS : v3 ? N_WIN_COLS_V4 : N_WIN_COLS_V2,
                                sizeof(struct win_row), K25_H5_ANY_COUNT, (void **)&c->wrows, &c->nw, err)) != K25_OK)
        return rc;
    return K25_OK;
}

/* The /summary group: its JSON, the repetitions' bounds, and (schema 4) the engine's run totals. */
static int read_summary_group(struct k25_h5 *h, const char *path, struct k25_trace *t, struct k25_error *err)
{
    int64_t *rs = NULL, *re = NULL;
    size_t nrs = 0, nre = 0;
    int64_t n_reps = 0;
    int rc;
    hid_t g = k25_h5_group(h, "/summary", err);
    if (g < 0)
        return K25_EFORMAT;
    if ((rc = k25_h5_get_attr_str(g, "json", &t->summary_json, err)) != K25_OK ||
        (rc = k25_h5_get_attr_i64(g, "repetitions", &n_reps, err)) != K25_OK)
        goto out;
    if (n_reps < 0 || n_reps > K25_BENCH_MAX_REPEAT) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, "/summary/repetitions", "%lld is not 0..%d",
                           (long long)n_reps, K25_BENCH_MAX_REPEAT);
        goto out;
    }
    if (h->schema_version >= 4 && (rc = read_engine_totals(g, &t->run.eng, err)) != K25_OK)
        goto out;
    if ((rc = k25_h5_read_array(g, "rep_start_ns", K25_H5_I64, (size_t)n_reps, (void **)&rs, &nrs, err)) != K25_OK ||
        (rc = k25_h5_read_array(g, "rep_end_ns", K25_H5_I64, (size_t)n_reps, (void **)&re, &nre, err)) != K25_OK)
        goto out;
    t->run.n_reps = (int)nrs;
    for (size_t k = 0; k < nrs; k++) {
        t->run.rep_start_ns[k] = rs[k];
        t->run.rep_end_ns[k] = re[k];
    }
out:
    H5Gclose(g);
    free(rs);
    free(re);
    return rc;
}

/*
 * /requests row i (with its tokens and chunks from c) into q, checked: a
 * known state and priority, non-negative counts that agree with the
 * ragged groups.  On failure q may hold arrays the caller frees.
 */
static int request_from_row(const struct trace_cols *c, size_t i, int64_t schema_version, const char *path,
                            struct k25_bench_req *q, struct k25_error *err)
{
    const struct req_row *r = &c->rows[i];
    memcpy(q->id, r->id, sizeof(q->id));
    q->id[sizeof(q->id) - 1] = '\0';
    q->seq = r->seq;
    q->rep = r->rep;
    q->user = r->user;
    q->line = r->line;
    char st[17];
    memcpy(st, r->state, 16);
    st[16] = '\0';
    int s = state_parse(st);
    if (s < 0)
        return k25_error_set(err, K25_EFORMAT, path, 0, "/requests", "row %zu: unknown state '%s'", i, st);
    q->state = s;
    memcpy(q->reason, r->reason, sizeof(r->reason)); /* schema 6: replaced by /reasons, whole */
    q->reason[sizeof(r->reason) - 1] = '\0';
    q->n_input = r->n_input;
    q->n_output = r->n_output;
    q->max_new = r->max_new;
    q->arrival_ns = r->arrival_ns;
    q->submit_ns = r->submit_ns;
    q->admit_ns = r->admit_ns;
    q->first_ns = r->first_token_ns;
    q->finish_ns = r->finish_ns;
    if (schema_version >= 3) {
        char pn[17];
        memcpy(pn, r->priority, 16);
        pn[16] = '\0';
        enum k25_priority pr;
        struct k25_error perr;
        if (k25_priority_parse(pn, &pr, &perr) != K25_OK)
            return k25_error_set(err, K25_EFORMAT, path, 0, "/requests", "row %zu: unknown priority '%s'", i, pn);
        q->priority = pr;
        q->spilled = r->spilled != 0;
        q->replayed = r->replayed != 0;
        q->degraded = r->degraded != 0;
        q->ttft_sla_ms = r->ttft_sla_ms;
    }
    if (schema_version >= 4) {
        if (r->cached_tokens < 0 || r->kv_block_reads < 0 || r->kv_block_hits < 0 ||
            r->kv_block_hits > r->kv_block_reads || r->kv_tier_wait_ns < 0 || r->kv_tier_bytes_moved < 0)
            return k25_error_set(err, K25_EFORMAT, path, 0, "/requests",
                                 "row %zu: negative cached_tokens or KV tier counts, or more hits than reads", i);
        q->cached_tokens = r->cached_tokens;
        q->kv_block_reads = r->kv_block_reads;
        q->kv_block_hits = r->kv_block_hits;
        q->kv_tier_wait_ns = r->kv_tier_wait_ns;
        q->kv_tier_bytes_moved = r->kv_tier_bytes_moved;
    }
    const int64_t *toff = c->toff, *coff = c->coff;
    if (toff[i + 1] - toff[i] != r->n_output || coff[i + 1] - coff[i] != r->n_chunks || r->n_output < 0 ||
        r->n_chunks < 0)
        return k25_error_set(err, K25_EFORMAT, path, 0, "/requests",
                             "row %zu: token or chunk count disagrees with /tokens or /prefill", i);
    q->token_ns = malloc(sizeof(int64_t) * ((size_t)r->n_output + 1));
    q->token_ids = malloc(sizeof(int32_t) * ((size_t)r->n_output + 1));
    q->chunk_start_ns = malloc(sizeof(int64_t) * ((size_t)r->n_chunks + 1));
    q->chunk_end_ns = malloc(sizeof(int64_t) * ((size_t)r->n_chunks + 1));
    if (!q->token_ns || !q->token_ids || !q->chunk_start_ns || !q->chunk_end_ns)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    memcpy(q->token_ns, c->tns + toff[i], sizeof(int64_t) * (size_t)r->n_output);
    memcpy(q->token_ids, c->tid + toff[i], sizeof(int32_t) * (size_t)r->n_output);
    if (c->tmg) {
        if (!(q->token_margins = malloc(sizeof(float) * ((size_t)r->n_output + 1))))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        memcpy(q->token_margins, c->tmg + toff[i], sizeof(float) * (size_t)r->n_output);
    }
    memcpy(q->chunk_start_ns, c->cs + coff[i], sizeof(int64_t) * (size_t)r->n_chunks);
    memcpy(q->chunk_end_ns, c->ce + coff[i], sizeof(int64_t) * (size_t)r->n_chunks);
    q->n_chunks = r->n_chunks;
    return K25_OK;
}

/* Reads the open run file h (closed here) into t; on failure t is freed. */
static int trace_read_h5(struct k25_h5 h, const char *path, struct k25_trace *t, struct k25_error *err)
{
    int rc = K25_OK;
    struct trace_cols c = {0};
    struct k25_bench_run *run = &t->run;
    t->schema_version = h.schema_version;
    int64_t interrupted = 0; /* absent in traces written before it existed: not interrupted */
    if (k25_h5_has_attr(h.meta, "interrupted") &&
        (rc = k25_h5_get_attr_i64(h.meta, "interrupted", &interrupted, err)) != K25_OK)
        goto out;
    run->interrupted = interrupted != 0;
    if ((rc = k25_h5_get_attr_str(h.meta, "provenance", &t->provenance_json, err)) != K25_OK ||
        (rc = k25_h5_get_attr_str(h.meta, "config", &t->config_json, err)) != K25_OK ||
        (rc = k25_h5_get_attr_str(h.meta, "workload", &t->workload_json, err)) != K25_OK ||
        (rc = read_cols(&h, &c, err)) != K25_OK || (rc = read_summary_group(&h, path, t, err)) != K25_OK)
        goto out;
    if (!(run->reqs = calloc(c.n + 1, sizeof(*run->reqs))) || !(run->win = calloc(c.nw + 1, sizeof(*run->win)))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    run->cap_reqs = c.n + 1;
    run->cap_win = c.nw + 1;
    for (size_t i = 0; i < c.n; i++) {
        run->n_reqs = i + 1; /* counted before it is filled: a failure frees what it holds */
        if ((rc = request_from_row(&c, i, h.schema_version, path, &run->reqs[i], err)) != K25_OK)
            goto out;
        run->output_tokens += c.rows[i].n_output;
    }
    if (h.schema_version >= 6 && ((rc = read_reasons(&h, run, err)) != K25_OK ||
                                  (rc = k25_srvmet_read(&h, t, err)) != K25_OK ||
                                  (rc = k25_gputel_read(&h, t, err)) != K25_OK))
        goto out;
    bool v3 = h.schema_version >= 3, v5 = h.schema_version >= 5;
    for (size_t w = 0; w < c.nw; w++) {
        const struct win_row *x = &c.wrows[w];
        run->win[w] = (struct k25_bench_window){x->t_ns, x->len_ns, x->busy_ns, x->rep, x->n_waiting,
                                                x->n_running, x->kv_blocks, x->mem_bytes,
                                                v3 ? x->n_waiting_memory : -1, v3 ? x->n_waiting_spill : -1,
                                                v3 ? x->breaker_open : -1, v3 ? x->breaker_busy_fraction : NAN,
                                                v5 ? x->n_waiting_degraded : -1};
    }
    run->n_win = c.nw;
out:
    k25_h5_close(&h);
    trace_cols_free(&c);
    if (rc != K25_OK)
        k25_trace_free(t);
    return rc;
}

void k25_trace_free(struct k25_trace *t)
{
    free(t->provenance_json);
    free(t->config_json);
    free(t->workload_json);
    free(t->summary_json);
    k25_trace_srvmet_free(t->srvmet);
    free(t->gpu);
    free(t->gpu_telemetry);
    k25_bench_run_free(&t->run);
    memset(t, 0, sizeof(*t));
}

/* One /fidelity/requests row. */
struct fid_row {
    char id[64];
    int32_t n_input, n_pos;
    double kl_mean, kl_max, top1_agreement, top_prob_rms, token_agreement, attn_rel_err;
    int64_t kv_bytes_exact, kv_bytes;
};
#define FC(name, type, member) {name, type, offsetof(struct fid_row, member), 0}
static const struct k25_h5_col fid_cols[] = {
    {"id", K25_H5_STR, offsetof(struct fid_row, id), 64},
    FC("input_tokens", K25_H5_I32, n_input),
    FC("positions", K25_H5_I32, n_pos),
    FC("kl_mean", K25_H5_F64, kl_mean),
    FC("kl_max", K25_H5_F64, kl_max),
    FC("top1_agreement", K25_H5_F64, top1_agreement),
    FC("top_prob_rms", K25_H5_F64, top_prob_rms),
    FC("token_agreement", K25_H5_F64, token_agreement),
    FC("attn_rel_err", K25_H5_F64, attn_rel_err),
    FC("kv_bytes_exact", K25_H5_I64, kv_bytes_exact),
    FC("kv_bytes", K25_H5_I64, kv_bytes),
};

/*
 * /fidelity: attributes with the run figures, `requests` (one row per
 * compared request) and `kl` (every compared position's KL, request order).
 */
static int write_fidelity_group(struct k25_h5 *h, const char *group, const struct k25_fidelity *f,
                                struct k25_error *err);

int k25_trace_write_fidelity(struct k25_h5 *h, const struct k25_fidelity *f, struct k25_error *err)
{
    int rc = K25_OK;
    /* the exact comparison ran (tokens set by k25_fidelity_measure); not with --fidelity-degraded alone */
    if (f->tokens > 0)
        rc = write_fidelity_group(h, "/fidelity", f, err);
    if (rc == K25_OK && f->degraded) /* schema 4: the degraded model against the full one */
        rc = write_fidelity_group(h, "/fidelity_degraded", f->degraded, err);
    return rc;
}

/* One fidelity group: attributes with the run figures, `requests` and `kl`. */
static int write_fidelity_group(struct k25_h5 *h, const char *group, const struct k25_fidelity *f,
                                struct k25_error *err)
{
    hid_t g = k25_h5_group(h, group, err);
    if (g < 0)
        return K25_EIO;
    struct fid_row *rows = calloc(f->n_reqs ? f->n_reqs : 1, sizeof(*rows));
    int rc = K25_OK;
    if (!rows) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < f->n_reqs; i++) {
        const struct k25_fid_req *q = &f->reqs[i];
        struct fid_row *r = &rows[i];
        snprintf(r->id, sizeof(r->id), "%s", q->id);
        r->n_input = q->n_input;
        r->n_pos = q->n_pos;
        r->kl_mean = q->kl_mean;
        r->kl_max = q->kl_max;
        r->top1_agreement = q->top1_agreement;
        r->top_prob_rms = q->top_prob_rms;
        r->token_agreement = q->token_agreement;
        r->attn_rel_err = q->attn_rel_err;
        r->kv_bytes_exact = q->kv_bytes_exact;
        r->kv_bytes = q->kv_bytes;
    }
    if ((rc = k25_h5_attr_i64(g, "tokens", f->tokens, err)) ||
        (rc = k25_h5_attr_i64(g, "n_requests", f->n_requests, err)) ||
        (rc = k25_h5_attr_i64(g, "n_positions", f->n_positions, err)) ||
        (rc = k25_h5_attr_f64(g, "kl_mean", f->kl_mean, err)) ||
        (rc = k25_h5_attr_f64(g, "kl_p999", f->kl_p999, err)) ||
        (rc = k25_h5_attr_f64(g, "kl_max", f->kl_max, err)) ||
        (rc = k25_h5_attr_f64(g, "top1_agreement", f->top1_agreement, err)) ||
        (rc = k25_h5_attr_f64(g, "top_prob_rms", f->top_prob_rms, err)) ||
        (rc = k25_h5_attr_f64(g, "token_agreement", f->token_agreement, err)) ||
        (rc = k25_h5_attr_f64(g, "attn_rel_err", f->attn_rel_err, err)) ||
        (rc = k25_h5_write_table(g, "requests", fid_cols, (int)(sizeof(fid_cols) / sizeof(fid_cols[0])),
                                 sizeof(struct fid_row), rows, f->n_reqs, err)) ||
        (rc = k25_h5_write_array(g, "kl", K25_H5_F64, f->kl, f->n_kl, err)))
        goto out;
out:
    free(rows);
    if (H5Gclose(g) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, group, "closing the group failed");
    return rc;
}
