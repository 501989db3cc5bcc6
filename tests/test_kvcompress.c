/*
 * test_kvcompress.c - KV cache compression (issue 6): INT8/INT4
 * quantization error bounds on random and adversarial data, attention over
 * quantized blocks against a dequantized fp32 reference, merging identical
 * keys leaving attention unchanged, sink and recent tokens surviving
 * pruning at every ratio, the kept fraction, r = 1 bit-identical to the
 * exact engine (the same arithmetic), the default ratio leaving short
 * prompts exact (the golden sequence, by the token-identity rule), memory
 * figures that count scales and slot metadata, admission that reserves the
 * kept slots (issue 16), and the fidelity metrics on hand-made cases with
 * known answers.
 */
#define K25_BACKEND_IMPL /* reads the CPU backend's KV storage (kvstore.h): struct k25_buf complete */
#include "testutil.h"
#include "tu_golden.h"
#include "tu_model.h"

#include "k25.h"
#include "kvcache.h"
#include "kvstore.h" /* the CPU backend's KV storage (engine/cpu/) */
#include "kvquant.h"
#include "fidelity.h"

#include <math.h>


static uint32_t g_rng = 12345;
static float frand(void) /* [-1, 1) */
{
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / (float)(1 << 23) - 1.0f;
}

/* Quantizes x[G][hd] as keys and as values, checks every value within the bound. */
static void check_quant(const float *x, int G, int hd, int bits, int vg)
{
    const int qmax = (1 << bits) - 1;
    size_t rb = k25_kvq_row_bytes(hd, bits);
    uint8_t *q = malloc(rb * G);
    uint16_t *sz = malloc(sizeof(uint16_t) * 2 * hd);
    float *row = malloc(sizeof(float) * hd), *szf = malloc(sizeof(float) * 2 * hd);
    k25_kvq_quant_keys(x, hd, G, hd, bits, q, sz);
    for (int i = 0; i < 2 * hd; i++)
        szf[i] = k25_fp16_to_fp32(sz[i]);
    for (int t = 0; t < G; t++) {
        k25_kvq_dequant_key_row(q + t * rb, szf, hd, bits, row);
        for (int d = 0; d < hd; d++) {
            float mn = x[d], mx = x[d];
            for (int u = 0; u < G; u++) {
                mn = fminf(mn, x[u * hd + d]);
                mx = fmaxf(mx, x[u * hd + d]);
            }
            double bound = 0.5 * ((mx - mn) + fabs(mn) * 2e-3) / qmax * 1.002 + 1e-6;
            if (fabs(row[d] - x[t * hd + d]) > bound)
                fail_msg("key %d,%d (%d bits): %g vs %g, bound %g", t, d, bits, row[d], x[t * hd + d], bound);
        }
    }
    uint16_t *vsz = malloc(sizeof(uint16_t) * 2 * (hd / vg));
    for (int t = 0; t < G; t++) {
        const float *xr = x + t * hd;
        k25_kvq_quant_value_row(xr, hd, vg, bits, q, vsz);
        k25_kvq_dequant_value_row(q, vsz, hd, vg, bits, row);
        for (int d = 0; d < hd; d++) {
            int g0 = d / vg * vg;
            float mn = xr[g0], mx = xr[g0];
            for (int u = g0; u < g0 + vg; u++) {
                mn = fminf(mn, xr[u]);
                mx = fmaxf(mx, xr[u]);
            }
            double bound = 0.5 * ((mx - mn) + fabs(mn) * 2e-3) / qmax * 1.002 + 1e-6;
            if (fabs(row[d] - xr[d]) > bound)
                fail_msg("value %d,%d (%d bits): %g vs %g, bound %g", t, d, bits, row[d], xr[d], bound);
        }
    }
    free(q);
    free(sz);
    free(vsz);
    free(row);
    free(szf);
}

static void test_quant_error_bounds(void **state)
{
    (void)state;
    const int G = 32, hd = 64;
    float *x = malloc(sizeof(float) * G * hd);
    for (int bits = 4; bits <= 8; bits += 4) {
        for (int i = 0; i < G * hd; i++) /* random */
            x[i] = frand() * 3.0f;
        check_quant(x, G, hd, bits, 32);
        for (int i = 0; i < G * hd; i++) /* outlier channels: 3 channels 200x larger, offset */
            x[i] = (i % hd == 5 || i % hd == 17 || i % hd == 63) ? 40.0f + 200.0f * frand() : frand() * 0.1f;
        check_quant(x, G, hd, bits, 32);
        for (int i = 0; i < G * hd; i++) /* all equal */
            x[i] = 1.2345f;
        check_quant(x, G, hd, bits, 32);
        for (int i = 0; i < G * hd; i++) /* zeros: exact */
            x[i] = 0.0f;
        check_quant(x, G, hd, bits, 16);
        uint8_t q[64];
        uint16_t sz[8];
        float row[64];
        k25_kvq_quant_value_row(x, hd, 16, bits, q, sz);
        k25_kvq_dequant_value_row(q, sz, hd, 16, bits, row);
        for (int d = 0; d < hd; d++)
            assert_true(row[d] == 0.0f);
        for (int i = 0; i < G * hd; i++) /* one huge token in a key group */
            x[i] = i / hd == 7 ? 1000.0f : frand();
        check_quant(x, G, hd, bits, 32);
    }
    free(x);
}

