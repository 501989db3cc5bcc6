/*
 * test_mem.c - the memory calculator (k25_mem_estimate, `k25 mem`) against
 * the tracking allocator: for every attention implementation and several
 * settings (chunked and one-pass prefill, fp32 and fp16 KV, batch 1 and 2)
 * the `tiny` engine serves the setting and the calculator's figures agree
 * with the measured peaks within 10% (total and each category); bad
 * arguments are refused by name; the CLI and its alias print the table and
 * JSON.
 */
#include "testutil.h"
#include "tu_model.h"

#include "k25.h"

#include <jansson.h>
#include <math.h>


struct setting {
    enum k25_attn_impl impl;
    int context, batch, chunk;
    enum k25_dtype dtype;
    bool one_pass;
};

static void within(const char *what, const struct setting *s, double measured, double calc)
{
    double rel = fabs(measured - calc) / (measured > 0 ? measured : 1);
    if (rel > 0.10)
        fail_msg("%s, context %d batch %d chunk %d %s%s: %s measured %.0f, calculator %.0f (%.1f%%)",
                 k25_attn_impl_name(s->impl), s->context, s->batch, s->chunk, k25_dtype_name(s->dtype),
                 s->one_pass ? " one-pass" : "", what, measured, calc, 100 * rel);
}

/* Serves batch requests of `context` tokens (prompt + 4 generated) and compares peaks. */
static void check_setting(const struct setting *s)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    cfg.attention = s->impl;
    cfg.prefill_chunk_size = s->chunk;
    cfg.kv_cache_dtype = s->dtype;
    cfg.disable_prefill_optimization = s->one_pass;
    cfg.max_batch_size = s->batch;
    cfg.threads = 2;
    const int gen = 4, prompt = s->context - gen;

    struct k25_mem_estimate est;
    assert_int_equal(k25_mem_estimate(&cfg, k25_model_get_shape(tu_tiny), s->context, s->batch, &est, &err), 0);

    struct k25_mem_stats before, after;
    k25_mem_reset_peak();
    k25_mem_get(&before);
    k25_engine_t *e;
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), 0);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)prompt);
    for (int i = 0; i < prompt; i++)
        ids[i] = (i * 7 + 3) % 256;
    for (int b = 0; b < s->batch; b++) {
        char id[16];
        snprintf(id, sizeof(id), "r%d", b);
        struct k25_request req = {.id = id, .input_ids = ids, .n_input = prompt, .max_new_tokens = gen};
        int h;
        assert_int_equal(k25_engine_submit(e, &req, &h, &err), 0);
    }
    assert_int_equal(k25_engine_run(e, &err), 0);
    k25_mem_get(&after);
    k25_engine_destroy(e);
    free(ids);

    /* before holds the model (weights + its struct): the calculator counts them too */
    for (int c = 0; c < K25_MEM_NCAT; c++) {
        if (c == K25_MEM_OTHER)
            continue; /* a few KiB of bookkeeping; checked through the total */
        within(k25_mem_cat_name(c), s, (double)after.peak_bytes[c], (double)est.bytes[c]);
    }
    within("total", s, (double)after.total_peak_bytes, (double)est.total_bytes);
    assert_true(est.recommended_bytes >= (int64_t)(est.total_bytes * 1.149));
}

static void test_calculator_vs_tracker(void **state)
{
    (void)state;
    const struct setting settings[] = {
        {K25_ATTN_CHUNKED, 700, 1, 256, K25_DTYPE_FP32, false},
        {K25_ATTN_CHUNKED, 1200, 2, 512, K25_DTYPE_FP16, false},
        {K25_ATTN_CHUNKED, 600, 1, 2048, K25_DTYPE_FP32, true},
        {K25_ATTN_FLASH2, 700, 1, 256, K25_DTYPE_FP32, false},
        {K25_ATTN_FLASH2, 1200, 2, 512, K25_DTYPE_FP16, false},
        {K25_ATTN_NAIVE, 700, 1, 256, K25_DTYPE_FP32, false},
        {K25_ATTN_NAIVE, 1200, 2, 512, K25_DTYPE_FP16, false},
        {K25_ATTN_NAIVE, 1000, 1, 2048, K25_DTYPE_FP32, true},
    };
    size_t n = sizeof(settings) / sizeof(settings[0]);
    for (size_t i = 0; i < n; i++)
        if (!tu_quick() || i % 2 == 0)
            check_setting(&settings[i]);
}

/*
 * The backend's memory_info (backend.h), through k25_backend_memory: the CPU
 * reports the host's available and total memory (0 < free <= total); an
 * unknown backend is refused by name; and an engine whose memory_budget_mb
 * is more than the backend's total is refused naming the key, while one
 * within it is made.
 */
