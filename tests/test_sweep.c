/*
 * test_sweep.c - the sweep runner: spec parsing and its errors, grid
 * expansion and stable ids, --only, the shuffled interleaved run order;
 * constraints, the paired significance rule and the Pareto front with
 * tolerances on hand-made metric tables (against a reference computed
 * here); and (integration) the ci-smoke sweep end to end, "no significant
 * best" on a grid of equivalent points, a real best on a grid where every
 * point but one is slowed (the TEST-ONLY per-point slowdown hook), resume
 * after the runner is killed, array tasks that clean only their own
 * leftovers, --merge on missing runs, the Slurm script and the rate search.
 * The Slurm cluster itself is tests/test_slurm.c.
 */
#include "testutil.h"

#include "harness.h"
#include "sweep.h"
#include "sweep_run.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


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
                      "column 13: '<==' is not an operator");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p50_ms\n  subject_to: [\"ttft_p99_ms <= 5 || ttft_p50_ms < 1\"]\n",
                      5, "column 18: a constraint is one comparison `METRIC OP NUMBER`, got '||'");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p50_ms\n  subject_to: [\"ttft_p99_ms <= fast\"]\n", 5,
                      "column 16: expected a number after '<=', got 'fast' (ttft_p99_ms is a number)");
    expect_spec_error("dataset: /nonexistent/gold.jsonl\nworkload: {requests: 4}\n" OBJ, 1, "/nonexistent/gold.jsonl");
    expect_spec_error(HEAD "filter: \"input_length > 1000000\"\n" OBJ, 3, "selects no request");
    expect_spec_error("dataset: datasets/gold/ci-small.jsonl\nworkload: {requests: 4, duration_s: 3}\n" OBJ, 2,
                      "not both");
    expect_spec_error(HEAD OBJ "fixed: {kv_block_size: 0}\n", 5, "kv_block_size");
    expect_spec_error(HEAD OBJ "axes: [1, 2\n", 0, "YAML");
    expect_spec_error(HEAD "axes:\n  max_batch_size: [4]\n", 0, "needs an objective");
    /* a percentile the run's request count cannot support: refused with the count it needs */
    expect_spec_error("dataset: datasets/gold/ci-small.jsonl\n"
                      "workload: {search: max_rate, search_slo: {ttft_p99_ms: 1200}, rate_lo: 0.5, rate_hi: 8,\n"
                      "           requests: 32}\n" OBJ,
                      2, "'search_slo': ttft_p99_ms needs at least 100 measured requests per probe");
    expect_spec_error("dataset: datasets/gold/ci-small.jsonl\n"
                      "workload: {search: max_rate, search_slo: {ttft_p95_ms: 900}, rate_lo: 1, rate_hi: 8,\n"
                      "           duration_s: 10}\n" OBJ,
                      2, "rate_lo x workload.duration_s gives 10: raise it to 20");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p99_ms\n", 3, "needs at least 100");
    expect_spec_error(HEAD "objective:\n  minimize: ttft_p50_ms\n  subject_to: [\"e2e_p95_ms <= 9\"]\n", 5,
                      "e2e_p95_ms needs at least 20");
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
    /* the one expression language: ||, !, parentheses, and text compared with == / != only */
    assert_int_equal(k25_sweep_only_match(&g_spec, &a[0], "!(prefill_chunk_size >= 1024) || max_batch_size == 99", &m,
                                          &err), K25_OK);
    assert_true(m);
    assert_int_equal(k25_sweep_only_match(&g_spec, &a[0], "max_batch_size >= fast", &m, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "--only: column 19: expected a number after '>=', got 'fast'"));

    /* the run order: every round holds each point once, shuffled by the seed, the same every time */
    struct k25_sweep_task t1[64], t2[64];
    bool sel[16];
    g_spec.repeats = 3;
    int nt = k25_sweep_tasks(&g_spec, a, na, NULL, sel, t1, &err);
    assert_int_equal(nt, 3 * na);
    assert_int_equal(k25_sweep_tasks(&g_spec, a, na, NULL, sel, t2, &err), nt);
    bool differs = false;
    for (int r = 0; r < 3; r++) {
        int seen[16] = {0};
        for (int i = 0; i < na; i++) {
            assert_int_equal(t1[r * na + i].rep, r);
            seen[t1[r * na + i].point]++;
            assert_int_equal(t1[r * na + i].point, t2[r * na + i].point);
            differs |= t1[r * na + i].point != i;
        }
        for (int i = 0; i < na; i++)
            assert_int_equal(seen[i], 1);
    }
    assert_true(differs); /* shuffled: not the grid order (7! orders; seed 0 is not the identity) */
    /* --only keeps the reference: every verdict compares with it */
    nt = k25_sweep_tasks(&g_spec, a, na, "prefill_chunk_size == 4096", sel, t1, &err);
    assert_int_equal(nt, 3 * 3); /* 4096 x {2, 4} + the reference */
    assert_true(sel[na - 1] && sel[4] && sel[5] && !sel[0]);
    assert_int_equal(k25_sweep_tasks(&g_spec, a, na, "prefill_chunk_size == 7", sel, t1, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "selects none"));
    g_spec.repeats = 1;

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

/* Sets point p's metrics from per-repetition objective values (NAN: missing) and fixed others. */
static void set_point(struct k25_sweep_point *p, const char *obj, const double *reps, int n_reps, double kl,
                      double mem)
{
    double sum = 0, ss = 0;
    int k = 0;
    p->reps_done = 0;
    p->reps_mask = 0;
    for (int r = 0; r < K25_SWEEP_MAX_REPEATS; r++)
        p->rep_obj[r] = r < n_reps ? reps[r] : NAN;
    for (int r = 0; r < n_reps; r++)
        if (!isnan(reps[r])) {
            p->reps_done++;
            p->reps_mask |= (uint64_t)1 << r;
            sum += reps[r];
            k++;
        }
    double mean = sum / k;
    for (int r = 0; r < n_reps; r++)
        if (!isnan(reps[r]))
            ss += (reps[r] - mean) * (reps[r] - mean);
    double half = k > 1 ? k25_stats_t_quantile(k - 1, 0.975) * sqrt(ss / (k - 1)) / sqrt(k) : NAN;
    json_decref(p->metrics);
    json_decref(p->metrics_ci);
    p->metrics = json_pack("{s:f, s:f, s:f}", obj, mean, "fidelity_kl_mean", kl, "peak_memory_mb", mem);
    p->metrics_ci = json_pack("{s:[o, o]}", obj, isnan(half) ? json_null() : json_real(mean - half),
                              isnan(half) ? json_null() : json_real(mean + half));
}

