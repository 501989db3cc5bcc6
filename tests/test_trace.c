/*
 * test_trace.c - the run trace file: HDF5 round trip of every field,
 * atomic write (nothing under the final name before commit, no temporary
 * after a failure), refusal of files that are not run traces or have an
 * unknown schema version, the Chrome trace export, provenance fields, and
 * the token margins: stored beside the tokens, absent from schema-1
 * traces, and used by `k25 gate`'s token check (the token-identity rule);
 * the elastic queue's columns (schema 3, the degraded queue's depth schema
 * 5: in `k25 inspect --json` and the report's queue plot) and the KV tiers'
 * (schema 4), with older versions read as absent, among them a stored
 * trace of the schema-4 writer (tests/data/trace-v4.h5).
 */
#include "testutil.h"

#include "harness.h"
#include "gate.h"
#include "k25util.h"

#include <math.h>
#include <sys/stat.h>

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* A synthetic run of two repetitions, ragged tokens and chunks, a rejected request. */
static void make_run(struct k25_bench_run *run)
{
    memset(run, 0, sizeof(*run));
    enum { N = 7 };
    run->reqs = calloc(N, sizeof(*run->reqs));
    run->n_reqs = N;
    run->n_reps = 2;
    for (int i = 0; i < N; i++) {
        struct k25_bench_req *q = &run->reqs[i];
        snprintf(q->id, sizeof(q->id), "req-\"%d\"-\xc3\xa9", i); /* quotes and UTF-8 survive */
        q->seq = i;
        q->rep = i >= 4;
        q->user = i % 3 - (i == 6);
        q->line = 100 + i;
        q->state = i == 5 ? K25_REQ_REJECTED : K25_REQ_COMPLETED;
        if (i == 5)
            snprintf(q->reason, sizeof(q->reason), "needs 9 KV blocks, the memory budget holds 4");
        q->n_input = 17 * (i + 1);
        q->max_new = 5;
        q->n_output = i == 5 ? 0 : i % 4 + 1;
        q->arrival_ns = 1000003LL * i;
        q->submit_ns = q->arrival_ns + 17;
        q->admit_ns = i == 5 ? -1 : q->submit_ns + 1000;
        q->n_chunks = i == 5 ? 0 : i % 3 + 1;
        q->chunk_start_ns = malloc(sizeof(int64_t) * 4);
        q->chunk_end_ns = malloc(sizeof(int64_t) * 4);
        for (int c = 0; c < q->n_chunks; c++) {
            q->chunk_start_ns[c] = q->admit_ns + c * 5000;
            q->chunk_end_ns[c] = q->admit_ns + c * 5000 + 4000;
        }
        q->token_ns = malloc(sizeof(int64_t) * 5);
        q->token_ids = malloc(sizeof(int32_t) * 5);
        for (int t = 0; t < q->n_output; t++) {
            q->token_ns[t] = q->admit_ns + 20000 + 3001 * t;
            q->token_ids[t] = (i * 31 + t * 7) % 256;
        }
        q->first_ns = q->n_output ? q->token_ns[0] : -1;
        q->finish_ns = q->n_output ? q->token_ns[q->n_output - 1] + 3 : q->submit_ns + 50;
    }
    run->rep_start_ns[0] = 0;
    run->rep_end_ns[0] = 3000000;
    run->rep_start_ns[1] = 4000000;
    run->rep_end_ns[1] = 7000000;
    run->n_win = 3;
    run->win = calloc(3, sizeof(*run->win));
    for (int w = 0; w < 3; w++)
        run->win[w] = (struct k25_bench_window){w * K25_BENCH_WINDOW_NS, w == 2 ? 7000 : K25_BENCH_WINDOW_NS,
                                                0.25 * w * K25_BENCH_WINDOW_NS, w >= 1, w, 2 - w, 10 + w, 1 << 20,
                                                0, 0, 0, 0.0, 0};
}

static int write_run(const char *path, struct k25_bench_run *run, struct k25_error *err)
{
    struct k25_h5 h;
    int rc = k25_h5_create(&h, path, "run", err);
    if (rc)
        return rc;
    assert_false(exists(path)); /* only the temporary while writing */
    struct k25_bench_summary s;
    struct k25_bench_slo slo = {0};
    assert_int_equal(k25_bench_summarize(run, &slo, &s, NULL), K25_OK);
    json_t *sj = k25_bench_summary_json(&s);
    char *sum = json_dumps(sj, JSON_COMPACT);
    rc = k25_trace_write(&h, run, &s,
                         "{\"build\":{\"git\":\"abc\"},\"machine\":{\"hostname\":\"h\"},\"seed\":7,"
                         "\"dataset\":{\"sha256\":\"00\",\"path\":\"x.jsonl\"}}",
                         "{\"model\":\"tiny\"}", "{\"mode\":\"closed\"}", sum, err);
    free(sum);
    json_decref(sj);
    return rc;
}