static void test_backend_memory_info(void **state)
{
    (void)state;
    size_t fr = 0, tot = 0;
    struct k25_error err = {0};
    assert_int_equal(k25_backend_memory("cpu", &fr, &tot, &err), K25_OK);
    assert_true(tot > 0);
    assert_true(fr > 0 && fr <= tot);
    size_t fr2, tot2;
    assert_int_equal(k25_backend_memory("no-such-backend", &fr2, &tot2, &err), K25_ENOTFOUND);
    assert_string_equal(err.field, "backend");

    struct k25_config c;
    k25_config_init(&c);
    k25_engine_t *e = NULL;
    c.memory_budget_mb = (int64_t)(tot / (1024 * 1024)) * 2 + 1024; /* twice the host's memory */
    assert_int_not_equal(k25_engine_create(&c, tu_tiny, &e, &err), K25_OK);
    assert_string_equal(err.field, "memory_budget_mb");
    assert_non_null(strstr(err.msg, "memory_info"));
    c.memory_budget_mb = (int64_t)(tot / (1024 * 1024)) / 2; /* within it: a budget, not an allocation */
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), K25_OK);
    k25_engine_destroy(e);
}

/*
 * Two engines in one process account separately (the fidelity run has
 * two): each reports its own KV, activations and scratch, both report the
 * weights they map, and the process-wide figures hold the sum (with the
 * shared weights once).  Engine b serves a longer request than a in fp32
 * KV against a's fp16, so their figures must differ the way their work
 * does; an idle engine c has no KV at all.
 */
static void test_two_engines_account_separately(void **state)
{
    (void)state;
    struct k25_config ca, cb;
    struct k25_error err;
    k25_config_init(&ca);
    ca.threads = 2;
    ca.kv_cache_dtype = K25_DTYPE_FP16;
    cb = ca;
    cb.kv_cache_dtype = K25_DTYPE_FP32;
    k25_engine_t *a, *b, *c;
    struct k25_mem_stats p0, p1, ma, mb, mc;
    k25_mem_get(&p0);
    assert_int_equal(k25_engine_create(&ca, tu_tiny, &a, &err), 0);
    assert_int_equal(k25_engine_create(&cb, tu_tiny, &b, &err), 0);
    assert_int_equal(k25_engine_create(&ca, tu_tiny, &c, &err), 0);
    int32_t ids[600];
    for (int i = 0; i < 600; i++)
        ids[i] = (i * 11 + 5) % 256;
    struct k25_request ra = {.id = "a", .input_ids = ids, .n_input = 200, .max_new_tokens = 4};
    struct k25_request rb = {.id = "b", .input_ids = ids, .n_input = 600, .max_new_tokens = 4};
    int h;
    assert_int_equal(k25_engine_submit(a, &ra, &h, &err), 0);
    assert_int_equal(k25_engine_submit(b, &rb, &h, &err), 0);
    assert_int_equal(k25_engine_run(a, &err), 0);
    assert_int_equal(k25_engine_run(b, &err), 0);
    k25_engine_mem(a, &ma);
    k25_engine_mem(b, &mb);
    k25_engine_mem(c, &mc);
    k25_mem_get(&p1);
    const struct k25_model_shape *s = k25_model_get_shape(tu_tiny);
    int64_t wbytes = 4 * k25_model_param_count(s);
    print_message("engine a: kv peak %lld, activations %lld; engine b: kv peak %lld, activations %lld; "
                  "engine c: kv peak %lld; weights mapped %lld each\n",
                  (long long)ma.peak_bytes[K25_MEM_KV], (long long)ma.cur_bytes[K25_MEM_ACTIVATIONS],
                  (long long)mb.peak_bytes[K25_MEM_KV], (long long)mb.cur_bytes[K25_MEM_ACTIVATIONS],
                  (long long)mc.peak_bytes[K25_MEM_KV], (long long)ma.cur_bytes[K25_MEM_WEIGHTS]);
    for (int i = 0; i < 3; i++) { /* each maps the whole model (tied embeddings count once) */
        const struct k25_mem_stats *m = i == 0 ? &ma : i == 1 ? &mb : &mc;
        assert_true(m->cur_bytes[K25_MEM_WEIGHTS] >= wbytes - 4 * (int64_t)s->vocab_size * s->dim);
        assert_true(m->cur_bytes[K25_MEM_WEIGHTS] <= wbytes);
    }
    assert_true(ma.peak_bytes[K25_MEM_KV] > 0 && mb.peak_bytes[K25_MEM_KV] > 2 * ma.peak_bytes[K25_MEM_KV]);
    assert_int_equal(mc.peak_bytes[K25_MEM_KV], 0);
    assert_int_equal(mc.peak_bytes[K25_MEM_ACTIVATIONS], 0);
    assert_true(ma.peak_bytes[K25_MEM_ACTIVATIONS] > 0 && mb.peak_bytes[K25_MEM_ATTN_SCRATCH] > 0);
    /* the process holds the three engines' own memory plus the model once */
    int64_t own = 0;
    for (int cat = K25_MEM_KV; cat < K25_MEM_NCAT; cat++)
        own += ma.cur_bytes[cat] + mb.cur_bytes[cat] + mc.cur_bytes[cat];
    assert_int_equal(p1.total_cur_bytes - p0.total_cur_bytes, own);
    k25_engine_destroy(a);
    k25_engine_destroy(b);
    k25_engine_destroy(c);
    k25_mem_get(&p1);
    assert_int_equal(p1.total_cur_bytes, p0.total_cur_bytes);
}

