/*
 * gemv.c - decode kernels: y = x . W^T for 1..K25_GEMV_MAX_M activation
 * rows (batch-1 and small-batch decode steps), weights in fp32, bf16, fp16
 * or group-wise int8/int4 (backend.h layouts), dequantized inside the dot
 * product.  Decode is bound by the bytes of the weights: OpenMP threads
 * share out W's rows, and each weight row is applied to every x row while
 * it is in cache, so a step reads the weights from memory once.
 *
 * Three instruction paths (weights.h): portable scalar C, AVX2+FMA+F16C
 * and AVX-512 (F, BW).  The SIMD paths are compiled with target
 * attributes, so one binary carries all of them and picks at run time
 * (cpu_kernels in the config overrides the choice).
 *
 * Batch invariance (weights.h): per output element the operations are
 * fixed by the path alone.  Rows of x are handled in register groups of
 * up to R (sharing each weight load), but every row keeps its own
 * accumulators, fed in the same order: the grouping changes which loads
 * are shared, never an operation on a row's value.
 */
#include "weights.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define K25_HAVE_X86 1
#define TGT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TGT_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
#define AI __attribute__((always_inline)) inline
#else
#define K25_HAVE_X86 0
#endif

const char *k25_kpath_name(enum k25_kpath p)
{
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return (unsigned)p < K25_KPATH_N ? names[p] : "?";
}

#if K25_HAVE_X86
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c". */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

bool k25_kpath_available(enum k25_kpath p)
{
    switch (p) {
    case K25_KPATH_SCALAR: return true;
#if K25_HAVE_X86
    case K25_KPATH_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case K25_KPATH_AVX512:
        return k25_kpath_available(K25_KPATH_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw");
#else
    case K25_KPATH_AVX2:
    case K25_KPATH_AVX512: return false;
#endif
    case K25_KPATH_N: break;
    }
    return false;
}

int k25_kpath_resolve(enum k25_cpu_kernels want, enum k25_kpath *out, struct k25_error *err)
{
    enum k25_kpath p;
    switch (want) {
    case K25_CPU_KERNELS_AUTO:
        *out = k25_kpath_available(K25_KPATH_AVX512) ? K25_KPATH_AVX512
               : k25_kpath_available(K25_KPATH_AVX2) ? K25_KPATH_AVX2
                                                     : K25_KPATH_SCALAR;
        return K25_OK;
    case K25_CPU_KERNELS_AVX512: p = K25_KPATH_AVX512; break;
    case K25_CPU_KERNELS_AVX2: p = K25_KPATH_AVX2; break;
    default: p = K25_KPATH_SCALAR; break;
    }
    if (!k25_kpath_available(p))
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "cpu_kernels",
                             "this CPU cannot run the %s kernels (it has: scalar%s%s); use auto", k25_kpath_name(p),
                             k25_kpath_available(K25_KPATH_AVX2) ? ", avx2" : "",
                             k25_kpath_available(K25_KPATH_AVX512) ? ", avx512" : "");
    *out = p;
    return K25_OK;
}

/* Scale g of a quantized row (the row starts with its fp32 scales). */
static inline float row_scale(const unsigned char *row, int64_t g)
{
    float s;
    memcpy(&s, row + 4 * g, 4);
    return s;
}

/* Where a quantized row's values start: after cols/group scales. */
static inline const unsigned char *row_qdata(const struct k25_wrows *w, const unsigned char *row)
{
    return row + 4 * (size_t)(w->cols / w->group);
}

/* ------------------------------------------------------------- scalar */

/* Values [32b, 32b+32) of a row as fp32 (a block never straddles a scale group). */
static void blk_scalar(const struct k25_wrows *w, const unsigned char *row, int64_t b, float *o)
{
    const int64_t k0 = 32 * b;
    switch (w->dtype) {
    case K25_DTYPE_FP32: memcpy(o, row + 4 * k0, 128); break;
    case K25_DTYPE_BF16:
    case K25_DTYPE_FP16:
        for (int l = 0; l < 32; l++) {
            uint16_t h;
            memcpy(&h, row + 2 * (k0 + l), 2);
            o[l] = w->dtype == K25_DTYPE_BF16 ? k25_bf16_to_fp32(h) : k25_fp16_to_fp32(h);
        }
        break;
    case K25_DTYPE_INT8: {
        const signed char *q = (const signed char *)row_qdata(w, row) + k0;
        float s = row_scale(row, k0 / w->group);
        for (int l = 0; l < 32; l++)
            o[l] = (float)q[l] * s;
        break;
    }
    case K25_DTYPE_INT4: {
        const unsigned char *q = row_qdata(w, row) + 16 * b;
        float s = row_scale(row, k0 / w->group);
        for (int l = 0; l < 16; l++) {
            o[l] = (float)((q[l] & 15) - 8) * s;
            o[l + 16] = (float)((q[l] >> 4) - 8) * s;
        }
        break;
    }
    default: K25_ASSERT(!"weight dtype");
    }
}