/* The CPU backend the pools keep their blocks in (no engine: the process's accounting). */
static struct k25_bctx *cpu(void)
{
    static struct k25_bctx ctx;
    struct k25_error err;
    if (!ctx.be && k25_bctx_init(&ctx, &k25_backend_cpu, NULL, &err) != K25_OK)
        fail_msg("%s", err.msg);
    return &ctx;
}

/* A one-layer shape for pool tests. */
static struct k25_model_shape shape1(int kvh, int hd)
{
    struct k25_model_shape s = {0};
    snprintf(s.name, sizeof(s.name), "t");
    s.n_layers = 1;
    s.n_heads = 2 * kvh;
    s.n_kv_heads = kvh;
    s.head_dim = hd;
    return s;
}

/* Attention of n_q queries (last ones) over seq through the pool's view. */
static void attend(struct k25_kv_pool *p, struct k25_kv_seq *seq, const float *q, int n_q, int H, float *out,
                   k25_attention_fn fn)
{
    const void *kp[64], *vp[64];
    struct k25_attn_job job = {q, H * p->head_dim, n_q, seq->n_tokens - n_q, {0}, out, H * p->head_dim, NULL};
    k25_kv_seq_view(p, seq, 0, kp, vp, &job.kv);
    fn(&job, 1, H, 1.0f / sqrtf((float)p->head_dim), NULL);
}

