/*
 * test_config.c - the configuration system: defaults, the key table,
 * parsing each type, YAML files (every bad-input case names file, line and
 * key), cross-key validation, JSON, the command-line layer
 * (k25_cli_apply_config) and the `k25 config` subcommand, in process and
 * through the binary.
 */
#include "testutil.h"

#include "cli.h"
#include "harness.h"
#include "k25.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sys/stat.h>

static char *g_dir; /* temporary directory of the group */

/* Writes text to g_dir/name; path receives the full path. */
static void write_tmp(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", g_dir, name);
    tu_write_file(path, text);
}

/* Loads YAML text (written to g_dir/name) on top of defaults. */
static int load_text(const char *name, const char *text, struct k25_config *cfg,
                     struct k25_error *err, char *path, size_t cap)
{
    write_tmp(name, text, path, cap);
    k25_config_init(cfg);
    k25_error_clear(err);
    return k25_config_load_yaml(cfg, path, err);
}

/* Asserts that err is exactly: code, "PATH:LINE: 'FIELD': WHAT". */
static void assert_file_error(const struct k25_error *err, int rc, int code, const char *path,
                              int line, const char *field, const char *what)
{
    char want[2048];
    if (field)
        snprintf(want, sizeof(want), "%s:%d: '%s': %s", path, line, field, what);
    else
        snprintf(want, sizeof(want), "%s:%d: %s", path, line, what);
    assert_int_equal(rc, code);
    assert_int_equal(err->code, code);
    assert_string_equal(err->msg, want);
    assert_string_equal(err->file, path);
    assert_int_equal(err->line, line);
    assert_string_equal(err->field, field ? field : "");
}

