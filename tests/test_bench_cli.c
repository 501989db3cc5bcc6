/*
 * test_bench_cli.c - `k25 bench` and `k25 serve` on the shared option
 * parser (cli/cliopt.c): the vLLM benchmark aliases give the same run
 * as the k25 names; --percentile-method linear and nearest-rank read the
 * percentiles of the same samples as a reference computed here from the
 * run's own CSV (and differ where they must); --csv writes one row per
 * request, checked up front, never left without its trace; the chosen
 * percentile table (--metric-percentiles, --percentile-metrics); the
 * degraded model's fidelity with the breaker off (--fidelity-degraded);
 * every bad value names its option.
 */
#include "testutil.h"

#include "harness.h" /* k25_json_path */

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A short closed-loop run on the tiny model: 6 short requests, 8 tokens each, one thread. */
#define RUN                                                                                                      \
    "bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter 'input_length <= 512' "               \
    "--decode-max-tokens 8 --threads 1 --seed 5 --quiet "

static int k25(const char *args, char **out)
{
    char *cmd = NULL;
    *out = NULL;
    if (asprintf(&cmd, "%s %s", tu_k25(), args) < 0)
        return -1;
    int st = tu_run(cmd, out);
    free(cmd);
    return st;
}

static void expect_fail(const char *args, int status, const char *needle)
{
    char *out = NULL;
    int st = k25(args, &out);
    if (st != status || !out || !strstr(out, needle))
        fail_msg("k25 %s\n  exit %d (want %d), output:\n%s\n  (wanted to find \"%s\")", args, st, status,
                 out ? out : "", needle);
    free(out);
}

static bool exists(const char *name)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", tu_dir, name);
    return access(p, F_OK) == 0;
}

static json_t *load(const char *name)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", tu_dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j)
        fail_msg("%s: %s", p, je.text);
    return j;
}

static const json_t *at(const json_t *j, const char *a, const char *b)
{
    const json_t *x = json_object_get(j, a);
    return b ? json_object_get(x, b) : x;
}

/* Runs RUN + args (substituting %s with tu_dir), asserts exit 0, returns the output. */
static char *run_ok(const char *fmt)
{
    char args[4096], *out = NULL;
    snprintf(args, sizeof(args), RUN "%s", fmt);
    char full[8192];
    /* every %s in fmt is tu_dir */
    size_t w = 0;
    for (const char *p = args; *p && w < sizeof(full) - 1; p++) {
        if (p[0] == '%' && p[1] == 's') {
            w += (size_t)snprintf(full + w, sizeof(full) - w, "%s", tu_dir);
            p++;
        } else {
            full[w++] = *p;
        }
    }
    full[w] = '\0';
    int st = k25(full, &out);
    if (st != 0)
        fail_msg("k25 %s\n  exit %d:\n%s", full, st, out);
    return out;
}

/* The vLLM names are aliases: the same workload, the same tokens as with the k25 names. */
static void test_vllm_aliases(void **state)
{
    (void)state;
    free(run_ok("--rate 20 --concurrency 2 --requests 4 --slo ttft_ms=5000,tpot_ms=500,e2e_ms=9000 "
                "--out %s/k.h5 --json %s/k.json"));
    free(run_ok("--request-rate 20 --max-concurrency=2 --num-prompts 4 --goodput 'ttft:5000 tpot:500' e2el:9000 "
                "--out %s/v.h5 --result-filename %s/v.json"));
    json_t *k = load("k.json"), *v = load("v.json");
    if (!json_equal(json_object_get(k, "workload"), json_object_get(v, "workload"))) {
        char *a = json_dumps(json_object_get(k, "workload"), JSON_COMPACT);
        char *b = json_dumps(json_object_get(v, "workload"), JSON_COMPACT);
        fail_msg("workloads differ:\n  k25:  %s\n  vLLM: %s", a, b);
    }
    assert_string_equal(json_string_value(at(k, "workload", "mode")), "open");
    assert_int_equal(json_integer_value(at(v, "workload", "concurrency")), 2);
    assert_int_equal(json_integer_value(at(v, "workload", "requests")), 4);
    assert_true(json_real_value(k25_json_path(v, "workload.slo.e2e_ms")) == 9000);
    /* the same seed and settings: the same requests and tokens */
    assert_int_equal(json_integer_value(at(k, "summary", "output_tokens")),
                     json_integer_value(at(v, "summary", "output_tokens")));
    assert_int_equal(json_integer_value(k25_json_path(k, "summary.requests.meeting_slo")) >= 0, 1);
    json_decref(k);
    json_decref(v);
    /* --save-result alone: the JSON beside the trace */
    free(run_ok("--num-prompts 2 --save-result --out %s/s.h5"));
    assert_true(exists("s.json"));
}

