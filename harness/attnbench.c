/*
 * attnbench.c - the attention microbenchmark behind `k25 attn-bench`.
 *
 * It first measures the machine on the threads the kernels will use: the
 * peak FP32 FMA rate (a compute probe with enough independent FMA chains
 * to fill every FMA pipe) and the sustained memory bandwidth (a STREAM
 * triad over arrays several times the last-level cache).  Then, for every
 * setting (implementation x context x chunk x dtype), it fills a paged KV
 * cache with N(0,1) data, times the attention calls (warm-up, then N
 * repetitions; median and spread), reads the tracking allocator's scratch
 * peak, and reports GFLOP/s and KV GB/s also as fractions of those two
 * limits.  Settings the memory calculator says cannot fit are skipped with
 * its figure as the reason.  Results go to a table, JSON and an HDF5 file
 * (docs/trace-schema.md, "attn-bench").
 *
 * Modes: "prefill" runs a whole prompt of `context` tokens: chunked in
 * chunks of `chunk` tokens (one call per chunk, as the engine does), or in
 * one call ("one-pass": chunked with chunk = context; flash2 and naive
 * always run the whole sequence at once).  "decode" is one query at
 * position context-1 over the whole cache; the cache is replicated over
 * enough "layers" (rotated per call) that the bytes read exceed the
 * last-level cache, so decode reads come from DRAM as in a real model.
 */
#include "harness.h"
#include "k25_attn.h"
#include "k25util.h"
#include "buildinfo.h"

#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* -------------------------------------------------------- machine probes */

/*
 * Peak FMA rate: each thread runs NACC independent FMA chains on vector
 * registers (AVX-512 or AVX2 where built, a portable loop otherwise), long
 * enough to amortize the ramp; best of 3.  NACC >= latency x pipes (4 x 2
 * on current x86) keeps every FMA unit busy.
 */
#define NACC 12
static double fma_probe_once(int threads, int64_t iters)
{
    double t0 = (double)k25_now_ns();
    double sink = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        float seed = 1.0f + (float)omp_get_thread_num() * 1e-7f;
#if defined(__AVX512F__)
        __m512 a[NACC], m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
        for (int i = 0; i < NACC; i++)
            a[i] = _mm512_set1_ps(seed + (float)i);
        for (int64_t it = 0; it < iters; it++)
            for (int i = 0; i < NACC; i++)
                a[i] = _mm512_fmadd_ps(a[i], m, c);
        for (int i = 0; i < NACC; i++)
            sink += _mm512_reduce_add_ps(a[i]);
#elif defined(__AVX2__) && defined(__FMA__)
        __m256 a[2 * NACC], m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
        for (int i = 0; i < 2 * NACC; i++)
            a[i] = _mm256_set1_ps(seed + (float)i);
        for (int64_t it = 0; it < iters; it++)
            for (int i = 0; i < 2 * NACC; i++)
                a[i] = _mm256_fmadd_ps(a[i], m, c);
        float tmp[8];
        for (int i = 0; i < 2 * NACC; i++) {
            _mm256_storeu_ps(tmp, a[i]);
            for (int k = 0; k < 8; k++)
                sink += tmp[k];
        }
#else
        float a[NACC][16];
        for (int i = 0; i < NACC; i++)
            for (int k = 0; k < 16; k++)
                a[i][k] = seed + (float)i;
        for (int64_t it = 0; it < iters; it++)
            for (int i = 0; i < NACC; i++)
#pragma omp simd
                for (int k = 0; k < 16; k++)
                    a[i][k] = a[i][k] * 0.9999999f + 1e-7f;
        for (int i = 0; i < NACC; i++)
            for (int k = 0; k < 16; k++)
                sink += a[i][k];
#endif
    }
    double dt = ((double)k25_now_ns() - t0) / 1e9;
    if (sink == 42.0) /* keep the chains alive */
        fputc(' ', stderr);
    return (double)threads * (double)iters * NACC * 16 * 2 / dt / 1e9;
}

/* Last-level cache bytes (0 when unknown). */
static int64_t llc_bytes(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l3 > 0 ? l3 : (l2 > 0 ? l2 : 0);
}

/* STREAM triad a = b + s*c over n floats; best of reps, GB/s (12 bytes/element, as STREAM counts). */
static double triad_probe(int threads, size_t n, int reps)
{
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n), *c = malloc(sizeof(float) * n);
    double best = 0.0;
    if (!a || !b || !c)
        goto out;
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) { /* first touch on the threads that use the pages */
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = k25_now_ns();
        const float s = 3.0f;
#pragma omp parallel for simd schedule(static) num_threads(threads)
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
        double dt = (double)(k25_now_ns() - t0) / 1e9;
        double gbs = 12.0 * (double)n / dt / 1e9;
        if (gbs > best)
            best = gbs;
    }
    if (a[n / 2] != 7.0f)
        best = 0.0; /* the triad did not run as written */
out:
    free(a);
    free(b);
    free(c);
    return best;
}

int k25_attn_bench_probe(struct k25_attn_machine *m, int threads, bool quick)
{
    memset(m, 0, sizeof(*m));
    m->threads = threads;
    m->llc_bytes = llc_bytes();
    /* warm up the cores (frequency, AVX-512 license), then best of 3 */
    int64_t iters = quick ? 2000000 : 20000000;
    fma_probe_once(threads, iters / 10);
    for (int i = 0; i < 3; i++) {
        double g = fma_probe_once(threads, iters);
        if (g > m->fma_peak_gflops)
            m->fma_peak_gflops = g;
    }
    /* three arrays, together at least 4x the LLC (64 MiB each at least) */
    int64_t per = m->llc_bytes * 4 / 3;
    if (per < (int64_t)64 << 20)
        per = (int64_t)64 << 20;
    if (quick)
        per = (int64_t)16 << 20;
    m->triad_array_bytes = per;
    m->triad_gbps = triad_probe(threads, (size_t)per / sizeof(float), quick ? 3 : 6);
    return m->triad_gbps > 0 && m->fma_peak_gflops > 0 ? K25_OK : K25_EINTERNAL;
}

