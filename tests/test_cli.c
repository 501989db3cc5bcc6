/*
 * test_cli.c - integration tests: drive the k25 binary (`k25 run`) the way
 * users and scripts do, on the tiny preset, including every bad input.
 */
#include "testutil.h"

#include <jansson.h>


/* Runs `k25 ARGS`, returns status, output in *out. */
static int k25(const char *args, char **out)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", tu_k25(), args);
    return tu_run(cmd, out);
}

static void expect_fail(const char *args, int status, const char *needle)
{
    char *out;
    int st = k25(args, &out);
    if (st != status || !strstr(out, needle))
        fail_msg("k25 %s\n  exit %d (want %d), output:\n%s\n  (wanted to find \"%s\")", args, st, status, out,
                 needle);
    free(out);
}

static json_t *run_json(const char *args)
{
    char full[2048], *out;
    snprintf(full, sizeof(full), "run --model tiny --quiet --json %s 2>/dev/null", args);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", tu_k25(), full);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t je;
    json_t *j = json_loadf(p, 0, &je);
    int st = pclose(p);
    if (!j || st != 0) {
        k25(full, &out);
        fail_msg("k25 %s failed (%d): %s\n%s", full, st, je.text, out);
    }
    return j;
}

static void test_help(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(k25("--help", &out), 0);
    assert_non_null(strstr(out, "run"));
    assert_non_null(strstr(out, "config"));
    free(out);
    assert_int_equal(k25("run --help", &out), 0);
    assert_non_null(strstr(out, "--prompt"));
    assert_non_null(strstr(out, "--prefill-chunk-size")); /* engine flags listed */
    free(out);
    expect_fail("nosuch", 2, "unknown command 'nosuch'");
}

static void test_run_json(void **state)
{
    (void)state;
    json_t *j = run_json("--prompt 'The party shall give notice.' --max-tokens 8");
    assert_int_equal(json_array_size(json_object_get(j, "output_ids")), 8);
    assert_int_equal(json_integer_value(json_object_get(j, "input_tokens")), 28);
    assert_int_equal(json_array_size(json_object_get(j, "input_ids")), 28);
    json_t *t = json_object_get(j, "timing");
    assert_true(json_real_value(json_object_get(t, "ttft_ms")) > 0);
    assert_true(json_real_value(json_object_get(t, "prefill_tok_s")) > 0);
    assert_true(json_real_value(json_object_get(t, "decode_tok_s")) > 0);
    /* the median gap between the 8 tokens: within the decode time, and no more than it allows on average
     * for half the gaps (a median is at most twice the mean of non-negative gaps) */
    double itl = json_real_value(json_object_get(t, "itl_median_ms")), dec = json_real_value(json_object_get(t, "decode_ms"));
    assert_true(itl > 0 && itl <= dec && itl <= 2.0 * dec / 7);
    json_t *c = json_object_get(j, "config");
    assert_int_equal(json_integer_value(json_object_get(c, "prefill_chunk_size")), 2048);
    assert_string_equal(json_string_value(json_object_get(c, "model")), "tiny");
    assert_true(json_integer_value(json_object_get(json_object_get(j, "memory"), "peak_kv_bytes")) > 0);
    json_decref(j);
}

/* Same seed and threads: identical tokens across processes; another seed differs. */
static void test_determinism_across_processes(void **state)
{
    (void)state;
    const char *a = "--prompt 'Notice shall be given' --max-tokens 24 --temperature 0.9 --threads 2";
    char args[512];
    snprintf(args, sizeof(args), "%s --seed 5", a);
    json_t *j1 = run_json(args), *j2 = run_json(args);
    assert_true(json_equal(json_object_get(j1, "output_ids"), json_object_get(j2, "output_ids")));
    snprintf(args, sizeof(args), "%s --seed 6", a);
    json_t *j3 = run_json(args);
    assert_false(json_equal(json_object_get(j1, "output_ids"), json_object_get(j3, "output_ids")));
    json_decref(j1);
    json_decref(j2);
    json_decref(j3);
}