/*
 * The Pareto front with tolerances: objective values that the paired
 * repetitions cannot tell apart tie, and memory within 1% ties; a point
 * that is slower and saves 8 bytes is dominated, not a trade-off.
 */
static void test_pareto_ties(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("pt.yaml", HEAD "repeats: 3\n" OBJ "axes:\n  prefill_chunk_size: [256, 512, 1024, 4096]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *pts;
    int n;
    assert_int_equal(k25_sweep_expand(&g_spec, &pts, &n, &err), K25_OK);
    assert_int_equal(n, 5);
    const double mb = 50.0, eight_bytes = 8.0 / 1048576.0;
    set_point(&pts[0], "ttft_p50_ms", (const double[3]){100, 102, 98}, 3, 0, mb);
    set_point(&pts[1], "ttft_p50_ms", (const double[3]){97, 101, 97}, 3, 0, mb * 1.006); /* ties with 0 */
    set_point(&pts[2], "ttft_p50_ms", (const double[3]){100, 102, 98}, 3, 0, 60);        /* 0 beats it on memory */
    set_point(&pts[3], "ttft_p50_ms", (const double[3]){200, 204, 196}, 3, 0, mb - eight_bytes);
    set_point(&pts[4], "ttft_p50_ms", (const double[3]){150, 153, 147}, 3, 0, mb);
    struct k25_sweep_verdict v;
    bool pareto[5];
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_true(pareto[0]);
    assert_true(pareto[1]);
    assert_false(pareto[2]);
    assert_false(pareto[3]); /* 8 bytes less memory is a tie, and it is twice as slow */
    assert_false(pareto[4]);
    /* a real difference in time beyond the pairs' noise is a win, not a tie */
    set_point(&pts[1], "ttft_p50_ms", (const double[3]){90, 92, 88}, 3, 0, mb * 1.006);
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_true(pareto[1]);
    assert_false(pareto[0]);
    k25_sweep_points_free(pts, n);
}

/*
 * Issue 32: one leader, the reference included.  The reference with the
 * best mean (nothing significantly better) is the leader, is named as such
 * in the message, and stays on the Pareto front although a point with a
 * worse mean, tied in the noise, uses less memory.  And a KV knob that
 * did not change the KV it stores gets a warning, written to summary.json.
 */
static void test_leader_and_knob_effect(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("lk.yaml", HEAD "repeats: 3\n" OBJ
                               "axes:\n  kv_compression_ratio: [0.5, 1.0]\n  kv_cache_dtype: [fp32, int4]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *pts;
    int n;
    assert_int_equal(k25_sweep_expand(&g_spec, &pts, &n, &err), K25_OK);
    assert_int_equal(n, 5);
    int ref = k25_sweep_reference_index(&g_spec, pts, n);
    assert_int_equal(ref, 4);
    /* noisy rounds: every interval holds 1; the reference has the best mean */
    set_point(&pts[ref], "ttft_p50_ms", (const double[3]){700, 900, 640}, 3, 0, 47.8);
    int idx05_fp32 = -1, idx1_fp32 = -1, idx05_int4 = -1, idx1_int4 = -1;
    for (int i = 0; i < 4; i++) {
        bool half = pts[i].cfg.kv_compression_ratio < 0.75, int4 = pts[i].cfg.kv_cache_dtype == K25_DTYPE_INT4;
        set_point(&pts[i], "ttft_p50_ms", (const double[3]){500 + 100 * i, 1500, 700}, 3, 0, int4 ? 40 : 47.8);
        /* peak KV: int4 stores an eighth of fp32; ratio 0.5 stored the same as 1.0 (short prompts) */
        json_object_set_new(pts[i].metrics, "peak_kv_mb", json_real(int4 ? 0.5 : 4.0));
        *(half ? (int4 ? &idx05_int4 : &idx05_fp32) : (int4 ? &idx1_int4 : &idx1_fp32)) = i;
    }
    json_object_set_new(pts[ref].metrics, "peak_kv_mb", json_real(3.4));
    struct k25_sweep_verdict v;
    bool pareto[5];
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_int_equal(v.kind, K25_VERDICT_NOT_SIGNIFICANT);
    assert_int_equal(v.best, -1);
    assert_int_equal(v.leader, ref);
    if (!strstr(v.message, "best mean: the reference itself"))
        fail_msg("message: %s", v.message);
    assert_true(pareto[ref]); /* nothing beats it: on the front */
    /* ratio 0.5 stored what 1.0 stored: warned, naming both figures; 1.0 and the dtype are not */
    assert_int_not_equal(idx05_fp32, -1);
    if (!strstr(pts[idx05_fp32].knob_warning, "kv_compression_ratio had almost no effect") ||
        !strstr(pts[idx05_fp32].knob_warning, "peak KV 4 MiB against 4 MiB"))
        fail_msg("warning: '%s'", pts[idx05_fp32].knob_warning);
    assert_non_null(strstr(pts[idx05_int4].knob_warning, "kv_compression_ratio"));
    assert_string_equal(pts[idx1_fp32].knob_warning, "");
    assert_string_equal(pts[idx1_int4].knob_warning, ""); /* int4 did cut the KV bytes */
    /* int4 that did not shrink the KV is warned about too */
    json_object_set_new(pts[idx1_int4].metrics, "peak_kv_mb", json_real(3.9));
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_non_null(strstr(pts[idx1_int4].knob_warning, "kv_cache_dtype had almost no effect"));
    /* summary.json carries the leader and the warnings */
    char out[600], cmd[1400], *o;
    snprintf(out, sizeof(out), "%s/lk-out", tu_dir);
    mkdir(out, 0755);
    assert_int_equal(k25_sweep_write_results(&g_spec, out, pts, n, NULL, &err), K25_OK);
    snprintf(cmd, sizeof(cmd),
             "jq -e '.leader.reference == true and .best == null and (.warnings | length) >= 2 and "
             "(.warnings[0] | test(\"had almost no effect\")) and "
             "([.pareto_front[] | select(.reference)] | length) == 1' %s/summary.json", out);
    if (tu_run(cmd, &o) != 0)
        fail_msg("%s\n%s", cmd, o);
    free(o);
    k25_sweep_points_free(pts, n);
}

/* Hand-made metric tables: constraints, the verdict on a best point, the Pareto front. */
static void test_analyze(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("a.yaml", "dataset: datasets/gold/ci-small.jsonl\nworkload: {concurrency: 2, requests: 100}\n"
                                         "repeats: 3\nfidelity: true\nobjective:\n  minimize: ttft_p99_ms\n"
                                         "  subject_to: [\"fidelity_kl_mean <= 0.05\", \"peak_memory_mb <= 100\"]\n"
                                         "axes:\n  prefill_chunk_size: [256, 512, 1024, 4096]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *pts;
    int n;
    assert_int_equal(k25_sweep_expand(&g_spec, &pts, &n, &err), K25_OK);
    assert_int_equal(n, 5);
    assert_int_equal(k25_sweep_reference_index(&g_spec, pts, n), 4);
    /* rounds drift together (round 1 slow for everyone): pairing by repetition cancels it */
    const double ref[3] = {100, 130, 95};
    const double r0[3] = {101, 128, 97};   /* the reference's equal */
    const double r1[3] = {60, 78, 57};     /* 40% faster every round, but breaks the KL bound */
    const double r2[3] = {80, 104, 76};    /* 20% faster every round: significant */
    const double r3[3] = {70, 91, 66};     /* faster still, but breaks the memory limit */
    set_point(&pts[0], "ttft_p99_ms", r0, 3, 0.01, 50);
    set_point(&pts[1], "ttft_p99_ms", r1, 3, 0.10, 40);
    set_point(&pts[2], "ttft_p99_ms", r2, 3, 0.02, 60);
    set_point(&pts[3], "ttft_p99_ms", r3, 3, 0.03, 200);
    set_point(&pts[4], "ttft_p99_ms", ref, 3, 0.01, 50);
    struct k25_sweep_verdict v;
    bool pareto[5];
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_true(pts[0].feasible && pts[2].feasible && pts[4].feasible);
    assert_false(pts[1].feasible);
    assert_non_null(strstr(pts[1].violations, "fidelity_kl_mean <= 0.05 (is 0.1)"));
    assert_false(pts[3].feasible);
    assert_non_null(strstr(pts[3].violations, "peak_memory_mb <= 100"));
    assert_int_equal(v.kind, K25_VERDICT_SIGNIFICANT);
    assert_int_equal(v.best, 2);
    assert_int_equal(v.reference, 4);
    assert_int_equal(v.comparisons, 2); /* the feasible points: 0 and 2 */
    assert_true(pts[2].vs_ref.better);
    assert_false(pts[0].vs_ref.better);
    /* the interval, against a reference computed here: d_k = ln(point_k / ref_k), t(1 - 0.05 / (2 m), 2) */
    {
        double d[3], mean = 0, ss = 0;
        for (int k = 0; k < 3; k++)
            mean += (d[k] = log(r2[k] / ref[k])) / 3;
        for (int k = 0; k < 3; k++)
            ss += (d[k] - mean) * (d[k] - mean);
        double t = 6.205346816; /* Student t, 2 degrees of freedom, 0.9875 quantile */
        double half = t * sqrt(ss / 2) / sqrt(3);
        assert_int_equal(pts[2].vs_ref.pairs, 3);
        assert_true(fabs(pts[2].vs_ref.ratio - exp(mean)) < 1e-9);
        assert_true(fabs(pts[2].vs_ref.lo - exp(mean - half)) < 1e-6);
        assert_true(fabs(pts[2].vs_ref.hi - exp(mean + half)) < 1e-6);
        assert_true(pts[2].vs_ref.hi < 1);
    }
    assert_true(pareto[1] && pareto[2]); /* trade-offs: time against KL and memory */

    /* equivalent points (noise only): no setting is significantly better */
    const double e0[3] = {104, 121, 99}, e2[3] = {97, 135, 92};
    set_point(&pts[0], "ttft_p99_ms", e0, 3, 0.01, 50);
    set_point(&pts[2], "ttft_p99_ms", e2, 3, 0.01, 50);
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_int_equal(v.kind, K25_VERDICT_NOT_SIGNIFICANT);
    assert_int_equal(v.best, -1);
    assert_true(v.leader == 0 || v.leader == 2);
    assert_non_null(strstr(v.message, "no setting is significantly better than the reference (defaults)"));
    assert_non_null(strstr(v.message, "over 3 paired repetitions"));

    /* one repetition: no significance can be claimed, whatever the means say */
    const double o1[1] = {50}, oref[1] = {100};
    g_spec.repeats = 1;
    for (int i = 0; i < n; i++)
        set_point(&pts[i], "ttft_p99_ms", i == 2 ? o1 : oref, 1, 0.01, 50);
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_int_equal(v.kind, K25_VERDICT_ONE_REPETITION);
    assert_int_equal(v.best, -1);
    assert_int_equal(v.leader, 2);
    assert_non_null(strstr(v.message, "no significance can be claimed"));
    g_spec.repeats = 3;

    /* the reference breaks a constraint: every feasible point improves on it */
    for (int i = 0; i < n; i++)
        set_point(&pts[i], "ttft_p99_ms", i == 0 ? e0 : i == 2 ? e2 : ref, 3, 0.01, i == 4 ? 150 : 50);
    set_point(&pts[1], "ttft_p99_ms", r1, 3, 0.10, 40);
    set_point(&pts[3], "ttft_p99_ms", r3, 3, 0.03, 200);
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_int_equal(v.kind, K25_VERDICT_REFERENCE_INFEASIBLE);
    assert_true(v.best == 0 || v.best == 2);
    assert_non_null(strstr(v.message, "breaks \"peak_memory_mb <= 100\""));

    /* the reference has no result: nothing can be compared */
    set_point(&pts[4], "ttft_p99_ms", (const double[3]){NAN, NAN, NAN}, 3, 0.01, 50);
    pts[4].reps_done = 0;
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_int_equal(v.kind, K25_VERDICT_NO_REFERENCE);
    assert_int_equal(v.best, -1);

    /* a missing repetition makes a point infeasible */
    set_point(&pts[2], "ttft_p99_ms", (const double[3]){80, NAN, 76}, 3, 0.02, 60);
    k25_sweep_analyze(&g_spec, pts, n, &v, pareto);
    assert_non_null(strstr(pts[2].violations, "1 of 3 repetitions missing"));
    k25_sweep_points_free(pts, n);

    struct k25_sweep_constraint c;
    assert_int_equal(k25_sweep_constraint_parse("output_tok_per_s >= 10", "f", 1, &c, &err), K25_OK);
    assert_true(k25_sweep_constraint_holds(&c, 10));
    assert_false(k25_sweep_constraint_holds(&c, 9.99));
    assert_false(k25_sweep_constraint_holds(&c, NAN));
}

/* ------------------------------------------------------------ integration */

/* Runs a shell command; fails the test with its output unless it exits with want. */
static char *run_expect(const char *cmd, int want)
{
    char *out = NULL;
    int st = tu_run(cmd, &out);
    if (st != want)
        fail_msg("exit %d (wanted %d): %s\n%s", st, want, cmd, out ? out : "");
    return out;
}

/* A jq predicate over a file: true when it holds. */
static bool jq_true(const char *expr, const char *file)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "jq -e '%s' '%s' >/dev/null", expr, file);
    return tu_run(cmd, NULL) == 0;
}

/* ci-smoke end to end as CI runs it (--jobs 2), checked with jq. */
static void test_ci_smoke(void **state)
{
    (void)state;
    if (tu_quick())
        skip(); /* 15 runs: make test runs it (and the pipeline again) */
    char cmd[2048], sum[600];
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --out %s/smoke --jobs 2 --quiet --print-best", tu_k25(),
             tu_dir);
    char *out = run_expect(cmd, 0);
    /* either a significant best with the YAML to paste, or the honest message */
    if (strstr(out, "best point:"))
        assert_non_null(strstr(out, "prefill_chunk_size: "));
    else
        assert_non_null(strstr(out, "is significantly better than the reference"));
    free(out);
    snprintf(sum, sizeof(sum), "%s/smoke/summary.json", tu_dir);
    assert_true(jq_true(".points == 5 and .repeats >= 3 and (.pareto_front | length >= 1) and "
                        "([.all_points[] | select(.repetitions >= 3)] | length == 5) and "
                        "(.significance.verdict | IN(\"significant\", \"not_significant\")) and "
                        "(.significance.comparisons == 4) and (.reference.label == \"defaults\") and "
                        "(.leader.metrics.ttft_p50_ms > 0) and "
                        "((.best == null) == (.significance.verdict == \"not_significant\"))",
                        sum));
    /* the demo's one-liner works on either outcome */
    snprintf(cmd, sizeof(cmd), "jq -r -f ci/jq/sweep-best.jq %s", sum);
    out = run_expect(cmd, 0);
    assert_true(strstr(out, "x0.") || strstr(out, "x1.") || strstr(out, "significantly better than the reference"));
    free(out);
    snprintf(cmd, sizeof(cmd), "h5dump -H %s/smoke/sweep.h5 | grep -q 'DATASET \"points\"'", tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    /* the filler runs that kept the tail loaded left nothing behind */
    snprintf(cmd, sizeof(cmd), "test ! -e %s/smoke/.filler && test -z \"$(find %s/smoke -name '*.tmp*')\"", tu_dir,
             tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
}

/*
 * A small grid for the verdict tests: queue_timeout_ms changes nothing a
 * run measures here (no request waits that long), so the points do the
 * same work; the defaults (30000) are the reference.
 */
#define EQUIV "dataset: datasets/gold/ci-small.jsonl\nfilter: \"input_length <= 1024\"\n" \
              "workload: {concurrency: 2, requests: 4, warmup: 1}\nfixed: {decode_max_tokens: 8}\n" \
              "seed: 3\nobjective:\n  minimize: ttft_p50_ms\naxes:\n  queue_timeout_ms: [40000, 50000]\n"

/*
 * Equivalent points: "no significant best".  The rule is wrong at most 5%
 * of the time on such a grid by design (family-wise level), so one fresh
 * retry is allowed: a systematic bias - such as the reference running
 * alone after the parallel runs - names a best both times.
 */
static void test_equivalent_points_no_best(void **state)
{
    (void)state;
    if (tu_quick())
        skip(); /* timing statistics: not under sanitizers */
    const char *p = write_spec("equiv.yaml", "name: equiv\n" EQUIV "repeats: 3\n");
    char cmd[2048], sum[600];
    for (int attempt = 0; attempt < 2; attempt++) {
        snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s/equiv-%d --jobs 2 --quiet --print-best", tu_k25(), p, tu_dir,
                 attempt);
        char *out = run_expect(cmd, 0);
        snprintf(sum, sizeof(sum), "%s/equiv-%d/summary.json", tu_dir, attempt);
        bool none = jq_true(".best == null and .significance.verdict == \"not_significant\" and "
                            ".significance.comparisons == 2 and (.leader.reference or (.leader.vs_reference.pairs == 3 and "
                            "(.leader.vs_reference.ratio_ci | length == 2)))",
                            sum);
        if (none) {
            assert_non_null(strstr(out, "no setting is significantly better than the reference (defaults)"));
            assert_non_null(strstr(out, "keep the reference settings"));
            assert_null(strstr(out, "best point:"));
            free(out);
            return;
        }
        print_message("attempt %d named a best point on equivalent settings:\n%s", attempt, out);
        free(out);
    }
    fail_msg("a best point was named on a grid of equivalent settings twice in a row (at the rule's 5%% "
             "family-wise level: 1 in 400 by chance); see %s", sum);
}

/* Every point but one slowed 6x (TEST-ONLY hook): that one is the best, with an interval below 1.
 * (At 4x a machine loaded by other work gave the fast point an interval of [0.06, 1.22]: 6x puts
 * the same spread well below 1.) */
static void test_slowed_points_real_best(void **state)
{
    (void)state;
    if (tu_quick())
        skip(); /* timing statistics: not under sanitizers */
    const char *p = write_spec("slow.yaml", "name: slow\n" EQUIV "repeats: 4\n");
    char cmd[2048], sum[600];
    snprintf(cmd, sizeof(cmd),
             "K25_TEST_SLOWDOWN_POINTS='queue_timeout_ms=50000=0,*=5' %s sweep %s --out %s/slow --jobs 2 --print-best "
             "2>%s/slow.err",
             tu_k25(), p, tu_dir, tu_dir);
    char *out = run_expect(cmd, 0);
    assert_non_null(strstr(out, "best point: queue_timeout_ms=50000"));
    assert_non_null(strstr(out, "queue_timeout_ms: 50000")); /* the YAML to paste */
    free(out);
    snprintf(sum, sizeof(sum), "%s/slow/summary.json", tu_dir);
    assert_true(jq_true(".significance.verdict == \"significant\" and .best.label == \"queue_timeout_ms=50000\" and "
                        ".best.vs_reference.significantly_better and .best.vs_reference.ratio_ci[1] < 1 and "
                        ".best.vs_reference.ratio < 0.7 and .improvement_over_reference > 0.3 and "
                        "([.all_points[] | select(.label == \"queue_timeout_ms=40000\") | "
                        ".vs_reference.significantly_better] == [false])",
                        sum));
    /* the runner said the hook was on, and the engine confirms it in the slowed runs' logs */
    snprintf(cmd, sizeof(cmd), "grep -q 'TEST-ONLY hook K25_TEST_SLOWDOWN_POINTS' %s/slow.err && "
                               "grep -l 'K25_TEST_SLOWDOWN=5' %s/slow/points/*/rep-0.log | wc -l",
             tu_dir, tu_dir);
    out = run_expect(cmd, 0);
    assert_int_equal(atoi(out), 2);
    free(out);
}

/* The TEST-ONLY hold knobs refuse what they cannot do, by name (they are never silently ignored). */
static void test_hold_knob_errors(void **state)
{
    (void)state;
    static const struct {
        const char *value, *want;
    } bad[] = {
        {"nodir", "K25_TEST_HOLD_TASKS: \"nodir\": expected DIR:I[,J...]"},
        {"/tmp:", "K25_TEST_HOLD_TASKS: \"/tmp:\": expected DIR:I[,J...]"},
        {"/tmp:1,x", "K25_TEST_HOLD_TASKS: \"/tmp:1,x\": expected DIR:I[,J...]"},
        {"/tmp:15", "K25_TEST_HOLD_TASKS: task 15: the sweep has tasks 0..14"},
    };
    char cmd[2048], *out;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(cmd, sizeof(cmd), "K25_TEST_HOLD_TASKS='%s' %s sweep sweeps/ci-smoke.yaml --out %s/hold-bad --dry-run",
                 bad[i].value, tu_k25(), tu_dir);
        out = run_expect(cmd, 2);
        if (!strstr(out, bad[i].want))
            fail_msg("%s:\n%s\nwanted: %s", cmd, out, bad[i].want);
        free(out);
    }
    snprintf(cmd, sizeof(cmd), "K25_TEST_HOLD_TASKS='%s:3,14' %s sweep sweeps/ci-smoke.yaml --out %s/hold-ok --dry-run",
             tu_dir, tu_k25(), tu_dir);
    out = run_expect(cmd, 0);
    assert_non_null(strstr(out, "TEST-ONLY hook K25_TEST_HOLD_TASKS is active: 2 run(s)"));
    free(out);
    /* the bench's own knob: a request count after '@' or nothing */
    snprintf(cmd, sizeof(cmd), "K25_TEST_HOLD=%s/h@0 %s bench --dataset datasets/gold/ci-small.jsonl --requests 1 "
                               "--out %s/hold-bad.h5 --quiet", tu_dir, tu_k25(), tu_dir);
    out = run_expect(cmd, 2);
    assert_non_null(strstr(out, "K25_TEST_HOLD"));
    assert_non_null(strstr(out, "expected PREFIX or PREFIX@N with a request count N >= 1"));
    free(out);
}

