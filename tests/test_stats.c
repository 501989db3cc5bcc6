/*
 * test_stats.c - the statistics behind every k25 bench figure: nearest-rank
 * percentiles, when a percentile is supported, order-statistic confidence
 * intervals (against a brute-force binomial reference, textbook values and
 * a coverage simulation), Student-t intervals, the open-loop schedule
 * (deterministic, asked mean rate, burstiness), the request order, SLO
 * parsing and the summary of a hand-built run; the percentile method
 * (nearest rank, and numpy's default 'linear' on vectors worked by hand)
 * and the chosen percentile list of a run.
 */
#include "testutil.h"

#include "harness.h"

#include <math.h>

/* P(Bin(n,q) <= k) by direct summation of C(n,i) q^i (1-q)^(n-i) in long double. */
static long double ref_cdf(int n, double q, int k)
{
    long double s = 0;
    for (int i = 0; i <= k; i++) {
        long double c = 1;
        for (int j = 1; j <= i; j++)
            c = c * (n - i + j) / j;
        s += c * powl(q, i) * powl(1 - q, n - i);
    }
    return s;
}

static void test_rank_and_support(void **state)
{
    (void)state;
    assert_int_equal(k25_stats_rank(10, 0.9), 9);
    assert_int_equal(k25_stats_rank(100, 0.99), 99);
    assert_int_equal(k25_stats_rank(100, 0.5), 50);
    assert_int_equal(k25_stats_rank(101, 0.5), 51);
    assert_int_equal(k25_stats_rank(1, 0.5), 1);
    assert_int_equal(k25_stats_rank(3, 0.95), 3);
    assert_false(k25_stats_supported(99, 0.99));
    assert_true(k25_stats_supported(100, 0.99));
    assert_false(k25_stats_supported(19, 0.95));
    assert_true(k25_stats_supported(20, 0.95));
    assert_false(k25_stats_supported(9, 0.90));
    assert_true(k25_stats_supported(10, 0.90));
    assert_false(k25_stats_supported(1, 0.5));
    assert_true(k25_stats_supported(2, 0.5));
    assert_false(k25_stats_supported(0, 0.5));
}

static void test_percentiles_known_values(void **state)
{
    (void)state;
    double v[100];
    for (int i = 0; i < 100; i++)
        v[i] = 100 - i; /* 100..1, unsorted */
    struct k25_dist d;
    k25_stats_describe(v, 100, &d);
    assert_float_equal(d.p[0].value, 50, 0);
    assert_float_equal(d.p[1].value, 90, 0);
    assert_float_equal(d.p[2].value, 95, 0);
    assert_float_equal(d.p[3].value, 99, 0);
    assert_float_equal(d.min, 1, 0);
    assert_float_equal(d.max, 100, 0);
    assert_float_equal(d.mean, 50.5, 1e-12);
    assert_float_equal(d.stdev, sqrt(100.0 * 101 / 12), 1e-9); /* sample sd of 1..100 */
    /* median CI of 100 samples: order statistics 40 and 61 (textbook) */
    assert_float_equal(d.p[0].ci_lo, 40, 0);
    assert_float_equal(d.p[0].ci_hi, 61, 0);
    /* P99 of 100: supported, no order statistic high enough for an upper bound */
    assert_true(d.p[3].supported);
    assert_true(isnan(d.p[3].ci_hi));

    double w[12];
    for (int i = 0; i < 12; i++)
        w[i] = i;
    k25_stats_describe(w, 12, &d);
    assert_true(d.p[1].supported);          /* P90 from 12 */
    assert_false(d.p[2].supported);         /* P95 needs 20 */
    assert_false(d.p[3].supported);         /* P99 needs 100 */
    assert_true(isnan(d.p[3].value));
    k25_stats_describe(w, 1, &d);
    assert_true(isnan(d.stdev));
    assert_false(d.p[0].supported);
    assert_float_equal(d.max, 0, 0);
    k25_stats_describe(w, 0, &d);
    assert_int_equal(d.n, 0);
    assert_true(isnan(d.mean));
}