static double rel(const float *a, const float *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Quantized blocks read in the kernels equal the same values dequantized into an fp32 cache. */
static void test_quantized_attention_matches_dequantized(void **state)
{
    (void)state;
    const int kvh = 2, hd = 32, H = 4, N = 700;
    struct k25_model_shape s = shape1(kvh, hd);
    struct k25_error err;
    for (int dt = K25_DTYPE_INT8; dt <= K25_DTYPE_INT4; dt++) {
        struct k25_config cq, cf;
        k25_config_init(&cq);
        cq.kv_compression_ratio = 1.0;
        cq.kv_block_size = 64;
        cq.kv_cache_dtype = (enum k25_dtype)dt;
        cf = cq;
        cf.kv_cache_dtype = K25_DTYPE_FP32;
        struct k25_kv_pool pq, pf;
        struct k25_kv_seq sq = {0}, sf = {0};
        assert_int_equal(k25_kv_pool_init(&pq, &s, &cq, 0, cpu(), &err), 0);
        assert_int_equal(k25_kv_pool_init(&pf, &s, &cf, 0, cpu(), &err), 0);
        float *kv = malloc(sizeof(float) * N * 2 * kvh * hd);
        for (int i = 0; i < N * 2 * kvh * hd; i++)
            kv[i] = frand() + (i % hd == 3 ? 4.0f : 0.0f);
        assert_int_equal(k25_kv_seq_reserve(&pq, &sq, N, &err), 0);
        k25_kv_seq_write(&pq, &sq, 0, 0, N, kv, kv + kvh * hd, 2 * kvh * hd);
        assert_true(sq.n_quant[0] > 0 && sq.n_quant[0] < N); /* both regions in play */
        assert_true(N - sq.n_quant[0] >= cq.kv_quant_residual);
        assert_int_equal(k25_kv_seq_reserve(&pf, &sf, N, &err), 0);
        float *K = malloc(sizeof(float) * N * hd), *V = malloc(sizeof(float) * N * hd);
        float *rows = malloc(sizeof(float) * N * 2 * kvh * hd);
        for (int g = 0; g < kvh; g++) {
            k25_kv_seq_read(&pq, &sq, 0, g, 0, N, K, V);
            for (int t = 0; t < N; t++) {
                memcpy(rows + (size_t)t * 2 * kvh * hd + g * hd, K + t * hd, sizeof(float) * hd);
                memcpy(rows + (size_t)t * 2 * kvh * hd + kvh * hd + g * hd, V + t * hd, sizeof(float) * hd);
            }
        }
        k25_kv_seq_write(&pf, &sf, 0, 0, N, rows, rows + kvh * hd, 2 * kvh * hd);
        const int nqs[] = {1, 3, 200};
        for (int c = 0; c < 3; c++) {
            int nq = nqs[c];
            float *q = malloc(sizeof(float) * nq * H * hd), *o1 = calloc(nq * H * hd, 4), *o2 = calloc(nq * H * hd, 4);
            for (int i = 0; i < nq * H * hd; i++)
                q[i] = frand() * 2;
            attend(&pq, &sq, q, nq, H, o1, k25_attn_impl_get(K25_ATTN_CHUNKED)->run);
            attend(&pf, &sf, q, nq, H, o2, k25_attn_impl_get(K25_ATTN_CHUNKED)->run);
            assert_true(rel(o1, o2, nq * H * hd) < 1e-5);
            attend(&pq, &sq, q, nq, H, o1, k25_attn_impl_get(K25_ATTN_NAIVE)->run); /* baselines read it too */
            assert_true(rel(o1, o2, nq * H * hd) < 1e-5);
            free(q);
            free(o1);
            free(o2);
        }
        free(K);
        free(V);
        free(rows);
        free(kv);
        k25_kv_seq_release(&pq, &sq, NULL, NULL);
        k25_kv_seq_release(&pf, &sf, NULL, NULL);
        k25_kv_pool_free(&pq);
        k25_kv_pool_free(&pf);
    }
}

/*
 * The decode kernels' ln(count) term on every kind of tile: no merged slot,
 * counts 2..16 (taken from registers), a count above 16 (through the
 * table), and short tiles at block ends (block size 48: tiles of 32 and
 * 16).  fp32 and fp16: the chunked decode (one query, the AVX2 tile path
 * where built) against a double-precision softmax(q k / sqrt(hd) + ln
 * count) V over the stored rows within 1e-5, and against itself with every
 * count 1, which must move it.  (flash2 and naive take no compressed
 * sequences: they ignore the counts.)
 */
static void test_logc_tiles(void **state)
{
    (void)state;
    const int kvh = 2, hd = 64, H = 8, N = 1000, group = H / kvh;
    struct k25_model_shape s = shape1(kvh, hd);
    const enum k25_dtype dts[] = {K25_DTYPE_FP32, K25_DTYPE_FP16};
    for (int di = 0; di < 2; di++) {
        struct k25_error err;
        struct k25_config c;
        k25_config_init(&c);
        c.kv_block_size = 48;
        c.kv_compression_ratio = 0.5; /* slot counts kept (nothing is compressed here) */
        c.kv_cache_dtype = dts[di];
        struct k25_kv_pool p;
        struct k25_kv_seq seq = {0};
        assert_int_equal(k25_kv_pool_init(&p, &s, &c, 0, cpu(), &err), 0);
        assert_true(p.compress);
        float *kv = malloc(sizeof(float) * N * 2 * kvh * hd);
        for (int i = 0; i < N * 2 * kvh * hd; i++)
            kv[i] = frand() * 2;
        assert_int_equal(k25_kv_seq_reserve(&p, &seq, N, &err), 0);
        k25_kv_seq_write(&p, &seq, 0, 0, N, kv, kv + kvh * hd, 2 * kvh * hd);
        for (int g = 0; g < kvh; g++)
            for (int t = 0; t < N; t++) {
                const int tile = t / 32; /* by 32-slot stretch: none merged, small counts, one large */
                uint8_t cnt = 1;
                if (tile % 3 == 1 && t % 5 == g)
                    cnt = (uint8_t)(2 + (t * 7 + g) % 15); /* 2..16 */
                else if (tile % 3 == 2 && t % 32 == 9 + g)
                    cnt = (uint8_t)(17 + (t * 13) % 239); /* 17..255 */
                *k25_kv_slot_count(&p, &seq, 0, g, t) = cnt;
            }
        float q[8 * 64], o1[8 * 64], o3[8 * 64], ref[8 * 64];
        for (int i = 0; i < H * hd; i++)
            q[i] = frand() * 2;
        float *K = malloc(sizeof(float) * N * hd), *V = malloc(sizeof(float) * N * hd);
        double *sc = malloc(sizeof(double) * N);
        for (int h = 0; h < H; h++) {
            const int g = h / group;
            k25_kv_seq_read(&p, &seq, 0, g, 0, N, K, V);
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t < N; t++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[h * hd + i] * K[t * hd + i];
                sc[t] = d / sqrt((double)hd) + log((double)*k25_kv_slot_count(&p, &seq, 0, g, t));
                mx = fmax(mx, sc[t]);
            }
            for (int t = 0; t < N; t++)
                sum += (sc[t] = exp(sc[t] - mx));
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int t = 0; t < N; t++)
                    o += sc[t] * V[t * hd + i];
                ref[h * hd + i] = (float)(o / sum);
            }
        }
        attend(&p, &seq, q, 1, H, o1, k25_attn_impl_get(K25_ATTN_CHUNKED)->run);
        print_message("%s: chunked decode with merged counts vs the double reference: %.3g\n",
                      k25_dtype_name(dts[di]), rel(o1, ref, H * hd));
        assert_true(rel(o1, ref, H * hd) < 1e-5);
        for (int g = 0; g < kvh; g++)
            for (int t = 0; t < N; t++)
                *k25_kv_slot_count(&p, &seq, 0, g, t) = 1;
        attend(&p, &seq, q, 1, H, o3, k25_attn_impl_get(K25_ATTN_CHUNKED)->run);
        assert_true(rel(o3, o1, H * hd) > 1e-3); /* the counts mattered */
        free(K), free(V), free(sc), free(kv);
        k25_kv_seq_release(&p, &seq, NULL, NULL);
        k25_kv_pool_free(&p);
    }
}

