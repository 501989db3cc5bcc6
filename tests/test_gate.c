/*
 * test_gate.c - `k25 gate`: the estimator on values with a known answer,
 * the policy file (the shipped one equals the built-in default; every bad
 * key, value and line), and (integration) the proof that the gate works
 * on this machine: through the CI timing gate (ci/timing-gate.sh), the
 * unmodified engine passes against itself, a deliberately slowed engine (K25_TEST_SLOWDOWN=0.25: every step
 * 25% longer) and a binary built with extra work (tests/extra_work.c) fail
 * as SLOWER; a deliberately lossy engine (K25_TEST_LOSSY) fails on its
 * generated tokens; calibration normalization is stated and a noisy
 * calibration makes normalized metrics UNSURE;
 * mismatched configs and unusable inputs exit 2; the stored baseline
 * loads and passes against itself.
 */
#include "testutil.h"

#include "gate.h"

#include <math.h>
#include <sys/stat.h>

/* The small workload of the A/B proofs: one thread (a neighbour on the other
 * core does not stall it), about a second per run. */
#define WORKLOAD                                                                                              \
    "bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter \"input_length <= 1024\" --concurrency 2 " \
    "--requests 8 --warmup 1 --decode-max-tokens 32 --threads 1 --quiet"

/* A group of R replicates x N cells: base[i] * (1 + 0.01 i) for cell i, times a factor per run. */
static void fill(struct k25_gate_cells *g, int R, int N, double *b, double *c, const double *fb, const double *fc,
                 double slow)
{
    g->n_runs = R;
    g->n_cells = N;
    g->b = b;
    g->c = c;
    g->norm = 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < N; i++) {
            double v = 100.0 * (1 + 0.37 * i); /* cells differ a lot: requests of other lengths */
            b[r * N + i] = v * fb[r];
            c[r * N + i] = v * fc[r] * slow;
        }
}

/* The estimator against values where the answer is known. */
static void test_best_ratio(void **state)
{
    (void)state;
    enum { R = 6, N = 8 };
    double b[R * N], c[R * N], est, lo, hi;
    const double quiet[R] = {1, 1, 1, 1, 1, 1};
    /* bursts: a neighbour slowed some runs of each side by 1.3x to 4x, never sped one up */
    const double burst_b[R] = {1, 1.3, 4, 1, 2, 1.02}, burst_c[R] = {3, 1, 1.01, 1.5, 1, 2.5};
    struct k25_gate_cells g[2];

    fill(&g[0], R, N, b, c, quiet, quiet, 1);
    assert_int_equal(k25_gate_best_ratio(g, 1, true, 500, 0.95, 1, &est, &lo, &hi), N);
    assert_true(est == 0 && lo == 0 && hi == 0);

    /* a 20% slower engine on a quiet machine: exactly log 1.2, a zero-width interval */
    fill(&g[0], R, N, b, c, quiet, quiet, 1.2);
    k25_gate_best_ratio(g, 1, true, 500, 0.95, 1, &est, &lo, &hi);
    assert_true(fabs(est - log(1.2)) < 1e-12 && fabs(lo - log(1.2)) < 1e-12 && fabs(hi - log(1.2)) < 1e-12);

    /* the same engine on both sides, with bursts: the best replicates agree, so no change */
    fill(&g[0], R, N, b, c, burst_b, burst_c, 1);
    k25_gate_best_ratio(g, 1, true, 2000, 0.95, 1, &est, &lo, &hi);
    assert_true(fabs(est) < 0.011);   /* the quietest runs were 1.00 and 1.01 */
    assert_true(lo <= est && est <= hi);
    assert_true(hi < log(1.10));      /* cannot be called SLOWER at a 10% tolerance */
    double est2, lo2, hi2;
    k25_gate_best_ratio(g, 1, true, 2000, 0.95, 1, &est2, &lo2, &hi2);
    assert_true(lo == lo2 && hi == hi2); /* deterministic for a seed */

    /* a real 20% slowdown under bursts: found, and the interval excludes no change */
    fill(&g[0], R, N, b, c, burst_b, burst_c, 1.2);
    k25_gate_best_ratio(g, 1, true, 2000, 0.95, 1, &est, &lo, &hi);
    assert_true(fabs(est - log(1.2 * 1.01 / 1.0)) < 0.02 || fabs(est - log(1.2)) < 0.02);
    assert_true(lo > 0);

    /* normalized: a machine twice as slow on every run, its calibration floor twice as long */
    fill(&g[0], R, N, b, c, quiet, quiet, 2.0);
    g[0].norm = log(2.0);
    k25_gate_best_ratio(g, 1, true, 500, 0.95, 1, &est, &lo, &hi);
    assert_true(fabs(est) < 1e-12);

    /* higher is better (a rate): the best replicate is the highest */
    fill(&g[0], R, N, b, c, burst_b, burst_b, 1);
    k25_gate_best_ratio(g, 1, false, 500, 0.95, 1, &est, &lo, &hi);
    assert_true(fabs(est) < 1e-12);

    /* two groups (sweep points), one replicate each, missing values skipped */
    double b2[N], c2[N];
    fill(&g[0], 1, N, b, c, quiet, quiet, 1.1);
    fill(&g[1], 1, N, b2, c2, quiet, quiet, 1.3);
    b2[3] = NAN;
    c2[5] = NAN;
    assert_int_equal(k25_gate_best_ratio(g, 2, true, 2000, 0.95, 1, &est, &lo, &hi), 2 * N - 2);
    assert_true(est > log(1.1) - 1e-12 && est < log(1.3) + 1e-12);
    assert_true(lo >= log(1.1) - 1e-12 && hi <= log(1.3) + 1e-12 && lo < hi);
    /* nothing to compare */
    g[0].n_cells = 0;
    assert_int_equal(k25_gate_best_ratio(g, 1, true, 100, 0.95, 1, &est, &lo, &hi), 0);
    assert_true(isnan(est) && isnan(lo));
}

