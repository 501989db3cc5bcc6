/*
 * test_sweep.c - the sweep runner: spec parsing and its errors, grid
 * expansion and stable ids, --only, constraints and the Pareto front on
 * hand-made metric tables, and (integration) the ci-smoke sweep end to
 * end plus resume after the runner is killed mid-sweep.
 */
#include "testutil.h"

#include "sweep.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>


static const char *write_spec(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tu_dir, name);
    tu_write_file(path, text);
    return path;
}

#define HEAD "dataset: datasets/gold/ci-small.jsonl\nworkload: {concurrency: 2, requests: 4}\n"
#define OBJ "objective:\n  minimize: ttft_p50_ms\n"

static struct k25_sweep_spec g_spec; /* large */

static void expect_spec_error(const char *text, int line, const char *needle)
{
    struct k25_error err;
    const char *p = write_spec("bad.yaml", text);
    int rc = k25_sweep_spec_load(p, &g_spec, &err);
    if (rc == K25_OK)
        fail_msg("spec accepted:\n%s", text);
    char want[600];
    snprintf(want, sizeof(want), "%s:%d:", p, line);
    if ((line > 0 && !strstr(err.msg, want)) || !strstr(err.msg, needle))
        fail_msg("got \"%s\"\nwanted \"%s\" and \"%s\"", err.msg, line > 0 ? want : "", needle);
}

static void test_spec_errors(void **state)
{
    (void)state;
    expect_spec_error(HEAD OBJ "axes:\n  prefill_chunk_size: [512, 1024]\nbogus: 1\n", 7, "'bogus': unknown key");
    expect_spec_error(HEAD OBJ "axes:\n  prefill_chunk_size: []\n", 6, "axis with no values");
    expect_spec_error(HEAD OBJ "axes:\n  prefill_chunk_size: [512,\n    abc]\n", 7, "prefill_chunk_size");
    expect_spec_error(HEAD OBJ "axes:\n  prefil_chunk_size: [512]\n", 6, "prefil_chunk_size");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p50_ms\n  subject_to: [\"no_such_metric <= 3\"]\n", 5,
                      "unknown metric 'no_such_metric'");
    expect_spec_error(HEAD "objective:\n  minimize: nope_ms\n", 4, "unknown metric 'nope_ms'");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p50_ms\n  subject_to: [\"fidelity_kl_mean <= 0.05\"]\n", 3,
                      "set `fidelity: true`");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p50_ms\n  subject_to: [\"ttft_p99_ms <== 5\"]\n", 5,
                      "column 15");
    expect_spec_error("dataset: /nonexistent/gold.jsonl\nworkload: {requests: 4}\n" OBJ, 1, "/nonexistent/gold.jsonl");
    expect_spec_error(HEAD "filter: \"input_length > 1000000\"\n" OBJ, 3, "selects no request");
    expect_spec_error("dataset: datasets/gold/ci-small.jsonl\nworkload: {requests: 4, duration_s: 3}\n" OBJ, 2,
                      "not both");
    expect_spec_error(HEAD OBJ "fixed: {kv_block_size: 0}\n", 5, "kv_block_size");
    expect_spec_error(HEAD OBJ "axes: [1, 2\n", 0, "YAML");
    expect_spec_error(HEAD "axes:\n  max_batch_size: [4]\n", 0, "needs an objective");
}

