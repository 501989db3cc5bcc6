/*
 * test_attention.c - the attention kernels against a double-precision
 * reference written here, and against each other.
 *
 * Inputs follow the protocol of the FlashAttention papers: N(0,1) with rare
 * large outliers (N(0,100) with probability 0.001).  Bars: RMSE <= 1e-6
 * with fp32 KV and <= 2e-4 with fp16 KV against the reference on the
 * original (unrounded) values; the three implementations agree within a
 * max relative error of 1e-4 (max |a-b| / max |b| per output) in fp32, on
 * odd sizes (context 1, 17, 1000; chunk longer than the context; 3 heads on
 * 2 threads; GQA ratios 1, 4, 8); a query chunk shorter than the keys is
 * aligned bottom-right (its last query sees every key).  Also: the decode
 * split path (contexts past one split), bit-identical results on 1 and 2
 * threads, the tracking allocator, and attn-bench's skip-with-reason path
 * and output files.  int4 KV: decode scoring the keys and weighting the
 * values on their codes against the dequantize-then-fp32 path, within a
 * bound derived from the int8 rounding of the scaled queries, and with
 * keys flat over each key group (scored exactly) within fp32 rounding: the
 * values path alone (check_int4_codes).
 */
#define K25_BACKEND_IMPL /* reads the CPU backend's KV storage (kvstore.h): struct k25_buf complete */
#include "testutil.h"

#include "backend.h"
#include "baselines.h"
#include "k25util.h"
#include "harness.h"
#include "kvcache.h"
#include "kvstore.h" /* the CPU backend's KV storage (engine/cpu/) */

#include <float.h>
#include <math.h>

static uint64_t g_rng = 88172645463325252ULL;

static double urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
}

/* N(0,1), or N(0,100) (variance 100, standard deviation 10) with probability 0.001:
 * the FlashAttention papers' protocol. */
static float draw(void)
{
    double z = sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand());
    return (float)(urand() < 0.001 ? 10.0 * z : z);
}

/* A sequence's paged KV for one layer plus the original fp32 values. */
struct tkv {
    int n, bs, kvh, hd;
    enum k25_dtype dt;
    float *k, *v;          /* [kvh][n][hd] original values */
    void **blocks;
    const void **kp, **vp;
    struct k25_kv_view view;
};

static void tkv_make(struct tkv *t, int n, int kvh, int hd, int bs, enum k25_dtype dt)
{
    memset(t, 0, sizeof(*t));
    t->n = n, t->bs = bs, t->kvh = kvh, t->hd = hd, t->dt = dt;
    t->k = malloc(sizeof(float) * (size_t)kvh * n * hd);
    t->v = malloc(sizeof(float) * (size_t)kvh * n * hd);
    for (size_t i = 0; i < (size_t)kvh * n * hd; i++) {
        t->k[i] = draw();
        t->v[i] = draw();
    }
    int nb = (n + bs - 1) / bs;
    size_t elem = dt == K25_DTYPE_FP32 ? 4 : 2, half = (size_t)kvh * bs * hd * elem;
    t->blocks = calloc((size_t)nb, sizeof(void *));
    t->kp = calloc((size_t)nb, sizeof(void *));
    t->vp = calloc((size_t)nb, sizeof(void *));
    for (int b = 0; b < nb; b++) {
        unsigned char *blk = k25_alloc(K25_MEM_KV, 2 * half);
        assert_non_null(blk);
        t->blocks[b] = blk;
        t->kp[b] = blk;
        t->vp[b] = blk + half;
        for (int g = 0; g < kvh; g++)
            for (int tok = b * bs; tok < n && tok < (b + 1) * bs; tok++)
                for (int d = 0; d < hd; d++) {
                    size_t src = ((size_t)g * n + tok) * hd + d, dst = ((size_t)g * bs + tok % bs) * hd + d;
                    if (dt == K25_DTYPE_FP32) {
                        ((float *)blk)[dst] = t->k[src];
                        ((float *)(blk + half))[dst] = t->v[src];
                    } else {
                        ((uint16_t *)blk)[dst] = k25_fp32_to_fp16(t->k[src]);
                        ((uint16_t *)(blk + half))[dst] = k25_fp32_to_fp16(t->v[src]);
                    }
                }
    }
    t->view = (struct k25_kv_view){.n_tokens = n, .block_size = bs, .n_kv_heads = kvh, .head_dim = hd, .dtype = dt,
                                    .k_blocks = t->kp, .v_blocks = t->vp};
}

static void tkv_free(struct tkv *t)
{
    for (int b = 0; b < (t->n + t->bs - 1) / t->bs; b++)
        k25_free(t->blocks[b]);
    free(t->blocks);
    free(t->kp);
    free(t->vp);
    free(t->k);
    free(t->v);
}

