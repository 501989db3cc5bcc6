/*
 * calib.c - the calibration workload: how fast was this machine while
 * the benchmark ran?
 *
 * `k25 bench` times it a few times before the warm-up and after the last
 * repetition and stores the trials in the run's provenance
 * (`provenance.calibration`, in the JSON summary and the trace's /meta).
 * `k25 gate` divides timing metrics by its median, so the comparison is of
 * "engine time per unit of machine speed": a machine (or a moment on a
 * shared machine) that is uniformly slower moves both and cancels out.
 *
 * The work resembles the engine's: a dense single-precision matrix product
 * (the GEMMs) and a streaming pass over a buffer larger than the L2 (the
 * KV reads), on every engine thread, with a fixed amount of work per
 * thread.  It lives in the harness so that no engine change can move it.
 * Version 1; changing the workload changes its version, and the gate
 * refuses to normalize across versions.
 */
#include "harness.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CAL_VERSION 1
#define CAL_N 128                 /* matrix size */
#define CAL_STREAM (1 << 19)      /* floats per thread in the streaming pass (2 MiB) */

/* C += A B for n x n row-major matrices, i-k-j order (vectorizes on j). */
static void matmul(const float *a, const float *b, float *c, int n)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            float aik = a[i * n + k];
            for (int j = 0; j < n; j++)
                c[i * n + j] += aik * b[k * n + j];
        }
}

/* One thread's share of one trial; returns a checksum so nothing is optimized away. */
static double work(float *buf)
{
    float *a = buf, *b = a + CAL_N * CAL_N, *c = b + CAL_N * CAL_N, *s = c + CAL_N * CAL_N;
    for (int i = 0; i < CAL_N * CAL_N; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
        c[i] = 0;
    }
    for (int r = 0; r < 4; r++)
        matmul(a, b, c, CAL_N);
    double sum = 0;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < CAL_STREAM; i++) {
            s[i] = s[i] * 0.5f + 1.0f;
            sum += s[i];
        }
    return sum + c[CAL_N + 1];
}

void k25_calib_measure(struct k25_calib *c, int trials)
{
    int nt = k25_get_threads();
    if (nt < 1)
        nt = 1;
    size_t per = (size_t)3 * CAL_N * CAL_N + CAL_STREAM;
    float *buf = calloc(per * (size_t)nt, sizeof(float));
    if (!buf)
        return; /* no calibration: the gate compares that run without normalizing */
    c->threads = nt;
    volatile double sink = 0;
    for (int t = -1; t < trials && c->n < K25_CALIB_MAX; t++) {
        uint64_t t0 = k25_now_ns();
        double acc = 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(+ : acc)
        for (int i = 0; i < nt; i++)
            acc += work(buf + per * (size_t)i);
        uint64_t t1 = k25_now_ns();
        sink += acc;
        if (t >= 0) /* the first trial only warms caches and wakes the threads */
            c->ms[c->n++] = (double)(t1 - t0) / 1e6;
    }
    (void)sink;
    free(buf);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double k25_calib_spread(const struct k25_calib *c)
{
    if (c->n <= 0)
        return NAN;
    double v[K25_CALIB_MAX];
    memcpy(v, c->ms, sizeof(double) * (size_t)c->n);
    qsort(v, (size_t)c->n, sizeof(double), cmp_double);
    double med = c->n % 2 ? v[c->n / 2] : 0.5 * (v[c->n / 2 - 1] + v[c->n / 2]);
    return v[0] > 0 ? med / v[0] - 1 : NAN;
}

json_t *k25_calib_json(const struct k25_calib *c)
{
    json_t *o = json_object(), *arr = json_array();
    if (!o || !arr) {
        json_decref(o);
        json_decref(arr);
        return NULL;
    }
    double v[K25_CALIB_MAX];
    for (int i = 0; i < c->n; i++) {
        json_array_append_new(arr, json_real(c->ms[i]));
        v[i] = c->ms[i];
    }
    qsort(v, (size_t)c->n, sizeof(double), cmp_double);
    double med = c->n ? (c->n % 2 ? v[c->n / 2] : 0.5 * (v[c->n / 2 - 1] + v[c->n / 2])) : NAN;
    json_object_set_new(o, "workload", json_string("fp32 matmul 128^3 x4 + 2 MiB stream x4, per thread"));
    json_object_set_new(o, "version", json_integer(CAL_VERSION));
    json_object_set_new(o, "threads", json_integer(c->threads));
    json_object_set_new(o, "trials_ms", arr);
    json_object_set_new(o, "median_ms", isfinite(med) ? json_real(med) : json_null());
    /* the fastest trial: the machine's speed with the least interference (what k25 gate uses) */
    json_object_set_new(o, "min_ms", c->n ? json_real(v[0]) : json_null());
    /* how steady the machine was: (median - fastest) / fastest; above K25_CALIB_MAX_SPREAD it was not */
    double sp = k25_calib_spread(c);
    json_object_set_new(o, "spread", isfinite(sp) ? json_real(sp) : json_null());
    return o;
}