/* ci/gate-policy.yaml spells out the built-in default: they must agree. */
static void test_policy_file_is_default(void **state)
{
    (void)state;
    struct k25_gate_policy *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    struct k25_error err;
    k25_gate_policy_default(a);
    if (k25_gate_policy_load("ci/gate-policy.yaml", b, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a->n, b->n);
    assert_true(a->confidence == b->confidence && a->resamples == b->resamples && a->seed == b->seed);
    assert_int_equal(a->unsure, b->unsure);
    assert_int_equal(a->unsure, K25_UNSURE_INCONCLUSIVE);
    for (int i = 0; i < a->n; i++) {
        const struct k25_gate_metric *x = &a->m[i], *y = &b->m[i];
        if (strcmp(x->name, y->name) || x->src != y->src || strcmp(x->path, y->path) || x->cmp != y->cmp ||
            x->lower_better != y->lower_better || x->relative != y->relative || fabs(x->tol - y->tol) > 1e-12 ||
            !(fabs(x->tol_other - y->tol_other) < 1e-12 || (isnan(x->tol_other) && isnan(y->tol_other))) ||
            x->norm != y->norm || x->timing != y->timing || x->gate != y->gate)
            fail_msg("metric %d differs: built-in %s, file %s (line %d)", i, x->name, y->name, y->line);
    }
    /* the CI policy (ci/pipeline.sh) loads too */
    if (k25_gate_policy_load("ci/gate-policy-ci.yaml", b, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(b->n, a->n);
    free(a);
    free(b);
}

static void expect_policy_error(const char *text, int line, const char *needle)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/p.yaml", tu_dir);
    tu_write_file(path, text);
    struct k25_gate_policy *p = calloc(1, sizeof(*p));
    struct k25_error err;
    int rc = k25_gate_policy_load(path, p, &err);
    free(p);
    if (rc == K25_OK)
        fail_msg("policy accepted:\n%s", text);
    char want[700];
    snprintf(want, sizeof(want), "%s:%d:", path, line);
    if ((line > 0 && !strstr(err.msg, want)) || !strstr(err.msg, needle))
        fail_msg("got \"%s\"\nwanted \"%s\" and \"%s\"", err.msg, line > 0 ? want : "", needle);
}

static void test_policy_errors(void **state)
{
    (void)state;
    expect_policy_error("metrics:\n  ttft_ms: {compare: statistical, tolerance: ten}\n", 2, "tolerance");
    expect_policy_error("metrics:\n  ttft_ms: {compare: statistics}\n", 2, "statistical, threshold, exact");
    expect_policy_error("metrics:\n  ttft_ms:\n    better: down\n", 3, "lower, higher");
    expect_policy_error("metrics:\n  ttft_ms: {bogus: 1}\n", 2, "'bogus': unknown key");
    expect_policy_error("metrics:\n  ttft_ms: {from: request.nope}\n", 2, "unknown request column 'nope'");
    expect_policy_error("metrics:\n  x: {from: tokens, compare: threshold}\n", 2, "compared exactly");
    expect_policy_error("metrics:\n  ttft_ms: {compare: statistical, tolerance: 0.1}\n", 2, "in percent");
    expect_policy_error("metrics:\n  m: {compare: threshold, normalize: always}\n", 2, "normalize applies");
    expect_policy_error("metrics:\n  a: {}\n  a: {}\n", 3, "listed twice");
    expect_policy_error("confidence: 2\nmetrics:\n  a: {}\n", 1, "confidence");
    expect_policy_error("unsure: maybe\nmetrics:\n  a: {}\n", 1, "inconclusive, pass, fail");
    expect_policy_error("unsure: warn\nmetrics:\n  a: {}\n", 1, "'warn' is no longer a setting");
    expect_policy_error("colour: red\nmetrics:\n  a: {}\n", 1, "'colour': unknown key");
    expect_policy_error("confidence: 0.9\n", 1, "lists no metric");
    expect_policy_error("metrics: [1, 2\n", 0, "YAML");
    struct k25_gate_policy p;
    struct k25_error err;
    assert_int_equal(k25_gate_policy_load("/nonexistent/policy.yaml", &p, &err), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/policy.yaml"));
}

/* Runs cmd, returns its exit status; *out gets the output. */
static int run(const char *cmd, char **out)
{
    int st = tu_run(cmd, out);
    return st;
}

/* Prints the timing rows of a gate table (up to generated_tokens or the blank line) under a label. */
static void show(const char *label, const char *out)
{
    const char *a = strstr(out, "  ttft_ms"), *b = a ? strstr(a, "  generated_tokens") : NULL;
    if (a && !b)
        b = strstr(a, "\n\n");
    printf("    %s:\n%.*s%s", label, a && b ? (int)(b - a) : 0, a ? a : "", b && *b == '\n' ? "\n" : "");
}

static const char *verdict(const char *name, const char *metric)
{
    static char buf[64];
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof(cmd), "jq -r '.metrics[] | select(.metric == \"%s\") | .verdict' %s/%s.json", metric, tu_dir,
             name);
    buf[0] = 0;
    if (tu_run(cmd, &out) == 0 && out)
        snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(out, "\n"), out);
    free(out);
    return buf;
}

/*
 * The CI timing gate (ci/timing-gate.sh, what `make test` runs) with a given
 * baseline binary: K25_BASE_BIN=build/k25 against the candidate `cand`.
 * JSON in tu_dir/NAME/gate-timing.json.
 */
static int timing_gate(const char *name, const char *cand, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "MAX_ROUNDS=10 K25_BASE_BIN=%s K25_GATE_BIN=%s K25=%s K25_TIMING_OUT=%s/%s ci/timing-gate.sh", tu_k25(),
             tu_k25(), cand, tu_dir, name);
    return run(cmd, out);
}

