/*
 * test_decode.c - the decode kernels and weight formats (issue 16):
 *  - every kernel path this CPU has (scalar, AVX2, AVX-512) on every weight
 *    format against a double-precision reference on the dequantized
 *    weights: |y - ref| <= 1e-5 * (sum_k |x w| + |y0|) per element;
 *  - batch invariance per path, kernel level: row i of an m-row call is
 *    bit-identical to the same row alone, for every m <= K25_GEMV_MAX_M;
 *  - batch invariance, engine level: a request alone and inside a batch of
 *    8 gives bit-identical logits when every step has <= K25_GEMV_MAX_M
 *    tokens (short prompts, prefill_chunk_size 2, a 16-token step budget),
 *    with fp32 KV on `tiny` and int4 KV on `small`;
 *  - int8/int4 quantization: the layout's bytes, error within half a step;
 *  - engines on quantized and bf16 weights: logits near the fp32 ones,
 *    weight bytes as k25_mem_estimate says; cpu_kernels refuses a path the
 *    CPU lacks.
 */
#include "testutil.h"
#include "tu_model.h"
#include "weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t g_rng = 12345;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 17;
    g_rng ^= g_rng << 5;
    return (float)(g_rng >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
}

/* n rows of k values of dt (fp32 source w); returns the bytes and fills *wr. */
static void *make_weights(const float *w, int n, int k, enum k25_dtype dt, int group, struct k25_wrows *wr)
{
    size_t rb = (dt == K25_DTYPE_INT8 || dt == K25_DTYPE_INT4) ? k25_wquant_row_bytes(dt, k, group)
                                                                 : (size_t)k * (dt == K25_DTYPE_FP32 ? 4 : 2);
    unsigned char *b = malloc(rb * (size_t)n + 64);
    if (dt == K25_DTYPE_INT8 || dt == K25_DTYPE_INT4) {
        k25_wquant_rows(dt, group, w, K25_DTYPE_FP32, (size_t)k, n, k, b);
    } else {
        for (size_t i = 0; i < (size_t)n * k; i++) {
            if (dt == K25_DTYPE_FP32)
                memcpy(b + 4 * i, &w[i], 4);
            else {
                uint16_t h = dt == K25_DTYPE_BF16 ? k25_fp32_to_bf16(w[i]) : k25_fp32_to_fp16(w[i]);
                memcpy(b + 2 * i, &h, 2);
            }
        }
    }
    *wr = (struct k25_wrows){b, rb, dt, n, k, (dt == K25_DTYPE_INT8 || dt == K25_DTYPE_INT4) ? group : 0};
    return b;
}

static const enum k25_dtype g_dts[] = {K25_DTYPE_FP32, K25_DTYPE_BF16, K25_DTYPE_FP16, K25_DTYPE_INT8,
                                       K25_DTYPE_INT4};

