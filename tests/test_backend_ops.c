/*
 * test_backend_ops.c - every op of every built backend against a scalar
 * double-precision reference written here (after ggml's
 * test-backend-ops).  The backends come from the registry
 * (k25_backend_count / k25_backend_at), so a backend that registers (the
 * CUDA backend with make CUDA=1) is checked without editing this file.  A
 * device backend built in but without a usable device here (init says
 * K25_EUNSUPPORTED: no driver, no device, too old) has every check skipped
 * with that one-line reason.  Besides the ops: the optional argmax slot,
 * and greedy-token parity with the CPU on tiny, small and a generated HF-style folder under the
 * token-identity rule (k25_tok_verify).
 *
 * Each backend gets its own instance charged to a local accounting
 * struct.  Ops run through the backend's table only: buffers come from
 * buf_alloc, inputs go in with buf_set and results come out with
 * buf_get (KV blocks with kv_block_get), never through buf->data - a GPU
 * backend's data is a device address.  An op/dtype the backend does not
 * support is skipped with a message naming both.
 *
 * Shapes: odd sizes (m = 1, 3, 17; k = 33; n = 65), head_dim 64 and 32,
 * GQA ratios n_heads / n_kv_heads = 1, 4, 8, sequences of 77, 300 and
 * 2100 slots over kv_block_size 64 (partial last blocks; 2100 crosses the
 * chunked kernel's decode split).  Tensors are views with row padding and
 * column offsets, as forward.c makes them, and padding that an op must
 * not touch is checked unchanged.
 *
 * The KV layout (kvcache.h: block = [layer][K|V][kv_head][slot][head_dim],
 * int8/int4 scales, slot metadata; the fp32 residual of quantized caches)
 * is decoded here independently of kvcache.c, so a backend that stores
 * KV differently fails the KV-write round trip by name.
 *
 * Tolerances by op and dtype are in g_tol below, with the figures the CPU
 * backend measured; each run prints its worst errors per backend.
 */
#define K25_BACKEND_IMPL /* reads the CPU backend's KV storage (kvstore.h): struct k25_buf complete */
#include "testutil.h"

#include "backend.h"
#include "k25.h"
#include "kvcache.h"
#include "kvstore.h" /* the CPU backend's KV storage (engine/cpu/) */

#include <math.h>
#include <stdatomic.h>

/* ------------------------------------------------------------ tolerances */

/* What an error figure compares. */
enum metric {
    M_MAIN,   /* the op against the reference from the fp32 inputs */
    M_STORED, /* attention against the reference from the KV values as stored (dequantized) */
    M_N
};

/*
 * Bounds per (op, dtype, metric).  Error measures (err_norm etc. below):
 *  - gemm: componentwise |y - ref| / (sum_k |x w| + |y0|), the quantity
 *    float rounding is bounded by (k u, u = 2^-24; the order of the sum
 *    differs between BLAS kernel sets, hence OPENBLAS_CORETYPE runs);
 *  - rmsnorm, swiglu, attention, scores: normwise max|got - ref| / max|ref|;
 *  - rope: absolute (inputs in [-1, 1], cos/sin in [-1, 1]);
 *  - embed, rows_gather, kv_block_get/set: bit-exact (bound 0);
 *  - kv_write: absolute error of the stored value, and every element is
 *    also checked against its own bound (fp16: half an ulp; int8/int4:
 *    half the quantization step of its group, kvquant.h);
 *  - kv_compact: the kept slots exactly; absolute error of kept K/V rows
 *    against the fp32 inputs (fp32/fp16 exact: rows are moved, not
 *    converted; int8/int4 re-quantize the rewritten groups once).
 * Attention on fp16/int8/int4 against the fp32 inputs measures the
 * storage's error; against the stored values it measures the kernel's
 * arithmetic, which is fp32 for every KV dtype except int4 decode scores
 * (int8 queries times the 4-bit codes; bound explained at KV_SCORE int4).
 *
 * The `measured` column: the CPU backend's worst figure over the default
 * run and OPENBLAS_CORETYPE=Haswell and =Prescott on an AMD Zen 3 (AVX2,
 * no AVX-512: SkylakeX kernels not measured), and over two random data
 * sets (the random stream is shared, so data shift when cases change).
 * Statistical bounds are those figures times a safety factor of 3-50 (a
 * second backend draws different data from the shared stream); the kv_write / kv_compact
 * bounds are not statistical but the worst case for inputs in [-1, 1)
 * (fp16: 2^-12; int8: 2/255/2 plus the zero point's rounding; int4:
 * 2/15/2 plus it; compact: twice, as rewritten groups are re-quantized),
 * the per-element checks being the sharp ones.  gemm's 1e-5 is also
 * k u for k <= 128, the worst case of fp32 accumulation: a backend that
 * rounds inputs to TF32 or fp16 fails it, by design.
 */
struct tol {
    enum k25_op op;
    enum k25_dtype dtype;
    enum metric metric;
    double bound;
    const char *measured; /* CPU backend, worst of default/Haswell/Prescott */
};

static const struct tol g_tol[] = {
    {K25_OP_GEMM, K25_DTYPE_FP32, M_MAIN, 1e-5, "2.0e-7"},
    {K25_OP_GEMM, K25_DTYPE_FP16, M_MAIN, 1e-5, "2e-7"},
    {K25_OP_GEMM, K25_DTYPE_BF16, M_MAIN, 1e-5, "2e-7"},
    /* int8/int4 weights: against the dequantized values the layout defines (the quantization
     * error itself is tests/test_decode.c's), so the same bound as the dense formats */
    {K25_OP_GEMM, K25_DTYPE_INT8, M_MAIN, 1e-5, "2e-7"},
    {K25_OP_GEMM, K25_DTYPE_INT4, M_MAIN, 1e-5, "2e-7"},
    {K25_OP_RMSNORM, K25_DTYPE_FP32, M_MAIN, 1e-5, "1.0e-7"},
    {K25_OP_ROPE, K25_DTYPE_FP32, M_MAIN, 1e-5, "1.3e-7"},
    {K25_OP_SWIGLU, K25_DTYPE_FP32, M_MAIN, 1e-5, "9.5e-8"},
    {K25_OP_EMBED, K25_DTYPE_FP32, M_MAIN, 0, "0"},
    {K25_OP_EMBED, K25_DTYPE_FP16, M_MAIN, 0, "0"},
    {K25_OP_EMBED, K25_DTYPE_BF16, M_MAIN, 0, "0"},
    /* q * scale formed in float: one rounding of a value up to 3 */
    {K25_OP_EMBED, K25_DTYPE_INT8, M_MAIN, 1e-6, "0"},
    {K25_OP_EMBED, K25_DTYPE_INT4, M_MAIN, 1e-6, "0"},
    {K25_OP_ROWS, K25_DTYPE_FP32, M_MAIN, 0, "0"},
    {K25_OP_KV_WRITE, K25_DTYPE_FP32, M_MAIN, 0, "0"},
    {K25_OP_KV_WRITE, K25_DTYPE_FP16, M_MAIN, 2.5e-4, "2.44e-4"},
    {K25_OP_KV_WRITE, K25_DTYPE_INT8, M_MAIN, 4.5e-3, "3.91e-3"},
    {K25_OP_KV_WRITE, K25_DTYPE_INT4, M_MAIN, 7e-2, "6.66e-2"},
    {K25_OP_KV_TIER_COPY, K25_DTYPE_FP32, M_MAIN, 0, "0"},
    {K25_OP_KV_TIER_COPY, K25_DTYPE_FP16, M_MAIN, 0, "0"},
    {K25_OP_KV_TIER_COPY, K25_DTYPE_INT8, M_MAIN, 0, "0"},
    {K25_OP_KV_TIER_COPY, K25_DTYPE_INT4, M_MAIN, 0, "0"},
    {K25_OP_KV_SCORE, K25_DTYPE_FP32, M_MAIN, 1e-5, "9.9e-7"},
    {K25_OP_KV_SCORE, K25_DTYPE_FP16, M_MAIN, 1e-5, "8.0e-7"},
    {K25_OP_KV_SCORE, K25_DTYPE_INT8, M_MAIN, 1e-5, "8.4e-7"},
    /* int4 decode scores keys on their codes with q * scale rounded to int8 per row (engine/cpu/attention.c,
     * qk4_prepare): a logit moves by at most 7.5 hd alpha / 2, alpha = max|q scale| / 127 - for inputs
     * in [-1, 1) and the 1/sqrt(hd) query scale about 0.03 at head_dim 64, an output by about 0.06 at
     * worst; measured 3.1e-3 (attention) and 2.7e-3 (scores), bounded at 2e-2 */
    {K25_OP_KV_SCORE, K25_DTYPE_INT4, M_MAIN, 2e-2, "2.7e-3"},
    {K25_OP_KV_COMPACT, K25_DTYPE_FP32, M_MAIN, 0, "0"},
    {K25_OP_KV_COMPACT, K25_DTYPE_FP16, M_MAIN, 2.5e-4, "2.44e-4"},
    {K25_OP_KV_COMPACT, K25_DTYPE_INT8, M_MAIN, 1e-2, "3.9e-3"},
    {K25_OP_KV_COMPACT, K25_DTYPE_INT4, M_MAIN, 1.5e-1, "6.65e-2"},
    /* attention: vs the fp32 inputs, then vs the stored values; measured chunked / flash2 / naive */
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_FP32, M_MAIN, 1e-5, "1.35e-6"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_FP16, M_MAIN, 2e-3, "4.4e-4"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_INT8, M_MAIN, 2e-2, "6.2e-3"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_INT4, M_MAIN, 4e-1, "1.31e-1"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_FP32, M_STORED, 1e-5, "1.35e-6"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_FP16, M_STORED, 1e-5, "1.71e-6"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_INT8, M_STORED, 1e-5, "1.94e-6"},
    {K25_OP_ATTN_CHUNKED, K25_DTYPE_INT4, M_STORED, 2e-2, "3.1e-3"}, /* int8 queries: see KV_SCORE int4 */
    {K25_OP_ATTN_FLASH2, K25_DTYPE_FP32, M_MAIN, 1e-5, "4.8e-7"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_FP16, M_MAIN, 2e-3, "4.3e-4"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_INT8, M_MAIN, 2e-2, "6.9e-3"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_INT4, M_MAIN, 4e-1, "1.16e-1"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_FP32, M_STORED, 1e-5, "4.8e-7"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_FP16, M_STORED, 1e-5, "6.4e-7"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_INT8, M_STORED, 1e-5, "7.3e-7"},
    {K25_OP_ATTN_FLASH2, K25_DTYPE_INT4, M_STORED, 1e-5, "5.8e-7"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_FP32, M_MAIN, 1e-5, "8.4e-7"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_FP16, M_MAIN, 2e-3, "4.6e-4"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_INT8, M_MAIN, 2e-2, "5.9e-3"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_INT4, M_MAIN, 4e-1, "1.26e-1"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_FP32, M_STORED, 1e-5, "8.4e-7"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_FP16, M_STORED, 1e-5, "8.3e-7"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_INT8, M_STORED, 1e-5, "8.7e-7"},
    {K25_OP_ATTN_NAIVE, K25_DTYPE_INT4, M_STORED, 1e-5, "7.5e-7"},
};

static double tol_of(enum k25_op op, enum k25_dtype dt, enum metric m)
{
    for (size_t i = 0; i < sizeof(g_tol) / sizeof(g_tol[0]); i++)
        if (g_tol[i].op == op && g_tol[i].dtype == dt && g_tol[i].metric == m)
            return g_tol[i].bound;
    fail_msg("no tolerance for %s on %s", k25_op_name(op), k25_dtype_name(dt));
    return 0;
}

/* ------------------------------------------------------ per-backend state */

#define MAX_BACKENDS 8
#define MAX_SKIPS 64

struct be_state {
    const struct k25_backend *be;
    struct k25_bctx ctx;           /* valid between setup and teardown of one test */
    struct k25_mem_acct acct;      /* what this backend's buffers are charged to */
    double worst[K25_OP_N][K25_DTYPE_N][M_N]; /* < 0: not run */
    int checks[K25_OP_N][K25_DTYPE_N];
    char skips[MAX_SKIPS][160];
    int n_skips;
    bool done;    /* the current test ran to its end */
    bool aborted; /* some test of this backend stopped at a failed check */
    bool absent;  /* built in, but this machine cannot run it (no device): every check skips */
    char absent_why[1024];
};

