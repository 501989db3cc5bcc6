/*
 * test_report.c - `k25 report`.
 *
 * Library level: SLA lines (parsing, every bad form, errors naming the
 * file and line), SLA evaluation on hand-made samples (PASS, FAIL, the
 * edge where the figure equals the limit, percentiles the sample cannot
 * support), the health checks (defaults, overrides, not measured).
 * Process level (needs gnuplot): reports on a run and a comparison
 * (generated here in a few seconds), on a ci-smoke sweep folder and an
 * attention benchmark (fixtures under tests/data/):
 * every expected file, non-empty, PNG signatures valid, SVG output, HTML
 * with no external reference; a missing gnuplot and bad inputs give clear
 * errors.  Every plot of every report is drawn again from its kept script
 * with gnuplot's stderr captured: exit 0 and no warning at all, a picture
 * of a sane size, every key placed explicitly outside the plot area.  The
 * HTML is opened in headless Chromium with the network cut off (skipped,
 * saying so, where Chromium is not installed).  Also: the health check
 * that does not apply to a closed loop, a sweep axis whose line through
 * the best point holds one point, and the shortest round-trip decimal.
 */
#include "testutil.h"

#include "report.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

static struct k25_sla g_sla;

static void line_ok(const char *text, struct k25_sla_line *l)
{
    struct k25_error err;
    if (k25_sla_line_parse(text, "t.yaml", 3, l, &err) != K25_OK)
        fail_msg("\"%s\" refused: %s", text, err.msg);
}

static void line_bad(const char *text, const char *needle)
{
    struct k25_error err;
    struct k25_sla_line l;
    if (k25_sla_line_parse(text, "t.yaml", 3, &l, &err) == K25_OK)
        fail_msg("\"%s\" accepted", text);
    if (!strstr(err.msg, "t.yaml:3:") || !strstr(err.msg, needle))
        fail_msg("\"%s\": got \"%s\", wanted t.yaml:3: and \"%s\"", text, err.msg, needle);
}

static void test_sla_parse(void **state)
{
    (void)state;
    struct k25_sla_line l;
    line_ok("ttft_p95_ms <= 500 at input_length >= 32768", &l);
    assert_int_equal(l.src, K25_SLA_SRC_REQ);
    assert_int_equal(l.dist, K25_M_TTFT);
    assert_int_equal(l.stat, K25_SLA_QUANTILE);
    assert_true(fabs(l.q - 0.95) < 1e-12);
    assert_int_equal(l.op, K25_SLA_LE);
    assert_true(l.limit == 500);
    assert_int_equal(l.n_cond, 1);
    assert_string_equal(l.cond[0].field, "input_length");
    assert_true(l.cond[0].value == 32768);
    line_ok("e2e_p999_ms < 9000 where input_length >= 32k and output_length <= 100", &l);
    assert_true(fabs(l.q - 0.999) < 1e-12);
    assert_int_equal(l.n_cond, 2);
    assert_true(l.cond[0].value == 32768);
    line_ok("itl_p99_ms<=50", &l);
    assert_int_equal(l.src, K25_SLA_SRC_TOKEN);
    line_ok("tpot_mean_ms <= 40 at input_length > 1000 && output_length > 10", &l);
    assert_int_equal(l.stat, K25_SLA_MEAN);
    line_ok("output_tok_per_s >= 1000", &l);
    assert_int_equal(l.src, K25_SLA_SRC_SCALAR);
    line_ok("busy_p90 <= 0.9", &l);
    assert_int_equal(l.src, K25_SLA_SRC_BUSY);

    line_bad("ttft_p95 <= 500", "unknown metric 'ttft_p95'");
    line_bad("nope_ms <= 5", "unknown metric");
    line_bad("ttft_p95_ms <== 500", "column 13");
    line_bad("ttft_p95_ms <= abc", "expected a number");
    line_bad("ttft_p95_ms <= 500 at", "input_length or output_length");
    line_bad("ttft_p95_ms <= 500 at context >= 5", "input_length or output_length");
    line_bad("ttft_p95_ms <= 500 at input_length >= 5 or output_length < 3", "expected `and`");
    line_bad("ttft_p95_ms <= 500 when input_length >= 5", "column 20: expected '&&', '||', 'at', 'where', 'for' or the end, got 'when'");
    line_bad("ttft_p95_ms <= 500 at input_length >= 5 || output_length < 3", "column 41: expected `and`");
    line_bad("ttft_p95_ms <= 500 at input_length >= 5 and output_length < 3 and input_length < 9 and output_length > 1 "
             "and input_length > 2", "at most 4 conditions");
    line_bad("ttft_p95_ms <= 500 at input_length >= abc", "column 39: expected a number after '>=', got 'abc'");
    line_bad("ttft_p95_ms <= 500 && itl_p99_ms < 3", "an SLA line is `METRIC OP NUMBER [at CONDITIONS]`, got '&&'");
    line_bad("output_tok_per_s >= 10 at input_length > 5", "only to per-request metrics");
}

static const char *write_sla(const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/sla.yaml", tu_dir);
    tu_write_file(path, text);
    return path;
}

static void sla_file_bad(const char *text, int line, const char *needle)
{
    struct k25_error err;
    const char *p = write_sla(text);
    if (k25_sla_load(p, &g_sla, &err) == K25_OK)
        fail_msg("SLA file accepted:\n%s", text);
    char want[600];
    snprintf(want, sizeof(want), "%s:%d:", p, line);
    if (!strstr(err.msg, want) || !strstr(err.msg, needle))
        fail_msg("got \"%s\"\nwanted \"%s\" and \"%s\"", err.msg, want, needle);
}