/* ------------------------------------------------------------ settings */

/* Available memory in bytes (MemAvailable), 0 when unknown. */
static int64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    int64_t kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/*
 * N(0,1) by Marsaglia's polar method from the xorshift state: two normals
 * per accepted pair and no trigonometry (Box-Muller's cos and log were
 * three quarters of a long-context decode benchmark's run time).  The
 * second value of a pair is kept in the state's spare.
 */
struct normal_rng {
    uint64_t s;
    float spare;
    bool has_spare;
};

static float randn(struct normal_rng *g)
{
    if (g->has_spare) {
        g->has_spare = false;
        return g->spare;
    }
    double u, v, q;
    do {
        u = 2.0 * ((double)(rng_next(&g->s) >> 11) / 9007199254740992.0) - 1.0;
        v = 2.0 * ((double)(rng_next(&g->s) >> 11) / 9007199254740992.0) - 1.0;
        q = u * u + v * v;
    } while (q >= 1.0 || q == 0.0);
    double f = sqrt(-2.0 * log(q) / q);
    g->spare = (float)(v * f);
    g->has_spare = true;
    return (float)(u * f);
}

/* One paged KV cache of n tokens (one layer), blocks from the tracker (K25_MEM_KV). */
struct bench_kv {
    int n_blocks;
    size_t block_bytes;
    void **blocks;         /* [n_blocks] block = [K|V][kv_head][block][row] (+ int8/int4 scales) */
    const void **kp, **vp; /* views into blocks */
    uint16_t *res;         /* int8/int4: the fp16 residual [K|V][kv_head][res_cap][hd] (malloc'd) */
    struct k25_kv_view view;
};

/* int8/int4 as the engine's defaults store them (kv_quant_group, kv_quant_residual). */
#define BENCH_QGROUP 32
#define BENCH_QRESIDUAL 128

/* Bytes a decode call reads per token of one KV head: K and V rows plus, for int8/int4, the key
 * group's scale/zero rows (per token) and the value row's per-group scale/zero. */
static double kv_token_bytes(enum k25_dtype dt, int hd)
{
    if (dt == K25_DTYPE_FP32 || dt == K25_DTYPE_FP16)
        return 2.0 * hd * (dt == K25_DTYPE_FP32 ? 4 : 2);
    const int vg = BENCH_QGROUP < hd ? BENCH_QGROUP : hd;
    return 2.0 * (double)k25_kvq_row_bytes(hd, dt == K25_DTYPE_INT8 ? 8 : 4) + 2.0 * hd * 2 / BENCH_QGROUP +
           (double)(hd / vg) * 2 * 2;
}

/* Fills an int8/int4 block's head g: keys quantized per key group, values per row. */
static void kv_quant_fill(unsigned char *blk, const struct k25_kv_view *v, size_t half, int g, int bits,
                          struct normal_rng *rng, float *x)
{
    const int bs = v->block_size, hd = v->head_dim, nvg = hd / v->vgroup;
    const size_t rb = k25_kvq_row_bytes(hd, bits);
    uint8_t *kq = blk + (size_t)g * bs * rb, *vq = blk + half + (size_t)g * bs * rb;
    uint16_t *ks = (uint16_t *)(blk + v->ks_off) + (size_t)g * (bs / v->group) * 2 * hd;
    uint16_t *vs = (uint16_t *)(blk + v->vs_off) + (size_t)g * bs * nvg * 2;
    for (int t0 = 0; t0 < bs; t0 += v->group) {
        for (int i = 0; i < v->group * hd; i++)
            x[i] = randn(rng);
        k25_kvq_quant_keys(x, hd, v->group, hd, bits, kq + (size_t)t0 * rb, ks + (size_t)(t0 / v->group) * 2 * hd);
    }
    for (int t = 0; t < bs; t++) {
        for (int i = 0; i < hd; i++)
            x[i] = randn(rng);
        k25_kvq_quant_value_row(x, hd, v->vgroup, bits, vq + (size_t)t * rb, vs + (size_t)t * nvg * 2);
    }
}

/*
 * from == NULL: fill with N(0,1) values (int8/int4: quantized from them as
 * the engine does, the slots from n_quant on in the fp16 residual);
 * otherwise copy from's contents (the layers exist to defeat the caches,
 * not to differ, and drawing hundreds of millions of normals would
 * dominate a decode benchmark).
 */
