/*
 * test_kvtier.c - KV tiers (issue 18): a sequence whose KV is four times
 * the warm budget completes through the cold tier with the same tokens and
 * logits, bit for bit, as the all-in-RAM run (tiers move bytes, not
 * arithmetic), for fp32, int8 and int4 (the residual stays resident,
 * closing groups dirty older blocks) and a
 * compressed cache (compaction rewrites blocks); between steps the KV
 * memory stays within the budget; the hit rate is in [0, 1], every cold
 * read is a miss with prefetch off, and bytes moved are counted; the
 * [DECODE] and [KV_CACHE] lines say what happened; tiers off reads every
 * block hot; the config keys refuse settings that would be ignored.
 */
#include "testutil.h"
#include "tu_model.h"

#include "engine.h"
#include "k25.h"
#include "kvtier.h"

enum { N_NEW = 24, BLOCK = 16 };

struct run_out {
    int32_t tok[N_NEW];
    float *logits; /* [n][vocab] (malloc'd) */
    int n;
    struct k25_result res; /* scalars only: the arrays belong to the destroyed engine */
    struct k25_engine_stats st;
    int64_t max_kv_between; /* most KV bytes held between decode steps */
};

/* The test config: tiny, r = 1, small blocks, one thread (same arithmetic every run). */
static void base_cfg(struct k25_config *c)
{
    k25_config_init(c);
    snprintf(c->model, sizeof(c->model), "tiny");
    c->kv_compression_ratio = 1.0;
    c->kv_block_size = BLOCK;
    c->prefill_chunk_size = 64;
    c->threads = 1;
}

/* KV bytes of a sequence of n slots under c. */
static double seq_kv_bytes(const struct k25_config *c, int n)
{
    struct k25_kv_layout lay;
    k25_kv_layout(c, k25_model_get_shape(tu_tiny), &lay);
    return (double)lay.block_bytes * ((n + c->kv_block_size - 1) / c->kv_block_size);
}

/* The int8/int4 residual of one sequence under c (resident, outside the tiers). */
static double residual_bytes(const struct k25_config *c)
{
    struct k25_kv_layout lay;
    k25_kv_layout(c, k25_model_get_shape(tu_tiny), &lay);
    return (double)lay.residual_bytes;
}

/* Tiers with a warm budget of a quarter of n slots' KV, the cold tier in tu_dir, the first block hot. */
static void tier_cfg(struct k25_config *c, int n)
{
    c->kv_hot_tokens = BLOCK;
    c->kv_warm_budget_mb = 0.25 * seq_kv_bytes(c, n) / 1048576.0;
    snprintf(c->kv_cold_dir, sizeof(c->kv_cold_dir), "%s", tu_dir);
}

static void run_case(const struct k25_config *cfg, int n_prompt, bool prefetch, struct run_out *o)
{
    struct k25_error err;
    k25_engine_t *e;
    memset(o, 0, sizeof(*o));
    if (k25_engine_create(cfg, tu_tiny, &e, &err) != K25_OK)
        fail_msg("create: %s", err.msg);
    if (e->tier)
        k25_kv_tier_set_prefetch(e->tier, prefetch);
    const int V = k25_model_get_shape(tu_tiny)->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % V);
    struct k25_request req = {.id = "t", .input_ids = ids, .n_input = n_prompt, .max_new_tokens = N_NEW,
                              .keep_logits = true};
    int h;
    assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_OK);
    while (!k25_engine_idle(e)) {
        if (k25_engine_step(e, &err) != K25_OK)
            fail_msg("step: %s", err.msg);
        const struct k25_result *r = k25_engine_result(e, h);
        if (r->state == K25_REQ_DECODE && r->n_output > 1) { /* between decode steps */
            struct k25_mem_stats m;
            k25_engine_mem(e, &m);
            if (m.cur_bytes[K25_MEM_KV] > o->max_kv_between)
                o->max_kv_between = m.cur_bytes[K25_MEM_KV];
        }
    }
    const struct k25_result *r = k25_engine_result(e, h);
    assert_int_equal(r->state, K25_REQ_COMPLETED);
    o->res = *r;
    o->n = r->n_output;
    assert_true(o->n <= N_NEW);
    memcpy(o->tok, r->output_ids, sizeof(int32_t) * (size_t)o->n);
    o->logits = malloc(sizeof(float) * (size_t)o->n * V);
    memcpy(o->logits, r->logits, sizeof(float) * (size_t)o->n * V);
    k25_engine_get_stats(e, &o->st);
    k25_engine_destroy(e);
    free(ids);
}