static void test_config_and_cli(void **state)
{
    (void)state;
    char cfg[512], args[1024];
    snprintf(cfg, sizeof(cfg), "%s/k25.yaml", tu_dir);
    tu_write_file(cfg, "# test config\nprefill_chunk_size: 64\nmax_batch_size: 4\n");
    /* the file alone: 300 tokens in chunks of 64 = 5 chunks */
    snprintf(args, sizeof(args), "--config %s --prompt x --prompt-len 300 --max-tokens 2", cfg);
    json_t *j = run_json(args);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "timing"), "prefill_chunks")), 5);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "config"), "max_batch_size")), 4);
    json_decref(j);
    /* the flag wins over the file: chunks of 100 = 3 */
    snprintf(args, sizeof(args), "--prefill-chunk-size 100 --config %s --prompt x --prompt-len 300 --max-tokens 2",
             cfg);
    j = run_json(args);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "timing"), "prefill_chunks")), 3);
    json_decref(j);
    /* one-pass prefill */
    snprintf(args, sizeof(args), "--config %s --disable-prefill-optimization --prompt x --prompt-len 300 --max-tokens 2",
             cfg);
    j = run_json(args);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "timing"), "prefill_chunks")), 1);
    json_decref(j);
}

static void test_input_ids(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(k25("run --model tiny --quiet --input-ids 72,101,108,108,111 --max-tokens 4 2>/dev/null", &out), 0);
    /* ids in, ids out: four comma-separated integers on the first line */
    int a, b, c, d;
    assert_int_equal(sscanf(out, "%d,%d,%d,%d", &a, &b, &c, &d), 4);
    free(out);
}

static void test_log_lines(void **state)
{
    (void)state;
    char log[512], args[1024], *out;
    snprintf(log, sizeof(log), "%s/engine.log", tu_dir);
    snprintf(args, sizeof(args),
             "run --model tiny --quiet --prompt x --prompt-len 600 --prefill-chunk-size 256 --max-tokens 3 "
             "--log-level debug --log-file %s",
             log);
    assert_int_equal(k25(args, &out), 0);
    free(out);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cat %s", log);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "[PREFILL] req_id=run seq_len=600 chunk_count=3 avg_time_per_chunk="));
    assert_non_null(strstr(out, "[DECODE] req_id=run token_id="));
    assert_non_null(strstr(out, "cache_hit=True"));
    assert_non_null(strstr(out, "[KV_CACHE] block_id=0 evict_reason=REQUEST_FINISHED"));
    free(out);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    char cfg[512], args[1024];
    expect_fail("run --model tiny", 2, "exactly one of --prompt");
    expect_fail("run --model tiny --prompt a --input-ids 1", 2, "exactly one of --prompt");
    expect_fail("run --model tiny --input-ids 1,x,3", 2, "column 3");
    expect_fail("run --model tiny --input-ids 1,300", 2, "outside the vocabulary");
    expect_fail("run --model tiny --prompt a --bogus", 2, "'--bogus': unknown option");
    expect_fail("run --model tiny --prompt a --max-tokens 0", 2, "'--max-tokens': expected a positive integer");
    expect_fail("run --model tiny --prompt a --max-tokens", 2, "missing value");
    expect_fail("run --model nosuch --prompt a", 2, "neither a preset");
    expect_fail("run --model tiny --prompt a --prefill-chunk-size -3", 2, "--prefill-chunk-size");
    expect_fail("run --model tiny --prompt a --kv-cache-dtype int4 --kv-quant-group 48", 2, "kv_quant_group");
    expect_fail("run --model tiny --prompt-file /nonexistent/p.txt", 2, "/nonexistent/p.txt");
    snprintf(cfg, sizeof(cfg), "%s/bad.yaml", tu_dir);
    tu_write_file(cfg, "max_batch_size: 8\nprefill_chunk_sise: 512\n");
    snprintf(args, sizeof(args), "run --model tiny --prompt a --config %s", cfg);
    char want[600];
    snprintf(want, sizeof(want), "%s:2:", cfg);
    expect_fail(args, 2, want);
    expect_fail(args, 2, "prefill_chunk_size"); /* did you mean */
    snprintf(args, sizeof(args), "run --model tiny --prompt a --log-level info --log-file %s/no/dir/x.log", tu_dir);
    expect_fail(args, 1, "cannot open the log");
}


/*
 * The shared option parser (cli/cliopt.c) behind every command but
 * bench and serve: --key=value everywhere, "did you mean", errors naming
 * the option, --help generated from the table.
 */