static int kv_make(struct bench_kv *kv, int n, int kv_heads, int hd, int bs, enum k25_dtype dt, struct normal_rng *rng,
                   const struct bench_kv *from)
{
    memset(kv, 0, sizeof(*kv));
    const bool quant = dt == K25_DTYPE_INT8 || dt == K25_DTYPE_INT4;
    const int bits = dt == K25_DTYPE_INT8 ? 8 : 4, vg = BENCH_QGROUP < hd ? BENCH_QGROUP : hd;
    const size_t row = quant ? k25_kvq_row_bytes(hd, bits) : (size_t)hd * (dt == K25_DTYPE_FP32 ? 4 : 2);
    const size_t half = (size_t)kv_heads * bs * row;
    kv->view = (struct k25_kv_view){.n_tokens = n, .block_size = bs, .n_kv_heads = kv_heads, .head_dim = hd, .dtype = dt};
    kv->block_bytes = 2 * half;
    if (quant) {
        if (bs % BENCH_QGROUP || hd % vg || (bits == 4 && hd % 2))
            return K25_EINVAL;
        kv->view.group = BENCH_QGROUP;
        kv->view.vgroup = vg;
        kv->view.ks_off = 2 * half;
        kv->view.vs_off = kv->view.ks_off + (size_t)kv_heads * (bs / BENCH_QGROUP) * 2 * hd * sizeof(uint16_t);
        kv->block_bytes = kv->view.vs_off + (size_t)kv_heads * bs * (hd / vg) * 2 * sizeof(uint16_t);
        int nq = n > BENCH_QRESIDUAL ? (n - BENCH_QRESIDUAL) / BENCH_QGROUP * BENCH_QGROUP : 0;
        kv->view.n_quant = nq;
        kv->view.res_cap = BENCH_QRESIDUAL + BENCH_QGROUP;
        size_t rn = (size_t)2 * kv_heads * kv->view.res_cap * hd;
        kv->res = malloc(sizeof(uint16_t) * rn);
        if (!kv->res)
            return K25_ENOMEM;
        for (size_t i = 0; i < rn; i++)
            kv->res[i] = from ? from->res[i] : k25_fp32_to_fp16(randn(rng));
        kv->view.res_k = kv->res;
        kv->view.res_v = kv->res + rn / 2;
    }
    kv->n_blocks = (n + bs - 1) / bs;
    kv->blocks = calloc((size_t)kv->n_blocks, sizeof(void *));
    kv->kp = calloc((size_t)kv->n_blocks, sizeof(void *));
    kv->vp = calloc((size_t)kv->n_blocks, sizeof(void *));
    float *x = quant ? malloc(sizeof(float) * (size_t)BENCH_QGROUP * hd) : NULL;
    if (!kv->blocks || !kv->kp || !kv->vp || (quant && !x)) {
        free(x);
        return K25_ENOMEM;
    }
    for (int b = 0; b < kv->n_blocks; b++) {
        unsigned char *blk = k25_alloc(K25_MEM_KV, kv->block_bytes);
        if (!blk) {
            free(x);
            return K25_ENOMEM;
        }
        kv->blocks[b] = blk;
        kv->kp[b] = blk;
        kv->vp[b] = blk + half;
        if (from) {
            memcpy(blk, from->blocks[b], kv->block_bytes);
        } else if (quant) {
            for (int g = 0; g < kv_heads; g++)
                kv_quant_fill(blk, &kv->view, half, g, bits, rng, x);
        } else {
            size_t cnt = 2 * half / (dt == K25_DTYPE_FP32 ? 4 : 2);
            for (size_t i = 0; i < cnt; i++) {
                float v = randn(rng);
                if (dt == K25_DTYPE_FP32)
                    ((float *)blk)[i] = v;
                else
                    ((uint16_t *)blk)[i] = k25_fp32_to_fp16(v);
            }
        }
    }
    free(x);
    kv->view.k_blocks = kv->kp;
    kv->view.v_blocks = kv->vp;
    return K25_OK;
}