static void test_sla_file(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_sla("title: box 7\nsla:\n  - \"ttft_p95_ms <= 500\"\n  - \"e2e_p50_ms <= 9000\"\n"
                              "health:\n  kv_usage_ratio: off\n  busy_p95: {warn_below: 0.5, warn_above: 0.95, "
                              "fail_above: 0.99}\n  peak_memory_mb: {fail_above: 1024}\n");
    assert_int_equal(k25_sla_load(p, &g_sla, &err), K25_OK);
    assert_string_equal(g_sla.title, "box 7");
    assert_int_equal(g_sla.n_lines, 2);
    assert_int_equal(g_sla.lines[1].line, 4);
    assert_int_equal(g_sla.n_health, 7); /* 6 defaults + peak memory */
    for (int i = 0; i < g_sla.n_health; i++) {
        if (!strcmp(g_sla.health[i].metric, "kv_usage_ratio"))
            assert_false(g_sla.health[i].enabled);
        if (!strcmp(g_sla.health[i].metric, "busy_p95")) {
            assert_true(g_sla.health[i].warn_below == 0.5);
            assert_true(g_sla.health[i].fail_above == 0.99);
        }
    }
    sla_file_bad("sla:\n  - \"ttft_p95_ms <= 500\"\n  - \"ttft_p95 <= 5\"\n", 3, "unknown metric 'ttft_p95'");
    sla_file_bad("sla:\n  - \"ttft_p95_ms <= 500\"\nbogus: 1\n", 3, "unknown key");
    sla_file_bad("sla: \"ttft_p95_ms <= 500\"\n", 1, "expected a list");
    sla_file_bad("sla:\n  - [1, 2]\n", 2, "each SLA line is a string");
    sla_file_bad("health:\n  kv_cache_hit_rate: {warn_belo: 0.9}\n", 2, "warn_belo");
    sla_file_bad("health:\n  nope_rate: off\n", 2, "unknown health metric");
    sla_file_bad("health:\n  busy_p95: {warn_above: 0.9, fail_above: 0.8}\n", 2, "outside the warn bounds");
    sla_file_bad("sla:\n  - \"ttft_p95_ms <= 500\"\n  - [unclosed\n", 4, "YAML");
    assert_int_equal(k25_sla_load("/nonexistent/sla.yaml", &g_sla, &err), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/sla.yaml"));
}

/* Hand-made samples: PASS, FAIL, the edge, unsupported percentiles. */
static void test_sla_eval(void **state)
{
    (void)state;
    struct k25_sla_line l;
    struct k25_sla_result r;
    double v[200];
    /* 20 samples 1..20: P95 is the 19th (nearest rank ceil(0.95 * 20) = 19) */
    line_ok("ttft_p95_ms <= 19", &l);
    for (int i = 0; i < 20; i++)
        v[i] = 20 - i; /* unsorted on purpose */
    k25_sla_eval_samples(&l, v, 20, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS); /* equal to the limit: <= holds */
    assert_true(r.value == 19);
    assert_true(r.margin == 0);
    line_ok("ttft_p95_ms < 19", &l);
    for (int i = 0; i < 20; i++)
        v[i] = i + 1;
    k25_sla_eval_samples(&l, v, 20, &r);
    assert_int_equal(r.verdict, K25_VERDICT_FAIL); /* equal: < does not hold */
    line_ok("ttft_p95_ms <= 18.5", &l);
    k25_sla_eval_samples(&l, v, 20, &r);
    assert_int_equal(r.verdict, K25_VERDICT_FAIL);
    assert_true(fabs(r.margin + 0.5) < 1e-12);
    assert_true(fabs(r.margin_pct + 0.5 / 18.5 * 100) < 1e-9);
    line_ok("ttft_p95_ms <= 100", &l);
    k25_sla_eval_samples(&l, v, 20, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS);
    assert_true(r.margin == 81);
    /* 19 samples cannot support P95: UNSUPPORTED, whatever the values */
    k25_sla_eval_samples(&l, v, 19, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED);
    assert_non_null(strstr(r.note, "needs at least 20"));
    assert_true(isnan(r.value));
    /* P99 needs 100 */
    line_ok("ttft_p99_ms <= 1000", &l);
    for (int i = 0; i < 100; i++)
        v[i] = i;
    k25_sla_eval_samples(&l, v, 99, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED);
    k25_sla_eval_samples(&l, v, 100, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS);
    assert_true(r.value == 98); /* rank 99 of 0..99 */
    /* empty selection */
    k25_sla_eval_samples(&l, v, 0, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED);
    /* throughput: >= */
    line_ok("requests_per_s >= 4", &l);
    assert_true(k25_sla_op_holds(l.op, 4, 4));
    /* mean and max */
    line_ok("e2e_mean_ms <= 2", &l);
    double w[3] = {1, 2, 3};
    k25_sla_eval_samples(&l, w, 3, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS);
    assert_true(r.value == 2);
    line_ok("e2e_max_ms <= 2", &l);
    k25_sla_eval_samples(&l, w, 3, &r);
    assert_int_equal(r.verdict, K25_VERDICT_FAIL);

    /* on a hand-made run: the condition selects the long requests only */
    struct k25_report_run run;
    memset(&run, 0, sizeof(run));
    struct k25_bench_req reqs[40];
    memset(reqs, 0, sizeof(reqs));
    for (int i = 0; i < 40; i++) {
        reqs[i].state = K25_REQ_COMPLETED;
        reqs[i].n_input = i < 20 ? 1000 : 40000;
        reqs[i].arrival_ns = 0;
        reqs[i].first_ns = (int64_t)(i < 20 ? 10 : 600) * 1000000; /* short: 10 ms, long: 600 ms */
        reqs[i].finish_ns = reqs[i].first_ns;
    }
    run.t.run.reqs = reqs;
    run.t.run.n_reqs = 40;
    run.summary = json_pack("{s:{s:f}}", "summary", "output_tok_per_s", 123.0);
    line_ok("ttft_p95_ms <= 500 at input_length >= 32k", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_FAIL);
    assert_true(fabs(r.value - 600) < 1e-9);
    assert_int_equal(r.n, 20);
    line_ok("ttft_p95_ms <= 500 at input_length < 32k", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS);
    line_ok("ttft_p95_ms <= 500 at input_length > 100000", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED);
    line_ok("output_tok_per_s >= 100", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS);
    line_ok("kv_cache_hit_rate >= 0.9", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED); /* not measured is never PASS */
    json_decref(run.summary);
}

static void test_health(void **state)
{
    (void)state;
    struct k25_health_check h[K25_HEALTH_MAX];
    int n = k25_health_defaults(h, K25_HEALTH_MAX);
    assert_int_equal(n, 6);
    struct k25_health_result r;
    /* kv_cache_hit_rate (the KV tiers' measured figure): >= 0.92 passes, below fails */
    k25_health_eval(&h[0], 0.95, &r);
    assert_int_equal(r.level, K25_HEALTH_OK);
    k25_health_eval(&h[0], 0.92, &r);
    assert_int_equal(r.level, K25_HEALTH_OK);
    k25_health_eval(&h[0], 0.9199, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    k25_health_eval(&h[0], 0.85, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    assert_non_null(strstr(r.note, "cold tier"));
    /* busy P95 */
    k25_health_eval(&h[1], 0.80, &r);
    assert_int_equal(r.level, K25_HEALTH_OK);
    k25_health_eval(&h[1], 0.60, &r);
    assert_int_equal(r.level, K25_HEALTH_WARN);
    k25_health_eval(&h[1], 0.88, &r);
    assert_int_equal(r.level, K25_HEALTH_WARN);
    k25_health_eval(&h[1], 0.95, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    assert_non_null(strstr(r.note, "scale out"));
    /* degraded ratio, KV usage */
    k25_health_eval(&h[2], 0.004, &r);
    assert_int_equal(r.level, K25_HEALTH_OK);
    k25_health_eval(&h[2], 0.007, &r);
    assert_int_equal(r.level, K25_HEALTH_WARN);
    k25_health_eval(&h[2], 0.02, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    k25_health_eval(&h[3], 0.95, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    /* GPU utilization P95 (NVML): the busy check's band */
    assert_string_equal(h[4].metric, "gpu_utilization_p95");
    k25_health_eval(&h[4], 0.80, &r);
    assert_int_equal(r.level, K25_HEALTH_OK);
    k25_health_eval(&h[4], 0.70, &r);
    assert_int_equal(r.level, K25_HEALTH_WARN);
    k25_health_eval(&h[4], 0.93, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    /* queue depth: the mean waiting, warn above 1, fail above 4 */
    assert_string_equal(h[5].metric, "queue_waiting_mean");
    k25_health_eval(&h[5], 0.5, &r);
    assert_int_equal(r.level, K25_HEALTH_OK);
    k25_health_eval(&h[5], 2, &r);
    assert_int_equal(r.level, K25_HEALTH_WARN);
    k25_health_eval(&h[5], 4.5, &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    /* not measured is said, not guessed */
    k25_health_eval(&h[0], NAN, &r);
    assert_int_equal(r.level, K25_HEALTH_NOT_MEASURED);
    /* ... with the reason the run gives: an endpoint run without NVML or --server-metrics */
    {
        struct k25_report_run er;
        memset(&er, 0, sizeof(er));
        er.summary = json_pack("{s:{s:s, s:{s:n, s:s}, s:{s:n, s:n, s:s}}}", "summary", "target", "endpoint", "gpu",
                               "gpu_utilization_p95", "reason", "NVML not available: scripted", "queue_waiting",
                               "max", "mean", "reason", "the server's queue is not visible from the client");
        char why[256];
        assert_true(isnan(k25_health_value(&h[5], &er, 1)));
        k25_health_missing_why(&h[4], &er, 1, why, sizeof(why));
        assert_string_equal(why, "NVML not available: scripted");
        k25_health_missing_why(&h[3], &er, 1, why, sizeof(why));
        assert_non_null(strstr(why, "--server-metrics"));
        k25_health_missing_why(&h[5], &er, 1, why, sizeof(why));
        assert_non_null(strstr(why, "not visible from the client"));
        k25_health_missing_why(&h[1], &er, 1, why, sizeof(why));
        assert_non_null(strstr(why, "busy fraction is not visible from the client"));
        json_decref(er.summary);
        er.summary = json_pack("{s:{s:{s:f, s:f, s:i}}}", "summary", "queue_waiting", "max", 3.0, "mean", 0.75, "n", 8);
        assert_true(k25_health_value(&h[5], &er, 1) == 0.75); /* the mean, not the peak */
        json_decref(er.summary);
    }
    struct k25_report_run run;
    memset(&run, 0, sizeof(run));
    run.summary = json_pack("{s:{s:f, s:{s:f}}}", "summary", "kv_cache_hit_rate", 0.97, "busy_fraction", "p95", 0.8);
    assert_true(k25_health_value(&h[0], &run, 1) == 0.97);
    assert_true(k25_health_value(&h[1], &run, 1) == 0.8);
    assert_true(isnan(k25_health_value(&h[2], &run, 1)));
    /* the busy check does not apply to a closed loop (busy near 1 by construction); others do */
    char why[64];
    run.workload = json_pack("{s:s}", "mode", "closed");
    assert_false(k25_health_applies(&h[1], &run, 1, why, sizeof(why)));
    assert_string_equal(why, "closed loop");
    assert_false(k25_health_applies(&h[4], &run, 1, why, sizeof(why)));
    assert_true(k25_health_applies(&h[0], &run, 1, why, sizeof(why)));
    json_decref(run.workload);
    run.workload = json_pack("{s:s}", "mode", "open");
    assert_true(k25_health_applies(&h[1], &run, 1, why, sizeof(why)));
    assert_string_equal(k25_health_level_name(K25_HEALTH_NA), "n/a");
    /* the hit rate with tiers off: n/a (tiers off); a run before the figure existed: applies
     * (and reads "not measured": no value) */
    json_decref(run.summary);
    run.summary = json_pack("{s:{s:b, s:n}}", "summary", "kv_tiers_enabled", 0, "kv_cache_hit_rate");
    assert_false(k25_health_applies(&h[0], &run, 1, why, sizeof(why)));
    assert_string_equal(why, "tiers off");
    json_decref(run.summary);
    run.summary = json_pack("{s:{s:f}}", "summary", "requests_per_s", 1.0);
    assert_true(k25_health_applies(&h[0], &run, 1, why, sizeof(why)));
    assert_true(isnan(k25_health_value(&h[0], &run, 1)));
    json_decref(run.summary);
    run.summary = json_pack("{s:{s:b, s:f}}", "summary", "kv_tiers_enabled", 1, "kv_cache_hit_rate", 0.5);
    assert_true(k25_health_applies(&h[0], &run, 1, why, sizeof(why)));
    k25_health_eval(&h[0], k25_health_value(&h[0], &run, 1), &r);
    assert_int_equal(r.level, K25_HEALTH_FAIL);
    json_decref(run.workload);
    json_decref(run.summary);
}

/* The shortest decimal that reads back as the same double (--print-best YAML, config.yaml values). */
static void test_fmt_double(void **state)
{
    (void)state;
    char b[64];
    k25_fmt_double(0.85, b, sizeof(b));
    assert_string_equal(b, "0.85");
    k25_fmt_double(0.1 + 0.2, b, sizeof(b));
    assert_string_equal(b, "0.30000000000000004");
    k25_fmt_double(4096, b, sizeof(b));
    assert_string_equal(b, "4096");
    k25_fmt_double(-2.5e-7, b, sizeof(b));
    assert_string_equal(b, "-2.5e-07");
    k25_fmt_double(NAN, b, sizeof(b));
    assert_string_equal(b, ".nan");
    /* every value round-trips, and one digit fewer would not */
    unsigned long long x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double v;
        memcpy(&v, &x, sizeof(v));
        if (!isfinite(v))
            continue;
        k25_fmt_double(v, b, sizeof(b));
        if (strtod(b, NULL) != v)
            fail_msg("%s does not read back as %.17g", b, v);
        char shorter[400];
        int digits = 0;
        for (const char *c = b; *c && *c != 'e'; c++)
            digits += *c >= '0' && *c <= '9';
        if (digits > 1) {
            snprintf(shorter, sizeof(shorter), "%.*g", digits - 1, v);
            if (strtod(shorter, NULL) == v && strlen(shorter) < strlen(b))
                fail_msg("%s is not the shortest: %s reads back too", b, shorter);
        }
    }
}

/*
 * Issue 32, library level: an SLA line whose condition selects no request
 * says which condition and the range the runs covered; the TTFT trend is
 * fitted with a non-negative overhead and slope.
 */
static void test_sla_no_match_and_fit(void **state)
{
    (void)state;
    struct k25_report_run run;
    memset(&run, 0, sizeof(run));
    struct k25_bench_req reqs[3];
    memset(reqs, 0, sizeof(reqs));
    int lens[3] = {512, 869, 920};
    for (int i = 0; i < 3; i++) {
        reqs[i].state = K25_REQ_COMPLETED;
        reqs[i].n_input = lens[i];
        reqs[i].n_output = 24;
        reqs[i].arrival_ns = reqs[i].submit_ns = reqs[i].admit_ns = 0;
        reqs[i].first_ns = 1000000 * (i + 1);
        reqs[i].finish_ns = 5000000;
    }
    run.t.run.reqs = reqs;
    run.t.run.n_reqs = 3;
    struct k25_sla_line l;
    struct k25_sla_result r;
    line_ok("ttft_p50_ms <= 500 at input_length >= 32768", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED);
    if (!strstr(r.note, "no completed request has input_length >= 32768") || !strstr(r.note, "512 to 920 tokens"))
        fail_msg("note: %s", r.note);
    line_ok("ttft_p50_ms <= 500 at input_length >= 600 and input_length < 700", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_UNSUPPORTED);
    assert_non_null(strstr(r.note, "none matches all at once"));
    line_ok("ttft_p50_ms <= 500 at input_length >= 800", &l);
    k25_sla_eval(&l, &run, 1, &r);
    assert_int_equal(r.verdict, K25_VERDICT_PASS);

    /* TTFT falling with length (queueing): the unconstrained line has a negative slope; the fit is flat */
    double xs[4] = {1000, 2000, 3000, 4000}, ys[4] = {900, 700, 800, 500};
    double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0, a, b, r2;
    for (int i = 0; i < 4; i++)
        sx += xs[i], sy += ys[i], sxx += xs[i] * xs[i], sxy += xs[i] * ys[i], syy += ys[i] * ys[i];
    k25_report_fit_nonneg(sx, sy, sxx, sxy, syy, 4, &a, &b, &r2);
    assert_true(b == 0 && fabs(a - 725) < 1e-9);
    assert_true(r2 == 0);
    /* a steep rise from a late start: the unconstrained intercept is negative; the fit goes through 0 */
    double ys2[4] = {100, 1300, 2500, 3700};
    sy = sxy = syy = 0;
    for (int i = 0; i < 4; i++)
        sy += ys2[i], sxy += xs[i] * ys2[i], syy += ys2[i] * ys2[i];
    k25_report_fit_nonneg(sx, sy, sxx, sxy, syy, 4, &a, &b, &r2);
    assert_true(a == 0 && b > 0 && fabs(b - sxy / sxx) < 1e-12);
    assert_true(r2 > 0.8 && r2 < 1);
    /* a clean line with a positive intercept is the ordinary least-squares fit */
    double ys3[4] = {150, 250, 350, 450};
    sy = sxy = syy = 0;
    for (int i = 0; i < 4; i++)
        sy += ys3[i], sxy += xs[i] * ys3[i], syy += ys3[i] * ys3[i];
    k25_report_fit_nonneg(sx, sy, sxx, sxy, syy, 4, &a, &b, &r2);
    assert_true(fabs(a - 50) < 1e-6 && fabs(b - 0.1) < 1e-9 && fabs(r2 - 1) < 1e-9);
}

/* ------------------------------------------------------ process level */

static bool have_gnuplot(void)
{
    return tu_run("command -v gnuplot >/dev/null", NULL) == 0;
}

static long fsize(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static bool png_ok(const char *p)
{
    FILE *f = fopen(p, "rb");
    unsigned char b[8] = {0};
    bool ok = f && fread(b, 1, 8, f) == 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8);
    if (f)
        fclose(f);
    return ok;
}

static char *slurp(const char *p)
{
    char cmd[2100], *out;
    snprintf(cmd, sizeof(cmd), "cat '%s'", p);
    assert_int_equal(tu_run(cmd, &out), 0);
    return out;
}

/* Width and height from a PNG's IHDR chunk; false when it is not a PNG. */
static bool png_size(const char *p, unsigned *w, unsigned *h)
{
    FILE *f = fopen(p, "rb");
    unsigned char b[24] = {0};
    bool ok = f && fread(b, 1, 24, f) == 24 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4);
    if (f)
        fclose(f);
    *w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19];
    *h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23];
    return ok;
}

/*
 * Every key placed explicitly outside the plot area: each `set key` line
 * of the script (the preamble's `set key noautotitle` aside) names a
 * margin, `outside`, or screen coordinates.  A key left inside the plot
 * hides data (the timeline's did).
 */
static void keys_outside(const char *gp)
{
    char *s = slurp(gp);
    int placed = 0;
    for (char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char line[512];
        size_t n = strcspn(l, "\n");
        snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) ? n : sizeof(line) - 1), l);
        char *k = strstr(line, "set key");
        if (!k || strstr(line, "noautotitle") || strchr(line, '#') == line)
            continue;
        if (!strstr(k, "outside") && !strstr(k, "margin") && !strstr(k, "at screen"))
            fail_msg("%s: a key inside the plot area: %s", gp, line);
        placed++;
    }
    if (!placed && strstr(s, " title ") && !strstr(s, "unset key"))
        fail_msg("%s: titled series but no explicit key placement", gp);
    free(s);
}

/* ------------------------------------------- what a sign-off reader is shown */

/* The whole of a file, malloc'd ("" when it cannot be read). */
static char *read_all(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return strdup("");
    char *b = NULL;
    size_t n = 0, cap = 0, r;
    char chunk[8192];
    while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (n + r + 1 > cap) {
            cap = (n + r + 1) * 2;
            b = realloc(b, cap);
            assert_non_null(b);
        }
        memcpy(b + n, chunk, r);
        n += r;
    }
    fclose(f);
    if (!b)
        return strdup("");
    b[n] = 0;
    return b;
}

