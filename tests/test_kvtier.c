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
 * block hot; the config keys refuse settings that would be ignored;
 * admission and the memory estimate count the tiers (a request whose KV
 * exceeds the budget's RAM pool runs through the cold tier).
 *
 *   test_kvtier --measure MODEL N_PROMPT HOT_TOKENS FRACTION COLD_DIR [N_NEW]
 *       the decode bar: tiers at FRACTION of the KV against all in RAM
 */
#include "testutil.h"
#include "tu_model.h"

#include "engine.h"
#include "k25.h"
#include "kvtier.h"
#include "harness.h"
#include "gold.h"

#include <jansson.h>

#include <math.h>

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

/* Section starts and hint run_case passes with its request (hotness tests). */
static const int32_t *g_sec;
static int g_nsec;
static enum k25_hint g_hint;
/* When set, run_case adds attention mass between decode steps to blocks [g_inject_b0, +4) (the first
 * half of the decode) then [g_inject_b1, +4): a hot section that moves, which the dummy model's
 * near-uniform attention does not give (its blocks' heats differ by less than the margin). */
static bool g_inject;
static int g_inject_b0 = 8, g_inject_b1 = 24;

static void inject_mass(k25_engine_t *e, int h, int n_out)
{
    struct k25_kv_seq *sq = &e->slots[h]->seq;
    const int nkv = e->pool.n_kv_heads, n = sq->n_tokens, b = n_out < N_NEW / 2 ? g_inject_b0 : g_inject_b1;
    float *sc = calloc((size_t)nkv * n, sizeof(float));
    for (int g = 0; g < nkv; g++)
        for (int x = b * BLOCK; x < (b + 4) * BLOCK && x < n; x++)
            sc[(size_t)g * n + x] = 1.0f;
    struct k25_error err;
    assert_int_equal(k25_kv_tier_observe(e->tier, sq, sc, n, 1, 8 * nkv, &err), K25_OK);
    free(sc);
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
                              .keep_logits = true, .section_starts = g_sec, .n_section_starts = g_nsec,
                              .block_pattern_hint = g_hint};
    int h;
    assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_OK);
    while (!k25_engine_idle(e)) {
        if (k25_engine_step(e, &err) != K25_OK)
            fail_msg("step: %s", err.msg);
        const struct k25_result *r = k25_engine_result(e, h);
        if (g_inject && e->tier && r->state == K25_REQ_DECODE)
            inject_mass(e, h, r->n_output);
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
        /* between steps: the warm budget (warm slots and staging), the hot and newest blocks, the
         * copy buffer, a spare block buffer or two (int8/int4: blocks a closing group writes), the
         * residual; streamed blocks read from their tier copies, so nothing grows with the context */
        assert_true(o->max_kv_between > 0);
        assert_true((double)o->max_kv_between <=
                    c->kv_warm_budget_mb * 1048576.0 + 5.0 * seq_kv_bytes(c, 1) + residual_bytes(c));
        assert_true((double)o->max_kv_between < 0.5 * kv + residual_bytes(c));
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

/* One request of n_prompt tokens on a fresh engine: its state, and its tokens in tok[N_NEW]. */
static int admit_case(const struct k25_config *cfg, int n_prompt, int32_t *tok, struct k25_engine_stats *st)
{
    struct k25_error err;
    k25_engine_t *e;
    if (k25_engine_create(cfg, tu_tiny, &e, &err) != K25_OK)
        fail_msg("create: %s", err.msg);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % 256);
    struct k25_request req = {.id = "a", .input_ids = ids, .n_input = n_prompt, .max_new_tokens = N_NEW};
    int h;
    assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_OK);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    const struct k25_result *r = k25_engine_result(e, h);
    int state = r->state;
    if (state == K25_REQ_COMPLETED)
        memcpy(tok, r->output_ids, sizeof(int32_t) * N_NEW);
    k25_engine_get_stats(e, st);
    k25_engine_destroy(e);
    free(ids);
    return state;
}

/*
 * Admission counts the tiers: under a memory budget whose KV pool holds
 * well under the request's KV, the request is rejected without tiers and
 * completes with them (cold tier), with the unbudgeted run's tokens; a
 * budget that cannot hold the warm pool and the hot blocks is refused at
 * create, naming kv_warm_budget_mb.
 */
static void test_admission_past_ram(void **state)
{
    (void)state;
    enum { N_PROMPT = 1500 };
    struct k25_config c;
    struct k25_error err;
    struct k25_engine_stats st;
    int32_t ref[N_NEW], got[N_NEW];
    base_cfg(&c);
    c.max_num_batched_tokens = 64;
    assert_int_equal(admit_case(&c, N_PROMPT, ref, &st), K25_REQ_COMPLETED);
    /* the smallest whole-MB budget an engine accepts, plus 1 MB: a KV pool of 1-2 MB */
    k25_engine_t *e = NULL;
    for (c.memory_budget_mb = 1; k25_engine_create(&c, tu_tiny, &e, &err) != K25_OK; c.memory_budget_mb++)
        assert_true(c.memory_budget_mb < 4096);
    k25_engine_destroy(e);
    c.memory_budget_mb += 1;
    const double kv = seq_kv_bytes(&c, N_PROMPT + N_NEW);
    assert_int_equal(admit_case(&c, N_PROMPT, got, &st), K25_REQ_REJECTED);
    assert_true(st.kv_blocks_capacity > 0 && (double)st.kv_blocks_capacity * seq_kv_bytes(&c, 1) < 0.7 * kv);

    c.kv_hot_tokens = BLOCK;
    c.kv_warm_budget_mb = 0.5;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "%s", tu_dir);
    assert_int_equal(admit_case(&c, N_PROMPT, got, &st), K25_REQ_COMPLETED);
    assert_memory_equal(ref, got, sizeof(ref));
    assert_int_equal(st.kv_blocks_capacity, 0); /* block ids are not RAM: the cold file holds the rest */
    assert_true(st.kv_tier_bytes_moved > 0);

    c.kv_warm_budget_mb = (double)c.memory_budget_mb; /* more than the RAM the budget leaves */
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), K25_ERANGE);
    assert_string_equal(err.field, "kv_warm_budget_mb");
}