static void kv_free(struct bench_kv *kv)
{
    for (int b = 0; kv->blocks && b < kv->n_blocks; b++)
        k25_free(kv->blocks[b]);
    free(kv->blocks);
    free(kv->kp);
    free(kv->vp);
    free(kv->res);
    memset(kv, 0, sizeof(*kv));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * One setting.  prefill: jobs of `chunk` queries (chunk 0 = the whole
 * context in one call); decode: one query at context-1 per call, over the
 * `layers` caches in turn.
 */
static int run_setting(const struct k25_attn_bench_opts *o, const struct k25_attn_machine *m,
                       struct k25_attn_bench_row *row, struct normal_rng *rng, struct k25_error *err)
{
    const int H = o->heads, KH = o->kv_heads, hd = o->head_dim, bs = o->block_size;
    const int64_t N = row->context;
    const bool decode = strcmp(row->mode, "decode") == 0;
    enum k25_attn_impl impl;
    enum k25_dtype dt = !strcmp(row->dtype, "fp16")   ? K25_DTYPE_FP16
                        : !strcmp(row->dtype, "int8") ? K25_DTYPE_INT8
                        : !strcmp(row->dtype, "int4") ? K25_DTYPE_INT4
                                                      : K25_DTYPE_FP32;
    int rc = k25_attn_impl_parse(row->impl, &impl, err);
    if (rc)
        return rc;
    const int64_t q_rows = decode ? 1 : (row->chunk > 0 ? row->chunk : N);
    const int64_t kv_layer_bytes = (int64_t)((N + bs - 1) / bs * bs * KH * kv_token_bytes(dt, hd));

    /* what it needs, by the calculator, before attempting it */
    row->calc_scratch_bytes = k25_attn_scratch_bytes(impl, H, KH, hd, bs, dt, 1, q_rows, N, m->threads);
    int layers = 1;
    if (decode && m->llc_bytes > 0)
        layers = (int)((2 * m->llc_bytes + kv_layer_bytes - 1) / kv_layer_bytes);
    if (layers < 1)
        layers = 1;
    int64_t qo_bytes = 2 * (decode ? 1 : N) * (int64_t)H * hd * 4;
    int64_t need = row->calc_scratch_bytes + kv_layer_bytes + qo_bytes;
    int64_t avail = o->mem_limit_bytes > 0 ? o->mem_limit_bytes : mem_available() * 9 / 10;
    if (avail > 0 && need > avail) {
        snprintf(row->status, sizeof(row->status), "skipped");
        snprintf(row->reason, sizeof(row->reason),
                 "needs %.2f GiB (calculator: attention scratch %.2f GiB + KV %.2f GiB + Q/O %.2f GiB), "
                 "%.2f GiB available",
                 (double)need / (1 << 30), (double)row->calc_scratch_bytes / (1 << 30),
                 (double)kv_layer_bytes / (1 << 30), (double)qo_bytes / (1 << 30), (double)avail / (1 << 30));
        return K25_OK;
    }
    if (decode && avail > 0) { /* fewer layers when memory is short */
        int64_t fit = (avail - need) / kv_layer_bytes + 1;
        if (layers > fit)
            layers = (int)fit;
    }
    if (layers > 64)
        layers = 64;
    row->layers = layers;

    struct bench_kv *kvs = calloc((size_t)layers, sizeof(*kvs));
    float *q = malloc(sizeof(float) * (size_t)(decode ? 1 : N) * H * hd);
    float *out = malloc(sizeof(float) * (size_t)(decode ? 1 : N) * H * hd);
    double *times = calloc((size_t)o->repeat, sizeof(double));
    if (!kvs || !q || !out || !times) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory for the %s setting", row->impl);
        goto out_free;
    }
    for (int l = 0; l < layers; l++)
        if ((rc = kv_make(&kvs[l], (int)N, KH, hd, bs, dt, rng, l ? &kvs[0] : NULL)) != K25_OK) {
            if (rc == K25_EINVAL)
                rc = k25_error_set(err, K25_EINVAL, NULL, 0, "--dtype",
                                   "%s needs --block-size a multiple of %d and head_dim a multiple of %d (got %d, %d)",
                                   row->dtype, BENCH_QGROUP, BENCH_QGROUP < hd ? BENCH_QGROUP : 2, bs, hd);
            else
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory for a %lld-token KV cache",
                                   (long long)N);
            goto out_free;
        }
    for (int64_t i = 0; i < (decode ? 1 : N) * H * hd; i++)
        q[i] = randn(rng);

    k25_attention_fn fn = k25_attn_impl_get(impl)->run;
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t chunk = decode ? 1 : q_rows;
    int layer = 0;
    for (int r = -o->warmup; r < o->repeat; r++) {
        struct k25_mem_stats ms0;
        k25_mem_get(&ms0);
        k25_mem_reset_peak();
        uint64_t t0 = k25_now_ns();
        if (decode) {
            struct k25_attn_job job = {q, H * hd, 1, (int)N - 1, kvs[layer].view, out, H * hd, NULL};
            fn(&job, 1, H, scale, NULL);
            layer = (layer + 1) % layers;
        } else {
            for (int64_t c0 = 0; c0 < N; c0 += chunk) {
                int nq = (int)(N - c0 < chunk ? N - c0 : chunk);
                struct k25_attn_job job = {q + (size_t)c0 * H * hd, H * hd, nq, (int)c0, kvs[0].view,
                                           out + (size_t)c0 * H * hd, H * hd, NULL};
                job.kv.n_tokens = (int)(c0 + nq); /* the cache holds what is prefilled so far */
                if (job.kv.res_k) /* int8/int4: quantized up to the residual, as the engine would have */
                    job.kv.n_quant = job.kv.n_tokens > BENCH_QRESIDUAL
                                         ? (job.kv.n_tokens - BENCH_QRESIDUAL) / BENCH_QGROUP * BENCH_QGROUP
                                         : 0;
                fn(&job, 1, H, scale, NULL);
            }
        }
        uint64_t t1 = k25_now_ns();
        struct k25_mem_stats ms1;
        k25_mem_get(&ms1);
        int64_t sp = ms1.peak_bytes[K25_MEM_ATTN_SCRATCH] - ms0.cur_bytes[K25_MEM_ATTN_SCRATCH];
        if (sp > row->scratch_peak_bytes)
            row->scratch_peak_bytes = sp;
        if (r >= 0)
            times[r] = (double)(t1 - t0) / 1e6;
    }
    double checksum = 0.0;
    for (int64_t i = 0; i < (decode ? 1 : N) * H * hd; i++)
        checksum += out[i];
    row->checksum = checksum;

    qsort(times, (size_t)o->repeat, sizeof(double), cmp_double);
    row->median_ms = o->repeat % 2 ? times[o->repeat / 2]
                                   : 0.5 * (times[o->repeat / 2 - 1] + times[o->repeat / 2]);
    row->min_ms = times[0];
    row->max_ms = times[o->repeat - 1];
    row->spread_pct = row->median_ms > 0 ? 100.0 * (row->max_ms - row->min_ms) / row->median_ms : 0.0;
    /* useful work: every (query, visible key) pair, 2 FLOPs per MAC in QK^T and PV */
    double pairs = decode ? (double)N : (double)N * (double)(N + 1) / 2.0;
    row->gflop = 4.0 * hd * H * pairs / 1e9;
    row->gflops = row->gflop / (row->median_ms / 1e3);
    row->kv_bytes = (double)N * KH * kv_token_bytes(dt, hd);
    row->gbps = row->kv_bytes / (row->median_ms / 1e3) / 1e9;
    row->frac_fma_peak = m->fma_peak_gflops > 0 ? row->gflops / m->fma_peak_gflops : 0.0;
    row->frac_bandwidth = m->triad_gbps > 0 ? row->gbps / m->triad_gbps : 0.0;
    row->work_bytes = row->scratch_peak_bytes + 2 * (decode ? 1 : q_rows) * (int64_t)H * hd * 4;
    snprintf(row->status, sizeof(row->status), "ok");

