/*
 * stats.c - the statistics every k25 bench figure goes through.
 *
 * Percentiles: nearest rank, exact over all samples.  P_q of n sorted
 * samples x_(1) <= ... <= x_(n) is x_(k) with k = ceil(q n): always a
 * value that was observed, no interpolation.  A percentile is "supported"
 * when n (1 - q) >= 1, i.e. at least one sample is expected above it
 * (P50 from 2 samples, P90 from 10, P95 from 20, P99 from 100); otherwise
 * it is reported as unsupported (NaN here, null in JSON) rather than as
 * the maximum in disguise.
 *
 * The method is selectable (k25_stats_quantile): nearest rank as above,
 * or linear interpolation between order statistics, numpy's default
 * (h = (n - 1) q, x_(floor h) + frac(h) (x_(floor h + 1) - x_(floor h)),
 * 0-based), so figures can be compared with numpy-based tools.  The
 * support rule and the confidence intervals are the same for both.
 *
 * Confidence intervals of a percentile are distribution-free: the number
 * of samples below the true quantile xi_q is Binomial(n, q), so
 * [x_(l), x_(u)] covers xi_q with probability P(l <= B < u) whatever the
 * distribution (for continuous ones; ties only widen it).  l and u are
 * picked so each tail is at most (1 - conf) / 2.
 *
 * Repetitions: mean of the per-repetition figures with a Student-t
 * interval, mean +- t(0.975, K-1) s / sqrt(K).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const double k25_pctl_q[K25_NPCTL] = {0.50, 0.90, 0.95, 0.99};

size_t k25_stats_rank(size_t n, double q)
{
    if (n == 0)
        return 0;
    /* ceil(q n), guarded against q n being a hair above an integer */
    double x = q * (double)n;
    size_t k = (size_t)ceil(x - 1e-9 * (x > 1 ? x : 1));
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return k;
}

bool k25_stats_supported(size_t n, double q)
{
    if (n == 0 || q >= 1.0)
        return false;
    return (double)n * (1.0 - q) >= 1.0 - 1e-9;
}

/* log P(Bin(n, q) = i) */
static double log_binom_pmf(size_t n, size_t i, double q)
{
    return lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) +
           (double)i * log(q) + (double)(n - i) * log1p(-q);
}

void k25_stats_quantile_ci(size_t n, double q, double conf, size_t *lo, size_t *hi, double *coverage)
{
    double a2 = (1.0 - conf) / 2.0;
    *lo = 0;
    *hi = n + 1;
    if (coverage)
        *coverage = NAN;
    if (n == 0 || q <= 0 || q >= 1)
        return;
    /* cdf[i] = P(B <= i), summed in linear space (terms below 1e-300 vanish harmlessly) */
    double *cdf = malloc(sizeof(double) * n + sizeof(double));
    if (!cdf)
        return;
    double acc = 0;
    for (size_t i = 0; i <= n; i++) {
        acc += exp(log_binom_pmf(n, i, q));
        cdf[i] = acc > 1.0 ? 1.0 : acc;
    }
    /* lower: largest l >= 1 with P(B <= l-1) <= a2 */
    for (size_t l = 1; l <= n; l++) {
        if (cdf[l - 1] <= a2)
            *lo = l;
        else
            break;
    }
    /* upper: smallest u <= n with P(B >= u) = 1 - P(B <= u-1) <= a2 */
    for (size_t u = n; u >= 1; u--) {
        if (1.0 - cdf[u - 1] <= a2)
            *hi = u;
        else
            break;
    }
    if (coverage && *lo >= 1 && *hi <= n)
        *coverage = cdf[*hi - 1] - cdf[*lo - 1]; /* P(lo <= B <= hi - 1) */
    free(cdf);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

const char *k25_pctl_method_name(enum k25_pctl_method m)
{
    return m == K25_PCTL_LINEAR ? "linear" : "nearest-rank";
}

int k25_pctl_method_parse(const char *s, enum k25_pctl_method *out, struct k25_error *err)
{
    if (!strcmp(s, "nearest-rank") || !strcmp(s, "nearest_rank"))
        *out = K25_PCTL_NEAREST_RANK;
    else if (!strcmp(s, "linear"))
        *out = K25_PCTL_LINEAR;
    else
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--percentile-method",
                             "unknown choice '%s' (nearest-rank, linear)", s);
    return K25_OK;
}