/* title as the gnuplot single-quoted literal the report writes ('' for '). */
static void gp_quoted(const char *t, char *q, size_t n)
{
    size_t o = 0;
    q[o++] = '\'';
    for (; *t && o + 3 < n; t++) {
        if (*t == '\'')
            q[o++] = '\'';
        q[o++] = *t;
    }
    q[o++] = '\'';
    q[o] = 0;
}

/* A number written in scientific notation ("1.578e+04"): a reader should never meet one. */
static bool has_sci(const char *s, size_t n)
{
    for (size_t i = 1; i + 2 < n; i++)
        if ((s[i] == 'e' || s[i] == 'E') && (s[i + 1] == '+' || s[i + 1] == '-') && s[i - 1] >= '0' &&
            s[i - 1] <= '9' && s[i + 2] >= '0' && s[i + 2] <= '9')
            return true;
    return false;
}

/*
 * No caption cut short (issue 32: fixed buffers left "...Hatched cells",
 * "Concurrent requests shar"): in report.md every picture's caption ends a
 * sentence, its title is the one its kept script draws, whole, and every
 * "Not drawn:" line ends with a full stop.  Returns the captions checked.
 */
static int captions_whole(const char *out)
{
    char p[1200];
    snprintf(p, sizeof(p), "%s/report.md", out);
    char *md = read_all(p);
    int n = 0;
    for (char *l = md; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t len = strcspn(l, "\n");
        if (!strncmp(l, "Not drawn:", 10) && (len < 2 || l[len - 1] != '.'))
            fail_msg("%s: a cut line: %.*s", p, (int)len, l);
        if (strncmp(l, "![", 2) != 0)
            continue;
        char *mid = strstr(l, "](plots/");
        assert_non_null(mid);
        char title[1024], stem[256];
        snprintf(title, sizeof(title), "%.*s", (int)(mid - l - 2), l + 2);
        char *dot = strchr(mid + 8, '.');
        assert_non_null(dot);
        snprintf(stem, sizeof(stem), "%.*s", (int)(dot - mid - 8), mid + 8);
        /* the caption: the next non-empty line, "*...*" */
        char *c = strchr(l, '\n');
        while (c && *c == '\n')
            c++;
        assert_non_null(c);
        size_t cl = strcspn(c, "\n");
        if (cl < 4 || c[0] != '*' || c[cl - 1] != '*' || (c[cl - 2] != '.' && c[cl - 2] != ')'))
            fail_msg("%s: the caption of %s does not end a sentence (cut?): %.*s", p, stem, (int)cl, c);
        if (has_sci(title, strlen(title)) || has_sci(c, cl))
            fail_msg("%s: scientific notation in the title or caption of %s", p, stem);
        char gp[1400], q[2100];
        snprintf(gp, sizeof(gp), "%s/plots/%s.gp", out, stem);
        char *script = read_all(gp);
        gp_quoted(title, q, sizeof(q));
        if (!strstr(script, q))
            fail_msg("%s: the title '%s' (report.md) is not the one the script draws whole", gp, title);
        /* the titles the script draws (a fit's note included) are in plain decimals too */
        for (char *sl = script; (sl = strstr(sl, "set title ")); sl += 10) {
            size_t tl = strcspn(sl, "\n");
            if (has_sci(sl, tl))
                fail_msg("%s: scientific notation in %.*s", gp, (int)tl, sl);
        }
        free(script);
        n++;
    }
    free(md);
    return n;
}