/* One format, one shape: every path against the reference, and m-invariance per path. */
static void check_kernels(enum k25_dtype dt, int n, int k, int group, bool acc)
{
    const int M = K25_GEMV_MAX_M, xs = k + 5, ys = n + 3;
    float *w = malloc(sizeof(float) * (size_t)n * k), *x = malloc(sizeof(float) * (size_t)M * xs);
    float *wd = malloc(sizeof(float) * (size_t)n * k), *y0 = malloc(sizeof(float) * (size_t)M * ys);
    float *y = malloc(sizeof(float) * (size_t)M * ys), *y1 = malloc(sizeof(float) * (size_t)ys);
    for (int i = 0; i < n * k; i++)
        w[i] = frand();
    for (int i = 0; i < M * xs; i++)
        x[i] = frand();
    for (int i = 0; i < M * ys; i++)
        y0[i] = frand();
    struct k25_wrows wr;
    void *wb = make_weights(w, n, k, dt, group, &wr);
    k25_wrows_dequant(&wr, 0, n, wd, (size_t)k);
    for (int p = 0; p < K25_KPATH_N; p++) {
        if (!k25_kpath_available((enum k25_kpath)p)) {
            print_message("path %s: not on this CPU, skipped\n", k25_kpath_name((enum k25_kpath)p));
            continue;
        }
        double worst = 0;
        for (int m = 1; m <= M; m++) {
            memcpy(y, y0, sizeof(float) * (size_t)M * ys);
            k25_gemv((enum k25_kpath)p, x, (size_t)xs, m, &wr, y, (size_t)ys, acc);
            for (int i = 0; i < m; i++) {
                /* the same row alone: bit-identical */
                memcpy(y1, y0 + (size_t)i * ys, sizeof(float) * (size_t)ys);
                k25_gemv((enum k25_kpath)p, x + (size_t)i * xs, (size_t)xs, 1, &wr, y1, (size_t)ys, acc);
                if (memcmp(y1, y + (size_t)i * ys, sizeof(float) * (size_t)n))
                    fail_msg("path %s, %s, n=%d k=%d: row %d of an m=%d call differs from the row alone",
                             k25_kpath_name((enum k25_kpath)p), k25_dtype_name(dt), n, k, i, m);
                for (int j = 0; j < n; j++) {
                    double r = acc ? y0[(size_t)i * ys + j] : 0, mag = fabs(r);
                    for (int t = 0; t < k; t++) {
                        double pr = (double)x[(size_t)i * xs + t] * wd[(size_t)j * k + t];
                        r += pr;
                        mag += fabs(pr);
                    }
                    double e = fabs(y[(size_t)i * ys + j] - r) / (mag > 0 ? mag : 1);
                    worst = e > worst ? e : worst;
                }
                for (int j = n; j < ys; j++) /* padding untouched */
                    assert_true(y[(size_t)i * ys + j] == y0[(size_t)i * ys + j]);
            }
            for (int i = m; i < M; i++) /* rows beyond m untouched */
                assert_memory_equal(y + (size_t)i * ys, y0 + (size_t)i * ys, sizeof(float) * (size_t)ys);
        }
        if (worst > 1e-5)
            fail_msg("path %s, %s, n=%d k=%d acc=%d: error %.3g exceeds 1e-5", k25_kpath_name((enum k25_kpath)p),
                     k25_dtype_name(dt), n, k, acc, worst);
    }
    free(wb);
    free(w);
    free(x);
    free(wd);
    free(y0);
    free(y);
    free(y1);
}

static void test_kernels(void **state)
{
    (void)state;
    for (size_t d = 0; d < sizeof(g_dts) / sizeof(g_dts[0]); d++) {
        bool q = g_dts[d] == K25_DTYPE_INT8 || g_dts[d] == K25_DTYPE_INT4;
        check_kernels(g_dts[d], 67, 256, 32, false);
        check_kernels(g_dts[d], 40, 192, 64, true);
        if (!q) { /* dense rows need not be whole blocks of 32 */
            check_kernels(g_dts[d], 33, 37, 0, true);
            check_kernels(g_dts[d], 5, 7, 0, false);
        }
    }
}

/* int8/int4: bytes of the layout, and every value within half a step of the original. */
static void test_quant_layout(void **state)
{
    (void)state;
    const int n = 9, k = 128;
    assert_int_equal(k25_wquant_row_bytes(K25_DTYPE_INT8, 4096, 32), 4096 + 128 * 4);
    assert_int_equal(k25_wquant_row_bytes(K25_DTYPE_INT4, 4096, 64), 2048 + 64 * 4);
    assert_int_equal(k25_wquant_group(K25_DTYPE_INT4, 4096, 2048 + 64 * 4), 64);
    assert_int_equal(k25_wquant_group(K25_DTYPE_INT8, 4096, 4096 + 128 * 4), 32);
    float w[9 * 128], d[9 * 128];
    for (int i = 0; i < n * k; i++)
        w[i] = frand() * (i % 7 == 0 ? 4.0f : 1.0f);
    w[5] = 0; /* an all-zero group has scale 0 */
    for (int i = 32; i < 64; i++)
        w[i] = 0;
    for (int qi = 0; qi < 2; qi++) {
        enum k25_dtype q = qi ? K25_DTYPE_INT4 : K25_DTYPE_INT8;
        struct k25_wrows wr;
        void *b = make_weights(w, n, k, q, 32, &wr);
        k25_wrows_dequant(&wr, 0, n, d, k);
        for (int i = 0; i < n; i++)
            for (int g = 0; g < k / 32; g++) {
                float amax = 0;
                for (int t = 0; t < 32; t++)
                    amax = fmaxf(amax, fabsf(w[i * k + g * 32 + t]));
                float step = amax / (qi ? 7.0f : 127.0f);
                for (int t = 0; t < 32; t++) {
                    int j = i * k + g * 32 + t;
                    if (fabsf(d[j] - w[j]) > 0.5f * step * (1 + 1e-5f) + 1e-30f)
                        fail_msg("%s: value %d: %g dequantizes to %g (step %g)", k25_dtype_name(q), j, w[j], d[j],
                                 step);
                }
            }
        free(b);
    }
}