double k25_stats_quantile(const double *sorted, size_t n, double q, enum k25_pctl_method m)
{
    if (n == 0)
        return NAN;
    if (m == K25_PCTL_NEAREST_RANK)
        return sorted[k25_stats_rank(n, q) - 1];
    /* numpy 'linear': h = (n - 1) q on 0-based ranks, interpolate between floor(h) and floor(h) + 1 */
    double h = (double)(n - 1) * q;
    if (h <= 0)
        return sorted[0];
    size_t lo = (size_t)floor(h);
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = h - (double)lo;
    /* a + frac (b - a), written so equal neighbours give exactly their value */
    return frac == 0 ? sorted[lo] : sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

void k25_pctl_spec_init(struct k25_pctl_spec *s)
{
    memset(s, 0, sizeof(*s));
    s->method = K25_PCTL_NEAREST_RANK;
    s->n_q = K25_NPCTL;
    for (int i = 0; i < K25_NPCTL; i++)
        s->q[i] = k25_pctl_q[i];
    s->n_metrics = K25_M_NMETRICS;
    for (int m = 0; m < K25_M_NMETRICS; m++)
        s->metric[m] = m;
}

int k25_pctl_spec_parse_list(struct k25_pctl_spec *s, const char *list, struct k25_error *err)
{
    double q[K25_PCTL_MAX];
    int n = 0;
    const char *p = list;
    for (;;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(v > 0 && v < 100) || n == K25_PCTL_MAX)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--metric-percentiles",
                                 "expected up to %d comma-separated percentiles in (0, 100), e.g. 50,90,99; "
                                 "bad item at column %d of \"%s\"",
                                 K25_PCTL_MAX, (int)(p - list) + 1, list);
        /* insert sorted; a repeated percentile is kept once */
        double x = v / 100.0;
        int at = 0;
        while (at < n && q[at] < x)
            at++;
        if (!(at < n && q[at] == x)) {
            memmove(q + at + 1, q + at, sizeof(double) * (size_t)(n - at));
            q[at] = x;
            n++;
        }
        if (!*end)
            break;
        p = end + 1;
    }
    s->n_q = n;
    memcpy(s->q, q, sizeof(double) * (size_t)n);
    return K25_OK;
}

int k25_pctl_spec_parse_metrics(struct k25_pctl_spec *s, const char *list, struct k25_error *err)
{
    /* vLLM's names first, then k25's own (k25_metric_names) */
    static const struct {
        const char *name;
        int metric;
    } alias[] = {{"ttft", K25_M_TTFT}, {"tpot", K25_M_TPOT}, {"itl", K25_M_ITL},       {"e2el", K25_M_E2E},
                 {"e2e", K25_M_E2E},   {"queue", K25_M_QUEUE}, {"sched_lag", K25_M_LAG}};
    int metric[K25_PCTL_MAX_METRICS], n = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int m = -1;
        for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]) && m < 0; i++)
            if (!strcmp(tok, alias[i].name))
                m = alias[i].metric;
        for (int i = 0; i < K25_M_NMETRICS && m < 0; i++)
            if (!strcmp(tok, k25_metric_names[i]))
                m = i;
        if (m < 0)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--percentile-metrics",
                                 "unknown metric '%s' (ttft, tpot, itl, e2el, queue, sched_lag, or ttft_ms, "
                                 "tpot_ms, itl_ms, e2e_ms, queue_ms, sched_lag_ms)",
                                 tok);
        bool dup = false;
        for (int i = 0; i < n; i++)
            dup |= metric[i] == m;
        if (!dup && n < K25_PCTL_MAX_METRICS)
            metric[n++] = m;
    }
    if (n == 0)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--percentile-metrics", "empty list");
    s->n_metrics = n;
    memcpy(s->metric, metric, sizeof(int) * (size_t)n);
    return K25_OK;
}

void k25_pctl_label(double q, char *buf, size_t n)
{
    /* shortest decimal that reads back: p50, p99.9, p99.99 */
    snprintf(buf, n, "p%.10g", q * 100.0);
    char tmp[32];
    for (int d = 0; d <= 6; d++) {
        snprintf(tmp, sizeof(tmp), "%.*f", d, q * 100.0);
        if (fabs(strtod(tmp, NULL) - q * 100.0) < 1e-9) {
            snprintf(buf, n, "p%s", tmp);
            return;
        }
    }
}

void k25_stats_describe(double *v, size_t n, struct k25_dist *out)
{
    k25_stats_describe_method(v, n, K25_PCTL_NEAREST_RANK, out);
}

