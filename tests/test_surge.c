/*
 * test_surge.c - `k25 bench --surge` and the elastic queue as the harness
 * sees it (issue 17): the --surge spec, the surge arrival schedule against
 * the rates it promises, and short surge runs on `tiny` that must account
 * for every request (sent = completed + timed out + rejected with a
 * reason, none lost) and carry the queue's fields in the JSON summary and
 * the HDF5 trace.
 */
#include "testutil.h"

#include "harness.h"
#include "k25util.h"

#include <math.h>

/* --surge FACTOR:START_S:DURATION_S; an empty factor is 5 (+400%). */
static void test_surge_parse(void **state)
{
    (void)state;
    struct k25_bench_opts o;
    struct k25_error err;
    k25_bench_opts_init(&o);
    assert_int_equal(k25_bench_surge_parse("4:10:20.5", &o, &err), K25_OK);
    assert_true(o.surge_factor == 4 && o.surge_start_s == 10 && o.surge_duration_s == 20.5);
    assert_int_equal(k25_bench_surge_parse(":0:3", &o, &err), K25_OK);
    assert_true(o.surge_factor == 5 && o.surge_start_s == 0 && o.surge_duration_s == 3);
    const struct { const char *spec, *needle; } bad[] = {
        {"5", "expected FACTOR:START_S:DURATION_S"},
        {"5:1", "expected FACTOR:START_S:DURATION_S"},
        {"5:1:2:3", "expected FACTOR:START_S:DURATION_S"},
        {"1:1:2", "FACTOR must be a number > 1"},
        {"x:1:2", "FACTOR must be a number > 1"},
        {"5::2", "START_S must be"},
        {"5:-1:2", "START_S must be"},
        {"5:1:0", "DURATION_S must be"},
        {"5:1:", "DURATION_S must be"},
        {"5:1:inf", "DURATION_S must be"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = k25_bench_surge_parse(bad[i].spec, &o, &err);
        if (rc != K25_EINVAL || !strstr(err.msg, bad[i].needle) || strcmp(err.field, "--surge") != 0)
            fail_msg("--surge %s: rc %d, \"%s\" (want \"%s\")", bad[i].spec, rc, err.msg, bad[i].needle);
    }
}

/* Arrivals in [a, b) seconds. */
static size_t count_in(const int64_t *t, size_t n, double a, double b)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += t[i] >= (int64_t)(a * 1e9) && t[i] < (int64_t)(b * 1e9);
    return k;
}

/*
 * The schedule keeps its promise: 10 req/s before and after, 50 req/s in
 * the surge, each count within 4.5 standard deviations of its Poisson
 * expectation (a wrong factor, a surge in the wrong place or a rate that
 * does not come back are far outside); ascending; the same seed gives the
 * same schedule; factor 0 is the plain schedule exactly.
 */
static void test_surge_schedule(void **state)
{
    (void)state;
    struct k25_error err;
    int64_t *t = NULL, *u = NULL;
    size_t n = 0, m = 0;
    assert_int_equal(k25_loadgen_schedule_surge(10, 1, 5, 20000000000LL, 20000000000LL, 7, 0, 60000000000LL, &t, &n,
                                                &err),
                     K25_OK);
    for (size_t i = 1; i < n; i++)
        assert_true(t[i] >= t[i - 1]);
    const struct { double a, b, rate; } seg[] = {{0, 20, 10}, {20, 40, 50}, {40, 60, 10}};
    for (size_t k = 0; k < 3; k++) {
        double want = seg[k].rate * (seg[k].b - seg[k].a), got = (double)count_in(t, n, seg[k].a, seg[k].b);
        if (fabs(got - want) > 4.5 * sqrt(want))
            fail_msg("[%g, %g) s: %g arrivals, want about %g", seg[k].a, seg[k].b, got, want);
    }
    assert_int_equal(k25_loadgen_schedule_surge(10, 1, 5, 20000000000LL, 20000000000LL, 7, 0, 60000000000LL, &u, &m,
                                                &err),
                     K25_OK);
    assert_int_equal(m, n);
    assert_memory_equal(t, u, sizeof(int64_t) * n);
    free(t);
    free(u);
    assert_int_equal(k25_loadgen_schedule(10, 0.5, 3, 200, 0, &t, &n, &err), K25_OK);
    assert_int_equal(k25_loadgen_schedule_surge(10, 0.5, 0, 0, 0, 3, 200, 0, &u, &m, &err), K25_OK);
    assert_int_equal(m, n);
    assert_memory_equal(t, u, sizeof(int64_t) * n);
    free(t);
    free(u);
    assert_int_equal(k25_loadgen_schedule_surge(10, 1, -2, 0, 1000, 3, 10, 0, &u, &m, &err), K25_EINVAL);
    assert_int_equal(k25_loadgen_schedule_surge(10, 1, 5, 0, 0, 3, 10, 0, &u, &m, &err), K25_EINVAL);
}

