/*
 * search.c - the rate search of a sweep point: the highest open-loop
 * request rate whose search metric stays within its limit, by probes
 * (each one `k25 bench --rate R`, no cap on requests in flight unless the
 * spec gives `concurrency`) and bisection.  Each (point, repetition)
 * keeps every probe (rep-K.probe-J.{h5,json,log}), a log of the search
 * (rep-K.log), the trace of the probe that decided it (rep-K.h5) and the
 * result (rep-K.json).
 */
#include "sweep_run.h"

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * One probe's outcome from its bench JSON: the metric (NaN when not
 * measured) and how many of the measured requests completed.
 */
static void probe_result(const char *path, const char *metric, double *v, long long *completed, long long *total)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je), *m = j ? k25_sweep_metrics_from_bench(j) : NULL;
    const json_t *x = m ? json_object_get(m, metric) : NULL;
    const json_t *s = j ? json_object_get(j, "summary") : NULL;
    *v = x && json_is_number(x) ? json_number_value(x) : NAN;
    *completed = json_integer_value(k25_json_path(s, "requests.completed"));
    *total = json_integer_value(k25_json_path(s, "requests.total"));
    json_decref(m);
    json_decref(j);
}

/* Puts a copy of src at dst atomically (a hard link where the file system allows). */
static int link_or_copy(const char *src, const char *dst, struct k25_error *err)
{
    char tmp[2400];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(src, tmp) != 0) {
        int in = open(src, O_RDONLY), out = in >= 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
        bool ok = in >= 0 && out >= 0;
        char buf[65536];
        ssize_t r;
        while (ok && (r = read(in, buf, sizeof(buf))) != 0) {
            if (r < 0) {
                ok = errno == EINTR;
                continue;
            }
            ok = write(out, buf, (size_t)r) == r;
        }
        ok = ok && fsync(out) == 0;
        if (out >= 0 && close(out) != 0)
            ok = false;
        if (in >= 0)
            close(in);
        if (!ok) {
            unlink(tmp);
            return k25_error_set(err, K25_EIO, dst, 0, NULL, "cannot copy %s: %s", src, strerror(errno));
        }
    }
    if (rename(tmp, dst) != 0) {
        unlink(tmp);
        return k25_error_set(err, K25_EIO, dst, 0, NULL, "cannot rename %s into place: %s", tmp, strerror(errno));
    }
    return K25_OK;
}

/*
 * The rate search of one (point, repetition): bisection on the open-loop
 * rate between rate_lo and rate_hi until (hi - lo) / lo <= precision; a
 * probe passes when search_metric <= search_limit.  A probe whose metric is
 * not measured fails the SLO when some of its requests did not complete
 * (they missed every objective) and is an error otherwise (the spec check
 * makes that rare).  One line per probe goes to log.  Writes rep-K.h5 (the
 * trace of the fastest passing probe, or of the rate_lo probe when none
 * passed) and then rep-K.json with max_rate_rps, the probes, and the
 * summary of the fastest passing probe.
 */