/* Reads column col of a CSV written by --csv (no quoted fields in it), rows into v; returns the count. */
static int csv_column(const char *name, const char *col, double *v, int cap, int *rows)
{
    char p[1024], line[4096];
    snprintf(p, sizeof(p), "%s/%s", tu_dir, name);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    int idx = -1, n = 0;
    *rows = 0;
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(strstr(line, "\r\n")); /* RFC 4180 line ends */
    int c = 0;
    for (char *s = NULL, *t = strtok_r(line, ",\r\n", &s); t; t = strtok_r(NULL, ",\r\n", &s), c++)
        if (!strcmp(t, col))
            idx = c;
    assert_true(idx >= 0);
    while (fgets(line, sizeof(line), f)) {
        (*rows)++;
        char *p2 = line;
        for (int k = 0; k < idx && p2; k++) {
            p2 = strchr(p2, ',');
            if (p2)
                p2++;
        }
        if (p2 && *p2 && *p2 != ',' && n < cap)
            v[n++] = strtod(p2, NULL);
    }
    fclose(f);
    return n;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * The same run read both ways: each P50 is the reference computed here
 * from the run's own per-request CSV (nearest rank: x[ceil(n/2) - 1];
 * linear: numpy's, h = (n - 1) / 2), the output names the method, and
 * with 6 distinct latencies the two must differ.  One user at a time: two
 * users' requests sent together and finished in the same step have the
 * same E2E to the nanosecond, and then the two methods agree.
 */
static void test_percentile_method(void **state)
{
    (void)state;
    char *nr = run_ok("--requests 6 --concurrency 1 --out %s/nr.h5 --json %s/nr.json --csv %s/nr.csv");
    char *li = run_ok("--requests 6 --concurrency 1 --percentile-method linear --out %s/li.h5 --json %s/li.json "
                      "--csv %s/li.csv");
    assert_non_null(strstr(nr, "percentiles: nearest-rank"));
    assert_non_null(strstr(li, "percentiles: linear"));
    free(nr);
    free(li);
    json_t *jn = load("nr.json"), *jl = load("li.json");
    assert_string_equal(json_string_value(at(jn, "summary", "percentile_method")), "nearest-rank");
    assert_string_equal(json_string_value(at(jl, "summary", "percentile_method")), "linear");
    double x[64];
    int rows;
    /* nearest rank */
    int n = csv_column("nr.csv", "e2e_ms", x, 64, &rows);
    assert_int_equal(rows, 6); /* one row per request */
    assert_int_equal(n, 6);
    qsort(x, (size_t)n, sizeof(double), cmp_d);
    double got = json_number_value(k25_json_path(jn, "summary.e2e_ms.p50"));
    assert_true(fabs(got - x[2]) <= 1e-3 * fabs(x[2]) + 1e-6);
    /* linear, on its own run's samples */
    n = csv_column("li.csv", "e2e_ms", x, 64, &rows);
    assert_int_equal(n, 6);
    qsort(x, (size_t)n, sizeof(double), cmp_d);
    double want = x[2] + 0.5 * (x[3] - x[2]);
    got = json_number_value(k25_json_path(jl, "summary.e2e_ms.p50"));
    if (!(fabs(got - want) <= 1e-3 * fabs(want) + 1e-6))
        fail_msg("linear P50 %.9g, reference %.9g", got, want);
    /* where the two neighbours differ, linear is strictly between them: not nearest rank's x[2] */
    assert_true(x[3] > x[2]);
    assert_true(got > x[2] && got < x[3]);
    json_decref(jn);
    json_decref(jl);
}

/* --csv: one row per request of every repetition, the ids of the trace; checked up front; never alone. */
static void test_csv(void **state)
{
    (void)state;
    free(run_ok("--requests 3 --repeat 2 --out %s/c.h5 --csv %s/c.csv"));
    double x[16];
    int rows;
    csv_column("c.csv", "ttft_ms", x, 16, &rows);
    assert_int_equal(rows, 6);
    char args[2048];
    /* an unusable path fails before anything runs: no trace either */
    snprintf(args, sizeof(args), RUN "--requests 2 --out %s/u.h5 --csv %s/no/such/dir/u.csv", tu_dir, tu_dir);
    expect_fail(args, 2, "--csv");
    assert_false(exists("u.h5"));
    snprintf(args, sizeof(args), RUN "--requests 2 --out %s/u.h5 --csv %s/u.h5", tu_dir, tu_dir);
    expect_fail(args, 2, "must not be the --out or --json file");
    /* a directory where the CSV would go: refused up front, nothing written */
    snprintf(args, sizeof(args), "mkdir -p %s/sq.csv/x", tu_dir);
    assert_int_equal(tu_run(args, NULL), 0);
    snprintf(args, sizeof(args), RUN "--requests 2 --out %s/sq.h5 --csv %s/sq.csv", tu_dir, tu_dir);
    expect_fail(args, 2, "sq.csv");
    assert_false(exists("sq.h5"));
}

/* --metric-percentiles / --percentile-metrics: a second table, in the JSON and the text. */
static void test_percentile_table(void **state)
{
    (void)state;
    char *out = run_ok("--requests 4 --metric-percentiles 50,90,99.9 --percentile-metrics ttft,e2el "
                       "--percentile-method linear --out %s/t.h5 --json %s/t.json");
    assert_non_null(strstr(out, "percentiles (linear interpolation"));
    assert_non_null(strstr(out, "P99.9"));
    free(out);
    json_t *j = load("t.json");
    const json_t *p = at(j, "summary", "percentiles");
    assert_non_null(p);
    assert_string_equal(json_string_value(json_object_get(p, "method")), "linear");
    assert_int_equal(json_array_size(json_object_get(p, "percentiles")), 3);
    assert_non_null(k25_json_path(p, "ttft_ms.p50"));
    assert_non_null(json_object_get(json_object_get(p, "e2e_ms"), "p99.9")); /* null: 4 samples cannot support it */
    assert_null(json_object_get(p, "tpot_ms")); /* not asked for */
    /* the table's P50 is the summary's (same samples, same method) */
    assert_true(fabs(json_number_value(k25_json_path(p, "ttft_ms.p50")) -
                     json_number_value(k25_json_path(j, "summary.ttft_ms.p50"))) < 1e-9);
    json_decref(j);
    /* without the options there is no table */
    j = load("li.json");
    assert_null(at(j, "summary", "percentiles"));
    json_decref(j);
}

/* Every bad value names its option; --help lists the aliases; typos get "did you mean". */
static void test_bad_values_and_help(void **state)
{
    (void)state;
    char a[2048];
#define BAD(extra, needle)                                                                                       \
    do {                                                                                                         \
        snprintf(a, sizeof(a), RUN "--out %s/bad.h5 " extra, tu_dir);                                           \
        expect_fail(a, 2, needle);                                                                               \
    } while (0)
    BAD("--percentile-method mean", "'--percentile-method': unknown choice 'mean' (nearest-rank, linear)");
    BAD("--metric-percentiles 50,100", "--metric-percentiles");
    BAD("--percentile-metrics ttft,latency", "unknown metric 'latency'");
    BAD("--goodput ttft=500", "'--goodput': expected KEY:MILLISECONDS");
    BAD("--goodput tpot:x", "tpot");
    BAD("--request-rate 0", "'--rate': expected a positive number");
    BAD("--num-prompts 0", "'--requests': expected a positive integer");
    BAD("--max-concurrency 100001", "'--concurrency'");
    BAD("--num-promts 4", "did you mean '--num-prompts'?");
    BAD("--burstiness 0.5", "needs --rate");
    BAD("--percentile-method", "'--percentile-method': missing value");
    BAD("stray", "'stray': unexpected argument");
    BAD("--save-result --out", "missing value");
#undef BAD
    assert_false(exists("bad.h5"));
    char *out = NULL;
    assert_int_equal(k25("bench --help", &out), 0);
    assert_non_null(strstr(out, "usage: k25 bench"));
    assert_non_null(strstr(out, "--rate, --request-rate R"));
    assert_non_null(strstr(out, "--requests, --num-prompts N"));
    assert_non_null(strstr(out, "--concurrency, --max-concurrency N"));
    assert_non_null(strstr(out, "--json, --result-filename FILE"));
    assert_non_null(strstr(out, "--percentile-method nearest-rank|linear"));
    assert_non_null(strstr(out, "--csv FILE"));
    assert_non_null(strstr(out, "--prefill-chunk-size")); /* the engine flags */
    free(out);
}

/* Runs `k25 bench` on the tiny model with the two 512-token requests of ci-small (DIR/tiny2.jsonl),
 * 4 tokens each, the breaker off (the bench default), plus extra; asserts exit 0, returns the output. */
static char *run_tiny2(const char *name, const char *extra)
{
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof(cmd), "grep -e '-512-' datasets/gold/ci-small.jsonl > %s/tiny2.jsonl", tu_dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd),
             "bench --dataset %s/tiny2.jsonl --model tiny --decode-max-tokens 4 --threads 1 --seed 5 --quiet "
             "--requests 2 --fidelity-tokens 4 --out %s/%s.h5 --json %s/%s.json %s",
             tu_dir, tu_dir, name, tu_dir, name, extra);
    int st = k25(cmd, &out);
    if (st != 0)
        fail_msg("k25 %s\n  exit %d:\n%s", cmd, st, out);
    return out;
}

