/*
 * gate_stats.c - the statistics of `k25 gate` (docs/gates.md): the median
 * of per-cell log-ratios of the best replicates, with a hierarchical
 * bootstrap interval.
 *
 * Why this test: timing samples on a shared machine are skewed and come in
 * bursts (a neighbour's compile job slows a whole run, or a second of it,
 * by 20% to 5x), and interference only ever adds time.  So each side of a
 * cell is summarized by its best replicate - the engine's own speed
 * whenever the neighbours let it run - and the cells are pooled by their
 * median, which ignores the cells a burst spoiled on both sides' best
 * replicates.  The bootstrap needs no distributional assumption;
 * resampling groups, then replicates, then cells keeps the interval as
 * wide as run-to-run noise makes it, instead of pretending that 40
 * requests of 5 runs are 40 independent draws.
 */
#include "gate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n). */
static int draw(uint64_t *s, int n)
{
    return (int)(((splitmix(s) >> 11) * (double)n) / 9007199254740992.0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[n] (sorts v); NaN for n = 0. */
static double median(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/*
 * A side's best value of a cell over the replicates listed in pick (NULL:
 * all): the lowest time, the highest rate.  (A lower quartile was tried: on
 * 6-10 replicates its bootstrap interval doubled, and a 20% slowdown went
 * UNSURE.  A lucky run - the machine has fast moments too - can move the
 * best of a single cell, which is why per-run figures, one cell per group,
 * are report-only in the default policy; request cells pool 8+ per run.)
 */
static double side_best(const double *v, int n_cells, int j, const int *pick, int n_runs, bool lower)
{
    double t[n_runs > 0 ? n_runs : 1];
    int n = 0;
    for (int i = 0; i < n_runs; i++) {
        double u = v[(size_t)(pick ? pick[i] : i) * n_cells + j];
        if (isfinite(u) && u > 0)
            t[n++] = u;
    }
    if (n == 0)
        return NAN;
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return lower ? t[0] : t[n - 1];
}

/* log(best candidate / best baseline) - norm of cell j over the replicates listed in rb / rc (NULL: all). */
static double cell_stat(const struct k25_gate_cells *g, int j, const int *rb, const int *rc, bool lower)
{
    double x = side_best(g->b, g->n_cells, j, rb, g->n_runs, lower);
    double y = side_best(g->c, g->n_cells, j, rc, g->n_runs, lower);
    return isfinite(x) && isfinite(y) ? log(y / x) - g->norm : NAN;
}

int k25_gate_best_ratio(const struct k25_gate_cells *g, int n_groups, bool lower_better, int resamples, double conf,
                        uint64_t seed, double *est, double *lo, double *hi)
{
    *est = *lo = *hi = NAN;
    int total = 0, max_runs = 0, max_cells = 0;
    for (int k = 0; k < n_groups; k++) {
        total += g[k].n_cells;
        max_runs = g[k].n_runs > max_runs ? g[k].n_runs : max_runs;
        max_cells = g[k].n_cells > max_cells ? g[k].n_cells : max_cells;
    }
    /* a resample draws n_groups groups of up to max_cells cells */
    size_t cap = (size_t)n_groups * (size_t)max_cells + (size_t)total + 1;
    double *pool = malloc(sizeof(double) * cap);
    int *rb = malloc(sizeof(int) * (size_t)(max_runs + 1)), *rc = malloc(sizeof(int) * (size_t)(max_runs + 1));
    double *draws = malloc(sizeof(double) * (size_t)(resamples > 0 ? resamples : 1));
    int n = 0;
    if (!pool || !rb || !rc || !draws)
        goto out;
    for (int k = 0; k < n_groups; k++)
        for (int j = 0; j < g[k].n_cells; j++) {
            double d = cell_stat(&g[k], j, NULL, NULL, lower_better);
            if (isfinite(d))
                pool[n++] = d;
        }
    if (n == 0)
        goto out;
    *est = median(pool, n);
    if ((n < 2 && max_runs < 2) || resamples < 10)
        goto out;
    uint64_t s = seed;
    for (int r = 0; r < resamples; r++) {
        int m = 0;
        for (int kk = 0; kk < n_groups; kk++) {
            const struct k25_gate_cells *cs = &g[n_groups > 1 ? draw(&s, n_groups) : kk];
            for (int i = 0; i < cs->n_runs; i++) { /* each side's replicates, independently */
                rb[i] = draw(&s, cs->n_runs);
                rc[i] = draw(&s, cs->n_runs);
            }
            for (int jj = 0; jj < cs->n_cells; jj++) {
                double d = cell_stat(cs, cs->n_cells > 1 ? draw(&s, cs->n_cells) : 0, rb, rc, lower_better);
                if (isfinite(d))
                    pool[m++] = d;
            }
        }
        draws[r] = m ? median(pool, m) : *est;
    }
    qsort(draws, (size_t)resamples, sizeof(double), cmp_double);
    double a = (1 - conf) / 2;
    *lo = draws[(int)floor(a * (resamples - 1))];
    *hi = draws[(int)ceil((1 - a) * (resamples - 1))];
out:
    free(pool);
    free(rb);
    free(rc);
    free(draws);
    return n;
}