static void test_round_trip(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof(path), "%s/run.h5", dir);
    struct k25_bench_run run;
    struct k25_error err;
    make_run(&run);
    assert_int_equal(write_run(path, &run, &err), K25_OK);
    assert_true(exists(path));

    struct k25_trace t;
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(t.config_json, "{\"model\":\"tiny\"}");
    assert_string_equal(t.workload_json, "{\"mode\":\"closed\"}");
    assert_non_null(strstr(t.provenance_json, "\"git\":\"abc\""));
    json_t *sj = json_loads(t.summary_json, 0, NULL);
    assert_non_null(sj);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(sj, "requests"), "completed")), 6);
    json_decref(sj);
    assert_int_equal(t.run.n_reps, 2);
    assert_int_equal(t.run.n_reqs, run.n_reqs);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(t.run.rep_start_ns[k], run.rep_start_ns[k]);
        assert_int_equal(t.run.rep_end_ns[k], run.rep_end_ns[k]);
    }
    for (size_t i = 0; i < run.n_reqs; i++) {
        const struct k25_bench_req *a = &run.reqs[i], *b = &t.run.reqs[i];
        assert_string_equal(a->id, b->id);
        assert_string_equal(a->reason, b->reason);
        assert_int_equal(a->seq, b->seq);
        assert_int_equal(a->rep, b->rep);
        assert_int_equal(a->user, b->user);
        assert_int_equal(a->line, b->line);
        assert_int_equal(a->state, b->state);
        assert_int_equal(a->n_input, b->n_input);
        assert_int_equal(a->n_output, b->n_output);
        assert_int_equal(a->max_new, b->max_new);
        assert_int_equal(a->arrival_ns, b->arrival_ns);
        assert_int_equal(a->submit_ns, b->submit_ns);
        assert_int_equal(a->admit_ns, b->admit_ns);
        assert_int_equal(a->first_ns, b->first_ns);
        assert_int_equal(a->finish_ns, b->finish_ns);
        assert_int_equal(a->n_chunks, b->n_chunks);
        for (int c = 0; c < a->n_chunks; c++) {
            assert_int_equal(a->chunk_start_ns[c], b->chunk_start_ns[c]);
            assert_int_equal(a->chunk_end_ns[c], b->chunk_end_ns[c]);
        }
        for (int k = 0; k < a->n_output; k++) {
            assert_int_equal(a->token_ns[k], b->token_ns[k]);
            assert_int_equal(a->token_ids[k], b->token_ids[k]);
        }
    }
    assert_int_equal(t.run.n_win, run.n_win);
    for (size_t w = 0; w < run.n_win; w++) {
        const struct k25_bench_window *a = &run.win[w], *b = &t.run.win[w];
        assert_int_equal(a->t_ns, b->t_ns);
        assert_int_equal(a->len_ns, b->len_ns);
        assert_float_equal(a->busy_ns, b->busy_ns, 0);
        assert_int_equal(a->rep, b->rep);
        assert_int_equal(a->n_waiting, b->n_waiting);
        assert_int_equal(a->n_running, b->n_running);
        assert_int_equal(a->kv_blocks, b->kv_blocks);
        assert_int_equal(a->mem_bytes, b->mem_bytes);
    }

    /* derived columns, read with plain HDF5 calls as any reader would */
    struct k25_h5 h;
    assert_int_equal(k25_h5_open_read(&h, path, "run", &err), K25_OK);
    struct row { double ttft_ms; char state[16]; } *rows = NULL;
    const struct k25_h5_col cols[] = {{"ttft_ms", K25_H5_F64, offsetof(struct row, ttft_ms), 0},
                                      {"state", K25_H5_STR, offsetof(struct row, state), 16}};
    size_t n;
    assert_int_equal(k25_h5_read_table(h.file, "/requests", cols, 2, sizeof(struct row), K25_H5_ANY_COUNT, (void **)&rows, &n,
                                       &err),
                     K25_OK);
    assert_float_equal(rows[1].ttft_ms, k25_bench_req_ttft_ms(&run.reqs[1]), 1e-12);
    assert_true(isnan(rows[5].ttft_ms));
    assert_string_equal(rows[5].state, "rejected");
    free(rows);
    char *seed_txt = NULL;
    int64_t seed = 0;
    assert_int_equal(k25_h5_get_attr_i64(h.meta, "seed", &seed, &err), K25_OK);
    assert_int_equal(seed, 7);
    assert_int_equal(k25_h5_get_attr_str(h.meta, "dataset_path", &seed_txt, &err), K25_OK);
    assert_string_equal(seed_txt, "x.jsonl");
    free(seed_txt);
    k25_h5_close(&h);

    /* Chrome trace: valid JSON, one slice per queue, chunk and decode token */
    char chrome[600];
    snprintf(chrome, sizeof(chrome), "%s/trace.json", dir);
    assert_int_equal(k25_trace_export_chrome(&t, chrome, &err), K25_OK);
    json_error_t je;
    json_t *cj = json_load_file(chrome, 0, &je);
    if (!cj)
        fail_msg("chrome trace: %s at %d:%d", je.text, je.line, je.column);
    json_t *ev = json_object_get(cj, "traceEvents");
    int queue = 0, prefill = 0, decode = 0, counters = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const char *cat = json_string_value(json_object_get(json_array_get(ev, i), "cat"));
        const char *ph = json_string_value(json_object_get(json_array_get(ev, i), "ph"));
        queue += cat && !strcmp(cat, "queue");
        prefill += cat && !strcmp(cat, "prefill");
        decode += cat && !strcmp(cat, "decode");
        counters += ph && !strcmp(ph, "C");
    }
    int want_chunks = 0, want_decode = 0;
    for (size_t i = 0; i < run.n_reqs; i++) {
        want_chunks += run.reqs[i].n_chunks;
        want_decode += run.reqs[i].n_output > 1 ? run.reqs[i].n_output - 1 : 0;
    }
    assert_int_equal(queue, (int)run.n_reqs);
    assert_int_equal(prefill, want_chunks);
    assert_int_equal(decode, want_decode);
    assert_int_equal(counters, 3);
    json_decref(cj);

    k25_trace_free(&t);
    k25_bench_run_free(&run);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/* A failed write leaves neither the final file nor the temporary. */