/*
 * Resume: kill the runner (SIGKILL) while a run is in flight, three runs
 * finished; its children die with it; no partial run is kept under a
 * final name; a re-run redoes nothing that was finished and completes the
 * rest.  The run in flight is task 3, held before it measures by the
 * TEST-ONLY K25_TEST_HOLD_TASKS knob (--jobs 1: tasks 0-2 have finished
 * when it holds), so the kill lands at the same place on any machine.
 */
static void test_resume_after_kill(void **state)
{
    (void)state;
    const char *p = write_spec("r.yaml", "name: r\ndataset: datasets/gold/ci-small.jsonl\nfilter: \"input_length <= 1024\"\n"
                                         "workload: {concurrency: 1, requests: 4}\nfixed: {decode_max_tokens: 16}\n"
                                         "repeats: 2\n" OBJ "axes:\n  max_batch_size: [1, 2, 3]\n");
    char out[600], cmd[2048], hold[600], ready[700];
    snprintf(out, sizeof(out), "%s/resume", tu_dir);
    snprintf(hold, sizeof(hold), "%s/resume-hold", tu_dir);
    assert_int_equal(mkdir(hold, 0755), 0);
    snprintf(ready, sizeof(ready), "%s/task-3.ready", hold);
    snprintf(cmd, sizeof(cmd), "K25_TEST_HOLD_TASKS='%s:3' %s sweep %s --out %s --jobs 1 --quiet > %s/resume.log 2>&1 & "
                               "echo $!", hold, tu_k25(), p, out, tu_dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    pclose(f);
    /* up to 5 minutes (sanitizer builds are slow): an upper bound, the marker is the event */
    if (!tu_wait_file(ready, 300)) {
        snprintf(cmd, sizeof(cmd), "cat %s/resume.log", tu_dir);
        char *log = NULL;
        tu_run(cmd, &log);
        kill(pid, SIGKILL);
        fail_msg("task 3 never reached the hold (%s):\n%s", ready, log);
    }
    long bench = tu_read_long(ready);
    assert_true(bench > 0);
    if (kill(pid, SIGKILL) != 0)
        fail_msg("the sweep (pid %d) ended before it could be killed: %s", pid, strerror(errno));
    /* the held bench dies with the runner (SIGTERM through PR_SET_PDEATHSIG), writing nothing */
    assert_true(tu_wait_pid_gone((pid_t)bench, 60));
    /* every file under a final name is complete: each rep-K.json has its rep-K.h5 */
    snprintf(cmd, sizeof(cmd),
             "cd %s/points && for j in */rep-*.json; do h=${j%%.json}.h5; test -s $h || exit 1; done; "
             "ls */rep-*.json | wc -l",
             out);
    char *o2;
    assert_int_equal(tu_run(cmd, &o2), 0);
    int done_before = atoi(o2);
    free(o2);
    assert_int_equal(done_before, 3); /* tasks 0-2; task 3 was held, measured nothing and wrote nothing */
    /* remember the finished files' inodes and times (an interrupted run is not finished: resume redoes it) */
    snprintf(cmd, sizeof(cmd),
             "cd %s/points && for j in */rep-*.json; do jq -e '.interrupted != true' $j >/dev/null && "
             "stat -c '%%n %%i %%Y' ${j%%.json}.h5; done | sort > %s/before.txt",
             out, tu_dir);
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
    snprintf(cmd, sizeof(cmd), "find %s -name '*.tmp*'", out);
    assert_int_equal(tu_run(cmd, &o2), 0);
    if (o2[0])
        fail_msg("temporary files left after the resumed sweep completed:\n%s", o2);
    free(o2);
}

/*
 * Ctrl-C on a sweep (SIGINT to its process group, as a terminal sends it)
 * while its second run is in flight (task 1, held before it measures by
 * the TEST-ONLY K25_TEST_HOLD_TASKS knob, so the signal lands there on any
 * machine): the sweep exits 130 (a run in flight keeps what it measured,
 * marked interrupted, or writes nothing when no request had finished, as
 * here); a resumed sweep completes; a run marked interrupted is never a
 * finished point: the next resume redoes it.
 */
static void test_interrupt_sweep(void **state)
{
    (void)state;
    if (tu_quick())
        skip();
    const char *p = write_spec("int.yaml", "name: int\ndataset: datasets/gold/ci-small.jsonl\nfilter: \"input_length <= 1024\"\n"
                                           "workload: {concurrency: 1, requests: 4}\nfixed: {decode_max_tokens: 64}\n"
                                           "repeats: 1\n" OBJ "axes:\n  max_batch_size: [1, 2]\n");
    char out[600], cmd[4096], hold[600], ready[700], status[600], *o2 = NULL;
    snprintf(out, sizeof(out), "%s/intr", tu_dir);
    snprintf(hold, sizeof(hold), "%s/intr-hold", tu_dir);
    assert_int_equal(mkdir(hold, 0755), 0);
    snprintf(ready, sizeof(ready), "%s/task-1.ready", hold);
    snprintf(status, sizeof(status), "%s/intr.status", tu_dir);
    /* the inner sh leads the new session and group: $$ is the group id */
    snprintf(cmd, sizeof(cmd),
             "setsid sh -c 'echo $$ > %s/intr.pgid; K25_TEST_HOLD_TASKS=%s:1 %s sweep %s --out %s --jobs 1 --quiet; "
             "echo $? > %s.tmp && mv %s.tmp %s' > %s/intr.log 2>&1 &",
             tu_dir, hold, tu_k25(), p, out, status, status, status, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(cmd, sizeof(cmd), "%s/intr.pgid", tu_dir);
    bool held = tu_wait_file(ready, 300); /* upper bounds for a failure; the files are the events */
    long pgid = tu_read_long(cmd);
    if (held && pgid > 0)
        kill(-(pid_t)pgid, SIGINT);
    bool ended = held && tu_wait_file(status, 300);
    long st = ended ? tu_read_long(status) : -1;
    if (st != 130) {
        char *log = NULL;
        snprintf(cmd, sizeof(cmd), "cat %s/intr.log", tu_dir);
        tu_run(cmd, &log);
        if (!ended && pgid > 0)
            kill(-(pid_t)pgid, SIGKILL);
        fail_msg("k25 sweep after SIGINT: %s status %ld (want 130)\n%s", held ? "" : "never held;", st,
                 log ? log : "");
    }
    snprintf(cmd, sizeof(cmd), "grep -q 'interrupted' %s/intr.log", tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    /* resume to the end */
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), p, out);
    if (tu_run(cmd, &o2) != 0)
        fail_msg("resume failed: %s", o2);
    free(o2);
    /* a run that says it was interrupted is not finished: the next resume redoes it */
    snprintf(cmd, sizeof(cmd),
             "j=$(ls %s/points/*/rep-0.json | head -n1) && jq '.interrupted = true' $j > $j.x && mv $j.x $j && "
             "%s sweep %s --out %s --quiet && jq -s '[.[] | select(.interrupted == true)] | length' "
             "%s/points/*/rep-0.json",
             out, tu_k25(), p, out, out);
    st = tu_run(cmd, &o2);
    if (st != 0 || atoi(o2) != 0)
        fail_msg("an interrupted run was kept as finished (exit %ld):\n%s", st, o2);
    free(o2);
}

/*
 * Array tasks on a shared folder: a --task run removes only its own run's
 * leftovers (another task may be writing the rest), a local run only those
 * whose writer is dead; --merge names the runs that are missing and exits
 * 1, or merges what there is with --allow-partial and says so.
 */
static void test_tasks_and_merge(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("t.yaml", "name: t\n" EQUIV "repeats: 2\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *pts;
    struct k25_sweep_task tasks[16];
    bool sel[8];
    int n;
    assert_int_equal(k25_sweep_expand(&g_spec, &pts, &n, &err), K25_OK);
    int nt = k25_sweep_tasks(&g_spec, pts, n, NULL, sel, tasks, &err);
    assert_int_equal(nt, 6);
    char dir[800], mine[1000], other_rep[1000], other_live[1000], cmd[3000];
    snprintf(dir, sizeof(dir), "%s/tasks", tu_dir);
    /* task 0's own leftover (dead writer), the same point's other repetition (dead writer, another
     * task's business), and a live writer's temporary in another point (this test process) */
    int op = tasks[0].point == tasks[1].point ? tasks[2].point : tasks[1].point;
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/points/%s %s/points/%s", dir, pts[tasks[0].point].id, dir, pts[op].id);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(mine, sizeof(mine), "%s/points/%s/rep-%d.h5.tmp.999999999", dir, pts[tasks[0].point].id, tasks[0].rep);
    snprintf(other_rep, sizeof(other_rep), "%s/points/%s/rep-%d.h5.tmp.999999999", dir, pts[tasks[0].point].id,
             1 - tasks[0].rep);
    snprintf(other_live, sizeof(other_live), "%s/points/%s/rep-0.json.tmp.%ld", dir, pts[op].id, (long)getpid());
    tu_write_file(mine, "x");
    tu_write_file(other_rep, "x");
    tu_write_file(other_live, "x");
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --task 0 --quiet", tu_k25(), p, dir);
    free(run_expect(cmd, 0));
    assert_int_equal(access(mine, F_OK), -1);
    assert_int_equal(access(other_rep, F_OK), 0);
    assert_int_equal(access(other_live, F_OK), 0);
    /* only task 0's run exists: --merge lists the five others and exits 1 */
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --merge", tu_k25(), p, dir);
    char *out = run_expect(cmd, 1);
    for (int k = 1; k < nt; k++) {
        char want[200];
        snprintf(want, sizeof(want), "task %d: point %s", k, pts[tasks[k].point].id);
        if (!strstr(out, want))
            fail_msg("--merge does not list %s:\n%s", want, out);
    }
    assert_non_null(strstr(out, "never ran"));
    assert_non_null(strstr(out, "5 of 6 runs have no result"));
    assert_non_null(strstr(out, "--allow-partial"));
    free(out);
    char sum[900];
    snprintf(sum, sizeof(sum), "%s/summary.json", dir);
    assert_int_equal(access(sum, F_OK), -1); /* nothing merged */
    /* a local run finishes the rest: removes the dead writer's leftover, keeps the live one's */
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), p, dir);
    free(run_expect(cmd, 0));
    assert_int_equal(access(other_rep, F_OK), -1);
    assert_int_equal(access(other_live, F_OK), 0);
    unlink(other_live);
    /* a failed run: --merge points at its log; --allow-partial merges and marks the summary */
    snprintf(cmd, sizeof(cmd), "cd %s/points/%s && rm rep-1.json rep-1.h5 && echo 'k25 bench: boom' > rep-1.log", dir,
             pts[op].id);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --merge", tu_k25(), p, dir);
    out = run_expect(cmd, 1);
    assert_non_null(strstr(out, "failed or was cancelled"));
    assert_non_null(strstr(out, "k25 bench: boom"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --merge --allow-partial", tu_k25(), p, dir);
    out = run_expect(cmd, 0);
    assert_non_null(strstr(out, "partial: 1 runs missing"));
    free(out);
    assert_true(jq_true(".partial and (.missing_runs | length == 1) and .missing_runs[0].repetition == 1", sum));
    k25_sweep_points_free(pts, n);
    /* the TEST-ONLY hook refuses what it cannot read, naming itself */
    snprintf(cmd, sizeof(cmd), "K25_TEST_SLOWDOWN_POINTS='defaults' %s sweep %s --out %s --dry-run", tu_k25(), p, dir);
    out = run_expect(cmd, 2);
    assert_non_null(strstr(out, "K25_TEST_SLOWDOWN_POINTS"));
    assert_non_null(strstr(out, "SELECTOR=FACTOR"));
    free(out);
}

/*
 * Issue 32: `--dry-run` before any run estimates the time from a probe of
 * the engine and the runs' sizes: the arithmetic on a hand-made probe, and
 * the command on a fresh folder (one short probe request of the tiny model).
 */
static void test_dry_run_estimate(void **state)
{
    (void)state;
    struct k25_error err;
    const char *p = write_spec("dry.yaml", HEAD "repeats: 2\n" OBJ "model: tiny\n"
                               "axes:\n  max_batch_size: [1, 4]\n");
    assert_int_equal(k25_sweep_spec_load(p, &g_spec, &err), K25_OK);
    struct k25_sweep_point *pts;
    int n;
    assert_int_equal(k25_sweep_expand(&g_spec, &pts, &n, &err), K25_OK);
    int64_t in[2] = {100, 300}, out[2] = {10, 5000};
    struct k25_sweep_probe pr = {.load_s = 0.5, .prefill_s_per_tok = 0.001, .decode_s_per_step = 0.01,
                                 .probe_tokens = 200, .in = in, .out = out, .n = 2};
    /* 4 requests (HEAD: requests 4, no warm-up) cycle the set: prompts 100 300 100 300, replies capped */
    for (int i = 0; i < n; i++) {
        int cap = pts[i].cfg.decode_max_tokens;
        int together = pts[i].cfg.max_batch_size < 2 ? pts[i].cfg.max_batch_size : 2; /* concurrency 2 */
        double want = 0.5 + 0.8 + (2 * 10 + 2 * (5000 < cap ? 5000 : cap)) * 0.01 / together;
        double got = k25_sweep_estimate_run_s(&g_spec, &pts[i], &pr);
        if (fabs(got - want) > 1e-9)
            fail_msg("point %d: %g s, wanted %g", i, got, want);
    }
    k25_sweep_points_free(pts, n);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s/dry-out --dry-run", tu_k25(), p, tu_dir);
    char *o = run_expect(cmd, 0);
    if (!strstr(o, "estimated time: about ") || !strstr(o, "ms per prompt token") || strstr(o, "unknown"))
        fail_msg("%s", o);
    free(o);
}

/* The Slurm script: absolute quoted paths, --chdir, --only kept, no --exclusive needed. */
static void test_slurm_script(void **state)
{
    (void)state;
    char cmd[2048], script[600];
    snprintf(script, sizeof(script), "%s/sweep.sbatch", tu_dir);
    /* relative spec and output paths, an --only with a quote in it */
    snprintf(cmd, sizeof(cmd),
             "%s sweep sweeps/ci-smoke.yaml --out %s/arr --only \"prefill_chunk_size == 512 && max_batch_size != 3\" "
             "--slurm --cpus-per-task 2 > %s",
             tu_k25(), tu_dir, script);
    free(run_expect(cmd, 0));
    char *text = NULL;
    snprintf(cmd, sizeof(cmd), "cat %s", script);
    assert_int_equal(tu_run(cmd, &text), 0);
    char cwd[1024], want[2048];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(want, sizeof(want), "#SBATCH --chdir=\"%s\"\n", cwd);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "SPEC='%s/sweeps/ci-smoke.yaml'\n", cwd);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "DATASET='%s/datasets/gold/ci-small.jsonl'\n", cwd);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "OUT='/"));
    assert_non_null(strstr(text, "K25='/"));
    assert_non_null(strstr(text, "#SBATCH --array=0-8\n")); /* 2 points + the reference, 3 repetitions */
    assert_non_null(strstr(text, "#SBATCH --cpus-per-task=2\n"));
    assert_non_null(strstr(text, "--only 'prefill_chunk_size == 512 && max_batch_size != 3' --quiet\n"));
    assert_null(strstr(text, "\n#SBATCH --exclusive"));
    free(text);
    snprintf(cmd, sizeof(cmd), "bash -n %s && test -d %s/arr/slurm", script, tu_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
}