/* The figures grow the way the implementations do. */
static void test_calculator_shapes(void **state)
{
    (void)state;
    struct k25_config cfg;
    struct k25_error err;
    struct k25_model_shape s;
    struct k25_mem_estimate a, b;
    k25_config_init(&cfg);
    cfg.threads = 2;
    assert_int_equal(k25_model_preset("llama3-8b", &s), 0);
    /* the default kv_compression_ratio (0.85) keeps ~85% of the slots, plus 16 bytes of slot
     * metadata per (layer, KV head, slot) */
    assert_int_equal(k25_mem_estimate(&cfg, &s, 131072, 1, &a, &err), 0);
    double full = (double)(INT64_C(32) << 30);
    assert_true(a.bytes[K25_MEM_KV] > 0.85 * full && a.bytes[K25_MEM_KV] < 0.85 * full * 1.05);
    cfg.kv_compression_ratio = 1.0;
    assert_int_equal(k25_mem_estimate(&cfg, &s, 131072, 1, &a, &err), 0);
    /* 128K tokens x 32 layers x 8 KV heads x 128 x 2 (K, V) x 4 bytes = 32 GiB */
    assert_int_equal(a.bytes[K25_MEM_KV], INT64_C(32) << 30);
    cfg.kv_cache_dtype = K25_DTYPE_FP16;
    assert_int_equal(k25_mem_estimate(&cfg, &s, 131072, 1, &b, &err), 0);
    assert_int_equal(b.bytes[K25_MEM_KV], INT64_C(16) << 30);
    /* naive one-pass at 128K: 32 heads x 128K x 128K floats of scores alone */
    cfg.attention = K25_ATTN_NAIVE;
    cfg.disable_prefill_optimization = true;
    assert_int_equal(k25_mem_estimate(&cfg, &s, 131072, 1, &b, &err), 0);
    assert_true(b.bytes[K25_MEM_ATTN_SCRATCH] >= INT64_C(32) * 131072 * 131072 * 4);
    assert_true(a.bytes[K25_MEM_ATTN_SCRATCH] < INT64_C(64) << 20); /* chunked: tiles only */
    /* bad arguments name themselves */
    assert_int_equal(k25_mem_estimate(&cfg, &s, 0, 1, &b, &err), K25_EINVAL);
    assert_string_equal(err.field, "context");
    assert_int_equal(k25_mem_estimate(&cfg, &s, 10, 0, &b, &err), K25_EINVAL);
    assert_string_equal(err.field, "batch");
}

static void test_cli(void **state)
{
    (void)state;
    char cmd[12800], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s mem --model llama3-8b --context 128k --kv-cache-dtype fp16 --kv-compression-ratio 1 --json", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 0);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "bytes"), "kv")), INT64_C(16) << 30);
    assert_true(json_integer_value(json_object_get(o, "recommended_bytes")) >
                json_integer_value(json_object_get(o, "total_bytes")));
    json_decref(o);
    free(out);

    /* the installed alias dispatches on argv[0] */
    char *dir = tu_tmpdir();
    char self[4096];
    const char *k = tu_k25();
    if (k[0] != '/') {
        assert_non_null(getcwd(self, sizeof(self) - strlen(k) - 2));
        strcat(self, "/");
        strcat(self, k);
    } else {
        snprintf(self, sizeof(self), "%s", k);
    }
    snprintf(cmd, sizeof(cmd), "ln -s %s %s/k25-mem-calculator && %s/k25-mem-calculator --model tiny --context 4096",
             self, dir, dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "recommended"));
    assert_non_null(strstr(out, "attn_scratch"));
    free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);

    snprintf(cmd, sizeof(cmd), "%s mem --model tiny", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--context"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s mem --model tiny --context 1k --attention flash3", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--attention"));
    free(out);
}

int main(int argc, char **argv)
{
    (void)argc;
    k25_blas_reexec(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calculator_vs_tracker),
        cmocka_unit_test(test_backend_memory_info),
        cmocka_unit_test(test_two_engines_account_separately),
        cmocka_unit_test(test_calculator_shapes),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, tu_model_setup, tu_model_teardown);
}