/* Pairs of identical keys merged: the attention output does not move (ln 2 on the merged logit). */
static void test_merge_identical_keys(void **state)
{
    (void)state;
    const int kvh = 1, hd = 32, H = 2, N = 64;
    struct k25_model_shape s = shape1(kvh, hd);
    struct k25_error err;
    struct k25_config c;
    k25_config_init(&c);
    c.kv_block_size = 64;
    c.kv_compression_ratio = 0.75;
    c.kv_merge_threshold = 0.99;
    c.kv_sink_tokens = 4;
    c.kv_recent_tokens = 4;
    struct k25_kv_pool p;
    struct k25_kv_seq seq = {0};
    assert_int_equal(k25_kv_pool_init(&p, &s, &c, 0, cpu(), &err), 0);
    assert_true(p.compress);
    float *kv = malloc(sizeof(float) * N * 2 * hd);
    for (int t = 0; t < N; t++)
        for (int d = 0; d < 2 * hd; d++) {
            int src = (t >= 4 && t < 60 && t % 2 == 1 && d < hd) ? t - 1 : t; /* keys of (2i, 2i+1) equal */
            kv[t * 2 * hd + d] = src == t ? frand() : kv[src * 2 * hd + d];
        }
    assert_int_equal(k25_kv_seq_reserve(&p, &seq, N, &err), 0);
    k25_kv_seq_write(&p, &seq, 0, 0, N, kv, kv + hd, 2 * hd);
    float q[2 * 32], before[2 * 32], after[2 * 32];
    for (int i = 0; i < H * hd; i++)
        q[i] = frand() * 3;
    attend(&p, &seq, q, 1, H, before, k25_cpu_attention);
    struct k25_kv_compress_opts o = {c.kv_compression_ratio, c.kv_merge_threshold, 4, 4, 0};
    int removed = 0;
    assert_int_equal(k25_kv_seq_compress(&p, &seq, &o, &removed, &err), 0);
    assert_int_equal(removed, 16);
    assert_int_equal(seq.merged_slots, 16); /* all by merging, none pruned */
    assert_int_equal(seq.pruned_slots, 0);
    assert_int_equal(seq.n_tokens, 48);
    assert_int_equal(seq.n_pos, 64);
    attend(&p, &seq, q, 1, H, after, k25_cpu_attention);
    for (int i = 0; i < H * hd; i++)
        assert_true(fabsf(after[i] - before[i]) <= 1e-6f * (1.0f + fabsf(before[i])));
    /* without the ln(count) term the output would move: the check above is not vacuous */
    for (int sl = 0; sl < seq.n_tokens; sl++)
        *k25_kv_slot_count(&p, &seq, 0, 0, sl) = 1; /* ln 1 = 0 */
    attend(&p, &seq, q, 1, H, after, k25_cpu_attention);
    assert_true(rel(after, before, H * hd) > 1e-4);
    free(kv);
    k25_kv_seq_release(&p, &seq, NULL, NULL);
    k25_kv_pool_free(&p);
}

