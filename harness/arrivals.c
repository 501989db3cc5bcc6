/*
 * arrivals.c - the open loop's other arrival processes (harness.h
 * "Arrival processes"), beside loadgen.c's seeded gamma schedule:
 *
 *   constant  evenly spaced arrivals, one every 1/rate seconds (what a
 *             gamma renewal process tends to as its shape grows; the
 *             shape itself cannot be 0, so --burstiness 0 is refused and
 *             names this instead)
 *   ramp      vLLM's --ramp-up-strategy linear: request i arrives at the
 *             rate start + (end - start) i / (n - 1), each interval a
 *             gamma draw of the run's burstiness at that rate (1: Poisson)
 *   trace     replay of recorded arrival offsets: a JSONL file, one
 *             request a line with `timestamp` in milliseconds (the
 *             Mooncake trace layout AIPerf reads: timestamp, input_length,
 *             output_length, hash_ids); offsets from the first line
 *
 * Each writes a schedule of nanosecond offsets from the repetition's
 * start, the same array the gamma schedule fills.
 */
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const k25_arrival_names[] = {"gamma", "constant", "ramp", "trace", NULL};

int k25_arrivals_constant(double rate_rps, int64_t max_n, int64_t duration_ns, int64_t **out, size_t *n_out,
                          struct k25_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (!(rate_rps > 0) || isinf(rate_rps) || (max_n <= 0 && duration_ns <= 0))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--rate",
                             "constant arrivals need a rate > 0 and a request count or duration");
    size_t n = max_n > 0 ? (size_t)max_n : (size_t)floor((double)duration_ns / 1e9 * rate_rps);
    int64_t *t = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!t)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) /* the first one interval after 0, as the gamma schedule's */
        t[i] = (int64_t)llround((double)(i + 1) / rate_rps * 1e9);
    while (max_n <= 0 && n > 0 && t[n - 1] >= duration_ns)
        n--;
    *out = t;
    *n_out = n;
    return K25_OK;
}

int k25_arrivals_ramp(double start_rps, double end_rps, double burstiness, uint64_t seed, int64_t n_req,
                      int64_t **out, size_t *n_out, struct k25_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (!(start_rps > 0) || !(end_rps > 0) || isinf(start_rps) || isinf(end_rps))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--ramp-up-start-rps",
                             "a linear ramp needs --ramp-up-start-rps and --ramp-up-end-rps > 0");
    if (n_req <= 0)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--ramp-up-strategy",
                             "a linear ramp runs over a request count (--requests), not a duration");
    /* unit-mean intervals from the seeded gamma schedule, stretched by each request's rate */
    int64_t *unit = NULL;
    size_t nu = 0;
    int rc = k25_loadgen_schedule(1.0, burstiness, seed, n_req, 0, &unit, &nu, err);
    if (rc != K25_OK)
        return rc;
    double now_s = 0, prev = 0;
    for (size_t i = 0; i < nu; i++) {
        double x = (double)unit[i] / 1e9 - prev; /* the i-th unit interval */
        prev = (double)unit[i] / 1e9;
        double r = nu > 1 ? start_rps + (end_rps - start_rps) * (double)i / (double)(nu - 1) : start_rps;
        now_s += x / r;
        unit[i] = (int64_t)llround(now_s * 1e9);
    }
    *out = unit;
    *n_out = nu;
    return K25_OK;
}

int k25_arrivals_trace(const char *path, int64_t max_n, int64_t **out, size_t *n_out, struct k25_error *err)
{
    *out = NULL;
    *n_out = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return k25_error_set(err, K25_ENOTFOUND, path, 0, "--trace-file", "cannot open the arrival trace");
    size_t cap = 1024, n = 0;
    int64_t *t = malloc(sizeof(int64_t) * cap);
    char *line = NULL;
    size_t lcap = 0;
    int rc = K25_OK, ln = 0;
    double first = NAN, last = -INFINITY;
    if (!t) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    while (getline(&line, &lcap, f) > 0 && (max_n <= 0 || n < (size_t)max_n)) {
        ln++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue; /* blank line */
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        json_t *ts = json_object_get(j, "timestamp");
        if (!j || !json_is_number(ts) || !(json_number_value(ts) >= 0)) {
            rc = k25_error_set(err, K25_EFORMAT, path, ln, "timestamp",
                               j ? "each line needs a \"timestamp\" (milliseconds, >= 0)" : "not JSON: %s", je.text);
            json_decref(j);
            goto out;
        }
        double ms = json_number_value(ts);
        json_decref(j);
        if (ms < last) {
            rc = k25_error_set(err, K25_EFORMAT, path, ln, "timestamp",
                               "%.3f ms is before the previous line's %.3f ms (the trace must be in time order)", ms,
                               last);
            goto out;
        }
        last = ms;
        if (isnan(first))
            first = ms;
        if (n == cap) {
            int64_t *nt = realloc(t, sizeof(int64_t) * (cap *= 2));
            if (!nt) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                goto out;
            }
            t = nt;
        }
        t[n++] = (int64_t)llround((ms - first) * 1e6);
    }
    if (n == 0)
        rc = k25_error_set(err, K25_EINVAL, path, 0, "--trace-file", "the arrival trace has no request");
out:
    free(line);
    fclose(f);
    if (rc != K25_OK) {
        free(t);
        return rc;
    }
    *out = t;
    *n_out = n;
    return K25_OK;
}