/* Plot stems whose x axis is a non-negative quantity (the rest place categories at -0.5, ...). */
static bool x_nonneg(const char *stem)
{
    static const char *const x[] = {"run_cdf", "run_itl_hist", "run_ttft_len", "run_tput_len", "run_timeline",
                                    "cmp_cdf", "attn_time", "attn_scratch", "attn_roofline", "sweep_pareto"};
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        if (strstr(stem, x[i]))
            return true;
    return false;
}

/*
 * Writes plots/.check-STEM.gp: the kept script with, after each plot
 * command, a line that prints the axes gnuplot settled on (x, y and, for a
 * plot with a right axis, y2 minimum) to plots/.axes-STEM.txt.  What is
 * drawn is unchanged.
 */
static void axes_script(const char *dir, const char *stem, char *path, size_t n)
{
    char gp[1400];
    snprintf(gp, sizeof(gp), "%s/%s.gp", dir, stem);
    char *s = read_all(gp);
    snprintf(path, n, "%s/.check-%s.gp", dir, stem);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "set print '.axes-%s.txt'\n", stem);
    bool in_plot = false, cont = false, y2 = false;
    for (char *l = s; l && *l;) {
        size_t len = strcspn(l, "\n");
        const char *t = l;
        while (*t == ' ')
            t++;
        if (!cont && (!strncmp(t, "plot ", 5) || !strncmp(t, "eval p", 6))) {
            in_plot = true;
            y2 = false;
        }
        if (in_plot && memmem(l, len, "x1y2", 4))
            y2 = true;
        fprintf(f, "%.*s\n", (int)len, l);
        cont = len > 0 && l[len - 1] == '\\';
        if (in_plot && !cont) {
            fprintf(f, "print sprintf('AXES %%.9g %%.9g %%.9g %d', GPVAL_X_MIN, GPVAL_Y_MIN, GPVAL_Y2_MIN)\n", y2);
            in_plot = false;
        }
        l = l[len] ? l + len + 1 : NULL;
    }
    assert_int_equal(fclose(f), 0);
    free(s);
}