static void test_atomic_failure(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof(path), "%s/run.h5", dir);
    struct k25_bench_run run;
    struct k25_error err;
    make_run(&run);
    /* a token count that disagrees with the ragged arrays cannot be read back... */
    struct k25_h5 h;
    assert_int_equal(k25_h5_create(&h, path, "run", &err), K25_OK);
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s", h.tmp_path);
    assert_true(exists(tmp));
    /* ...and a write into a closed file fails: the temporary must go */
    H5Gclose(h.meta);
    h.meta = H5I_INVALID_HID;
    struct k25_bench_summary s;
    struct k25_bench_slo slo = {0};
    assert_int_equal(k25_bench_summarize(&run, &slo, &s, NULL), K25_OK);
    assert_int_not_equal(k25_trace_write(&h, &run, &s, "{}", "{}", "{}", "{}", &err), K25_OK);
    assert_false(exists(path));
    assert_false(exists(tmp));
    /* a directory that does not exist: clear error, nothing created */
    char bad[600];
    snprintf(bad, sizeof(bad), "%s/no/such/dir/run.h5", dir);
    assert_int_equal(k25_h5_create(&h, bad, "run", &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "no/such/dir/run.h5"));
    k25_bench_run_free(&run);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void test_refuses_other_files(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), path[512];
    struct k25_error err;
    struct k25_trace t;
    /* not HDF5 */
    snprintf(path, sizeof(path), "%s/text.h5", dir);
    tu_write_file(path, "hello\n");
    assert_int_equal(k25_trace_read(path, &t, &err), K25_EFORMAT);
    assert_non_null(strstr(err.msg, "not an HDF5 file"));
    /* another kind of k25 file */
    struct k25_h5 h;
    snprintf(path, sizeof(path), "%s/attn.h5", dir);
    assert_int_equal(k25_h5_create(&h, path, "attn-bench", &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    assert_int_equal(k25_trace_read(path, &t, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "expected 'run'"));
    /* an unknown schema version */
    snprintf(path, sizeof(path), "%s/future.h5", dir);
    assert_int_equal(k25_h5_create(&h, path, "run", &err), K25_OK);
    assert_int_equal(k25_h5_attr_i64(h.meta, "schema_version", 99, &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    assert_int_equal(k25_trace_read(path, &t, &err), K25_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "schema version 99"));
    /* a run file missing its tables */
    snprintf(path, sizeof(path), "%s/empty.h5", dir);
    assert_int_equal(k25_h5_create(&h, path, "run", &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    assert_int_equal(k25_trace_read(path, &t, &err), K25_ENOTFOUND);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void test_provenance_fields(void **state)
{
    (void)state;
    struct k25_config cfg;
    k25_config_init(&cfg);
    cfg.seed = 42;
    json_t *p = k25_provenance_collect(&cfg, "data.jsonl", "abcd", "domain == \"legal\"", "k25 bench ...");
    assert_non_null(p);
    k25_provenance_finish(p);
    const json_t *b = json_object_get(p, "build"), *m = json_object_get(p, "machine");
    assert_string_equal(json_string_value(json_object_get(b, "k25_version")), K25_VERSION);
    assert_true(json_is_string(json_object_get(b, "git")));
    assert_true(json_is_boolean(json_object_get(b, "git_dirty")) || json_is_null(json_object_get(b, "git_dirty")));
    assert_true(strlen(json_string_value(json_object_get(b, "compiler"))) > 0);
    assert_true(json_is_string(json_object_get(b, "cflags")));
    assert_true(json_is_string(json_object_get(m, "cpu_model")));  /* /proc/cpuinfo on Linux x86 */
    assert_true(json_is_string(json_object_get(m, "cpu_flags")));
    assert_true(json_integer_value(json_object_get(m, "cores_online")) >= 1);
    assert_true(json_integer_value(json_object_get(m, "threads_used")) >= 1);
    assert_non_null(json_object_get(m, "cpufreq_governor")); /* present, null where not exposed */
    assert_non_null(json_object_get(m, "boost"));
    assert_int_equal(json_array_size(json_object_get(m, "loadavg_start")), 3);
    assert_int_equal(json_array_size(json_object_get(m, "loadavg_end")), 3);
    assert_true(json_is_array(json_object_get(m, "gpus")));
    assert_true(json_is_string(json_object_get(m, "hostname")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "kernel"), "sysname")), "Linux");
    assert_int_equal(json_integer_value(json_object_get(p, "seed")), 42);
    assert_string_equal(json_string_value(json_object_get(json_object_get(p, "config"), "model")), "tiny");
    const json_t *d = json_object_get(p, "dataset");
    assert_string_equal(json_string_value(json_object_get(d, "sha256")), "abcd");
    assert_string_equal(json_string_value(json_object_get(d, "filter")), "domain == \"legal\"");
    const char *st = json_string_value(json_object_get(p, "start_time_utc"));
    const char *en = json_string_value(json_object_get(p, "end_time_utc"));
    assert_int_equal(strlen(st), 20);
    assert_true(st[19] == 'Z' && strcmp(st, en) <= 0);
    json_decref(p);
}

/* Margins for make_run's tokens: position t of request i gets 0.1 + 0.01 (i + t), NaN for request 6 (sampled). */
static void add_margins(struct k25_bench_run *run)
{
    for (size_t i = 0; i < run->n_reqs; i++) {
        struct k25_bench_req *q = &run->reqs[i];
        q->token_margins = malloc(sizeof(float) * 5);
        for (int t = 0; t < 5; t++)
            q->token_margins[t] = i == 6 ? NAN : 0.1f + 0.01f * (float)(i + (size_t)t);
    }
}

/* Writes run to DIR/name.h5 with schema_version (1: an old trace, whose margins a reader ignores). */
static void write_as(const char *dir, const char *name, struct k25_bench_run *run, int64_t schema_version)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s.h5", dir, name);
    struct k25_error err;
    struct k25_h5 h;
    assert_int_equal(k25_h5_create(&h, path, "run", &err), K25_OK);
    struct k25_bench_summary s;
    struct k25_bench_slo slo = {0};
    assert_int_equal(k25_bench_summarize(run, &slo, &s, NULL), K25_OK);
    json_t *sj = k25_bench_summary_json(&s);
    char *sum = json_dumps(sj, JSON_COMPACT);
    assert_int_equal(k25_h5_attr_i64(h.meta, "schema_version", schema_version, &err), K25_OK);
    if (k25_trace_write(&h, run, &s,
                        "{\"build\":{\"git\":\"abc\"},\"machine\":{\"hostname\":\"h\"},\"seed\":7,"
                        "\"dataset\":{\"sha256\":\"00\",\"path\":\"x.jsonl\"}}",
                        "{\"model\":\"tiny\"}", "{\"mode\":\"closed\"}", sum, &err) != K25_OK)
        fail_msg("%s", err.msg);
    free(sum);
    json_decref(sj);
}

/* The gate's generated_tokens row for baseline DIR/b.h5 against candidate DIR/c.h5. */
static struct k25_gate_row tokens_row(const char *dir, const char *b, const char *c)
{
    char pb[600], pc[600];
    snprintf(pb, sizeof(pb), "%s/%s.h5", dir, b);
    snprintf(pc, sizeof(pc), "%s/%s.h5", dir, c);
    struct k25_gate_set B, C;
    struct k25_gate_policy pol;
    struct k25_gate_opts o = {0};
    struct k25_gate_result res;
    struct k25_error err;
    k25_gate_policy_default(&pol);
    if (k25_gate_set_load(pb, &B, &err) != K25_OK || k25_gate_set_load(pc, &C, &err) != K25_OK)
        fail_msg("%s", err.msg);
    if (k25_gate_compare(&B, &C, &pol, &o, &res, &err) != K25_OK)
        fail_msg("%s", err.msg);
    struct k25_gate_row row = {0};
    for (int i = 0; i < res.n_rows; i++)
        if (res.rows[i].m->src == K25_GATE_SRC_TOKENS)
            row = res.rows[i];
    assert_non_null(row.m);
    row.m = NULL; /* points into pol, which goes out of scope */
    print_message("generated_tokens %s vs %s: %s\n", b, c, row.note);
    k25_gate_set_free(&B);
    k25_gate_set_free(&C);
    return row;
}

/*
 * The elastic queue's columns (schema 3): a timed-out request (final,
 * with its reason), priority, degraded, spilled, replayed, its SLA, and the
 * timeline's queue depths and breaker survive a round trip; the summary
 * counts them; a schema-2 trace reads as standard / not degraded / -1.
 */
static void test_elastic_queue_fields(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    struct k25_bench_run run;
    struct k25_error err;
    struct k25_trace t;
    char path[600];
    make_run(&run);
    struct k25_bench_req *q = &run.reqs[2];
    q->state = K25_REQ_TIMED_OUT;
    snprintf(q->reason, sizeof(q->reason), "waited 31000 ms > queue_timeout_ms 30000");
    run.reqs[1].priority = K25_PRIORITY_HIGH;
    run.reqs[3].priority = K25_PRIORITY_LOW;
    run.reqs[3].spilled = run.reqs[3].replayed = true;
    run.reqs[3].ttft_sla_ms = 1500;
    run.reqs[4].degraded = true;
    run.reqs[4].ttft_sla_ms = 1200;
    for (size_t w = 0; w < run.n_win; w++) {
        run.win[w].n_waiting_memory = 128 - (int)w;
        run.win[w].n_waiting_spill = 3 * (int)w;
        run.win[w].breaker_open = w == 1;
        run.win[w].breaker_busy_fraction = 0.5 + 0.25 * (double)w;
        run.win[w].n_waiting_degraded = 7 * (int)w + 1; /* schema 5 */
    }
    struct k25_bench_summary s;
    struct k25_bench_slo slo = {0};
    assert_int_equal(k25_bench_summarize(&run, &slo, &s, NULL), K25_OK);
    assert_int_equal(s.n_timed_out, 1);
    assert_int_equal(s.n_rejected, 1);
    assert_int_equal(s.n_completed, 5);
    assert_int_equal(s.n_lost, 0);
    assert_int_equal(s.n_degraded, 1);
    assert_int_equal(s.n_spilled, 1);
    assert_true(fabs(s.degraded_requests_ratio - 1.0 / 6.0) < 1e-12); /* degraded / accepted (7 - 1 rejected) */
    json_t *sj = k25_bench_summary_json(&s);
    assert_int_equal(json_integer_value(json_object_get(sj, "timed_out_requests")), 1);
    assert_int_equal(json_integer_value(json_object_get(sj, "spilled_requests")), 1);
    assert_true(fabs(json_real_value(json_object_get(sj, "degraded_requests_ratio")) - 1.0 / 6.0) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(sj, "requests"), "lost")), 0);
    json_decref(sj);

    write_as(dir, "queue", &run, K25_H5_SCHEMA_VERSION);
    snprintf(path, sizeof(path), "%s/queue.h5", dir);
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t.schema_version, K25_H5_SCHEMA_VERSION);
    for (size_t i = 0; i < run.n_reqs; i++) {
        const struct k25_bench_req *a = &run.reqs[i], *b = &t.run.reqs[i];
        assert_int_equal(a->state, b->state);
        assert_string_equal(a->reason, b->reason);
        assert_int_equal(a->priority, b->priority);
        assert_int_equal(a->spilled, b->spilled);
        assert_int_equal(a->replayed, b->replayed);
        assert_int_equal(a->degraded, b->degraded);
        assert_int_equal(a->ttft_sla_ms, b->ttft_sla_ms);
    }
    for (size_t w = 0; w < run.n_win; w++) {
        assert_int_equal(t.run.win[w].n_waiting_memory, run.win[w].n_waiting_memory);
        assert_int_equal(t.run.win[w].n_waiting_spill, run.win[w].n_waiting_spill);
        assert_int_equal(t.run.win[w].breaker_open, run.win[w].breaker_open);
        assert_true(t.run.win[w].breaker_busy_fraction == run.win[w].breaker_busy_fraction);
        assert_int_equal(t.run.win[w].n_waiting_degraded, run.win[w].n_waiting_degraded);
    }
    /* k25 inspect's condensed queue: the depths' maxima and means over the sampled windows */
    json_t *qj = k25_trace_queue_json(&t);
    assert_int_equal(json_integer_value(json_object_get(qj, "windows")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(qj, "waiting_degraded"), "max")), 15);
    assert_true(fabs(json_real_value(json_object_get(json_object_get(qj, "waiting_degraded"), "mean")) - 8.0) <
                1e-12);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(qj, "waiting_memory"), "max")), 128);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(qj, "waiting_spill"), "max")), 6);
    assert_int_equal(json_integer_value(json_object_get(qj, "breaker_open_windows")), 1);
    json_decref(qj);
    k25_trace_free(&t);
    /* the summary attributes h5dump readers see */
    char cmd[1400], *out;
    snprintf(cmd, sizeof(cmd), "h5dump -a /summary/timed_out_requests -a /summary/degraded_requests_ratio %s", path);
    int st = tu_run(cmd, &out);
    if (st != 0 || !strstr(out, "timed_out_requests") || !strstr(out, "0.16666"))
        fail_msg("%s: exit %d\n%s", cmd, st, out);
    free(out);
    /* the report's timeline data carries the degraded queue's depth (column 11) for its queue plot */
    if (tu_run("command -v gnuplot >/dev/null", NULL) == 0) {
        snprintf(cmd, sizeof(cmd), "%s report %s --out %s/rep --quiet", tu_k25(), path, dir);
        st = tu_run(cmd, &out);
        if (st != 0)
            fail_msg("%s: exit %d\n%s", cmd, st, out);
        free(out);
        snprintf(cmd, sizeof(cmd), "cut -f 10,11 %s/rep/plots/data/timeline.tsv", dir);
        assert_int_equal(tu_run(cmd, &out), 0);
        char want[256] = "";
        for (size_t w = 0; w < run.n_win; w++)
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "%d\t%d\n", run.win[w].breaker_open,
                     run.win[w].n_waiting_degraded);
        assert_string_equal(out, want);
        free(out);
        snprintf(cmd, sizeof(cmd), "test -s %s/rep/plots/run_timeline.png", dir);
        assert_int_equal(tu_run(cmd, NULL), 0);
    } else {
        print_message("gnuplot not installed: the report's queue plot is not checked\n");
    }

    /* a schema-2 trace: the queue's columns are not read (an older writer had none) */
    write_as(dir, "v2", &run, 2);
    snprintf(path, sizeof(path), "%s/v2.h5", dir);
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t.schema_version, 2);
    assert_int_equal(t.run.reqs[2].state, K25_REQ_TIMED_OUT); /* a state name, read by any version */
    assert_int_equal(t.run.reqs[1].priority, K25_PRIORITY_STANDARD);
    assert_false(t.run.reqs[4].degraded);
    assert_int_equal(t.run.win[0].n_waiting_memory, -1);
    assert_int_equal(t.run.win[0].n_waiting_degraded, -1);
    assert_true(isnan(t.run.win[0].breaker_busy_fraction));
    qj = k25_trace_queue_json(&t); /* nothing of the queue sampled */
    assert_true(json_is_null(json_object_get(qj, "waiting_memory")));
    assert_true(json_is_null(json_object_get(qj, "waiting_degraded")));
    assert_true(json_is_null(json_object_get(qj, "breaker_open_windows")));
    json_decref(qj);
    k25_trace_free(&t);

    /* a schema-4 trace: the queue's columns read, the degraded queue's depth not (-1) */
    write_as(dir, "v4", &run, 4);
    snprintf(path, sizeof(path), "%s/v4.h5", dir);
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t.schema_version, 4);
    for (size_t w = 0; w < run.n_win; w++) {
        assert_int_equal(t.run.win[w].n_waiting_memory, run.win[w].n_waiting_memory);
        assert_int_equal(t.run.win[w].n_waiting_degraded, -1);
    }
    k25_trace_free(&t);
    k25_bench_run_free(&run);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/*
 * A trace the schema-4 writer made (`k25 bench` on tiny with --breaker-enabled,
 * tests/data/trace-v4.h5): its /timeline has no n_waiting_degraded column at
 * all; it reads as -1 beside the schema-3 columns it does hold, and `k25
 * inspect --json` shows the depth as null; the report plots it without the
 * degraded queue.
 */