static int rate_search(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                       const struct k25_sweep_point *p, int rep, int c0, int nc, int threads, FILE *log,
                       struct k25_error *err)
{
    const struct k25_sweep_workload *w = &spec->wl;
    double lo = w->rate_lo, hi = w->rate_hi, best = 0;
    int best_probe = -1, rc = K25_OK;
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s/points/%s", o->out, p->id);
    json_t *probes = json_array();
    /* probe 0 at rate_lo (fails: nothing sustainable in range), probe 1 at
     * rate_hi (passes: report it as a floor), then bisect */
    for (int probe = 0; probe < 48; probe++) {
        double r = probe == 0 ? lo : probe == 1 ? hi : 0.5 * (lo + hi);
        if (probe >= 2 && (hi - lo) / lo <= w->precision)
            break;
        char prefix[2100], js[2200], plog[2200];
        snprintf(prefix, sizeof(prefix), "%s/rep-%d.probe-%d", dir, rep, probe);
        snprintf(js, sizeof(js), "%s.json", prefix);
        snprintf(plog, sizeof(plog), "%s.log", prefix);
        struct k25_sweep_argv a;
        k25_sweep_bench_argv(&a, spec, o, p, rep, prefix, r, threads);
        int st = k25_sweep_run_wait(a.argv, plog, c0, nc);
        if (k25_sweep_stopping() || st != 0) {
            rc = k25_error_set(err, K25_EIO, plog, 0, NULL, "rate probe %.4g req/s %s (exit %d)", r,
                               k25_sweep_stopping() ? "interrupted" : "failed", st);
            goto out;
        }
        double v;
        long long done, total;
        probe_result(js, w->search_metric, &v, &done, &total);
        if (isnan(v) && done >= total) {
            rc = k25_error_set(err, K25_EINVAL, js, 0, w->search_metric,
                               "rate probe %.4g req/s: not measured from %lld completed requests; size the "
                               "spec's workload.requests for this percentile",
                               r, done);
            goto out;
        }
        bool ok = !isnan(v) && v <= w->search_limit;
        fprintf(log, "probe %d: %.4g req/s: %s = %s%.4g -> %s\n", probe, r, w->search_metric,
                isnan(v) ? "not measured, " : "", isnan(v) ? (double)(total - done) : v,
                ok ? "meets the SLO" : isnan(v) ? "requests did not complete: misses the SLO" : "misses the SLO");
        fflush(log);
        json_array_append_new(probes, json_pack("{s:f, s:o, s:b, s:I, s:I}", "rate_rps", r, w->search_metric,
                                                isnan(v) ? json_null() : json_real(v), "meets_slo", ok,
                                                "requests_completed", (json_int_t)done, "requests", (json_int_t)total));
        if (ok) {
            best = r;
            best_probe = probe;
        }
        if (probe == 0 && !ok)
            break;
        if (probe == 1 && ok)
            break;
        if (probe >= 2) {
            if (ok)
                lo = r;
            else
                hi = r;
        }
    }
    int trace_probe = best_probe >= 0 ? best_probe : 0;
    char src[2200], dst[2200];
    snprintf(src, sizeof(src), "%s/rep-%d.probe-%d.h5", dir, rep, trace_probe);
    snprintf(dst, sizeof(dst), "%s/rep-%d.h5", dir, rep);
    if ((rc = link_or_copy(src, dst, err)))
        goto out;
    json_t *res = json_object();
    json_object_set_new(res, "max_rate_rps", json_real(best));
    json_object_set_new(res, "search_metric", json_string(w->search_metric));
    json_object_set_new(res, "search_limit", json_real(w->search_limit));
    json_object_set_new(res, "precision", json_real(w->precision));
    json_object_set_new(res, "trace_probe", json_integer(trace_probe));
    json_object_set(res, "probes", probes);
    if (best_probe >= 0) {
        char js[2200];
        json_error_t je;
        snprintf(js, sizeof(js), "%s/rep-%d.probe-%d.json", dir, rep, best_probe);
        json_t *b = json_load_file(js, 0, &je);
        json_t *s = b ? json_object_get(b, "summary") : NULL;
        json_object_set(res, "summary", s ? s : (b ? b : json_null()));
        json_decref(b);
    }
    char path[2200];
    snprintf(path, sizeof(path), "%s/rep-%d.json", dir, rep);
    rc = k25_write_json_atomic(path, res, err);
    json_decref(res);
    if (rc == K25_OK)
        fprintf(log, "max_rate_rps = %.4g (%s <= %g)\n", best, w->search_metric, w->search_limit);
out:
    json_decref(probes);
    return rc;
}

pid_t k25_sweep_spawn_search(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                             const struct k25_sweep_point *p, int rep, const char *logpath, int c0, int nc,
                             int threads, const struct k25_sweep_slow_rule *slow)
{
    pid_t pid = k25_sweep_fork();
    if (pid != 0)
        return pid;
    FILE *log = fopen(logpath, "w");
    if (!log)
        _exit(126);
    dup2(fileno(log), 2);
    k25_sweep_slow_rule_apply(slow); /* the probes inherit it */
    struct k25_error e2;
    int r2 = rate_search(spec, o, p, rep, c0, nc, threads, log, &e2);
    if (r2)
        fprintf(log, "k25 sweep: %s\n", e2.msg);
    fclose(log);
    _exit(r2 ? 1 : 0);
}