/* Checks plots/.axes-STEM.txt: no axis of a non-negative quantity below 0 (heatmaps: index axes). */
static void axes_nonneg(const char *dir, const char *stem)
{
    char p[1400];
    snprintf(p, sizeof(p), "%s/.axes-%s.txt", dir, stem);
    char *s = read_all(p);
    int n = 0;
    for (char *l = s; (l = strstr(l, "AXES ")); l += 5) {
        double x, y, y2;
        int has_y2;
        assert_int_equal(sscanf(l, "AXES %lf %lf %lf %d", &x, &y, &y2, &has_y2), 4);
        if (!strstr(stem, "heatmap")) {
            if (y < 0)
                fail_msg("%s: the y axis runs to %g: below 0 for a quantity that cannot be", stem, y);
            if (has_y2 && y2 < 0)
                fail_msg("%s: the right axis runs to %g", stem, y2);
            if (x_nonneg(stem) && x < 0)
                fail_msg("%s: the x axis runs to %g", stem, x);
        }
        n++;
    }
    if (!n)
        fail_msg("%s: no plot command reported its axes", stem);
    free(s);
    unlink(p);
}

/*
 * Every key entry has data (issue 32: the timeline's key listed breaker and
 * spill series that were absent): the script run again under `set table`,
 * each titled curve must hold at least one point in range.  A key entry
 * without points is allowed only for what the plot draws otherwise: the
 * dashed percentile lines (arrows), the healthy band and the frame around
 * the leader (objects), and blank heatmap cells (labelled "not run").
 */
static void legends_have_data(const char *dir, const char *stem)
{
    char gp[1400], tab[1400], cmd[4200], tmp[1500];
    snprintf(gp, sizeof(gp), "%s/%s.gp", dir, stem);
    snprintf(tab, sizeof(tab), "%s/.table-%s.txt", dir, stem);
    snprintf(tmp, sizeof(tmp), "%s/.table-%s.gp", dir, stem);
    char *s = read_all(gp);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f, "set table '.table-%s.txt'\n", stem);
    /* the picture is not drawn again: its output goes nowhere */
    for (char *l = s; l && *l;) {
        size_t len = strcspn(l, "\n");
        if (!strncmp(l, "set output ", 11))
            fprintf(f, "set output '/dev/null'\n");
        else
            fprintf(f, "%.*s\n", (int)len, l);
        l = l[len] ? l + len + 1 : NULL;
    }
    assert_int_equal(fclose(f), 0);
    free(s);
    snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot '.table-%s.gp' >/dev/null 2>&1", dir, stem);
    assert_int_equal(tu_run(cmd, NULL), 0);
    char *t = read_all(tab);
    static const char *const decor[] = {"P50 ", "P90 ", "P95 ", "P99 ", "healthy band", "framed: ", "not run"};
    for (char *c = t; (c = strstr(c, "# Curve title: \"")); c += 16) {
        char title[300];
        const char *q = c + 16;
        snprintf(title, sizeof(title), "%.*s", (int)strcspn(q, "\""), q);
        /* the points: lines up to the next "# Curve" header; a point's last word is its type (i, o, u) */
        const char *end = strstr(q, "# Curve ");
        int in_range = 0;
        for (const char *l = strchr(q, '\n'); l && (!end || l < end); l = strchr(l + 1, '\n')) {
            const char *e = strchr(l + 1, '\n');
            size_t len = e ? (size_t)(e - l - 1) : strlen(l + 1);
            if (len >= 2 && l[1] != '#' && (l[len] == 'i' || l[len] == 'o') && l[len - 1] == ' ')
                in_range++;
        }
        /* plain decimals in keys: "P99 15780 ms", never "P99 1.578e+04 ms" */
        const char *e = strstr(title, "e+");
        if (e && e > title && e[-1] >= '0' && e[-1] <= '9' && e[2] >= '0' && e[2] <= '9')
            fail_msg("%s: a key in scientific notation: '%s'", stem, title);
        if (in_range)
            continue;
        /* "2: run2": the legend of the run numbers written on the bars */
        bool ok = title[0] >= '1' && title[0] <= '9' && strchr(title, ':');
        for (size_t k = 0; k < sizeof(decor) / sizeof(decor[0]); k++)
            ok = ok || !strncmp(title, decor[k], strlen(decor[k]));
        if (ok && !strncmp(title, "not run", 7)) { /* a blank cell is labelled */
            const char *lab = strstr(t, "not run");
            ok = lab && strstr(lab + 7, "not run");
        }
        if (!ok)
            fail_msg("%s: the key names '%s', which has no data in the plot", stem, title);
    }
    free(t);
    unlink(tab);
    unlink(tmp);
}

/*
 * Draws every plot of the report folder again from its kept script
 * (plots/NAME.gp, as a user would) with gnuplot's stderr captured: it
 * must exit 0 and print nothing (a warning such as "empty x range" or
 * "Skipping data file with no valid points" fails), the picture must be
 * a PNG of a sane size (at least 600 x 400, at most 2000 x 2000, 10 KiB
 * or more: not blank), and its keys placed outside the plot area.
 * Returns the number of plots checked.
 */
static int render_check(const char *out)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/plots", out);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".gp") != 0)
            continue;
        char stem[256], cmd[4200], p[1400], chk[1500], *o = NULL;
        if (e->d_name[0] == '.')
            continue; /* the derived scripts below */
        snprintf(stem, sizeof(stem), "%.*s", (int)(l - 3), e->d_name);
        /* the kept script, with its axes printed to a side file (what is drawn is unchanged) */
        axes_script(dir, stem, chk, sizeof(chk));
        snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot '%s' 2>&1 >/dev/null", dir, chk);
        int st = tu_run(cmd, &o);
        if (st != 0 || (o && *o))
            fail_msg("%s/%s.gp: gnuplot exit %d, stderr:\n%s", dir, stem, st, o ? o : "");
        free(o);
        unlink(chk);
        axes_nonneg(dir, stem);
        legends_have_data(dir, stem);
        snprintf(p, sizeof(p), "%s/%s.png", dir, stem);
        unsigned w = 0, h = 0;
        if (fsize(p) > 0) { /* svg / pdf reports are checked by report_ok */
            if (!png_size(p, &w, &h))
                fail_msg("%s: not a PNG", p);
            if (w < 600 || h < 400 || w > 2000 || h > 2000 || fsize(p) < 10240)
                fail_msg("%s: %u x %u, %ld bytes: not a sane picture", p, w, h, fsize(p));
        }
        snprintf(p, sizeof(p), "%s/%s.gp", dir, stem);
        keys_outside(p);
        n++;
    }
    closedir(d);
    return n;
}

/*
 * Opens report.html in headless Chromium with every host unresolvable
 * and no proxy reachable, and takes a screenshot: the page renders
 * offline.  Skipped, saying why, where Chromium is not installed (it is
 * not a dependency of k25bench).
 */
static void browser_check(const char *out)
{
    const char *br = NULL;
    static const char *const names[] = {"chromium", "chromium-browser", "google-chrome"};
    char cmd[4096], *o = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !br; i++) {
        snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null", names[i]);
        if (tu_run(cmd, NULL) == 0)
            br = names[i];
    }
    if (!br) {
        fprintf(stderr, "[  SKIP    ] the headless-browser check of %s/report.html: chromium is not installed "
                        "(apt-get install chromium to run it)\n", out);
        return;
    }
    char abs[PATH_MAX], shot[PATH_MAX + 32];
    char *cmdl = NULL;
    assert_non_null(realpath(out, abs));
    snprintf(shot, sizeof(shot), "%s/../shot-%d.png", abs, (int)getpid());
    assert_true(asprintf(&cmdl,
                         "timeout 120 %s --headless --no-sandbox --disable-gpu --no-first-run "
                         "--proxy-server=127.0.0.1:9 --host-resolver-rules='MAP * ~NOTFOUND' --window-size=1200,2400 "
                         "--screenshot='%s' 'file://%s/report.html' 2>&1",
                         br, shot, abs) > 0);
    int st = tu_run(cmdl, &o);
    unsigned w = 0, h = 0;
    if (st != 0 || !png_size(shot, &w, &h) || w != 1200 || fsize(shot) < 20000)
        fail_msg("%s: exit %d, screenshot %u x %u, %ld bytes\n%s", cmdl, st, w, h, fsize(shot), o ? o : "");
    free(o);
    free(cmdl);
    unlink(shot);
}