/* Same tokens and logits, bit for bit. */
static void assert_identical(const struct run_out *a, const struct run_out *b)
{
    const int V = k25_model_get_shape(tu_tiny)->vocab_size;
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n);
    assert_memory_equal(a->logits, b->logits, sizeof(float) * (size_t)a->n * V);
}

static void assert_all_hot(const struct run_out *o)
{
    assert_true(o->res.kv_block_reads > 0);
    assert_int_equal(o->res.kv_block_hits, o->res.kv_block_reads);
    assert_true(o->res.kv_cache_hit_rate == 1.0);
    assert_int_equal(o->res.kv_tier_bytes_moved, 0);
    assert_int_equal(o->res.kv_tier_wait_ns, 0);
    assert_int_equal(o->st.kv_block_hits, o->st.kv_block_reads);
    assert_true(o->st.kv_cache_hit_rate == 1.0);
    assert_int_equal(o->st.kv_tier_bytes_moved, 0);
    assert_int_equal(o->st.kv_tier_evictions, 0);
}

/* A context four times the warm budget, through the cold tier; prefetch on and off. */
static void check_through_cold(struct k25_config *c, int n_prompt)
{
    struct run_out ram, tier, slow;
    run_case(c, n_prompt, true, &ram);
    assert_all_hot(&ram);

    tier_cfg(c, n_prompt + N_NEW);
    run_case(c, n_prompt, true, &tier);
    run_case(c, n_prompt, false, &slow);
    assert_identical(&ram, &tier);
    assert_identical(&ram, &slow);

    const double kv = seq_kv_bytes(c, n_prompt + N_NEW);
    for (const struct run_out *o = &tier; o; o = o == &tier ? &slow : NULL) {
        assert_true(o->res.kv_block_reads == ram.res.kv_block_reads); /* the same reads, from other tiers */
        assert_true(o->res.kv_cache_hit_rate >= 0.0 && o->res.kv_cache_hit_rate <= 1.0);
        assert_true(o->st.kv_cache_hit_rate >= 0.0 && o->st.kv_cache_hit_rate <= 1.0);
        assert_true((double)o->res.kv_tier_bytes_moved > kv); /* more than the whole KV went through the tiers */
        assert_true(o->st.kv_tier_bytes_moved >= o->res.kv_tier_bytes_moved);
        assert_true(o->st.kv_tier_evictions > 0);
        /* between steps: the budget, the hot and newest blocks, the staging and copy buffers, the residual */
        assert_true(o->max_kv_between > 0);
        assert_true((double)o->max_kv_between < 0.6 * kv + residual_bytes(c));
    }
    assert_true(ram.max_kv_between >= kv * 0.9);
    /* prefetch off: every cold read waits */
    assert_true(slow.res.kv_block_hits < slow.res.kv_block_reads);
    assert_true(slow.res.kv_tier_wait_ns > 0);
    assert_true(slow.st.kv_tier_max_step_wait_ns > 0);
    assert_true(tier.res.kv_cache_hit_rate >= slow.res.kv_cache_hit_rate);
    print_message("  %s: hit rate %.3f with prefetch, %.3f without; %lld bytes moved; wait %.2f / %.2f ms\n",
                  k25_dtype_name(c->kv_cache_dtype), tier.res.kv_cache_hit_rate, slow.res.kv_cache_hit_rate,
                  (long long)tier.res.kv_tier_bytes_moved, tier.res.kv_tier_wait_ns / 1e6,
                  slow.res.kv_tier_wait_ns / 1e6);
    free(ram.logits);
    free(tier.logits);
    free(slow.logits);
}

static void test_cold_tier_fp32(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    check_through_cold(&c, 400);
}

static void test_cold_tier_int8(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    c.kv_cache_dtype = K25_DTYPE_INT8;
    c.kv_quant_group = 16; /* must divide the block */
    c.kv_quant_residual = 32;
    check_through_cold(&c, 400);
}