static const char *timing_verdict(const char *name, const char *metric)
{
    static char buf[64];
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof(cmd), "jq -r '.metrics[] | select(.metric == \"%s\") | .verdict' %s/%s/gate-timing.json",
             metric, tu_dir, name);
    buf[0] = 0;
    if (tu_run(cmd, &out) == 0 && out)
        snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(out, "\n"), out);
    free(out);
    return buf;
}

/*
 * A slower candidate must fail the CI timing gate.  UNSURE is "too noisy to
 * tell", not a wrong answer: a busy spell gets one more try; SAME or FASTER
 * for a slower engine is wrong and fails at once.
 */
static void expect_caught(const char *what, const char *slug, const char *cand)
{
    char *out = NULL, name[64];
    int st = 0;
    for (int t = 0; t < 2; t++) {
        snprintf(name, sizeof(name), "%s-%d", slug, t + 1);
        st = timing_gate(name, cand, &out);
        if (st == 1)
            break;
        const char *v = timing_verdict(name, "e2e_ms");
        if (st != 0 || strcmp(v, "UNSURE") != 0 || t == 1)
            fail_msg("%s was not caught by the CI timing gate (try %d): exit %d, e2e_ms %s\n%s", what, t + 1, st, v,
                     out);
        printf("    %s, try 1: UNSURE (machine too noisy); trying again\n", what);
        free(out);
    }
    int slower = 0;
    const char *m[] = {"ttft_ms", "tpot_ms", "e2e_ms"};
    for (int i = 0; i < 3; i++)
        slower += !strcmp(timing_verdict(name, m[i]), "SLOWER");
    assert_true(slower >= 1);
    assert_non_null(strstr(out, "GATE FAILED"));
    char label[128];
    snprintf(label, sizeof(label), "%s (exit 1)", what);
    show(label, out);
    free(out);
}

/*
 * The proof that the CI timing gate works on this machine: the unmodified
 * engine against itself passes; the same engine made
 * 25% slower per step by the test knob fails; a binary built with extra
 * work (tests/extra_work.c: 2 of 3 GEMMs run twice) fails.
 */
static void test_ci_timing_gate(void **state)
{
    (void)state;
    if (tu_quick()) {
        skip();
        return;
    }
    /* (one try here: ci/pipeline.sh runs the gate again on every make test, and the closing
     * notes and docs/gates.md record 10 tries beside a busy loop) */
    char *out = NULL;
    int st = timing_gate("aa", tu_k25(), &out);
    if (st != 0)
        fail_msg("A against A: exit %d\n%s", st, out);
    const char *v = timing_verdict("aa", "tpot_ms");
    assert_true(!strcmp(v, "SAME") || !strcmp(v, "UNSURE") || !strcmp(v, "FASTER"));
    show("A against A (exit 0)", out);
    free(out);
    /* the test knob, through a wrapper: the candidate "binary" is the engine with K25_TEST_SLOWDOWN=0.25 */
    char wrap[700];
    snprintf(wrap, sizeof(wrap), "%s/k25-slow25", tu_dir);
    char body[1200];
    snprintf(body, sizeof(body), "#!/bin/sh\nK25_TEST_SLOWDOWN=0.25 exec %s \"$@\"\n", tu_k25());
    tu_write_file(wrap, body);
    assert_int_equal(chmod(wrap, 0755), 0);
    expect_caught("K25_TEST_SLOWDOWN=0.25", "knob25", wrap);

    /* a binary built with extra work, beside build/k25 (make tests-bin builds it) */
    char extra[700];
    snprintf(extra, sizeof(extra), "%.*s/tests/k25-extra-work", (int)(strrchr(tu_k25(), '/') - tu_k25()), tu_k25());
    if (access(extra, X_OK) != 0)
        fail_msg("%s is missing: make tests-bin builds it", extra);
    expect_caught("k25-extra-work (2 of 3 GEMMs twice)", "extra-work", extra);
}