void k25_stats_describe_method(double *v, size_t n, enum k25_pctl_method method, struct k25_dist *out)
{
    memset(out, 0, sizeof(*out));
    out->n = (int64_t)n;
    out->mean = out->stdev = out->min = out->max = NAN;
    for (int i = 0; i < K25_NPCTL; i++) {
        struct k25_pctl *p = &out->p[i];
        p->q = k25_pctl_q[i];
        p->value = p->ci_lo = p->ci_hi = p->coverage = NAN;
        p->supported = false;
    }
    if (n == 0)
        return;
    qsort(v, n, sizeof(double), cmp_double);
    /* mean and variance by Welford's update (stable for large n) */
    double mean = 0, m2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = v[i] - mean;
        mean += d / (double)(i + 1);
        m2 += d * (v[i] - mean);
    }
    out->mean = mean;
    out->stdev = n >= 2 ? sqrt(m2 / (double)(n - 1)) : NAN;
    out->min = v[0];
    out->max = v[n - 1];
    for (int i = 0; i < K25_NPCTL; i++) {
        struct k25_pctl *p = &out->p[i];
        if (!k25_stats_supported(n, p->q))
            continue;
        p->supported = true;
        p->value = k25_stats_quantile(v, n, p->q, method);
        size_t lo, hi;
        k25_stats_quantile_ci(n, p->q, 0.95, &lo, &hi, &p->coverage);
        p->ci_lo = lo >= 1 ? v[lo - 1] : NAN;
        p->ci_hi = hi <= n ? v[hi - 1] : NAN;
    }
}

/* Inverse of the standard normal CDF (Acklam's rational approximation, |err| < 1.2e-9). */
static double norm_quantile(double p)
{
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                               1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    double q, r;
    if (p < 0.02425) {
        q = sqrt(-2 * log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - 0.02425) {
        q = sqrt(-2 * log1p(-p));
        return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    q = p - 0.5;
    r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/* Regularized incomplete beta I_x(a, b) by Lentz's continued fraction. */
static double betacf(double a, double b, double x)
{
    const double tiny = 1e-300;
    double qab = a + b, qap = a + 1, qam = a - 1, c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny)
        d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 300; m++) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1 + aa * d;
        c = 1 + aa / c;
        if (fabs(d) < tiny)
            d = tiny;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1 + aa * d;
        c = 1 + aa / c;
        if (fabs(d) < tiny)
            d = tiny;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return h;
}

static double inc_beta(double a, double b, double x)
{
    if (x <= 0)
        return 0;
    if (x >= 1)
        return 1;
    double bt = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1) / (a + b + 2))
        return bt * betacf(a, b, x) / a;
    return 1 - bt * betacf(b, a, 1 - x) / b;
}

/* P(T_df <= t) for t >= 0. */
static double t_cdf(double t, int df)
{
    double x = df / (df + t * t);
    return 1 - 0.5 * inc_beta(df / 2.0, 0.5, x);
}

double k25_stats_t_quantile(int df, double p)
{
    K25_ASSERT(df >= 1 && p > 0.5 && p < 1);
    /* Newton on the exact CDF from the normal quantile (bisection guard) */
    double lo = 0, hi = 1e4, t = norm_quantile(p);
    if (df == 1)
        return tan(M_PI * (p - 0.5));
    for (int it = 0; it < 200; it++) {
        double f = t_cdf(t, df) - p;
        if (f > 0)
            hi = t;
        else
            lo = t;
        double dens = exp(lgamma((df + 1) / 2.0) - lgamma(df / 2.0)) / sqrt(df * M_PI) *
                      pow(1 + t * t / df, -(df + 1) / 2.0);
        double nt = t - f / dens;
        if (!(nt > lo && nt < hi))
            nt = (lo + hi) / 2;
        if (fabs(nt - t) < 1e-12 * (1 + t))
            return nt;
        t = nt;
    }
    return t;
}

void k25_stats_mean_ci(const double *v, size_t n, double *mean, double *lo, double *hi, int *n_used)
{
    double s = 0, m2 = 0, m = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(v[i]))
            continue;
        k++;
        double d = v[i] - m;
        m += d / (double)k;
        m2 += d * (v[i] - m);
        s += v[i];
    }
    (void)s;
    *n_used = (int)k;
    *mean = k ? m : NAN;
    *lo = *hi = NAN;
    if (k >= 2) {
        double se = sqrt(m2 / (double)(k - 1)) / sqrt((double)k);
        double t = k25_stats_t_quantile((int)k - 1, 0.975);
        *lo = m - t * se;
        *hi = m + t * se;
    }
}