/* The CI ranks are the tightest ones with each tail <= 2.5%, per the brute-force reference. */
static void test_quantile_ci_reference(void **state)
{
    (void)state;
    size_t lo, hi;
    double cov;
    k25_stats_quantile_ci(20, 0.5, 0.95, &lo, &hi, &cov);
    assert_int_equal(lo, 6);
    assert_int_equal(hi, 15);
    assert_float_equal(cov, 0.9586, 1e-4);
    k25_stats_quantile_ci(100, 0.5, 0.95, &lo, &hi, &cov);
    assert_int_equal(lo, 40);
    assert_int_equal(hi, 61);
    assert_float_equal(cov, 0.9648, 1e-4);
    const int ns[] = {5, 10, 37, 100, 250, 400};
    const double qs[] = {0.5, 0.9, 0.95, 0.99};
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
        for (size_t b = 0; b < 4; b++) {
            int n = ns[a];
            double q = qs[b];
            k25_stats_quantile_ci((size_t)n, q, 0.95, &lo, &hi, &cov);
            if (lo >= 1) {
                assert_true(ref_cdf(n, q, (int)lo - 1) <= 0.025L + 1e-12L);
                if ((int)lo < n)
                    assert_true(ref_cdf(n, q, (int)lo) > 0.025L); /* lo + 1 would be too far */
            } else {
                assert_true(ref_cdf(n, q, 0) > 0.025L); /* even x_(1) is not low enough */
            }
            if (hi <= (size_t)n) {
                assert_true(1 - ref_cdf(n, q, (int)hi - 1) <= 0.025L + 1e-12L);
                if (hi > 1)
                    assert_true(1 - ref_cdf(n, q, (int)hi - 2) > 0.025L);
            } else {
                assert_true(1 - ref_cdf(n, q, n - 1) > 0.025L);
            }
            if (lo >= 1 && hi <= (size_t)n) {
                assert_true(cov >= 0.95 - 1e-12);
                assert_float_equal(cov, (double)(ref_cdf(n, q, (int)hi - 1) - ref_cdf(n, q, (int)lo - 1)), 1e-9);
            }
        }
    /* P99 needs about 370 samples for a two-sided 95% interval */
    k25_stats_quantile_ci(300, 0.99, 0.95, &lo, &hi, NULL);
    assert_int_equal(hi, 301);
    k25_stats_quantile_ci(400, 0.99, 0.95, &lo, &hi, NULL);
    assert_true(hi <= 400);
}

/* The median CI covers the true median of an exponential in ~95% of samples. */
static void test_quantile_ci_coverage(void **state)
{
    (void)state;
    uint64_t s = 12345;
    int trials = 2000, covered = 0, n = 50;
    double v[50], truth = log(2.0);
    for (int t = 0; t < trials; t++) {
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            double u = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
            v[i] = -log(u);
        }
        struct k25_dist d;
        k25_stats_describe(v, (size_t)n, &d);
        covered += d.p[0].ci_lo <= truth && truth <= d.p[0].ci_hi;
    }
    double rate = (double)covered / trials;
    assert_true(rate > 0.94 && rate < 0.995); /* exact coverage for n=50 is 0.967 */
}

static void test_student_t(void **state)
{
    (void)state;
    assert_float_equal(k25_stats_t_quantile(1, 0.975), 12.7062, 1e-3);
    assert_float_equal(k25_stats_t_quantile(2, 0.975), 4.3027, 1e-3);
    assert_float_equal(k25_stats_t_quantile(4, 0.975), 2.7764, 1e-3);
    assert_float_equal(k25_stats_t_quantile(10, 0.975), 2.2281, 1e-3);
    assert_float_equal(k25_stats_t_quantile(30, 0.975), 2.0423, 1e-3);
    assert_float_equal(k25_stats_t_quantile(1000, 0.975), 1.9623, 1e-3);
    double v[] = {1, 2, 3, 4, 5, NAN}, m, lo, hi;
    int n;
    k25_stats_mean_ci(v, 6, &m, &lo, &hi, &n);
    assert_int_equal(n, 5);
    assert_float_equal(m, 3, 1e-12);
    double half = 2.7764451 * sqrt(2.5) / sqrt(5.0);
    assert_float_equal(lo, 3 - half, 1e-4);
    assert_float_equal(hi, 3 + half, 1e-4);
    k25_stats_mean_ci(v, 1, &m, &lo, &hi, &n);
    assert_true(isnan(lo) && isnan(hi));
}

