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
 * start, the same array the gamma schedule fills.  A trace whose lines
 * carry input_length and output_length also shapes its requests
 * (k25_arrivals_trace_shapes; bench.c builds each request's prompt from
 * them: docs/metrics.md "Arrival processes").
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

void k25_trace_shapes_free(struct k25_trace_shape *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        free(s[i].hash_ids);
    free(s);
}

/* One line's shape into *sh; *has: whether it carries the lengths.  K25_EFORMAT naming the field. */
static int line_shape(const json_t *j, const char *path, int ln, struct k25_trace_shape *sh, bool *has,
                      struct k25_error *err)
{
    const json_t *il = json_object_get(j, "input_length"), *ol = json_object_get(j, "output_length"),
                 *hi = json_object_get(j, "hash_ids");
    memset(sh, 0, sizeof(*sh));
    *has = il || ol;
    if (!*has) {
        if (hi)
            return k25_error_set(err, K25_EFORMAT, path, ln, "hash_ids",
                                 "hash_ids without input_length and output_length (the blocks need the prompt's length)");
        return K25_OK;
    }
    if (!il || !ol)
        return k25_error_set(err, K25_EFORMAT, path, ln, il ? "output_length" : "input_length",
                             "missing: a line with %s needs %s too", il ? "input_length" : "output_length",
                             il ? "output_length" : "input_length");
    if (!json_is_integer(il) || json_integer_value(il) < 1 || json_integer_value(il) > INT32_MAX)
        return k25_error_set(err, K25_EFORMAT, path, ln, "input_length", "must be an integer >= 1 (tokens)");
    if (!json_is_integer(ol) || json_integer_value(ol) < 1 || json_integer_value(ol) > INT32_MAX)
        return k25_error_set(err, K25_EFORMAT, path, ln, "output_length", "must be an integer >= 1 (tokens)");
    sh->input_length = (int32_t)json_integer_value(il);
    sh->output_length = (int32_t)json_integer_value(ol);
    if (hi && !json_is_null(hi)) {
        if (!json_is_array(hi) || json_array_size(hi) > (size_t)INT32_MAX)
            return k25_error_set(err, K25_EFORMAT, path, ln, "hash_ids", "must be an array of integers >= 0");
        size_t n = json_array_size(hi);
        if (!(sh->hash_ids = malloc(sizeof(int64_t) * (n + 1))))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        for (size_t k = 0; k < n; k++) {
            const json_t *h = json_array_get(hi, k);
            if (!json_is_integer(h) || json_integer_value(h) < 0) {
                free(sh->hash_ids);
                sh->hash_ids = NULL;
                return k25_error_set(err, K25_EFORMAT, path, ln, "hash_ids",
                                     "element %zu must be an integer >= 0", k);
            }
            sh->hash_ids[k] = (int64_t)json_integer_value(h);
        }
        sh->n_hash = (int)n;
    }
    return K25_OK;
}

int k25_arrivals_trace_shapes(const char *path, int64_t max_n, struct k25_trace_shape **out, size_t *n_out,
                              struct k25_error *err)
{
    *out = NULL;
    *n_out = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return k25_error_set(err, K25_ENOTFOUND, path, 0, "--trace-file", "cannot open the arrival trace");
    size_t cap = 256, n = 0;
    struct k25_trace_shape *s = malloc(sizeof(*s) * cap);
    char *line = NULL;
    size_t lcap = 0;
    int rc = K25_OK, ln = 0, first_ln = 0;
    bool first_has = false;
    if (!s) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    while (getline(&line, &lcap, f) > 0 && (max_n <= 0 || n < (size_t)max_n)) {
        ln++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        json_t *j = json_loads(line, 0, NULL);
        if (!j) { /* k25_arrivals_trace reports it, with the parser's message */
            rc = k25_error_set(err, K25_EFORMAT, path, ln, "timestamp", "not JSON");
            goto out;
        }
        struct k25_trace_shape sh;
        bool has;
        rc = line_shape(j, path, ln, &sh, &has, err);
        json_decref(j);
        if (rc != K25_OK)
            goto out;
        if (n == 0) {
            first_has = has;
            first_ln = ln;
        } else if (has != first_has) {
            free(sh.hash_ids);
            rc = k25_error_set(err, K25_EFORMAT, path, ln, has ? "input_length" : "input_length",
                               "%s input_length and output_length, but line %d %s: every line of a trace gives the "
                               "lengths, or none does", has ? "has" : "lacks", first_ln, first_has ? "has" : "lacks");
            goto out;
        }
        if (n == cap) {
            struct k25_trace_shape *ns = realloc(s, sizeof(*s) * (cap *= 2));
            if (!ns) {
                free(sh.hash_ids);
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                goto out;
            }
            s = ns;
        }
        s[n++] = sh;
    }
out:
    free(line);
    fclose(f);
    if (rc != K25_OK || !first_has) {
        k25_trace_shapes_free(s, n);
        return rc;
    }
    *out = s;
    *n_out = n;
    return K25_OK;
}
