/*
 * inspect.c - reading a stored run for people: the Chrome/Perfetto
 * trace-event export of `k25 inspect --chrome-trace`, and the elastic
 * queue's depths over the run.
 *
 * Each request is a thread (tid = its row + 1, named by its id) of the
 * process of its repetition (pid = rep + 1); it shows a "queue" slice
 * (arrival to admission, scheduling lag included), one "prefill" slice per
 * chunk (the engine step that ran it) and one "decode" slice per generated
 * token after the first (previous token to this one).  Counters (pid 0)
 * carry the 100 ms timeline: busy fraction, waiting, running, KV blocks
 * (and, schema 3, the memory and spill queue depths and the breaker;
 * schema 5, the degraded queue's depth).  Times are microseconds from the
 * run's origin.  k25_trace_queue_json condenses the queue depths for
 * `k25 inspect` (its text and --json).
 *
 * A track's slices follow one another and never overlap partially (trace
 * viewers nest a slice that starts inside another and draw a partial
 * overlap wrongly): a request is admitted inside the engine step that runs
 * its first chunk, so its queue slice ends where that step starts, not at
 * the admission stamp taken a few hundred nanoseconds into it; each later
 * slice starts no earlier than the previous one ended.  Times are printed
 * from integer nanoseconds, exactly, so rounding cannot create an overlap
 * either (tests/test_inspect.c checks every track).  Each event is built
 * and written by jansson (escaping, numbers).
 */
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Every event is a jansson object, dumped compact as soon as it is made,
 * so the export's memory stays one event whatever the run's length (the
 * trace-event array is written around them).  Times are json reals of
 * microseconds from integer nanoseconds, printed with 15 significant
 * digits: "1234.567" exactly as written, so rounding cannot create an
 * overlap (tests/test_inspect.c reads them back to nanoseconds).
 */
#define EVENT_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* Non-negative nanoseconds as a json real of microseconds. */
static json_t *us(int64_t ns)
{
    return json_real((double)(ns < 0 ? 0 : ns) / 1000.0);
}

/* The traceEvents array being written. */
struct events {
    FILE *f;
    bool first;
    bool bad; /* an event jansson could not build (out of memory) or write */
};

/* Writes event ev (owned: released here) as the next element of traceEvents. */
static void put_event(struct events *w, json_t *ev)
{
    fputs(w->first ? "\n" : ",\n", w->f);
    if (!ev || json_dumpf(ev, w->f, EVENT_FLAGS) != 0)
        w->bad = true;
    json_decref(ev);
    w->first = false;
}

/* One complete ("X") slice [t0_ns, t1_ns]; an end before the start is drawn as an instant.  args owned. */
static void slice(struct events *w, const char *name, const char *cat, int pid, long tid, int64_t t0_ns,
                  int64_t t1_ns, json_t *args)
{
    if (t0_ns < 0)
        t0_ns = 0;
    if (t1_ns < t0_ns)
        t1_ns = t0_ns;
    json_t *ev = json_pack("{s:s, s:s, s:s, s:i, s:I, s:o, s:o}", "name", name, "cat", cat, "ph", "X", "pid", pid,
                           "tid", (json_int_t)tid, "ts", us(t0_ns), "dur", us(t1_ns - t0_ns));
    if (ev && args)
        json_object_set_new(ev, "args", args);
    else
        json_decref(args);
    put_event(w, ev);
}

/* The "args" of a request's queue slice: its sizes, final state and routing. */
static json_t *request_args(const struct k25_bench_req *q)
{
    /* timed_out and rejected are final states with a reason: the queue slice runs to the finish */
    return json_pack("{s:i, s:i, s:s, s:s, s:o, s:s, s:b, s:b, s:b}", "input_tokens", q->n_input, "output_tokens",
                     q->n_output, "state", k25_req_state_name(q->state), "reason", q->reason, "sched_lag_ms",
                     json_real(round(k25_bench_req_lag_ms(q) * 1e3) / 1e3), "priority",
                     k25_priority_name(q->priority), "degraded", q->degraded, "spilled", q->spilled, "replayed",
                     q->replayed);
}

/* A request's track: its name, then queue, prefill chunks and decode slices, none overlapping. */
static void request_track(struct events *w, const struct k25_bench_req *q, long tid)
{
    int pid = q->rep + 1;
    put_event(w, json_pack("{s:s, s:s, s:i, s:I, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", pid,
                                  "tid", (json_int_t)tid, "args", "name", q->id));
    /* the queue ends at admission, or where the step that ran the first chunk started if earlier */
    int64_t admit = q->admit_ns >= 0 ? q->admit_ns : q->finish_ns;
    if (q->n_chunks > 0 && q->chunk_start_ns[0] < admit)
        admit = q->chunk_start_ns[0];
    if (admit < q->arrival_ns)
        admit = q->arrival_ns;
    slice(w, "queue", "queue", pid, tid, q->arrival_ns, admit, request_args(q));
    int64_t prev_end = admit; /* each slice starts no earlier than the previous one ended */
    for (int c = 0; c < q->n_chunks; c++) {
        char name[48];
        snprintf(name, sizeof(name), "prefill %d/%d", c + 1, q->n_chunks);
        int64_t t0 = q->chunk_start_ns[c] > prev_end ? q->chunk_start_ns[c] : prev_end;
        int64_t t1 = q->chunk_end_ns[c] > t0 ? q->chunk_end_ns[c] : t0;
        slice(w, name, "prefill", pid, tid, t0, t1, NULL);
        prev_end = t1;
    }
    for (int k = 1; k < q->n_output; k++) {
        int64_t t0 = q->token_ns[k - 1] > prev_end ? q->token_ns[k - 1] : prev_end;
        int64_t t1 = q->token_ns[k] > t0 ? q->token_ns[k] : t0;
        slice(w, "decode", "decode", pid, tid, t0, t1,
              json_pack("{s:i, s:i}", "index", k, "token_id", q->token_ids[k]));
        prev_end = t1;
    }
}

