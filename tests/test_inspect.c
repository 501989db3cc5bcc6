/*
 * test_inspect.c - `k25 inspect --chrome-trace` (harness/inspect.c): the
 * slices of every track (one request of one repetition) follow one another
 * or nest, never overlap partially, which trace viewers draw wrongly.
 *
 * Checked on a hand-made trace that holds the engine's real timing
 * pattern (a request is admitted a few hundred nanoseconds after the step
 * that runs its first chunk started; a first token stamped just before
 * that step's end; times whose microsecond rounding used to collide), and
 * on a run measured by `k25 bench`; the timeline counters carry the elastic
 * queue's depths (the degraded queue's from schema 5).
 */
#include "testutil.h"

#include "harness.h"

#include <jansson.h>
#include <math.h>

/* One slice, in integer nanoseconds. */
struct tslice {
    int pid;
    long tid;
    int64_t t0, t1;
    char name[48];
};

static int cmp_slice(const void *a, const void *b)
{
    const struct tslice *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    return x->t1 > y->t1 ? -1 : x->t1 < y->t1; /* the enclosing slice first */
}

/*
 * Reads the "X" slices of a Chrome trace and fails on any partial
 * overlap inside a track: each slice must start at or after the end of
 * every open one, or end inside it (nesting).  Returns the number of
 * slices, sorted by track and start, in *out (malloc'd, the caller frees).
 */
static size_t check_tracks(const char *path, struct tslice **out)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        fail_msg("%s: not JSON: %s (line %d)", path, je.text, je.line);
    json_t *ev = json_object_get(root, "traceEvents");
    assert_true(json_is_array(ev));
    struct tslice *s = calloc(json_array_size(ev) + 1, sizeof(*s));
    assert_non_null(s);
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "X"))
            continue;
        double ts = json_number_value(json_object_get(e, "ts")), dur = json_number_value(json_object_get(e, "dur"));
        assert_true(ts >= 0 && dur >= 0);
        s[n].pid = (int)json_integer_value(json_object_get(e, "pid"));
        s[n].tid = (long)json_integer_value(json_object_get(e, "tid"));
        /* the export prints exact microseconds with three decimals: back to integer nanoseconds */
        s[n].t0 = llround(ts * 1000.0);
        s[n].t1 = s[n].t0 + llround(dur * 1000.0);
        snprintf(s[n].name, sizeof(s[n].name), "%s", json_string_value(json_object_get(e, "name")));
        n++;
    }
    json_decref(root);
    qsort(s, n, sizeof(*s), cmp_slice);
    /* a stack of open slices per track */
    size_t stack[64], depth = 0;
    for (i = 0; i < n; i++) {
        if (i == 0 || s[i].pid != s[i - 1].pid || s[i].tid != s[i - 1].tid)
            depth = 0;
        while (depth && s[stack[depth - 1]].t1 <= s[i].t0)
            depth--; /* closed before this one starts */
        if (depth) {
            const struct tslice *p = &s[stack[depth - 1]];
            if (s[i].t1 > p->t1)
                fail_msg("%s: track pid %d tid %ld: '%s' [%lld, %lld] ns starts inside '%s' [%lld, %lld] ns and ends "
                         "%lld ns after it",
                         path, s[i].pid, s[i].tid, s[i].name, (long long)s[i].t0, (long long)s[i].t1, p->name,
                         (long long)p->t0, (long long)p->t1, (long long)(s[i].t1 - p->t1));
        }
        assert_true(depth < 64);
        stack[depth++] = i;
    }
    *out = s;
    return n;
}