/* k25_mem_estimate with tiers: RAM holds the hot blocks + the warm pool, the rest is cold. */
static void test_mem_estimate_tiers(void **state)
{
    (void)state;
    struct k25_config c;
    struct k25_error err;
    base_cfg(&c);
    c.kv_block_size = 256;
    c.prefill_chunk_size = 2048;
    const struct k25_model_shape *s = k25_model_get_shape(tu_tiny);
    struct k25_mem_estimate plain, tier;
    assert_int_equal(k25_mem_estimate(&c, s, 32768, 1, &plain, &err), K25_OK);
    assert_int_equal(plain.kv_hot_bytes + plain.kv_warm_bytes + plain.kv_cold_bytes, 0);
    c.kv_hot_tokens = 4096;
    c.kv_warm_budget_mb = 16;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "/tmp");
    assert_int_equal(k25_mem_estimate(&c, s, 32768, 1, &tier, &err), K25_OK);
    const int64_t bb = k25_kv_block_bytes(s, 256, K25_DTYPE_FP32);
    assert_int_equal(tier.kv_blocks, plain.kv_blocks);
    assert_int_equal(tier.kv_hot_bytes, (4096 / 256 + 2048 / 256 + 2) * bb); /* pinned + a chunk + newest + 1 */
    assert_int_equal(tier.kv_warm_bytes, 16 * 1048576 / bb * bb);
    assert_int_equal(tier.kv_hot_bytes + tier.kv_warm_bytes + tier.kv_cold_bytes, tier.kv_blocks * bb);
    assert_int_equal(tier.bytes[K25_MEM_KV], tier.kv_hot_bytes + tier.kv_warm_bytes + bb);
    assert_true(tier.bytes[K25_MEM_KV] < plain.bytes[K25_MEM_KV] / 2);
    assert_true(tier.total_bytes < plain.total_bytes);
}

/* ------------------------------------------------------------ --measure */

struct meas {
    int32_t *ids;           /* [n] generated tokens (malloc'd) */
    int n;
    double decode_tok_s;    /* (n - 1) tokens over first to last token */
    double hit_rate;        /* the request's kv_cache_hit_rate */
    double dec_hit_rate;    /* block reads of the decode steps only */
    double dec_bytes;       /* bytes moved between tiers in the decode steps */
    double dec_copy_ns;     /* tier-copy time in the decode steps */
    double dec_wait_ms;
    int64_t peak_kv;        /* tracked KV peak of the engine (bytes) */
    int64_t dec_peak_kv;    /* most KV held at the end of a decode step */
};

/* One request of n_prompt tokens on model m under cfg; the decode-phase figures from engine stats. */
static int measure_run(const struct k25_config *cfg, k25_model_t *m, int n_prompt, int n_new, struct meas *o)
{
    struct k25_error err;
    k25_engine_t *e;
    memset(o, 0, sizeof(*o));
    if (k25_engine_create(cfg, m, &e, &err) != K25_OK) {
        fprintf(stderr, "create: %s\n", err.msg);
        return 1;
    }
    const int V = k25_model_get_shape(m)->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % V);
    struct k25_request req = {.id = "m", .input_ids = ids, .n_input = n_prompt, .max_new_tokens = n_new};
    int h, rc = 0;
    struct k25_engine_stats s0 = {0}, s1;
    bool in_decode = false;
    if (k25_engine_submit(e, &req, &h, &err) != K25_OK)
        goto out_fail;
    while (!k25_engine_idle(e)) {
        if (k25_engine_step(e, &err) != K25_OK)
            goto out_fail;
        const struct k25_result *r = k25_engine_result(e, h);
        if (!in_decode && r->n_output >= 1) { /* prefill done: the decode steps start here */
            k25_engine_get_stats(e, &s0);
            in_decode = true;
        } else if (in_decode) {
            struct k25_mem_stats ms;
            k25_engine_mem(e, &ms);
            o->dec_peak_kv = ms.cur_bytes[K25_MEM_KV] > o->dec_peak_kv ? ms.cur_bytes[K25_MEM_KV] : o->dec_peak_kv;
        }
    }
    k25_engine_get_stats(e, &s1);
    const struct k25_result *r = k25_engine_result(e, h);
    o->n = r->n_output;
    o->ids = malloc(sizeof(int32_t) * (size_t)(o->n > 0 ? o->n : 1));
    memcpy(o->ids, r->output_ids, sizeof(int32_t) * (size_t)o->n);
    o->decode_tok_s = o->n > 1 ? (o->n - 1) / ((double)(r->token_t_ns[o->n - 1] - r->token_t_ns[0]) / 1e9) : 0;
    o->hit_rate = r->kv_cache_hit_rate;
    int64_t reads = s1.kv_block_reads - s0.kv_block_reads, hits = s1.kv_block_hits - s0.kv_block_hits;
    o->dec_hit_rate = reads > 0 ? (double)hits / (double)reads : 1.0;
    o->dec_bytes = (double)(s1.kv_tier_bytes_moved - s0.kv_tier_bytes_moved);
    o->dec_copy_ns = (double)(s1.kv_tier_copy_ns - s0.kv_tier_copy_ns);
    o->dec_wait_ms = (double)(s1.kv_tier_wait_ns - s0.kv_tier_wait_ns) / 1e6;
    struct k25_mem_stats ms;
    k25_engine_mem(e, &ms);
    o->peak_kv = ms.peak_bytes[K25_MEM_KV];
    goto out;