/* Runs k25 report and checks the files every report has. */
static void report_ok(const char *args, const char *out, const char *const *plots, const char *ext)
{
    char cmd[4096], *o, p[1024];
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s", tu_k25(), args, out);
    int st = tu_run(cmd, &o);
    if (st != 0)
        fail_msg("%s\nexit %d\n%s", cmd, st, o);
    free(o);
    static const char *const files[] = {"report.md", "report.html", "verdict.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", out, files[i]);
        if (fsize(p) <= 0)
            fail_msg("%s missing or empty", p);
    }
    for (int i = 0; plots[i]; i++) {
        snprintf(p, sizeof(p), "%s/plots/%s.%s", out, plots[i], ext);
        if (fsize(p) <= 0)
            fail_msg("%s missing or empty", p);
        if (!strcmp(ext, "png") && !png_ok(p))
            fail_msg("%s: not a PNG", p);
        snprintf(p, sizeof(p), "%s/plots/%s.gp", out, plots[i]);
        if (fsize(p) <= 0)
            fail_msg("%s (the script) missing", p);
    }
    /* self-contained HTML: every image inline, nothing fetched from elsewhere */
    snprintf(p, sizeof(p), "%s/report.html", out);
    char *html = slurp(p);
    assert_null(strstr(html, "http://"));
    assert_null(strstr(html, "https://"));
    assert_null(strstr(html, "<script"));
    assert_null(strstr(html, "<link"));
    assert_null(strstr(html, "url("));
    int imgs = 0;
    for (const char *s = html; (s = strstr(s, "src=\"")); s += 5) {
        if (strncmp(s + 5, "data:image/", 11) != 0)
            fail_msg("%s: an image that is not embedded: %.60s", p, s);
        imgs++;
    }
    int n = 0;
    while (plots[n])
        n++;
    assert_true(imgs >= n);
    free(html);
    /* the Markdown links the pictures relative to the report folder */
    snprintf(p, sizeof(p), "%s/report.md", out);
    char *md = slurp(p);
    for (int i = 0; plots[i]; i++) {
        char want[200];
        snprintf(want, sizeof(want), "](plots/%s.%s)", plots[i], ext);
        if (!strstr(md, want))
            fail_msg("report.md lacks %s", want);
    }
    assert_non_null(strstr(md, "## Provenance"));
    assert_null(strstr(md, "DESIGN.md")); /* users do not have it: docs/ only */
    free(md);
    if (!strcmp(ext, "png")) {
        assert_true(render_check(out) >= n);
        assert_true(captions_whole(out) >= n);
        browser_check(out);
    }
}

static char g_run[600], g_run2[600], g_attn[600], g_sweep[600];

static int inputs_setup(void **state)
{
    (void)state;
    if (tu_group_setup(state))
        return -1;
    if (!have_gnuplot())
        return 0;
    snprintf(g_run, sizeof(g_run), "%s/run.h5", tu_dir);
    snprintf(g_run2, sizeof(g_run2), "%s/run2.h5", tu_dir);
    /* k25 attn-bench measures the machine first (a minute under the sanitizers): a stored
     * file of `k25 attn-bench --impl chunked,flash2,naive --context 256,512 --repeat 1` */
    snprintf(g_attn, sizeof(g_attn), "tests/data/report-attn.h5");
    char cmd[4096];
    /* the sweep is a stored fixture (a ci-smoke sweep folder, reduced to summary.json and
     * the best and reference points' traces): running one takes too long for this test */
    snprintf(g_sweep, sizeof(g_sweep), "tests/data/report-sweep");
    snprintf(cmd, sizeof(cmd),
             "%s bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter 'input_length <= 1024' "
             "--requests 6 --concurrency 2 --threads 1 --out %s --quiet >/dev/null & "
             "%s bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter 'input_length <= 1024' "
             "--requests 6 --concurrency 1 --threads 1 --out %s --quiet >/dev/null && wait",
             tu_k25(), g_run, tu_k25(), g_run2);
    char *o;
    int st = tu_run(cmd, &o);
    if (st != 0) {
        fprintf(stderr, "making the inputs failed:\n%s\n%s\n", cmd, o);
        free(o);
        return -1;
    }
    free(o);
    return 0;
}

static void test_report_run(void **state)
{
    (void)state;
    if (!have_gnuplot())
        skip();
    char args[2048], out[700], *o;
    const char *sla = write_sla("sla:\n  - \"ttft_p50_ms <= 100000\"\n  - \"ttft_p99_ms <= 100000\"\n"
                                "  - \"output_tok_per_s >= 1000000\"\n  - \"ttft_p50_ms <= 500 at input_length >= 32k\"\n");
    static const char *const plots[] = {"run_cdf",      "run_itl_hist",   "run_ttft_len", "run_timeline",
                                        "run_tput_len", "run_mem_jitter", NULL};
    snprintf(args, sizeof(args), "%s --sla %s --title 'box `7` it''s'", g_run, sla);
    snprintf(out, sizeof(out), "%s/rep-run", tu_dir);
    report_ok(args, out, plots, "png");
    /* the verdict: one PASS, a P99 of 6 requests UNSUPPORTED (not PASS), a FAIL */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "jq -e '.verdict == \"FAIL\" and ([.sla[].results[0].verdict] == [\"PASS\", \"UNSUPPORTED\", \"FAIL\", \"UNSUPPORTED\"]) "
             "and (.sla[0].results[0].margin > 0) and (.sla[2].results[0].margin < 0)' %s/verdict.json",
             out);
    if (tu_run(cmd, &o) != 0)
        fail_msg("%s\n%s", cmd, o);
    free(o);
    /* a closed loop: busy_p95 is n/a, not FAIL; the unmeasured checks are named once, not as rows */
    snprintf(cmd, sizeof(cmd), "jq -e '[.health[] | select(.check == \"busy_p95\") | .results[0].level] == [\"n/a\"]' "
                               "%s/verdict.json", out);
    if (tu_run(cmd, &o) != 0)
        fail_msg("%s\n%s", cmd, o);
    free(o);
    char mdp[800];
    snprintf(mdp, sizeof(mdp), "%s/report.md", out);
    char *md = slurp(mdp);
    assert_non_null(strstr(md, "n/a (closed loop)"));
    /* a condition no request meets says why, whole, in the SLA table (issue 32) */
    assert_non_null(strstr(md, "no completed request has input_length >= 32768 (the 6 completed requests have "
                               "input_length"));
    assert_non_null(strstr(md, "tokens; the gold set or --filter never reaches it) |"));
    assert_null(strstr(md, "| not measured"));
    /* a run without KV tiers: the hit rate check is n/a (tiers off), not "not measured" */
    assert_non_null(strstr(md, "n/a (tiers off)"));
    assert_null(strstr(md, "`kv_cache_hit_rate` ("));
    free(md);
    snprintf(cmd, sizeof(cmd),
             "jq -e '[.health[] | select(.check == \"kv_cache_hit_rate\") | .results[0].level] == [\"n/a\"]' "
             "%s/verdict.json", out);
    if (tu_run(cmd, &o) != 0)
        fail_msg("%s\n%s", cmd, o);
    free(o);
    /* --check turns a FAIL into exit 1 */
    snprintf(cmd, sizeof(cmd), "%s report %s --sla %s --out %s/rep-check --check --quiet", tu_k25(), g_run, sla, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 1);
    /* svg */
    snprintf(out, sizeof(out), "%s/rep-svg", tu_dir);
    snprintf(args, sizeof(args), "%s --format svg", g_run);
    report_ok(args, out, plots, "svg");
    char p[800];
    snprintf(p, sizeof(p), "%s/plots/run_cdf.svg", out);
    char *svg = slurp(p);
    assert_non_null(strstr(svg, "<svg"));
    free(svg);
}