/* The gate cannot be made: loud fallback (exit 0, the reason on stderr and in the JSON), or exit 2 when strict. */
static void test_ci_timing_gate_fallback(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof(cmd), "BASE_REF=no-such-commit-k25 K25=%s K25_TIMING_OUT=%s/fb ci/timing-gate.sh", tu_k25(),
             tu_dir);
    int st = run(cmd, &out);
    if (st != 0 || !strstr(out, "NO TIMING GATE") || !strstr(out, "no-such-commit-k25"))
        fail_msg("fallback: exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd), "jq -e '.ran == false and (.reason | test(\"no-such-commit-k25\"))' %s/fb/gate-timing.json",
             tu_dir);
    assert_int_equal(run(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "K25_TIMING_GATE=strict BASE_REF=no-such-commit-k25 K25=%s K25_TIMING_OUT=%s/fb2 ci/timing-gate.sh", tu_k25(),
             tu_dir);
    assert_int_equal(run(cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof(cmd), "K25=/nonexistent/k25 ci/timing-gate.sh");
    assert_int_equal(run(cmd, &out), 2);
    free(out);
    assert_int_equal(run("ci/timing-gate.sh --bogus", &out), 2);
    free(out);
    assert_int_equal(run("ci/timing-gate.sh --help", &out), 0);
    assert_non_null(strstr(out, "BASE_REF"));
    free(out);
}

/* Two single runs (tu_dir/NAME.{h5,json}) with env before the command and extra flags. */
static void bench(const char *name, const char *env, const char *extra)
{
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s %s %s %s --out %s/%s.h5 --json %s/%s.json", env, tu_k25(), WORKLOAD, extra, tu_dir,
             name, tu_dir, name);
    if (tu_run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
}

/* A lossy engine changes greedy tokens: the exact check fails it, even though it is not slower. */
static void test_lossy_and_mismatch(void **state)
{
    (void)state;
    bench("base", "", "");
    bench("lossy", "K25_TEST_LOSSY=1", "");
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/base.json --candidate %s/lossy.json --json-file %s/lossy-gate.json",
             tu_k25(), tu_dir, tu_dir, tu_dir);
    int st = run(cmd, &out);
    if (st != 1)
        fail_msg("the lossy engine was not caught: exit %d\n%s", st, out);
    assert_string_equal(verdict("lossy-gate", "generated_tokens"), "DIFFERENT");
    assert_non_null(strstr(out, "GATE FAILED"));
    free(out);

    /* the trace alone (.h5) is a run too; a run against itself is all SAME (or UNSURE where the
     * machine was too unsteady during the run for its calibration to normalize by) */
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/base.h5 --candidate %s/base.json --json", tu_k25(), tu_dir, tu_dir);
    st = run(cmd, &out);
    if (st != 0)
        fail_msg("a run against itself: exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "%s gate --baseline %s/base.h5 --candidate %s/base.json --json | jq -e '.pass and "
             "([.metrics[] | select(.verdict != \"SAME\" and .verdict != \"n/a\" and "
             "(.note | test(\"calibration spread\") | not))] | length == 0) and "
             "(.metrics[] | select(.metric == \"ttft_ms\") | .ratio == 1)'",
             tu_k25(), tu_dir, tu_dir);
    if (run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);

    /* another config is another benchmark: refused (2), unless --allow-mismatch */
    bench("other", "", "--prefill-chunk-size 256");
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/base.json --candidate %s/other.json", tu_k25(), tu_dir, tu_dir);
    st = run(cmd, &out);
    if (st != 2 || !strstr(out, "prefill_chunk_size"))
        fail_msg("mismatch: exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/base.json --candidate %s/other.json --allow-mismatch", tu_k25(),
             tu_dir, tu_dir);
    st = run(cmd, &out);
    if ((st != 0 && st != 1 && st != 3) || !strstr(out, "mismatch allowed"))
        fail_msg("--allow-mismatch: exit %d\n%s", st, out);
    free(out);
}

/* tu_dir/base.{json,h5}: one run of WORKLOAD, measured once for the tests that need it. */
static void ensure_base(void)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof(cmd), "test -f %s/base.json", tu_dir);
    if (run(cmd, &out) != 0)
        bench("base", "", "");
    free(out);
}