static void test_cold_tier_int4(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    c.kv_cache_dtype = K25_DTYPE_INT4;
    c.kv_quant_group = 16;
    c.kv_quant_residual = 32;
    check_through_cold(&c, 400);
}

/* Compaction rewrites blocks past the sinks: tier copies must follow (r < 1, past sink + recent). */
static void test_cold_tier_compressed(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    c.kv_compression_ratio = 0.5;
    c.kv_sink_tokens = 16;
    c.kv_recent_tokens = 64;
    struct run_out ram, tier;
    run_case(&c, 600, true, &ram);
    tier_cfg(&c, 600);
    run_case(&c, 600, true, &tier);
    assert_identical(&ram, &tier);
    assert_true(tier.res.kv_tier_bytes_moved > 0);
    free(ram.logits);
    free(tier.logits);
}

/* Reads a whole file (NUL-terminated; the caller frees). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_log_lines(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    c.log_level = K25_LOG_DEBUG;
    struct run_out o;
    snprintf(c.log_file, sizeof(c.log_file), "%s/off.log", tu_dir);
    run_case(&c, 200, true, &o);
    free(o.logits);
    char *s = slurp(c.log_file);
    assert_int_equal(count(s, "[DECODE]"), N_NEW);
    assert_int_equal(count(s, "kv_block_access=hot("), N_NEW); /* today's line, unchanged */
    assert_int_equal(count(s, "cache_hit=True"), N_NEW);
    assert_int_equal(count(s, "evict_reason=MEMORY_PRESSURE"), 0);
    free(s);

    tier_cfg(&c, 200 + N_NEW);
    snprintf(c.log_file, sizeof(c.log_file), "%s/on.log", tu_dir);
    run_case(&c, 200, false, &o);
    free(o.logits);
    s = slurp(c.log_file);
    assert_int_equal(count(s, "[DECODE]"), N_NEW);
    assert_true(count(s, "kv_block_access=cold(") > 0);
    assert_true(count(s, "cache_hit=False") > 0);
    assert_true(count(s, "evict_reason=MEMORY_PRESSURE from=hot to=warm") > 0);
    assert_true(count(s, "evict_reason=MEMORY_PRESSURE from=warm to=cold") > 0);
    assert_true(count(s, "evict_reason=REQUEST_FINISHED") > 0);
    free(s);
}

static void test_config_keys(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;
    base_cfg(&c);
    assert_int_equal(c.kv_hot_tokens, 0);
    assert_true(c.kv_warm_budget_mb == 0.0);
    assert_string_equal(c.kv_cold_dir, "");
    assert_int_equal(k25_config_set(&c, "kv_hot_tokens", "16384", NULL, 0, &err), 0);
    assert_int_equal(k25_config_set(&c, "kv_warm_budget_mb", "1.5", NULL, 0, &err), 0);
    assert_int_equal(k25_config_validate(&c, &err), K25_OK);
    c.kv_warm_budget_mb = 0.0;
    assert_int_equal(k25_config_validate(&c, &err), K25_EINVAL); /* nowhere for the non-hot blocks */
    assert_string_equal(err.field, "kv_hot_tokens");
    c.kv_hot_tokens = 0;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "/tmp");
    assert_int_equal(k25_config_validate(&c, &err), K25_EINVAL); /* would be ignored */
    assert_string_equal(err.field, "kv_cold_dir");
    /* a cold tier needs two staging blocks in the warm budget */
    base_cfg(&c);
    c.kv_hot_tokens = 16;
    c.kv_warm_budget_mb = 1e-6;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "%s", tu_dir);
    k25_engine_t *e;
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), K25_EINVAL);
    assert_string_equal(err.field, "kv_warm_budget_mb");
    /* the cold folder must exist */
    c.kv_warm_budget_mb = 4;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "%s/missing", tu_dir);
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), K25_EIO);
    assert_string_equal(err.field, "kv_cold_dir");
}

static int setup(void **state)
{
    return tu_group_setup(state) || tu_model_setup(state);
}

static int teardown(void **state)
{
    tu_model_teardown(state);
    return tu_group_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_tier_fp32),
        cmocka_unit_test(test_cold_tier_int8),
        cmocka_unit_test(test_cold_tier_int4),
        cmocka_unit_test(test_cold_tier_compressed),
        cmocka_unit_test(test_log_lines),
        cmocka_unit_test(test_config_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