/* The names of the fidelity groups of DIR/name.h5 that h5ls lists. */
static bool has_group(const char *name, const char *group)
{
    char cmd[1200], *out = NULL;
    snprintf(cmd, sizeof(cmd), "h5ls %s/%s.h5", tu_dir, name);
    assert_int_equal(tu_run(cmd, &out), 0);
    bool has = false;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        has = has || (!strncmp(line, group, strlen(group)) && line[strlen(group)] == ' ');
    free(out);
    return has;
}

/*
 * The degraded model's fidelity without the breaker: --fidelity alone measures it only when the
 * run degraded requests or had the breaker on (a bench run has it off); --fidelity-degraded
 * measures it whatever the breaker, alone or beside --fidelity.
 */
static void test_fidelity_degraded(void **state)
{
    (void)state;
    /* --fidelity, breaker off, nothing degraded: the exact comparison only */
    free(run_tiny2("fa", "--fidelity"));
    json_t *j = load("fa.json");
    assert_true(json_is_number(k25_json_path(j, "summary.fidelity.kl_mean")));
    assert_null(k25_json_path(j, "summary.fidelity.degraded"));
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.requests.degraded")), 0);
    json_decref(j);
    assert_true(has_group("fa", "fidelity"));
    assert_false(has_group("fa", "fidelity_degraded"));

    /* --fidelity-degraded alone: the degraded model against the full one, nothing else */
    char *out = run_tiny2("fd", "--fidelity-degraded");
    assert_non_null(strstr(out, "degraded-model fidelity ("));
    assert_null(strstr(out, "vs exact fp32"));
    free(out);
    j = load("fd.json");
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.requests.degraded")), 0); /* the run itself */
    const json_t *d = k25_json_path(j, "summary.fidelity.degraded");
    assert_true(json_is_object(d));
    assert_int_equal(json_integer_value(json_object_get(d, "n_requests")), 2);
    assert_int_equal(json_integer_value(json_object_get(d, "tokens")), 4);
    assert_int_equal(json_integer_value(json_object_get(d, "layers")), 2); /* ceil(0.30 x 4 layers of tiny) */
    double kl = json_number_value(json_object_get(d, "kl_mean")),
           agree = json_number_value(json_object_get(d, "top1_agreement"));
    assert_true(kl >= 0 && isfinite(kl));
    assert_true(agree >= 0 && agree <= 1);
    assert_null(k25_json_path(j, "summary.fidelity.kl_mean")); /* the exact comparison did not run */
    json_decref(j);
    assert_false(has_group("fd", "fidelity"));
    assert_true(has_group("fd", "fidelity_degraded"));

    /* both: both groups, and the degraded figures are those of the run without --fidelity */
    free(run_tiny2("fb", "--fidelity --fidelity-degraded"));
    j = load("fb.json");
    assert_true(json_is_number(k25_json_path(j, "summary.fidelity.kl_mean")));
    assert_true(json_number_value(k25_json_path(j, "summary.fidelity.degraded.kl_mean")) == kl);
    json_decref(j);
    assert_true(has_group("fb", "fidelity"));
    assert_true(has_group("fb", "fidelity_degraded"));

    char args[2048];
    snprintf(args, sizeof(args),
             "bench --endpoint http://127.0.0.1:1 --dataset %s/tiny2.jsonl --out %s/fe.h5 --fidelity-degraded",
             tu_dir, tu_dir);
    expect_fail(args, 2, "--fidelity-degraded");
    out = NULL;
    assert_int_equal(k25("bench --help", &out), 0);
    assert_non_null(strstr(out, "--fidelity-degraded"));
    free(out);
}

