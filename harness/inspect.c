/*
 * inspect.c - reading a stored run for people: the Chrome/Perfetto
 * trace-event export of `k25 inspect --chrome-trace`.
 *
 * Each request is a thread (tid = its row + 1, named by its id) of the
 * process of its repetition (pid = rep + 1); it shows a "queue" slice
 * (arrival to admission, scheduling lag included), one "prefill" slice per
 * chunk (the engine step that ran it) and one "decode" slice per generated
 * token after the first (previous token to this one).  Counters (pid 0)
 * carry the 100 ms timeline: busy fraction, waiting, running, KV blocks.
 * Times are microseconds from the run's origin.
 */
#include "bench.h"

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

static void slice(FILE *f, bool *first, const char *name, const char *cat, int pid, long tid, int64_t t0_ns,
                  int64_t t1_ns, const char *args)
{
    if (t1_ns < t0_ns)
        t1_ns = t0_ns;
    fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%ld,\"ts\":%.3f,\"dur\":%.3f%s%s}",
            *first ? "" : ",", name, cat, pid, tid, (double)t0_ns / 1e3, (double)(t1_ns - t0_ns) / 1e3,
            args ? ",\"args\":" : "", args ? args : "");
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
        char args[256];
        snprintf(args, sizeof(args),
                 "{\"input_tokens\":%d,\"output_tokens\":%d,\"state\":\"%s\",\"sched_lag_ms\":%.3f}", q->n_input,
                 q->n_output, k25_req_state_name(q->state), k25_bench_req_lag_ms(q));
        int64_t admit = q->admit_ns >= 0 ? q->admit_ns : q->finish_ns;
        slice(f, &first, "queue", "queue", pid, tid, q->arrival_ns, admit, args);
        for (int c = 0; c < q->n_chunks; c++) {
            char name[48];
            snprintf(name, sizeof(name), "prefill %d/%d", c + 1, q->n_chunks);
            slice(f, &first, name, "prefill", pid, tid, q->chunk_start_ns[c], q->chunk_end_ns[c], NULL);
        }
        for (int k = 1; k < q->n_output; k++) {
            char a[64];
            snprintf(a, sizeof(a), "{\"index\":%d,\"token_id\":%d}", k, q->token_ids[k]);
            slice(f, &first, "decode", "decode", pid, tid, q->token_ns[k - 1], q->token_ns[k], a);
        }
    }
    for (size_t w = 0; w < run->n_win; w++) {
        const struct k25_bench_window *x = &run->win[w];
        if (x->n_waiting < 0)
            continue;
        fprintf(f,
                ",\n{\"name\":\"engine\",\"ph\":\"C\",\"pid\":0,\"ts\":%.3f,\"args\":{\"busy_fraction\":%.4f,"
                "\"waiting\":%d,\"running\":%d,\"kv_blocks\":%lld}}",
                (double)x->t_ns / 1e3, x->len_ns > 0 ? x->busy_ns / (double)x->len_ns : 0.0, x->n_waiting,
                x->n_running, (long long)x->kv_blocks);
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