/* The first sink and last recent positions survive pruning at every ratio and every dtype. */
static void test_sink_recent_survive(void **state)
{
    (void)state;
    const int kvh = 2, hd = 32, N = 1500, sink = 64, recent = 512;
    struct k25_model_shape s = shape1(kvh, hd);
    struct k25_error err;
    const double rs[] = {0.05, 0.25, 0.5, 0.75, 0.85, 0.92, 0.99};
    for (int dt = K25_DTYPE_FP32; dt <= K25_DTYPE_INT4; dt += 3)
        for (size_t ri = 0; ri < sizeof(rs) / sizeof(rs[0]); ri++) {
            struct k25_config c;
            k25_config_init(&c);
            c.kv_compression_ratio = rs[ri];
            c.kv_merge_threshold = 1.0; /* prune only */
            c.kv_cache_dtype = (enum k25_dtype)dt;
            struct k25_kv_pool p;
            struct k25_kv_seq seq = {0};
            assert_int_equal(k25_kv_pool_init(&p, &s, &c, 0, cpu(), &err), 0);
            float *kv = malloc(sizeof(float) * N * 2 * kvh * hd);
            for (int t = 0; t < N; t++)
                for (int d = 0; d < 2 * kvh * hd; d++)
                    kv[t * 2 * kvh * hd + d] = d % hd == 0 ? (float)t : frand() * 0.01f; /* channel 0 = position */
            assert_int_equal(k25_kv_seq_reserve(&p, &seq, N, &err), 0);
            k25_kv_seq_write(&p, &seq, 0, 0, N, kv, kv + kvh * hd, 2 * kvh * hd);
            for (int g = 0; g < kvh; g++) /* scores: sinks and recent get the least attention */
                for (int t = 0; t < N; t++) {
                    *k25_kv_slot_score(&p, &seq, 0, g, t) = (t < sink || t >= N - recent) ? 0.0f : 1.0f + frand();
                    *k25_kv_slot_seen(&p, &seq, t) = 1.0f;
                }
            struct k25_kv_compress_opts o = {rs[ri], 1.0, sink, recent, 0};
            int removed;
            assert_int_equal(k25_kv_seq_compress(&p, &seq, &o, &removed, &err), 0);
            assert_int_equal(seq.n_tokens, k25_kv_kept_for(rs[ri], sink, recent, N));
            float *K = malloc(sizeof(float) * N * hd), *V = malloc(sizeof(float) * N * hd);
            for (int g = 0; g < kvh; g++) {
                k25_kv_seq_read(&p, &seq, 0, g, 0, seq.n_tokens, K, V);
                float tol = dt == K25_DTYPE_FP32 ? 0.0f : 60.0f; /* int4 step of a 1500-wide channel */
                for (int t = 0; t < sink; t++)
                    assert_true(fabsf(K[t * hd] - (float)t) <= tol);
                for (int t = 0; t < recent; t++) {
                    int sl = seq.n_tokens - recent + t;
                    assert_true(fabsf(K[sl * hd] - (float)(N - recent + t)) <= tol);
                }
                for (int t = 1; t < seq.n_tokens && dt == K25_DTYPE_FP32; t++)
                    assert_true(K[t * hd] > K[(t - 1) * hd]); /* kept slots stay in position order */
            }
            free(K);
            free(V);
            free(kv);
            k25_kv_seq_release(&p, &seq, NULL, NULL);
            k25_kv_pool_free(&p);
        }
}

static const struct k25_result *run_req(k25_engine_t *e, const int32_t *ids, int n, int max_new, int *h)
{
    struct k25_error err;
    struct k25_request r = {.id = "r", .input_ids = ids, .n_input = n, .max_new_tokens = max_new, .keep_logits = true};
    assert_int_equal(k25_engine_submit(e, &r, h, &err), 0);
    if (k25_engine_run(e, &err) != 0)
        fail_msg("%s", err.msg);
    const struct k25_result *res = k25_engine_result(e, *h);
    assert_int_equal(res->state, K25_REQ_COMPLETED);
    return res;
}

static int32_t *prompt(int n)
{
    const char *txt = "Article 12. Notice. Any notice under this Agreement shall be in writing and delivered. ";
    int32_t *ids = malloc(sizeof(int32_t) * n);
    uint32_t x = 7;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (x >> 16) % 7 == 0 ? (int32_t)((x >> 8) & 127) : (unsigned char)txt[i % strlen(txt)];
    }
    return ids;
}

/* The engine keeps r of its tokens within 2% after prefill and decode, at every dtype. */
static void test_kept_fraction(void **state)
{
    (void)state;
    const int N = 2048;
    int32_t *ids = prompt(N);
    const double rs[] = {0.5, 0.75, 0.92};
    const enum k25_dtype dts[] = {K25_DTYPE_FP32, K25_DTYPE_INT4};
    for (size_t di = 0; di < 2; di++)
        for (size_t ri = 0; ri < 3; ri++) {
            if ((di == 1 && ri != 1) || (di == 0 && ri == 1) || (tu_quick() && ri != 1))
                continue; /* fp32 at 0.5 and 0.92, int4 at 0.75 (quick: int4 only) */
            struct k25_config c;
            struct k25_error err;
            k25_config_init(&c);
            c.kv_compression_ratio = rs[ri];
            c.kv_cache_dtype = dts[di];
            c.prefill_chunk_size = 1024;
            k25_engine_t *e;
            assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), 0);
            int h;
            const struct k25_result *r = run_req(e, ids, N, 40, &h);
            double frac = (double)r->kv_slots / (N + 40);
            if (fabs(frac - rs[ri]) > 0.02)
                fail_msg("r=%.2f %s: kept %.4f", rs[ri], k25_dtype_name(dts[di]), frac);
            assert_true(r->kv_tokens_pruned + r->kv_tokens_merged > 0);
            /* slot metadata is one byte per (layer, KV head, slot) (issue 16; it was 16, more
             * than int4 saved): compressed KV is smaller at every dtype, within r + 0.03 of the
             * uncompressed bytes at tiny's head_dim 32 (int4: 40 bytes a slot, 2.5% metadata) */
            assert_true(r->kv_bytes_after < r->kv_bytes_before);
            assert_true((double)r->kv_bytes_after / (double)r->kv_bytes_before < rs[ri] + 0.03 + 0.02);
            k25_engine_destroy(e);
        }
    free(ids);
}