/* Runs `n` requests (request 0 first) with 12-token prompts on one engine; logits of request 0. */
static float *run_batch(const struct k25_config *cfg, const k25_model_t *model, int n, int gen)
{
    k25_engine_t *e;
    struct k25_error err;
    if (k25_engine_create(cfg, model, &e, &err) != K25_OK)
        fail_msg("%s", err.msg);
    int32_t prompts[8][12];
    int h[8];
    for (int r = 0; r < n; r++) {
        for (int t = 0; t < 12; t++)
            prompts[r][t] = (int32_t)((r * 37 + t * 11 + 5) % 256);
        char id[8];
        snprintf(id, sizeof(id), "r%d", r);
        struct k25_request req = {.id = id, .input_ids = prompts[r], .n_input = 12, .max_new_tokens = gen,
                                  .keep_logits = true};
        assert_int_equal(k25_engine_submit(e, &req, &h[r], &err), K25_OK);
    }
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    const struct k25_result *res = k25_engine_result(e, h[0]);
    assert_int_equal(res->n_output, gen);
    size_t bytes = sizeof(float) * 256 * (size_t)gen;
    float *out = malloc(bytes);
    memcpy(out, res->logits, bytes);
    k25_engine_destroy(e);
    return out;
}

/* Every step <= 16 tokens: the decode kernels run every GEMM, alone or in a batch of 8. */
static struct k25_config invariant_config(void)
{
    struct k25_config cfg;
    k25_config_init(&cfg);
    cfg.kv_compression_ratio = 1.0;
    cfg.prefill_chunk_size = 2;
    cfg.max_num_batched_tokens = K25_GEMV_MAX_M;
    cfg.max_batch_size = 8;
    return cfg;
}

static void test_batch_invariance(void **state)
{
    (void)state;
    const enum k25_cpu_kernels ks[] = {K25_CPU_KERNELS_SCALAR, K25_CPU_KERNELS_AVX2, K25_CPU_KERNELS_AVX512};
    const enum k25_kpath ps[] = {K25_KPATH_SCALAR, K25_KPATH_AVX2, K25_KPATH_AVX512};
    const int gen = 12;
    float *first = NULL;
    for (int i = 0; i < 3; i++) {
        if (!k25_kpath_available(ps[i]))
            continue;
        struct k25_config cfg = invariant_config();
        cfg.cpu_kernels = ks[i];
        float *alone = run_batch(&cfg, tu_tiny, 1, gen), *batch = run_batch(&cfg, tu_tiny, 8, gen);
        for (int t = 0; t < gen; t++)
            if (memcmp(alone + 256 * t, batch + 256 * t, sizeof(float) * 256))
                fail_msg("cpu_kernels %s: token %d's logits differ alone and in a batch of 8",
                         k25_cpu_kernels_name(ks[i]), t);
        if (first) { /* paths agree to rounding */
            double num = 0, den = 0;
            for (int t = 0; t < 256 * gen; t++) {
                num += ((double)alone[t] - first[t]) * ((double)alone[t] - first[t]);
                den += (double)first[t] * first[t];
            }
            print_message("cpu_kernels %s vs scalar: logits rel err %.2e\n", k25_cpu_kernels_name(ks[i]),
                          sqrt(num / den));
            assert_true(sqrt(num / den) < 1e-4);
            free(alone);
        } else {
            first = alone;
        }
        free(batch);
    }
    free(first);
}

/*
 * The same with int4 KV on `small` (head_dim 64, so decode scores the keys on their int4 codes,
 * engine/cpu/attention.c): key groups of 8 tokens and no fp32 residual put most slots in int4 within
 * the 24-token requests; a row's int8 query rounding depends on the row and its key group only.
 */
static void test_batch_invariance_int4_kv(void **state)
{
    (void)state;
    struct k25_config cfg = invariant_config();
    struct k25_error err;
    k25_model_t *small;
    snprintf(cfg.model, sizeof(cfg.model), "small");
    if (k25_model_load(&cfg, &small, &err) != K25_OK)
        fail_msg("%s", err.msg);
    cfg.kv_cache_dtype = K25_DTYPE_INT4;
    cfg.kv_quant_group = 8;
    cfg.kv_quant_residual = 0;
    const int gen = 12;
    float *alone = run_batch(&cfg, small, 1, gen), *batch = run_batch(&cfg, small, 8, gen);
    for (int t = 0; t < gen; t++)
        if (memcmp(alone + 256 * t, batch + 256 * t, sizeof(float) * 256))
            fail_msg("int4 KV: token %d's logits differ alone and in a batch of 8", t);
    free(alone);
    free(batch);
    k25_model_destroy(small);
}