/* Double reference: queries q[n_q][H*hd] at positions pos0.., bottom-right causal. */
static double *reference(const struct tkv *t, const float *q, int n_q, int pos0, int H)
{
    const int hd = t->hd, group = H / t->kvh;
    double *out = calloc((size_t)n_q * H * hd, sizeof(double));
    double *s = malloc(sizeof(double) * (size_t)t->n);
    double scale = 1.0 / sqrt((double)hd);
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < H; h++) {
            int g = h / group, lim = pos0 + i + 1;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < lim; j++) {
                double dot = 0;
                for (int d = 0; d < hd; d++)
                    dot += (double)q[((size_t)i * H + h) * hd + d] * t->k[((size_t)g * t->n + j) * hd + d];
                s[j] = dot * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < lim; j++)
                sum += (s[j] = exp(s[j] - mx));
            double *o = out + ((size_t)i * H + h) * hd;
            for (int j = 0; j < lim; j++)
                for (int d = 0; d < hd; d++)
                    o[d] += s[j] / sum * t->v[((size_t)g * t->n + j) * hd + d];
        }
    free(s);
    return out;
}

/* Runs fn over queries [n - n_q, n) of the cache in one job; returns the output. */
static float *run_impl(k25_attention_fn fn, const struct tkv *t, const float *q, int n_q, int H)
{
    float *out = calloc((size_t)n_q * H * t->hd, sizeof(float));
    struct k25_attn_job job = {q, H * t->hd, n_q, t->n - n_q, t->view, out, H * t->hd, NULL};
    fn(&job, 1, H, 1.0f / sqrtf((float)t->hd), NULL);
    return out;
}

static float *rand_q(int n_q, int H, int hd)
{
    float *q = malloc(sizeof(float) * (size_t)n_q * H * hd);
    for (size_t i = 0; i < (size_t)n_q * H * hd; i++)
        q[i] = draw();
    return q;
}

static double rmse(const float *a, const double *ref, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    return sqrt(s / (double)n);
}

/* max |a-b| / max |b| */
static double max_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}

struct shape {
    int n, n_q, H, kvh, hd, bs;
};

static const k25_attention_fn impls[3] = {k25_cpu_attention, k25_baseline_flash2_attention,
                                          k25_baseline_naive_attention};
static const char *const impl_names[3] = {"chunked", "flash2", "naive"};

/*
 * Every implementation against the reference and each other on one shape.
 * on_stored: the reference uses the values as stored (fp16-rounded), which
 * checks the kernels' own arithmetic; otherwise the original values, which
 * adds the storage error.
 */
static void check_shape_ref(struct shape s, enum k25_dtype dt, double rmse_bar, bool on_stored)
{
    struct tkv t;
    tkv_make(&t, s.n, s.kvh, s.hd, s.bs, dt);
    if (on_stored && dt == K25_DTYPE_FP16)
        for (size_t i = 0; i < (size_t)s.kvh * s.n * s.hd; i++) {
            t.k[i] = k25_fp16_to_fp32(k25_fp32_to_fp16(t.k[i]));
            t.v[i] = k25_fp16_to_fp32(k25_fp32_to_fp16(t.v[i]));
        }
    float *q = rand_q(s.n_q, s.H, s.hd);
    double *ref = reference(&t, q, s.n_q, s.n - s.n_q, s.H);
    size_t cnt = (size_t)s.n_q * s.H * s.hd;
    float *outs[3];
    for (int i = 0; i < 3; i++) {
        outs[i] = run_impl(impls[i], &t, q, s.n_q, s.H);
        double e = rmse(outs[i], ref, cnt);
        double rr = 0;
        for (size_t k = 0; k < cnt; k++)
            rr += ref[k] * ref[k];
        rr = sqrt(rr / cnt);
        if (getenv("K25_TEST_VERBOSE"))
            fprintf(stderr, "%s %s n=%d n_q=%d H=%d kv=%d: rmse %.3g rms(ref) %.3g nrmse %.3g\n", impl_names[i],
                    k25_dtype_name(dt), s.n, s.n_q, s.H, s.kvh, e, rr, e / rr);
        if (e > rmse_bar && !getenv("K25_TEST_VERBOSE"))
            fail_msg("%s %s n=%d n_q=%d H=%d kv=%d hd=%d bs=%d: RMSE %.3g > %.3g", impl_names[i],
                     k25_dtype_name(dt), s.n, s.n_q, s.H, s.kvh, s.hd, s.bs, e, rmse_bar);
    }
    for (int i = 1; i < 3; i++) {
        double r = max_rel(outs[i], outs[0], cnt);
        double bar = dt == K25_DTYPE_FP32 ? 1e-4 : 2e-4;
        if (r > bar)
            fail_msg("%s vs chunked %s n=%d n_q=%d H=%d kv=%d: max rel err %.3g > %g", impl_names[i],
                     k25_dtype_name(dt), s.n, s.n_q, s.H, s.kvh, r, bar);
    }
    for (int i = 0; i < 3; i++)
        free(outs[i]);
    free(ref);
    free(q);
    tkv_free(&t);
}