static struct be_state g_be[MAX_BACKENDS];

/* One registered test: the backend's state and the check to run on it. */
struct slot {
    struct be_state *s;
    void (*fn)(void **state); /* gets a pointer to s */
};

static int be_setup(void **state)
{
    struct slot *sl = *state;
    struct be_state *s = sl->s;
    struct k25_error err;
    memset(&s->acct, 0, sizeof(s->acct));
    s->done = false;
    s->absent = false;
    if (k25_bctx_init(&s->ctx, s->be, &s->acct, &err) != K25_OK) {
        if (err.code == K25_EUNSUPPORTED && s->be != &k25_backend_cpu) { /* a device backend, no device */
            s->absent = true;
            s->ctx.be = NULL;
            snprintf(s->absent_why, sizeof(s->absent_why), "%s", err.msg);
            return 0;
        }
        print_error("backend %s: init failed: %s\n", s->be->name, err.msg);
        return -1;
    }
    return 0;
}

static void run_slot(void **state)
{
    struct slot *sl = *state;
    void *st = sl->s;
    if (sl->s->absent) {
        print_message("backend %s: skipped on this machine: %s\n", sl->s->be->name, sl->s->absent_why);
        sl->s->done = true;
        skip();
    }
    sl->fn(&st);
    sl->s->done = true;
}

/* Destroys the instance; a test that finished must have freed every buffer it allocated. */
static int be_teardown(void **state)
{
    struct slot *sl = *state;
    struct be_state *s = sl->s;
    if (!s->absent)
        k25_bctx_destroy(&s->ctx);
    s->aborted |= !s->done;
    int64_t left = atomic_load(&s->acct.total_cur);
    if (s->done && left != 0) { /* a failed check leaves its buffers: not reported twice */
        print_error("backend %s: %lld bytes still charged after the test\n", s->be->name, (long long)left);
        return -1;
    }
    return 0;
}

/* False (and a message, once per backend/op/dtype) when the backend does not run op on dt. */
static bool runs(struct be_state *s, enum k25_op op, enum k25_dtype dt)
{
    if (s->be->supports(&s->ctx, op, dt))
        return true;
    char line[160];
    snprintf(line, sizeof(line), "backend %s does not support op %s on dtype %s", s->be->name, k25_op_name(op),
             k25_dtype_name(dt));
    for (int i = 0; i < s->n_skips; i++)
        if (!strcmp(s->skips[i], line))
            return false;
    print_message("skipped: %s\n", line);
    if (s->n_skips < MAX_SKIPS)
        snprintf(s->skips[s->n_skips++], sizeof(s->skips[0]), "%s", line);
    return false;
}

/* Records one error figure and fails when it exceeds the bound (NaN fails). */
static void note(struct be_state *s, enum k25_op op, enum k25_dtype dt, enum metric m, double err,
                 const char *what)
{
    double tol = tol_of(op, dt, m);
    if (isnan(err))
        err = INFINITY;
    if (err > s->worst[op][dt][m])
        s->worst[op][dt][m] = err;
    s->checks[op][dt]++;
    if (err > tol)
        fail_msg("backend %s, %s on %s: %s: error %.3g exceeds the bound %.3g", s->be->name, k25_op_name(op),
                 k25_dtype_name(dt), what, err, tol);
}

/* ------------------------------------------------------------ helpers */

static uint32_t g_rng = 2026;
static float frand(void) /* [-1, 1) */
{
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / (float)(1 << 23) - 1.0f;
}

static void fill(float *x, size_t n, float amp)
{
    for (size_t i = 0; i < n; i++)
        x[i] = amp * frand();
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* A backend buffer holding bytes of src (zeroed when src is NULL). */
static struct k25_buf *upload(struct be_state *s, const void *src, size_t bytes)
{
    struct k25_buf *b = NULL;
    struct k25_error err;
    if (s->be->buf_alloc(&s->ctx, K25_MEM_OTHER, bytes, &b, &err) != K25_OK)
        fail_msg("backend %s: buf_alloc(%zu): %s", s->be->name, bytes, err.msg);
    if (src)
        s->be->buf_set(&s->ctx, b, 0, src, bytes);
    return b;
}

static void download(struct be_state *s, const struct k25_buf *b, void *dst, size_t bytes)
{
    s->be->buf_get(&s->ctx, b, 0, dst, bytes);
}

static void release(struct be_state *s, struct k25_buf *b)
{
    s->be->buf_free(&s->ctx, b);
}

/* A rows x cols view at (row0, col0) of a buffer of rows of `stride` elements. */
static struct k25_tensor view(struct k25_buf *b, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                              int64_t stride, enum k25_dtype dt)
{
    struct k25_tensor t = {b, 0, row0 + rows, stride, stride, dt};
    return k25_tensor_view(&t, row0, rows, col0, cols);
}

/* IEEE half to double, written here so the KV decoding does not lean on the engine's. */
static double half_d(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* float to bf16 bits, rounding to nearest even (finite inputs). */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static double bf16_d(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Normwise relative error max|got - ref| / max|ref| over n values. */
static double err_norm(const float *got, const double *ref, size_t n)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        e = d > e || isnan(d) ? d : e;
        r = fabs(ref[i]) > r ? fabs(ref[i]) : r;
    }
    return r > 0 ? e / r : e;
}

/* ----------------------------------------------------------------- GEMM */

/*
 * int8/int4 weights in the layout engine/backend.h defines, encoded here
 * (not with the engine's encoder): per row [cols/G fp32 scales][data];
 * int8 one signed byte per value; int4 blocks of 32 values in 16 bytes,
 * value l in the low nibble of byte l and value l+16 in its high nibble,
 * each as q + 8.  Returns the [rows][row_bytes] bytes; seen[] gets the
 * values they stand for (q * scale).
 */
static void *encode_quant(const float *w, int rows, int cols, int G, enum k25_dtype dt, size_t *row_bytes,
                          double *seen)
{
    const size_t data = dt == K25_DTYPE_INT8 ? (size_t)cols : (size_t)cols / 2;
    *row_bytes = 4 * (size_t)(cols / G) + data;
    unsigned char *out = xmalloc(*row_bytes * rows);
    memset(out, 0, *row_bytes * rows);
    const double qmax = dt == K25_DTYPE_INT8 ? 127 : 7;
    for (int r = 0; r < rows; r++) {
        unsigned char *row = out + (size_t)r * *row_bytes, *d = row + 4 * (size_t)(cols / G);
        for (int g = 0; g < cols / G; g++) {
            double amax = 0;
            for (int k = g * G; k < (g + 1) * G; k++)
                amax = fmax(amax, fabs(w[(size_t)r * cols + k]));
            float scale = (float)(amax / qmax);
            memcpy(row + 4 * (size_t)g, &scale, 4);
            for (int k = g * G; k < (g + 1) * G; k++) {
                int q = scale > 0 ? (int)lrint(w[(size_t)r * cols + k] / scale) : 0;
                q = q < -(int)qmax - 1 ? -(int)qmax - 1 : q > (int)qmax ? (int)qmax : q;
                seen[(size_t)r * cols + k] = (double)q * scale;
                if (dt == K25_DTYPE_INT8) {
                    d[k] = (unsigned char)(signed char)q;
                } else {
                    int blk = k / 32, l = k % 32;
                    unsigned char *b = d + 16 * (size_t)blk + (l % 16);
                    *b |= (unsigned char)((q + 8) << (l < 16 ? 0 : 4));
                }
            }
        }
    }
    return out;
}

/* y = x w^T (+ y0) with w an int8/int4 [n][k] matrix of groups of G, rows starting at row 2 of the buffer. */
static void qgemm_case(struct be_state *s, enum k25_dtype dt, int m, int k, int n, int G, bool acc, bool perturb)
{
    const int xs = k + 3, ys = n + 2, wrows = n + 2;
    float *x = xmalloc(sizeof(float) * m * xs), *w = xmalloc(sizeof(float) * wrows * k);
    float *y0 = xmalloc(sizeof(float) * m * ys), *y = xmalloc(sizeof(float) * m * ys);
    double *wd = xmalloc(sizeof(double) * wrows * k);
    fill(x, (size_t)m * xs, 1.0f);
    fill(w, (size_t)wrows * k, 1.0f);
    fill(y0, (size_t)m * ys, 1.0f);
    size_t rb;
    void *wbytes = encode_quant(w, wrows, k, G, dt, &rb, wd);
    struct k25_buf *bx = upload(s, x, sizeof(float) * m * xs), *bw = upload(s, wbytes, rb * wrows),
                   *by = upload(s, y0, sizeof(float) * m * ys);
    struct k25_tensor tx = view(bx, 0, m, 0, k, xs, K25_DTYPE_FP32), ty = view(by, 0, m, 0, n, ys, K25_DTYPE_FP32);
    struct k25_tensor tw = {bw, 2 * rb, n, k, (int64_t)rb, dt}; /* whole rows: no element views */
    s->be->gemm(&s->ctx, &tx, &tw, &ty, acc);
    download(s, by, y, sizeof(float) * m * ys);
    double e = 0, mag0 = 0, ref0 = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double r = acc ? y0[i * ys + j] : 0.0, mag = fabs(r);
            for (int t = 0; t < k; t++) {
                double p = (double)x[i * xs + t] * wd[(size_t)(2 + j) * k + t];
                r += p;
                mag += fabs(p);
            }
            if (i == 0 && j == 0)
                mag0 = mag, ref0 = r;
            double d = fabs(y[i * ys + j] - r) / mag;
            e = d > e || isnan(d) ? d : e;
        }
    char what[96];
    snprintf(what, sizeof(what), "m=%d k=%d n=%d group=%d accumulate=%d", m, k, n, G, acc);
    note(s, K25_OP_GEMM, dt, M_MAIN, e, what);
    if (perturb) {
        y[0] += (float)(100 * tol_of(K25_OP_GEMM, dt, M_MAIN) * mag0);
        if (!(fabs(y[0] - ref0) / mag0 > tol_of(K25_OP_GEMM, dt, M_MAIN)))
            fail_msg("a perturbed quantized gemm output passes the bound: the check cannot fail");
    }
    release(s, bx);
    release(s, bw);
    release(s, by);
    free(wbytes);
    free(x);
    free(w);
    free(y0);
    free(y);
    free(wd);
}

/* The quantized weight formats the backend claims, on odd m and n and two group sizes. */
static void quant_gemm_cases(struct be_state *s)
{
    const enum k25_dtype q[] = {K25_DTYPE_INT8, K25_DTYPE_INT4};
    const int shapes[][4] = {{1, 64, 65, 32}, {3, 64, 17, 64}, {17, 128, 33, 32}, {33, 96, 7, 32}};
    for (int i = 0; i < 2; i++) {
        if (!runs(s, K25_OP_GEMM, q[i]))
            continue;
        for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++)
            for (int acc = 0; acc < 2; acc++)
                qgemm_case(s, q[i], shapes[c][0], shapes[c][1], shapes[c][2], shapes[c][3], acc, c == 2 && acc);
    }
}



/* Weights in dt: bytes of the [rows][stride] matrix and the values the backend sees. */
static void *encode_weights(const float *w, size_t n, enum k25_dtype dt, double *seen)
{
    void *out = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        if (dt == K25_DTYPE_FP32) {
            ((float *)out)[i] = w[i];
            seen[i] = w[i];
        } else if (dt == K25_DTYPE_FP16) {
            ((uint16_t *)out)[i] = k25_fp32_to_fp16(w[i]);
            seen[i] = half_d(((uint16_t *)out)[i]);
        } else {
            ((uint16_t *)out)[i] = to_bf16(w[i]);
            seen[i] = bf16_d(((uint16_t *)out)[i]);
        }
    }
    return out;
}

/* Dense weight formats (int8/int4: quant_gemm_cases). */
static const enum k25_dtype g_wdtypes[] = {K25_DTYPE_FP32, K25_DTYPE_FP16, K25_DTYPE_BF16};
#define N_WDTYPES ((int)(sizeof(g_wdtypes) / sizeof(g_wdtypes[0])))