out_free:
    for (int l = 0; kvs && l < layers; l++)
        kv_free(&kvs[l]);
    free(kvs);
    free(q);
    free(out);
    free(times);
    return rc;
}

/* Adds a row to the growing array. */
static struct k25_attn_bench_row *add_row(struct k25_attn_bench_result *res)
{
    if (res->n_rows == res->cap_rows) {
        int ncap = res->cap_rows ? 2 * res->cap_rows : 32;
        struct k25_attn_bench_row *nr = realloc(res->rows, sizeof(*nr) * (size_t)ncap);
        if (!nr)
            return NULL;
        res->rows = nr;
        res->cap_rows = ncap;
    }
    struct k25_attn_bench_row *r = &res->rows[res->n_rows++];
    memset(r, 0, sizeof(*r));
    return r;
}

static const struct k25_attn_bench_row *find_row(const struct k25_attn_bench_result *res, const char *impl,
                                                  const char *mode, const char *dtype, int64_t ctx, int64_t chunk)
{
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_attn_bench_row *r = &res->rows[i];
        if (!strcmp(r->impl, impl) && !strcmp(r->mode, mode) && !strcmp(r->dtype, dtype) &&
            r->context == ctx && r->chunk == chunk && !strcmp(r->status, "ok"))
            return r;
    }
    return NULL;
}

/* Chunked-vs-reference ratios for every (context, dtype, chunk) measured both ways. */
static void compare(struct k25_attn_bench_result *res)
{
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_attn_bench_row *c = &res->rows[i];
        if (strcmp(c->impl, "chunked") || strcmp(c->mode, "prefill") || c->chunk == 0 || strcmp(c->status, "ok"))
            continue;
        const struct k25_attn_bench_row *f = find_row(res, "flash2", "prefill", c->dtype, c->context, 0);
        const struct k25_attn_bench_row *one = find_row(res, "chunked", "prefill", c->dtype, c->context, 0);
        if (res->n_cmp == (int)(sizeof(res->cmp) / sizeof(res->cmp[0])))
            return;
        struct k25_attn_bench_cmp *x = &res->cmp[res->n_cmp++];
        memset(x, 0, sizeof(*x));
        snprintf(x->dtype, sizeof(x->dtype), "%s", c->dtype);
        x->context = c->context;
        x->chunk = c->chunk;
        x->time_vs_flash2 = f ? c->median_ms / f->median_ms : NAN;
        x->work_bytes_vs_flash2 = f && f->work_bytes > 0 ? (double)c->work_bytes / (double)f->work_bytes : NAN;
        x->scratch_vs_flash2 = f && f->scratch_peak_bytes > 0
                                   ? (double)c->scratch_peak_bytes / (double)f->scratch_peak_bytes
                                   : NAN;
        x->overhead_vs_onepass_pct = one ? 100.0 * (c->median_ms / one->median_ms - 1.0) : NAN;
    }
}

int k25_attn_bench_run(const struct k25_attn_bench_opts *o, const struct k25_attn_machine *m,
                       struct k25_attn_bench_result *res, struct k25_error *err)
{
    memset(res, 0, sizeof(*res));
    res->machine = *m;
    const uint64_t base = o->seed ? o->seed : 0x6174746eULL;
    int total = 0, done = 0;
    struct k25_progress prog = {.mode = K25_PROGRESS_OFF};
    /* the settings: prefill (unless decode only), decode when asked */
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < o->n_dtypes; d++)
            for (int c = 0; c < o->n_contexts; c++)
                for (int i = 0; i < o->n_impls; i++) {
                    const char *mode = o->decode ? "decode" : "prefill";
                    bool chunked_prefill = o->impls[i] == K25_ATTN_CHUNKED && !o->decode;
                    /* chunked prefill: every chunk below the context, then one-pass */
                    int n_sub = chunked_prefill ? o->n_chunks + 1 : 1;
                    for (int s = 0; s < n_sub; s++) {
                        int64_t chunk = chunked_prefill && s < o->n_chunks ? o->chunks[s] : 0;
                        if (chunk >= o->contexts[c])
                            continue; /* a chunk past the context is one-pass, measured once */
                        if (pass == 0) {
                            total++;
                            continue;
                        }
                        if (done == 0 && prog.start_ns == 0) /* the first setting: the count is known */
                            k25_progress_begin(&prog, o->progress, "k25 attn-bench", "settings", total, 0);
                        struct k25_attn_bench_row *r = add_row(res);
                        if (!r)
                            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                        snprintf(r->impl, sizeof(r->impl), "%s", k25_attn_impl_name(o->impls[i]));
                        snprintf(r->mode, sizeof(r->mode), "%s", mode);
                        snprintf(r->dtype, sizeof(r->dtype), "%s", k25_dtype_name(o->dtypes[d]));
                        r->context = o->contexts[c];
                        r->chunk = chunk;
                        r->heads = o->heads;
                        r->kv_heads = o->kv_heads;
                        r->head_dim = o->head_dim;
                        r->threads = m->threads;
                        r->repeat = o->repeat;
                        k25_progress_update(&prog, done++, "next: %s %s %s ctx=%lld chunk=%lld", r->impl, r->mode,
                                            r->dtype, (long long)r->context, (long long)r->chunk);
                        /* every implementation of one (dtype, context) gets the same data */
                        struct normal_rng rng = {base + 0x9E3779B97F4A7C15ULL * (uint64_t)(d * 65537 + c + 1), 0.0f,
                                                 false};
                        rng.s += rng.s == 0; /* xorshift needs a nonzero state */
                        int rc = run_setting(o, m, r, &rng, err);
                        if (rc)
                            return rc;
                    }
                }
    k25_progress_end(&prog, done, NULL);
    compare(res);
    return K25_OK;
}