/* Copies tu_dir/base.{json,h5} to tu_dir/NAME.* with the jq filter applied to the JSON. */
static void base_variant(const char *name, const char *jq_filter)
{
    char cmd[2048], *out = NULL;
    ensure_base();
    snprintf(cmd, sizeof(cmd), "jq '%s' %s/base.json > %s/%s.json && cp %s/base.h5 %s/%s.h5", jq_filter, tu_dir, tu_dir,
             name, tu_dir, tu_dir, name);
    if (run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
}

/* base with the calibration trials replaced. */
static void with_calibration(const char *name, const char *trials, double median, double min)
{
    char f[512];
    snprintf(f, sizeof(f),
             ".provenance.calibration.trials_ms = %s | .provenance.calibration.median_ms = %g | "
             ".provenance.calibration.min_ms = %g",
             trials, median, min);
    base_variant(name, f);
}


/*
 * A synthetic set, deterministic to the last bit: R runs ("round-K", as an
 * A/B measurement stores them) of N requests; request i of run r took
 * 100 (1 + 0.3 i) * slow * cellf[i] * runf[r] ms (cellf, runf NULL: 1).  The
 * runs' calibration: calib_ms fastest, spread as given; machine as named.
 */
static void synth_set(struct k25_gate_set *s, const char *machine, int R, int N, double slow, const double *cellf,
                      const double *runf, double calib_ms, double spread)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "synthetic-%s", machine);
    snprintf(s->kind, sizeof(s->kind), "runs");
    s->runs = calloc((size_t)R, sizeof(*s->runs));
    assert_non_null(s->runs);
    s->n_runs = R;
    for (int r = 0; r < R; r++) {
        struct k25_gate_run *x = &s->runs[r];
        snprintf(x->key, sizeof(x->key), "round-%d", r);
        snprintf(x->label, sizeof(x->label), "round-%d", r);
        snprintf(x->machine, sizeof(x->machine), "%s", machine);
        x->doc = json_pack("{s:{}, s:{s:s}}", "summary", "provenance", "command_line",
                           "bench --dataset g.jsonl --model tiny --threads 1 --out x.h5 --json x.json --quiet");
        x->identity = strdup("{}");
        x->calib_ms = calib_ms;
        x->calib_spread = spread;
        x->has_trace = true;
        x->req = calloc((size_t)N, sizeof(*x->req));
        assert_true(x->doc && x->identity && x->req);
        x->n_req = N;
        for (int i = 0; i < N; i++) {
            struct k25_gate_req *q = &x->req[i];
            snprintf(q->id, sizeof(q->id), "r%d", i);
            q->seq = i;
            q->completed = true;
            for (int k = 0; k < K25_GATE_NREQ; k++)
                q->v[k] = NAN;
            q->v[K25_GATE_REQ_TTFT] = 100 * (1 + 0.3 * i) * slow * (cellf ? cellf[i] : 1) * (runf ? runf[r] : 1);
        }
    }
}

/* The policy of the synthetic tests: ttft_ms alone, 10% (50% on another machine), normalized. */
static void synth_policy(struct k25_gate_policy *p, const char *unsure)
{
    char path[600], text[600];
    snprintf(path, sizeof(path), "%s/synth-%s.yaml", tu_dir, unsure);
    snprintf(text, sizeof(text),
             "unsure: %s\nmetrics:\n  ttft_ms: {from: request.ttft_ms, compare: statistical, better: lower, "
             "tolerance: 10%%, other_machine: 50%%, normalize: always}\n",
             unsure);
    tu_write_file(path, text);
    struct k25_error err;
    if (k25_gate_policy_load(path, p, &err) != K25_OK)
        fail_msg("%s", err.msg);
}

/* Compares the synthetic sets; the printed table into *table (owned by the caller). */
static int synth_compare(const struct k25_gate_set *B, const struct k25_gate_set *C, const struct k25_gate_policy *p,
                         const struct k25_gate_opts *o, struct k25_gate_result *res, char **table)
{
    struct k25_error err;
    if (k25_gate_compare(B, C, p, o, res, &err) != K25_OK)
        fail_msg("%s", err.msg);
    size_t n = 0;
    FILE *f = open_memstream(table, &n);
    assert_non_null(f);
    k25_gate_print(f, B, C, res);
    fclose(f);
    return k25_gate_exit_status(res);
}

/*
 * Issue 29: a calibration that cannot be trusted (spread > 10%) is not
 * divided by; the raw change is judged and shown.  Synthetic inputs: a 3.5x
 * slower candidate whose calibration took 3x as long with a 278% spread
 * (normalized it would read +16.7%, UNSURE: "gate passed") is SLOWER at
 * +250.0%; the same timings with a calibration 4x as long (normalized:
 * -75% FASTER) are SAME at +0.0%; on another machine the raw +250% cannot
 * tell the engine from the machine: UNSURE, so INCONCLUSIVE, never passed.
 */