/* y = x w^T (+ y0) for x [m][k] (stride k+3), w rows [2, 2+n) of [n+4][k+1], y [m][n] in [m][n+2]. */
static void gemm_case(struct be_state *s, enum k25_dtype dt, int m, int k, int n, bool acc, bool perturb)
{
    const int xs = k + 3, ws = k + 1, ys = n + 2, wrows = n + 4;
    float *x = xmalloc(sizeof(float) * m * xs), *w = xmalloc(sizeof(float) * wrows * ws);
    float *y0 = xmalloc(sizeof(float) * m * ys), *y = xmalloc(sizeof(float) * m * ys);
    double *wd = xmalloc(sizeof(double) * wrows * ws), *ref = xmalloc(sizeof(double) * m * n);
    fill(x, (size_t)m * xs, 1.0f);
    fill(w, (size_t)wrows * ws, 1.0f);
    fill(y0, (size_t)m * ys, 1.0f);
    void *wbytes = encode_weights(w, (size_t)wrows * ws, dt, wd);
    const size_t eb = k25_dtype_bytes(dt);
    struct k25_buf *bx = upload(s, x, sizeof(float) * m * xs), *bw = upload(s, wbytes, eb * wrows * ws),
                   *by = upload(s, y0, sizeof(float) * m * ys);
    struct k25_tensor tx = view(bx, 0, m, 0, k, xs, K25_DTYPE_FP32), tw = view(bw, 2, n, 0, k, ws, dt),
                      ty = view(by, 0, m, 0, n, ys, K25_DTYPE_FP32);
    s->be->gemm(&s->ctx, &tx, &tw, &ty, acc);
    download(s, by, y, sizeof(float) * m * ys);
    double e = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double r = acc ? y0[i * ys + j] : 0.0, mag = fabs(r);
            for (int t = 0; t < k; t++) {
                double p = (double)x[i * xs + t] * wd[(2 + j) * ws + t];
                r += p;
                mag += fabs(p);
            }
            ref[i * n + j] = r;
            double d = fabs(y[i * ys + j] - r) / mag;
            e = d > e || isnan(d) ? d : e;
        }
    for (int i = 0; i < m; i++) /* the padding columns are not the op's */
        for (int j = n; j < ys; j++)
            if (y[i * ys + j] != y0[i * ys + j])
                fail_msg("backend %s: gemm wrote padding column %d of row %d", s->be->name, j, i);
    char what[96];
    snprintf(what, sizeof(what), "m=%d k=%d n=%d accumulate=%d", m, k, n, acc);
    note(s, K25_OP_GEMM, dt, M_MAIN, e, what);
    if (perturb) { /* the check can fail: one output off by 100 bounds' worth of its magnitude */
        double mag = 0;
        for (int t = 0; t < k; t++)
            mag += fabs((double)x[t] * wd[2 * ws + t]);
        mag += acc ? fabs(y0[0]) : 0;
        y[0] += (float)(100 * tol_of(K25_OP_GEMM, dt, M_MAIN) * mag);
        double ep = fabs(y[0] - ref[0]) / mag;
        if (!(ep > tol_of(K25_OP_GEMM, dt, M_MAIN)))
            fail_msg("a perturbed gemm output (error %.3g) passes the bound: the check cannot fail", ep);
    }
    release(s, bx);
    release(s, bw);
    release(s, by);
    free(wbytes);
    free(x);
    free(w);
    free(y0);
    free(y);
    free(wd);
    free(ref);
}

static void test_gemm(void **state)
{
    struct be_state *s = *state;
    const int shapes[][3] = {{1, 33, 65}, {3, 33, 65}, {17, 33, 65}, {17, 64, 1}, {5, 1, 7}, {33, 128, 65}};
    for (int d = 0; d < N_WDTYPES; d++) {
        if (!runs(s, K25_OP_GEMM, g_wdtypes[d]))
            continue;
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            for (int acc = 0; acc < 2; acc++)
                gemm_case(s, g_wdtypes[d], shapes[i][0], shapes[i][1], shapes[i][2], acc, i == 2 && acc);
    }
    quant_gemm_cases(s);
}

/* -------------------------------------------------- element-wise ops */

static void test_rmsnorm(void **state)
{
    struct be_state *s = *state;
    if (!runs(s, K25_OP_RMSNORM, K25_DTYPE_FP32))
        return;
    const int ms[] = {1, 3, 17}, ds[] = {33, 64};
    const float eps = 1e-5f;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) {
            const int m = ms[a], d = ds[b], xs = d + 5;
            float *x = xmalloc(sizeof(float) * m * xs), *w = xmalloc(sizeof(float) * d),
                  *y = xmalloc(sizeof(float) * m * d);
            double *ref = xmalloc(sizeof(double) * m * d);
            fill(x, (size_t)m * xs, 2.0f);
            fill(w, (size_t)d, 1.5f);
            x[0] = 0.0f; /* a zero among the inputs */
            struct k25_buf *bx = upload(s, x, sizeof(float) * m * xs), *bw = upload(s, w, sizeof(float) * d),
                           *by = upload(s, NULL, sizeof(float) * m * d);
            struct k25_tensor tx = view(bx, 0, m, 0, d, xs, K25_DTYPE_FP32),
                              tw = view(bw, 0, 1, 0, d, d, K25_DTYPE_FP32),
                              ty = view(by, 0, m, 0, d, d, K25_DTYPE_FP32);
            s->be->rmsnorm(&s->ctx, &tx, &tw, eps, &ty);
            download(s, by, y, sizeof(float) * m * d);
            for (int i = 0; i < m; i++) {
                double ss = 0;
                for (int j = 0; j < d; j++)
                    ss += (double)x[i * xs + j] * x[i * xs + j];
                double inv = 1.0 / sqrt(ss / d + eps);
                for (int j = 0; j < d; j++)
                    ref[i * d + j] = x[i * xs + j] * inv * w[j];
            }
            char what[64];
            snprintf(what, sizeof(what), "m=%d d=%d", m, d);
            note(s, K25_OP_RMSNORM, K25_DTYPE_FP32, M_MAIN, err_norm(y, ref, (size_t)m * d), what);
            release(s, bx);
            release(s, bw);
            release(s, by);
            free(x);
            free(w);
            free(y);
            free(ref);
        }
}

/* rope_cache, then rope on the Q and K parts of a QKV-like matrix; V must stay untouched. */
static void rope_case(struct be_state *s, int T, int nh, int nkv, int hd)
{
    const int half = hd / 2, qw = (nh + 2 * nkv) * hd;
    int32_t *pos = xmalloc(sizeof(int32_t) * T);
    double *inv = xmalloc(sizeof(double) * half);
    for (int i = 0; i < T; i++) /* small, ordinary and long-context positions */
        pos[i] = i < T / 2 ? i : i == T - 1 ? 262143 : 1000 + 7919 * i;
    for (int j = 0; j < half; j++)
        inv[j] = pow(500000.0, -2.0 * j / hd);
    float *x = xmalloc(sizeof(float) * T * qw), *y = xmalloc(sizeof(float) * T * qw),
          *cs = xmalloc(sizeof(float) * T * hd);
    fill(x, (size_t)T * qw, 1.0f);
    struct k25_buf *bx = upload(s, x, sizeof(float) * T * qw), *bc = upload(s, NULL, sizeof(float) * T * hd);
    struct k25_tensor tc = view(bc, 0, T, 0, hd, hd, K25_DTYPE_FP32),
                      tq = view(bx, 0, T, 0, nh * hd, qw, K25_DTYPE_FP32),
                      tk = view(bx, 0, T, nh * hd, nkv * hd, qw, K25_DTYPE_FP32);
    s->be->rope_cache(&s->ctx, pos, inv, &tc);
    s->be->rope(&s->ctx, &tq, nh, hd, &tc);
    s->be->rope(&s->ctx, &tk, nkv, hd, &tc);
    download(s, bc, cs, sizeof(float) * T * hd);
    download(s, bx, y, sizeof(float) * T * qw);
    double e = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < half; j++) {
            double a = (double)pos[i] * inv[j], c = cos(a), sn = sin(a);
            e = fmax(e, fmax(fabs(cs[i * hd + j] - c), fabs(cs[i * hd + half + j] - sn)));
            for (int h = 0; h < nh + nkv; h++) { /* rotate half: pairs (j, j + hd/2) */
                const float *xi = x + (size_t)i * qw + h * hd;
                const float *yi = y + (size_t)i * qw + h * hd;
                double r0 = xi[j] * c - xi[j + half] * sn, r1 = xi[j + half] * c + xi[j] * sn;
                e = fmax(e, fmax(fabs(yi[j] - r0), fabs(yi[j + half] - r1)));
            }
        }
    for (int i = 0; i < T; i++)
        for (int c = (nh + nkv) * hd; c < qw; c++)
            if (y[i * qw + c] != x[i * qw + c])
                fail_msg("backend %s: rope changed the V part (row %d, column %d)", s->be->name, i, c);
    char what[64];
    snprintf(what, sizeof(what), "T=%d n_heads=%d n_kv_heads=%d head_dim=%d", T, nh, nkv, hd);
    note(s, K25_OP_ROPE, K25_DTYPE_FP32, M_MAIN, e, what);
    release(s, bx);
    release(s, bc);
    free(pos);
    free(inv);
    free(x);
    free(y);
    free(cs);
}

static void test_rope(void **state)
{
    struct be_state *s = *state;
    if (!runs(s, K25_OP_ROPE, K25_DTYPE_FP32))
        return;
    rope_case(s, 1, 4, 4, 64);
    rope_case(s, 3, 8, 2, 32);
    rope_case(s, 17, 8, 1, 64);
    rope_case(s, 17, 3, 3, 32);
}

static void test_swiglu(void **state)
{
    struct be_state *s = *state;
    if (!runs(s, K25_OP_SWIGLU, K25_DTYPE_FP32))
        return;
    const int ms[] = {1, 3, 17}, ffns[] = {65, 32};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) {
            const int m = ms[a], ffn = ffns[b], gs = 2 * ffn + 3;
            float *gu = xmalloc(sizeof(float) * m * gs), *h = xmalloc(sizeof(float) * m * ffn);
            double *ref = xmalloc(sizeof(double) * m * ffn);
            fill(gu, (size_t)m * gs, 8.0f); /* gates in [-8, 8): both tails of silu */
            struct k25_buf *bg = upload(s, gu, sizeof(float) * m * gs), *bh = upload(s, NULL, sizeof(float) * m * ffn);
            struct k25_tensor tg = view(bg, 0, m, 0, 2 * ffn, gs, K25_DTYPE_FP32),
                              th = view(bh, 0, m, 0, ffn, ffn, K25_DTYPE_FP32);
            s->be->swiglu(&s->ctx, &tg, &th);
            download(s, bh, h, sizeof(float) * m * ffn);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < ffn; j++) {
                    double g = gu[i * gs + j], u = gu[i * gs + ffn + j];
                    ref[i * ffn + j] = g / (1.0 + exp(-g)) * u;
                }
            char what[64];
            snprintf(what, sizeof(what), "m=%d ffn=%d", m, ffn);
            note(s, K25_OP_SWIGLU, K25_DTYPE_FP32, M_MAIN, err_norm(h, ref, (size_t)m * ffn), what);
            release(s, bg);
            release(s, bh);
            free(gu);
            free(h);
            free(ref);
        }
}