/* Value k of a dense row (the tail beyond the last whole block). */
static inline float dense_at(const struct k25_wrows *w, const unsigned char *row, int64_t k)
{
    if (w->dtype == K25_DTYPE_FP32) {
        float f;
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * k, 2);
    return w->dtype == K25_DTYPE_BF16 ? k25_bf16_to_fp32(h) : k25_fp16_to_fp32(h);
}

/* The tail of x[r] . row over [k0, cols), in order. */
static inline float dot_tail(const struct k25_wrows *w, const unsigned char *row, const float *x, int64_t k0)
{
    float t = 0.0f;
    for (int64_t k = k0; k < w->cols; k++)
        t += x[k] * dense_at(w, row, k);
    return t;
}

/* Scalar: 8 lanes per row, lane l%8 takes the block's values l, l+8, l+16, l+24. */
static void rows_scalar(const struct k25_wrows *w, int64_t j0, int64_t j1, const float *x, size_t xs, int m,
                        float *y, size_t ys, bool acc)
{
    const int64_t nb = w->cols / 32;
    float wb[32];
    for (int64_t j = j0; j < j1; j++) {
        const unsigned char *row = w->data + (size_t)j * w->row_bytes;
        float a[K25_GEMV_MAX_M][8];
        memset(a, 0, sizeof(a));
        for (int64_t b = 0; b < nb; b++) {
            blk_scalar(w, row, b, wb);
            for (int r = 0; r < m; r++) {
                const float *xr = x + (size_t)r * xs + 32 * b;
                for (int l = 0; l < 32; l++)
                    a[r][l & 7] += xr[l] * wb[l];
            }
        }
        for (int r = 0; r < m; r++) {
            float s = ((a[r][0] + a[r][1]) + (a[r][2] + a[r][3])) + ((a[r][4] + a[r][5]) + (a[r][6] + a[r][7]));
            s += dot_tail(w, row, x + (size_t)r * xs, 32 * nb);
            float *yo = y + (size_t)r * ys + j;
            *yo = acc ? *yo + s : s;
        }
    }
}

#if K25_HAVE_X86
/* --------------------------------------------------------------- AVX2 */

/* Values [32b, 32b+32) of a row as four 8-lane vectors; dt is a constant after inlining. */
static TGT_AVX2 AI void blk_avx2(enum k25_dtype dt, const struct k25_wrows *w, const unsigned char *row, int64_t b,
                                 __m256 o[4])
{
    const int64_t k0 = 32 * b;
    switch (dt) {
    case K25_DTYPE_FP32:
        for (int q = 0; q < 4; q++)
            o[q] = _mm256_loadu_ps((const float *)(const void *)(row + 4 * (k0 + 8 * q)));
        break;
    case K25_DTYPE_BF16:
        for (int q = 0; q < 4; q++) {
            __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (k0 + 8 * q)));
            o[q] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
        break;
    case K25_DTYPE_FP16:
        for (int q = 0; q < 4; q++)
            o[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (k0 + 8 * q))));
        break;
    case K25_DTYPE_INT8: {
        const unsigned char *p = row_qdata(w, row) + k0;
        __m256 s = _mm256_set1_ps(row_scale(row, k0 / w->group));
        for (int q = 0; q < 4; q++) {
            __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(p + 8 * q));
            o[q] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), s);
        }
        break;
    }
    case K25_DTYPE_INT4: {
        const unsigned char *p = row_qdata(w, row) + 16 * b;
        __m256 s = _mm256_set1_ps(row_scale(row, k0 / w->group));
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p), m4 = _mm_set1_epi8(15);
        __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        __m256i eight = _mm256_set1_epi32(8);
        __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int q = 0; q < 4; q++)
            o[q] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(part[q]), eight)), s);
        break;
    }
    default: K25_ASSERT(!"weight dtype");
    }
}

/* Sum of 8 lanes in a fixed tree. */
static TGT_AVX2 AI float hsum_avx2(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* R rows of x (at xr[0..R)) against weight row j: four accumulators per row. */
static TGT_AVX2 AI void dot_avx2(enum k25_dtype dt, int R, const struct k25_wrows *w, const unsigned char *row,
                                 const float *const *xr, float *out)
{
    const int64_t nb = w->cols / 32;
    __m256 a[3][4];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < 4; q++)
            a[r][q] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256 wv[4];
        blk_avx2(dt, w, row, b, wv);
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 4; q++)
                a[r][q] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[r] + 32 * b + 8 * q), wv[q], a[r][q]);
    }
    for (int r = 0; r < R; r++) {
        float s = hsum_avx2(_mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3])));
        out[r] = s + dot_tail(w, row, xr[r], 32 * nb);
    }
}