static void test_schedule(void **state)
{
    (void)state;
    int64_t *a, *b;
    size_t na, nb;
    assert_int_equal(k25_loadgen_schedule(50, 1.0, 7, 20000, 0, &a, &na, NULL), K25_OK);
    assert_int_equal(k25_loadgen_schedule(50, 1.0, 7, 20000, 0, &b, &nb, NULL), K25_OK);
    assert_int_equal(na, 20000);
    assert_memory_equal(a, b, sizeof(int64_t) * na); /* same seed, same schedule */
    double rate = (double)na / ((double)a[na - 1] / 1e9);
    assert_true(fabs(rate - 50) / 50 < 0.03);
    /* exponential gaps: coefficient of variation 1 */
    double m = 0, m2 = 0;
    for (size_t i = 1; i < na; i++)
        m += (double)(a[i] - a[i - 1]);
    m /= (double)(na - 1);
    for (size_t i = 1; i < na; i++)
        m2 += pow((double)(a[i] - a[i - 1]) - m, 2);
    double cv = sqrt(m2 / (double)(na - 2)) / m;
    assert_true(fabs(cv - 1.0) < 0.05);
    for (size_t i = 1; i < na; i++)
        assert_true(a[i] >= a[i - 1]);
    free(b);
    assert_int_equal(k25_loadgen_schedule(50, 1.0, 8, 20000, 0, &b, &nb, NULL), K25_OK);
    assert_true(memcmp(a, b, sizeof(int64_t) * 100) != 0); /* another seed differs */
    free(a);
    free(b);
    /* burstiness 0.25: gamma shape 0.25, same mean rate, CV 2 */
    assert_int_equal(k25_loadgen_schedule(20, 0.25, 3, 40000, 0, &a, &na, NULL), K25_OK);
    rate = (double)na / ((double)a[na - 1] / 1e9);
    assert_true(fabs(rate - 20) / 20 < 0.05);
    m = m2 = 0;
    for (size_t i = 1; i < na; i++)
        m += (double)(a[i] - a[i - 1]);
    m /= (double)(na - 1);
    for (size_t i = 1; i < na; i++)
        m2 += pow((double)(a[i] - a[i - 1]) - m, 2);
    cv = sqrt(m2 / (double)(na - 2)) / m;
    assert_true(fabs(cv - 2.0) < 0.15);
    free(a);
    /* duration mode: every arrival before the end, about rate * duration of them */
    assert_int_equal(k25_loadgen_schedule(100, 1.0, 1, 0, 60000000000LL, &a, &na, NULL), K25_OK);
    assert_true(na > 5700 && na < 6300);
    assert_true(a[na - 1] < 60000000000LL);
    free(a);
    struct k25_error err;
    assert_int_equal(k25_loadgen_schedule(0, 1.0, 1, 10, 0, &a, &na, &err), K25_EINVAL);
}

static void test_order(void **state)
{
    (void)state;
    size_t *a = k25_loadgen_order(50, 9), *b = k25_loadgen_order(50, 9), *c = k25_loadgen_order(50, 10);
    assert_memory_equal(a, b, sizeof(size_t) * 50);
    assert_true(memcmp(a, c, sizeof(size_t) * 50) != 0);
    int seen[50] = {0};
    for (int i = 0; i < 50; i++)
        seen[a[i]]++;
    for (int i = 0; i < 50; i++)
        assert_int_equal(seen[i], 1);
    free(a);
    free(b);
    free(c);
}

static void test_slo_parse(void **state)
{
    (void)state;
    struct k25_bench_slo s;
    struct k25_error err;
    assert_int_equal(k25_bench_slo_parse("ttft_ms=500,tpot_ms=50", &s, &err), K25_OK);
    assert_float_equal(s.ttft_ms, 500, 0);
    assert_float_equal(s.tpot_ms, 50, 0);
    assert_true(s.any);
    assert_int_equal(k25_bench_slo_parse("ttft=500", &s, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "unknown objective 'ttft'"));
    assert_int_equal(k25_bench_slo_parse("ttft_ms=-1", &s, &err), K25_EINVAL);
    assert_int_equal(k25_bench_slo_parse("ttft_ms", &s, &err), K25_EINVAL);
    assert_int_equal(k25_bench_slo_parse("", &s, &err), K25_EINVAL);
}