/* out = table[ids] (embed) or src[rows] (rows_gather): exact copies. */
static void gather_case(struct be_state *s, enum k25_op op, enum k25_dtype dt, int n_src, int cols)
{
    const int ss = cols + 2, n = 11;
    const int32_t ids[11] = {0, n_src - 1, 3, 3, 7 % n_src, 1 % n_src, n_src / 2, 0, n_src - 1, 2 % n_src, 5 % n_src};
    float *src = xmalloc(sizeof(float) * n_src * ss), *out = xmalloc(sizeof(float) * n * cols);
    double *seen = xmalloc(sizeof(double) * n_src * ss), *ref = xmalloc(sizeof(double) * n * cols);
    fill(src, (size_t)n_src * ss, 3.0f);
    void *bytes = encode_weights(src, (size_t)n_src * ss, dt, seen);
    struct k25_buf *bs = upload(s, bytes, k25_dtype_bytes(dt) * n_src * ss),
                   *bo = upload(s, NULL, sizeof(float) * n * cols);
    struct k25_tensor ts = view(bs, 0, n_src, 0, cols, ss, dt), to = view(bo, 0, n, 0, cols, cols, K25_DTYPE_FP32);
    if (op == K25_OP_EMBED)
        s->be->embed(&s->ctx, &ts, ids, &to);
    else
        s->be->rows_gather(&s->ctx, &ts, ids, &to);
    download(s, bo, out, sizeof(float) * n * cols);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < cols; j++)
            ref[i * cols + j] = seen[(size_t)ids[i] * ss + j];
    double e = 0;
    for (int i = 0; i < n * cols; i++)
        e = fmax(e, out[i] == ref[i] ? 0.0 : fabs(out[i] - ref[i]) + 1e-30);
    char what[64];
    snprintf(what, sizeof(what), "%d rows of %d from %d", n, cols, n_src);
    note(s, op, dt, M_MAIN, e, what);
    release(s, bs);
    release(s, bo);
    free(bytes);
    free(src);
    free(out);
    free(seen);
    free(ref);
}

/* Embedding rows of an int8/int4 table (groups of G): the values the layout stands for. */
static void qembed_case(struct be_state *s, enum k25_dtype dt, int n_src, int cols, int G)
{
    const int n = 9;
    int32_t ids[9] = {0, 5, 36, 5, 17, 1, 30, 2, 36};
    float *src = xmalloc(sizeof(float) * n_src * cols), *out = xmalloc(sizeof(float) * n * cols);
    double *seen = xmalloc(sizeof(double) * n_src * cols);
    fill(src, (size_t)n_src * cols, 3.0f);
    size_t rb;
    void *bytes = encode_quant(src, n_src, cols, G, dt, &rb, seen);
    struct k25_buf *bs = upload(s, bytes, rb * n_src), *bo = upload(s, NULL, sizeof(float) * n * cols);
    struct k25_tensor ts = {bs, 0, n_src, cols, (int64_t)rb, dt}, to = view(bo, 0, n, 0, cols, cols, K25_DTYPE_FP32);
    s->be->embed(&s->ctx, &ts, ids, &to);
    download(s, bo, out, sizeof(float) * n * cols);
    double e = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < cols; j++)
            e = fmax(e, fabs(out[i * cols + j] - seen[(size_t)ids[i] * cols + j]));
    char what[64];
    snprintf(what, sizeof(what), "%d rows of %d from %d, group %d", n, cols, n_src, G);
    note(s, K25_OP_EMBED, dt, M_MAIN, e, what);
    release(s, bs);
    release(s, bo);
    free(bytes);
    free(src);
    free(out);
    free(seen);
}

static void test_embed_rows(void **state)
{
    struct be_state *s = *state;
    for (int d = 0; d < N_WDTYPES; d++)
        if (runs(s, K25_OP_EMBED, g_wdtypes[d])) {
            gather_case(s, K25_OP_EMBED, g_wdtypes[d], 37, 33);
            gather_case(s, K25_OP_EMBED, g_wdtypes[d], 300, 64);
        }
    const enum k25_dtype q[] = {K25_DTYPE_INT8, K25_DTYPE_INT4};
    for (int i = 0; i < 2; i++)
        if (runs(s, K25_OP_EMBED, q[i]))
            qembed_case(s, q[i], 37, 64, 32);
    if (runs(s, K25_OP_ROWS, K25_DTYPE_FP32)) {
        gather_case(s, K25_OP_ROWS, K25_DTYPE_FP32, 17, 65);
        gather_case(s, K25_OP_ROWS, K25_DTYPE_FP32, 8, 1);
    }
}

/* ------------------------------------------------------------- KV cache */

static const enum k25_dtype g_kvdtypes[] = {K25_DTYPE_FP32, K25_DTYPE_FP16, K25_DTYPE_INT8, K25_DTYPE_INT4};
#define N_KVDTYPES 4
#define KV_LAYERS 2
#define BLOCK 64

/* A pool of kv dtype dt for (nkv, hd) on the backend; compression metadata when ratio < 1. */
static void pool_make(struct be_state *s, struct k25_kv_pool *p, enum k25_dtype dt, int nh, int nkv, int hd,
                      double ratio)
{
    struct k25_model_shape sh = {0};
    snprintf(sh.name, sizeof(sh.name), "ops");
    sh.n_layers = KV_LAYERS;
    sh.n_heads = nh;
    sh.n_kv_heads = nkv;
    sh.head_dim = hd;
    sh.dim = nh * hd;
    struct k25_config c;
    k25_config_init(&c);
    c.kv_block_size = BLOCK;
    c.kv_cache_dtype = dt;
    c.kv_compression_ratio = ratio;
    c.attention = K25_ATTN_CHUNKED;
    struct k25_error err;
    if (k25_kv_pool_init(p, &sh, &c, 0, &s->ctx, &err) != K25_OK)
        fail_msg("k25_kv_pool_init: %s", err.msg);
    assert_true(p->compress == (ratio < 1.0));
}

/*
 * One sequence's KV inputs and what the backend stored: K, V as written
 * (fp32, [layer][n][nkv*hd]) and decoded from the backend's blocks
 * (double, [layer][g][slot][hd]).
 */
struct kvseq {
    struct k25_kv_seq seq;
    int n;
    float *K, *V;          /* [KV_LAYERS][n][nkv*hd] inputs */
    double *Ks, *Vs;       /* [KV_LAYERS][nkv][n_tokens][hd] as stored */
    struct k25_kv_slot *meta; /* [KV_LAYERS][nkv][n_tokens] when the pool keeps metadata */
};

/*
 * Writes the n tokens of ks through kv_write: a prefill chunk, then
 * decode-sized chunks of 1, each reserved first as forward.c does, from a
 * QKV-like buffer (K and V are column ranges of wider rows).
 */
static void kv_fill(struct be_state *s, struct k25_kv_pool *p, struct kvseq *ks, int nh)
{
    const int nkv = p->n_kv_heads, hd = p->head_dim, kw = nkv * hd, qw = (nh + 2 * nkv) * hd, n = ks->n;
    struct k25_error err;
    ks->K = xmalloc(sizeof(float) * KV_LAYERS * n * kw);
    ks->V = xmalloc(sizeof(float) * KV_LAYERS * n * kw);
    fill(ks->K, (size_t)KV_LAYERS * n * kw, 1.0f);
    fill(ks->V, (size_t)KV_LAYERS * n * kw, 1.0f);
    float *rows = xmalloc(sizeof(float) * n * qw);
    for (int t0 = 0; t0 < n;) {
        int c = t0 == 0 ? (n > 3 ? n - 3 : 1) : 1;
        if (k25_kv_seq_reserve(p, &ks->seq, c, &err) != K25_OK)
            fail_msg("k25_kv_seq_reserve: %s", err.msg);
        for (int l = 0; l < KV_LAYERS; l++) {
            fill(rows, (size_t)c * qw, 1.0f);
            for (int i = 0; i < c; i++) {
                memcpy(rows + (size_t)i * qw + nh * hd, ks->K + ((size_t)l * n + t0 + i) * kw, sizeof(float) * kw);
                memcpy(rows + (size_t)i * qw + nh * hd + kw, ks->V + ((size_t)l * n + t0 + i) * kw,
                       sizeof(float) * kw);
            }
            struct k25_buf *b = upload(s, rows, sizeof(float) * c * qw);
            struct k25_tensor tk = view(b, 0, c, nh * hd, kw, qw, K25_DTYPE_FP32),
                              tv = view(b, 0, c, nh * hd + kw, kw, qw, K25_DTYPE_FP32);
            s->be->kv_write(&s->ctx, p, &ks->seq, l, t0, &tk, &tv);
            release(s, b);
        }
        t0 += c;
    }
    free(rows);
}

/* One stored element (layer lay, K or V, head g, offset o in the block, channel d) as double. */
static double kv_elem(const struct k25_kv_pool *p, const unsigned char *lay, int kv, int g, int o, int d)
{
    const unsigned char *base = lay + (size_t)kv * p->half_bytes + (size_t)g * p->head_bytes + (size_t)o * p->row_bytes;
    if (p->dtype == K25_DTYPE_FP32) {
        float f;
        memcpy(&f, base + (size_t)d * 4, 4);
        return f;
    }
    if (p->dtype == K25_DTYPE_FP16) {
        uint16_t h;
        memcpy(&h, base + (size_t)d * 2, 2);
        return half_d(h);
    }
    int q = p->bits == 8 ? base[d] : (base[d / 2] >> ((d & 1) * 4)) & 15;
    uint16_t sc, ze;
    const int hd = p->head_dim;
    if (kv == 0) { /* keys: [group][scale|zero][head_dim] per channel */
        const unsigned char *sz = lay + p->ks_off + (size_t)g * p->ks_head_bytes + (size_t)(o / p->group) * 2 * hd * 2;
        memcpy(&sc, sz + (size_t)d * 2, 2);
        memcpy(&ze, sz + (size_t)(hd + d) * 2, 2);
    } else { /* values: [slot][head_dim/vgroup][scale|zero] per token */
        const int nvg = hd / p->vgroup;
        const unsigned char *sz =
            lay + p->vs_off + (size_t)g * p->vs_head_bytes + ((size_t)o * nvg + d / p->vgroup) * 4;
        memcpy(&sc, sz, 2);
        memcpy(&ze, sz + 2, 2);
    }
    return q * half_d(sc) + half_d(ze);
}

/* Decodes what the backend holds for ks (blocks via kv_block_get, residual via buf_get) into Ks, Vs, meta. */
static void kv_decode(struct be_state *s, const struct k25_kv_pool *p, struct kvseq *ks)
{
    const struct k25_kv_seq *q = &ks->seq;
    const int nkv = p->n_kv_heads, hd = p->head_dim, n = q->n_tokens, bs = p->block_size;
    free(ks->Ks);
    free(ks->Vs);
    free(ks->meta);
    ks->Ks = xmalloc(sizeof(double) * KV_LAYERS * nkv * n * hd);
    ks->Vs = xmalloc(sizeof(double) * KV_LAYERS * nkv * n * hd);
    ks->meta = p->compress ? xmalloc(sizeof(struct k25_kv_slot) * KV_LAYERS * nkv * n) : NULL;
    unsigned char *blk = xmalloc(p->block_bytes);
    uint16_t *res = NULL;
    float *st = NULL;
    size_t res_halves = (size_t)KV_LAYERS * 2 * nkv * p->res_cap * hd;
    if (p->quant) {
        res = xmalloc(sizeof(uint16_t) * res_halves);
        download(s, q->res, res, sizeof(uint16_t) * res_halves);
    }
    /* compression statistics: [slot - comp_hi]([layer][kv_head] score, seen) for slots comp_hi.. */
    const int n_st = p->compress && q->stats ? n - q->comp_hi : 0;
    const size_t per = (size_t)KV_LAYERS * nkv + 1;
    if (n_st > 0) {
        st = xmalloc(sizeof(float) * per * n_st);
        download(s, q->stats, st, sizeof(float) * per * n_st);
    }
    for (int b = 0; b < q->n_blocks; b++) {
        s->be->kv_block_get(&s->ctx, p, q->ids[b], blk);
        for (int l = 0; l < KV_LAYERS; l++) {
            const unsigned char *lay = blk + (size_t)l * p->layer_bytes;
            for (int g = 0; g < nkv; g++)
                for (int o = 0; o < bs && b * bs + o < n; o++) {
                    const int slot = b * bs + o;
                    size_t at = (((size_t)l * nkv + g) * n + slot) * hd;
                    for (int kv = 0; kv < 2; kv++) {
                        double *dst = (kv ? ks->Vs : ks->Ks) + at;
                        if (p->quant && slot >= q->n_quant[l]) { /* fp16 residual [l][K|V][g][res_cap][hd] */
                            const uint16_t *r = res + ((((size_t)l * 2 + kv) * nkv + g) * p->res_cap +
                                                       (slot - q->n_quant[l])) * hd;
                            for (int d = 0; d < hd; d++)
                                dst[d] = k25_fp16_to_fp32(r[d]);
                        } else {
                            for (int d = 0; d < hd; d++)
                                dst[d] = kv_elem(p, lay, kv, g, o, d);
                        }
                    }
                    if (p->compress) { /* count: one byte in the block; score, seen: the statistics */
                        struct k25_kv_slot *m = &ks->meta[((size_t)l * nkv + g) * n + slot];
                        m->count = lay[p->meta_off + (size_t)g * p->meta_head_bytes + (size_t)o];
                        m->logc = m->count == 1.0f ? 0.0f : logf(m->count);
                        m->score = m->seen = 0.0f; /* none kept below comp_hi */
                        if (slot >= q->comp_hi && slot - q->comp_hi < n_st) {
                            const float *x = st + (size_t)(slot - q->comp_hi) * per;
                            m->score = x[(size_t)l * nkv + g];
                            m->seen = x[per - 1];
                        }
                    }
                }
        }
    }
    free(blk);
    free(res);
    free(st);
}