/* k25 serve on the table: ranges, typos, --key=value, help. */
static void test_serve_options(void **state)
{
    (void)state;
    expect_fail("serve --prot 8000", 2, "'--prot': unknown option (did you mean '--port'?)");
    expect_fail("serve --port=70000", 2, "'--port': expected a non-negative integer up to 65535");
    expect_fail("serve --max-body-bytes 10", 2, "'--max-body-bytes': expected an integer in 1024..");
    expect_fail("serve --max-connections", 2, "'--max-connections': missing value");
    expect_fail("serve extra", 2, "'extra': unexpected argument");
    expect_fail("serve --model nosuch-model --port 0", 2, "nosuch-model");
    char *out = NULL;
    assert_int_equal(k25("serve --help", &out), 0);
    assert_non_null(strstr(out, "usage: k25 serve"));
    assert_non_null(strstr(out, "--max-waiting N"));
    assert_non_null(strstr(out, "(0..65535; default: 8000)"));
    assert_non_null(strstr(out, "--kv-cache-dtype"));
    free(out);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "K25_API_KEY=s3cr3t %s serve --help", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_null(strstr(out, "s3cr3t")); /* an API key from the environment is never printed */
    free(out);
}

/* Counts lines of out starting with prefix. */
static int count_lines(const char *out, const char *prefix)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        n += !strncmp(l, prefix, pl);
    return n;
}