static TGT_AVX2 AI void rows_avx2_dt(enum k25_dtype dt, const struct k25_wrows *w, int64_t j0, int64_t j1,
                                     const float *x, size_t xs, int m, float *y, size_t ys, bool acc)
{
    for (int64_t j = j0; j < j1; j++) {
        const unsigned char *row = w->data + (size_t)j * w->row_bytes;
        for (int r0 = 0; r0 < m; r0 += 3) {
            const int R = m - r0 < 3 ? m - r0 : 3;
            const float *xr[3];
            float s[3];
            for (int r = 0; r < R; r++)
                xr[r] = x + (size_t)(r0 + r) * xs;
            if (R == 3)
                dot_avx2(dt, 3, w, row, xr, s);
            else if (R == 2)
                dot_avx2(dt, 2, w, row, xr, s);
            else
                dot_avx2(dt, 1, w, row, xr, s);
            for (int r = 0; r < R; r++) {
                float *yo = y + (size_t)(r0 + r) * ys + j;
                *yo = acc ? *yo + s[r] : s[r];
            }
        }
    }
}

#define ROWS_FN(path, DT, name)                                                                                    \
    static TGT_##path void rows_##name(const struct k25_wrows *w, int64_t j0, int64_t j1, const float *x,        \
                                       size_t xs, int m, float *y, size_t ys, bool acc)                          \
    {                                                                                                              \
        rows_##path##_dt(DT, w, j0, j1, x, xs, m, y, ys, acc);                                                    \
    }
#define rows_AVX2_dt rows_avx2_dt
ROWS_FN(AVX2, K25_DTYPE_FP32, avx2_fp32)
ROWS_FN(AVX2, K25_DTYPE_BF16, avx2_bf16)
ROWS_FN(AVX2, K25_DTYPE_FP16, avx2_fp16)
ROWS_FN(AVX2, K25_DTYPE_INT8, avx2_int8)
ROWS_FN(AVX2, K25_DTYPE_INT4, avx2_int4)

/* ------------------------------------------------------------ AVX-512 */

/* Values [32b, 32b+32) of a row as two 16-lane vectors. */
static TGT_AVX512 AI void blk_avx512(enum k25_dtype dt, const struct k25_wrows *w, const unsigned char *row,
                                     int64_t b, __m512 o[2])
{
    const int64_t k0 = 32 * b;
    switch (dt) {
    case K25_DTYPE_FP32:
        for (int q = 0; q < 2; q++)
            o[q] = _mm512_loadu_ps((const void *)(row + 4 * (k0 + 16 * q)));
        break;
    case K25_DTYPE_BF16:
        for (int q = 0; q < 2; q++) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * (k0 + 16 * q)));
            o[q] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        break;
    case K25_DTYPE_FP16:
        for (int q = 0; q < 2; q++)
            o[q] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * (k0 + 16 * q))));
        break;
    case K25_DTYPE_INT8: {
        const unsigned char *p = row_qdata(w, row) + k0;
        __m512 s = _mm512_set1_ps(row_scale(row, k0 / w->group));
        for (int q = 0; q < 2; q++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * q));
            o[q] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), s);
        }
        break;
    }
    case K25_DTYPE_INT4: {
        const unsigned char *p = row_qdata(w, row) + 16 * b;
        __m512 s = _mm512_set1_ps(row_scale(row, k0 / w->group));
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p), m4 = _mm_set1_epi8(15);
        __m128i part[2] = {_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4)};
        __m512i eight = _mm512_set1_epi32(8);
        for (int q = 0; q < 2; q++)
            o[q] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(part[q]), eight)), s);
        break;
    }
    default: K25_ASSERT(!"weight dtype");
    }
}

/* Sum of 16 lanes in a fixed tree (halves, then the AVX2 tree). */
static TGT_AVX512 AI float hsum_avx512(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static TGT_AVX512 AI void dot_avx512(enum k25_dtype dt, int R, const struct k25_wrows *w, const unsigned char *row,
                                     const float *const *xr, float *out)
{
    const int64_t nb = w->cols / 32;
    __m512 a[4][2];
    for (int r = 0; r < R; r++)
        a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 wv[2];
        blk_avx512(dt, w, row, b, wv);
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 2; q++)
                a[r][q] = _mm512_fmadd_ps(_mm512_loadu_ps(xr[r] + 32 * b + 16 * q), wv[q], a[r][q]);
    }
    for (int r = 0; r < R; r++)
        out[r] = hsum_avx512(_mm512_add_ps(a[r][0], a[r][1])) + dot_tail(w, row, xr[r], 32 * nb);
}