static void kvseq_free(struct be_state *s, struct k25_kv_pool *p, struct kvseq *ks)
{
    (void)s;
    k25_kv_seq_release(p, &ks->seq, NULL, NULL);
    free(ks->K);
    free(ks->V);
    free(ks->Ks);
    free(ks->Vs);
    free(ks->meta);
    memset(ks, 0, sizeof(*ks));
}

/*
 * The bound on |stored - x| of one element (slot, channel d of head g,
 * layer l, K or V) given the inputs: exact for fp32, half an ulp for
 * fp16, half a quantization step (plus the zero point's half rounding,
 * kvquant.h, and the fp16 rounding the value went through in the
 * residual) for int8/int4 slots below n_quant; half an fp16 ulp in the
 * residual (fp16).
 */
static double kv_bound(const struct k25_kv_pool *p, const struct kvseq *ks, int l, int kv, int g, int slot, int d)
{
    const int hd = p->head_dim, kw = p->n_kv_heads * hd;
    const float *X = (kv ? ks->V : ks->K) + (size_t)l * ks->n * kw + (size_t)g * hd;
    double x = X[(size_t)slot * kw + d];
    if (p->dtype == K25_DTYPE_FP32)
        return 0;
    const double h = fmax(fabs(x) * ldexp(1, -11), ldexp(1, -25)) * 1.0001; /* half an fp16 ulp */
    if (p->dtype == K25_DTYPE_FP16 || slot >= ks->seq.n_quant[l])
        return h;
    double mn = INFINITY, mx = -INFINITY;
    if (kv == 0) { /* a channel over the key group */
        int t0 = slot / p->group * p->group;
        for (int t = t0; t < t0 + p->group; t++) {
            mn = fmin(mn, X[(size_t)t * kw + d]);
            mx = fmax(mx, X[(size_t)t * kw + d]);
        }
    } else { /* a token over the value group */
        int c0 = d / p->vgroup * p->vgroup;
        for (int c = c0; c < c0 + p->vgroup; c++) {
            mn = fmin(mn, X[(size_t)slot * kw + c]);
            mx = fmax(mx, X[(size_t)slot * kw + c]);
        }
    }
    const int qmax = (1 << p->bits) - 1;
    return 0.5 * ((mx - mn) + fabs(mn) * 2e-3) / qmax * 1.002 + 1e-6 + 2 * h;
}

/* Checks what was stored for ks against its inputs, element by element; returns the worst abs error. */
static double kv_check_stored(struct be_state *s, const struct k25_kv_pool *p, const struct kvseq *ks)
{
    const int nkv = p->n_kv_heads, hd = p->head_dim, n = ks->n, kw = nkv * hd;
    double worst = 0;
    for (int l = 0; l < KV_LAYERS; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int g = 0; g < nkv; g++)
                for (int t = 0; t < n; t++)
                    for (int d = 0; d < hd; d++) {
                        double x = (kv ? ks->V : ks->K)[((size_t)l * n + t) * kw + g * hd + d];
                        double got = (kv ? ks->Vs : ks->Ks)[(((size_t)l * nkv + g) * n + t) * hd + d];
                        double e = fabs(got - x), b = kv_bound(p, ks, l, kv, g, t, d);
                        if (!(e <= b))
                            fail_msg("backend %s, kv_write on %s: layer %d %s head %d slot %d channel %d: "
                                     "stored %.9g for %.9g (error %.3g, bound %.3g)",
                                     s->be->name, k25_dtype_name(p->dtype), l, kv ? "V" : "K", g, t, d, got, x, e, b);
                        worst = fmax(worst, e);
                    }
    return worst;
}

/* kv_block_get / kv_block_set: a block written from host memory reads back byte for byte. */
static void tier_copy_check(struct be_state *s, struct k25_kv_pool *p, struct kvseq *ks)
{
    const struct k25_kv_seq *q = &ks->seq;
    assert_true(q->n_blocks >= 2);
    const int32_t a = q->ids[0], b = q->ids[q->n_blocks - 1];
    unsigned char *A = xmalloc(p->block_bytes), *B = xmalloc(p->block_bytes), *C = xmalloc(p->block_bytes);
    s->be->kv_block_get(&s->ctx, p, a, A);
    s->be->kv_block_get(&s->ctx, p, b, B);
    s->be->kv_block_set(&s->ctx, p, a, B); /* block a now holds b's bytes */
    s->be->kv_block_get(&s->ctx, p, a, C);
    double e = memcmp(B, C, p->block_bytes) ? 1.0 : 0.0;
    s->be->kv_block_set(&s->ctx, p, a, A); /* and back */
    s->be->kv_block_get(&s->ctx, p, a, C);
    e += memcmp(A, C, p->block_bytes) ? 1.0 : 0.0;
    s->be->kv_block_get(&s->ctx, p, b, C); /* b untouched */
    e += memcmp(B, C, p->block_bytes) ? 1.0 : 0.0;
    note(s, K25_OP_KV_TIER_COPY, p->dtype, M_MAIN, e, "block set then get (1 per mismatching block)");
    free(A);
    free(B);
    free(C);
}

static void test_kv_write_tier_copy(void **state)
{
    struct be_state *s = *state;
    const int cases[][3] = {{8, 2, 64}, {8, 1, 32}, {3, 3, 32}}; /* n_heads, n_kv_heads, head_dim */
    const int lens[] = {77, 300};
    for (int di = 0; di < N_KVDTYPES; di++) {
        const enum k25_dtype dt = g_kvdtypes[di];
        if (!runs(s, K25_OP_KV_WRITE, dt))
            continue;
        bool tier = runs(s, K25_OP_KV_TIER_COPY, dt);
        for (int c = 0; c < 3; c++) {
            struct k25_kv_pool p;
            pool_make(s, &p, dt, cases[c][0], cases[c][1], cases[c][2], 1.0);
            struct kvseq ks[2];
            memset(ks, 0, sizeof(ks));
            for (int i = 0; i < 2; i++) { /* two sequences interleave in one pool */
                ks[i].n = lens[i];
                kv_fill(s, &p, &ks[i], cases[c][0]);
            }
            for (int i = 0; i < 2; i++) {
                kv_decode(s, &p, &ks[i]);
                char what[96];
                snprintf(what, sizeof(what), "%d tokens, n_kv_heads=%d head_dim=%d", ks[i].n, cases[c][1],
                         cases[c][2]);
                note(s, K25_OP_KV_WRITE, dt, M_MAIN, kv_check_stored(s, &p, &ks[i]), what);
            }
            if (tier)
                tier_copy_check(s, &p, &ks[1]);
            for (int i = 0; i < 2; i++)
                kvseq_free(s, &p, &ks[i]);
            k25_kv_pool_free(&p);
        }
    }
}

/* ------------------------------------------------------------ attention */

/*
 * softmax(q K^T scale + causal mask) V in double for one sequence's n_q
 * queries at slots q_slot0..: q [n_q][q_stride] (head h at h*hd), K, V
 * [nkv][n_tok][hd] (one layer) -> out [n_q][nh*hd]; psum (optional,
 * [nkv][q_slot0+n_q]) receives the probabilities summed over the queries
 * and the group's query heads.
 */
static void ref_attention(const float *q, int q_stride, int n_q, int q_slot0, const double *K, const double *V,
                          int n_tok, int nh, int nkv, int hd, double scale, double *out, double *psum)
{
    const int group = nh / nkv, vis_all = q_slot0 + n_q;
    double *sc = xmalloc(sizeof(double) * n_tok);
    if (psum)
        memset(psum, 0, sizeof(double) * nkv * vis_all);
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < nh; h++) {
            const int g = h / group, vis = q_slot0 + i + 1;
            const float *qi = q + (size_t)i * q_stride + h * hd;
            const double *Kg = K + (size_t)g * n_tok * hd, *Vg = V + (size_t)g * n_tok * hd;
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t < vis; t++) {
                double d = 0;
                for (int c = 0; c < hd; c++)
                    d += qi[c] * Kg[(size_t)t * hd + c];
                sc[t] = d * scale;
                mx = fmax(mx, sc[t]);
            }
            for (int t = 0; t < vis; t++)
                sum += (sc[t] = exp(sc[t] - mx));
            double *o = out + (size_t)i * nh * hd + h * hd;
            for (int c = 0; c < hd; c++)
                o[c] = 0;
            for (int t = 0; t < vis; t++) {
                double pr = sc[t] / sum;
                for (int c = 0; c < hd; c++)
                    o[c] += pr * Vg[(size_t)t * hd + c];
                if (psum)
                    psum[(size_t)g * vis_all + t] += pr;
            }
        }
    free(sc);
}

/* [KV_LAYERS][nkv][n][hd] doubles of the fp32 inputs [KV_LAYERS][n][nkv*hd]. */
static double *kv_inputs_d(const float *X, int n, int nkv, int hd)
{
    double *D = xmalloc(sizeof(double) * KV_LAYERS * nkv * n * hd);
    for (int l = 0; l < KV_LAYERS; l++)
        for (int g = 0; g < nkv; g++)
            for (int t = 0; t < n; t++)
                for (int d = 0; d < hd; d++)
                    D[(((size_t)l * nkv + g) * n + t) * hd + d] = X[((size_t)l * n + t) * nkv * hd + g * hd + d];
    return D;
}

/* One query span of a call: sequence index, queries, first query slot. */
struct span {
    int seq, n_q, q_slot0;
};

/*
 * Runs one attention call over spans of the sequences ks (layer 1, so a
 * layer-offset bug reads layer 0's data) and checks every output row
 * against the reference over the stored values and over the inputs.
 * With want_scores, the call also fills a score row, returned in
 * *scores_out (host, [sum over spans of nkv*(q_slot0+n_q)]) with the
 * reference probability sums in *ref_scores (caller frees both).
 */
