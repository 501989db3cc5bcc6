/*
 * test_logs.c - `k25 logs` (alias k25-log-analyzer) on a hand-made log with
 * known answers, on a log the engine writes, and on bad input.
 */
#include "testutil.h"

static const char *LOG =
    "[PREFILL] req_id=r1 seq_len=1000 chunk_count=1 avg_time_per_chunk=10.0ms\n"
    "[PREFILL] req_id=r2 seq_len=40000 chunk_count=20 avg_time_per_chunk=30.0ms\n"
    "[QUEUE] req_id=abc priority=high queue_time=842ms degraded=False\n"
    "[QUEUE] req_id=abd priority=low queue_time=12ms degraded=True\n"
    "not a log line\n"
    "[DECODE] req_id=r1 token_id=5 kv_block_access=hot(3) cache_hit=True\n"
    "[PREFILL] req_id=r3 seq_len=50000 chunk_count=25 avg_time_per_chunk=50.0ms\n";

static char *run(const char *args, int *status)
{
    char cmd[2048], *out;
    snprintf(cmd, sizeof(cmd), "%s logs %s", tu_k25(), args);
    *status = tu_run(cmd, &out);
    return out;
}

static void test_known_answers(void **state)
{
    (void)state;
    char path[512], args[1024];
    snprintf(path, sizeof(path), "%s/a.log", tu_dir);
    tu_write_file(path, LOG);
    int st;
    char *out;

    snprintf(args, sizeof(args), "%s --filter 'degraded==True' --count 2>/dev/null", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_string_equal(out, "1\n");
    free(out);

    snprintf(args, sizeof(args), "%s --tag PREFILL --filter 'seq_len >= 32768 && avg_time_per_chunk > 40' 2>/dev/null",
             path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_string_equal(out, "[PREFILL] req_id=r3 seq_len=50000 chunk_count=25 avg_time_per_chunk=50.0ms\n");
    free(out);

    /* mean of 10, 30, 50 = 30; P50 = 2nd of 3 = 30; P90 needs 10 samples */
    snprintf(args, sizeof(args), "%s --tag PREFILL --stats avg_time_per_chunk --json 2>/dev/null", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\"n\": 3"));
    assert_non_null(strstr(out, "\"mean\": 30"));
    assert_non_null(strstr(out, "\"p50\": 30"));
    assert_non_null(strstr(out, "\"p90\": null"));
    assert_non_null(strstr(out, "\"max\": 50"));
    assert_non_null(strstr(out, "\"unit\": \"ms\"")); /* issue 32: statistics with their unit */
    free(out);
    snprintf(args, sizeof(args), "%s --tag PREFILL --stats avg_time_per_chunk 2>/dev/null", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    if (!strstr(out, "avg_time_per_chunk (ms): n=3 mean=30 ms P50=30 ms P90=n/a P99=n/a max=50 ms"))
        fail_msg("got: %s", out);
    free(out);
    snprintf(args, sizeof(args), "%s --tag PREFILL --stats seq_len 2>/dev/null", path);
    out = run(args, &st);
    assert_non_null(strstr(out, "seq_len (tokens): n=3"));
    free(out);
    /* --help names --by in its usage line */
    out = run("--help", &st);
    assert_non_null(strstr(out, "[--count [--by FIELD]]"));
    free(out);

    /* the malformed line is skipped and reported with its line number */
    snprintf(args, sizeof(args), "%s --count", path);
    out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "skipped (first: line 5)"));
    assert_non_null(strstr(out, "6\n"));
    free(out);
}

static void test_bad_input(void **state)
{
    (void)state;
    char path[512], args[1024];
    snprintf(path, sizeof(path), "%s/b.log", tu_dir);
    tu_write_file(path, LOG);
    int st;
    char *out;
    snprintf(args, sizeof(args), "%s --filter 'seq_len = 3'", path);
    out = run(args, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "column 9"));
    free(out);
    out = run("/nonexistent/k25.log --count", &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "/nonexistent/k25.log"));
    free(out);
    out = run("--bogus", &st);
    assert_int_equal(st, 2);
    free(out);
}

/* A log the engine itself writes, read through the alias name. */
static void test_engine_log_and_alias(void **state)
{
    (void)state;
    char log[512], cmd[2048], link[512], real[4096], *out;
    snprintf(log, sizeof(log), "%s/engine.log", tu_dir);
    snprintf(cmd, sizeof(cmd),
             "%s run --model tiny --quiet --prompt x --prompt-len 300 --prefill-chunk-size 128 --max-tokens 4 "
             "--log-level debug --log-file %s > /dev/null 2>&1",
             tu_k25(), log);
    assert_int_equal(tu_run(cmd, NULL), 0);
    assert_non_null(realpath(tu_k25(), real));
    snprintf(link, sizeof(link), "%s/k25-log-analyzer", tu_dir);
    assert_int_equal(symlink(real, link), 0);
    snprintf(cmd, sizeof(cmd), "%s %s --tag DECODE --count 2>&1", link, log);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_string_equal(out, "4\n"); /* one [DECODE] line per generated token */
    free(out);
    snprintf(cmd, sizeof(cmd), "%s %s --tag PREFILL --filter 'chunk_count == 3 && seq_len == 300' --count 2>&1", link,
             log);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_string_equal(out, "1\n");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_engine_log_and_alias),
    };
    return cmocka_run_group_tests_name("logs", tests, tu_group_setup, tu_group_teardown);
}