/*
 * r = 1 fp32 is the exact engine: chunked prefill with a chunk longer than
 * the prompt (one chunk of 900 tokens) and one-pass prefill (which never
 * compresses, whatever r) run the same arithmetic in the same order - the
 * same GEMM shapes, attention tiles and thread count - so their logits are
 * bit-identical on any BLAS kernel set.  (This once failed on the Haswell
 * and Prescott kernels: the second engine in the process inherited the
 * first one's last thread count, and those kernels round differently per
 * thread count; engine.c now tracks the applied count process-wide.)
 * The default ratio leaves short prompts exact: the golden sequence holds
 * under the token-identity rule (k25.h), as in test_engine.
 */
static void test_ratio_one_bit_identical(void **state)
{
    (void)state;
    const int N = 900;
    int32_t *ids = prompt(N);
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    c.kv_compression_ratio = 1.0;
    k25_engine_t *e1, *e2;
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e1, &err), 0);
    c.disable_prefill_optimization = true; /* one-pass prefill never compresses */
    c.kv_compression_ratio = 0.5;
    assert_int_equal(k25_engine_create(&c, tu_tiny, &e2, &err), 0);
    int h1, h2;
    const struct k25_result *a = run_req(e1, ids, N, 8, &h1);
    const struct k25_result *b = run_req(e2, ids, N, 8, &h2);
    assert_memory_equal(a->output_ids, b->output_ids, sizeof(int32_t) * 8);
    assert_memory_equal(a->logits, b->logits, sizeof(float) * 256 * 8);
    assert_int_equal(a->kv_slots, N + 7);
    k25_engine_destroy(e1);
    k25_engine_destroy(e2);
    free(ids);

    /* golden prompt, default config (kv_compression_ratio 0.85): the committed tokens, by the rule */
    k25_config_init(&c);
    assert_true(c.kv_compression_ratio == 0.85);
    struct k25_tok_report rep;
    char why[256], line[512];
    if (tu_golden_verify(TU_GOLDEN_PATH, &c, tu_tiny, &rep, why) != 0)
        fail_msg("%s", why);
    k25_tok_report_format(&rep, line, sizeof(line));
    if (!k25_tok_report_ok(&rep) || rep.strict)
        fail_msg("golden at the default ratio: %s", line);
}

/*
 * Admission reserves the kept slots (issue 16): under a memory budget
 * whose KV pool holds 7 blocks of tiny, a 2048 + 8 token request (9
 * blocks uncompressed) is rejected at r = 1 and admitted and completed at
 * r = 0.5, which holds at most kept(1536) + 512 = 1280 slots (5 blocks)
 * with 512-token chunks; k25_kv_peak_slots is that figure, and `k25 mem`
 * counts the same blocks.
 */
static void test_admission_counts_kept(void **state)
{
    (void)state;
    const int N = 2048, NEW = 8;
    int32_t *ids = prompt(N);
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    c.prefill_chunk_size = 512;
    c.max_num_batched_tokens = 512;
    c.kv_sink_tokens = 32;
    c.kv_recent_tokens = 128;
    c.memory_budget_mb = 24;
    c.kv_compression_ratio = 0.5;
    assert_int_equal(k25_kv_peak_slots(&c, N, N + NEW), 1280);
    struct k25_model_shape s;
    assert_int_equal(k25_model_preset("tiny", &s), 0);
    struct k25_mem_estimate me;
    assert_int_equal(k25_mem_estimate(&c, &s, N, 1, &me, &err), 0);
    assert_int_equal(me.kv_blocks, 1280 / 256); /* context N: kept(1536) + 512 */
    for (int pass = 0; pass < 2; pass++) {
        c.kv_compression_ratio = pass == 0 ? 1.0 : 0.5;
        k25_engine_t *e;
        assert_int_equal(k25_engine_create(&c, tu_tiny, &e, &err), 0);
        struct k25_request r = {.id = "b", .input_ids = ids, .n_input = N, .max_new_tokens = NEW};
        int h;
        assert_int_equal(k25_engine_submit(e, &r, &h, &err), 0);
        if (k25_engine_run(e, &err) != 0)
            fail_msg("%s", err.msg);
        const struct k25_result *res = k25_engine_result(e, h);
        if (pass == 0 && res->state != K25_REQ_REJECTED)
            fail_msg("r = 1: state %d, expected rejected (9 blocks > the budget's)", (int)res->state);
        if (pass == 1) {
            if (res->state != K25_REQ_COMPLETED)
                fail_msg("r = 0.5: state %d (%s), expected completed", (int)res->state, res->reason);
            assert_int_equal(res->n_output, NEW);
            assert_true(res->kv_slots < N / 2 + 64);
        }
        k25_engine_destroy(e);
    }
    free(ids);
}