static void attn_call_check(struct be_state *s, enum k25_op op, enum k25_attn_impl impl,
                            const struct k25_kv_pool *p, struct kvseq *ks, const struct span *sp, int n_sp, int nh,
                            bool perturb, float **scores_out, double **ref_scores)
{
    const int nkv = p->n_kv_heads, hd = p->head_dim, qw = (nh + 2 * nkv) * hd, aw = nh * hd, layer = 1;
    const float scale = 1.0f / sqrtf((float)hd);
    int T = 0;
    size_t n_sc = 0;
    struct k25_attn_seq aseq[4];
    assert_true(n_sp <= 4);
    for (int i = 0; i < n_sp; i++) {
        aseq[i] = (struct k25_attn_seq){&ks[sp[i].seq].seq, T, sp[i].n_q, sp[i].q_slot0, n_sc};
        T += sp[i].n_q;
        n_sc += (size_t)nkv * (sp[i].q_slot0 + sp[i].n_q);
    }
    float *q = xmalloc(sizeof(float) * T * qw), *out = xmalloc(sizeof(float) * T * aw);
    fill(q, (size_t)T * qw, 3.0f); /* peaked enough that the softmax is not flat */
    struct k25_buf *bq = upload(s, q, sizeof(float) * T * qw), *bo = upload(s, NULL, sizeof(float) * T * aw);
    struct k25_buf *bs = scores_out ? upload(s, NULL, sizeof(float) * n_sc) : NULL;
    struct k25_tensor tq = view(bq, 0, T, 0, qw, qw, K25_DTYPE_FP32),
                      to = view(bo, 0, T, 0, aw, aw, K25_DTYPE_FP32),
                      tsc = bs ? view(bs, 0, 1, 0, (int64_t)n_sc, (int64_t)n_sc, K25_DTYPE_FP32)
                               : (struct k25_tensor){0};
    if (bs) { /* the caller zeroes the scores: garbage first, then buf_clear */
        float *junk = xmalloc(sizeof(float) * n_sc);
        fill(junk, n_sc, 5.0f);
        s->be->buf_set(&s->ctx, bs, 0, junk, sizeof(float) * n_sc);
        s->be->buf_clear(&s->ctx, bs, 0, sizeof(float) * n_sc);
        free(junk);
    }
    const struct k25_attn_call call = {impl, p, layer, nh, scale, aseq, n_sp, &tq, &to, bs ? &tsc : NULL};
    s->be->attention(&s->ctx, &call);
    download(s, bo, out, sizeof(float) * T * aw);
    if (bs) {
        *scores_out = xmalloc(sizeof(float) * n_sc);
        *ref_scores = xmalloc(sizeof(double) * n_sc);
        download(s, bs, *scores_out, sizeof(float) * n_sc);
    }
    for (int i = 0; i < n_sp; i++) {
        struct kvseq *k = &ks[sp[i].seq];
        const int n = k->seq.n_tokens;
        const size_t lay = (size_t)layer * nkv * n * hd;
        double *ref = xmalloc(sizeof(double) * sp[i].n_q * aw), *ref_in = xmalloc(sizeof(double) * sp[i].n_q * aw);
        const float *qi = q + (size_t)aseq[i].row0 * qw, *oi = out + (size_t)aseq[i].row0 * aw;
        ref_attention(qi, qw, sp[i].n_q, sp[i].q_slot0, k->Ks + lay, k->Vs + lay, n, nh, nkv, hd, scale, ref,
                      bs ? *ref_scores + aseq[i].score_off : NULL);
        double *Kin = kv_inputs_d(k->K, k->n, nkv, hd), *Vin = kv_inputs_d(k->V, k->n, nkv, hd);
        ref_attention(qi, qw, sp[i].n_q, sp[i].q_slot0, Kin + lay, Vin + lay, n, nh, nkv, hd, scale, ref_in, NULL);
        char what[160];
        snprintf(what, sizeof(what), "%d queries from slot %d of %d, n_heads=%d n_kv_heads=%d head_dim=%d",
                 sp[i].n_q, sp[i].q_slot0, n, nh, nkv, hd);
        const size_t cnt = (size_t)sp[i].n_q * aw;
        note(s, op, p->dtype, M_STORED, err_norm(oi, ref, cnt), what);
        note(s, op, p->dtype, M_MAIN, err_norm(oi, ref_in, cnt), what);
        if (perturb && i == 0) { /* the check can fail: one output moved by twice the bound */
            float *bad = xmalloc(sizeof(float) * cnt);
            memcpy(bad, oi, sizeof(float) * cnt);
            double r = 0;
            for (size_t j = 0; j < cnt; j++)
                r = fmax(r, fabs(ref[j]));
            bad[cnt / 2] += (float)(2 * tol_of(op, p->dtype, M_STORED) * r);
            if (!(err_norm(bad, ref, cnt) > tol_of(op, p->dtype, M_STORED)))
                fail_msg("a perturbed attention output passes the bound: the check cannot fail");
            free(bad);
        }
        free(Kin);
        free(Vin);
        free(ref);
        free(ref_in);
    }
    release(s, bq);
    release(s, bo);
    if (bs)
        release(s, bs);
    free(q);
    free(out);
}

/* GQA 1, 4, 8 with head_dim 32 and 64: n_heads, n_kv_heads, head_dim. */
static const int g_attn_shapes[][3] = {{3, 3, 32}, {8, 2, 64}, {8, 1, 32}};
#define N_ATTN_SHAPES 3

static void attn_impl_case(struct be_state *s, enum k25_attn_impl impl, enum k25_dtype dt, const int *shape,
                           bool perturb)
{
    const enum k25_op op = k25_op_attention(impl);
    const int nh = shape[0], nkv = shape[1], hd = shape[2];
    struct k25_kv_pool p;
    pool_make(s, &p, dt, nh, nkv, hd, 1.0);
    struct kvseq ks[3];
    memset(ks, 0, sizeof(ks));
    const int lens[3] = {300, 77, 2100};
    for (int i = 0; i < 3; i++) {
        ks[i].n = lens[i];
        kv_fill(s, &p, &ks[i], nh);
        kv_decode(s, &p, &ks[i]);
    }
    /* prefill: a later chunk of one sequence beside a whole prompt of another */
    const struct span pre[2] = {{0, 45, 255}, {1, 77, 0}};
    attn_call_check(s, op, impl, &p, ks, pre, 2, nh, perturb, NULL, NULL);
    /* decode: one query per sequence, three on the longest (a multi-query decode); 2100 slots
     * take the chunked kernel's split-KV path */
    const struct span dec[3] = {{0, 1, 299}, {1, 1, 76}, {2, 3, 2097}};
    attn_call_check(s, op, impl, &p, ks, dec, 3, nh, false, NULL, NULL);
    for (int i = 0; i < 3; i++)
        kvseq_free(s, &p, &ks[i]);
    k25_kv_pool_free(&p);
}

static void test_attention(void **state)
{
    struct be_state *s = *state;
    for (int impl = 0; impl < K25_ATTN_NIMPL; impl++)
        for (int di = 0; di < N_KVDTYPES; di++) {
            const enum k25_dtype dt = g_kvdtypes[di];
            if (!runs(s, k25_op_attention((enum k25_attn_impl)impl), dt))
                continue;
            if (!runs(s, K25_OP_KV_WRITE, dt) || !runs(s, K25_OP_KV_TIER_COPY, dt))
                continue; /* needed to set up and read the cache (messages printed) */
            for (int c = 0; c < N_ATTN_SHAPES; c++)
                attn_impl_case(s, (enum k25_attn_impl)impl, dt, g_attn_shapes[c], impl == 0 && di == 0 && c == 0);
        }
}

/* ------------------------------------------------------- KV compression */

/*
 * kv_add_scores after the chunked attention's score output: the slot
 * metadata's score must equal the reference softmax probabilities summed
 * over the queries and the group's query heads (two calls: a prefill,
 * then a decode step, accumulating), seen the (query, head) pairs that
 * could see the slot, count 1 and logc 0 for unmerged slots.  The calls
 * are layer 0's (the one that counts seen, shared by every layer); layer
 * 1's scores must stay 0.
 */
static void score_case(struct be_state *s, enum k25_dtype dt, const int *shape)
{
    const int nh = shape[0], nkv = shape[1], hd = shape[2], group = nh / nkv;
    struct k25_kv_pool p;
    pool_make(s, &p, dt, nh, nkv, hd, 0.5);
    struct kvseq ks[2];
    memset(ks, 0, sizeof(ks));
    const int lens[2] = {300, 77};
    for (int i = 0; i < 2; i++) {
        ks[i].n = lens[i];
        kv_fill(s, &p, &ks[i], nh);
        kv_decode(s, &p, &ks[i]);
    }
    double *acc_ref[2], *seen_ref[2];
    for (int i = 0; i < 2; i++) {
        acc_ref[i] = calloc((size_t)nkv * lens[i], sizeof(double));
        seen_ref[i] = calloc((size_t)nkv * lens[i], sizeof(double));
        assert_true(acc_ref[i] && seen_ref[i]);
    }
    const struct span calls[2][2] = {{{0, 45, 254}, {1, 76, 0}}, {{0, 1, 299}, {1, 1, 76}}};
    for (int c = 0; c < 2; c++) {
        float *got = NULL;
        double *ref = NULL;
        attn_call_check(s, K25_OP_ATTN_CHUNKED, K25_ATTN_CHUNKED, &p, ks, calls[c], 2, nh, false, &got, &ref);
        struct k25_buf *bsc = NULL;
        size_t off = 0, tot = 0;
        for (int i = 0; i < 2; i++)
            tot += (size_t)nkv * (calls[c][i].q_slot0 + calls[c][i].n_q);
        bsc = upload(s, got, sizeof(float) * tot);
        /* the attention's score row itself */
        note(s, K25_OP_KV_SCORE, dt, M_MAIN, err_norm(got, ref, tot), "attention score output vs reference");
        for (int i = 0; i < 2; i++) {
            const struct span *sp = &calls[c][i];
            const int vis = sp->q_slot0 + sp->n_q;
            struct k25_tensor t = view(bsc, 0, 1, (int64_t)off, (int64_t)nkv * vis, (int64_t)tot, K25_DTYPE_FP32);
            s->be->kv_add_scores(&s->ctx, &p, &ks[sp->seq].seq, 0, &t, sp->q_slot0, sp->n_q, group);
            for (int g = 0; g < nkv; g++)
                for (int sl = 0; sl < vis; sl++) {
                    acc_ref[sp->seq][(size_t)g * lens[sp->seq] + sl] += ref[off + (size_t)g * vis + sl];
                    int sees = sl <= sp->q_slot0 ? sp->n_q : sp->n_q - (sl - sp->q_slot0);
                    seen_ref[sp->seq][(size_t)g * lens[sp->seq] + sl] += (double)sees * group;
                }
            off += (size_t)nkv * vis;
        }
        release(s, bsc);
        free(got);
        free(ref);
    }
    for (int i = 0; i < 2; i++) {
        kv_decode(s, &p, &ks[i]);
        const int n = lens[i];
        float *sc = xmalloc(sizeof(float) * nkv * n);
        for (int g = 0; g < nkv; g++)
            for (int sl = 0; sl < n; sl++) {
                const struct k25_kv_slot *m = &ks[i].meta[(size_t)g * n + sl];
                const struct k25_kv_slot *m1 = &ks[i].meta[((size_t)1 * nkv + g) * n + sl];
                sc[(size_t)g * n + sl] = m->score;
                if (m->seen != (float)seen_ref[i][(size_t)g * n + sl] || m->count != 1.0f || m->logc != 0.0f)
                    fail_msg("backend %s, kv_add_scores on %s: slot %d head %d: seen %g count %g logc %g, "
                             "expected %g, 1, 0",
                             s->be->name, k25_dtype_name(dt), sl, g, m->seen, m->count, m->logc,
                             seen_ref[i][(size_t)g * n + sl]);
                if (m1->score != 0.0f || m1->seen != m->seen) /* layer 1 got no scores; seen is shared */
                    fail_msg("backend %s, kv_add_scores on %s: layer 1 slot %d: score %g seen %g (expected 0, %g)",
                             s->be->name, k25_dtype_name(dt), sl, m1->score, m1->seen, m->seen);
            }
        char what[96];
        snprintf(what, sizeof(what), "slot scores after a prefill and a decode step, %d slots, group %d", n, group);
        note(s, K25_OP_KV_SCORE, dt, M_MAIN, err_norm(sc, acc_ref[i], (size_t)nkv * n), what);
        free(sc);
        free(acc_ref[i]);
        free(seen_ref[i]);
    }
    for (int i = 0; i < 2; i++)
        kvseq_free(s, &p, &ks[i]);
    k25_kv_pool_free(&p);
}

static void test_kv_scores(void **state)
{
    struct be_state *s = *state;
    for (int di = 0; di < N_KVDTYPES; di++) {
        const enum k25_dtype dt = g_kvdtypes[di];
        if (!runs(s, K25_OP_KV_SCORE, dt) || !runs(s, K25_OP_ATTN_CHUNKED, dt) || !runs(s, K25_OP_KV_WRITE, dt) ||
            !runs(s, K25_OP_KV_TIER_COPY, dt))
            continue;
        for (int c = 0; c < N_ATTN_SHAPES; c++)
            score_case(s, dt, g_attn_shapes[c]);
    }
}