static void test_shared_parser(void **state)
{
    (void)state;
    char *out;
    /* --key=value is accepted by every converted command */
    json_t *j = run_json("--prompt=abc --max-tokens=3 --prompt-len=10");
    assert_int_equal(json_array_size(json_object_get(j, "output_ids")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "input_tokens")), 10);
    json_decref(j);
    assert_int_equal(k25("mem --model tiny --context=4k --batch=2 --json", &out), 0);
    assert_non_null(strstr(out, "\"context\": 4096"));
    assert_non_null(strstr(out, "\"batch\": 2"));
    free(out);
    /* did you mean: the command's own options and the engine flags */
    expect_fail("run --model tiny --promt a", 2, "'--promt': unknown option (did you mean '--prompt'?)");
    expect_fail("run --model tiny --prompt a --prefil-chunk-size 5", 2, "did you mean '--prefill-chunk-size'?");
    expect_fail("gate --baseline a --candidate b --polcy p", 2, "did you mean '--policy'?");
    expect_fail("sweep sweeps/ci-smoke.yaml --dry-rn", 2, "did you mean '--dry-run'?");
    expect_fail("logs x.log --cout", 2, "did you mean '--count'?");
    expect_fail("inspect x.h5 --jsn", 2, "did you mean '--json'?");
    expect_fail("report x.h5 --out d --titel T", 2, "did you mean '--title'?");
    expect_fail("gold validate x.jsonl --sanitise strip", 2, "did you mean '--sanitize'?");
    expect_fail("attn-bench --head 4", 2, "did you mean '--heads'?");
    expect_fail("config --jsno", 2, "unknown option '--jsno' (did you mean '--json'?)");
    /* ranges, choices and missing values name the option */
    expect_fail("gate --ab a b --rounds 40", 2, "'--rounds': expected an integer in 2..32, got 40");
    expect_fail("sweep sweeps/ci-smoke.yaml --jobs=0", 2, "'--jobs': expected a positive integer up to 100000");
    expect_fail("report x.h5 --out d --format gif", 2, "'--format': unknown choice 'gif' (png, svg, pdf)");
    expect_fail("mem --model tiny --context 12q", 2, "'--context': expected a positive count");
    expect_fail("attn-bench --repeat", 2, "'--repeat': missing value");
    expect_fail("logs --tag", 2, "'--tag': missing value");
    expect_fail("gold generate --count 0", 2, "'--count': bad count '0'");
    /* --help from the table: usage, every option with its default and range */
    assert_int_equal(k25("gate --help", &out), 0);
    assert_non_null(strstr(out, "usage: k25 gate"));
    assert_non_null(strstr(out, "--rounds N"));
    assert_non_null(strstr(out, "(2..32; default: 5)"));
    free(out);
    assert_int_equal(k25("report --help", &out), 0);
    assert_non_null(strstr(out, "--format png|svg|pdf"));
    assert_non_null(strstr(out, "--quiet, -q"));
    free(out);
    assert_int_equal(k25("mem --help", &out), 0);
    assert_non_null(strstr(out, "--context N"));
    assert_non_null(strstr(out, "--kv-cache-dtype")); /* engine flags listed */
    free(out);
    assert_int_equal(k25("logs --help", &out), 0);
    assert_non_null(strstr(out, "--stats FIELD"));
    free(out);
}

/* Installed alias names dispatch on argv[0]. */
static void test_alias(void **state)
{
    (void)state;
    char link[512], cmd[1200], *out;
    char real[4096];
    assert_non_null(realpath(tu_k25(), real));
    snprintf(link, sizeof(link), "%s/k25-run", tu_dir);
    assert_int_equal(symlink(real, link), 0);
    snprintf(cmd, sizeof(cmd), "%s --help", link);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "usage: k25 run"));
    free(out);
}

int main(void)
{
    if (access(tu_k25(), X_OK) != 0) {
        fprintf(stderr, "test_cli: %s not built\n", tu_k25());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_run_json),
        cmocka_unit_test(test_determinism_across_processes),
        cmocka_unit_test(test_config_and_cli),
        cmocka_unit_test(test_input_ids),
        cmocka_unit_test(test_log_lines),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_shared_parser),
        cmocka_unit_test(test_alias),
    };
    return cmocka_run_group_tests_name("cli", tests, tu_group_setup, tu_group_teardown);
}