static void test_stored_v4_trace(void **state)
{
    (void)state;
    const char *path = "tests/data/trace-v4.h5";
    struct k25_trace t;
    struct k25_error err;
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t.schema_version, 4);
    assert_true(t.run.n_win > 0);
    size_t sampled = 0;
    for (size_t w = 0; w < t.run.n_win; w++) {
        assert_int_equal(t.run.win[w].n_waiting_degraded, -1);
        if (t.run.win[w].n_waiting >= 0) {
            sampled++;
            assert_true(t.run.win[w].n_waiting_memory >= 0);
            assert_true(t.run.win[w].breaker_open == 0 || t.run.win[w].breaker_open == 1);
            assert_false(isnan(t.run.win[w].breaker_busy_fraction)); /* the breaker was on */
        }
    }
    assert_true(sampled > 0);
    k25_trace_free(&t);

    char cmd[600], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s inspect %s --json", tu_k25(), path);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fail_msg("%s: exit %d\n%s", cmd, st, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j)
        fail_msg("%s: %s\n%s", cmd, je.text, out);
    const json_t *q = json_object_get(j, "queue");
    assert_true(json_is_object(q));
    assert_int_equal(json_integer_value(json_object_get(q, "windows")), (json_int_t)sampled);
    assert_true(json_is_null(json_object_get(q, "waiting_degraded")));
    assert_true(json_is_integer(json_object_get(json_object_get(q, "waiting_memory"), "max")));
    assert_true(json_is_integer(json_object_get(q, "breaker_open_windows")));
    json_decref(j);
    free(out);
}