/* A hand-built run: every summary figure against arithmetic done here. */
static void test_summary_of_known_run(void **state)
{
    (void)state;
    struct k25_bench_run run = {0};
    enum { N = 4 };
    run.reqs = calloc(N, sizeof(*run.reqs));
    run.n_reqs = N;
    run.n_reps = 1;
    run.rep_start_ns[0] = 0;
    const int64_t MS = 1000000;
    for (int i = 0; i < N; i++) {
        struct k25_bench_req *q = &run.reqs[i];
        q->state = K25_REQ_COMPLETED;
        q->arrival_ns = i * 100 * MS;
        q->submit_ns = q->arrival_ns + 1 * MS;         /* lag 1 ms */
        q->admit_ns = q->arrival_ns + (i + 2) * MS;    /* queue 2..5 ms */
        q->n_input = 10;
        q->n_output = 3;
        q->token_ns = malloc(sizeof(int64_t) * 3);
        q->token_ids = calloc(3, sizeof(int32_t));
        q->token_ns[0] = q->arrival_ns + (10 + 10 * i) * MS; /* TTFT 10, 20, 30, 40 */
        q->token_ns[1] = q->token_ns[0] + 4 * MS;
        q->token_ns[2] = q->token_ns[1] + 6 * MS;            /* TPOT 5, ITL 4 and 6 */
        q->first_ns = q->token_ns[0];
        q->finish_ns = q->token_ns[2];
    }
    run.rep_end_ns[0] = run.reqs[N - 1].finish_ns; /* 300 + 40 + 10 = 350 ms */
    run.output_tokens = 3 * N;
    run.ov.harness_ns = 12000; /* 12 us */
    struct k25_bench_slo slo = {.ttft_ms = 25, .any = true};
    struct k25_bench_summary s;
    assert_int_equal(k25_bench_summarize(&run, &slo, &s, NULL), K25_OK);
    assert_int_equal(s.n_completed, 4);
    assert_float_equal(s.duration_s, 0.350, 1e-12);
    assert_float_equal(s.requests_per_s, 4 / 0.350, 1e-9);
    assert_float_equal(s.output_tok_per_s, 12 / 0.350, 1e-9);
    assert_int_equal(s.n_slo_ok, 2); /* TTFT 10 and 20 meet 25 ms */
    assert_float_equal(s.goodput_rps, 2 / 0.350, 1e-9);
    assert_float_equal(s.d[K25_M_TTFT].mean, 25, 1e-9);
    assert_float_equal(s.d[K25_M_TTFT].p[0].value, 20, 1e-9); /* nearest rank: x_(2) of 4 */
    assert_false(s.d[K25_M_TTFT].p[3].supported);
    assert_float_equal(s.d[K25_M_TPOT].mean, 5, 1e-9);
    assert_int_equal(s.d[K25_M_ITL].n, 8);
    assert_float_equal(s.d[K25_M_ITL].mean, 5, 1e-9);
    assert_float_equal(s.d[K25_M_ITL].min, 4, 1e-9);
    assert_float_equal(s.d[K25_M_E2E].max, 50, 1e-9); /* TTFT 40 + 4 + 6 */
    assert_float_equal(s.d[K25_M_QUEUE].mean, 3.5, 1e-9);
    assert_float_equal(s.d[K25_M_LAG].mean, 1, 1e-9);
    assert_float_equal(s.overhead_per_request_us, 3, 1e-9);
    assert_float_equal(s.overhead_per_token_us, 1, 1e-9);
    assert_true(isnan(s.head_lo[K25_H_OUT_TPS])); /* one repetition: no interval */
    struct k25_bench_slo none = {0};
    assert_int_equal(k25_bench_summarize(&run, &none, &s, NULL), K25_OK);
    assert_true(isnan(s.goodput_rps));
    k25_bench_run_free(&run);
}


/*
 * numpy.percentile(x, 100 q) with the default method='linear' (Hyndman &
 * Fan type 7): h = (n - 1) q on 0-based sorted ranks, x[floor h] +
 * (h - floor h) (x[floor h + 1] - x[floor h]).  Each expected value below is
 * that formula worked by hand (and what numpy prints for it).
 */