static int group_setup(void **state)
{
    (void)state;
    g_dir = tu_tmpdir();
    return g_dir ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    int rc = tu_run(cmd, NULL);
    free(g_dir);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ defaults */

static void test_defaults(void **state)
{
    (void)state;
    struct k25_config c;
    memset(&c, 0x5a, sizeof(c));
    k25_config_init(&c);
    assert_string_equal(c.model, "tiny");
    assert_int_equal(c.max_batch_size, 8);
    assert_int_equal(c.kv_cache_dtype, K25_DTYPE_FP32);
    assert_int_equal(c.prefill_chunk_size, 2048);
    assert_int_equal(c.decode_max_tokens, 1024);
    assert_int_equal(c.queue_timeout_ms, 30000);
    assert_int_equal(c.max_num_batched_tokens, 8192);
    assert_true(c.kv_compression_ratio == 0.85);
    assert_true(c.kv_merge_threshold == 0.92);
    assert_int_equal(c.kv_block_size, 256);
    assert_int_equal(c.kv_hot_tokens, 0); /* KV tiers off */
    assert_true(c.kv_warm_budget_mb == 0.0);
    assert_string_equal(c.kv_cold_dir, "");
    assert_int_equal(c.memory_budget_mb, 0);
    assert_false(c.disable_prefill_optimization);
    assert_true(c.rope_theta == 0.0);
    assert_int_equal(c.seed, 0);
    assert_int_equal(c.threads, 0);
    assert_true(c.temperature == 0.0);
    assert_true(c.top_p == 1.0);
    assert_int_equal(c.log_level, K25_LOG_OFF);
    assert_string_equal(c.log_file, "");

    struct k25_error err;
    assert_int_equal(k25_config_validate(&c, &err), 0);
    assert_string_equal(k25_dtype_name(K25_DTYPE_INT4), "int4");
    assert_string_equal(k25_hint_name(K25_HINT_LEGAL_DOC), "legal_doc");
}

/*
 * The key table covers every key with all its texts, and each default
 * text, set through k25_config_set, gives back exactly k25_config_init.
 */
static void test_key_table(void **state)
{
    (void)state;
    int n = k25_config_key_count();
    assert_int_equal(n, 47); /* + kv_quant_*, kv_sink/recent_tokens, backend, the queue and breaker keys,
                               * weight_dtype, quantize_weights, weight_quant_group, cpu_kernels, cuda_gemm,
                               * enable_prefix_caching, kv_hot_tokens, kv_warm_budget_mb, kv_cold_dir, ignore_eos, max_model_len,
                               * kv_tier_policy and block_pattern_hint (issue 36: built, no longer removed) */
    assert_null(k25_config_key(-1));
    assert_null(k25_config_key(n));
    struct k25_config def, c;
    k25_config_init(&def);
    memset(&c, 0, sizeof(c)); /* not defaults: every key must be set below */
    for (int i = 0; i < n; i++) {
        const struct k25_config_key_info *k = k25_config_key(i);
        assert_non_null(k);
        assert_true(k->key && *k->key && k->type && *k->type && k->deflt && k->help && *k->help &&
                    k->range && *k->range);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(k->key, k25_config_key(j)->key);
        struct k25_error err;
        assert_int_equal(k25_config_set(&c, k->key, k->deflt, "t", 1, &err), 0);
    }
    assert_memory_equal(&c, &def, sizeof(c));
}

/* --------------------------------------------------- k25_config_set */

static void test_set_valid_values(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    assert_int_equal(k25_config_set(&c, "prefill_chunk_size", "4096", NULL, 0, &err), 0);
    assert_int_equal(c.prefill_chunk_size, 4096);
    assert_int_equal(k25_config_set(&c, "max_batch_size", "+3", NULL, 0, &err), 0);
    assert_int_equal(c.max_batch_size, 3);
    assert_int_equal(k25_config_set(&c, "kv_block_size", "65536", NULL, 0, &err), 0);
    assert_int_equal(c.kv_block_size, 65536);
    assert_int_equal(k25_config_set(&c, "memory_budget_mb", "8796093022207", NULL, 0, &err), 0);
    assert_int_equal(c.memory_budget_mb, INT64_C(8796093022207));
    assert_int_equal(k25_config_set(&c, "seed", "9223372036854775807", NULL, 0, &err), 0);
    assert_true(c.seed == UINT64_C(9223372036854775807));
    assert_int_equal(k25_config_set(&c, "kv_compression_ratio", "1", NULL, 0, &err), 0);
    assert_true(c.kv_compression_ratio == 1.0);
    assert_int_equal(k25_config_set(&c, "kv_merge_threshold", "0", NULL, 0, &err), 0);
    assert_true(c.kv_merge_threshold == 0.0);
    assert_int_equal(k25_config_set(&c, "rope_theta", "5e5", NULL, 0, &err), 0);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(k25_config_set(&c, "top_p", ".95", NULL, 0, &err), 0);
    assert_true(c.top_p == 0.95);
    assert_int_equal(k25_config_set(&c, "kv_cache_dtype", "INT4", NULL, 0, &err), 0);
    assert_int_equal(c.kv_cache_dtype, K25_DTYPE_INT4);
    assert_int_equal(k25_config_set(&c, "attention", "naive", NULL, 0, &err), 0);
    assert_int_equal(c.attention, K25_ATTN_NAIVE);
    assert_int_equal(k25_config_set(&c, "kv_warm_budget_mb", "0.25", NULL, 0, &err), 0);
    assert_true(c.kv_warm_budget_mb == 0.25);
    assert_int_equal(k25_config_set(&c, "log_level", "debug", NULL, 0, &err), 0);
    assert_int_equal(c.log_level, K25_LOG_DEBUG);
    assert_int_equal(k25_config_set(&c, "model", "/models/llama", NULL, 0, &err), 0);
    assert_string_equal(c.model, "/models/llama");
    assert_int_equal(k25_config_set(&c, "log_file", "", NULL, 0, &err), 0);
    assert_string_equal(c.log_file, "");

    static const char *const yes[] = {"true", "TRUE", "yes", "on", "1", "True"};
    static const char *const no[] = {"false", "no", "Off", "0", "FALSE"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        c.disable_prefill_optimization = false;
        assert_int_equal(k25_config_set(&c, "disable_prefill_optimization", yes[i], NULL, 0, &err), 0);
        assert_true(c.disable_prefill_optimization);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        c.disable_prefill_optimization = true;
        assert_int_equal(k25_config_set(&c, "disable_prefill_optimization", no[i], NULL, 0, &err), 0);
        assert_false(c.disable_prefill_optimization);
    }
}

/* One bad value: code, exact message, and cfg left as it was. */
static void check_bad(const char *key, const char *value, int code, const char *what)
{
    struct k25_config c, before;
    struct k25_error err;
    k25_config_init(&c);
    before = c;
    int rc = k25_config_set(&c, key, value, "k25.yaml", 7, &err);
    char want[1024];
    snprintf(want, sizeof(want), "k25.yaml:7: '%s': %s", key, what);
    if (rc != code || strcmp(err.msg, want) != 0)
        print_error("set %s=\"%s\": rc %d, msg [%s], want rc %d [%s]\n", key, value, rc, err.msg,
                    code, want);
    assert_int_equal(rc, code);
    assert_string_equal(err.msg, want);
    assert_string_equal(err.field, key);
    assert_string_equal(err.file, "k25.yaml");
    assert_int_equal(err.line, 7);
    assert_memory_equal(&c, &before, sizeof(c));
}

static void test_set_wrong_type(void **state)
{
    (void)state;
    check_bad("prefill_chunk_size", "abc", K25_EINVAL, "expected a positive integer, got \"abc\"");
    check_bad("prefill_chunk_size", "12abc", K25_EINVAL, "expected a positive integer, got \"12abc\"");
    check_bad("prefill_chunk_size", "4096.0", K25_EINVAL, "expected a positive integer, got \"4096.0\"");
    check_bad("prefill_chunk_size", "1e3", K25_EINVAL, "expected a positive integer, got \"1e3\"");
    check_bad("prefill_chunk_size", " 5", K25_EINVAL, "expected a positive integer, got \" 5\"");
    check_bad("prefill_chunk_size", "", K25_EINVAL, "expected a positive integer, got \"\"");
    check_bad("threads", "all", K25_EINVAL, "expected a non-negative integer, got \"all\"");
    check_bad("kv_compression_ratio", "high", K25_EINVAL, "expected a number, got \"high\"");
    check_bad("kv_compression_ratio", "0.5x", K25_EINVAL, "expected a number, got \"0.5x\"");
    check_bad("temperature", "nan", K25_EINVAL, "expected a number, got \"nan\"");
    check_bad("rope_theta", "inf", K25_EINVAL, "expected a number, got \"inf\"");
    check_bad("rope_theta", "0x1p3", K25_EINVAL, "expected a number, got \"0x1p3\"");
    check_bad("rope_theta", ".", K25_EINVAL, "expected a number, got \".\"");
    check_bad("disable_prefill_optimization", "maybe", K25_EINVAL,
              "expected a boolean (true/false, yes/no, on/off, 1/0), got \"maybe\"");
    check_bad("kv_cache_dtype", "fp64", K25_EINVAL,
              "expected one of fp32, fp16, int8, int4, got \"fp64\"");
    check_bad("attention", "flash3", K25_EINVAL, "expected one of chunked, flash2, naive, got \"flash3\"");
    check_bad("block_pattern_hint", "legal", K25_EINVAL,
              "expected one of auto, legal_doc, plain_text, got \"legal\"");
    check_bad("kv_tier_policy", "lru", K25_EINVAL, "expected one of positional, hotness, got \"lru\"");
    {   /* issue 36: the hint takes effect only with the hotness policy, which needs tiers: refused otherwise */
        struct k25_config c;
        struct k25_error err;
        k25_config_init(&c);
        assert_int_equal(k25_config_set(&c, "block_pattern_hint", "legal_doc", NULL, 0, &err), K25_OK);
        assert_int_equal(k25_config_validate(&c, &err), K25_EINVAL);
        assert_string_equal(err.field, "block_pattern_hint");
    }
    check_bad("log_level", "warn", K25_EINVAL, "expected one of off, info, debug, got \"warn\"");
    check_bad("model", "", K25_EINVAL, "must not be empty");
    /* A long value is shortened in the message. */
    char longv[200];
    memset(longv, 'x', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    char want[200];
    snprintf(want, sizeof(want), "expected a number, got \"%.60s...\"", longv);
    check_bad("top_p", longv, K25_EINVAL, want);
}

static void test_set_out_of_range(void **state)
{
    (void)state;
    check_bad("max_batch_size", "0", K25_ERANGE, "must be >= 1, got 0");
    check_bad("max_batch_size", "-3", K25_ERANGE, "must be >= 1, got -3");
    check_bad("prefill_chunk_size", "2147483648", K25_ERANGE, "must be at most 2147483647, got 2147483648");
    check_bad("prefill_chunk_size", "99999999999999999999", K25_ERANGE,
              "must be at most 2147483647, got 99999999999999999999");
    check_bad("decode_max_tokens", "0", K25_ERANGE, "must be >= 1, got 0");
    check_bad("max_num_batched_tokens", "0", K25_ERANGE, "must be >= 1, got 0");
    check_bad("queue_timeout_ms", "-1", K25_ERANGE, "must be >= 0, got -1");
    check_bad("kv_block_size", "0", K25_ERANGE, "must be between 1 and 65536, got 0");
    check_bad("kv_block_size", "65537", K25_ERANGE, "must be between 1 and 65536, got 65537");
    check_bad("kv_compression_ratio", "0", K25_ERANGE, "must be in (0, 1], got 0");
    check_bad("kv_compression_ratio", "1.5", K25_ERANGE, "must be in (0, 1], got 1.5");
    check_bad("kv_merge_threshold", "-0.25", K25_ERANGE, "must be in [0, 1], got -0.25");
    check_bad("kv_merge_threshold", "1.25", K25_ERANGE, "must be in [0, 1], got 1.25");
    check_bad("top_p", "0", K25_ERANGE, "must be in (0, 1], got 0");
    check_bad("kv_merge_threshold", "-1e999", K25_ERANGE,
              "number \"-1e999\" is too large (must be in [0, 1])");
    check_bad("temperature", "-0.5", K25_ERANGE, "must be a finite number >= 0, got -0.5");
    check_bad("temperature", "1e999", K25_ERANGE, "number \"1e999\" is too large (must be finite and >= 0)");
    check_bad("threads", "-1", K25_ERANGE, "must be >= 0, got -1");
    check_bad("memory_budget_mb", "-5", K25_ERANGE, "must be between 0 and 8796093022207, got -5");
    check_bad("memory_budget_mb", "8796093022208", K25_ERANGE,
              "must be between 0 and 8796093022207, got 8796093022208");
    check_bad("seed", "-1", K25_ERANGE, "must be between 0 and 9223372036854775807, got -1");
    check_bad("seed", "18446744073709551615", K25_ERANGE,
              "must be between 0 and 9223372036854775807, got 18446744073709551615");
    char longv[1100];
    memset(longv, 'm', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    check_bad("model", longv, K25_ERANGE, "is too long (1099 bytes, at most 1023)");
}

static void test_set_unknown_key(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    assert_int_equal(k25_config_set(&c, "prefil_chunk_size", "5", "k25.yaml", 3, &err), K25_ENOTFOUND);
    assert_string_equal(err.msg,
                        "k25.yaml:3: 'prefil_chunk_size': unknown key (did you mean 'prefill_chunk_size'?)");
    assert_string_equal(err.field, "prefil_chunk_size");
    /* A transposition counts as one edit. */
    assert_int_equal(k25_config_set(&c, "max_bacth_size", "5", NULL, 0, &err), K25_ENOTFOUND);
    assert_string_equal(err.msg, "'max_bacth_size': unknown key (did you mean 'max_batch_size'?)");
    assert_string_equal(k25_config_suggest("Top_P"), "top_p");
    assert_string_equal(k25_config_suggest("sed"), "seed");
    assert_null(k25_config_suggest("x"));
    assert_null(k25_config_suggest("chunk"));
    assert_int_equal(k25_config_set(&c, "gpu_memory_utilization", "0.9", "k25.yaml", 4, &err),
                     K25_ENOTFOUND);
    assert_string_equal(err.msg,
                        "k25.yaml:4: 'gpu_memory_utilization': unknown key ('k25 config --keys' lists them)");
}

/* ----------------------------------------------------------------- YAML */

static void test_yaml_good(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    int rc = load_text("good.yaml",
                       "# a tuning point\n"
                       "model: small\n"
                       "max_batch_size: 16        # more users\n"
                       "kv_cache_dtype: fp16\n"
                       "prefill_chunk_size: \"4096\"\n"
                       "kv_compression_ratio: 0.5\n"
                       "log_level: info\n"
                       "disable_prefill_optimization: yes\n"
                       "log_file: 'run 1.log'\n"
                       "seed: 42\n",
                       &c, &err, path, sizeof(path));
    assert_int_equal(rc, 0);
    assert_string_equal(c.model, "small");
    assert_int_equal(c.max_batch_size, 16);
    assert_int_equal(c.kv_cache_dtype, K25_DTYPE_FP16);
    assert_int_equal(c.prefill_chunk_size, 4096);
    assert_true(c.kv_compression_ratio == 0.5);
    assert_int_equal(c.log_level, K25_LOG_INFO);
    assert_true(c.disable_prefill_optimization);
    assert_string_equal(c.log_file, "run 1.log");
    assert_int_equal(c.seed, 42);
    assert_int_equal(c.decode_max_tokens, 1024); /* untouched keys keep their value */

    /* Flow style is a mapping too. */
    assert_int_equal(load_text("flow.yaml", "{max_batch_size: 3, kv_block_size: 64}\n", &c, &err,
                               path, sizeof(path)), 0);
    assert_int_equal(c.max_batch_size, 3);
    assert_int_equal(c.kv_block_size, 64);
}

static void test_yaml_empty_files(void **state)
{
    (void)state;
    static const char *const texts[] = {"", "# nothing set\n\n", "---\n", "---\n...\n"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        char path[512];
        struct k25_config c, def;
        struct k25_error err;
        k25_config_init(&def);
        assert_int_equal(load_text("empty.yaml", texts[i], &c, &err, path, sizeof(path)), 0);
        assert_memory_equal(&c, &def, sizeof(c));
    }
}

static void test_yaml_unknown_key(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    int rc = load_text("unk.yaml", "max_batch_size: 4\n\nprefil_chunk_size: 1024\n", &c, &err,
                       path, sizeof(path));
    assert_file_error(&err, rc, K25_ENOTFOUND, path, 3, "prefil_chunk_size",
                      "unknown key (did you mean 'prefill_chunk_size'?)");
    assert_int_equal(c.max_batch_size, 8); /* nothing applied from a failed file */

    rc = load_text("unk2.yaml", "# vLLM key, not ours\ngpu_memory_utilization: 0.9\n", &c, &err,
                   path, sizeof(path));
    assert_file_error(&err, rc, K25_ENOTFOUND, path, 2, "gpu_memory_utilization",
                      "unknown key ('k25 config --keys' lists them)");
}

static void test_yaml_wrong_type_and_range(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    int rc = load_text("type.yaml",
                       "model: tiny\nmax_batch_size: 8\nkv_block_size: 16\n#\n#\n#\n"
                       "prefill_chunk_size: abc\n",
                       &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 7, "prefill_chunk_size",
                      "expected a positive integer, got \"abc\"");

    rc = load_text("range1.yaml", "kv_block_size: 100000\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_ERANGE, path, 1, "kv_block_size",
                      "must be between 1 and 65536, got 100000");
    rc = load_text("range2.yaml", "seed: 1\nkv_compression_ratio: 0\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_ERANGE, path, 2, "kv_compression_ratio", "must be in (0, 1], got 0");
    rc = load_text("range3.yaml", "seed: 1\nthreads: 2\ntop_p: 1.1\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_ERANGE, path, 3, "top_p", "must be in (0, 1], got 1.1");
    rc = load_text("range4.yaml", "max_batch_size: -2\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_ERANGE, path, 1, "max_batch_size", "must be >= 1, got -2");

    rc = load_text("enum.yaml", "kv_cache_dtype: bf16\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 1, "kv_cache_dtype",
                      "expected one of fp32, fp16, int8, int4, got \"bf16\"");
    rc = load_text("bool.yaml", "\ndisable_prefill_optimization: sometimes\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 2, "disable_prefill_optimization",
                      "expected a boolean (true/false, yes/no, on/off, 1/0), got \"sometimes\"");
    rc = load_text("null.yaml", "seed: 3\nmax_batch_size:\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 2, "max_batch_size",
                      "has no value (give one, or remove the line for the default 8)");
}

static void test_yaml_non_scalar(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    int rc = load_text("list.yaml", "seed: 1\nprefill_chunk_size: [1024, 2048]\n", &c, &err, path,
                       sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 2, "prefill_chunk_size",
                      "expected a single int value, got a list");
    rc = load_text("map.yaml", "kv_cache_dtype:\n  keys: int8\n  values: int4\n", &c, &err, path,
                   sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 2, "kv_cache_dtype",
                      "expected a single enum value, got a mapping");
    rc = load_text("alias.yaml", "seed: &s 5\nthreads: *s\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EINVAL, path, 2, "threads",
                      "expected a single int value, got an alias (*name; aliases are not supported)");
    rc = load_text("top.yaml", "- max_batch_size: 4\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EFORMAT, path, 1, NULL,
                      "expected a mapping of key: value pairs at the top level, got a list");
    rc = load_text("scalar.yaml", "max_batch_size\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EFORMAT, path, 1, NULL,
                      "expected a mapping of key: value pairs at the top level, got a single value");
    rc = load_text("docs.yaml", "seed: 1\n---\nseed: 2\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EFORMAT, path, 2, NULL,
                      "more than one YAML document; a config file holds one mapping");
}

static void test_yaml_duplicate_key(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    int rc = load_text("dup.yaml", "max_batch_size: 4\nseed: 1\nmax_batch_size: 5\n", &c, &err, path,
                       sizeof(path));
    assert_file_error(&err, rc, K25_EFORMAT, path, 3, "max_batch_size",
                      "duplicate key (first set on line 1)");
    assert_int_equal(c.max_batch_size, 8);
}

static void test_yaml_syntax_error(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    /* Unterminated quote: found at the end of the stream (line 4). */
    int rc = load_text("quote.yaml", "seed: 1\nmodel: \"tiny\nthreads: 2\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EFORMAT, path, 4, NULL,
                      "YAML syntax error: found unexpected end of stream (while scanning a quoted "
                      "scalar that starts on line 2)");
    /* A list item inside a mapping. */
    rc = load_text("indent.yaml", "seed: 1\nthreads: 2\n- oops\n", &c, &err, path, sizeof(path));
    assert_file_error(&err, rc, K25_EFORMAT, path, 3, NULL,
                      "YAML syntax error: did not find expected key (while parsing a block mapping "
                      "that starts on line 1)");
    /* A tab used for indentation. */
    rc = load_text("tab.yaml", "seed: 1\n\tthreads: 2\n", &c, &err, path, sizeof(path));
    assert_int_equal(rc, K25_EFORMAT);
    assert_int_equal(err.line, 2);
    assert_string_equal(err.file, path);
    assert_non_null(strstr(err.msg, "YAML syntax error: found a tab character"));
    /* Bad UTF-8. */
    rc = load_text("utf8.yaml", "model: \xff\xfe\n", &c, &err, path, sizeof(path));
    assert_int_equal(rc, K25_EFORMAT);
    assert_string_equal(err.file, path);
    assert_non_null(strstr(err.msg, "YAML read error"));
}

static void test_yaml_missing_file(void **state)
{
    (void)state;
    char path[512];
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    snprintf(path, sizeof(path), "%s/does-not-exist.yaml", g_dir);
    assert_int_equal(k25_config_load_yaml(&c, path, &err), K25_ENOTFOUND);
    char want[1024];
    snprintf(want, sizeof(want), "%s: cannot open config file: No such file or directory", path);
    assert_string_equal(err.msg, want);
    assert_string_equal(err.file, path);
    assert_int_equal(err.line, 0);
    /* A directory is not a config file. */
    assert_int_equal(k25_config_load_yaml(&c, g_dir, &err), K25_EIO);
    assert_non_null(strstr(err.msg, "is a directory"));
}

/* ----------------------------------------------------------- validate */

static void test_validate(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;

    k25_config_init(&c);
    c.max_batch_size = 512;
    c.max_num_batched_tokens = 256;
    c.prefill_chunk_size = 128;
    assert_int_equal(k25_config_validate(&c, &err), K25_ERANGE);
    assert_string_equal(err.field, "max_batch_size");
    assert_string_equal(err.msg, "'max_batch_size': 512 exceeds max_num_batched_tokens (256): a full "
                                 "decode batch needs one token of the step budget per sequence");

    /* A chunk larger than the step budget is clipped by the scheduler, not an error. */
    k25_config_init(&c);
    c.prefill_chunk_size = 16384;
    assert_int_equal(k25_config_validate(&c, &err), 0);
    c.max_num_batched_tokens = c.max_batch_size; /* the smallest budget that holds a batch */
    assert_int_equal(k25_config_validate(&c, &err), 0);

    /* Per-key ranges hold for structs filled by code too. */
    k25_config_init(&c);
    c.kv_block_size = 0;
    assert_int_equal(k25_config_validate(&c, &err), K25_ERANGE);
    assert_string_equal(err.msg, "'kv_block_size': must be between 1 and 65536, got 0");
    k25_config_init(&c);
    c.top_p = 0.0;
    assert_int_equal(k25_config_validate(&c, &err), K25_ERANGE);
    assert_string_equal(err.field, "top_p");
    k25_config_init(&c);
    c.kv_cache_dtype = (enum k25_dtype)9;
    assert_int_equal(k25_config_validate(&c, &err), K25_EINVAL);
    assert_string_equal(err.field, "kv_cache_dtype");
    k25_config_init(&c);
    c.model[0] = '\0';
    assert_int_equal(k25_config_validate(&c, &err), K25_EINVAL);
    assert_string_equal(err.msg, "'model': must not be empty");
}

/* ----------------------------------------------------------------- JSON */

/* A JSON scalar back to the text k25_config_set takes. */
static void json_to_text(const json_t *v, char *out, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING: snprintf(out, cap, "%s", json_string_value(v)); break;
    case JSON_INTEGER: snprintf(out, cap, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: snprintf(out, cap, "%.17g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(out, cap, "true"); break;
    case JSON_FALSE: snprintf(out, cap, "false"); break;
    default: fail_msg("unexpected JSON type %d", (int)json_typeof(v));
    }
}

static void test_json_round_trip(void **state)
{
    (void)state;
    struct k25_config c, back;
    struct k25_error err;
    k25_config_init(&c);
    assert_int_equal(k25_config_set(&c, "kv_compression_ratio", "0.3", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "rope_theta", "500000.123456789012", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "seed", "4611686018427387905", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "kv_cache_dtype", "int8", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "kv_cold_dir", "/scratch/kv", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "log_file", "a \"quoted\"\\path", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "disable_prefill_optimization", "on", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "memory_budget_mb", "24576", NULL, 0, &err), 0);

    char *text = k25_config_to_json(&c);
    assert_non_null(text);
    json_error_t jerr;
    json_t *obj = json_loads(text, 0, &jerr);
    assert_non_null(obj);
    assert_true(json_is_object(obj));
    assert_int_equal(json_object_size(obj), (size_t)k25_config_key_count());

    /* Keys in table order, enums as names. */
    int i = 0;
    for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it), i++)
        assert_string_equal(json_object_iter_key(it), k25_config_key(i)->key);
    assert_string_equal(json_string_value(json_object_get(obj, "kv_cache_dtype")), "int8");
    assert_string_equal(json_string_value(json_object_get(obj, "kv_cold_dir")), "/scratch/kv");
    assert_string_equal(json_string_value(json_object_get(obj, "log_level")), "off");
    assert_true(json_is_true(json_object_get(obj, "disable_prefill_optimization")));
    assert_int_equal(json_integer_value(json_object_get(obj, "seed")), INT64_C(4611686018427387905));

    /* Every value set back through k25_config_set gives the same struct. */
    k25_config_init(&back);
    for (i = 0; i < k25_config_key_count(); i++) {
        const char *key = k25_config_key(i)->key;
        char vtext[1100];
        json_to_text(json_object_get(obj, key), vtext, sizeof(vtext));
        assert_int_equal(k25_config_set(&back, key, vtext, NULL, 0, &err), 0);
    }
    assert_memory_equal(&back, &c, sizeof(c));
    json_decref(obj);
    free(text);

    /* Human-friendly reals: 0.85 is written as 0.85. */
    k25_config_init(&c);
    text = k25_config_to_json(&c);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"kv_compression_ratio\": 0.85,"));
    free(text);
}

/* ------------------------------------------------------------------ CLI */

static void test_cli_overrides_file(void **state)
{
    (void)state;
    char path[512], cfgarg[600];
    write_tmp("cli.yaml", "prefill_chunk_size: 4096\nmax_batch_size: 4\nkv_cache_dtype: fp16\n", path,
              sizeof(path));
    snprintf(cfgarg, sizeof(cfgarg), "%s", path);
    /* The flag comes before --config and still wins: the file is applied first. */
    char *argv[] = {"run", "--prefill-chunk-size", "1024", "--prompt", "hi", "--config", cfgarg, NULL};
    int argc = 7;
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    assert_int_equal(k25_cli_apply_config(&argc, argv, &c, &err), 0);
    assert_int_equal(c.prefill_chunk_size, 1024);   /* CLI */
    assert_int_equal(c.max_batch_size, 4);          /* file */
    assert_int_equal(c.kv_cache_dtype, K25_DTYPE_FP16);
    assert_int_equal(c.decode_max_tokens, 1024);    /* default */
    assert_int_equal(argc, 3);
    assert_string_equal(argv[0], "run");
    assert_string_equal(argv[1], "--prompt");
    assert_string_equal(argv[2], "hi");
    assert_null(argv[3]);

    /* --config=FILE; two files apply in order, the later wins. */
    char path2[512], a1[600], a2[600];
    write_tmp("cli2.yaml", "max_batch_size: 2\n", path2, sizeof(path2));
    snprintf(a1, sizeof(a1), "--config=%s", path);
    snprintf(a2, sizeof(a2), "%s", path2);
    char *argv2[] = {"run", a1, "--config", a2, NULL};
    argc = 4;
    k25_config_init(&c);
    assert_int_equal(k25_cli_apply_config(&argc, argv2, &c, &err), 0);
    assert_int_equal(c.max_batch_size, 2);
    assert_int_equal(c.prefill_chunk_size, 4096);
    assert_int_equal(argc, 1);
}

static void test_cli_bool_and_equals_forms(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;

    char *a1[] = {"run", "--disable-prefill-optimization", "prompt.txt", NULL};
    int argc = 3;
    k25_config_init(&c);
    assert_int_equal(k25_cli_apply_config(&argc, a1, &c, &err), 0);
    assert_true(c.disable_prefill_optimization);
    assert_int_equal(argc, 2);
    assert_string_equal(a1[1], "prompt.txt");

    char *a2[] = {"run", "--disable-prefill-optimization", "off", "--kv-cache-dtype=fp16",
                  "--top-p=0.5", "--max_batch_size", "3", "--log-file=", NULL};
    argc = 8;
    k25_config_init(&c);
    c.disable_prefill_optimization = true;
    strcpy(c.log_file, "x.log");
    assert_int_equal(k25_cli_apply_config(&argc, a2, &c, &err), 0);
    assert_false(c.disable_prefill_optimization);
    assert_int_equal(c.kv_cache_dtype, K25_DTYPE_FP16);
    assert_true(c.top_p == 0.5);
    assert_int_equal(c.max_batch_size, 3);
    assert_string_equal(c.log_file, "");
    assert_int_equal(argc, 1);

    char *a3[] = {"run", "--disable-prefill-optimization=no", "--disable-prefill-optimization", NULL};
    argc = 3;
    k25_config_init(&c);
    assert_int_equal(k25_cli_apply_config(&argc, a3, &c, &err), 0);
    assert_true(c.disable_prefill_optimization); /* last one wins */

    char *a4[] = {"run", "--disable-prefill-optimization=perhaps", NULL};
    argc = 2;
    assert_int_equal(k25_cli_apply_config(&argc, a4, &c, &err), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--disable-prefill-optimization': expected a boolean "
                                 "(true/false, yes/no, on/off, 1/0), got \"perhaps\"");
}

static void test_cli_errors(void **state)
{
    (void)state;
    struct k25_config c, before;
    struct k25_error err;
    k25_config_init(&c);
    before = c;

    /* Missing value at the end, or followed by another flag. */
    char *a1[] = {"run", "--max-batch-size", "4", "--prefill-chunk-size", NULL};
    int argc = 4;
    assert_int_equal(k25_cli_apply_config(&argc, a1, &c, &err), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--prefill-chunk-size': needs a value (int, >= 1)");
    assert_string_equal(err.file, "command line");
    assert_string_equal(err.field, "--prefill-chunk-size");
    assert_int_equal(err.line, 0);
    assert_int_equal(argc, 4); /* argv and cfg untouched on error */
    assert_string_equal(a1[1], "--max-batch-size");
    assert_memory_equal(&c, &before, sizeof(c));

    char *a2[] = {"run", "--kv-cache-dtype", "--json", NULL};
    argc = 3;
    assert_int_equal(k25_cli_apply_config(&argc, a2, &c, &err), K25_EINVAL);
    assert_string_equal(err.msg,
                        "command line: '--kv-cache-dtype': needs a value (enum, fp32|fp16|int8|int4)");

    char *a3[] = {"run", "--prefill-chunk-size", "abc", NULL};
    argc = 3;
    assert_int_equal(k25_cli_apply_config(&argc, a3, &c, &err), K25_EINVAL);
    assert_string_equal(err.msg,
                        "command line: '--prefill-chunk-size': expected a positive integer, got \"abc\"");

    char *a4[] = {"run", "--kv-block-size=0", NULL};
    argc = 2;
    assert_int_equal(k25_cli_apply_config(&argc, a4, &c, &err), K25_ERANGE);
    assert_string_equal(err.msg, "command line: '--kv-block-size': must be between 1 and 65536, got 0");

    char *a5[] = {"run", "--config", NULL};
    argc = 2;
    assert_int_equal(k25_cli_apply_config(&argc, a5, &c, &err), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--config': needs a file name");

    /* A bad file through the CLI keeps its file:line message. */
    char path[512], arg[600];
    write_tmp("clibad.yaml", "seed: 1\nkv_merge_threshold: 2\n", path, sizeof(path));
    snprintf(arg, sizeof(arg), "--config=%s", path);
    char *a6[] = {"run", arg, NULL};
    argc = 2;
    assert_int_equal(k25_cli_apply_config(&argc, a6, &c, &err), K25_ERANGE);
    assert_string_equal(err.file, path);
    assert_int_equal(err.line, 2);
    assert_string_equal(err.field, "kv_merge_threshold");
    assert_memory_equal(&c, &before, sizeof(c));
}

static void test_cli_leaves_other_args(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    char *argv[] = {"bench", "-v", "--json", "pos1", "--threads", "2", "--unknown=3", "--prefil-chunk-size",
                    "7", "pos2", "--", "--max-batch-size", "3", NULL};
    int argc = 13;
    assert_int_equal(k25_cli_apply_config(&argc, argv, &c, &err), 0);
    assert_int_equal(c.threads, 2);
    assert_int_equal(c.max_batch_size, 8); /* after "--": not an option */
    static const char *const want[] = {"bench", "-v", "--json", "pos1", "--unknown=3",
                                       "--prefil-chunk-size", "7", "pos2", "--",
                                       "--max-batch-size", "3"};
    assert_int_equal(argc, 11);
    for (int i = 0; i < argc; i++)
        assert_string_equal(argv[i], want[i]);
    assert_null(argv[argc]);

    /* Nothing to do: argv untouched. */
    char *b[] = {"run", "x", NULL};
    argc = 2;
    assert_int_equal(k25_cli_apply_config(&argc, b, &c, &err), 0);
    assert_int_equal(argc, 2);
    assert_string_equal(b[1], "x");
}

static void test_cli_print_flags(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    k25_cli_print_config_flags(f);
    assert_int_equal(fclose(f), 0);
    assert_non_null(strstr(buf, "--config FILE"));
    assert_non_null(strstr(buf, "--prefill-chunk-size N"));
    assert_non_null(strstr(buf, "tokens per prefill chunk (default: 2048)"));
    assert_non_null(strstr(buf, "--disable-prefill-optimization [BOOL]"));
    for (int i = 0; i < k25_config_key_count(); i++) {
        char flag[128];
        snprintf(flag, sizeof(flag), "--%s ", k25_config_key(i)->key);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        assert_non_null(strstr(buf, flag));
    }
    free(buf);
}

/* ------------------------------------------------------- k25 config */

/* Runs k25_cmd_config with stdout+stderr captured into *out (malloc'd). */
static int run_cmd_config(int argc, char **argv, char **out)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/capture.txt", g_dir);
    fflush(stdout);
    fflush(stderr);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    int so = dup(1), se = dup(2);
    assert_true(so >= 0 && se >= 0);
    assert_true(dup2(fd, 1) >= 0 && dup2(fd, 2) >= 0);
    int rc = k25_cmd_config(argc, argv);
    fflush(stdout);
    fflush(stderr);
    assert_true(dup2(so, 1) >= 0 && dup2(se, 2) >= 0);
    close(so);
    close(se);
    off_t size = lseek(fd, 0, SEEK_END);
    assert_true(size >= 0);
    char *buf = calloc(1, (size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(pread(fd, buf, (size_t)size, 0), size);
    close(fd);
    *out = buf;
    return rc;
}

static void test_cmd_config(void **state)
{
    (void)state;
    char *out = NULL;

    /* --json: the effective config, with the CLI applied. */
    char *a1[] = {"config", "--max-batch-size", "3", "--json", NULL};
    assert_int_equal(run_cmd_config(4, a1, &out), 0);
    json_t *obj = json_loads(out, 0, NULL);
    assert_non_null(obj);
    assert_int_equal(json_integer_value(json_object_get(obj, "max_batch_size")), 3);
    json_decref(obj);
    free(out);

    /* The table marks defaults and is itself a config file that loads back. */
    char *a2[] = {"config", "--prefill-chunk-size", "512", "--log-file", "my run.log", "--top-p", "0.9",
                  NULL};
    assert_int_equal(run_cmd_config(7, a2, &out), 0);
    assert_non_null(strstr(out, "max_batch_size:"));
    assert_non_null(strstr(out, "# default\n"));
    assert_non_null(strstr(out, "# default: 2048\n"));
    char path[512];
    write_tmp("table.yaml", out, path, sizeof(path));
    free(out);
    struct k25_config c, want;
    struct k25_error err;
    k25_config_init(&c);
    assert_int_equal(k25_config_load_yaml(&c, path, &err), 0);
    k25_config_init(&want);
    want.prefill_chunk_size = 512;
    want.top_p = 0.9;
    strcpy(want.log_file, "my run.log");
    assert_memory_equal(&c, &want, sizeof(c));

    /* --keys lists every key. */
    char *a3[] = {"config", "--keys", NULL};
    assert_int_equal(run_cmd_config(2, a3, &out), 0);
    for (int i = 0; i < k25_config_key_count(); i++)
        assert_non_null(strstr(out, k25_config_key(i)->key));
    free(out);
    char *a3j[] = {"config", "--keys", "--json", NULL};
    assert_int_equal(run_cmd_config(3, a3j, &out), 0);
    obj = json_loads(out, 0, NULL);
    assert_non_null(obj);
    assert_int_equal(json_array_size(obj), (size_t)k25_config_key_count());
    json_decref(obj);
    free(out);

    char *a4[] = {"config", "--help", NULL};
    assert_int_equal(run_cmd_config(2, a4, &out), 0);
    assert_non_null(strstr(out, "usage: k25 config"));
    assert_non_null(strstr(out, "--kv-block-size N"));
    free(out);

    /* Bad input: exit 2 with the message. */
    write_tmp("bad.yaml", "seed: 1\nprefill_chunk_size: abc\n", path, sizeof(path));
    char *a5[] = {"config", "--config", path, NULL};
    assert_int_equal(run_cmd_config(3, a5, &out), 2);
    char want_msg[1024];
    snprintf(want_msg, sizeof(want_msg),
             "k25 config: %s:2: 'prefill_chunk_size': expected a positive integer, got \"abc\"\n", path);
    assert_string_equal(out, want_msg);
    free(out);

    char *a6[] = {"config", "--prefil-chunk-size", "5", NULL};
    assert_int_equal(run_cmd_config(3, a6, &out), 2);
    assert_string_equal(out, "k25 config: unknown option '--prefil-chunk-size' (did you mean "
                             "'--prefill-chunk-size'?)\n");
    free(out);

    char *a7[] = {"config", "--max-batch-size", "9000", NULL};
    assert_int_equal(run_cmd_config(3, a7, &out), 2);
    assert_non_null(strstr(out, "'max_batch_size': 9000 exceeds max_num_batched_tokens (8192)"));
    free(out);
}

/* The binary: exit status 2 and file:line on a bad config. */
static void test_binary_bad_config(void **state)
{
    (void)state;
    if (access(tu_k25(), X_OK) != 0) {
        print_message("skipping: %s not built yet (set K25=path to run this test)\n", tu_k25());
        skip();
    }
    char path[512], cmd[2048];
    write_tmp("bin-bad.yaml", "max_batch_size: 4\n# tuned\nkv_block_size: 1e9\n", path, sizeof(path));
    snprintf(cmd, sizeof(cmd), "%s config --config '%s'", tu_k25(), path);
    char *out = NULL;
    assert_int_equal(tu_run(cmd, &out), 2);
    char want[1024];
    snprintf(want, sizeof(want), "%s:3: 'kv_block_size': expected a positive integer, got \"1e9\"", path);
    assert_non_null(strstr(out, want));
    free(out);

    snprintf(cmd, sizeof(cmd), "%s config --json --kv-cache-dtype fp16", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "\"kv_cache_dtype\": \"fp16\""));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_key_table),
        cmocka_unit_test(test_set_valid_values),
        cmocka_unit_test(test_set_wrong_type),
        cmocka_unit_test(test_set_out_of_range),
        cmocka_unit_test(test_set_unknown_key),
        cmocka_unit_test(test_yaml_good),
        cmocka_unit_test(test_yaml_empty_files),
        cmocka_unit_test(test_yaml_unknown_key),
        cmocka_unit_test(test_yaml_wrong_type_and_range),
        cmocka_unit_test(test_yaml_non_scalar),
        cmocka_unit_test(test_yaml_duplicate_key),
        cmocka_unit_test(test_yaml_syntax_error),
        cmocka_unit_test(test_yaml_missing_file),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_cli_overrides_file),
        cmocka_unit_test(test_cli_bool_and_equals_forms),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_cli_leaves_other_args),
        cmocka_unit_test(test_cli_print_flags),
        cmocka_unit_test(test_cmd_config),
        cmocka_unit_test(test_binary_bad_config),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