/* A gold set of short requests, every fifth high priority. */
static void write_gold(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 20; i++)
        fprintf(f, "{\"id\":\"q%02d\",\"text\":\"The quick brown fox %d jumps over the lazy dog.\","
                   "\"expected_output_length\":8%s}\n",
                i, i, i % 5 == 0 ? ",\"priority\":\"high\"" : "");
    assert_int_equal(fclose(f), 0);
}

static char *jq(const char *file, const char *expr)
{
    char cmd[1200], *out = NULL;
    snprintf(cmd, sizeof(cmd), "jq -c '%s' %s 2>&1", expr, file);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("jq '%s' %s: exit %d\n%s", expr, file, st, out ? out : "");
    size_t l = strlen(out);
    while (l && (out[l - 1] == '\n' || out[l - 1] == '\r'))
        out[--l] = '\0';
    return out;
}

static void expect_jq(const char *file, const char *expr, const char *want)
{
    char *got = jq(file, expr);
    if (strcmp(got, want) != 0)
        fail_msg("jq '%s' on %s: got \"%s\", want \"%s\"", expr, file, got, want);
    free(got);
}

/*
 * Runs a surge on tiny (extra engine flags in `flags`), then checks the
 * accounting in the printed line, the JSON and the trace: every request
 * ends completed, timed out or rejected, each rejection and timeout with a
 * reason; high-priority requests never spill.  *sum receives the summary
 * JSON path.
 */