static void check_shape(struct shape s, enum k25_dtype dt, double rmse_bar)
{
    check_shape_ref(s, dt, rmse_bar, false);
}

static void test_fp32_odd_sizes(void **state)
{
    (void)state;
    k25_set_threads(2);
    const struct shape shapes[] = {
        {1, 1, 8, 2, 32, 16},      /* context 1 */
        {17, 17, 8, 2, 32, 16},    /* chunk = context, crosses blocks */
        {17, 5, 8, 1, 32, 16},     /* GQA 8, chunk shorter than keys: bottom-right */
        {17, 1, 4, 1, 64, 256},    /* decode, GQA 4 */
        {1000, 1000, 4, 4, 32, 256}, /* GQA 1, one pass */
        {1000, 70, 8, 2, 64, 256}, /* a tail chunk: 70 queries over 1000 keys */
        {1000, 3, 3, 3, 16, 100},  /* 3 heads on 2 threads, block size not a tile multiple */
        {300, 2, 8, 2, 24, 64},    /* head_dim 24: the portable decode path */
        {200, 300 > 200 ? 200 : 300, 8, 1, 32, 64}, /* chunk longer than the context: clipped to it */
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        check_shape(shapes[i], K25_DTYPE_FP32, 1e-6);
}

static void test_fp16_kv(void **state)
{
    (void)state;
    k25_set_threads(2);
    /* against the original values: the storage error included, over enough
     * outputs for the RMSE to mean something */
    const struct shape shapes[] = {
        {17, 17, 8, 2, 32, 16},
        {1000, 64, 8, 2, 64, 256},
        {1000, 32, 8, 1, 128, 256},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        check_shape(shapes[i], K25_DTYPE_FP16, 2e-4);
    /* against the stored values: the fused dequantization adds nothing */
    const struct shape dec[] = {{1000, 1, 8, 1, 128, 256}, {700, 2, 8, 2, 64, 256}};
    for (size_t i = 0; i < sizeof(dec) / sizeof(dec[0]); i++)
        check_shape_ref(dec[i], K25_DTYPE_FP16, 1e-6, true);
}

/* Decode past one split (2048 tokens): the partials merge to the same answer. */
static void test_decode_splits(void **state)
{
    (void)state;
    k25_set_threads(2);
    int n = tu_quick() ? 2500 : 5000;
    for (int dt = 0; dt < 2; dt++) {
        struct shape s = {n, dt ? 1 : 3, 8, 2, 64, 256};
        check_shape_ref(s, dt ? K25_DTYPE_FP16 : K25_DTYPE_FP32, 1e-6, true);
    }
}

/*
 * Same inputs on 1 and 2 threads: bit-identical outputs (prefill and split
 * decode).  Bit-identity is right here, on every BLAS kernel set, because it
 * is the same arithmetic in the same order: work items and their tile
 * shapes depend only on the problem, and each item's SGEMMs run
 * single-threaded inside one OpenMP worker, so the thread count only
 * changes which worker runs an item.  (The engine's projection GEMMs are
 * another matter: OpenBLAS splits those across threads and rounds
 * differently per split; test_engine compares those by tolerance.)
 */
static void test_thread_count_determinism(void **state)
{
    (void)state;
    struct tkv t;
    tkv_make(&t, 2300, 2, 64, 256, K25_DTYPE_FP16);
    const int nqs[2] = {300, 1};
    for (int c = 0; c < 2; c++) {
        float *q = rand_q(nqs[c], 8, 64);
        k25_set_threads(1);
        float *a = run_impl(k25_cpu_attention, &t, q, nqs[c], 8);
        k25_set_threads(2);
        float *b = run_impl(k25_cpu_attention, &t, q, nqs[c], 8);
        assert_memory_equal(a, b, sizeof(float) * (size_t)nqs[c] * 8 * 64);
        free(a);
        free(b);
        free(q);
    }
    tkv_free(&t);
}

/* Batches of mixed jobs (prefill chunks + decode tokens) equal the jobs run alone. */
static void test_mixed_batch(void **state)
{
    (void)state;
    k25_set_threads(2);
    struct tkv t1, t2;
    tkv_make(&t1, 300, 2, 32, 64, K25_DTYPE_FP32);
    tkv_make(&t2, 90, 2, 32, 64, K25_DTYPE_FP32);
    float *q1 = rand_q(100, 8, 32), *q2 = rand_q(1, 8, 32);
    float *o1 = calloc(100 * 8 * 32, sizeof(float)), *o2 = calloc(8 * 32, sizeof(float));
    struct k25_attn_job jobs[2] = {{q2, 256, 1, 89, t2.view, o2, 256, NULL}, {q1, 256, 100, 200, t1.view, o1, 256, NULL}};
    for (int i = 0; i < 3; i++) {
        k25_cpu_attention(jobs, 2, 8, 1.0f / sqrtf(32.0f), NULL);
        float *a1 = run_impl(impls[i], &t1, q1, 100, 8), *a2 = run_impl(impls[i], &t2, q2, 1, 8);
        assert_true(max_rel(o1, a1, 100 * 8 * 32) <= 1e-4);
        assert_true(max_rel(o2, a2, 8 * 32) <= 1e-4);
        free(a1);
        free(a2);
    }
    free(q1), free(q2), free(o1), free(o2);
    tkv_free(&t1);
    tkv_free(&t2);
}

/* ------------------------------------------- int4 keys scored on their codes */

/* The CPU backend the pools keep their blocks in (no engine: the process's accounting). */
static struct k25_bctx *cpu_ctx(void)
{
    static struct k25_bctx ctx;
    struct k25_error err;
    if (!ctx.be && k25_bctx_init(&ctx, &k25_backend_cpu, NULL, &err) != K25_OK)
        fail_msg("%s", err.msg);
    return &ctx;
}

/* ChunkedAttention of the last n_q slots' queries q[n_q][H*hd] over layer 0 of seq. */
static void attend_pool(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, const float *q, int n_q, int H,
                        float *out)
{
    const void *kp[128], *vp[128];
    assert_true(seq->n_blocks <= 128);
    const int hd = p->head_dim;
    struct k25_attn_job job = {q, H * hd, n_q, seq->n_tokens - n_q, {0}, out, H * hd, NULL};
    k25_kv_seq_view(p, seq, 0, kp, vp, &job.kv);
    k25_cpu_attention(&job, 1, H, 1.0f / sqrtf((float)hd), NULL);
}

/*
 * int4 decode attention (keys scored on their codes, engine/cpu/attention.c)
 * against the dequantize-then-fp32 reference: the same int4 values written
 * into an fp32 cache.  The only extra error is the int8 rounding of
 * q'_c = q_c scale_c (step alpha = max_c |q'_c| / 127 per row and key
 * group), which moves a score by |sum_c d_c (code_c - 7.5)| <= eps =
 * 7.5 hd alpha / 2.  Logits moved by at most eps move each softmax weight
 * by a factor within [e^-2eps, e^2eps], so an output moves by at most
 * (e^2eps - 1) max_t |v_t| (per channel).  The test takes eps from the
 * data (the stored scale of a channel over a key group is (max - min) / 15
 * of its dequantized keys, since the codes span 0..15), adds fp32 rounding
 * slack, and checks every output against that bound; it also checks the
 * extra error is small beside int4's own (RMS against the original values
 * at most 1.1x the reference's: it adds ~20% in quadrature, ~2%; swapping the even and
 * odd channels fails it 14-fold, while it stays inside the loose worst-case bound).
 * Slots carry merged counts 1..4 (ln count on the logit), lengths cross
 * blocks (64), key groups (G), the fp32 residual (128) and a split (2048).
 * The values are weighted on their codes too (scale folded into the
 * probability, zero summed per group): the same values, so only fp32
 * rounding differs.  With flat (each key group's keys equal and
 * fp16-exact, so scale 0 and the keys scored exactly) that is all that
 * differs, and the RMS difference from the fp32 path must stay under 1e-5
 * of its outputs' RMS (~1e-6 measured).  Swapping the even and odd value
 * channels, halving the zero term or taking the previous group's scale
 * fails the RMS check above 12-, 17- and 4-fold; scaling the zero sums by
 * 1 + 1e-5 fails this one.
 */
static void check_int4_codes(int hd, int N, int n_q, int H, int G, bool flat, uint64_t seed, double *worst)
{
    const int kvh = 2;
    g_rng = seed;
    struct k25_model_shape s = {0};
    snprintf(s.name, sizeof(s.name), "t");
    s.n_layers = 1, s.n_heads = H, s.n_kv_heads = kvh, s.head_dim = hd;
    struct k25_config c4, cf;
    k25_config_init(&c4);
    c4.kv_block_size = 64;
    c4.kv_quant_group = G;
    c4.kv_compression_ratio = 0.5; /* slot counts kept (nothing is compressed here) */
    c4.kv_cache_dtype = K25_DTYPE_INT4;
    cf = c4;
    cf.kv_cache_dtype = K25_DTYPE_FP32;
    struct k25_error err;
    struct k25_kv_pool p4, pf, po;
    struct k25_kv_seq s4 = {0}, sf = {0}, so = {0};
    assert_int_equal(k25_kv_pool_init(&p4, &s, &c4, 0, cpu_ctx(), &err), 0);
    assert_int_equal(k25_kv_pool_init(&pf, &s, &cf, 0, cpu_ctx(), &err), 0);
    assert_int_equal(k25_kv_pool_init(&po, &s, &cf, 0, cpu_ctx(), &err), 0);
    const int w = 2 * kvh * hd; /* a slot's row: keys of every head, then values */
    float *kv = malloc(sizeof(float) * (size_t)N * w), *deq = malloc(sizeof(float) * (size_t)N * w);
    for (int t = 0; t < N; t++)
        for (int i = 0; i < w; i++) /* channel offsets: zero points far from 0 */
            kv[(size_t)t * w + i] = draw() + (i < kvh * hd ? (float)(i % 7) - 3.0f : 0.0f);
    if (flat) /* each key group's keys all equal, fp16-exact (multiples of 1/64 within +-30) */
        for (int t = 0; t < N; t++)
            for (int i = 0; i < kvh * hd; i++) {
                float *x = &kv[(size_t)t * w + i];
                *x = t % G ? kv[(size_t)(t - t % G) * w + i] : roundf(fminf(fmaxf(*x, -30.0f), 30.0f) * 64.0f) / 64.0f;
            }
    assert_int_equal(k25_kv_seq_reserve(&p4, &s4, N, &err), 0);
    assert_int_equal(k25_kv_seq_reserve(&pf, &sf, N, &err), 0);
    assert_int_equal(k25_kv_seq_reserve(&po, &so, N, &err), 0);
    k25_kv_seq_write(&p4, &s4, 0, 0, N, kv, kv + kvh * hd, w);
    k25_kv_seq_write(&po, &so, 0, 0, N, kv, kv + kvh * hd, w);
    const int nq4 = s4.n_quant[0];
    assert_true(nq4 > 0 && (N <= 200 || nq4 < N)); /* int4 keys in play (and the residual past 200) */
    float *K = malloc(sizeof(float) * (size_t)kvh * N * hd), *V = malloc(sizeof(float) * (size_t)kvh * N * hd);
    for (int g = 0; g < kvh; g++) {
        float *Kg = K + (size_t)g * N * hd, *Vg = V + (size_t)g * N * hd;
        k25_kv_seq_read(&p4, &s4, 0, g, 0, N, Kg, Vg);
        for (int t = 0; t < N; t++) {
            memcpy(deq + (size_t)t * w + g * hd, Kg + (size_t)t * hd, sizeof(float) * hd);
            memcpy(deq + (size_t)t * w + (kvh + g) * hd, Vg + (size_t)t * hd, sizeof(float) * hd);
        }
    }
    k25_kv_seq_write(&pf, &sf, 0, 0, N, deq, deq + kvh * hd, w);
    for (int g = 0; g < kvh; g++) /* merged slots: the same counts in every cache */
        for (int t = 0; t < N; t++) {
            uint8_t cnt = urand() < 0.2 ? (uint8_t)(2 + (int)(urand() * 3)) : 1;
            *k25_kv_slot_count(&p4, &s4, 0, g, t) = *k25_kv_slot_count(&pf, &sf, 0, g, t) =
                *k25_kv_slot_count(&po, &so, 0, g, t) = cnt;
        }
    float *q = rand_q(n_q, H, hd);
    size_t cnt = (size_t)n_q * H * hd;
    float *o4 = calloc(cnt, sizeof(float)), *of = calloc(cnt, sizeof(float)), *oo = calloc(cnt, sizeof(float));
    attend_pool(&p4, &s4, q, n_q, H, o4);
    attend_pool(&pf, &sf, q, n_q, H, of);
    attend_pool(&po, &so, q, n_q, H, oo);

    bool moved = false;
    double e4 = 0, ef = 0, d4 = 0, rf = 0;
    const float sc = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / kvh), lim = N - n_q + i + 1;
            const float *Kg = K + (size_t)g * N * hd, *Vg = V + (size_t)g * N * hd;
            double qs[128], eps = 0, qk = 0; /* qk: sum |q k| over the row's largest key, for fp32 slack */
            for (int d = 0; d < hd; d++)
                qs[d] = q[((size_t)i * H + h) * hd + d] * sc;
            for (int g0 = 0; g0 < nq4 && g0 < lim; g0 += G) {
                double amax = 0;
                for (int d = 0; d < hd; d++) {
                    double mn = Kg[(size_t)g0 * hd + d], mx = mn;
                    for (int t = g0; t < g0 + G; t++) {
                        mn = fmin(mn, Kg[(size_t)t * hd + d]);
                        mx = fmax(mx, Kg[(size_t)t * hd + d]);
                    }
                    amax = fmax(amax, fabs(qs[d]) * (mx - mn) / 15.0);
                }
                eps = fmax(eps, 7.5 * hd * (amax / 127.0) / 2.0);
            }
            for (int t = 0; t < lim; t++) {
                double a = 0;
                for (int d = 0; d < hd; d++)
                    a += fabs(qs[d] * Kg[(size_t)t * hd + d]);
                qk = fmax(qk, a);
            }
            eps = eps * (1 + 1e-3) + 4 * hd * FLT_EPSILON * qk;
            for (int d = 0; d < hd; d++) {
                double vmax = 0;
                for (int t = 0; t < lim; t++)
                    vmax = fmax(vmax, fabs(Vg[(size_t)t * hd + d]));
                size_t k = ((size_t)i * H + h) * hd + d;
                double diff = fabs((double)o4[k] - of[k]), bound = expm1(2 * eps) * vmax + 1e-6 * (1 + fabs(of[k]));
                if (diff > bound)
                    fail_msg("int4 hd=%d N=%d n_q=%d H=%d G=%d query %d head %d channel %d: %g vs reference %g, "
                             "bound %g (eps %g)", hd, N, n_q, H, G, i, h, d, o4[k], of[k], bound, eps);
                *worst = fmax(*worst, diff / bound);
                moved |= diff > 0;
                e4 += ((double)o4[k] - oo[k]) * ((double)o4[k] - oo[k]);
                d4 += diff * diff;
                rf += (double)of[k] * of[k];
                ef += ((double)of[k] - oo[k]) * ((double)of[k] - oo[k]);
            }
        }
    e4 = sqrt(e4 / cnt), ef = sqrt(ef / cnt), d4 = sqrt(d4 / cnt), rf = sqrt(rf / cnt);
    if (getenv("K25_TEST_VERBOSE"))
        fprintf(stderr, "int4 hd=%d N=%d n_q=%d H=%d G=%d%s: RMS vs original %.3g (dequantized fp32 path %.3g), "
                "vs the fp32 path %.3g (RMS of its outputs %.3g)\n", hd, N, n_q, H, G, flat ? " flat keys" : "", e4,
                ef, d4, rf);
    if (flat && d4 > 1e-5 * rf) /* values alone: only fp32 rounding differs (~1e-6 measured) */
        fail_msg("int4 hd=%d N=%d n_q=%d H=%d G=%d flat keys: RMS difference from the fp32 path %.3g > 1e-5 x %.3g",
                 hd, N, n_q, H, G, d4, rf);
    if (e4 > 1.1 * ef)
        fail_msg("int4 hd=%d N=%d n_q=%d H=%d G=%d: RMS error vs the original values %.3g > 1.1 x %.3g", hd, N, n_q,
                 H, G, e4, ef);
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    assert_true(moved); /* the codes path ran: it rounds differently from the fp32 one */
#endif
    free(q), free(o4), free(of), free(oo), free(K), free(V), free(kv), free(deq);
    k25_kv_seq_release(&p4, &s4, NULL, NULL);
    k25_kv_seq_release(&pf, &sf, NULL, NULL);
    k25_kv_seq_release(&po, &so, NULL, NULL);
    k25_kv_pool_free(&p4);
    k25_kv_pool_free(&pf);
    k25_kv_pool_free(&po);
}