/*
 * kv_compact with a merge threshold above 1 (no cosine exceeds it), so it
 * only prunes: with distinct scores set through kv_add_scores, each
 * (layer, KV head) must keep exactly its highest-scored slots of the
 * region [sink, n - recent) plus everything outside it, in slot order,
 * with their keys, values and metadata.
 */
static void compact_case(struct be_state *s, enum k25_dtype dt, const int *shape, int n)
{
    const int nh = shape[0], nkv = shape[1], hd = shape[2], group = nh / nkv, kw = nkv * hd;
    const struct k25_kv_compress_opts o = {0.5, 2.0, 8, 16, 0};
    struct k25_kv_pool p;
    pool_make(s, &p, dt, nh, nkv, hd, o.ratio);
    struct kvseq ks;
    memset(&ks, 0, sizeof(ks));
    ks.n = n;
    kv_fill(s, &p, &ks, nh);
    /* scores: a distinct value per slot, a different order per (layer, KV head), one decode-like call */
    float *score = xmalloc(sizeof(float) * KV_LAYERS * nkv * n);
    for (int i = 0; i < KV_LAYERS * nkv; i++) {
        float *sc = score + (size_t)i * n;
        for (int t = 0; t < n; t++)
            sc[t] = (float)(t + 1);
        for (int t = n - 1; t > 0; t--) { /* shuffle */
            g_rng = g_rng * 1664525u + 1013904223u;
            int u = (int)((g_rng >> 8) % (uint32_t)(t + 1));
            float x = sc[t];
            sc[t] = sc[u];
            sc[u] = x;
        }
    }
    for (int l = 0; l < KV_LAYERS; l++) {
        struct k25_buf *b = upload(s, score + (size_t)l * nkv * n, sizeof(float) * nkv * n);
        struct k25_tensor t = view(b, 0, 1, 0, (int64_t)nkv * n, (int64_t)nkv * n, K25_DTYPE_FP32);
        s->be->kv_add_scores(&s->ctx, &p, &ks.seq, l, &t, n - 1, 1, group);
        release(s, b);
    }
    kv_decode(s, &p, &ks);
    double *K0 = xmalloc(sizeof(double) * KV_LAYERS * nkv * n * hd);
    memcpy(K0, ks.Ks, sizeof(double) * KV_LAYERS * nkv * n * hd);
    const int64_t kept = k25_kv_kept_for(o.ratio, o.sink, o.recent, n);
    const int D = (int)(n - kept), lo = o.sink, hi = n - o.recent;
    int removed = -1;
    struct k25_error err;
    if (s->be->kv_compact(&s->ctx, &p, &ks.seq, &o, &removed, &err) != K25_OK)
        fail_msg("backend %s: kv_compact: %s", s->be->name, err.msg);
    if (removed != D || ks.seq.n_tokens != n - D || ks.seq.n_pos != n || ks.seq.merged_slots != 0 ||
        ks.seq.pruned_slots != (int64_t)D * KV_LAYERS * nkv)
        fail_msg("backend %s, kv_compact on %s (%d slots): removed %d (expected %d), n_tokens %d, merged %lld, "
                 "pruned %lld",
                 s->be->name, k25_dtype_name(dt), n, removed, D, ks.seq.n_tokens, (long long)ks.seq.merged_slots,
                 (long long)ks.seq.pruned_slots);
    kv_decode(s, &p, &ks);
    const int nn = n - D;
    int *keep = xmalloc(sizeof(int) * nn);
    double e = 0;
    for (int l = 0; l < KV_LAYERS; l++)
        for (int g = 0; g < nkv; g++) {
            const float *sc = score + ((size_t)l * nkv + g) * n;
            /* the region's slots with a score above the D-th lowest stay (scores are distinct) */
            float *sorted = xmalloc(sizeof(float) * (hi - lo));
            memcpy(sorted, sc + lo, sizeof(float) * (hi - lo));
            for (int i = 1; i < hi - lo; i++) /* insertion sort: a few hundred values */
                for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                    float x = sorted[j];
                    sorted[j] = sorted[j - 1];
                    sorted[j - 1] = x;
                }
            const float cut = D > 0 ? sorted[D - 1] : -INFINITY;
            free(sorted);
            int w = 0;
            for (int t = 0; t < n; t++)
                if (t < lo || t >= hi || sc[t] > cut)
                    keep[w++] = t;
            assert_int_equal(w, nn);
            for (int j = 0; j < nn; j++) {
                const int t = keep[j];
                const struct k25_kv_slot *m = &ks.meta[((size_t)l * nkv + g) * nn + j];
                /* statistics are kept only for the slots not yet compressed (>= comp_hi): the
                 * kept slots below are identified by their keys (checked below) */
                if ((j >= ks.seq.comp_hi && m->score != sc[t]) || m->count != 1.0f)
                    fail_msg("backend %s, kv_compact on %s: layer %d head %d: slot %d holds score %g, expected "
                             "slot %d's %g (the kept set is not the highest-scored)",
                             s->be->name, k25_dtype_name(dt), l, g, j, m->score, t, sc[t]);
                for (int d = 0; d < hd; d++) {
                    double got_k = ks.Ks[(((size_t)l * nkv + g) * nn + j) * hd + d];
                    double got_v = ks.Vs[(((size_t)l * nkv + g) * nn + j) * hd + d];
                    double xk = ks.K[((size_t)l * n + t) * kw + g * hd + d];
                    double xv = ks.V[((size_t)l * n + t) * kw + g * hd + d];
                    e = fmax(e, fmax(fabs(got_k - xk), fabs(got_v - xv)));
                    if ((dt == K25_DTYPE_FP32 || dt == K25_DTYPE_FP16) &&
                        got_k != K0[(((size_t)l * nkv + g) * n + t) * hd + d])
                        fail_msg("backend %s, kv_compact on %s: layer %d head %d: kept slot %d (was %d) key "
                                 "channel %d changed",
                                 s->be->name, k25_dtype_name(dt), l, g, j, t, d);
                }
            }
        }
    char what[96];
    snprintf(what, sizeof(what), "%d slots -> %d, n_kv_heads=%d head_dim=%d", n, nn, nkv, hd);
    note(s, K25_OP_KV_COMPACT, dt, M_MAIN, e, what);
    free(keep);
    free(K0);
    free(score);
    kvseq_free(s, &p, &ks);
    k25_kv_pool_free(&p);
}

static void test_kv_compact(void **state)
{
    struct be_state *s = *state;
    for (int di = 0; di < N_KVDTYPES; di++) {
        const enum k25_dtype dt = g_kvdtypes[di];
        if (!runs(s, K25_OP_KV_COMPACT, dt) || !runs(s, K25_OP_KV_SCORE, dt) || !runs(s, K25_OP_KV_WRITE, dt) ||
            !runs(s, K25_OP_KV_TIER_COPY, dt))
            continue;
        for (int c = 0; c < N_ATTN_SHAPES; c++) {
            compact_case(s, dt, g_attn_shapes[c], 77);
            compact_case(s, dt, g_attn_shapes[c], 300);
        }
    }
}

/* ---------------------------------------------------------------- argmax */

/* The optional argmax slot against the sampler's rule: the first index of the largest value. */
/*
 * The memory slots a device backend needs beside set/get (issue 34): buf_copy
 * moves a byte range between two of the backend's buffers (read back with
 * buf_get, as every other check: never through the buffer's address);
 * buf_clear zeroes only its range; a host buffer (buf_alloc_host, where the
 * backend has one) has a host address k25_buf_host returns, whose bytes are
 * the buffer's; memory_info, where present, reports 0 < free <= total.
 */
static void test_buf_copy_host_meminfo(void **state)
{
    struct be_state *s = *state;
    struct k25_error err;
    const size_t n = 4099; /* odd: no alignment luck */
    unsigned char *src = xmalloc(n), *got = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 37 + 11);
    struct k25_buf *a = NULL, *b = NULL;
    assert_int_equal(k25_buf_alloc(&s->ctx, K25_MEM_OTHER, n, &a, &err), K25_OK);
    assert_int_equal(k25_buf_alloc(&s->ctx, K25_MEM_OTHER, 2 * n, &b, &err), K25_OK);
    k25_buf_set(&s->ctx, a, 0, src, n);
    k25_buf_copy(&s->ctx, b, n, a, 1, n - 1); /* b[n + i] = a[1 + i] */
    k25_buf_clear(&s->ctx, a, 100, 50);
    k25_buf_get(&s->ctx, b, n, got, n - 1);
    assert_memory_equal(got, src + 1, n - 1);
    k25_buf_get(&s->ctx, b, 0, got, n); /* the part not copied to stays zero */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], 0);
    k25_buf_get(&s->ctx, a, 0, got, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], i >= 100 && i < 150 ? 0 : src[i]);
    assert_int_equal(k25_backend_status(&s->ctx, &err), K25_OK);
    k25_buf_free(&s->ctx, a);
    k25_buf_free(&s->ctx, b);

    if (s->be->buf_alloc_host) {
        struct k25_buf *h = NULL;
        assert_int_equal(k25_buf_alloc_host(&s->ctx, K25_MEM_KV, n, &h, &err), K25_OK);
        unsigned char *p = k25_buf_host(&s->ctx, h);
        assert_non_null(p);
        memcpy(p, src, n);
        k25_buf_get(&s->ctx, h, 0, got, n);
        assert_memory_equal(got, src, n);
        k25_buf_free(&s->ctx, h);
    } else {
        print_message("backend %s has no host buffers: buf_alloc_host falls back to buf_alloc\n", s->be->name);
    }
    size_t fr = 0, tot = 0;
    if (s->be->memory_info) {
        assert_int_equal(k25_memory_info(&s->ctx, &fr, &tot, &err), K25_OK);
        assert_true(tot > 0 && fr > 0 && fr <= tot);
    } else {
        assert_int_equal(k25_memory_info(&s->ctx, &fr, &tot, &err), K25_EUNSUPPORTED);
    }
    free(src);
    free(got);
}

static void test_argmax(void **state)
{
    struct be_state *s = *state;
    if (!s->be->argmax) {
        print_message("backend %s has no argmax slot: skipped\n", s->be->name);
        return;
    }
    const int m = 5, n = 1000, stride = 1003;
    float *x = xmalloc(sizeof(float) * m * stride);
    fill(x, (size_t)m * stride, 4.0f);
    x[0 * stride + 17] = 9.0f;                 /* a clear winner */
    x[1 * stride + 0] = 9.0f;                  /* at index 0 */
    x[2 * stride + 999] = 9.0f;                /* at the end */
    x[3 * stride + 500] = x[3 * stride + 40] = 9.0f; /* a tie: the lower index */
    for (int j = 0; j < n; j++)                /* all equal: index 0 */
        x[4 * stride + j] = -1.0f;
    struct k25_buf *b = NULL;
    struct k25_error err;
    assert_int_equal(s->be->buf_alloc(&s->ctx, K25_MEM_ACTIVATIONS, sizeof(float) * m * stride, &b, &err), K25_OK);
    s->be->buf_set(&s->ctx, b, 0, x, sizeof(float) * m * stride);
    struct k25_tensor t = {b, 0, m, n, stride, K25_DTYPE_FP32};
    int32_t ids[5] = {-1, -1, -1, -1, -1};
    s->be->argmax(&s->ctx, &t, ids);
    assert_int_equal(k25_backend_status(&s->ctx, &err), K25_OK);
    const int32_t want[5] = {17, 0, 999, 40, 0};
    for (int i = 0; i < m; i++)
        assert_int_equal(ids[i], want[i]);
    s->be->buf_free(&s->ctx, b);
    free(x);
}

/* ---------------------------------------------------------- token parity */

/*
 * A backend's greedy tokens against the CPU's under the token-identity rule
 * (engine/tokcheck.c): the CPU engine generates 24 tokens of `tiny` and
 * `small` (fp32 KV, no compression, the preset's weights), then an engine
 * on this backend replays them with teacher forcing (k25_tok_verify).  The
 * CPU is the reference: it is not compared with itself.
 */