out_fail:
    fprintf(stderr, "run: %s\n", err.msg);
    rc = 1;
out:
    k25_engine_destroy(e);
    free(ids);
    return rc;
}

/*
 * test_kvtier --measure MODEL N_PROMPT HOT_TOKENS FRACTION COLD_DIR [N_NEW]
 * The decode bar of issue 18: one request all in RAM, then with tiers whose
 * hot + warm memory is FRACTION of its KV (the warm budget is that less the
 * hot blocks and the newest block); prints decode speed, the decode steps'
 * hit rate, bytes each step brought in, the measured tier-copy bandwidth,
 * and what that bandwidth allows (copies alone; copies after the RAM run's
 * compute), and whether the tokens are the same.
 */
static int measure(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: test_kvtier --measure MODEL N_PROMPT HOT_TOKENS FRACTION COLD_DIR [N_NEW]\n");
        return 2;
    }
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    snprintf(c.model, sizeof(c.model), "%s", argv[2]);
    const int n_prompt = atoi(argv[3]), hot = atoi(argv[4]), n_new = argc > 7 ? atoi(argv[7]) : 64;
    const double frac = atof(argv[5]);
    c.kv_compression_ratio = 1.0;
    c.threads = 1;
    k25_model_t *m;
    if (k25_model_load(&c, &m, &err) != K25_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct k25_kv_layout lay;
    k25_kv_layout(&c, k25_model_get_shape(m), &lay);
    const int64_t nb = (n_prompt + n_new + c.kv_block_size - 1) / c.kv_block_size;
    const double kv = (double)lay.block_bytes * (double)nb;
    const int64_t hot_blocks = (hot + c.kv_block_size - 1) / c.kv_block_size + 1; /* + the newest */
    struct meas ram, tier;
    if (measure_run(&c, m, n_prompt, n_new, &ram) != 0)
        return 1;
    c.kv_hot_tokens = hot;
    c.kv_warm_budget_mb = (frac * kv - (double)hot_blocks * (double)lay.block_bytes) / 1048576.0;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "%s", argv[6]);
    if (measure_run(&c, m, n_prompt, n_new, &tier) != 0)
        return 1;
    const int steps = tier.n - 1;
    const double per_step = tier.dec_bytes / steps, bw = tier.dec_bytes / (tier.dec_copy_ns / 1e9);
    const double copy_tok_s = bw / per_step, serial_tok_s = 1.0 / (1.0 / ram.decode_tok_s + 1.0 / copy_tok_s);
    const double overlap_tok_s = copy_tok_s < ram.decode_tok_s ? copy_tok_s : ram.decode_tok_s;
    bool same = ram.n == tier.n && !memcmp(ram.ids, tier.ids, sizeof(int32_t) * (size_t)ram.n);
    printf("%s, %d-token prompt + %d tokens, KV %.1f MB, hot %lld blocks + warm %.2f MB = %.0f%% of the KV\n",
           c.model, n_prompt, n_new, kv / 1048576.0, (long long)hot_blocks, c.kv_warm_budget_mb, 100.0 * frac);
    printf("all in RAM: decode %.1f tok/s\n", ram.decode_tok_s);
    printf("tiers: decode %.1f tok/s; hit rate %.3f (decode steps %.3f, request %.3f); waited %.1f ms\n",
           tier.decode_tok_s, tier.dec_hit_rate, tier.dec_hit_rate, tier.hit_rate, tier.dec_wait_ms);
    printf("tiers: %.2f MB brought in per decode step at %.2f GB/s (tier copies) -> copies alone allow %.1f tok/s,"
           " copies after the RAM compute %.1f tok/s, overlapped min(RAM, copies) %.1f tok/s\n",
           per_step / 1048576.0, bw / 1e9, copy_tok_s, serial_tok_s, overlap_tok_s);
    printf("tiers reach %.2fx of the serial figure, %.2fx of the overlapped one\n", tier.decode_tok_s / serial_tok_s,
           tier.decode_tok_s / overlap_tok_s);
    printf("KV peak: RAM %.1f MB, tiers %.1f MB (whole run), %.1f MB (most at the end of a decode step)\n",
           ram.peak_kv / 1048576.0, tier.peak_kv / 1048576.0, tier.dec_peak_kv / 1048576.0);
    printf("tokens %s\n", same ? "identical" : "DIFFER");
    free(ram.ids);
    free(tier.ids);
    k25_model_destroy(m);
    return same ? 0 : 1;
}