/* Memory figures count scales, zero points, slot metadata and the kept fraction. */
static void test_memory_figures(void **state)
{
    (void)state;
    struct k25_model_shape s;
    assert_int_equal(k25_model_preset("tiny", &s), 0);
    struct k25_config c;
    k25_config_init(&c);
    c.kv_compression_ratio = 1.0;
    struct k25_kv_layout l32, l16, l8, l4;
    k25_kv_layout(&c, &s, &l32);
    c.kv_cache_dtype = K25_DTYPE_FP16;
    k25_kv_layout(&c, &s, &l16);
    c.kv_cache_dtype = K25_DTYPE_INT8;
    k25_kv_layout(&c, &s, &l8);
    c.kv_cache_dtype = K25_DTYPE_INT4;
    k25_kv_layout(&c, &s, &l4);
    /* tiny: 4 layers x 2 KV heads x 32 dims x K,V */
    assert_true(l32.bytes_per_token == 4.0 * 2 * 32 * 2 * 4);
    assert_true(l16.bytes_per_token == 4.0 * 2 * 32 * 2 * 2);
    assert_true(l32.bits_per_value == 32.0 && l16.bits_per_value == 16.0);
    /* int4, group 32: 4 bits + half scale and zero per 32 values for keys and for values = 5.0 */
    assert_true(fabs(l4.bits_per_value - 5.0) < 1e-12);
    assert_true(fabs(l8.bits_per_value - 9.0) < 1e-12);
    assert_true(l16.bytes_per_token / l4.bytes_per_token >= 3.2 - 1e-9);
    /* the block is data + scales: 256 slots x 4 layers x 2 heads x (16 + 16 + 4 + 4) bytes */
    assert_int_equal(l4.block_bytes, 256 * 4 * 2 * 40);
    assert_true(l4.residual_bytes == 2 * 4 * 2 * 2 * (128 + 32) * 32); /* fp16 rows */
    struct k25_mem_estimate e4, e1;
    struct k25_error err;
    assert_int_equal(k25_mem_estimate(&c, &s, 32768, 1, &e4, &err), 0);
    assert_int_equal(e4.bytes[K25_MEM_KV], 128 * l4.block_bytes + l4.residual_bytes);
    /* compression: kept fraction and one byte of slot metadata (the count) per (layer, KV head, slot) */
    c.kv_compression_ratio = 0.5;
    struct k25_kv_layout lc;
    k25_kv_layout(&c, &s, &lc);
    assert_true(lc.compress && lc.meta_bytes_per_token == 4 * 2 * 1);
    assert_int_equal(lc.block_bytes, l4.block_bytes + 256 * 4 * 2); /* int4 block + the count bytes */
    assert_int_equal(k25_mem_estimate(&c, &s, 32768, 1, &e1, &err), 0);
    /* plus the pruning statistics of the uncompressed tail: recent 512 + chunk 2048 + slack
     * -> 4096 slots (doubling from 64) x 8 bytes x 4 layers x 2 KV heads */
    const double stats = 4096.0 * 8 * 4 * 2;
    assert_true(e1.bytes[K25_MEM_KV] < 0.55 * 128 * lc.block_bytes + lc.residual_bytes + stats);
    assert_true(e1.bytes[K25_MEM_KV] > 0.5 * 128 * lc.block_bytes);
    assert_int_equal(k25_kv_kept_tokens(&c, 32768), 16384);
    assert_int_equal(k25_kv_kept_tokens(&c, 600), 576); /* sink + recent protected */
    c.attention = K25_ATTN_FLASH2; /* the baselines keep every token */
    assert_false(k25_kv_compress_active(&c));
    assert_int_equal(k25_kv_kept_tokens(&c, 32768), 32768);
}