static void surge_run(const char *name, const char *flags, char *js, size_t n_js, struct k25_trace *t)
{
    char gold[512], h5[512], cmd[4096], *out;
    snprintf(gold, sizeof(gold), "%s/surge.jsonl", tu_dir);
    write_gold(gold);
    snprintf(h5, sizeof(h5), "%s/%s.h5", tu_dir, name);
    snprintf(js, n_js, "%s/%s.json", tu_dir, name);
    snprintf(cmd, sizeof(cmd),
             "%s bench --dataset %s --threads 1 --quiet --rate 4 --duration 3 --surge 40:0.5:1.5 --seed 5 "
             "--max-batch-size 1 --decode-max-tokens 32 %s --out %s --json %s",
             tu_k25(), gold, flags, h5, js);
    int st = tu_run(cmd, &out);
    if (st != 0 || !strstr(out, "accounting:") || !strstr(out, "none lost"))
        fail_msg("%s\nexit %d\n%s", cmd, st, out);
    free(out);
    /* the JSON: the identity, the new fields, the surge in the workload */
    expect_jq(js, ".summary.requests | .total == .completed + .timed_out + .rejected", "true");
    expect_jq(js, ".summary.requests.lost", "0");
    expect_jq(js, ".summary | (.timed_out_requests == .requests.timed_out) and "
                  "(.spilled_requests == .requests.spilled) and has(\"degraded_requests_ratio\")",
              "true");
    expect_jq(js, ".workload.surge", "{\"factor\":40,\"start_s\":0.5,\"duration_s\":1.5}");
    struct k25_error err;
    if (k25_trace_read(h5, t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t->schema_version, K25_H5_SCHEMA_VERSION);
    size_t sampled = 0;
    for (size_t i = 0; i < t->run.n_reqs; i++) {
        const struct k25_bench_req *q = &t->run.reqs[i];
        assert_true(q->state == K25_REQ_COMPLETED || q->state == K25_REQ_TIMED_OUT || q->state == K25_REQ_REJECTED);
        if (q->state != K25_REQ_COMPLETED && !q->reason[0])
            fail_msg("%s: request %s ended %s without a reason", name, q->id, k25_req_state_name(q->state));
        /* the gold set's high priority reaches the engine, and high never spills */
        if (strcmp(q->id, "q00") == 0 || strcmp(q->id, "q05") == 0)
            assert_true(q->priority == K25_PRIORITY_HIGH && !q->spilled);
    }
    for (size_t w = 0; w < t->run.n_win; w++)
        sampled += t->run.win[w].n_waiting_memory >= 0;
    assert_true(sampled > 0);
}

/* No spill folder, a 3-request memory queue: the surge's overflow is rejected with a reason. */
static void test_surge_reject(void **state)
{
    (void)state;
    char js[512];
    struct k25_trace t;
    surge_run("reject", "--queue-memory-capacity 3", js, sizeof(js), &t);
    expect_jq(js, ".summary.requests.rejected > 0", "true");
    expect_jq(js, ".summary.spilled_requests", "0");
    int full = 0;
    for (size_t i = 0; i < t.run.n_reqs; i++)
        full += t.run.reqs[i].state == K25_REQ_REJECTED;
    assert_true(full > 0);
    k25_trace_free(&t);
}

/* A spill folder: the overflow waits on disk (spilled, low priority) instead, and a short
 * queue_timeout_ms ends long waits as timed out, counted with their reason. */
static void test_surge_spill_timeout(void **state)
{
    (void)state;
    char js[512], flags[1024];
    struct k25_trace t;
    snprintf(flags, sizeof(flags),
             "--queue-memory-capacity 3 --queue-spill-dir %s/spill --queue-timeout-ms 700 --log-level info "
             "--log-file %s/spill.log",
             tu_dir, tu_dir);
    surge_run("spill", flags, js, sizeof(js), &t);
    expect_jq(js, ".summary.spilled_requests > 0", "true");
    int spilled = 0, low = 0, timed_out = 0;
    for (size_t i = 0; i < t.run.n_reqs; i++) {
        const struct k25_bench_req *q = &t.run.reqs[i];
        spilled += q->spilled;
        low += q->spilled && q->priority == K25_PRIORITY_LOW;
        timed_out += q->state == K25_REQ_TIMED_OUT;
    }
    assert_true(spilled > 0);
    assert_int_equal(low, spilled); /* a spilled request runs as low priority */
    char want[32];
    snprintf(want, sizeof(want), "%d", timed_out);
    expect_jq(js, ".summary.timed_out_requests", want);
    /* k25 logs counts the [QUEUE] events, and they agree with the trace */
    char cmd[1400], lj[512], *out;
    snprintf(lj, sizeof(lj), "%s/spill-events.json", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s logs %s/spill.log --tag QUEUE --count --by event --json > %s", tu_k25(), tu_dir, lj);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s: exit %d\n%s", cmd, st, out);
    free(out);
    snprintf(want, sizeof(want), "%d", spilled);
    expect_jq(lj, ".counts.spill", want);
    snprintf(want, sizeof(want), "%d", timed_out);
    expect_jq(lj, ".counts.timeout // 0", want);
    snprintf(want, sizeof(want), "%zu", t.run.n_reqs); /* one [QUEUE] req_id=... line per request */
    expect_jq(lj, ".counts[\"(none)\"]", want);
    k25_trace_free(&t);
}

/* --surge is an open-loop option: a closed loop says so. */
static void test_surge_needs_rate(void **state)
{
    (void)state;
    char cmd[2048], gold[512], *out;
    snprintf(gold, sizeof(gold), "%s/surge.jsonl", tu_dir);
    write_gold(gold);
    snprintf(cmd, sizeof(cmd), "%s bench --dataset %s --threads 1 --quiet --requests 2 --surge 5:0:1 --out %s/x.h5",
             tu_k25(), gold, tu_dir);
    int st = tu_run(cmd, &out);
    if (st == 0 || !strstr(out, "--surge") || !strstr(out, "--rate"))
        fail_msg("%s\nexit %d\n%s", cmd, st, out);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s bench --dataset %s --rate 2 --surge 1:0:1 --out %s/x.h5", tu_k25(), gold, tu_dir);
    st = tu_run(cmd, &out);
    if (st != 2 || !strstr(out, "FACTOR must be a number > 1"))
        fail_msg("%s\nexit %d\n%s", cmd, st, out);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_surge_parse),
        cmocka_unit_test(test_surge_schedule),
        cmocka_unit_test(test_surge_reject),
        cmocka_unit_test(test_surge_spill_timeout),
        cmocka_unit_test(test_surge_needs_rate),
    };
    return cmocka_run_group_tests_name("surge", tests, tu_group_setup, tu_group_teardown);
}