/*
 * A small `k25 bench` (the library call) with tiers on: the summary carries the measured
 * kv_cache_hit_rate, equal to the trace's per-request hits over reads (a hand count), the
 * bytes moved and the engine's run totals; the trace keeps them.  The same run with tiers off
 * says so (kv_tiers_enabled false, the rate null: the report's "n/a (tiers off)").
 */
static void test_bench_summary_hit_rate(void **state)
{
    (void)state;
    char gold[600], h5[600], js[600];
    snprintf(gold, sizeof(gold), "%s/tiers.jsonl", tu_dir);
    FILE *f = fopen(gold, "w");
    assert_non_null(f);
    for (int i = 0; i < 3; i++) {
        fprintf(f, "{\"id\":\"t%d\",\"expected_output_length\":8,\"text\":\"", i);
        for (int k = 0; k < 300; k++)
            fputc('a' + (k * 7 + i) % 26, f);
        fprintf(f, "\"}\n");
    }
    assert_int_equal(fclose(f), 0);
    for (int tiers = 1; tiers >= 0; tiers--) {
        struct k25_config c;
        base_cfg(&c);
        c.decode_max_tokens = 8;
        if (tiers)
            tier_cfg(&c, 300 + 8);
        struct k25_bench_opts o;
        k25_bench_opts_init(&o);
        snprintf(h5, sizeof(h5), "%s/tiers%d.h5", tu_dir, tiers);
        snprintf(js, sizeof(js), "%s/tiers%d.json", tu_dir, tiers);
        o.dataset = gold;
        o.out = h5;
        o.json_out = js;
        struct k25_bench_summary s;
        struct k25_error err;
        setenv("K25_LOAD_GUARD", "0", 1);
        if (k25_bench_measure(&o, &c, NULL, &s, &err) != K25_OK)
            fail_msg("bench: %s", err.msg);
        json_error_t jerr;
        json_t *doc = json_load_file(js, 0, &jerr), *sj = json_object_get(doc, "summary");
        assert_non_null(sj);
        struct k25_trace t;
        if (k25_trace_read(h5, &t, &err) != K25_OK)
            fail_msg("%s", err.msg);
        int64_t reads = 0, hits = 0, moved = 0;
        for (size_t i = 0; i < t.run.n_reqs; i++) {
            reads += t.run.reqs[i].kv_block_reads;
            hits += t.run.reqs[i].kv_block_hits;
            moved += t.run.reqs[i].kv_tier_bytes_moved;
        }
        if (tiers) {
            assert_true(json_is_true(json_object_get(sj, "kv_tiers_enabled")));
            assert_true(reads > 0 && hits <= reads);
            double rate = json_real_value(json_object_get(sj, "kv_cache_hit_rate"));
            assert_true(fabs(rate - (double)hits / (double)reads) < 1e-12);
            assert_true(s.kv_cache_hit_rate == rate);
            json_t *kt = json_object_get(sj, "kv_tiers");
            assert_int_equal(json_integer_value(json_object_get(kt, "bytes_moved")), moved);
            assert_true(moved > 0); /* a quarter of the KV in RAM: the rest went through the cold tier */
            /* the engine's counters over the measurement hold at least the requests' reads */
            assert_true(t.run.eng.measured && t.run.eng.kv_tiers);
            assert_true(t.run.eng.kv_block_reads >= reads && t.run.eng.kv_tier_bytes_moved >= moved);
            print_message("  bench with tiers: kv_cache_hit_rate %.4f (%lld/%lld reads), %lld bytes moved\n", rate,
                          (long long)hits, (long long)reads, (long long)moved);
        } else {
            assert_true(json_is_false(json_object_get(sj, "kv_tiers_enabled")));
            assert_true(json_is_null(json_object_get(sj, "kv_cache_hit_rate")));
            assert_null(json_object_get(sj, "kv_tiers"));
            assert_int_equal(moved, 0);
        }
        k25_trace_free(&t);
        json_decref(doc);
    }
}

/* `k25 run --json`: a kv_tiers object (the request's reads, hits, rate, wait, bytes) with tiers on, none without. */
static void test_run_json_tiers(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    tier_cfg(&c, 400 + 8);
    char cmd[2048], *out;
    for (int tiers = 1; tiers >= 0; tiers--) {
        int n = snprintf(cmd, sizeof(cmd),
                         "%s run --model tiny --prompt 'Clause 1.' --prompt-len 400 --max-tokens 8 --threads 1 "
                         "--kv-compression-ratio 1 --kv-block-size %d --prefill-chunk-size 64 --json --quiet",
                         tu_k25(), BLOCK);
        if (tiers)
            snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --kv-hot-tokens %d --kv-warm-budget-mb %.9g --kv-cold-dir %s",
                     c.kv_hot_tokens, c.kv_warm_budget_mb, c.kv_cold_dir);
        int st = tu_run(cmd, &out);
        json_error_t je;
        json_t *j = st == 0 ? json_loads(out, 0, &je) : NULL;
        if (!j)
            fail_msg("%s: exit %d\n%s", cmd, st, out);
        free(out);
        json_t *kt = json_object_get(j, "kv_tiers");
        if (tiers) {
            json_int_t reads = json_integer_value(json_object_get(kt, "block_reads"));
            json_int_t hits = json_integer_value(json_object_get(kt, "block_hits"));
            assert_true(reads > 0 && hits <= reads);
            assert_true(fabs(json_real_value(json_object_get(kt, "kv_cache_hit_rate")) - (double)hits / (double)reads) <
                        1e-9);
            assert_true(json_integer_value(json_object_get(kt, "bytes_moved")) > 0);
        } else {
            assert_null(kt);
        }
        assert_int_equal(json_integer_value(json_object_get(j, "cached_tokens")), 0);
        json_decref(j);
    }
}