/*
 * Progress a CI log shows: stderr on a pipe gets plain lines (a start, periodic updates -
 * K25_PROGRESS_INTERVAL_S shortens the 10 s period so a short run has some - and an end), no
 * terminal escapes; --progress off and --quiet print none.  A SIGTERM'd `k25 run` says how far its
 * prefill got (it waits on the first progress line, then signals).
 */
static void test_progress_lines(void **state)
{
    (void)state;
    char cmd[4096], *out;
    snprintf(cmd, sizeof(cmd), "K25_PROGRESS_INTERVAL_S=0.001 %s bench --dataset datasets/gold/ci-small.jsonl "
             "--model tiny --filter 'input_length <= 512' --decode-max-tokens 8 --threads 1 --requests 4 "
             "--out %s/prog.h5 2>&1 >/dev/null | cat", tu_k25(), tu_dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_int_equal(count_lines(out, "k25 bench: starting: 4 requests"), 1);
    assert_true(count_lines(out, "k25 bench: end: 4/4 requests (100%)") == 1);
    assert_true(count_lines(out, "k25 bench: ") >= 3); /* start, updates, end */
    assert_null(strchr(out, '\r'));
    assert_null(strstr(out, "\033["));
    free(out);
    snprintf(cmd, sizeof(cmd), "K25_PROGRESS_INTERVAL_S=0.001 %s bench --dataset datasets/gold/ci-small.jsonl "
             "--model tiny --filter 'input_length <= 512' --decode-max-tokens 8 --threads 1 --requests 2 "
             "--progress off --out %s/prog2.h5 2>&1 >/dev/null | cat", tu_k25(), tu_dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_int_equal(count_lines(out, "k25 bench: starting"), 0);
    assert_int_equal(count_lines(out, "k25 bench: end"), 0);
    free(out);
    expect_fail(RUN "--progress sometimes --out /tmp/x.h5", 2, "--progress");
    /* SIGTERM during a long prefill: what it has, exit 143 */
    snprintf(cmd, sizeof(cmd),
             "(K25_PROGRESS_INTERVAL_S=0.001 %s run --model tiny --prompt x --prompt-len 30000 "
             "--prefill-chunk-size 256 --max-tokens 2000 --threads 1 2>%s/run.err >%s/run.out & pid=$!; "
             "i=0; while ! grep -q 'chunks (' %s/run.err && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; "
             "kill -TERM $pid; wait $pid; echo \"exit=$?\"; cat %s/run.err) 2>&1",
             tu_k25(), tu_dir, tu_dir, tu_dir, tu_dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    if (!strstr(out, "exit=143") || !strstr(out, "k25 run: interrupted by SIGTERM: prefill ") ||
        !strstr(out, "chunks of 30000 prompt tokens"))
        fail_msg("%s", out);
    free(out);
}

/*
 * Arrival processes: constant spacing exactly; the linear ramp's intervals following its rate (a
 * huge gamma shape makes them near-deterministic, so each must be within 2% of 1 / rate_i); a
 * Mooncake-layout trace's timestamps as offsets from its first line, bad lines named; end to end,
 * a replayed run's requests arrive at the trace's offsets; --burstiness 0 says what to use instead.
 */
static void test_arrivals(void **state)
{
    (void)state;
    struct k25_error err;
    int64_t *t = NULL;
    size_t n = 0;
    assert_int_equal(k25_arrivals_constant(4, 3, 0, &t, &n, &err), K25_OK);
    assert_int_equal(n, 3);
    assert_true(t[0] == 250000000 && t[1] == 500000000 && t[2] == 750000000);
    free(t);
    assert_int_equal(k25_arrivals_constant(4, 0, 1000000000, &t, &n, &err), K25_OK); /* a duration: 3 before 1 s */
    assert_int_equal(n, 3);
    free(t);
    assert_int_equal(k25_arrivals_ramp(1, 100, 1e6, 7, 50, &t, &n, &err), K25_OK);
    assert_int_equal(n, 50);
    for (size_t i = 0; i < n; i++) {
        double r = 1 + 99.0 * (double)i / 49.0, dt = (double)(t[i] - (i ? t[i - 1] : 0)) / 1e9;
        if (fabs(dt * r - 1) > 0.02)
            fail_msg("ramp interval %zu: %.4f s at rate %.2f", i, dt, r);
    }
    free(t);
    assert_int_equal(k25_arrivals_ramp(1, 2, 1, 7, 0, &t, &n, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "--requests"));
    char path[600];
    snprintf(path, sizeof(path), "%s/mooncake.jsonl", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"timestamp\": 1000, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0]}\n\n"
               "{\"timestamp\": 1250, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0, 1]}\n"
               "{\"timestamp\": 1300.5, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [2]}\n");
    fclose(f);
    assert_int_equal(k25_arrivals_trace(path, 0, &t, &n, &err), K25_OK);
    assert_int_equal(n, 3);
    assert_true(t[0] == 0 && t[1] == 250000000 && t[2] == 300500000);
    free(t);
    snprintf(path, sizeof(path), "%s/bad-trace.jsonl", tu_dir);
    f = fopen(path, "w");
    fprintf(f, "{\"timestamp\": 5}\n{\"timestamp\": 3}\n");
    fclose(f);
    assert_int_equal(k25_arrivals_trace(path, 0, &t, &n, &err), K25_EFORMAT);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.msg, "time order"));
    f = fopen(path, "w");
    fprintf(f, "{\"ts\": 5}\n");
    fclose(f);
    assert_int_equal(k25_arrivals_trace(path, 0, &t, &n, &err), K25_EFORMAT);
    assert_non_null(strstr(err.msg, "timestamp"));
    /* end to end: the replayed run's requests arrive at the trace's offsets */
    char args[2048], *out;
    snprintf(args, sizeof(args), RUN "--trace-file %s/mooncake.jsonl --out %s/replay.h5", tu_dir, tu_dir);
    assert_int_equal(k25(args, &out), 0);
    free(out);
    snprintf(path, sizeof(path), "%s/replay.h5", tu_dir);
    struct k25_trace tr;
    assert_int_equal(k25_trace_read(path, &tr, &err), K25_OK);
    assert_int_equal(tr.run.n_reqs, 3);
    static const int64_t want[3] = {0, 250000000, 300500000};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(tr.run.reqs[i].arrival_ns, want[tr.run.reqs[i].seq]);
        /* the trace's lengths shape the request: input_length tokens, output_length asked */
        assert_int_equal(tr.run.reqs[i].n_input, 10);
        assert_int_equal(tr.run.reqs[i].max_new, 2);
        assert_true(!strncmp(tr.run.reqs[i].id, "t", 1));
    }
    k25_trace_free(&tr);
    /* the shapes parsed: lengths and hash ids; bad lines named by file, line and field */
    struct k25_trace_shape *sh = NULL;
    snprintf(path, sizeof(path), "%s/mooncake.jsonl", tu_dir);
    assert_int_equal(k25_arrivals_trace_shapes(path, 0, &sh, &n, &err), K25_OK);
    assert_int_equal(n, 3);
    assert_true(sh[1].input_length == 10 && sh[1].output_length == 2 && sh[1].n_hash == 2 && sh[1].hash_ids[1] == 1);
    k25_trace_shapes_free(sh, n);
    static const struct {
        const char *text, *field, *msg;
        int line;
    } bad[] = {
        {"{\"timestamp\": 0, \"input_length\": 5}\n", "output_length", "needs output_length too", 1},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n{\"timestamp\": 1}\n", "input_length",
         "every line of a trace gives the lengths, or none does", 2},
        {"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 2}\n", "input_length", ">= 1", 1},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2, \"hash_ids\": [1, -2]}\n", "hash_ids",
         "element 1", 1},
        {"{\"timestamp\": 0, \"hash_ids\": [1]}\n", "hash_ids", "without input_length", 1},
    };
    snprintf(path, sizeof(path), "%s/bad-shape.jsonl", tu_dir);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tu_write_file(path, bad[i].text);
        assert_int_equal(k25_arrivals_trace_shapes(path, 0, &sh, &n, &err), K25_EFORMAT);
        assert_string_equal(err.field, bad[i].field);
        assert_int_equal(err.line, bad[i].line);
        if (!strstr(err.msg, bad[i].msg))
            fail_msg("bad shape %zu: %s", i, err.msg);
    }
    /* a trace of arrivals alone shapes nothing */
    tu_write_file(path, "{\"timestamp\": 0}\n");
    assert_int_equal(k25_arrivals_trace_shapes(path, 0, &sh, &n, &err), K25_OK);
    assert_null(sh);
    /* hash_ids are shared prefixes: one in-flight request at a time, prefix caching on, the second request
     * (the same two blocks) reuses the first one's whole first block; the third (another block) nothing */
    snprintf(path, sizeof(path), "%s/shared.jsonl", tu_dir);
    tu_write_file(path, "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 2]}\n"
                        "{\"timestamp\": 1, \"input_length\": 700, \"output_length\": 2, \"hash_ids\": [1, 2]}\n"
                        "{\"timestamp\": 2, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [7]}\n");
    snprintf(args, sizeof(args), "bench --dataset datasets/gold/ci-small.jsonl --model tiny --threads 1 --quiet "
             "--arrivals trace --trace-file %s --concurrency 1 --enable-prefix-caching --kv-compression-ratio 1 "
             "--out %s/shared.h5", path, tu_dir);
    assert_int_equal(k25(args, &out), 0);
    free(out);
    snprintf(path, sizeof(path), "%s/shared.h5", tu_dir);
    assert_int_equal(k25_trace_read(path, &tr, &err), K25_OK);
    assert_int_equal(tr.run.n_reqs, 3);
    int32_t cached[3] = {-1, -1, -1};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(tr.run.reqs[i].n_input, i == 1 ? 700 : 600);
        cached[tr.run.reqs[i].seq] = tr.run.reqs[i].cached_tokens;
    }
    k25_trace_free(&tr);
    assert_int_equal(cached[0], 0);
    assert_true(cached[1] >= 512);
    assert_int_equal(cached[2], 0);
    expect_fail(RUN "--rate 2 --burstiness 0 --out /tmp/x.h5", 2, "--arrivals constant");
    expect_fail(RUN "--ramp-up-strategy linear --ramp-up-start-rps 1 --out /tmp/x.h5", 2, "--ramp-up-end-rps");
    expect_fail(RUN "--arrivals constant --out /tmp/x.h5", 2, "needs --rate");
    expect_fail(RUN "--ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 4 --duration 2 --out /tmp/x.h5",
                2, "--requests");
}