static void test_raw_change_when_calibration_unsteady(void **state)
{
    (void)state;
    struct k25_gate_policy *p = calloc(1, sizeof(*p));
    struct k25_gate_result *res = calloc(1, sizeof(*res));
    struct k25_gate_set B, C;
    struct k25_gate_opts o = {0};
    char *t = NULL;
    assert_true(p && res);
    synth_policy(p, "inconclusive");

    synth_set(&B, "box", 6, 8, 1.0, NULL, NULL, 2.0, 0.02);
    synth_set(&C, "box", 6, 8, 3.5, NULL, NULL, 6.0, 2.78);
    int st = synth_compare(&B, &C, p, &o, res, &t);
    const struct k25_gate_row *r = &res->rows[0];
    if (st != K25_GATE_EXIT_REGRESSION || r->verdict != K25_V_WORSE || !r->calib_untrusted || r->normalized ||
        fabs(r->ratio - 3.5) > 1e-9 || !strstr(t, "+250.0% [+250.0, +250.0]") ||
        !strstr(t, "calibration spread 278% > 10%: not normalized") || !strstr(t, "factor 3.00x not applied") ||
        !strstr(t, "GATE FAILED"))
        fail_msg("exit %d, verdict %d, ratio %g\n%s", st, r->verdict, r->ratio, t);
    free(t);
    k25_gate_set_free(&C);

    synth_set(&C, "box", 6, 8, 1.0, NULL, NULL, 8.0, 0.5);
    st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_PASS || r->verdict != K25_V_SAME || fabs(r->ratio - 1) > 1e-12 ||
        !strstr(t, "+0.0% [+0.0, +0.0]") || !strstr(t, "gate passed"))
        fail_msg("exit %d, verdict %d, ratio %g\n%s", st, r->verdict, r->ratio, t);
    free(t);
    k25_gate_set_free(&C);

    /* a trusted calibration is still divided by: 3.5x slower on a machine 3.5x slower is SAME */
    synth_set(&C, "box", 6, 8, 3.5, NULL, NULL, 7.0, 0.02);
    st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_PASS || !r->normalized || fabs(r->ratio - 1) > 1e-9 || fabs(r->raw_ratio - 3.5) > 1e-9 ||
        !strstr(t, "change normalized by calibration: candidate/baseline 3.50x, raw change +250.0%"))
        fail_msg("exit %d, ratio %g\n%s", st, r->ratio, t);
    free(t);
    k25_gate_set_free(&C);

    synth_set(&C, "other box", 6, 8, 3.5, NULL, NULL, 6.0, 2.78);
    st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_INCONCLUSIVE || r->verdict != K25_V_UNSURE || fabs(r->ratio - 3.5) > 1e-9 ||
        !strstr(t, "+250.0%") || !strstr(t, "INCONCLUSIVE") || strstr(t, "gate passed") ||
        !strstr(t, "the raw change may be the machine's") || !strstr(t, "to settle it: measure both builds here") ||
        !strstr(t, "k25 gate --ab 'BASELINE/k25 bench --dataset g.jsonl --model tiny --threads 1 --quiet'"))
        fail_msg("exit %d, verdict %d\n%s", st, r->verdict, t);
    free(t);
    k25_gate_set_free(&C);
    k25_gate_set_free(&B);
    free(p);
    free(res);
}

/*
 * Issue 29: a gate with a gated metric UNSURE never says "passed".  A
 * candidate whose requests are alternately as fast and 25% slower: median
 * +11.8%, interval [+0, +25] against a 10% tolerance, UNSURE.  Default
 * policy (unsure: inconclusive): INCONCLUSIVE, the reason, the settle
 * command, exit 3; `unsure: pass`: exit 0 naming the metric; `unsure:
 * fail`: exit 1.  A metric that does not gate (gate: false) UNSURE passes.
 */
static void test_unsure_is_inconclusive(void **state)
{
    (void)state;
    struct k25_gate_policy *p = calloc(1, sizeof(*p));
    struct k25_gate_result *res = calloc(1, sizeof(*res));
    struct k25_gate_set B, C;
    struct k25_gate_opts o = {0};
    char *t = NULL;
    assert_true(p && res);
    const double alt[8] = {1, 1.25, 1, 1.25, 1, 1.25, 1, 1.25};
    synth_set(&B, "box", 6, 8, 1.0, NULL, NULL, 2.0, 0.02);
    synth_set(&C, "box", 6, 8, 1.0, alt, NULL, 2.0, 0.02);

    synth_policy(p, "inconclusive");
    int st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_INCONCLUSIVE || res->rows[0].verdict != K25_V_UNSURE || !res->inconclusive ||
        res->n_gated_unsure != 1 || !strstr(t, "INCONCLUSIVE: no regression found, but 1 gated metric UNSURE") ||
        !strstr(t, "  ttft_ms: noise +-12% exceeds the 10% tolerance") || !strstr(t, "to settle it: ") ||
        strstr(t, "gate passed"))
        fail_msg("exit %d\n%s", st, t);
    free(t);
    json_t *j = k25_gate_json(&B, &C, p, res);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "result")), "inconclusive");
    assert_int_equal(json_integer_value(json_object_get(j, "exit_status")), K25_GATE_EXIT_INCONCLUSIVE);
    assert_false(json_is_true(json_object_get(j, "pass")));
    assert_true(json_is_string(json_object_get(j, "settle")));
    json_decref(j);

    /* after --ab: more rounds of the same commands */
    struct k25_gate_opts ab = {false, "old/k25 bench X", "build/k25 bench X", 6, 12};
    st = synth_compare(&B, &C, p, &ab, res, &t);
    if (st != K25_GATE_EXIT_INCONCLUSIVE ||
        !strstr(t, "to settle it: k25 gate --ab 'old/k25 bench X' 'build/k25 bench X' --rounds 12 --max-rounds 24"))
        fail_msg("exit %d\n%s", st, t);
    free(t);

    synth_policy(p, "pass");
    st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_PASS || res->inconclusive || !strstr(t, "gate passed with 1 gated metric UNSURE") ||
        !strstr(t, "unsure: pass"))
        fail_msg("exit %d\n%s", st, t);
    free(t);

    synth_policy(p, "fail");
    st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_REGRESSION || !res->rows[0].fails || !strstr(t, "GATE FAILED"))
        fail_msg("exit %d\n%s", st, t);
    free(t);

    /* report-only: an UNSURE that does not gate leaves the gate passed */
    synth_policy(p, "inconclusive");
    p->m[0].gate = false;
    st = synth_compare(&B, &C, p, &o, res, &t);
    if (st != K25_GATE_EXIT_PASS || !strstr(t, "gate passed"))
        fail_msg("exit %d\n%s", st, t);
    free(t);
    k25_gate_set_free(&B);
    k25_gate_set_free(&C);
    free(p);
    free(res);
}