void k25_attn_bench_result_free(struct k25_attn_bench_result *res)
{
    free(res->rows);
    memset(res, 0, sizeof(*res));
}

/* ---------------------------------------------------------------- output */

static void human_bytes(int64_t b, char *buf, size_t n)
{
    if (b >= (int64_t)1 << 30)
        snprintf(buf, n, "%.2fG", (double)b / (1 << 30));
    else if (b >= 1 << 20)
        snprintf(buf, n, "%.1fM", (double)b / (1 << 20));
    else
        snprintf(buf, n, "%.0fK", (double)b / 1024);
}


/* "0.867x", or "n/a" for a ratio whose reference was not measured. */
static void ratio_text(double r, char *buf, size_t n)
{
    if (isfinite(r))
        snprintf(buf, n, "%.3fx", r);
    else
        snprintf(buf, n, "n/a");
}

void k25_attn_bench_print(FILE *out, const struct k25_attn_bench_result *res)
{
    const struct k25_attn_machine *m = &res->machine;
    fprintf(out, "machine: %d threads, FMA peak %.1f GFLOP/s, STREAM triad %.1f GB/s (arrays %.0f MiB, LLC %.0f MiB)\n\n",
            m->threads, m->fma_peak_gflops, m->triad_gbps, (double)m->triad_array_bytes / (1 << 20),
            (double)m->llc_bytes / (1 << 20));
    fprintf(out, "%-8s %-8s %-5s %7s %6s %10s %7s %8s %6s %7s %6s %8s %8s\n", "impl", "mode", "dtype", "context",
            "chunk", "median_ms", "spread", "GFLOP/s", "%peak", "KV_GB/s", "%bw", "scratch", "workset");
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_attn_bench_row *r = &res->rows[i];
        char chunk[16];
        snprintf(chunk, sizeof(chunk), r->chunk ? "%lld" : "-", (long long)r->chunk);
        if (strcmp(r->status, "ok")) {
            fprintf(out, "%-8s %-8s %-5s %7lld %6s skipped: %s\n", r->impl, r->mode, r->dtype,
                    (long long)r->context, chunk, r->reason);
            continue;
        }
        char sb[16], wb[16];
        human_bytes(r->scratch_peak_bytes, sb, sizeof(sb));
        human_bytes(r->work_bytes, wb, sizeof(wb));
        fprintf(out, "%-8s %-8s %-5s %7lld %6s %10.2f %6.1f%% %8.1f %5.1f%% %7.2f %5.1f%% %8s %8s\n", r->impl,
                r->mode, r->dtype, (long long)r->context, chunk, r->median_ms, r->spread_pct, r->gflops,
                100 * r->frac_fma_peak, r->gbps, 100 * r->frac_bandwidth, sb, wb);
    }
    if (res->n_cmp > 0) {
        fprintf(out, "\nchunked prefill against references measured in this run:\n");
        fprintf(out, "%-5s %7s %6s %14s %16s %16s %14s\n", "dtype", "context", "chunk", "time/flash2",
                "workset/flash2", "scratch/flash2", "vs one-pass");
        for (int i = 0; i < res->n_cmp; i++) {
            const struct k25_attn_bench_cmp *x = &res->cmp[i];
            /* a reference that was not measured (--impl without flash2) reads n/a */
            char t[32], w[32], sc[32], ov[32];
            ratio_text(x->time_vs_flash2, t, sizeof(t));
            ratio_text(x->work_bytes_vs_flash2, w, sizeof(w));
            ratio_text(x->scratch_vs_flash2, sc, sizeof(sc));
            if (isfinite(x->overhead_vs_onepass_pct))
                snprintf(ov, sizeof(ov), "%+.1f%%", x->overhead_vs_onepass_pct);
            else
                snprintf(ov, sizeof(ov), "n/a");
            fprintf(out, "%-5s %7lld %6lld %14s %16s %16s %14s\n", x->dtype, (long long)x->context,
                    (long long)x->chunk, t, w, sc, ov);
        }
    }
}