static void parity_case(struct be_state *s, const char *model_name)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", model_name);
    cfg.kv_compression_ratio = 1.0;
    cfg.kv_cache_dtype = K25_DTYPE_FP32;
    k25_model_t *model = NULL;
    if (k25_model_load(&cfg, &model, &err) != K25_OK)
        fail_msg("%s: %s", model_name, err.msg);
    int32_t prompt[200];
    for (int i = 0; i < 200; i++)
        prompt[i] = (int32_t)((i * 37 + 11) % 256);
    const int n_new = 24;
    k25_engine_t *e = NULL;
    if (k25_engine_create(&cfg, model, &e, &err) != K25_OK)
        fail_msg("cpu engine: %s", err.msg);
    struct k25_request req = {.id = "parity", .input_ids = prompt, .n_input = 200, .max_new_tokens = n_new};
    int h;
    assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_OK);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    const struct k25_result *r = k25_engine_result(e, h);
    assert_int_equal(r->n_output, n_new);
    int32_t tok[24];
    float mar[24];
    memcpy(tok, r->output_ids, sizeof(tok));
    memcpy(mar, r->margins, sizeof(mar));
    k25_engine_destroy(e);
    snprintf(cfg.backend, sizeof(cfg.backend), "%s", s->be->name);
    if (k25_engine_create(&cfg, model, &e, &err) != K25_OK)
        fail_msg("%s engine: %s", s->be->name, err.msg);
    struct k25_tok_report rep;
    if (k25_tok_verify(e, "parity", prompt, 200, tok, mar, n_new, K25_TOK_TAU, &rep, &err) != K25_OK)
        fail_msg("%s replay: %s", s->be->name, err.msg);
    char line[512];
    k25_tok_report_format(&rep, line, sizeof(line));
    print_message("  %s %s vs cpu: %s\n", s->be->name, model_name, line);
    assert_true(k25_tok_report_ok(&rep));
    k25_engine_destroy(e);
    k25_model_destroy(model);
}

/*
 * A generated HF-style model folder (config.json + one model.safetensors, LlamaForCausalLM, F32,
 * tied embeddings, head_dim 32 - a size the CUDA attention kernel is built for) with weights from a
 * fixed-seed generator; the caller removes it (rm -rf).
 */
static char *write_hf_model(void)
{
    enum { D = 128, L = 2, H = 4, KVH = 2, HD = 32, F = 256, V = 256 };
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char path[1024];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    char cfgtext[1024];
    snprintf(cfgtext, sizeof(cfgtext),
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d,\n"
             " \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,\n"
             " \"intermediate_size\": %d, \"vocab_size\": %d, \"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-5,\n"
             " \"hidden_act\": \"silu\", \"tie_word_embeddings\": true}\n",
             D, L, H, KVH, F, V);
    tu_write_file(path, cfgtext);
    /* the tensors: name, rows, cols (0: a vector, a norm of ones) */
    struct { char name[80]; int r, c; } t[2 + 9 * L];
    int n = 0;
#define T(nm, rr, cc) (snprintf(t[n].name, sizeof(t[n].name), "%s", nm), t[n].r = (rr), t[n].c = (cc), n++)
    T("model.embed_tokens.weight", V, D);
    for (int l = 0; l < L; l++) {
        char nm[80];
#define TL(suf, rr, cc) (snprintf(nm, sizeof(nm), "model.layers.%d.%s", l, suf), T(nm, rr, cc))
        TL("input_layernorm.weight", D, 0);
        TL("self_attn.q_proj.weight", H * HD, D);
        TL("self_attn.k_proj.weight", KVH * HD, D);
        TL("self_attn.v_proj.weight", KVH * HD, D);
        TL("self_attn.o_proj.weight", D, H * HD);
        TL("post_attention_layernorm.weight", D, 0);
        TL("mlp.gate_proj.weight", F, D);
        TL("mlp.up_proj.weight", F, D);
        TL("mlp.down_proj.weight", D, F);
#undef TL
    }
    T("model.norm.weight", D, 0);
#undef T
    char *hdr = malloc(16384);
    assert_non_null(hdr);
    size_t used = (size_t)snprintf(hdr, 16384, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = 4ull * (uint64_t)t[i].r * (uint64_t)(t[i].c ? t[i].c : 1);
        if (t[i].c)
            used += (size_t)snprintf(hdr + used, 16384 - used, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                                     "\"data_offsets\":[%llu,%llu]}", t[i].name, t[i].r, t[i].c,
                                     (unsigned long long)off, (unsigned long long)(off + bytes));
        else
            used += (size_t)snprintf(hdr + used, 16384 - used, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],"
                                     "\"data_offsets\":[%llu,%llu]}", t[i].name, t[i].r,
                                     (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    used += (size_t)snprintf(hdr + used, 16384 - used, "}");
    assert_true(used < 16384);
    while (used % 8)
        hdr[used++] = ' ';
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char lenb[8];
    for (int k = 0; k < 8; k++)
        lenb[k] = (unsigned char)((uint64_t)used >> (8 * k));
    assert_int_equal(fwrite(lenb, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, used, f), used);
    free(hdr);
    uint64_t z = 0x5eed1234ull;
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].r * (size_t)(t[i].c ? t[i].c : 1);
        float scale = t[i].c ? 1.0f / sqrtf((float)t[i].c) : 0.0f;
        for (size_t j = 0; j < cnt; j++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull; /* fixed-seed LCG, uniform [-1, 1) */
            float u = (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            float x = t[i].c ? u * scale * 1.7f : 1.0f;
            unsigned char b[4];
            uint32_t bits;
            memcpy(&bits, &x, 4);
            for (int k = 0; k < 4; k++)
                b[k] = (unsigned char)(bits >> (8 * k));
            assert_int_equal(fwrite(b, 1, 4, f), 4);
        }
    }
    assert_int_equal(fclose(f), 0);
    return dir;
}

static void rm_hf_model(char *dir)
{
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(dir);
}

static void test_token_parity(void **state)
{
    struct be_state *s = *state;
    char *hf = write_hf_model();
    if (s->be == &k25_backend_cpu) {
        /* the generated folder is a model the engine loads (the check of the generator itself) */
        struct k25_config cfg;
        struct k25_error err;
        k25_config_init(&cfg);
        snprintf(cfg.model, sizeof(cfg.model), "%s", hf);
        k25_model_t *model = NULL;
        cfg.kv_compression_ratio = 1.0;
        if (k25_model_load(&cfg, &model, &err) != K25_OK)
            fail_msg("generated HF model %s: %s", hf, err.msg);
        k25_engine_t *e = NULL;
        if (k25_engine_create(&cfg, model, &e, &err) != K25_OK)
            fail_msg("generated HF model: %s", err.msg);
        int32_t prompt[16];
        for (int i = 0; i < 16; i++)
            prompt[i] = (int32_t)((i * 37 + 11) % 256);
        struct k25_request req = {.id = "hf", .input_ids = prompt, .n_input = 16, .max_new_tokens = 4};
        int h;
        assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_OK);
        assert_int_equal(k25_engine_run(e, &err), K25_OK);
        assert_int_equal(k25_engine_result(e, h)->n_output, 4);
        k25_engine_destroy(e);
        k25_model_destroy(model);
        rm_hf_model(hf);
        print_message("backend cpu: the token reference (not compared with itself)\n");
        return;
    }
    parity_case(s, "tiny");
    parity_case(s, "small");
    parity_case(s, hf);
    rm_hf_model(hf);
}

/* --------------------------------------------------------------- summary */

static void test_summary(void **state)
{
    struct be_state *s = *state;
    int checked = 0;
    for (int op = 0; op < K25_OP_N; op++)
        for (int dt = 0; dt < K25_DTYPE_N; dt++)
            if (s->checks[op][dt]) {
                checked++;
                break;
            }
    print_message("backend %s (%s): %d of %d ops checked; %d op/dtype pairs skipped\n", s->be->name,
                  s->be->description, checked, (int)K25_OP_N, s->n_skips);
    print_message("  %-22s %-5s %6s  %-11s %-9s  %-11s %-9s\n", "op", "dtype", "checks", "worst", "bound",
                  "vs stored", "bound");
    for (int op = 0; op < K25_OP_N; op++)
        for (int dt = 0; dt < K25_DTYPE_N; dt++) {
            if (!s->checks[op][dt])
                continue;
            char st[64] = "";
            if (s->worst[op][dt][M_STORED] >= 0)
                snprintf(st, sizeof(st), "%-11.3g %-9.3g", s->worst[op][dt][M_STORED],
                         tol_of((enum k25_op)op, (enum k25_dtype)dt, M_STORED));
            print_message("  %-22s %-5s %6d  %-11.3g %-9.3g  %s\n", k25_op_name((enum k25_op)op),
                          k25_dtype_name((enum k25_dtype)dt), s->checks[op][dt], s->worst[op][dt][M_MAIN],
                          tol_of((enum k25_op)op, (enum k25_dtype)dt, M_MAIN), st);
        }
    for (int i = 0; i < s->n_skips; i++)
        print_message("  skipped: %s\n", s->skips[i]);
    /* every op the interface names is either checked or skipped with a reason (unless a failed
     * check stopped a test early: that failure is the report) */
    for (int op = 0; op < K25_OP_N && !s->aborted; op++) {
        bool any = false;
        for (int dt = 0; dt < K25_DTYPE_N; dt++)
            any = any || s->checks[op][dt];
        if (!any) {
            bool skipped = false;
            for (int i = 0; i < s->n_skips && !skipped; i++)
                skipped = strstr(s->skips[i], k25_op_name((enum k25_op)op)) != NULL;
            if (!skipped)
                fail_msg("backend %s: op %s was neither checked nor skipped", s->be->name,
                         k25_op_name((enum k25_op)op));
        }
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    k25_blas_reexec(argv);
    /* the checks run for each backend, in this order (summary last) */
    static const struct {
        const char *name;
        void (*fn)(void **state);
    } checks[] = {
        {"gemm", test_gemm},
        {"rmsnorm", test_rmsnorm},
        {"rope", test_rope},
        {"swiglu", test_swiglu},
        {"embed_rows", test_embed_rows},
        {"kv_write_tier_copy", test_kv_write_tier_copy},
        {"attention", test_attention},
        {"kv_scores", test_kv_scores},
        {"kv_compact", test_kv_compact},
        {"argmax", test_argmax},
        {"buf_copy_host_meminfo", test_buf_copy_host_meminfo},
        {"token_parity", test_token_parity},
        {"summary", test_summary},
    };
    const int n_fns = (int)(sizeof(checks) / sizeof(checks[0]));
    const int n_be = k25_backend_count();
    if (n_be < 1 || n_be > MAX_BACKENDS) {
        fprintf(stderr, "test_backend_ops: %d backends registered; this test holds 1..%d\n", n_be, MAX_BACKENDS);
        return 1;
    }
    struct CMUnitTest *tests = calloc((size_t)n_be * n_fns, sizeof(*tests));
    struct slot *slots = calloc((size_t)n_be * n_fns, sizeof(*slots));
    char(*tnames)[64] = calloc((size_t)n_be * n_fns, sizeof(*tnames));
    if (!tests || !slots || !tnames)
        return 1;
    for (int b = 0; b < n_be; b++) {
        g_be[b].be = k25_backend_at(b);
        for (int op = 0; op < K25_OP_N; op++)
            for (int dt = 0; dt < K25_DTYPE_N; dt++)
                for (int m = 0; m < M_N; m++)
                    g_be[b].worst[op][dt][m] = -1;
        for (int f = 0; f < n_fns; f++) {
            struct CMUnitTest *t = &tests[b * n_fns + f];
            snprintf(tnames[b * n_fns + f], sizeof(tnames[0]), "%s: %s", g_be[b].be->name, checks[f].name);
            t->name = tnames[b * n_fns + f];
            slots[b * n_fns + f] = (struct slot){&g_be[b], checks[f].fn};
            t->test_func = run_slot;
            t->setup_func = be_setup;
            t->teardown_func = be_teardown;
            t->initial_state = &slots[b * n_fns + f];
        }
    }
    int rc = _cmocka_run_group_tests("test_backend_ops", tests, (size_t)n_be * n_fns, NULL, NULL);
    free(tests);
    free(slots);
    free(tnames);
    return rc;
}