/* ------------------------------------------------------------ hotness (issue 36) */

/* Tiers whose warm pool keeps slots after the prefetch staging takes its share (tiny's 4 layers
 * stage 2 (S - W) / 2 blocks: a budget of 60% of the KV leaves about a fifth of it warm). */
static void hot_cfg(struct k25_config *c, int n, enum k25_tier_policy pol)
{
    c->kv_hot_tokens = BLOCK;
    c->kv_warm_budget_mb = 0.6 * seq_kv_bytes(c, n) / 1048576.0;
    snprintf(c->kv_cold_dir, sizeof(c->kv_cold_dir), "%s", tu_dir);
    c->kv_tier_policy = pol;
    c->kv_recent_tokens = 2 * BLOCK; /* the recent window (never demoted): 2 of the test's small blocks */
}

/*
 * Residency moves bytes, not values: the hotness policy (plain_text and
 * legal_doc spans), the positional one and the all-in-RAM engine give the
 * same tokens and logits bit for bit, fp32 and with compression (r = 0.5,
 * where compaction rewrites blocks and the scoring of every slot on the
 * sampled layers runs beside compression's own); and hotness moves blocks.
 */
static void test_hotness_identical(void **state)
{
    (void)state;
    const int n = 600;
    /* sections every 64 tokens (4 blocks of 16; plain spans would be 1024 tokens: the whole prompt),
     * two of them in one block (one span start) */
    int32_t sec[10];
    for (int i = 0; i < 9; i++)
        sec[i] = 40 + 64 * i;
    sec[9] = sec[8] + 3;
    for (int pass = 0; pass < 2; pass++) {
        struct k25_config c;
        base_cfg(&c);
        if (pass == 1)
            c.kv_compression_ratio = 0.5;
        c.kv_recent_tokens = 2 * BLOCK; /* hot_cfg's recent window, for every run (compression reads it) */
        struct run_out ram, pos, hot, legal;
        g_sec = NULL, g_nsec = 0, g_hint = K25_HINT_AUTO;
        run_case(&c, n, true, &ram);
        hot_cfg(&c, n + N_NEW, K25_TIER_POSITIONAL);
        run_case(&c, n, true, &pos);
        hot_cfg(&c, n + N_NEW, K25_TIER_HOTNESS);
        run_case(&c, n, true, &hot);
        g_sec = sec, g_nsec = 10, g_hint = K25_HINT_LEGAL_DOC, g_inject = true;
        run_case(&c, n, true, &legal);
        g_sec = NULL, g_nsec = 0, g_hint = K25_HINT_AUTO, g_inject = false;
        assert_identical(&ram, &pos);
        assert_identical(&ram, &hot);
        assert_identical(&ram, &legal);
        assert_int_equal(pos.st.kv_tier_promotions + pos.st.kv_tier_demotions, 0); /* positional: none */
        assert_int_equal(legal.res.kv_span_mode, K25_HINT_LEGAL_DOC);
        assert_false(legal.res.kv_span_auto);
        assert_int_equal(legal.res.kv_sections, 10);
        assert_int_equal(legal.res.kv_spans, 10); /* block 0, then one per section but the doubled one */
        assert_int_equal(hot.res.kv_span_mode, K25_HINT_PLAIN_TEXT); /* auto without sections */
        assert_true(hot.res.kv_span_auto);
        print_message("  r=%.1f: hit rate positional %.3f hotness %.3f legal %.3f; promotions %lld / %lld, "
                      "demotions %lld / %lld\n", c.kv_compression_ratio, pos.res.kv_cache_hit_rate,
                      hot.res.kv_cache_hit_rate, legal.res.kv_cache_hit_rate, (long long)hot.st.kv_tier_promotions,
                      (long long)legal.st.kv_tier_promotions, (long long)hot.st.kv_tier_demotions,
                      (long long)legal.st.kv_tier_demotions);
        if (pass == 0) /* uncompressed: cold blocks stay cold between steps, so hot spans get promoted */
            assert_true(legal.st.kv_tier_promotions > 0 && legal.st.kv_tier_demotions > 0);
        free(ram.logits);
        free(pos.logits);
        free(hot.logits);
        free(legal.logits);
    }
}