/*
 * KV tiers and prefix caching (schema 4): per-request cached_tokens, block
 * reads and hits, wait and bytes moved survive a round trip with the
 * engine's run totals; the summary's kv_cache_hit_rate is the sum of hits
 * over the sum of reads (checked against a hand count), null with tiers off;
 * TTFT splits by priority and degraded; a schema-3 trace reads as zeros with
 * the hit rate not measured.
 */
static void test_kv_tier_fields(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    struct k25_bench_run run;
    struct k25_error err;
    struct k25_trace t;
    char path[600];
    make_run(&run);
    int64_t reads = 0, hits = 0;
    for (size_t i = 0; i < run.n_reqs; i++) {
        struct k25_bench_req *q = &run.reqs[i];
        q->cached_tokens = 16 * (int32_t)(i % 2);
        q->kv_block_reads = 10 + 7 * (int64_t)i;
        q->kv_block_hits = q->kv_block_reads - (int64_t)i; /* request i missed i reads */
        q->kv_tier_wait_ns = 250000 * (int64_t)i;
        q->kv_tier_bytes_moved = 4096 * (int64_t)i;
        reads += q->kv_block_reads;
        hits += q->kv_block_hits;
    }
    run.reqs[1].priority = K25_PRIORITY_HIGH;
    run.reqs[3].priority = K25_PRIORITY_LOW;
    run.reqs[4].degraded = true;
    run.eng = (struct k25_bench_engine_totals){.measured = true, .kv_tiers = true, .kv_block_reads = reads + 3,
                                               .kv_block_hits = hits, .kv_tier_wait_ns = 123456789,
                                               .kv_tier_max_step_wait_ns = 5000000, .kv_tier_bytes_moved = 1 << 20,
                                               .kv_tier_copy_ns = 2000000, .kv_tier_evictions = 9,
                                               .kv_tier_promotions = 7, .kv_tier_demotions = 4,
                                               .prefix_hit_tokens = 48, .rejected_degraded = 2, .spill_fsyncs = 5,
                                               .breaker_opens = 1};
    struct k25_bench_summary s;
    struct k25_bench_slo slo = {0};
    assert_int_equal(k25_bench_summarize(&run, &slo, &s, NULL), K25_OK);
    assert_true(s.kv_tiers);
    assert_int_equal(s.kv_block_reads, reads);
    assert_true(fabs(s.kv_cache_hit_rate - (double)hits / (double)reads) < 1e-12);
    assert_true(s.kv_cache_hit_rate < 1.0);
    assert_int_equal(s.kv_wait_ms.n, 6); /* completed requests (5 is rejected) */
    /* TTFT by priority and degraded: the completed high one, the low one, the degraded standard one */
    assert_int_equal(s.ttft_prio[K25_PRIORITY_HIGH][0].n, 1);
    assert_int_equal(s.ttft_prio[K25_PRIORITY_LOW][0].n, 1);
    assert_int_equal(s.ttft_prio[K25_PRIORITY_STANDARD][1].n, 1);
    assert_int_equal(s.ttft_prio[K25_PRIORITY_STANDARD][0].n, 3);
    assert_true(s.ttft_prio[K25_PRIORITY_HIGH][0].mean == k25_bench_req_ttft_ms(&run.reqs[1]));
    json_t *sj = k25_bench_summary_json(&s);
    assert_true(json_is_true(json_object_get(sj, "kv_tiers_enabled")));
    assert_true(fabs(json_real_value(json_object_get(sj, "kv_cache_hit_rate")) - (double)hits / (double)reads) <
                1e-12);
    json_t *kt = json_object_get(sj, "kv_tiers");
    assert_int_equal(json_integer_value(json_object_get(kt, "block_reads")), reads);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(kt, "engine"), "evictions")), 9);
    assert_int_equal(json_integer_value(json_object_get(kt, "promotions")), 7); /* issue 36 */
    assert_int_equal(json_integer_value(json_object_get(kt, "demotions")), 4);
    json_t *bp = json_object_get(json_object_get(sj, "ttft_ms_by_priority"), "standard");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(bp, "degraded"), "n")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(sj, "queue"), "spill_fsyncs")), 5);
    json_decref(sj);

    write_as(dir, "tiers", &run, K25_H5_SCHEMA_VERSION);
    snprintf(path, sizeof(path), "%s/tiers.h5", dir);
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    for (size_t i = 0; i < run.n_reqs; i++) {
        const struct k25_bench_req *a = &run.reqs[i], *b = &t.run.reqs[i];
        assert_int_equal(a->cached_tokens, b->cached_tokens);
        assert_int_equal(a->kv_block_reads, b->kv_block_reads);
        assert_int_equal(a->kv_block_hits, b->kv_block_hits);
        assert_int_equal(a->kv_tier_wait_ns, b->kv_tier_wait_ns);
        assert_int_equal(a->kv_tier_bytes_moved, b->kv_tier_bytes_moved);
    }
    const struct k25_bench_engine_totals *ea = &run.eng, *eb = &t.run.eng;
    assert_true(eb->measured && eb->kv_tiers);
    assert_int_equal(eb->kv_block_reads, ea->kv_block_reads);
    assert_int_equal(eb->kv_block_hits, ea->kv_block_hits);
    assert_int_equal(eb->kv_tier_wait_ns, ea->kv_tier_wait_ns);
    assert_int_equal(eb->kv_tier_max_step_wait_ns, ea->kv_tier_max_step_wait_ns);
    assert_int_equal(eb->kv_tier_bytes_moved, ea->kv_tier_bytes_moved);
    assert_int_equal(eb->kv_tier_copy_ns, ea->kv_tier_copy_ns);
    assert_int_equal(eb->kv_tier_evictions, ea->kv_tier_evictions);
    assert_int_equal(eb->kv_tier_promotions, 7);
    assert_int_equal(eb->kv_tier_demotions, 4);
    assert_int_equal(eb->prefix_hit_tokens, ea->prefix_hit_tokens);
    assert_int_equal(eb->rejected_degraded, ea->rejected_degraded);
    assert_int_equal(eb->spill_fsyncs, ea->spill_fsyncs);
    assert_int_equal(eb->breaker_opens, ea->breaker_opens);
    struct k25_bench_summary s2;
    assert_int_equal(k25_bench_summarize(&t.run, &slo, &s2, NULL), K25_OK);
    assert_true(s2.kv_cache_hit_rate == s.kv_cache_hit_rate);
    k25_trace_free(&t);
    char cmd[1400], *out;
    snprintf(cmd, sizeof(cmd), "h5dump -a /summary/kv_tier_evictions -d /requests %s", path);
    int st = tu_run(cmd, &out);
    if (st != 0 || !strstr(out, "kv_tier_evictions") || !strstr(out, "kv_cache_hit_rate") ||
        !strstr(out, "cached_tokens"))
        fail_msg("%s: exit %d\n%s", cmd, st, out);
    free(out);

    /* a schema-3 trace: no tier columns, the hit rate not measured (null, not 1) */
    write_as(dir, "v3", &run, 3);
    snprintf(path, sizeof(path), "%s/v3.h5", dir);
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t.run.reqs[3].kv_block_reads, 0);
    assert_int_equal(t.run.reqs[1].cached_tokens, 0);
    assert_false(t.run.eng.measured);
    assert_int_equal(t.run.reqs[1].priority, K25_PRIORITY_HIGH); /* schema 3's columns still read */
    assert_int_equal(k25_bench_summarize(&t.run, &slo, &s2, NULL), K25_OK);
    assert_true(isnan(s2.kv_cache_hit_rate));
    sj = k25_bench_summary_json(&s2);
    assert_true(json_is_null(json_object_get(sj, "kv_cache_hit_rate")));
    assert_true(json_is_null(json_object_get(sj, "kv_tiers_enabled")));
    json_decref(sj);
    k25_trace_free(&t);

    /* tiers off: the rate is null and kv_tiers_enabled false (the report's "n/a (tiers off)") */
    run.eng.kv_tiers = false;
    assert_int_equal(k25_bench_summarize(&run, &slo, &s2, NULL), K25_OK);
    sj = k25_bench_summary_json(&s2);
    assert_true(json_is_false(json_object_get(sj, "kv_tiers_enabled")));
    assert_true(json_is_null(json_object_get(sj, "kv_cache_hit_rate")));
    assert_null(json_object_get(sj, "kv_tiers"));
    json_decref(sj);
    k25_bench_run_free(&run);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/*
 * Token margins: written beside the tokens (/tokens/margin, NaN kept) and
 * read back; a schema-1 trace reads without them.  The gate's token check
 * applies the token-identity rule: identical passes; a divergence at a
 * near-tie (both margins <= 2 tau) passes with a note and the later tokens
 * unverified; a divergence above the bound fails (either side's margin);
 * a baseline without margins is compared exactly.
 */
