/*
 * test_bench.c - `k25 bench` end to end.
 *
 * Library level: the open-loop stall test (an engine stall injected by the
 * test hook shows in the TTFT of every request scheduled during it, because
 * latency counts from the scheduled arrival) and the closed-loop contract
 * (each user's next request arrives when its previous one finished).
 * Process level: `k25 bench` on datasets/gold/ci-small.jsonl with the tiny
 * model, checked with jq and h5dump; `k25 inspect`; the k25-benchmark alias;
 * every bad input (nothing left under the final names); a killed run.
 */
#include "testutil.h"

#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#define GOLD "datasets/gold/ci-small.jsonl"
/* the 4 short requests of ci-small (512 and 1024 tokens, prompt included): quick on tiny */
#define SMALL "--dataset " GOLD " --filter 'input_length <= 1024' --threads 1 --quiet"


static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int k25(const char *args, char **out)
{
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s %s", tu_k25(), args);
    return tu_run(cmd, out);
}

/* Nothing in tu_dir whose name starts with prefix (final file or temporaries). */
static void assert_no_file(const char *prefix)
{
    char cmd[1024], *out;
    snprintf(cmd, sizeof(cmd), "ls %s | grep -c '^%s' || true", tu_dir, prefix);
    assert_int_equal(tu_run(cmd, &out), 0);
    if (atoi(out) != 0)
        fail_msg("files named %s* left in %s", prefix, tu_dir);
    free(out);
}

static void expect_fail(const char *args, int status, const char *needle)
{
    char *out;
    int st = k25(args, &out);
    if (st != status || !strstr(out, needle))
        fail_msg("k25 %s\n  exit %d (want %d), output:\n%s\n  (wanted to find \"%s\")", args, st, status, out, needle);
    free(out);
}

/* An engine on the tiny model, one thread, and n short inputs. */
static void tiny_engine(k25_model_t **m, k25_engine_t **e, struct k25_bench_input *in, int n, int n_ids, int max_new)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    cfg.threads = 1;
    assert_int_equal(k25_model_load(&cfg, m, &err), K25_OK);
    assert_int_equal(k25_engine_create(&cfg, *m, e, &err), K25_OK);
    for (int i = 0; i < n; i++) {
        memset(&in[i], 0, sizeof(in[i])); /* fields added later (priority, ...) at their defaults */
        snprintf(in[i].id, sizeof(in[i].id), "r%d", i);
        in[i].ids = malloc(sizeof(int32_t) * (size_t)n_ids);
        for (int t = 0; t < n_ids; t++)
            in[i].ids[t] = (int32_t)((i * 7 + t * 13) % 256);
        in[i].n_ids = n_ids;
        in[i].max_new = max_new;
        in[i].line = i + 1;
    }
}

/*
 * Open loop with a 400 ms stall injected 200 ms in: every request scheduled
 * during the stall has TTFT >= (stall end - its arrival), since it could not
 * even be submitted before the stall ended; measured from submission it
 * would look fast, which is what open-loop accounting must not hide.
 */