/* Quantized and bf16 weights: the first token's logits near the fp32 model's (uniform dummy
 * weights are the worst case for int4: 15 levels over a flat distribution), weight bytes as the
 * calculator says. */
static void test_weight_formats(void **state)
{
    (void)state;
    struct k25_config cfg = invariant_config();
    const int gen = 6;
    float *ref = run_batch(&cfg, tu_tiny, 1, gen);
    struct {
        enum k25_weight_dtype wd;
        enum k25_weight_quant q;
        double bound; /* logits rel err vs fp32 */
    } cases[] = {{K25_WEIGHT_FP32, K25_WQUANT_INT8, 0.02}, {K25_WEIGHT_FP32, K25_WQUANT_INT4, 0.3},
                 {K25_WEIGHT_BF16, K25_WQUANT_NONE, 0.02}, {K25_WEIGHT_FP16, K25_WQUANT_NONE, 0.005},
                 {K25_WEIGHT_BF16, K25_WQUANT_INT4, 0.3}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct k25_config cc = cfg;
        cc.weight_dtype = cases[c].wd;
        cc.quantize_weights = cases[c].q;
        k25_model_t *model = tu_tiny;
        struct k25_error err;
        if (cases[c].wd != K25_WEIGHT_FP32)
            assert_int_equal(k25_model_load(&cc, &model, &err), K25_OK);
        float *got = run_batch(&cc, model, 1, gen);
        double num = 0, den = 0; /* the first token's logits: later ones follow generated tokens */
        for (int t = 0; t < 256; t++) {
            num += ((double)got[t] - ref[t]) * ((double)got[t] - ref[t]);
            den += (double)ref[t] * ref[t];
        }
        double re = sqrt(num / den);
        print_message("weights %s, quantize %d: logits rel err vs fp32 %.3g (bound %.3g)\n",
                      k25_dtype_name(k25_weight_dtype_of(cases[c].wd)), (int)cases[c].q, re, cases[c].bound);
        assert_true(re < cases[c].bound);
        /* the engine's weight bytes are the calculator's */
        k25_engine_t *e;
        assert_int_equal(k25_engine_create(&cc, model, &e, &err), K25_OK);
        struct k25_mem_stats ms;
        k25_engine_mem(e, &ms);
        int64_t want = k25_model_weight_bytes(k25_model_get_shape(model), &cc);
        if (ms.cur_bytes[K25_MEM_WEIGHTS] != want)
            fail_msg("weights: engine holds %lld bytes, k25_model_weight_bytes says %lld",
                     (long long)ms.cur_bytes[K25_MEM_WEIGHTS], (long long)want);
        k25_engine_destroy(e);
        free(got);
        if (model != tu_tiny)
            k25_model_destroy(model);
    }
    free(ref);
}

static void test_refusals(void **state)
{
    (void)state;
    struct k25_config cfg = invariant_config();
    struct k25_error err;
    k25_engine_t *e = NULL;
    if (!k25_kpath_available(K25_KPATH_AVX512)) {
        cfg.cpu_kernels = K25_CPU_KERNELS_AVX512;
        assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_EUNSUPPORTED);
        assert_string_equal(err.field, "cpu_kernels");
        print_message("refused as expected: %s\n", err.msg);
    }
    cfg = invariant_config();
    cfg.quantize_weights = K25_WQUANT_INT8;
    cfg.weight_quant_group = 512; /* tiny's dim is 256 */
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_EINVAL);
    assert_string_equal(err.field, "weight_quant_group");
    assert_int_equal(k25_config_set(&cfg, "weight_quant_group", "48", NULL, 0, &err), K25_OK);
    assert_int_equal(k25_config_validate(&cfg, &err), K25_ERANGE);
    assert_int_equal(k25_config_set(&cfg, "cpu_kernels", "avx3", NULL, 0, &err), K25_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels),         cmocka_unit_test(test_quant_layout),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_batch_invariance_int4_kv),
        cmocka_unit_test(test_weight_formats),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, tu_model_setup, tu_model_teardown);
}