static void test_token_margins_and_gate_rule(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    struct k25_bench_run run;
    struct k25_error err;
    struct k25_trace t;
    char path[600];
    make_run(&run);
    add_margins(&run);
    write_as(dir, "base", &run, K25_H5_SCHEMA_VERSION);
    snprintf(path, sizeof(path), "%s/base.h5", dir);
    if (k25_trace_read(path, &t, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(t.schema_version, K25_H5_SCHEMA_VERSION);
    for (size_t i = 0; i < run.n_reqs; i++) {
        const struct k25_bench_req *a = &run.reqs[i], *b = &t.run.reqs[i];
        assert_non_null(b->token_margins);
        for (int k = 0; k < a->n_output; k++)
            assert_true(i == 6 ? isnan(b->token_margins[k]) : b->token_margins[k] == a->token_margins[k]);
    }
    k25_trace_free(&t);
    write_as(dir, "old", &run, 1);
    snprintf(path, sizeof(path), "%s/old.h5", dir);
    assert_int_equal(k25_trace_read(path, &t, &err), K25_OK);
    assert_int_equal(t.schema_version, 1);
    for (size_t i = 0; i < t.run.n_reqs; i++)
        assert_null(t.run.reqs[i].token_margins);
    k25_trace_free(&t);

    /* request 3 has 4 tokens; the candidates change position 1 of it */
    struct k25_bench_req *q = &run.reqs[3];
    assert_int_equal(q->n_output, 4);
    struct k25_gate_row r = tokens_row(dir, "base", "base");
    assert_int_equal(r.verdict, K25_V_SAME);
    assert_non_null(strstr(r.note, "7 of 7 sequences identical"));

    q->token_ids[1] ^= 1;
    q->token_margins[1] = 0.0004f; /* the candidate's own margin there */
    write_as(dir, "cand", &run, K25_H5_SCHEMA_VERSION);
    q->token_ids[1] ^= 1;
    r = tokens_row(dir, "base", "cand"); /* baseline margin 0.14: above the bound */
    assert_int_equal(r.verdict, K25_V_WORSE);
    assert_true(r.fails);
    assert_non_null(strstr(r.note, "1 diverged above the near-tie bound (at position 1 of req-\"3\""));
    assert_non_null(strstr(r.note, "margin 0.14 > bound 0.002"));

    q->token_margins[1] = 0.0003f; /* a near-tie in the baseline */
    write_as(dir, "tie", &run, K25_H5_SCHEMA_VERSION);
    r = tokens_row(dir, "tie", "cand");
    assert_int_equal(r.verdict, K25_V_SAME);
    assert_false(r.fails);
    assert_non_null(strstr(r.note, "6 of 7 sequences identical, 1 diverged at a near-tie (margin 0.0003 <= bound 0.002 "
                                   "at position 1 of req-\"3\""));
    assert_non_null(strstr(r.note, "2 tokens unverified"));

    q->token_margins[1] = 0.5f; /* the candidate was not near a tie there: the rule fails it */
    q->token_ids[1] ^= 1;
    write_as(dir, "cand2", &run, K25_H5_SCHEMA_VERSION);
    q->token_ids[1] ^= 1;
    r = tokens_row(dir, "tie", "cand2");
    assert_int_equal(r.verdict, K25_V_WORSE);
    assert_non_null(strstr(r.note, "candidate 0.5 > bound"));

    /* an old baseline: exact comparison, said in the note */
    r = tokens_row(dir, "old", "base");
    assert_int_equal(r.verdict, K25_V_SAME);
    assert_non_null(strstr(r.note, "7 compared exactly: the baseline trace has no token margins (schema 1)"));
    r = tokens_row(dir, "old", "cand");
    assert_int_equal(r.verdict, K25_V_WORSE);

    k25_bench_run_free(&run);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_atomic_failure),
        cmocka_unit_test(test_refuses_other_files),
        cmocka_unit_test(test_provenance_fields),
        cmocka_unit_test(test_token_margins_and_gate_rule),
        cmocka_unit_test(test_elastic_queue_fields),
        cmocka_unit_test(test_kv_tier_fields),
        cmocka_unit_test(test_stored_v4_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