/* One request of the hand-made trace. */
static void make_req(struct k25_bench_req *q, const char *id, int rep, int64_t arrival, int64_t admit,
                     const int64_t *cs, const int64_t *ce, int nc, const int64_t *tok, int nt)
{
    memset(q, 0, sizeof(*q));
    snprintf(q->id, sizeof(q->id), "%s", id);
    q->rep = rep;
    q->state = K25_REQ_COMPLETED;
    q->n_input = 100;
    q->arrival_ns = q->submit_ns = arrival;
    q->admit_ns = admit;
    q->n_chunks = nc;
    q->chunk_start_ns = calloc((size_t)nc + 1, sizeof(int64_t));
    q->chunk_end_ns = calloc((size_t)nc + 1, sizeof(int64_t));
    assert_true(q->chunk_start_ns && q->chunk_end_ns);
    for (int c = 0; c < nc; c++) {
        q->chunk_start_ns[c] = cs[c];
        q->chunk_end_ns[c] = ce[c];
    }
    q->n_output = nt;
    q->token_ns = malloc(sizeof(int64_t) * (size_t)nt);
    q->token_ids = calloc((size_t)nt, sizeof(int32_t));
    assert_true(q->token_ns && q->token_ids);
    memcpy(q->token_ns, tok, sizeof(int64_t) * (size_t)nt);
    q->first_ns = tok[0];
    q->finish_ns = tok[nt - 1];
}

/* Admission inside the first chunk's step, a first token before that step's end, rounding-prone times. */
static void test_chrome_tracks_handmade(void **state)
{
    (void)state;
    struct k25_trace t;
    memset(&t, 0, sizeof(t));
    t.run.n_reps = 2;
    t.run.n_reqs = 3;
    t.run.reqs = calloc(3, sizeof(struct k25_bench_req));
    assert_non_null(t.run.reqs);
    /* the pattern of the issue: queue ends 0.03..0.58 us after 'prefill 1/N' starts */
    const int64_t cs0[] = {1000000, 2000000}, ce0[] = {2000000, 3000000};
    const int64_t tok0[] = {3000000, 3500000, 4000000};
    make_req(&t.run.reqs[0], "a", 0, 500000, 1000580, cs0, ce0, 2, tok0, 3);
    /* first token stamped 100 ns before the last chunk's step ends; times ending in 0.5 ns-ish digits */
    const int64_t cs1[] = {1234567}, ce1[] = {2345679};
    const int64_t tok1[] = {2345579, 2400001, 2400001, 2500999};
    make_req(&t.run.reqs[1], "b", 0, 1234000, 1234597, cs1, ce1, 1, tok1, 4);
    /* never admitted before finishing (rejected-like: no chunks) */
    const int64_t tok2[] = {7000001};
    make_req(&t.run.reqs[2], "c", 1, 5000003, -1, NULL, NULL, 0, tok2, 1);
    t.run.reqs[2].finish_ns = 6000007;

    char path[600];
    snprintf(path, sizeof(path), "%s/handmade.json", tu_dir);
    struct k25_error err;
    assert_int_equal(k25_trace_export_chrome(&t, path, &err), K25_OK);
    struct tslice *s = NULL;
    size_t n = check_tracks(path, &s);
    /* 3 queue + 3 prefill + 2 + 3 decode slices */
    assert_int_equal(n, 11);
    int seen_queue = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(s[i].name, "queue") && s[i].tid == 1) {
            /* arrival kept; ends where the step that ran the first chunk started */
            assert_int_equal(s[i].t0, 500000);
            assert_int_equal(s[i].t1, 1000000);
            seen_queue++;
        }
        if (!strcmp(s[i].name, "queue") && s[i].tid == 3) {
            assert_int_equal(s[i].t0, 5000003); /* never admitted: queued until it finished */
            assert_int_equal(s[i].t1, 6000007);
            seen_queue++;
        }
        if (!strcmp(s[i].name, "prefill 1/2")) { /* unchanged where nothing overlapped */
            assert_int_equal(s[i].t0, 1000000);
            assert_int_equal(s[i].t1, 2000000);
        }
    }
    assert_int_equal(seen_queue, 2);
    free(s);
    k25_trace_free(&t);
}