/* Decay and the hysteresis rules, against their definitions. */
static void test_heat_and_hysteresis(void **state)
{
    (void)state;
    float h = 0.0f;
    for (int i = 0; i < 200; i++)
        h = k25_kv_heat_step(h, 0.1f);
    assert_float_equal(h, 0.1f / (1.0f - K25_KV_HEAT_DECAY), 1e-4); /* a constant mass m: m / (1 - decay) */
    float g = 1.0f;
    int steps = 0;
    while (g > 0.5f) {
        g = k25_kv_heat_step(g, 0.0f);
        steps++;
    }
    assert_int_equal(steps, 7); /* 0.9^7 = 0.478: the half-life is 6.6 steps */
    assert_true(k25_kv_heat_step(2.0f, 0.5f) == K25_KV_HEAT_DECAY * 2.0f + 0.5f);
    /* margin: 1.5x, strictly */
    assert_false(k25_kv_hot_displaces(1.5f, 1.0f));
    assert_true(k25_kv_hot_displaces(1.51f, 1.0f));
    assert_false(k25_kv_hot_displaces(0.2f, 0.2f)); /* equals never swap: no bouncing between twins */
    assert_false(k25_kv_hot_displaces(1e9f, INFINITY)); /* protected blocks never go */
    assert_true(k25_kv_hot_displaces(1e-9f, 0.0f));
    assert_int_equal(k25_kv_hot_stride(4), 1);
    assert_int_equal(k25_kv_hot_stride(8), 2);
    assert_int_equal(k25_kv_hot_stride(32), 8);
    assert_int_equal(k25_kv_hot_stride(1), 1);
}

/* Dwell: in a hotness run no block moves (promote or demote) twice within K25_KV_HOT_DWELL steps,
 * read from the DEBUG log's [KV_CACHE] lines in step order. */