/* Through the command: a gated figure the candidate lacks is UNSURE: INCONCLUSIVE, exit 3, in the JSON too. */
static void test_inconclusive_exit_status(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    base_variant("withmem", "."); /* through jq as well: the same number formatting on both sides */
    base_variant("nomem", "del(.summary.memory.peak_tracked_bytes)");
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/withmem.json --candidate %s/nomem.json --json-file %s/nomem-gate.json",
             tu_k25(), tu_dir, tu_dir, tu_dir);
    int st = run(cmd, &out);
    if (st != 3 || !strstr(out, "INCONCLUSIVE") || !strstr(out, "peak_memory_bytes: ") || strstr(out, "gate passed") ||
        !strstr(out, "to settle it:"))
        fail_msg("exit %d (want 3)\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "jq -e '.result == \"inconclusive\" and .exit_status == 3 and (.pass | not) and .gated_unsure >= 1' "
             "%s/nomem-gate.json",
             tu_dir);
    if (run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
    /* the policy opts back into passing */
    char pol[600];
    snprintf(pol, sizeof(pol), "%s/unsure-pass.yaml", tu_dir);
    snprintf(cmd, sizeof(cmd), "sed 's/^unsure: .*/unsure: pass/' ci/gate-policy.yaml > %s", pol);
    assert_int_equal(run(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/withmem.json --candidate %s/nomem.json --policy %s", tu_k25(), tu_dir,
             tu_dir, pol);
    st = run(cmd, &out);
    if (st != 0 || !strstr(out, "gate passed with") || !strstr(out, "peak_memory_bytes: "))
        fail_msg("exit %d (want 0)\n%s", st, out);
    free(out);
}

/*
 * degraded_requests_ratio (issue 17) is checked exactly by the default
 * policy and the CI one: a candidate that degraded requests when its
 * baseline did not fails; a baseline written before the field existed
 * (such as baselines/results/ci-smoke) reports it "not in the baseline"
 * and passes.
 */
static void test_degraded_ratio(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    base_variant("deg0", ".");
    base_variant("deg_missing", "del(.summary.degraded_requests_ratio)");
    base_variant("deg_some", ".summary.degraded_requests_ratio = 0.004");
    static const char *const policies[] = {"ci/gate-policy.yaml", "ci/gate-policy-ci.yaml"};
    for (int p = 0; p < 2; p++) {
        snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/deg_missing.json --candidate %s/deg0.json --policy %s",
                 tu_k25(), tu_dir, tu_dir, policies[p]);
        int st = run(cmd, &out);
        if (st != 0 || !strstr(out, "degraded_requests_ratio") || !strstr(out, "not in the baseline"))
            fail_msg("%s: exit %d\n%s", cmd, st, out);
        free(out);
        snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/deg0.json --candidate %s/deg_some.json --policy %s",
                 tu_k25(), tu_dir, tu_dir, policies[p]);
        st = run(cmd, &out);
        if (st != 1 || !strstr(out, "degraded_requests_ratio") || !strstr(out, "differs in 1 of 1 runs"))
            fail_msg("%s: exit %d (want 1: a regression)\n%s", cmd, st, out);
        free(out);
    }
}

/*
 * Normalization is stated: the same timings on a "machine" whose calibration
 * took twice as long come out 2x faster after normalizing, and the row says
 * so (factor 2.00, raw change +0.0%), in the table and the JSON.  A
 * calibration whose trials spread by more than 10% makes the normalized
 * metrics UNSURE with that reason.
 */
static void test_calibration_note(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    with_calibration("cal1", "[2,2,2,2]", 2, 2);
    with_calibration("cal2", "[4,4,4,4]", 4, 4);
    with_calibration("cal3", "[4,6,6,6]", 6, 4);
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/cal1.json --candidate %s/cal2.json --policy ci/gate-policy.yaml "
                               "--json-file %s/calnote.json", tu_k25(), tu_dir, tu_dir, tu_dir);
    int st = run(cmd, &out);
    if (st != 0 || !strstr(out, "change normalized by calibration: candidate/baseline 2.00x, raw change +0.0%"))
        fail_msg("exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "jq -e '.metrics[] | select(.metric == \"ttft_ms\") | .calibration_factor == 2 and .raw_ratio == 1 and "
             "(.ratio - 0.5 | fabs) < 1e-9 and .verdict == \"FASTER\"' %s/calnote.json",
             tu_dir);
    if (run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
    /* a calibration spread by 50% (and 2x slower) is not divided by: the raw change, +0.0%, is judged */
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/cal1.json --candidate %s/cal3.json --policy ci/gate-policy-ci.yaml "
                               "--json-file %s/calspread.json", tu_k25(), tu_dir, tu_dir, tu_dir);
    st = run(cmd, &out);
    if (st != 0 || !strstr(out, "calibration spread 50% > 10%: not normalized") || !strstr(out, "raw change judged"))
        fail_msg("exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "jq -e '[.metrics[] | select(.normalize == \"always\") | (.normalized | not) and .ratio == .raw_ratio and "
             "(.calibration_factor - 2 | fabs) < 1e-9] | all' %s/calspread.json",
             tu_dir);
    if (run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
}