/* One counter event of the engine timeline per sampled 100 ms window. */
static void window_counter(struct events *w, const struct k25_bench_window *x)
{
    double busy = x->len_ns > 0 ? x->busy_ns / (double)x->len_ns : 0.0;
    json_t *a = json_pack("{s:o, s:i, s:i, s:I}", "busy_fraction", json_real(round(busy * 1e4) / 1e4), "waiting",
                          x->n_waiting, "running", x->n_running, "kv_blocks", (json_int_t)x->kv_blocks);
    if (a && x->n_waiting_memory >= 0) { /* schema 3: the elastic queue */
        json_object_set_new(a, "waiting_memory", json_integer(x->n_waiting_memory));
        json_object_set_new(a, "waiting_spill", json_integer(x->n_waiting_spill));
        json_object_set_new(a, "breaker_open", json_integer(x->breaker_open));
    }
    if (a && x->n_waiting_degraded >= 0) /* schema 5 */
        json_object_set_new(a, "waiting_degraded", json_integer(x->n_waiting_degraded));
    put_event(w, a ? json_pack("{s:s, s:s, s:i, s:o, s:o}", "name", "engine", "ph", "C", "pid", 0, "ts",
                                      us(x->t_ns), "args", a)
                          : NULL);
}

int k25_trace_export_chrome(const struct k25_trace *t, const char *path, struct k25_error *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create: %s", strerror(errno));
    const struct k25_bench_run *run = &t->run;
    struct events w = {.f = f, .first = true};
    json_t *other = json_pack("{s:s, s:s}", "tool", "k25 inspect", "version", K25_VERSION);
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":", f);
    if (!other || json_dumpf(other, f, EVENT_FLAGS) != 0)
        w.bad = true;
    json_decref(other);
    fputs(",\"traceEvents\":[", f);
    for (int k = 0; k < run->n_reps; k++) {
        char name[32];
        snprintf(name, sizeof(name), "repetition %d", k + 1);
        put_event(&w,
                  json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", k + 1, "args",
                            "name", name));
    }
    put_event(&w,
              json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", 0, "args", "name",
                        "engine timeline"));
    for (size_t i = 0; i < run->n_reqs; i++)
        request_track(&w, &run->reqs[i], (long)i + 1);
    for (size_t k = 0; k < run->n_win; k++)
        if (run->win[k].n_waiting >= 0)
            window_counter(&w, &run->win[k]);
    fputs("\n]}\n", f);
    if (w.bad)
        k25_error_set(err, K25_EIO, path, 0, NULL, "a trace event could not be built or written");
    return k25_atomic_finish(f, tmp, path, !w.bad, err);
}

/* The queue depths k25_trace_queue_json reports, -1 where a window or a trace did not sample them. */
static int32_t depth_memory(const struct k25_bench_window *x)
{
    return x->n_waiting_memory;
}

static int32_t depth_spill(const struct k25_bench_window *x)
{
    return x->n_waiting_spill;
}

static int32_t depth_degraded(const struct k25_bench_window *x)
{
    return x->n_waiting_degraded;
}

/* {max, mean} of one depth over the windows that sampled it; null when none did. */
static json_t *depth_json(const struct k25_bench_run *run, int32_t (*depth)(const struct k25_bench_window *))
{
    int32_t mx = 0;
    double sum = 0;
    size_t n = 0;
    for (size_t k = 0; k < run->n_win; k++) {
        int32_t v = depth(&run->win[k]);
        if (run->win[k].n_waiting < 0 || v < 0) /* not sampled, or a column the trace does not hold */
            continue;
        mx = n == 0 || v > mx ? v : mx;
        sum += v;
        n++;
    }
    return n ? json_pack("{s:i, s:f}", "max", mx, "mean", sum / (double)n) : json_null();
}

json_t *k25_trace_queue_json(const struct k25_trace *t)
{
    const struct k25_bench_run *run = &t->run;
    size_t n = 0, open = 0;
    bool has_breaker = false; /* schema 3 and later */
    for (size_t k = 0; k < run->n_win; k++) {
        const struct k25_bench_window *x = &run->win[k];
        if (x->n_waiting < 0)
            continue;
        n++;
        has_breaker = has_breaker || x->breaker_open >= 0;
        open += x->breaker_open > 0;
    }
    if (n == 0)
        return json_null();
    return json_pack("{s:I, s:o, s:o, s:o, s:o}", "windows", (json_int_t)n, "waiting_memory",
                     depth_json(run, depth_memory), "waiting_spill", depth_json(run, depth_spill),
                     "waiting_degraded", depth_json(run, depth_degraded), "breaker_open_windows",
                     has_breaker ? json_integer((json_int_t)open) : json_null());
}