static void test_hotness_dwell(void **state)
{
    (void)state;
    struct k25_config c;
    base_cfg(&c);
    const int n = 600;
    hot_cfg(&c, n + N_NEW, K25_TIER_HOTNESS);
    c.log_level = K25_LOG_DEBUG;
    snprintf(c.log_file, sizeof(c.log_file), "%s/hot.log", tu_dir);
    struct run_out o;
    int32_t sec[9];
    for (int i = 0; i < 9; i++)
        sec[i] = 40 + 64 * i;
    /* the request says plain_text, the config legal_doc: the config's wins (auto would pick plain:
     * 9 starts in 600 tokens is 15 per 1000, too dense) */
    g_sec = sec, g_nsec = 9, g_hint = K25_HINT_PLAIN_TEXT, g_inject = true;
    c.block_pattern_hint = K25_HINT_LEGAL_DOC;
    run_case(&c, n, true, &o);
    g_sec = NULL, g_nsec = 0, g_inject = false;
    free(o.logits);
    char *s = slurp(c.log_file);
    assert_int_equal(count(s, "event=promote reason=HOT_ACCESS_PATTERN from=cold to=warm"),
                     (int)o.st.kv_tier_promotions);
    assert_int_equal(count(s, "evict_reason=STALE_ACCESS_PATTERN from=warm to=cold"), (int)o.st.kv_tier_demotions);
    assert_true(count(s, "event=spans hint=legal_doc mode=legal_doc decided=False sections=9") == 1);
    /* a block promoted (queued) at step q is not demoted for hotness before q + K25_KV_HOT_DWELL */
    long long queued[4096];
    int moves = 0;
    for (int i = 0; i < 4096; i++)
        queued[i] = -1;
    for (char *p = s; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        int id;
        long long q, st;
        char *b = strstr(p, "block_id=");
        if (b && sscanf(b, "block_id=%d", &id) == 1 && id >= 0 && id < 4096) {
            char *qs = strstr(p, "queued_step="), *ss = strstr(p, " step=");
            if (strstr(p, "event=promote") && qs && sscanf(qs, "queued_step=%lld", &q) == 1) {
                queued[id] = q;
                moves++;
            } else if (strstr(p, "evict_reason=STALE_ACCESS_PATTERN") && ss && sscanf(ss, " step=%lld", &st) == 1) {
                if (queued[id] >= 0)
                    assert_true(st - queued[id] >= K25_KV_HOT_DWELL);
                moves++;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
    print_message("  %d hotness moves logged\n", moves);
    assert_true(o.st.kv_tier_promotions >= 4 && o.st.kv_tier_demotions >= 4); /* both injected sections */
    free(s);
}

/* Spans: plain_text fixed, legal_doc at sections (long ones cut, same-block starts merged), auto by density. */
static void test_spans_cut(void **state)
{
    (void)state;
    struct k25_kv_spans sp;
    struct k25_error err;
    /* plain: 1024-token spans of 256-token blocks = 4 blocks; 10 000 tokens = 40 blocks, 10 spans */
    assert_int_equal(k25_kv_spans_cut(K25_HINT_PLAIN_TEXT, NULL, 0, 10000, 256, &sp, &err), K25_OK);
    assert_int_equal(sp.n, 10);
    assert_int_equal(sp.first[3], 12);
    assert_int_equal(k25_kv_span_of(&sp, 13), 3);
    assert_int_equal(k25_kv_span_of(&sp, 40), 10); /* generated tokens: fixed spans on */
    int b0, b1;
    k25_kv_span_range(&sp, 9, &b0, &b1);
    assert_int_equal(b0, 36);
    assert_int_equal(b1, 40);
    k25_kv_span_range(&sp, 11, &b0, &b1);
    assert_int_equal(b0, 44);
    assert_int_equal(b1, 48);
    k25_kv_spans_free(&sp);
    /* legal: sections at 300, 700 (same block as 600? no: block 2), 800 (block 3), 900 (block 3: merged),
     * 6000 (block 23); the section from block 3 to 23 (20 blocks > 16) is cut at 19 */
    static const int32_t st[] = {300, 700, 800, 900, 6000};
    assert_int_equal(k25_kv_spans_cut(K25_HINT_LEGAL_DOC, st, 5, 8000, 256, &sp, &err), K25_OK);
    int want[] = {0, 1, 2, 3, 19, 23};
    assert_int_equal(sp.n, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(sp.first[i], want[i]);
    assert_int_equal(sp.doc_blocks, 32);
    assert_int_equal(k25_kv_span_of(&sp, 22), 4);
    assert_int_equal(k25_kv_span_of(&sp, 31), 5);
    assert_false(sp.decided);
    k25_kv_spans_free(&sp);
    /* auto: 5 sections in 8000 tokens (0.625 per 1000): legal; 2: plain; 100 in 8000 (12.5): plain */
    assert_int_equal(k25_kv_spans_cut(K25_HINT_AUTO, st, 5, 8000, 256, &sp, &err), K25_OK);
    assert_true(sp.decided && sp.mode == K25_HINT_LEGAL_DOC);
    assert_float_equal(sp.density, 0.625, 1e-9);
    k25_kv_spans_free(&sp);
    assert_int_equal(k25_kv_spans_cut(K25_HINT_AUTO, st, 2, 8000, 256, &sp, &err), K25_OK);
    assert_true(sp.decided && sp.mode == K25_HINT_PLAIN_TEXT);
    k25_kv_spans_free(&sp);
    int32_t dense[100];
    for (int i = 0; i < 100; i++)
        dense[i] = 10 + 80 * i;
    assert_int_equal(k25_kv_spans_cut(K25_HINT_AUTO, dense, 100, 8000, 256, &sp, &err), K25_OK);
    assert_true(sp.decided && sp.mode == K25_HINT_PLAIN_TEXT);
    k25_kv_spans_free(&sp);
    /* bad starts: not ascending, past the prompt; the engine refuses them at submit, naming the field */
    static const int32_t bad[] = {50, 40};
    assert_int_equal(k25_kv_spans_cut(K25_HINT_LEGAL_DOC, bad, 2, 100, 16, &sp, &err), K25_EINVAL);
    assert_string_equal(err.field, "section_starts");
    static const int32_t past[] = {50, 100};
    assert_int_equal(k25_kv_spans_cut(K25_HINT_LEGAL_DOC, past, 2, 100, 16, &sp, &err), K25_EINVAL);
    struct k25_config c;
    base_cfg(&c);
    k25_engine_t *e;
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), K25_OK);
    int32_t ids[100] = {0};
    struct k25_request req = {.id = "b", .input_ids = ids, .n_input = 100, .section_starts = past,
                              .n_section_starts = 2};
    int h;
    assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_EINVAL);
    assert_string_equal(err.field, "section_starts");
    k25_engine_destroy(e);
}

/* The section finder on the generator's contracts and meeting notes, and on headings of every kind. */
static void test_section_starts(void **state)
{
    (void)state;
    const char *txt = "PREAMBLE\nArticle 1. Scope\ntext that cites Section 4.2 mid-line\n"
                      "  ## SECTION IV - Fees\nmore\n\xc2\xa7 12 Haftung\n\xe7\xac\xac\xe5\x8d\x81\xe4\xba\x8c\xe6\x9d\xa1 "
                      "\xe8\xb4\xa3\xe4\xbb\xbb\nArticles of faith\nSection\n";
    size_t *o, n;
    bool clauses;
    struct k25_error err;
    assert_int_equal(k25_gold_section_starts(txt, strlen(txt), &o, &n, &clauses, &err), K25_OK);
    assert_int_equal(n, 4); /* Article 1, SECTION IV, § 12, 第十二条; not the citation, "Articles", bare "Section" */
    assert_false(clauses);
    assert_int_equal(o[0], strlen("PREAMBLE\n"));
    assert_memory_equal(txt + o[1], "  ## SECTION IV", 15);
    free(o);
    const char *cl = "Terms\n1. Definitions apply\n1.1 The Customer shall\n2.3.4 (a) more\n12 monkeys\n3.x no\n";
    assert_int_equal(k25_gold_section_starts(cl, strlen(cl), &o, &n, &clauses, &err), K25_OK);
    assert_int_equal(n, 3);
    assert_true(clauses);
    free(o);
    /* byte offsets to token positions through token start offsets */
    size_t offs[] = {0, 5, 6, 30, 99};
    size_t tok_start[] = {0, 4, 8, 12, 20, 31};
    int32_t pos[5];
    int m;
    k25_gold_sections_to_tokens(offs, 5, tok_start, 6, pos, &m);
    assert_int_equal(m, 3); /* 0 -> 0, 5 -> 2, 6 -> 2 (same token), 30 -> 5, 99 -> past the end */
    assert_int_equal(pos[0], 0);
    assert_int_equal(pos[1], 2);
    assert_int_equal(pos[2], 5);
    k25_gold_sections_to_tokens(offs, 5, NULL, 40, pos, &m);
    assert_int_equal(m, 4); /* the byte tokenizer: identity */
    assert_int_equal(pos[3], 30);
    /* the generator: contracts have ARTICLE headings (auto: legal), meeting notes none (auto: plain) */
    for (int dom = 0; dom < 2; dom++) {
        struct k25_gold_gen_opts go;
        k25_gold_gen_opts_init(&go);
        go.lengths[0] = 16384;
        go.n_lengths = 1;
        go.count = 1;
        go.domain = dom == 0 ? K25_GOLD_DOMAIN_LEGAL : K25_GOLD_DOMAIN_MINUTES;
        char *buf = NULL;
        size_t bl = 0;
        FILE *f = open_memstream(&buf, &bl);
        assert_int_equal(k25_gold_generate(&go, f, &err), K25_OK);
        fclose(f);
        json_error_t je;
        json_t *j = json_loads(buf, 0, &je);
        assert_non_null(j);
        const char *text = json_string_value(json_object_get(j, "text"));
        assert_int_equal(k25_gold_section_starts(text, strlen(text), &o, &n, &clauses, &err), K25_OK);
        int32_t *p32 = malloc(sizeof(int32_t) * (n ? n : 1));
        k25_gold_sections_to_tokens(o, n, NULL, (int)strlen(text), p32, &m);
        struct k25_kv_spans sp;
        assert_int_equal(k25_kv_spans_cut(K25_HINT_AUTO, p32, m, (int)strlen(text), 256, &sp, &err), K25_OK);
        print_message("  %s 16K: %zu section starts, auto -> %s, %d spans\n", dom ? "minutes" : "legal", n,
                      k25_hint_name(sp.mode), sp.n);
        assert_int_equal(sp.mode, dom == 0 ? K25_HINT_LEGAL_DOC : K25_HINT_PLAIN_TEXT);
        if (dom == 0)
            assert_true(n >= 5);
        k25_kv_spans_free(&sp);
        free(p32);
        free(o);
        json_decref(j);
        free(buf);
    }
}

/* kv_tier_policy and block_pattern_hint: a YAML value and a flag give the same config; validation. */
static void test_hotness_config(void **state)
{
    (void)state;
    struct k25_config a, b;
    struct k25_error err;
    base_cfg(&a);
    base_cfg(&b);
    char path[1100];
    snprintf(path, sizeof(path), "%s/h.yaml", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "kv_tier_policy: hotness\nblock_pattern_hint: legal_doc\n");
    fclose(f);
    assert_int_equal(k25_config_load_yaml(&a, path, &err), K25_OK);
    assert_int_equal(k25_config_set(&b, "kv_tier_policy", "hotness", "command line", 0, &err), K25_OK);
    assert_int_equal(k25_config_set(&b, "block_pattern_hint", "legal_doc", "command line", 0, &err), K25_OK);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_int_equal(a.kv_tier_policy, K25_TIER_HOTNESS);
    assert_int_equal(a.block_pattern_hint, K25_HINT_LEGAL_DOC);
    /* refused: hotness without tiers, without a cold tier; a hint with the positional policy */
    assert_int_equal(k25_config_validate(&a, &err), K25_EINVAL);
    assert_string_equal(err.field, "kv_tier_policy");
    a.kv_hot_tokens = 16;
    a.kv_warm_budget_mb = 1;
    assert_int_equal(k25_config_validate(&a, &err), K25_EINVAL);
    assert_string_equal(err.field, "kv_tier_policy");
    assert_non_null(strstr(err.msg, "kv_cold_dir"));
    snprintf(a.kv_cold_dir, sizeof(a.kv_cold_dir), "%s", tu_dir);
    assert_int_equal(k25_config_validate(&a, &err), K25_OK);
    a.kv_tier_policy = K25_TIER_POSITIONAL;
    assert_int_equal(k25_config_validate(&a, &err), K25_EINVAL);
    assert_string_equal(err.field, "block_pattern_hint");
    assert_int_equal(k25_config_set(&a, "kv_tier_policy", "lru", NULL, 0, &err), K25_EINVAL);
    assert_int_equal(k25_config_set(&a, "block_pattern_hint", "legal", NULL, 0, &err), K25_EINVAL);
    /* a baseline attention gives no scores: hotness is refused at create */
    a.kv_tier_policy = K25_TIER_HOTNESS;
    a.attention = K25_ATTN_FLASH2;
    k25_engine_t *e;
    assert_int_equal(k25_engine_create(&a, tu_tiny, &e, &err), K25_EINVAL);
    assert_string_equal(err.field, "kv_tier_policy");
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

int main(int argc, char **argv)
{
    k25_blas_reexec(argv);
    if (argc >= 2 && !strcmp(argv[1], "--measure"))
        return measure(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_tier_fp32),
        cmocka_unit_test(test_cold_tier_int8),
        cmocka_unit_test(test_cold_tier_int4),
        cmocka_unit_test(test_cold_tier_compressed),
        cmocka_unit_test(test_log_lines),
        cmocka_unit_test(test_admission_past_ram),
        cmocka_unit_test(test_mem_estimate_tiers),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_bench_summary_hit_rate),
        cmocka_unit_test(test_run_json_tiers),
        cmocka_unit_test(test_hotness_identical),
        cmocka_unit_test(test_heat_and_hysteresis),
        cmocka_unit_test(test_hotness_dwell),
        cmocka_unit_test(test_spans_cut),
        cmocka_unit_test(test_section_starts),
        cmocka_unit_test(test_hotness_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