/*
 * The timeline's counters carry the elastic queue where the trace holds it: the memory and spill
 * depths and the breaker (schema 3), the degraded queue's depth (schema 5); none of them for a
 * window of an older trace (-1).
 */
static void test_chrome_queue_counters(void **state)
{
    (void)state;
    struct k25_trace t;
    memset(&t, 0, sizeof(t));
    t.run.n_win = 2;
    t.run.win = calloc(2, sizeof(*t.run.win));
    assert_non_null(t.run.win);
    t.run.win[0] = (struct k25_bench_window){.t_ns = 0, .len_ns = K25_BENCH_WINDOW_NS, .n_waiting = 9,
                                             .n_waiting_memory = 4, .n_waiting_spill = 2, .breaker_open = 1,
                                             .breaker_busy_fraction = 0.97, .n_waiting_degraded = 3};
    t.run.win[1] = (struct k25_bench_window){.t_ns = K25_BENCH_WINDOW_NS, .len_ns = K25_BENCH_WINDOW_NS,
                                             .n_waiting = 1, .n_waiting_memory = -1, .n_waiting_spill = -1,
                                             .breaker_open = -1, .breaker_busy_fraction = NAN,
                                             .n_waiting_degraded = -1};
    char path[600];
    snprintf(path, sizeof(path), "%s/counters.json", tu_dir);
    struct k25_error err;
    assert_int_equal(k25_trace_export_chrome(&t, path, &err), K25_OK);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("%s: %s", path, je.text);
    const json_t *ev = json_object_get(j, "traceEvents");
    int seen = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const json_t *e = json_array_get(ev, i), *a = json_object_get(e, "args");
        if (strcmp(json_string_value(json_object_get(e, "ph")), "C") != 0)
            continue;
        if (json_integer_value(json_object_get(a, "waiting")) == 9) {
            assert_int_equal(json_integer_value(json_object_get(a, "waiting_memory")), 4);
            assert_int_equal(json_integer_value(json_object_get(a, "waiting_spill")), 2);
            assert_int_equal(json_integer_value(json_object_get(a, "breaker_open")), 1);
            assert_int_equal(json_integer_value(json_object_get(a, "waiting_degraded")), 3);
        } else {
            assert_null(json_object_get(a, "waiting_memory"));
            assert_null(json_object_get(a, "waiting_degraded"));
        }
        seen++;
    }
    assert_int_equal(seen, 2);
    json_decref(j);
    k25_trace_free(&t);
}

/* A measured run: every track of its Chrome export is well nested. */
static void test_chrome_tracks_measured(void **state)
{
    (void)state;
    char cmd[2048], h5[512], js[512], *out = NULL;
    snprintf(h5, sizeof(h5), "%s/run.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/chrome.json", tu_dir);
    snprintf(cmd, sizeof(cmd),
             "%s bench --dataset datasets/gold/ci-small.jsonl --filter 'input_length <= 1024' --threads 1 --quiet "
             "--model tiny --prefill-chunk-size 256 --decode-max-tokens 8 --concurrency 2 --requests 4 --out %s",
             tu_k25(), h5);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s: exit %d\n%s", cmd, st, out ? out : "");
    free(out);
    snprintf(cmd, sizeof(cmd), "%s inspect %s --chrome-trace %s", tu_k25(), h5, js);
    st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s: exit %d\n%s", cmd, st, out ? out : "");
    free(out);
    struct tslice *s = NULL;
    size_t n = check_tracks(js, &s);
    int queue = 0, prefill = 0;
    for (size_t i = 0; i < n; i++) {
        queue += !strcmp(s[i].name, "queue");
        prefill += !strncmp(s[i].name, "prefill ", 8);
    }
    assert_int_equal(queue, 4);
    assert_true(prefill >= 4);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chrome_tracks_handmade),
        cmocka_unit_test(test_chrome_queue_counters),
        cmocka_unit_test(test_chrome_tracks_measured),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
