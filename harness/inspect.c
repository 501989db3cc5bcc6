/*
 * inspect.c - reading a stored run for people: the Chrome/Perfetto
 * trace-event export of `k25 inspect --chrome-trace`.
 *
 * Each request is a thread (tid = its row + 1, named by its id) of the
 * process of its repetition (pid = rep + 1); it shows a "queue" slice
 * (arrival to admission, scheduling lag included), one "prefill" slice per
 * chunk (the engine step that ran it) and one "decode" slice per generated
 * token after the first (previous token to this one).  Counters (pid 0)
 * carry the 100 ms timeline: busy fraction, waiting, running, KV blocks
 * (and, schema 3, the memory and spill queue depths and the breaker).
 * Times are microseconds from the run's origin.
 *
 * A track's slices follow one another and never overlap partially (trace
 * viewers nest a slice that starts inside another and draw a partial
 * overlap wrongly): a request is admitted inside the engine step that runs
 * its first chunk, so its queue slice ends where that step starts, not at
 * the admission stamp taken a few hundred nanoseconds into it; each later
 * slice starts no earlier than the previous one ended.  Times are printed
 * from integer nanoseconds, exactly, so rounding cannot create an overlap
 * either (tests/test_inspect.c checks every track).
 */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put_json_string(FILE *f, const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(t ? t : "\"?\"", f);
    free(t);
    json_decref(j);
}

/* Non-negative nanoseconds as microseconds with exactly three decimals ("1234.567"). */
static void put_us(FILE *f, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* One complete ("X") slice [t0_ns, t1_ns]; an end before the start is drawn as an instant. */
static void slice(FILE *f, bool *first, const char *name, const char *cat, int pid, long tid, int64_t t0_ns,
                  int64_t t1_ns, const char *args)
{
    if (t0_ns < 0)
        t0_ns = 0;
    if (t1_ns < t0_ns)
        t1_ns = t0_ns;
    fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%ld,\"ts\":", *first ? "" : ",",
            name, cat, pid, tid);
    put_us(f, t0_ns);
    fputs(",\"dur\":", f);
    put_us(f, t1_ns - t0_ns);
    fprintf(f, "%s%s}", args ? ",\"args\":" : "", args ? args : "");
    *first = false;
}

int k25_trace_export_chrome(const struct k25_trace *t, const char *path, struct k25_error *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create: %s", strerror(errno));
    const struct k25_bench_run *run = &t->run;
    bool first = true;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"k25 inspect\",\"version\":\"%s\"},"
               "\"traceEvents\":[",
            K25_VERSION);
    for (int k = 0; k < run->n_reps; k++) {
        fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"repetition %d\"}}",
                first ? "" : ",", k + 1, k + 1);
        first = false;
    }
    fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"engine timeline\"}}",
            first ? "" : ",");
    first = false;
    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *q = &run->reqs[i];
        int pid = q->rep + 1;
        long tid = (long)i + 1;
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%ld,\"args\":{\"name\":", pid, tid);
        put_json_string(f, q->id);
        fprintf(f, "}}");
        char args[512];
        /* timed_out and rejected are final states with a reason: the queue slice runs to the finish */
        json_t *jr = json_string(q->reason);
        char *reason = jr ? json_dumps(jr, JSON_ENCODE_ANY) : NULL;
        snprintf(args, sizeof(args),
                 "{\"input_tokens\":%d,\"output_tokens\":%d,\"state\":\"%s\",\"reason\":%s,\"sched_lag_ms\":%.3f,"
                 "\"priority\":\"%s\",\"degraded\":%s,\"spilled\":%s,\"replayed\":%s}",
                 q->n_input, q->n_output, k25_req_state_name(q->state), reason ? reason : "\"\"",
                 k25_bench_req_lag_ms(q), k25_priority_name(q->priority), q->degraded ? "true" : "false",
                 q->spilled ? "true" : "false", q->replayed ? "true" : "false");
        free(reason);
        json_decref(jr);
        /* the queue ends at admission, or where the step that ran the first chunk started if earlier */
        int64_t admit = q->admit_ns >= 0 ? q->admit_ns : q->finish_ns;
        if (q->n_chunks > 0 && q->chunk_start_ns[0] < admit)
            admit = q->chunk_start_ns[0];
        if (admit < q->arrival_ns)
            admit = q->arrival_ns;
        slice(f, &first, "queue", "queue", pid, tid, q->arrival_ns, admit, args);
        int64_t prev_end = admit; /* each slice starts no earlier than the previous one ended */
        for (int c = 0; c < q->n_chunks; c++) {
            char name[48];
            snprintf(name, sizeof(name), "prefill %d/%d", c + 1, q->n_chunks);
            int64_t t0 = q->chunk_start_ns[c] > prev_end ? q->chunk_start_ns[c] : prev_end;
            int64_t t1 = q->chunk_end_ns[c] > t0 ? q->chunk_end_ns[c] : t0;
            slice(f, &first, name, "prefill", pid, tid, t0, t1, NULL);
            prev_end = t1;
        }
        for (int k = 1; k < q->n_output; k++) {
            char a[64];
            snprintf(a, sizeof(a), "{\"index\":%d,\"token_id\":%d}", k, q->token_ids[k]);
            int64_t t0 = q->token_ns[k - 1] > prev_end ? q->token_ns[k - 1] : prev_end;
            int64_t t1 = q->token_ns[k] > t0 ? q->token_ns[k] : t0;
            slice(f, &first, "decode", "decode", pid, tid, t0, t1, a);
            prev_end = t1;
        }
    }
    for (size_t w = 0; w < run->n_win; w++) {
        const struct k25_bench_window *x = &run->win[w];
        if (x->n_waiting < 0)
            continue;
        fputs(",\n{\"name\":\"engine\",\"ph\":\"C\",\"pid\":0,\"ts\":", f);
        put_us(f, x->t_ns);
        fprintf(f, ",\"args\":{\"busy_fraction\":%.4f,\"waiting\":%d,\"running\":%d,\"kv_blocks\":%lld",
                x->len_ns > 0 ? x->busy_ns / (double)x->len_ns : 0.0, x->n_waiting, x->n_running,
                (long long)x->kv_blocks);
        if (x->n_waiting_memory >= 0) /* schema 3: the elastic queue */
            fprintf(f, ",\"waiting_memory\":%d,\"waiting_spill\":%d,\"breaker_open\":%d", x->n_waiting_memory,
                    x->n_waiting_spill, x->breaker_open);
        fputs("}}", f);
    }
    fprintf(f, "\n]}\n");
    int rc = K25_OK;
    if (ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "writing failed: %s", strerror(errno));
    if (fclose(f) != 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "writing failed: %s", strerror(errno));
    if (rc == K25_OK && rename(tmp, path) != 0)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot rename into place: %s", strerror(errno));
    if (rc != K25_OK)
        unlink(tmp);
    return rc;
}