/*
 * --save-result writes vLLM's result fields beside k25's: the same samples as the trace's, mean,
 * median and std (population) computed here; with --percentile-method linear the percentiles numpy
 * would print, given even where the sample cannot support them, flagged with their interval.
 */
static void test_vllm_result(void **state)
{
    (void)state;
    free(run_ok("--save-result --percentile-method linear --metric-percentiles 50,99 --out %s/v.h5"));
    char p[600];
    snprintf(p, sizeof(p), "%s/v.json", tu_dir);
    json_t *j = json_load_file(p, 0, NULL);
    assert_non_null(j);
    snprintf(p, sizeof(p), "%s/v.h5", tu_dir);
    struct k25_trace t;
    struct k25_error err;
    assert_int_equal(k25_trace_read(p, &t, &err), K25_OK);
    double v[64], mean = 0, var = 0;
    size_t n = 0;
    for (size_t i = 0; i < t.run.n_reqs && n < 64; i++)
        if (t.run.reqs[i].state == K25_REQ_COMPLETED)
            v[n++] = k25_bench_req_ttft_ms(&t.run.reqs[i]);
    k25_trace_free(&t);
    assert_true(n >= 2);
    qsort(v, n, sizeof(double), cmp_d);
    for (size_t i = 0; i < n; i++)
        mean += v[i] / (double)n;
    for (size_t i = 0; i < n; i++)
        var += (v[i] - mean) * (v[i] - mean) / (double)n;
    double h = (double)(n - 1) * 0.5, med = v[(size_t)h] + (h - floor(h)) * (v[(size_t)h + (h < n - 1)] - v[(size_t)h]);
    double h99 = (double)(n - 1) * 0.99,
           p99 = v[(size_t)h99] + (h99 - floor(h99)) * (v[(size_t)h99 + 1 < n ? (size_t)h99 + 1 : n - 1] - v[(size_t)h99]);
    assert_true(fabs(json_number_value(json_object_get(j, "mean_ttft_ms")) - mean) < 1e-6);
    assert_true(fabs(json_number_value(json_object_get(j, "median_ttft_ms")) - med) < 1e-6);
    assert_true(fabs(json_number_value(json_object_get(j, "std_ttft_ms")) - sqrt(var)) < 1e-6);
    assert_true(fabs(json_number_value(json_object_get(j, "p99_ttft_ms")) - p99) < 1e-6);
    assert_true(json_is_number(json_object_get(j, "p50_e2el_ms")));
    assert_true(json_is_number(json_object_get(j, "mean_itl_ms")));
    assert_int_equal(json_integer_value(json_object_get(j, "completed")), (json_int_t)n);
    assert_true(json_number_value(json_object_get(j, "request_throughput")) ==
                json_number_value(k25_json_path(j, "summary.requests_per_s")));
    assert_true(json_is_number(json_object_get(j, "output_throughput")));
    /* P99 of a handful of samples: given (as vLLM does) but flagged, with its interval */
    assert_true(json_is_false(k25_json_path(j, "k25_percentile_support.p99_ttft_ms.supported")));
    assert_int_equal(json_integer_value(k25_json_path(j, "k25_percentile_support.p99_ttft_ms.n")), (json_int_t)n);
    assert_null(k25_json_path(j, "k25_percentile_support.p50_ttft_ms")); /* supported: not flagged */
    assert_string_equal(json_string_value(json_object_get(j, "percentile_method")), "linear");
    json_decref(j);
}

int main(void)
{
    if (access(tu_k25(), X_OK) != 0) {
        fprintf(stderr, "test_bench_cli: %s not built\n", tu_k25());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_aliases),
        cmocka_unit_test(test_progress_lines),
        cmocka_unit_test(test_arrivals),
        cmocka_unit_test(test_vllm_result),
        cmocka_unit_test(test_percentile_method),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_percentile_table),
        cmocka_unit_test(test_bad_values_and_help),
        cmocka_unit_test(test_fidelity_degraded),
        cmocka_unit_test(test_serve_options),
    };
    return cmocka_run_group_tests_name("bench_cli", tests, tu_group_setup, tu_group_teardown);
}