static TGT_AVX512 AI void rows_avx512_dt(enum k25_dtype dt, const struct k25_wrows *w, int64_t j0, int64_t j1,
                                         const float *x, size_t xs, int m, float *y, size_t ys, bool acc)
{
    for (int64_t j = j0; j < j1; j++) {
        const unsigned char *row = w->data + (size_t)j * w->row_bytes;
        for (int r0 = 0; r0 < m; r0 += 4) {
            const int R = m - r0 < 4 ? m - r0 : 4;
            const float *xr[4];
            float s[4];
            for (int r = 0; r < R; r++)
                xr[r] = x + (size_t)(r0 + r) * xs;
            switch (R) {
            case 4: dot_avx512(dt, 4, w, row, xr, s); break;
            case 3: dot_avx512(dt, 3, w, row, xr, s); break;
            case 2: dot_avx512(dt, 2, w, row, xr, s); break;
            default: dot_avx512(dt, 1, w, row, xr, s); break;
            }
            for (int r = 0; r < R; r++) {
                float *yo = y + (size_t)(r0 + r) * ys + j;
                *yo = acc ? *yo + s[r] : s[r];
            }
        }
    }
}

#define rows_AVX512_dt rows_avx512_dt
ROWS_FN(AVX512, K25_DTYPE_FP32, avx512_fp32)
ROWS_FN(AVX512, K25_DTYPE_BF16, avx512_bf16)
ROWS_FN(AVX512, K25_DTYPE_FP16, avx512_fp16)
ROWS_FN(AVX512, K25_DTYPE_INT8, avx512_int8)
ROWS_FN(AVX512, K25_DTYPE_INT4, avx512_int4)
#endif /* K25_HAVE_X86 */

/* ------------------------------------------------------------ dispatch */

typedef void (*rows_fn)(const struct k25_wrows *w, int64_t j0, int64_t j1, const float *x, size_t xs, int m,
                        float *y, size_t ys, bool acc);

static rows_fn pick(enum k25_kpath p, enum k25_dtype dt)
{
#if K25_HAVE_X86
    static const rows_fn avx2[K25_DTYPE_N] = {[K25_DTYPE_FP32] = rows_avx2_fp32, [K25_DTYPE_BF16] = rows_avx2_bf16,
                                              [K25_DTYPE_FP16] = rows_avx2_fp16, [K25_DTYPE_INT8] = rows_avx2_int8,
                                              [K25_DTYPE_INT4] = rows_avx2_int4};
    static const rows_fn avx512[K25_DTYPE_N] = {
        [K25_DTYPE_FP32] = rows_avx512_fp32, [K25_DTYPE_BF16] = rows_avx512_bf16,
        [K25_DTYPE_FP16] = rows_avx512_fp16, [K25_DTYPE_INT8] = rows_avx512_int8,
        [K25_DTYPE_INT4] = rows_avx512_int4};
    if (p == K25_KPATH_AVX2)
        return avx2[dt];
    if (p == K25_KPATH_AVX512)
        return avx512[dt];
#endif
    (void)dt;
    K25_ASSERT(p == K25_KPATH_SCALAR);
    return rows_scalar;
}

void k25_gemv(enum k25_kpath p, const float *x, size_t x_stride, int m, const struct k25_wrows *w, float *y,
              size_t y_stride, bool acc)
{
    K25_ASSERT(m >= 1 && m <= K25_GEMV_MAX_M && (unsigned)w->dtype < K25_DTYPE_N);
    K25_ASSERT((w->dtype != K25_DTYPE_INT8 && w->dtype != K25_DTYPE_INT4) ||
               (w->group > 0 && w->group % 32 == 0 && w->cols % w->group == 0));
    K25_ASSERT(k25_kpath_available(p));
    const rows_fn fn = pick(p, w->dtype);
    const int64_t RB = 16; /* weight rows per work item */
    const int64_t nblk = (w->rows + RB - 1) / RB;
    /* a few thousand multiply-adds are not worth waking the team */
#pragma omp parallel for schedule(static) if (w->rows * w->cols * m > 65536)
    for (int64_t bk = 0; bk < nblk; bk++) {
        int64_t j0 = bk * RB, j1 = j0 + RB < w->rows ? j0 + RB : w->rows;
        fn(w, j0, j1, x, x_stride, m, y, y_stride, acc);
    }
}