/*
 * The rate search: open-loop probes with no cap on requests in flight,
 * every probe kept, and rep-K.log / rep-K.h5 / rep-K.json per repetition.
 */
static void test_rate_search(void **state)
{
    (void)state;
    const char *p = write_spec("rs.yaml", "name: rs\ndataset: datasets/gold/ci-small.jsonl\n"
                                          "filter: \"input_length <= 1024\"\nfixed: {decode_max_tokens: 8}\n"
                                          "workload: {search: max_rate, search_slo: {ttft_p50_ms: 1000000}, rate_lo: 8,\n"
                                          "           rate_hi: 64, requests: 4}\n"
                                          "objective:\n  maximize: max_rate_rps\n");
    char cmd[2048], dir[600];
    snprintf(dir, sizeof(dir), "%s/rs", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), p, dir);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof(cmd),
             "cd %s/points/* && test -s rep-0.log && grep -q '^probe 0: 8 req/s' rep-0.log && grep -q '^max_rate_rps = 64' "
             "rep-0.log && h5dump -H rep-0.h5 >/dev/null && jq -e '.max_rate_rps == 64 and .trace_probe == 1' rep-0.json "
             ">/dev/null && jq -e '.workload.mode == \"open\" and .workload.concurrency == 0' rep-0.probe-0.json >/dev/null",
             dir);
    free(run_expect(cmd, 0));
    /* the point's config.yaml writes doubles as the shortest text that reads back (k25_fmt_double):
     * the default 0.85, not %.17g's 0.84999999999999998, and no such 17-digit figure anywhere */
    snprintf(cmd, sizeof(cmd),
             "cd %s/points/* && grep -qx 'kv_compression_ratio: 0.85' config.yaml && "
             "! grep -Eq ': -?[0-9]*\\.[0-9]{12,}' config.yaml",
             dir);
    free(run_expect(cmd, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_expand_and_ids),
        cmocka_unit_test(test_pareto_ties),
        cmocka_unit_test(test_analyze),
        cmocka_unit_test(test_leader_and_knob_effect),
        cmocka_unit_test(test_dry_run_estimate),
        cmocka_unit_test(test_slurm_script),
        cmocka_unit_test(test_ci_smoke),
        cmocka_unit_test(test_equivalent_points_no_best),
        cmocka_unit_test(test_slowed_points_real_best),
        cmocka_unit_test(test_hold_knob_errors),
        cmocka_unit_test(test_resume_after_kill),
        cmocka_unit_test(test_interrupt_sweep),
        cmocka_unit_test(test_tasks_and_merge),
        cmocka_unit_test(test_rate_search),
    };
    return cmocka_run_group_tests_name("sweep", tests, tu_group_setup, tu_group_teardown);
}