static void test_expand_and_ids(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("g.yaml", "name: g\n" HEAD OBJ
                                         "axes:\n  prefill_chunk_size: [512, 1024, 4096]\n  max_batch_size: [2, 4]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *a, *b;
    int na, nb;
    assert_int_equal(k25_sweep_expand(&g_spec, &a, &na, &err), K25_OK);
    assert_int_equal(na, 3 * 2 + 1); /* + the defaults, which the grid lacks */
    assert_true(a[na - 1].reference);
    assert_int_equal(a[0].cfg.prefill_chunk_size, 512);
    assert_int_equal(a[0].cfg.max_batch_size, 2);
    assert_int_equal(a[1].cfg.max_batch_size, 4); /* last axis fastest */
    assert_int_equal(a[5].cfg.prefill_chunk_size, 4096);
    for (int i = 0; i < na; i++)
        for (int j = i + 1; j < na; j++)
            assert_string_not_equal(a[i].id, a[j].id);
    /* stable: the same spec gives the same ids */
    assert_int_equal(k25_sweep_expand(&g_spec, &b, &nb, &err), K25_OK);
    for (int i = 0; i < na; i++)
        assert_string_equal(a[i].id, b[i].id);
    char label[256];
    k25_sweep_point_label(&g_spec, &a[3], label, sizeof(label));
    assert_string_equal(label, "prefill_chunk_size=1024 max_batch_size=4");
    k25_sweep_points_free(b, nb);

    /* --only */
    bool m;
    assert_int_equal(k25_sweep_only_match(&g_spec, &a[3], "prefill_chunk_size >= 1024 && max_batch_size == 4", &m, &err),
                     K25_OK);
    assert_true(m);
    assert_int_equal(k25_sweep_only_match(&g_spec, &a[0], "prefill_chunk_size >= 1024", &m, &err), K25_OK);
    assert_false(m);
    assert_int_equal(k25_sweep_only_match(&g_spec, &a[0], "nope == 1", &m, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "column 1"));
    assert_int_equal(k25_sweep_only_match(&g_spec, &a[0], "max_batch_size = 1", &m, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "column 16"));

    /* another workload gives other ids */
    p = write_spec("g2.yaml", "name: g\ndataset: datasets/gold/ci-small.jsonl\nworkload: {concurrency: 3, requests: 4}\n" OBJ
                              "axes:\n  prefill_chunk_size: [512, 1024, 4096]\n  max_batch_size: [2, 4]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    assert_int_equal(k25_sweep_expand(&g_spec, &b, &nb, &err), K25_OK);
    assert_string_not_equal(a[0].id, b[0].id);
    k25_sweep_points_free(b, nb);
    k25_sweep_points_free(a, na);

    /* a grid that contains the defaults gets no extra reference point */
    p = write_spec("g3.yaml", HEAD OBJ "axes:\n  prefill_chunk_size: [512, 2048]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    assert_int_equal(k25_sweep_expand(&g_spec, &a, &na, &err), K25_OK);
    assert_int_equal(na, 2);
    k25_sweep_points_free(a, na);
}

/* Hand-made metric tables: constraints, best point, Pareto front. */
static void test_analyze(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("a.yaml", HEAD "fidelity: true\nobjective:\n  minimize: ttft_p99_ms\n"
                                             "  subject_to: [\"fidelity_kl_mean <= 0.05\", \"peak_memory_mb <= 100\"]\n"
                                             "axes:\n  prefill_chunk_size: [256, 512, 1024, 4096]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *pts;
    int n;
    assert_int_equal(k25_sweep_expand(&g_spec, &pts, &n, &err), K25_OK);
    assert_int_equal(n, 5);
    /*            ttft   kl     mem */
    double t[5][3] = {{100, 0.01, 50},   /* feasible */
                      {80, 0.10, 40},    /* fastest, breaks KL: not best, but on the front */
                      {90, 0.02, 60},    /* feasible, best */
                      {95, 0.03, 200},   /* breaks memory; dominated by 90/0.02/60 */
                      {120, 0.01, 50}};  /* reference: dominated by the first */
    for (int i = 0; i < n; i++) {
        pts[i].reps_done = 1;
        pts[i].metrics = json_pack("{s:f, s:f, s:f}", "ttft_p99_ms", t[i][0], "fidelity_kl_mean", t[i][1],
                                   "peak_memory_mb", t[i][2]);
    }
    int best;
    bool pareto[5];
    k25_sweep_analyze(&g_spec, pts, n, &best, pareto);
    assert_int_equal(best, 2);
    assert_true(pts[0].feasible);
    assert_false(pts[1].feasible);
    assert_non_null(strstr(pts[1].violations, "fidelity_kl_mean <= 0.05 (is 0.1)"));
    assert_false(pts[3].feasible);
    assert_non_null(strstr(pts[3].violations, "peak_memory_mb <= 100"));
    assert_true(pareto[0] && pareto[1] && pareto[2]);
    assert_false(pareto[3]);
    assert_false(pareto[4]);
    /* a missing repetition makes a point infeasible */
    pts[2].reps_done = 0;
    k25_sweep_analyze(&g_spec, pts, n, &best, pareto);
    assert_int_equal(best, 0);
    assert_non_null(strstr(pts[2].violations, "repetitions missing"));
    k25_sweep_points_free(pts, n);

    struct k25_sweep_constraint c;
    assert_int_equal(k25_sweep_constraint_parse("output_tok_per_s >= 10", "f", 1, &c, &err), K25_OK);
    assert_true(k25_sweep_constraint_holds(&c, 10));
    assert_false(k25_sweep_constraint_holds(&c, 9.99));
    assert_false(k25_sweep_constraint_holds(&c, NAN));
}

/* ci-smoke end to end, checked with jq. */
static void test_ci_smoke(void **state)
{
    (void)state;
    char cmd[2048], *out;
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --out %s/smoke --quiet --print-best", tu_k25(), tu_dir);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s\n%s", cmd, out);
    assert_non_null(strstr(out, "best point:"));
    assert_non_null(strstr(out, "prefill_chunk_size: ")); /* the YAML to paste */
    free(out);
    snprintf(cmd, sizeof(cmd),
             "jq -e '.points == 5 and (.best | type == \"object\") and (.pareto_front | length >= 1) and "
             "([.all_points[] | select(.repetitions == 1)] | length == 5) and "
             "(.best.metrics.ttft_p50_ms > 0)' %s/smoke/summary.json",
             tu_dir);
    st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s\n%s", cmd, out);
    free(out);
    snprintf(cmd, sizeof(cmd), "h5dump -H %s/smoke/sweep.h5 | grep -q 'DATASET \"points\"'", tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
}

/*
 * Resume: kill the runner (SIGKILL) once some runs are finished; its
 * children die with it; no partial run is kept under a final name; a
 * re-run redoes nothing that was finished and completes the rest.
 */
static void test_resume_after_kill(void **state)
{
    (void)state;
    const char *p = write_spec("r.yaml", "name: r\ndataset: datasets/gold/ci-small.jsonl\nfilter: \"input_length <= 2048\"\n"
                                         "workload: {concurrency: 1, requests: 6}\nrepeats: 2\n" OBJ
                                         "axes:\n  max_batch_size: [1, 2, 3]\n");
    char out[600], cmd[2048];
    snprintf(out, sizeof(out), "%s/resume", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet > %s/resume.log 2>&1 & echo $!", tu_k25(), p, out, tu_dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    pclose(f);
    /* wait (up to 3 minutes: sanitizer builds are slow) for two finished runs */
    for (int i = 0; i < 9000; i++) {
        snprintf(cmd, sizeof(cmd), "test $(ls %s/points/*/rep-*.json 2>/dev/null | grep -v '\\.tmp' | wc -l) -ge 2", out);
        if (tu_run(cmd, NULL) == 0)
            break;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    if (kill(pid, SIGKILL) != 0)
    {
        snprintf(cmd, sizeof(cmd), "cat %s/resume.log", tu_dir);
        char *log = NULL;
        tu_run(cmd, &log);
        fail_msg("the sweep (pid %d) ended before it could be killed (%s):\n%s", pid, strerror(errno), log);
    }
    struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
    /* every file under a final name is complete: each rep-K.json has its rep-K.h5 */
    snprintf(cmd, sizeof(cmd),
             "cd %s/points && for j in */rep-*.json; do h=${j%%.json}.h5; test -s $h || exit 1; done; "
             "ls */rep-*.json | wc -l",
             out);
    char *o2;
    assert_int_equal(tu_run(cmd, &o2), 0);
    int done_before = atoi(o2);
    free(o2);
    assert_true(done_before >= 2 && done_before < 6);
    /* remember the finished files' inodes and times */
    snprintf(cmd, sizeof(cmd), "cd %s/points && stat -c '%%n %%i %%Y' */rep-*.h5 | sort > %s/before.txt", out, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), p, out);
    if (tu_run(cmd, &o2) != 0)
        fail_msg("re-run failed: %s", o2);
    free(o2);
    snprintf(cmd, sizeof(cmd), "cd %s/points && stat -c '%%n %%i %%Y' */rep-*.h5 | sort > %s/after.txt && "
                               "comm -23 %s/before.txt %s/after.txt | wc -l",
             out, tu_dir, tu_dir, tu_dir);
    assert_int_equal(tu_run(cmd, &o2), 0);
    assert_int_equal(atoi(o2), 0); /* nothing finished was redone */
    free(o2);
    snprintf(cmd, sizeof(cmd), "jq -e '[.all_points[] | select(.repetitions == 2)] | length == 4' %s/summary.json", out);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(cmd, sizeof(cmd), "find %s -name '*.tmp*' | wc -l", out);
    assert_int_equal(tu_run(cmd, &o2), 0);
    assert_int_equal(atoi(o2), 0);
    free(o2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_expand_and_ids),
        cmocka_unit_test(test_analyze),
        cmocka_unit_test(test_ci_smoke),
        cmocka_unit_test(test_resume_after_kill),
    };
    return cmocka_run_group_tests_name("sweep", tests, tu_group_setup, tu_group_teardown);
}