static void test_open_loop_stall(void **state)
{
    (void)state;
    k25_model_t *m;
    k25_engine_t *e;
    struct k25_bench_input in[3];
    tiny_engine(&m, &e, in, 3, 24, 2);
    struct k25_bench_opts o;
    k25_bench_opts_init(&o);
    o.mode = K25_BENCH_OPEN;
    o.rate_rps = 40;
    o.concurrency = 0;
    o.stall_at_ns = 200000000;
    o.stall_ns = 400000000;
    size_t order[3] = {0, 1, 2};
    struct k25_bench_run run = {0};
    run.stall_start_ns = run.stall_end_ns = -1;
    struct k25_error err;
    struct k25_loadgen_settings s = {.opts = &o, .inputs = in, .n_inputs = 3, .order = order, .n_requests = 40,
                                     .record = true, .seed = k25_engine_config(e)->seed};
    if (k25_loadgen_run(e, &s, &run, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(run.n_reqs, 40);
    assert_true(run.stall_start_ns >= 200000000);
    assert_true(run.stall_end_ns - run.stall_start_ns >= 400000000);
    int during = 0;
    for (size_t i = 0; i < run.n_reqs; i++) {
        const struct k25_bench_req *q = &run.reqs[i];
        assert_int_equal(q->state, K25_REQ_COMPLETED);
        assert_int_equal(q->n_output, 2);
        double ttft = k25_bench_req_ttft_ms(q), lag = k25_bench_req_lag_ms(q);
        assert_true(lag >= 0 && ttft >= lag);
        if (q->arrival_ns >= run.stall_start_ns && q->arrival_ns < run.stall_end_ns) {
            during++;
            double owed = (double)(run.stall_end_ns - q->arrival_ns) / 1e6;
            if (!(ttft >= owed && lag >= owed))
                fail_msg("request %zu arrived %.1f ms before the stall ended: TTFT %.1f ms, lag %.1f ms", i, owed,
                         ttft, lag);
            /* from submission it would have hidden the stall */
            assert_true((double)(q->first_ns - q->submit_ns) / 1e6 < ttft - owed + 1e-6);
        }
    }
    assert_true(during >= 5); /* ~16 expected at 40 req/s over 400 ms */
    /* the stall is engine time: no busy_ns, and the windows show it */
    assert_true(run.ov.step_ns >= 400000000);
    k25_bench_run_free(&run);
    for (int i = 0; i < 3; i++)
        free(in[i].ids);
    k25_engine_destroy(e);
    k25_model_destroy(m);
}

/*
 * The load generator submits every request due at once in one
 * k25_engine_submit_batch: with a spill folder, eight users starting
 * together (one memory slot, seven spilled records) share fsyncs, where one
 * submit per request would pay an fsync for each spilled record.  Every
 * request still completes and is recorded once, in issue order.
 */
static void test_loadgen_batches_submits(void **state)
{
    (void)state;
    struct k25_config cfg;
    struct k25_error err;
    k25_model_t *m;
    k25_engine_t *e;
    k25_config_init(&cfg);
    cfg.threads = 1;
    cfg.queue_memory_capacity = 1;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s/lg-spill", tu_dir);
    assert_int_equal(k25_model_load(&cfg, &m, &err), K25_OK);
    if (k25_engine_create(&cfg, m, &e, &err) != K25_OK)
        fail_msg("%s", err.msg);
    struct k25_bench_input in[4];
    for (int i = 0; i < 4; i++) {
        memset(&in[i], 0, sizeof(in[i]));
        snprintf(in[i].id, sizeof(in[i].id), "b%d", i);
        in[i].ids = malloc(sizeof(int32_t) * 16);
        for (int t = 0; t < 16; t++)
            in[i].ids[t] = (int32_t)((i * 5 + t * 11) % 256);
        in[i].n_ids = 16;
        in[i].max_new = 2;
    }
    struct k25_bench_opts o;
    k25_bench_opts_init(&o);
    o.concurrency = 8;
    size_t order[4] = {0, 1, 2, 3};
    struct k25_bench_run run = {0};
    run.stall_start_ns = run.stall_end_ns = -1;
    struct k25_loadgen_settings s = {.opts = &o, .inputs = in, .n_inputs = 4, .order = order, .n_requests = 16,
                                     .record = true, .seed = cfg.seed};
    if (k25_loadgen_run(e, &s, &run, &err) != K25_OK)
        fail_msg("%s", err.msg);
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(run.n_reqs, 16);
    for (size_t i = 0; i < run.n_reqs; i++) {
        assert_int_equal(run.reqs[i].seq, (int64_t)i);
        assert_string_equal(run.reqs[i].id, in[i % 4].id);
        assert_int_equal(run.reqs[i].state, K25_REQ_COMPLETED);
    }
    if (!(st.spilled_requests >= 7 && st.spill_fsyncs < st.spilled_requests))
        fail_msg("%lld spilled records took %lld fsyncs: the due requests were not submitted as one batch",
                 (long long)st.spilled_requests, (long long)st.spill_fsyncs);
    k25_bench_run_free(&run);
    for (int i = 0; i < 4; i++)
        free(in[i].ids);
    k25_engine_destroy(e);
    k25_model_destroy(m);
}

/* Closed loop: each user's next request arrives exactly when its previous one finished. */
static void test_closed_loop_users(void **state)
{
    (void)state;
    k25_model_t *m;
    k25_engine_t *e;
    struct k25_bench_input in[4];
    tiny_engine(&m, &e, in, 4, 40, 3);
    struct k25_bench_opts o;
    k25_bench_opts_init(&o);
    o.concurrency = 2;
    size_t order[4] = {3, 1, 0, 2};
    struct k25_bench_run run = {0};
    run.stall_start_ns = run.stall_end_ns = -1;
    struct k25_error err;
    struct k25_loadgen_settings s = {.opts = &o, .inputs = in, .n_inputs = 4, .order = order, .first = 1,
                                     .n_requests = 10, .record = true, .seed = k25_engine_config(e)->seed};
    assert_int_equal(k25_loadgen_run(e, &s, &run, &err), K25_OK);
    assert_int_equal(run.n_reqs, 10);
    for (size_t i = 0; i < run.n_reqs; i++) {
        const struct k25_bench_req *q = &run.reqs[i];
        assert_string_equal(q->id, in[order[(1 + i) % 4]].id); /* cycles through the order */
        assert_true(q->user == 0 || q->user == 1);
        assert_int_equal(q->n_output, 3);
        assert_int_equal(q->n_input, 40);
        if (i < 2) {
            assert_int_equal(q->arrival_ns, 0);
            continue;
        }
        /* the latest earlier request of the same user */
        long prev = -1;
        for (size_t j = 0; j < i; j++)
            if (run.reqs[j].user == q->user)
                prev = (long)j;
        assert_true(prev >= 0);
        assert_int_equal(q->arrival_ns, run.reqs[prev].finish_ns);
    }
    assert_true(run.n_win >= 1);
    assert_true(run.ov.loop_ns >= run.ov.step_ns + run.ov.submit_ns);
    assert_int_equal(run.ov.harness_ns, run.ov.loop_ns - run.ov.step_ns - run.ov.submit_ns - run.ov.sleep_ns);
    k25_bench_run_free(&run);
    for (int i = 0; i < 4; i++)
        free(in[i].ids);
    k25_engine_destroy(e);
    k25_model_destroy(m);
}

static char *jq(const char *file, const char *expr)
{
    char cmd[2048], *out;
    snprintf(cmd, sizeof(cmd), "jq -r '%s' %s 2>&1", expr, file);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("jq %s: %s", expr, out);
    size_t n = strlen(out);
    while (n && out[n - 1] == '\n')
        out[--n] = '\0';
    return out;
}

static void expect_jq(const char *file, const char *expr, const char *want)
{
    char *got = jq(file, expr);
    if (strcmp(got, want) != 0)
        fail_msg("jq '%s' on %s: got \"%s\", want \"%s\"", expr, file, got, want);
    free(got);
}

/* The integration run the issue asks for: ci-small, tiny, checked with jq and h5dump. */
static void test_bench_ci_small(void **state)
{
    (void)state;
    char args[2048], h5[512], js[512], *out;
    snprintf(h5, sizeof(h5), "%s/run.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/run.json", tu_dir);
    snprintf(args, sizeof(args), "bench " SMALL " --concurrency 2 --requests 6 --warmup 1 --seed 3 "
                                 "--slo ttft_ms=60000 --out %s --json %s", h5, js);
    int st = k25(args, &out);
    if (st != 0)
        fail_msg("k25 %s: exit %d\n%s", args, st, out);
    assert_non_null(strstr(out, "ttft_ms"));
    assert_non_null(strstr(out, "n/a*")); /* P99 of 6 requests is shown as unsupported */
    free(out);
    expect_jq(js, ".kind", "k25-bench");
    expect_jq(js, ".summary.requests.completed", "6");
    expect_jq(js, ".summary.requests.meeting_slo", "6");
    expect_jq(js, ".summary.ttft_ms.n", "6");
    expect_jq(js, ".summary.ttft_ms.p99", "null");
    expect_jq(js, ".summary.ttft_ms.p95", "null");
    expect_jq(js, ".summary.ttft_ms.p50 > 0", "true");
    expect_jq(js, ".summary.itl_ms.p99 > 0", "true"); /* hundreds of inter-token gaps */
    expect_jq(js, ".summary.output_tok_per_s > 0", "true");
    expect_jq(js, ".summary.goodput_rps == .summary.requests_per_s", "true");
    expect_jq(js, ".summary.harness.overhead_per_token_us > 0", "true");
    expect_jq(js, ".summary.memory.peak_kv_bytes > 0", "true");
    expect_jq(js, ".workload.mode + \" \" + (.workload.concurrency|tostring)", "closed 2");
    expect_jq(js, ".workload.selected_requests", "4");
    expect_jq(js, ".provenance.seed", "3");
    expect_jq(js, ".provenance.machine.threads_used", "1");
    expect_jq(js, ".provenance.config.model", "tiny");
    expect_jq(js, ".provenance.dataset.filter", "input_length <= 1024");
    expect_jq(js, "[.provenance.build.git, .provenance.build.compiler, .provenance.machine.cpu_model] | map(type)",
              "[\n  \"string\",\n  \"string\",\n  \"string\"\n]");
    /* the dataset digest is the file's */
    char *sum;
    assert_int_equal(tu_run("sha256sum " GOLD " | cut -c1-64", &sum), 0);
    sum[64] = '\0';
    char *got = jq(js, ".provenance.dataset.sha256");
    assert_string_equal(got, sum);
    free(got);
    free(sum);

    /* the HDF5 file, as h5dump sees it */
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "h5dump -H %s", h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    const char *want[] = {"GROUP \"meta\"", "DATASET \"requests\"", "GROUP \"tokens\"", "DATASET \"time_ns\"",
                          "GROUP \"prefill\"", "DATASET \"timeline\"", "GROUP \"summary\"",
                          "ATTRIBUTE \"provenance\"", "\"ttft_ms\"", "\"output_tokens\""};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(out, want[i]))
            fail_msg("h5dump -H lacks %s:\n%s", want[i], out);
    free(out);
    snprintf(cmd, sizeof(cmd), "h5dump -a /meta/kind %s | grep -c '\"run\"'", h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_int_equal(atoi(out), 1);
    free(out);
    /* token counts are the engine's: the rows' output_tokens sum to the /tokens length */
    snprintf(cmd, sizeof(cmd), "h5dump -d /tokens/offsets -y -w 0 %s | tr -s ' ,' '\\n\\n' | grep -E '^[0-9]+$' | tail -1",
             h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    char *tot = jq(js, ".summary.output_tokens");
    assert_int_equal(atoi(out), atoi(tot));
    free(out);
    free(tot);

    /* k25 inspect reads it back */
    snprintf(args, sizeof(args), "inspect %s", h5);
    assert_int_equal(k25(args, &out), 0);
    assert_non_null(strstr(out, "provenance"));
    assert_non_null(strstr(out, "sha256"));
    assert_non_null(strstr(out, "ttft_ms"));
    free(out);
    char ct[512];
    snprintf(ct, sizeof(ct), "%s/chrome.json", tu_dir);
    snprintf(args, sizeof(args), "inspect %s --chrome-trace %s", h5, ct);
    assert_int_equal(k25(args, &out), 0);
    free(out);
    expect_jq(ct, "[.traceEvents[] | select(.cat == \"queue\")] | length", "6");
    expect_jq(ct, "[.traceEvents[] | select(.cat == \"decode\")] | length > 0", "true");
}

/* Open loop through the CLI, and --repeat giving intervals across repetitions. */
static void test_bench_open_loop_repeat(void **state)
{
    (void)state;
    if (tu_quick())
        skip();
    char args[2048], h5[512], js[512], *out;
    snprintf(h5, sizeof(h5), "%s/open.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/open.json", tu_dir);
    snprintf(args, sizeof(args), "bench " SMALL " --rate 8 --burstiness 0.5 --requests 4 --repeat 3 --out %s --json %s",
             h5, js);
    int st = k25(args, &out);
    if (st != 0)
        fail_msg("k25 %s: exit %d\n%s", args, st, out);
    free(out);
    expect_jq(js, ".workload.mode", "open");
    expect_jq(js, ".workload.rate_rps", "8");
    expect_jq(js, ".summary.requests.completed", "12");
    expect_jq(js, ".summary.repetitions.count", "3");
    expect_jq(js, ".summary.repetitions.per_repetition | length", "3");
    expect_jq(js, ".summary.repetitions.ci95.output_tok_per_s | (.lo <= .mean and .mean <= .hi)", "true");
    expect_jq(js, ".summary.repetitions.ci95.ttft_p99_ms.mean", "null"); /* 4 requests cannot give a P99 */
    expect_jq(js, ".summary.goodput_rps", "null");
    /* same seed: the same schedule (arrival offsets within each repetition) */
    snprintf(args, sizeof(args), "h5dump -d /requests -y -w 0 %s | grep -c arrival || true", h5);
}

static void test_alias_and_help(void **state)
{
    (void)state;
    char link[512], cmd[2048], *out;
    snprintf(link, sizeof(link), "%s/k25-benchmark", tu_dir);
    char *abs = realpath(tu_k25(), NULL);
    assert_non_null(abs);
    assert_int_equal(symlink(abs, link), 0);
    free(abs);
    snprintf(cmd, sizeof(cmd), "%s --help", link);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "usage: k25 bench"));
    free(out);
    assert_int_equal(k25("--help", &out), 0);
    assert_non_null(strstr(out, "bench"));
    assert_non_null(strstr(out, "inspect"));
    free(out);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    char a[4096], bad[512], h5[512];
    snprintf(h5, sizeof(h5), "%s/bad.h5", tu_dir);
    snprintf(a, sizeof(a), "bench --dataset %s/missing.jsonl --out %s", tu_dir, h5);
    expect_fail(a, 2, "missing.jsonl");
    snprintf(bad, sizeof(bad), "%s/bad.jsonl", tu_dir);
    tu_write_file(bad, "{\"id\":\"a\",\"text\":\"hello\",\"expected_output_length\":4}\n{\"id\": oops}\n");
    snprintf(a, sizeof(a), "bench --dataset %s --out %s", bad, h5);
    expect_fail(a, 2, "bad.jsonl:2");
    snprintf(a, sizeof(a), "bench " SMALL " --filter 'output_length > 100000' --out %s", h5);
    expect_fail(a, 2, "no request matches");
    snprintf(a, sizeof(a), "bench --dataset " GOLD " --filter 'output_length >' --out %s", h5);
    expect_fail(a, 2, "filter");
    snprintf(a, sizeof(a), "bench " SMALL " --duration 5 --requests 3 --out %s", h5);
    expect_fail(a, 2, "not both");
    snprintf(a, sizeof(a), "bench " SMALL " --burstiness 0.5 --out %s", h5);
    expect_fail(a, 2, "needs --rate");
    snprintf(a, sizeof(a), "bench " SMALL " --rate 0 --out %s", h5);
    expect_fail(a, 2, "--rate");
    snprintf(a, sizeof(a), "bench " SMALL " --concurrency 0 --out %s", h5);
    expect_fail(a, 2, "at least 1 user");
    snprintf(a, sizeof(a), "bench " SMALL " --slo ttft=5 --out %s", h5);
    expect_fail(a, 2, "unknown objective");
    snprintf(a, sizeof(a), "bench " SMALL " --out %s --json %s", h5, h5);
    expect_fail(a, 2, "must not be the --out file");
    snprintf(a, sizeof(a), "bench " SMALL " --requests 2 --nosuch 1 --out %s", h5);
    expect_fail(a, 2, "unknown option");
    snprintf(a, sizeof(a), "bench " SMALL " --requests 2");
    expect_fail(a, 2, "--out");
    snprintf(a, sizeof(a), "bench " SMALL " --requests 2 --out %s/no/such/dir/run.h5", tu_dir);
    expect_fail(a, 2, "no/such/dir/run.h5"); /* an unusable output path is bad input (exit 2), found up front */
    snprintf(a, sizeof(a), "bench " SMALL " --requests 2 --prefill-chunk-size -3 --out %s", h5);
    expect_fail(a, 2, "--prefill-chunk-size");
    assert_no_file("bad.h5");
    /* a full disk (file size limit) while writing: clear message, nothing left */
    char script[600];
    snprintf(script, sizeof(script), "%s/disk.sh", tu_dir);
    snprintf(a, sizeof(a), "ulimit -f 8\ntrap '' XFSZ\nexec %s bench " SMALL " --requests 2 --out %s/full.h5 --json %s/full.json\n",
             tu_k25(), tu_dir, tu_dir);
    tu_write_file(script, a);
    snprintf(a, sizeof(a), "sh %s", script);
    char *out;
    int st = tu_run(a, &out);
    if (st != 1 || !strstr(out, "full.h5"))
        fail_msg("full disk: exit %d\n%s", st, out);
    free(out);
    assert_no_file("full.");
    /* inspect refuses what is not a run trace */
    snprintf(a, sizeof(a), "inspect %s", bad);
    expect_fail(a, 2, "not an HDF5 file");
    expect_fail("inspect", 2, "usage");
}

/*
 * Runs `k25 bench ARGS` held after its first measured request (the
 * TEST-ONLY knob K25_TEST_HOLD=PREFIX@1, harness/testknob.c), sends sig to
 * it there - mid-run on any machine - and returns its exit status and
 * stderr (*out).  The marker files are the events; the limits only bound
 * a failure.
 */
static int bench_held_signal(const char *name, const char *args, int sig, char **out)
{
    char cmd[4096], ready[600], status[600], log[600];
    snprintf(ready, sizeof(ready), "%s/%s-hold.ready", tu_dir, name);
    snprintf(status, sizeof(status), "%s/%s.status", tu_dir, name);
    snprintf(log, sizeof(log), "%s/%s.err", tu_dir, name);
    snprintf(cmd, sizeof(cmd),
             "sh -c \"K25_TEST_HOLD=%s/%s-hold@1 %s bench %s; echo \\$? > %s.tmp && mv %s.tmp %s\" > %s 2>&1 &", tu_dir,
             name, tu_k25(), args, status, status, status, log);
    assert_int_equal(tu_run(cmd, NULL), 0);
    bool held = tu_wait_file(ready, 300);
    long pid = held ? tu_read_long(ready) : -1;
    if (pid > 0)
        assert_int_equal(kill((pid_t)pid, sig), 0);
    bool ended = pid > 0 && tu_wait_file(status, 300);
    snprintf(cmd, sizeof(cmd), "cat %s", log);
    tu_run(cmd, out);
    if (!ended)
        fail_msg("%s: %s\n%s", name, held ? "did not end after the signal" : "never held after its first request",
                 *out);
    return (int)tu_read_long(status);
}

/* A run killed mid-way (SIGKILL) leaves no final file; SIGINT keeps what finished, marked
 * interrupted (tests/test_outputs.c checks the files), and leaves no temporary. */
static void test_killed_run(void **state)
{
    (void)state;
    if (tu_quick())
        skip();
    char args[2048], *out;
    snprintf(args, sizeof(args), SMALL " --duration 30 --out %s/killed.h5 --json %s/killed.json", tu_dir, tu_dir);
    int st = bench_held_signal("killed", args, SIGKILL, &out);
    if (st != 137)
        fail_msg("SIGKILL: status %d\n%s", st, out);
    free(out);
    char p[512];
    snprintf(p, sizeof(p), "%s/killed.h5", tu_dir);
    assert_false(exists(p));
    snprintf(p, sizeof(p), "%s/killed.json", tu_dir);
    assert_false(exists(p));
    snprintf(args, sizeof(args), SMALL " --duration 30 --out %s/int.h5 --json %s/int.json", tu_dir, tu_dir);
    st = bench_held_signal("int", args, SIGINT, &out);
    if (st != 130 || !strstr(out, "interrupted"))
        fail_msg("SIGINT: status %d\n%s", st, out);
    free(out);
    assert_no_file("int.h5.tmp");
    assert_no_file("int.json.tmp");
    /* a request had finished before the signal: the result is kept and says it was interrupted */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "grep -q '\"interrupted\": true' %s/int.json && test -s %s/int.h5", tu_dir, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
}

/* The fell-behind rule on summaries with known answers (harness.h: served < 90% AND queue > 10% of E2E). */
static void test_open_loop_check(void **state)
{
    (void)state;
    struct k25_bench_summary s;
    memset(&s, 0, sizeof(s));
    s.requests_per_s = 0.72;
    s.d[K25_M_QUEUE].p[0].value = 175000;
    s.d[K25_M_E2E].p[0].value = 176000;
    k25_bench_open_loop_check(&s, 50);
    assert_true(s.fell_behind);
    assert_true(s.offered_rps == 50 && s.achieved_rps == 0.72);
    /* served less (a short run's tail) but nobody queued: kept up */
    s.d[K25_M_QUEUE].p[0].value = 2;
    s.d[K25_M_E2E].p[0].value = 300;
    k25_bench_open_loop_check(&s, 1.0);
    assert_false(s.fell_behind);
    /* queued (a burst) but served the offered rate: kept up */
    s.requests_per_s = 0.95;
    s.d[K25_M_QUEUE].p[0].value = 200;
    k25_bench_open_loop_check(&s, 1.0);
    assert_false(s.fell_behind);
    s.requests_per_s = 0.5;
    k25_bench_open_loop_check(&s, 1.0);
    assert_true(s.fell_behind);
}

/*
 * The load guard and the open-loop warning end to end: with a busy loop
 * per core beside it, the guard samples a busy machine before the run and
 * says so on stderr, in provenance.machine.load_guard and in the report's
 * "Measurement conditions"; --rate 50 on tiny falls behind, with a warning
 * and summary.open_loop.fell_behind.
 */
static void test_load_guard_and_open_loop(void **state)
{
    (void)state;
    struct k25_load_guard g;
    assert_int_equal(k25_load_guard_sample(&g), K25_OK);
    assert_true(g.cores > 0 && g.busy_limit == 0.5 * g.cores && isfinite(g.load_now) && isfinite(g.steal));
    json_t *j = k25_load_guard_json(&g);
    assert_non_null(json_object_get(j, "load_now"));
    json_decref(j);

    char cmd[2048], *out = NULL, h5[512], js[512];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(h5, sizeof(h5), "%s/busy.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/busy.json", tu_dir);
    /* one busy loop per core (load = cores > half the cores), killed when the run ends; one request
     * at a time (--max-batch-size 1) at 50 req/s: the queue grows */
    snprintf(cmd, sizeof(cmd),
             "( pids=''; for i in $(seq %ld); do (while :; do :; done) & pids=\"$pids $!\"; done; sleep 0.3; "
             "%s bench " SMALL " --requests 6 --rate 50 --max-batch-size 1 --decode-max-tokens 8 --out %s --json %s; "
             "st=$?; kill $pids; wait; exit $st ) 2>&1",
             cores, tu_k25(), h5, js);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s\nexit %d\n%s", cmd, st, out);
    if (!strstr(out, "the machine was already busy before the run"))
        fail_msg("no load-guard warning:\n%s", out);
    if (!strstr(out, "open loop fell behind"))
        fail_msg("no open-loop warning:\n%s", out);
    free(out);
    expect_jq(js, ".provenance.machine.load_guard.busy", "true");
    expect_jq(js, ".summary.open_loop.offered_rps", "50");
    expect_jq(js, ".summary.open_loop.fell_behind", "true");
    expect_jq(js, ".summary.open_loop.achieved_rps < 45", "true");
    expect_jq(js, ".provenance.calibration.spread >= 0", "true");
    /* the report says it under "Measurement conditions" */
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s/busy-report --quiet && grep -A2 'Measurement conditions' "
                               "%s/busy-report/report.md",
             tu_k25(), h5, tu_dir, tu_dir);
    st = tu_run(cmd, &out);
    if (st != 0 || !strstr(out, "WARN") || !strstr(out, "already busy") || !strstr(out, "fell behind"))
        fail_msg("%s\nexit %d\n%s", cmd, st, out);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_loop_stall),
        cmocka_unit_test(test_closed_loop_users),
        cmocka_unit_test(test_loadgen_batches_submits),
        cmocka_unit_test(test_bench_ci_small),
        cmocka_unit_test(test_bench_open_loop_repeat),
        cmocka_unit_test(test_alias_and_help),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_killed_run),
        cmocka_unit_test(test_open_loop_check),
        cmocka_unit_test(test_load_guard_and_open_loop),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