static void test_report_sweep(void **state)
{
    (void)state;
    if (!have_gnuplot())
        skip();
    char out[700];
    static const char *const plots[] = {"sweep_heatmap_0_1", "sweep_pareto", "sweep_axis_0", "sweep_axis_1",
                                        "best_run_cdf", "best_run_timeline", NULL};
    snprintf(out, sizeof(out), "%s/rep-sweep", tu_dir);
    report_ok(g_sweep, out, plots, "png");
    char p[800];
    snprintf(p, sizeof(p), "%s/report.md", out);
    char *md = slurp(p);
    assert_non_null(strstr(md, "## Best setting"));
    assert_non_null(strstr(md, "prefill_chunk_size: ")); /* the YAML to paste */
    free(md);

    /* the best mean at the reference, off the grid: the line along prefill_chunk_size through it holds
       one point, so that axis is drawn through the grid point with the most neighbours, and says so */
    char cmd[2400], *o;
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s/sw-ref && cp -r %s %s/sw-ref && jq '.best = null | .all_points |= map(if .reference then "
             ".metrics.ttft_p50_ms = 1 else . end)' %s/summary.json > %s/sw-ref/summary.json",
             tu_dir, g_sweep, tu_dir, g_sweep, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    static const char *const plots2[] = {"sweep_heatmap_0_1", "sweep_axis_0", "sweep_axis_1", NULL};
    snprintf(cmd, sizeof(cmd), "%s/sw-ref", tu_dir);
    snprintf(out, sizeof(out), "%s/rep-sweep-ref", tu_dir);
    report_ok(cmd, out, plots2, "png");
    snprintf(p, sizeof(p), "%s/report.md", out);
    md = slurp(p);
    assert_non_null(strstr(md, "has no neighbour on this axis"));
    free(md);
    /* neither the best nor the reference has a trace: the provenance from a trace the folder holds */
    snprintf(cmd, sizeof(cmd), "rm -rf %s/sw-ref/points/97ae9d7e85634043", tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(cmd, sizeof(cmd), "%s/sw-ref", tu_dir);
    snprintf(out, sizeof(out), "%s/rep-sweep-any", tu_dir);
    static const char *const plots3[] = {"sweep_heatmap_0_1", NULL};
    report_ok(cmd, out, plots3, "png");
    snprintf(p, sizeof(p), "%s/report.md", out);
    md = slurp(p);
    assert_non_null(strstr(md, "Build and machine from the first trace found in the sweep folder"));
    assert_non_null(strstr(md, "| CPU |"));
    assert_non_null(strstr(md, "no run trace (points/ID/rep-K.h5) was found for the best or the reference point"));
    free(md);
    (void)o;
}

static void jq_ok(const char *expr, const char *file)
{
    char cmd[4096], *o;
    snprintf(cmd, sizeof(cmd), "jq -e '%s' '%s'", expr, file);
    if (tu_run(cmd, &o) != 0)
        fail_msg("%s\n%s", cmd, o);
    free(o);
}

/*
 * Issue 32: the shipped ci-smoke outcome, "no setting is significantly
 * better" (a real sweep folder reduced to summary.json and the reference's
 * three traces).  The sign-off is judged on the reference point and says
 * so, every line of the shipped SLA example applies, the health checks are
 * evaluated, the provenance names the machine; the heatmap shows no colour
 * where no difference was shown; one leader in text and plots.  Then the
 * same sweep with the reference holding the best mean and a knob that did
 * nothing: the leader is the reference everywhere, and the report warns.
 */
static void test_report_sweep_no_winner(void **state)
{
    (void)state;
    if (!have_gnuplot())
        skip();
    char out[700], p[800], args[1400];
    const char *fix = "tests/data/report-sweep-nowin";
    static const char *const plots[] = {"sweep_heatmap_0_1", "sweep_pareto", "sweep_axis_0", "sweep_axis_1",
                                        "ref_run_cdf", "ref_run_timeline", "ref_run_ttft_len", NULL};
    snprintf(out, sizeof(out), "%s/rep-nowin", tu_dir);
    snprintf(args, sizeof(args), "%s --sla reports/sla-example.yaml", fix);
    report_ok(args, out, plots, "png");
    snprintf(p, sizeof(p), "%s/verdict.json", out);
    jq_ok(".columns == [\"reference point (defaults)\"] and (.sla | length) == 7 and "
          "([.sla[].results[0].verdict] | all(. != \"UNSUPPORTED\")) and "
          "([.health[].results[0].level] | length) > 0", p);
    snprintf(p, sizeof(p), "%s/report.md", out);
    char *md = read_all(p);
    assert_non_null(strstr(md, "| reference point (defaults) |"));               /* judged on */
    assert_non_null(strstr(md, "Evaluated on the reference point's requests"));
    assert_non_null(strstr(md, "judged on the reference point"));
    assert_null(strstr(md, "Not evaluated"));
    assert_non_null(strstr(md, "the reference point's first repetition (the point judged)"));
    assert_non_null(strstr(md, "| CPU |"));                                        /* the hardware */
    assert_non_null(strstr(md, "`. Measured on "));                                /* ... up front too */
    assert_null(strstr(md, "No run trace"));
    assert_null(strstr(md, "defaults (defaults)"));
    assert_non_null(strstr(md, "| defaults (the reference) |"));
    assert_non_null(strstr(md, "(best mean) |"));
    assert_non_null(strstr(md, "other axes at the best-mean point"));
    free(md);
    /* the heatmap: a cell whose interval holds 1 has no colour; its caption says so, without a fitted range */
    snprintf(p, sizeof(p), "%s/plots/data/heat_0_1.tsv", out);
    char *heat = read_all(p);
    int ns = 0, blank = 0;
    for (char *l = heat; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char c[12][64];
        if (sscanf(l, "%63s %63s %63s %63s %63s %63s %63s %63s %63s %63s %63s %63s", c[0], c[1], c[2], c[3], c[4], c[5],
                   c[6], c[7], c[8], c[9], c[10], c[11]) != 12)
            continue;
        double lo = strtod(c[5], NULL), hi = strtod(c[6], NULL);
        if (!strcmp(c[11], "1")) {
            ns++;
            assert_true(lo <= 1 && hi >= 1);
        }
        if (lo <= 1 && hi >= 1 && strcmp(c[10], "nan") != 0)
            fail_msg("a cell whose interval [%g, %g] holds 1 is coloured: %s", lo, hi, l);
        blank += !strcmp(c[11], "4");
    }
    free(heat);
    assert_true(ns >= 3);
    assert_int_equal(blank, 1); /* 512 x 8: the reference's batch limit with the other chunk size, not run */
    snprintf(p, sizeof(p), "%s/plots/sweep_heatmap_0_1.gp", out);
    char *gp = read_all(p);
    assert_non_null(strstr(gp, "not run"));
    free(gp);
    snprintf(p, sizeof(p), "%s/report.md", out);
    md = read_all(p);
    assert_non_null(strstr(md, "is pale grey and marked n.s.: no difference was shown"));
    assert_null(strstr(md, "pale within"));
    free(md);

    /* the reference holds the best mean, and a knob did nothing */
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s/nowin-ref && cp -r %s %s/nowin-ref && jq '(.all_points |= map(if .reference then "
             ".metrics.ttft_p50_ms = 1 else (.knob_warning = \"kv_compression_ratio had almost no effect on what it "
             "controls: peak KV 4 MiB against 4 MiB\") end)) | .warnings = [\"p: kv_compression_ratio had almost no "
             "effect on what it controls: peak KV 4 MiB against 4 MiB at q\"] | "
             ".all_points[1].vs_reference.ratio = 0.6 | .all_points[1].vs_reference.ratio_ci = [0.5, 0.8]' "
             "%s/summary.json > %s/nowin-ref/summary.json",
             tu_dir, fix, tu_dir, fix, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(out, sizeof(out), "%s/rep-nowin-ref", tu_dir);
    snprintf(args, sizeof(args), "%s/nowin-ref", tu_dir);
    static const char *const plots2[] = {"sweep_heatmap_0_1", "sweep_pareto", "ref_run_cdf", NULL};
    report_ok(args, out, plots2, "png");
    snprintf(p, sizeof(p), "%s/report.md", out);
    md = read_all(p);
    assert_non_null(strstr(md, "The reference itself has the best mean objective; the plots anchor on it."));
    assert_non_null(strstr(md, "| defaults (the reference) (best mean) |"));
    assert_non_null(strstr(md, "WARN: p: kv_compression_ratio had almost no effect"));
    assert_non_null(strstr(md, "WARN: kv_compression_ratio had almost no effect")); /* the point's row */
    free(md);
    /* a cell told apart (interval [0.5, 0.8]) is coloured, clamped to the fixed scale's end (x1/1.5) */
    snprintf(p, sizeof(p), "%s/plots/data/heat_0_1.tsv", out);
    heat = read_all(p);
    assert_non_null(strstr(heat, "\t0.6\t0.5\t0.8\t"));
    assert_non_null(strstr(heat, "\t0.666666667\t0\n"));
    free(heat);
    /* the Pareto plot's star and the heatmap's frame are on the reference */
    snprintf(p, sizeof(p), "%s/plots/sweep_pareto.gp", out);
    gp = read_all(p);
    assert_non_null(strstr(gp, "bestname = 'reference (best mean)'"));
    free(gp);
    snprintf(p, sizeof(p), "%s/plots/data/pareto.tsv", out);
    char *pt = read_all(p);
    const char *star = strstr(pt, "\tbest\n");
    assert_non_null(star);
    while (star > pt && star[-1] != '\n')
        star--;
    assert_true(strtod(strchr(star, '\t') + 1, NULL) == 1); /* the reference's objective, set to 1 above */
    free(pt);
}

static void test_report_attn_and_compare(void **state)
{
    (void)state;
    if (!have_gnuplot())
        skip();
    char out[700], args[1400];
    static const char *const ap[] = {"attn_time", "attn_scratch", "attn_roofline", NULL};
    snprintf(out, sizeof(out), "%s/rep-attn", tu_dir);
    report_ok(g_attn, out, ap, "png");
    static const char *const cp[] = {"cmp_cdf", "cmp_ratio", "r1_run_cdf", "r2_run_cdf", NULL};
    snprintf(out, sizeof(out), "%s/rep-cmp", tu_dir);
    snprintf(args, sizeof(args), "%s %s", g_run, g_run2);
    report_ok(args, out, cp, "png");
    /* a ratio within 2% of 1 (0.998 peak memory) is "no difference", never better or worse */
    char p[800];
    snprintf(p, sizeof(p), "%s/plots/data/cmp_ratio.tsv", out);
    char *d = read_all(p);
    int rows = 0;
    for (char *l = d; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        double x, r;
        char lo[64], hi[64];
        int side;
        if (sscanf(l, "%lf %lf %63s %63s %d", &x, &r, lo, hi, &side) != 5)
            continue;
        rows++;
        if (fabs(r - 1) <= 0.02 && side != 0)
            fail_msg("ratio %g shown as %s", r, side > 0 ? "better" : "worse");
    }
    assert_true(rows >= 5);
    free(d);
}

static void test_report_errors(void **state)
{
    (void)state;
    char cmd[2048], *o;
    /* no gnuplot: a clear error that says how to install it */
    snprintf(cmd, sizeof(cmd), "K25_GNUPLOT=/nonexistent/gnuplot %s report %s --out %s/x", tu_k25(),
             *g_run ? g_run : "run.h5", tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    assert_non_null(strstr(o, "apt-get install gnuplot"));
    free(o);
    snprintf(cmd, sizeof(cmd), "PATH=/nonexistent %s report %s --out %s/x", tu_k25(), *g_run ? g_run : "run.h5", tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    assert_non_null(strstr(o, "gnuplot not found"));
    free(o);
    if (!have_gnuplot())
        skip();
    /* not a k25 file, a missing file, a folder that is not a sweep */
    char bad[700];
    snprintf(bad, sizeof(bad), "%s/bad.h5", tu_dir);
    tu_write_file(bad, "not hdf5");
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s/x", tu_k25(), bad, tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    assert_non_null(strstr(o, bad));
    free(o);
    snprintf(cmd, sizeof(cmd), "%s report %s/none.h5 --out %s/x", tu_k25(), tu_dir, tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    free(o);
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s/x", tu_k25(), tu_dir, tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    assert_non_null(strstr(o, "summary.json"));
    free(o);
    /* a bad SLA file names its line */
    const char *sla = write_sla("sla:\n  - \"ttft_p50_ms <= 5\"\n  - \"ttft_p50 <= 5\"\n");
    snprintf(cmd, sizeof(cmd), "%s report %s --sla %s --out %s/x", tu_k25(), g_run, sla, tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    char want[700];
    snprintf(want, sizeof(want), "%s:3:", sla);
    if (!strstr(o, want))
        fail_msg("wanted %s in: %s", want, o);
    free(o);
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s/x --format gif", tu_k25(), g_run, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 2);
}

/*
 * A run with more than one priority class (the elastic queue): the report draws TTFT by class, its
 * data one row per class with that class's request count; a plain run (test_report_run) has none.
 */
static void test_report_priority(void **state)
{
    (void)state;
    if (!have_gnuplot())
        skip();
    char gold[700], h5[700], out[700], cmd[4096], *o;
    snprintf(gold, sizeof(gold), "%s/prio.jsonl", tu_dir);
    FILE *f = fopen(gold, "w");
    assert_non_null(f);
    for (int i = 0; i < 8; i++) { /* lengths 23 .. 600 bytes: several input-length buckets */
        fprintf(f, "{\"id\":\"p%d\",\"text\":\"Clause %d of the lease.", i, i);
        for (int k = 0; k < (1 << i) * 5 && k < 580; k++)
            fputc('a' + k % 26, f);
        fprintf(f, "\",\"expected_output_length\":4%s}\n", i % 4 == 0 ? ",\"priority\":\"high\"" : "");
    }
    assert_int_equal(fclose(f), 0);
    snprintf(h5, sizeof(h5), "%s/prio.h5", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s bench --dataset %s --model tiny --threads 1 --out %s --quiet >/dev/null", tu_k25(),
             gold, h5);
    if (tu_run(cmd, &o) != 0)
        fail_msg("%s\n%s", cmd, o);
    free(o);
    static const char *const plots[] = {"run_cdf", "run_ttft_priority", NULL};
    snprintf(out, sizeof(out), "%s/rep-prio", tu_dir);
    report_ok(h5, out, plots, "png");
    char tsv[800];
    snprintf(tsv, sizeof(tsv), "%s/plots/data/ttft_priority.tsv", out);
    char *d = slurp(tsv);
    assert_non_null(d);
    assert_non_null(strstr(d, "high\t2\t"));
    assert_non_null(strstr(d, "standard\t6\t"));
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sla_parse),
        cmocka_unit_test(test_sla_file),
        cmocka_unit_test(test_sla_eval),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_fmt_double),
        cmocka_unit_test(test_sla_no_match_and_fit),
        cmocka_unit_test(test_report_run),
        cmocka_unit_test(test_report_priority),
        cmocka_unit_test(test_report_sweep),
        cmocka_unit_test(test_report_sweep_no_winner),
        cmocka_unit_test(test_report_attn_and_compare),
        cmocka_unit_test(test_report_errors),
    };
    return cmocka_run_group_tests_name("report", tests, inputs_setup, tu_group_teardown);
}