/* An interrupted run is not a result to gate on: exit 2 naming it; an unwritable --json-file fails up front. */
static void test_interrupted_and_json_file(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    base_variant("intr", ".interrupted = true");
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/base.json --candidate %s/intr.json", tu_k25(), tu_dir, tu_dir);
    int st = run(cmd, &out);
    if (st != 2 || !strstr(out, "intr.json") || !strstr(out, "interrupted"))
        fail_msg("exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s/base.json --candidate %s/base.json --json-file /nonexistent/g.json",
             tu_k25(), tu_dir, tu_dir);
    st = run(cmd, &out);
    if (st != 2 || !strstr(out, "/nonexistent/g.json"))
        fail_msg("exit %d\n%s", st, out);
    free(out);
}

/* Unusable input exits 2 with a message naming the place. */
static void test_bad_inputs(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    const char *k = tu_k25();
    snprintf(cmd, sizeof(cmd), "%s gate --baseline /nonexistent/run.json --candidate %s", k, "baselines/results/ci-smoke");
    assert_int_equal(run(cmd, &out), 2);
    assert_non_null(strstr(out, "/nonexistent/run.json"));
    free(out);
    char bad[600];
    snprintf(bad, sizeof(bad), "%s/notbench.json", tu_dir);
    tu_write_file(bad, "{\"kind\": \"something-else\"}\n");
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s --candidate %s", k, bad, bad);
    assert_int_equal(run(cmd, &out), 2);
    assert_non_null(strstr(out, "not a `k25 bench --json` summary"));
    free(out);
    snprintf(bad, sizeof(bad), "%s/broken.json", tu_dir);
    tu_write_file(bad, "{\"kind\": \"k25-bench\",\n");
    snprintf(cmd, sizeof(cmd), "%s gate --baseline %s --candidate %s", k, bad, bad);
    assert_int_equal(run(cmd, &out), 2);
    assert_non_null(strstr(out, "broken.json:2"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --baseline baselines/results/ci-smoke --candidate baselines/results/ci-smoke "
                               "--policy /nonexistent.yaml", k);
    assert_int_equal(run(cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --baseline baselines/results/ci-smoke", k);
    assert_int_equal(run(cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --bogus", k);
    assert_int_equal(run(cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s gate --help", k);
    assert_int_equal(run(cmd, &out), 0);
    assert_non_null(strstr(out, "Exit status: 0 pass, 1 regression, 2 unusable input"));
    assert_non_null(strstr(out, "3 inconclusive"));
    assert_non_null(strstr(out, "[--dir DIR] [--quiet]"));
    free(out);
}

/* The stored baseline loads (every point, with its trace and calibration) and passes against itself. */
static void test_stored_baseline(void **state)
{
    (void)state;
    char cmd[2048], *out = NULL;
    /* every repetition of every point is a run: 5 points x 3 repetitions (sweeps/ci-smoke.yaml) */
    int n_runs = 0;
    assert_int_equal(run("ls baselines/results/ci-smoke/points/*/rep-*.json | wc -l", &out), 0);
    n_runs = atoi(out);
    free(out);
    assert_int_equal(n_runs, 15);
    snprintf(cmd, sizeof(cmd),
             "%s gate --baseline baselines/results/ci-smoke --candidate baselines/results/ci-smoke/summary.json "
             "--policy ci/gate-policy.yaml --json | jq -e '.pass and .run_pairs == %d and "
             "([.baseline.runs[] | select(.trace and .calibration_ms > 0)] | length == %d) and "
             "(.metrics[] | select(.metric == \"generated_tokens\") | .verdict == \"SAME\")'",
             tu_k25(), n_runs, n_runs);
    if (run(cmd, &out) != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
    /* the jq helpers work on it */
    snprintf(cmd, sizeof(cmd), "jq -r -f ci/jq/calibration.jq baselines/results/ci-smoke/points/*/rep-0.json | wc -l");
    assert_int_equal(run(cmd, &out), 0);
    assert_int_equal(atoi(out), 5);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_ratio),
        cmocka_unit_test(test_policy_file_is_default),
        cmocka_unit_test(test_policy_errors),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_stored_baseline),
        cmocka_unit_test(test_lossy_and_mismatch),
        cmocka_unit_test(test_calibration_note),
        cmocka_unit_test(test_raw_change_when_calibration_unsteady),
        cmocka_unit_test(test_unsure_is_inconclusive),
        cmocka_unit_test(test_inconclusive_exit_status),
        cmocka_unit_test(test_degraded_ratio),
        cmocka_unit_test(test_interrupted_and_json_file),
        cmocka_unit_test(test_ci_timing_gate_fallback),
        cmocka_unit_test(test_ci_timing_gate),
    };
    return cmocka_run_group_tests_name("gate", tests, tu_group_setup, tu_group_teardown);
}