static void test_int4_codes(void **state)
{
    (void)state;
    k25_set_threads(2);
    double worst = 0;
    /* keys and values on their codes: key groups of 32 tokens, 8 heads over 2 KV heads */
    const int hds[] = {64, 128}, ns[] = {200, 700, 2300}, nqs[] = {1, 3}, Hs[] = {8, 6}, Gs[] = {32, 16, 64};
    for (int seed = 1; seed <= 3; seed++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                check_int4_codes(hds[a], ns[b], nqs[(seed + b) % 2], 8, 32, false,
                                 0x9E3779B97F4A7C15ULL * (uint64_t)seed, &worst);
    /* the values alone (keys flat over each key group, so scored exactly): value groups of min(G, hd)
     * channels, 1, 2, 4 or 8 per row (a (scale, zero) record of 2 to 16 floats per token); 8 or 6 heads
     * over 2 KV heads (row blocks of 4, or of 3 and, with 3 queries, 4 + 4 + 1) */
    for (int seed = 4; seed <= 6; seed++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                check_int4_codes(hds[a], ns[b], nqs[(seed + b) % 2], Hs[(seed + a) % 2], Gs[(seed + a + b) % 3], true,
                                 0x9E3779B97F4A7C15ULL * (uint64_t)seed, &worst);
    print_message("int4 codes path: largest error / bound %.3g\n", worst);
}

/* The tracking allocator: categories, current, peak after free, reset. */
static void test_allocator(void **state)
{
    (void)state;
    struct k25_mem_stats a, b, c;
    k25_mem_reset_peak();
    k25_mem_get(&a);
    void *x = k25_alloc(K25_MEM_ATTN_SCRATCH, 1000), *y = k25_alloc(K25_MEM_KV, 64);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal((uintptr_t)x % 64, 0);
    k25_mem_get(&b);
    assert_int_equal(b.cur_bytes[K25_MEM_ATTN_SCRATCH] - a.cur_bytes[K25_MEM_ATTN_SCRATCH], 1000);
    assert_int_equal(b.cur_bytes[K25_MEM_KV] - a.cur_bytes[K25_MEM_KV], 64);
    assert_int_equal(b.total_cur_bytes - a.total_cur_bytes, 1064);
    k25_free(x);
    k25_free(y);
    k25_mem_get(&c);
    assert_int_equal(c.cur_bytes[K25_MEM_ATTN_SCRATCH], a.cur_bytes[K25_MEM_ATTN_SCRATCH]);
    assert_int_equal(c.peak_bytes[K25_MEM_ATTN_SCRATCH] - a.cur_bytes[K25_MEM_ATTN_SCRATCH], 1000);
    assert_true(c.total_peak_bytes - a.total_cur_bytes >= 1064);
    k25_mem_reset_peak();
    k25_mem_get(&c);
    assert_int_equal(c.peak_bytes[K25_MEM_ATTN_SCRATCH], c.cur_bytes[K25_MEM_ATTN_SCRATCH]);
    assert_string_equal(k25_mem_cat_name(K25_MEM_ATTN_SCRATCH), "attn_scratch");

    /* a kernel call's scratch is freed and its peak is what the calculator says */
    k25_set_threads(2);
    struct tkv t;
    tkv_make(&t, 700, 2, 64, 256, K25_DTYPE_FP16);
    float *q = rand_q(700, 8, 64);
    for (int i = 0; i < 3; i++) {
        enum k25_attn_impl im = (enum k25_attn_impl)i;
        k25_mem_get(&a);
        k25_mem_reset_peak();
        float *o = run_impl(k25_attn_impl_get(im)->run, &t, q, 700, 8);
        k25_mem_get(&b);
        assert_int_equal(b.cur_bytes[K25_MEM_ATTN_SCRATCH], a.cur_bytes[K25_MEM_ATTN_SCRATCH]);
        int64_t peak = b.peak_bytes[K25_MEM_ATTN_SCRATCH] - a.cur_bytes[K25_MEM_ATTN_SCRATCH];
        int64_t calc = k25_attn_scratch_bytes(im, 8, 2, 64, 256, K25_DTYPE_FP16, 1, 700, 700, 2);
        if (peak != calc)
            fail_msg("%s: scratch peak %lld, calculator %lld", impl_names[i], (long long)peak, (long long)calc);
        free(o);
    }
    free(q);
    tkv_free(&t);
}

/* attn-bench: a setting that cannot fit is skipped with the calculator's figure. */
static void test_bench_skip_and_outputs(void **state)
{
    (void)state;
    k25_set_threads(2);
    struct k25_attn_bench_opts o;
    memset(&o, 0, sizeof(o));
    o.impls[0] = K25_ATTN_CHUNKED, o.impls[1] = K25_ATTN_FLASH2, o.impls[2] = K25_ATTN_NAIVE, o.n_impls = 3;
    o.contexts[0] = 1024, o.n_contexts = 1;
    o.chunks[0] = 256, o.n_chunks = 1;
    o.dtypes[0] = K25_DTYPE_FP16, o.n_dtypes = 1;
    o.heads = 4, o.kv_heads = 2, o.head_dim = 32, o.block_size = 64;
    o.repeat = 1, o.warmup = 0, o.seed = 7;
    /* naive needs 4 x 1024 x 1024 floats of scores (16 MiB); the others well under 4 MiB */
    o.mem_limit_bytes = 6 << 20;
    struct k25_attn_machine m = {2, 100.0, 10.0, 0, 0};
    struct k25_attn_bench_result res;
    struct k25_error err;
    assert_int_equal(k25_attn_bench_run(&o, &m, &res, &err), 0);
    assert_int_equal(res.n_rows, 4); /* chunked 256, chunked one-pass, flash2, naive */
    int skipped = 0;
    for (int i = 0; i < res.n_rows; i++) {
        const struct k25_attn_bench_row *r = &res.rows[i];
        if (!strcmp(r->impl, "naive")) {
            assert_string_equal(r->status, "skipped");
            assert_non_null(strstr(r->reason, "calculator"));
            assert_true(r->calc_scratch_bytes >= 16 << 20);
            skipped++;
        } else {
            assert_string_equal(r->status, "ok");
            assert_true(r->median_ms > 0 && r->gflops > 0);
            assert_int_equal(r->scratch_peak_bytes, r->calc_scratch_bytes);
        }
    }
    assert_int_equal(skipped, 1);
    assert_int_equal(res.n_cmp, 1);
    assert_true(res.cmp[0].time_vs_flash2 > 0);

    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof(path), "%s/attn.h5", dir);
    assert_int_equal(k25_attn_bench_write_h5(path, &o, &res, "test", &err), 0);
    struct k25_h5 h;
    assert_int_equal(k25_h5_open_read(&h, path, "attn-bench", &err), 0);
    hid_t g = k25_h5_group(&h, "attn", &err);
    assert_true(g >= 0);
    struct row {
        char impl[16], status[16];
        double median_ms;
    };
    const struct k25_h5_col cols[] = {{"impl", K25_H5_STR, offsetof(struct row, impl), 16},
                                      {"status", K25_H5_STR, offsetof(struct row, status), 16},
                                      {"median_ms", K25_H5_F64, offsetof(struct row, median_ms), 0}};
    void *rows;
    size_t n;
    assert_int_equal(k25_h5_read_table(g, "results", cols, 3, sizeof(struct row), K25_H5_ANY_COUNT, &rows, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_string_equal(((struct row *)rows)[3].status, "skipped");
    free(rows);
    H5Gclose(g);
    k25_h5_close(&h);
    char *js = k25_attn_bench_json(&o, &res);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"skipped\""));
    free(js);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
    k25_attn_bench_result_free(&res);
}

/* attn-bench on int8/int4 caches: stored as the engine stores them (codes, scales, the fp16
 * residual), read by every implementation, bytes per token counted in the storage format, and
 * the chunked kernels (on the codes) agree with flash2 (on dequantized rows). */
static void test_bench_quantized(void **state)
{
    (void)state;
    k25_set_threads(2);
    struct k25_attn_bench_opts o;
    memset(&o, 0, sizeof(o));
    o.impls[0] = K25_ATTN_CHUNKED, o.impls[1] = K25_ATTN_FLASH2, o.n_impls = 2;
    o.contexts[0] = 1000, o.n_contexts = 1; /* 864 quantized slots, 136 in the residual */
    o.dtypes[0] = K25_DTYPE_INT8, o.dtypes[1] = K25_DTYPE_INT4, o.n_dtypes = 2;
    o.heads = 8, o.kv_heads = 2, o.head_dim = 64, o.block_size = 64;
    o.repeat = 1, o.warmup = 0, o.seed = 11, o.decode = true;
    struct k25_attn_machine m = {2, 100.0, 10.0, 0, 0};
    struct k25_attn_bench_result res;
    struct k25_error err;
    assert_int_equal(k25_attn_bench_run(&o, &m, &res, &err), 0);
    assert_int_equal(res.n_rows, 4);
    for (int i = 0; i < res.n_rows; i++) {
        const struct k25_attn_bench_row *r = &res.rows[i];
        assert_string_equal(r->status, "ok");
        /* K and V codes + key scale/zero rows per 32 slots + value scale/zero per 32 channels */
        const double per = !strcmp(r->dtype, "int8") ? 2 * 64 + 2 * 64 * 2 / 32.0 + 2 * 2 * 2
                                                     : 2 * 32 + 2 * 64 * 2 / 32.0 + 2 * 2 * 2;
        assert_true(fabs(r->kv_bytes - 1000.0 * 2 * per) < 1e-6);
        assert_true(r->gbps > 0);
    }
    /* same data (same seed per dtype), two implementations: 8 heads x 64 outputs summed */
    for (int d = 0; d < 2; d++) {
        const struct k25_attn_bench_row *c = &res.rows[2 * d], *f = &res.rows[2 * d + 1];
        assert_string_equal(c->impl, "chunked");
        assert_string_equal(f->impl, "flash2");
        assert_string_equal(c->dtype, f->dtype);
        print_message("%s: checksum chunked %.6f flash2 %.6f\n", c->dtype, c->checksum, f->checksum);
        assert_true(fabs(c->checksum - f->checksum) < 0.05);
    }
    k25_attn_bench_result_free(&res);
    o.block_size = 48; /* not a whole number of key groups */
    o.n_impls = 1;
    assert_int_equal(k25_attn_bench_run(&o, &m, &res, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "--block-size"));
}

/* The binary: bad arguments name the flag; a tiny run prints JSON. */
static void test_bench_cli(void **state)
{
    (void)state;
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s attn-bench --dtype int3", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--dtype"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s attn-bench --dtype int4,fp16,int4", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "distinct"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s attn-bench --heads 6 --kv-heads 4", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "evenly"));
    free(out);
    snprintf(cmd, sizeof(cmd),
             "%s attn-bench --quick-probe --quiet --impl chunked,flash2 --context 300 --chunk 128 --heads 4 "
             "--kv-heads 1 --head-dim 32 --repeat 1 --decode --json",
             tu_k25());
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "\"frac_bandwidth\""));
    assert_non_null(strstr(out, "\"triad_gbps\""));
    free(out);
}

int main(int argc, char **argv)
{
    (void)argc;
    k25_blas_reexec(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_odd_sizes),
        cmocka_unit_test(test_fp16_kv),
        cmocka_unit_test(test_decode_splits),
        cmocka_unit_test(test_thread_count_determinism),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_int4_codes),
        cmocka_unit_test(test_allocator),
        cmocka_unit_test(test_bench_skip_and_outputs),
        cmocka_unit_test(test_bench_quantized),
        cmocka_unit_test(test_bench_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