static json_t *jnum(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

char *k25_attn_bench_json(const struct k25_attn_bench_opts *o, const struct k25_attn_bench_result *res)
{
    const struct k25_attn_machine *m = &res->machine;
    json_t *root = json_object(), *rows = json_array(), *cmps = json_array();
    json_object_set_new(root, "kind", json_string("attn-bench"));
    json_object_set_new(root, "schema_version", json_integer(K25_H5_SCHEMA_VERSION));
    json_object_set_new(root, "version", json_string(K25_VERSION));
    json_object_set_new(root, "git", json_string(K25_BUILD_GIT));
    json_object_set_new(root, "compiler", json_string(K25_BUILD_CC));
    json_object_set_new(root, "cflags", json_string(K25_BUILD_CFLAGS));
    json_object_set_new(root, "blas_core", json_string(k25_blas_corename() ? k25_blas_corename() : "?"));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(root, "machine",
                        json_pack("{s:i, s:f, s:f, s:I, s:I}", "threads", m->threads, "fma_peak_gflops",
                                  m->fma_peak_gflops, "triad_gbps", m->triad_gbps, "triad_array_bytes",
                                  (json_int_t)m->triad_array_bytes, "llc_bytes", (json_int_t)m->llc_bytes));
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_attn_bench_row *r = &res->rows[i];
        json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:s}", "impl", r->impl, "mode",
                              r->mode, "dtype", r->dtype, "context", (json_int_t)r->context, "chunk",
                              (json_int_t)r->chunk, "heads", r->heads, "kv_heads", r->kv_heads, "head_dim",
                              r->head_dim, "threads", r->threads, "repeat", r->repeat, "status", r->status);
        if (strcmp(r->status, "ok")) {
            json_object_set_new(j, "reason", json_string(r->reason));
            json_object_set_new(j, "calc_scratch_bytes", json_integer(r->calc_scratch_bytes));
        } else {
            json_object_set_new(j, "median_ms", jnum(r->median_ms));
            json_object_set_new(j, "min_ms", jnum(r->min_ms));
            json_object_set_new(j, "max_ms", jnum(r->max_ms));
            json_object_set_new(j, "spread_pct", jnum(r->spread_pct));
            json_object_set_new(j, "gflops", jnum(r->gflops));
            json_object_set_new(j, "kv_gbps", jnum(r->gbps));
            json_object_set_new(j, "frac_fma_peak", jnum(r->frac_fma_peak));
            json_object_set_new(j, "frac_bandwidth", jnum(r->frac_bandwidth));
            json_object_set_new(j, "scratch_peak_bytes", json_integer(r->scratch_peak_bytes));
            json_object_set_new(j, "calc_scratch_bytes", json_integer(r->calc_scratch_bytes));
            json_object_set_new(j, "work_bytes", json_integer(r->work_bytes));
            json_object_set_new(j, "layers", json_integer(r->layers));
        }
        json_array_append_new(rows, j);
    }
    for (int i = 0; i < res->n_cmp; i++) {
        const struct k25_attn_bench_cmp *x = &res->cmp[i];
        json_t *j = json_pack("{s:s, s:I, s:I}", "dtype", x->dtype, "context", (json_int_t)x->context, "chunk",
                              (json_int_t)x->chunk);
        json_object_set_new(j, "time_vs_flash2", jnum(x->time_vs_flash2));
        json_object_set_new(j, "work_bytes_vs_flash2", jnum(x->work_bytes_vs_flash2));
        json_object_set_new(j, "scratch_vs_flash2", jnum(x->scratch_vs_flash2));
        json_object_set_new(j, "overhead_vs_onepass_pct", jnum(x->overhead_vs_onepass_pct));
        json_array_append_new(cmps, j);
    }
    json_object_set_new(root, "results", rows);
    json_object_set_new(root, "comparisons", cmps);
    char *txt = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    return txt;
}

/* The row as stored in HDF5 (fixed-size strings). */
struct h5row {
    char impl[16], mode[16], dtype[8], status[16], reason[256];
    int64_t context, chunk;
    int32_t heads, kv_heads, head_dim, threads, repeat, layers;
    double median_ms, min_ms, max_ms, spread_pct, gflops, kv_gbps, frac_fma_peak, frac_bandwidth;
    int64_t scratch_peak_bytes, calc_scratch_bytes, work_bytes;
};

#define COL(n, t) {#n, t, offsetof(struct h5row, n), 0}
#define SCOL(n) {#n, K25_H5_STR, offsetof(struct h5row, n), sizeof(((struct h5row *)0)->n)}
static const struct k25_h5_col row_cols[] = {
    SCOL(impl), SCOL(mode), SCOL(dtype), COL(context, K25_H5_I64), COL(chunk, K25_H5_I64),
    COL(heads, K25_H5_I32), COL(kv_heads, K25_H5_I32), COL(head_dim, K25_H5_I32), COL(threads, K25_H5_I32),
    COL(repeat, K25_H5_I32), COL(layers, K25_H5_I32), SCOL(status), SCOL(reason),
    COL(median_ms, K25_H5_F64), COL(min_ms, K25_H5_F64), COL(max_ms, K25_H5_F64), COL(spread_pct, K25_H5_F64),
    COL(gflops, K25_H5_F64), COL(kv_gbps, K25_H5_F64), COL(frac_fma_peak, K25_H5_F64),
    COL(frac_bandwidth, K25_H5_F64), COL(scratch_peak_bytes, K25_H5_I64), COL(calc_scratch_bytes, K25_H5_I64),
    COL(work_bytes, K25_H5_I64),
};

struct h5cmp {
    char dtype[8];
    int64_t context, chunk;
    double time_vs_flash2, work_bytes_vs_flash2, scratch_vs_flash2, overhead_vs_onepass_pct;
};
#define CCOL(n, t) {#n, t, offsetof(struct h5cmp, n), 0}
static const struct k25_h5_col cmp_cols[] = {
    {"dtype", K25_H5_STR, offsetof(struct h5cmp, dtype), sizeof(((struct h5cmp *)0)->dtype)},
    CCOL(context, K25_H5_I64), CCOL(chunk, K25_H5_I64), CCOL(time_vs_flash2, K25_H5_F64),
    CCOL(work_bytes_vs_flash2, K25_H5_F64), CCOL(scratch_vs_flash2, K25_H5_F64),
    CCOL(overhead_vs_onepass_pct, K25_H5_F64),
};

/* The CPU's model name from /proc/cpuinfo, for provenance. */
static void cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c += 1 + (c[1] == ' ');
            c[strcspn(c, "\n")] = '\0';
            snprintf(buf, n, "%s", c);
            break;
        }
    }
    fclose(f);
}