/* Fidelity metrics on cases with known answers. */
static void test_fidelity_metrics(void **state)
{
    (void)state;
    float p[4] = {0, 0, -INFINITY, -INFINITY}, q[4] = {logf(3.0f), 0, -INFINITY, -INFINITY};
    p[2] = p[3] = q[2] = q[3] = -1e30f;
    assert_true(fabs(k25_fid_kl(p, p, 4)) < 1e-15);
    /* KL((1/2, 1/2) || (3/4, 1/4)) = 1/2 ln(4/3) */
    assert_true(fabs(k25_fid_kl(p, q, 4) - 0.5 * log(4.0 / 3.0)) < 1e-7);
    bool same;
    assert_true(fabs(k25_fid_top_prob_delta(p, q, 4, &same) - 0.25) < 1e-7);
    assert_true(same);
    float r[4] = {0, 5, -1e30f, -1e30f};
    k25_fid_top_prob_delta(p, r, 4, &same);
    assert_false(same);
    float a[3] = {3, 4, 0}, b[3] = {0, 0, 0};
    assert_true(k25_fid_rel_err(a, a, 3) == 0.0);
    assert_true(fabs(k25_fid_rel_err(b, a, 3) - 1.0) < 1e-12);
    /* run figures: 1000 positions of KL i/1000 over 2 requests; p99.9 by nearest rank */
    struct k25_fidelity f = {0};
    f.n_reqs = 2;
    f.reqs = calloc(2, sizeof(*f.reqs));
    f.kl = malloc(sizeof(double) * 1000);
    for (int i = 0; i < 1000; i++)
        f.kl[f.n_kl++] = (999 - i) / 1000.0;
    f.reqs[0] = (struct k25_fid_req){"a", 10, 500, 0.2, 0.9, 1.0, 0.0, 1.0, 0.1, 0, 0};
    f.reqs[1] = (struct k25_fid_req){"b", 10, 500, 0.4, 0.9, 0.5, 2.0, 0.5, NAN, 0, 0};
    assert_int_equal(k25_fidelity_finish(&f), 0);
    assert_true(fabs(f.kl_mean - 0.3) < 1e-12);
    assert_true(fabs(f.kl_p999 - 0.998) < 1e-12);
    assert_true(fabs(f.kl_max - 0.999) < 1e-12);
    assert_true(fabs(f.top1_agreement - 0.75) < 1e-12);
    assert_true(fabs(f.top_prob_rms - sqrt(2.0)) < 1e-12);
    assert_true(fabs(f.token_agreement - 0.75) < 1e-12);
    assert_true(fabs(f.attn_rel_err - 0.1) < 1e-12); /* NaN requests left out */
    k25_fidelity_free(&f);

    /* end to end: the exact setting against itself is perfect - bit for bit, as both engines run the
     * same arithmetic (one request at a time, same shapes and thread count); int4 r=0.5 is not */
    int32_t *ids = prompt(600);
    struct k25_bench_input in = {.id = "x", .ids = ids, .n_ids = 600, .max_new = 8, .line = 1};
    struct k25_config c;
    struct k25_error err;
    k25_config_init(&c);
    c.kv_compression_ratio = 1.0;
    c.disable_prefill_optimization = true;
    assert_int_equal(k25_fidelity_measure(&c, tu_tiny, &in, 1, 8, &f, &err), 0);
    assert_true(f.kl_max == 0.0 && f.top1_agreement == 1.0 && f.token_agreement == 1.0 && f.attn_rel_err == 0.0);
    k25_fidelity_free(&f);
    /* 600 tokens, short enough to run quickly under every BLAS core type: with sink + recent
     * protected slots cut to 32 + 128, r = 0.5 prunes past 320 tokens (the defaults: 1152) */
    c.kv_sink_tokens = 32;
    c.kv_recent_tokens = 128;
    c.disable_prefill_optimization = false;
    c.kv_cache_dtype = K25_DTYPE_INT4;
    c.kv_compression_ratio = 0.5;
    assert_int_equal(k25_fidelity_measure(&c, tu_tiny, &in, 1, 8, &f, &err), 0);
    assert_true(f.kl_mean > 0 && f.attn_rel_err > 0 && f.n_positions == 8);
    assert_true(f.reqs[0].kv_bytes < f.reqs[0].kv_bytes_exact);
    k25_fidelity_free(&f);
    free(ids);
}

int main(int argc, char **argv)
{
    (void)argc;
    k25_blas_reexec(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_error_bounds),
        cmocka_unit_test(test_quantized_attention_matches_dequantized),
        cmocka_unit_test(test_merge_identical_keys),
        cmocka_unit_test(test_logc_tiles),
        cmocka_unit_test(test_sink_recent_survive),
        cmocka_unit_test(test_kept_fraction),
        cmocka_unit_test(test_ratio_one_bit_identical),
        cmocka_unit_test(test_admission_counts_kept),
        cmocka_unit_test(test_memory_figures),
        cmocka_unit_test(test_fidelity_metrics),
    };
    return cmocka_run_group_tests(tests, tu_model_setup, tu_model_teardown);
}