static void test_linear_matches_numpy(void **state)
{
    (void)state;
    const double a[] = {1, 2, 3, 4};
    /* q .5: h 1.5 -> 2 + .5 = 2.5; q .9: h 2.7 -> 3 + .7 = 3.7; q .25: h .75 -> 1.75 */
    assert_float_equal(k25_stats_quantile(a, 4, 0.5, K25_PCTL_LINEAR), 2.5, 1e-12);
    assert_float_equal(k25_stats_quantile(a, 4, 0.9, K25_PCTL_LINEAR), 3.7, 1e-12);
    assert_float_equal(k25_stats_quantile(a, 4, 0.25, K25_PCTL_LINEAR), 1.75, 1e-12);
    assert_float_equal(k25_stats_quantile(a, 4, 0.5, K25_PCTL_NEAREST_RANK), 2, 0); /* x_(ceil 2) */
    const double b[] = {15, 20, 35, 40, 50};
    /* np.percentile([15,20,35,40,50], [40, 50, 90, 99]) = [29, 35, 46, 49.6]:
     * h 1.6 -> 20 + .6*15; h 2 -> 35; h 3.6 -> 40 + .6*10; h 3.96 -> 40 + .96*10 */
    assert_float_equal(k25_stats_quantile(b, 5, 0.40, K25_PCTL_LINEAR), 29, 1e-12);
    assert_float_equal(k25_stats_quantile(b, 5, 0.50, K25_PCTL_LINEAR), 35, 1e-12);
    assert_float_equal(k25_stats_quantile(b, 5, 0.90, K25_PCTL_LINEAR), 46, 1e-12);
    assert_float_equal(k25_stats_quantile(b, 5, 0.99, K25_PCTL_LINEAR), 49.6, 1e-12);
    assert_float_equal(k25_stats_quantile(b, 5, 0.40, K25_PCTL_NEAREST_RANK), 20, 0); /* x_(2) */
    double c[100];
    for (int i = 0; i < 100; i++)
        c[i] = i + 1; /* 1..100 */
    /* np.percentile(np.arange(1, 101), [50, 90, 95, 99, 99.9]) = [50.5, 90.1, 95.05, 99.01, 99.901] */
    assert_float_equal(k25_stats_quantile(c, 100, 0.50, K25_PCTL_LINEAR), 50.5, 1e-9);
    assert_float_equal(k25_stats_quantile(c, 100, 0.90, K25_PCTL_LINEAR), 90.1, 1e-9);
    assert_float_equal(k25_stats_quantile(c, 100, 0.95, K25_PCTL_LINEAR), 95.05, 1e-9);
    assert_float_equal(k25_stats_quantile(c, 100, 0.99, K25_PCTL_LINEAR), 99.01, 1e-9);
    assert_float_equal(k25_stats_quantile(c, 100, 0.999, K25_PCTL_LINEAR), 99.901, 1e-9);
    assert_float_equal(k25_stats_quantile(c, 100, 0.99, K25_PCTL_NEAREST_RANK), 99, 0);
    /* one sample: every quantile is it; ties stay exact; none: NaN */
    const double one[] = {7.25}, tie[] = {2, 2, 2};
    assert_float_equal(k25_stats_quantile(one, 1, 0.99, K25_PCTL_LINEAR), 7.25, 0);
    assert_true(k25_stats_quantile(tie, 3, 0.3, K25_PCTL_LINEAR) == 2.0);
    assert_true(isnan(k25_stats_quantile(NULL, 0, 0.5, K25_PCTL_LINEAR)));

    /* describe: same moments and intervals, the percentile read by the method */
    double v1[100], v2[100];
    for (int i = 0; i < 100; i++)
        v1[i] = v2[i] = 100 - i; /* unsorted: describe sorts */
    struct k25_dist nr, li;
    k25_stats_describe(v1, 100, &nr);
    k25_stats_describe_method(v2, 100, K25_PCTL_LINEAR, &li);
    assert_float_equal(nr.p[0].value, 50, 0);
    assert_float_equal(li.p[0].value, 50.5, 1e-9);
    assert_float_equal(li.p[3].value, 99.01, 1e-9);
    assert_float_equal(li.mean, nr.mean, 0);
    assert_float_equal(li.p[3].ci_lo, nr.p[3].ci_lo, 0);
    assert_float_equal(li.p[3].ci_hi, nr.p[3].ci_hi, 0);
    /* the support rule is the method's too: P99 of 99 samples is not reported */
    k25_stats_describe_method(v2, 99, K25_PCTL_LINEAR, &li);
    assert_false(li.p[3].supported);
    assert_true(isnan(li.p[3].value));
}