int k25_attn_bench_write_h5(const char *path, const struct k25_attn_bench_opts *o,
                            const struct k25_attn_bench_result *res, const char *cmdline, struct k25_error *err)
{
    struct k25_h5 h;
    hid_t mach = H5I_INVALID_HID, results = H5I_INVALID_HID;
    struct h5row *rows = NULL;
    struct h5cmp *cmps = NULL;
    char cpu[256], stamp[64];
    int rc = k25_h5_create(&h, path, "attn-bench", err);
    if (rc)
        return rc;
    cpu_model(cpu, sizeof(cpu));
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    if ((rc = k25_h5_attr_str(h.meta, "k25_version", K25_VERSION, err)) ||
        (rc = k25_h5_attr_str(h.meta, "git_commit", K25_BUILD_GIT, err)) ||
        (rc = k25_h5_attr_str(h.meta, "compiler", K25_BUILD_CC, err)) ||
        (rc = k25_h5_attr_str(h.meta, "cflags", K25_BUILD_CFLAGS, err)) ||
        (rc = k25_h5_attr_str(h.meta, "cpu_model", cpu, err)) ||
        (rc = k25_h5_attr_str(h.meta, "blas_core", k25_blas_corename() ? k25_blas_corename() : "?", err)) ||
        (rc = k25_h5_attr_i64(h.meta, "threads", res->machine.threads, err)) ||
        (rc = k25_h5_attr_i64(h.meta, "seed", (int64_t)o->seed, err)) ||
        (rc = k25_h5_attr_str(h.meta, "command_line", cmdline ? cmdline : "", err)) ||
        (rc = k25_h5_attr_str(h.meta, "start_time", stamp, err)))
        goto out;
    if ((mach = k25_h5_group(&h, "machine", err)) < 0) {
        rc = err ? err->code : K25_EIO;
        goto out;
    }
    if ((rc = k25_h5_attr_f64(mach, "fma_peak_gflops", res->machine.fma_peak_gflops, err)) ||
        (rc = k25_h5_attr_f64(mach, "triad_gbps", res->machine.triad_gbps, err)) ||
        (rc = k25_h5_attr_i64(mach, "triad_array_bytes", res->machine.triad_array_bytes, err)) ||
        (rc = k25_h5_attr_i64(mach, "llc_bytes", res->machine.llc_bytes, err)) ||
        (rc = k25_h5_attr_i64(mach, "threads", res->machine.threads, err)))
        goto out;
    rows = calloc((size_t)res->n_rows + 1, sizeof(*rows));
    cmps = calloc((size_t)res->n_cmp + 1, sizeof(*cmps));
    if (!rows || !cmps) {
        rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory");
        goto out;
    }
    for (int i = 0; i < res->n_rows; i++) {
        const struct k25_attn_bench_row *r = &res->rows[i];
        struct h5row *w = &rows[i];
        snprintf(w->impl, sizeof(w->impl), "%s", r->impl);
        snprintf(w->mode, sizeof(w->mode), "%s", r->mode);
        snprintf(w->dtype, sizeof(w->dtype), "%s", r->dtype);
        snprintf(w->status, sizeof(w->status), "%s", r->status);
        snprintf(w->reason, sizeof(w->reason), "%s", r->reason);
        w->context = r->context;
        w->chunk = r->chunk;
        w->heads = r->heads;
        w->kv_heads = r->kv_heads;
        w->head_dim = r->head_dim;
        w->threads = r->threads;
        w->repeat = r->repeat;
        w->layers = r->layers;
        w->median_ms = r->median_ms;
        w->min_ms = r->min_ms;
        w->max_ms = r->max_ms;
        w->spread_pct = r->spread_pct;
        w->gflops = r->gflops;
        w->kv_gbps = r->gbps;
        w->frac_fma_peak = r->frac_fma_peak;
        w->frac_bandwidth = r->frac_bandwidth;
        w->scratch_peak_bytes = r->scratch_peak_bytes;
        w->calc_scratch_bytes = r->calc_scratch_bytes;
        w->work_bytes = r->work_bytes;
    }
    for (int i = 0; i < res->n_cmp; i++) {
        const struct k25_attn_bench_cmp *x = &res->cmp[i];
        snprintf(cmps[i].dtype, sizeof(cmps[i].dtype), "%s", x->dtype);
        cmps[i].context = x->context;
        cmps[i].chunk = x->chunk;
        cmps[i].time_vs_flash2 = x->time_vs_flash2;
        cmps[i].work_bytes_vs_flash2 = x->work_bytes_vs_flash2;
        cmps[i].scratch_vs_flash2 = x->scratch_vs_flash2;
        cmps[i].overhead_vs_onepass_pct = x->overhead_vs_onepass_pct;
    }
    if ((results = k25_h5_group(&h, "attn", err)) < 0) {
        rc = err ? err->code : K25_EIO;
        goto out;
    }
    if ((rc = k25_h5_write_table(results, "results", row_cols, (int)(sizeof(row_cols) / sizeof(row_cols[0])),
                                 sizeof(struct h5row), rows, (size_t)res->n_rows, err)) ||
        (rc = k25_h5_write_table(results, "comparisons", cmp_cols, (int)(sizeof(cmp_cols) / sizeof(cmp_cols[0])),
                                 sizeof(struct h5cmp), cmps, (size_t)res->n_cmp, err)))
        goto out;
    H5Gclose(results);
    results = H5I_INVALID_HID;
    H5Gclose(mach);
    mach = H5I_INVALID_HID;
    rc = k25_h5_commit(&h, err);
out:
    if (results >= 0)
        H5Gclose(results);
    if (mach >= 0)
        H5Gclose(mach);
    if (rc)
        k25_h5_abort(&h);
    free(rows);
    free(cmps);
    return rc;
}