static void test_pctl_spec_parse(void **state)
{
    (void)state;
    struct k25_pctl_spec s;
    struct k25_error err;
    k25_pctl_spec_init(&s);
    assert_int_equal(s.method, K25_PCTL_NEAREST_RANK); /* today's behaviour is the default */
    assert_int_equal(s.n_q, 4);
    assert_float_equal(s.q[3], 0.99, 0);
    assert_int_equal(s.n_metrics, K25_M_NMETRICS);
    enum k25_pctl_method m;
    assert_int_equal(k25_pctl_method_parse("linear", &m, &err), 0);
    assert_int_equal(m, K25_PCTL_LINEAR);
    assert_int_equal(k25_pctl_method_parse("nearest-rank", &m, &err), 0);
    assert_int_equal(m, K25_PCTL_NEAREST_RANK);
    assert_int_equal(k25_pctl_method_parse("midpoint", &m, &err), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--percentile-method': unknown choice 'midpoint' (nearest-rank, linear)");
    assert_string_equal(k25_pctl_method_name(K25_PCTL_LINEAR), "linear");

    assert_int_equal(k25_pctl_spec_parse_list(&s, "99,50,99.9,99", &err), 0); /* sorted, once each */
    assert_int_equal(s.n_q, 3);
    assert_float_equal(s.q[0], 0.50, 1e-15);
    assert_float_equal(s.q[1], 0.99, 1e-15);
    assert_float_equal(s.q[2], 0.999, 1e-15);
    char lab[32];
    k25_pctl_label(s.q[2], lab, sizeof(lab));
    assert_string_equal(lab, "p99.9");
    k25_pctl_label(s.q[0], lab, sizeof(lab));
    assert_string_equal(lab, "p50");
    const char *bad[] = {"", "0", "100", "abc", "50,", "50;90", "-5", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (k25_pctl_spec_parse_list(&s, bad[i], &err) != K25_EINVAL)
            fail_msg("--metric-percentiles '%s' accepted", bad[i]);
        assert_non_null(strstr(err.msg, "'--metric-percentiles'"));
    }
    assert_int_equal(s.n_q, 3); /* unchanged by the failures */

    assert_int_equal(k25_pctl_spec_parse_metrics(&s, "ttft,tpot,itl,e2el", &err), 0);
    assert_int_equal(s.n_metrics, 4);
    assert_int_equal(s.metric[0], K25_M_TTFT);
    assert_int_equal(s.metric[3], K25_M_E2E);
    assert_int_equal(k25_pctl_spec_parse_metrics(&s, "queue_ms,e2e_ms,e2el", &err), 0);
    assert_int_equal(s.n_metrics, 2);
    assert_int_equal(k25_pctl_spec_parse_metrics(&s, "ttft,goodput", &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "unknown metric 'goodput'"));
}

/* Four requests: TTFT 10, 20, 30, 40 ms; three tokens each, ITL 4 and 6 ms. */
static void known_run(struct k25_bench_run *run)
{
    memset(run, 0, sizeof(*run));
    enum { N = 4 };
    const int64_t MS = 1000000;
    run->reqs = calloc(N, sizeof(*run->reqs));
    run->n_reqs = N;
    run->n_reps = 1;
    for (int i = 0; i < N; i++) {
        struct k25_bench_req *q = &run->reqs[i];
        q->state = K25_REQ_COMPLETED;
        q->arrival_ns = i * 100 * MS;
        q->submit_ns = q->arrival_ns + MS;
        q->admit_ns = q->arrival_ns + 2 * MS;
        q->n_input = 10;
        q->n_output = 3;
        q->token_ns = malloc(sizeof(int64_t) * 3);
        q->token_ids = calloc(3, sizeof(int32_t));
        q->token_ns[0] = q->arrival_ns + (10 + 10 * i) * MS;
        q->token_ns[1] = q->token_ns[0] + 4 * MS;
        q->token_ns[2] = q->token_ns[1] + 6 * MS;
        q->first_ns = q->token_ns[0];
        q->finish_ns = q->token_ns[2];
    }
    run->rep_end_ns[0] = run->reqs[N - 1].finish_ns;
    run->output_tokens = 3 * N;
}

static void test_run_percentiles(void **state)
{
    (void)state;
    struct k25_bench_run run;
    known_run(&run);
    struct k25_pctl_spec sp;
    struct k25_error err;
    k25_pctl_spec_init(&sp);
    assert_int_equal(k25_pctl_spec_parse_list(&sp, "50,75,90", &err), 0);
    assert_int_equal(k25_pctl_spec_parse_metrics(&sp, "ttft,itl", &err), 0);
    struct k25_pctl_table t;
    assert_int_equal(k25_bench_percentiles(&run, &sp, &t, &err), 0);
    /* nearest rank: TTFT [10,20,30,40] P50 = x_(2) = 20, P75 = x_(3) = 30, P90 unsupported (n < 10);
     * ITL [4,4,4,4,6,6,6,6]: P50 = x_(4) = 4, P75 = x_(6) = 6 */
    assert_int_equal(t.row[0].n, 4);
    assert_float_equal(t.row[0].value[0], 20, 0);
    assert_float_equal(t.row[0].value[1], 30, 0);
    assert_true(isnan(t.row[0].value[2]));
    assert_int_equal(t.row[1].n, 8);
    assert_float_equal(t.row[1].value[0], 4, 0);
    assert_float_equal(t.row[1].value[1], 6, 0);
    /* linear (numpy): TTFT P50 h 1.5 -> 25, P75 h 2.25 -> 32.5; ITL P50 h 3.5 -> 5, P75 h 5.25 -> 6 */
    sp.method = K25_PCTL_LINEAR;
    assert_int_equal(k25_bench_percentiles(&run, &sp, &t, &err), 0);
    assert_float_equal(t.row[0].value[0], 25, 1e-9);
    assert_float_equal(t.row[0].value[1], 32.5, 1e-9);
    assert_float_equal(t.row[1].value[0], 5, 1e-9);
    assert_float_equal(t.row[1].value[1], 6, 1e-9);
    /* the JSON says which method, and null for the unsupported one */
    json_t *j = k25_pctl_table_json(&t);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "method")), "linear");
    assert_int_equal(json_array_size(json_object_get(j, "percentiles")), 3);
    assert_float_equal(json_real_value(json_object_get(json_object_get(j, "ttft_ms"), "p50")), 25, 1e-9);
    assert_true(json_is_null(json_object_get(json_object_get(j, "ttft_ms"), "p90")));
    assert_null(json_object_get(j, "e2e_ms")); /* not chosen */
    json_decref(j);
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    k25_pctl_table_print(f, &t);
    fclose(f);
    assert_non_null(strstr(txt, "percentiles (linear interpolation, as numpy's default):"));
    assert_non_null(strstr(txt, "P75"));
    assert_non_null(strstr(txt, "n/a*"));
    free(txt);
    /* the whole summary by method: the default stays nearest rank */
    struct k25_bench_slo none = {0};
    struct k25_bench_summary s;
    assert_int_equal(k25_bench_summarize_method(&run, &none, K25_PCTL_LINEAR, &s, &err), 0);
    assert_float_equal(s.d[K25_M_TTFT].p[0].value, 25, 1e-9);
    assert_float_equal(s.head[0][K25_H_TTFT_P50], 25, 1e-9);
    assert_int_equal(k25_bench_summarize(&run, &none, &s, &err), 0);
    assert_float_equal(s.d[K25_M_TTFT].p[0].value, 20, 0);
    k25_bench_run_free(&run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_and_support),
        cmocka_unit_test(test_percentiles_known_values),
        cmocka_unit_test(test_quantile_ci_reference),
        cmocka_unit_test(test_quantile_ci_coverage),
        cmocka_unit_test(test_student_t),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_slo_parse),
        cmocka_unit_test(test_summary_of_known_run),
        cmocka_unit_test(test_linear_matches_numpy),
        cmocka_unit_test(test_pctl_spec_parse),
        cmocka_unit_test(test_run_percentiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
