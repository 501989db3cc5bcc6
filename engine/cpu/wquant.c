/*
 * wquant.c - group-wise int8/int4 weight quantization (the layout of
 * backend.h, "Weight formats") and dequantization of row ranges to fp32.
 * engine.c quantizes the loaded model's matrices at engine create when
 * quantize_weights asks; the CPU backend dequantizes tiles of rows for
 * prefill GEMMs (OpenBLAS on the fp32 tile) and rows for the embedding op.
 * The decode kernels (gemv.c) read the same layout directly.
 */
#include "weights.h"

#include <math.h>
#include <string.h>

size_t k25_wquant_row_bytes(enum k25_dtype q, int64_t cols, int group)
{
    K25_ASSERT(group > 0 && group % 32 == 0 && cols % group == 0);
    size_t data = q == K25_DTYPE_INT8 ? (size_t)cols : (size_t)cols / 2;
    K25_ASSERT(q == K25_DTYPE_INT8 || q == K25_DTYPE_INT4);
    return 4 * (size_t)(cols / group) + data; /* a multiple of 4: cols is a multiple of 32 */
}

int k25_wquant_group(enum k25_dtype q, int64_t cols, size_t row_bytes)
{
    size_t data = q == K25_DTYPE_INT8 ? (size_t)cols : (size_t)cols / 2;
    if (row_bytes <= data || (4 * (size_t)cols) % (row_bytes - data) != 0)
        return 0;
    size_t g = 4 * (size_t)cols / (row_bytes - data);
    return g % 32 == 0 && (size_t)cols % g == 0 ? (int)g : 0;
}

/* Element k of a dense row of dtype dt. */
static inline float dense_get(const void *row, enum k25_dtype dt, int64_t k)
{
    switch (dt) {
    case K25_DTYPE_FP32: return ((const float *)row)[k];
    case K25_DTYPE_BF16: return k25_bf16_to_fp32(((const uint16_t *)row)[k]);
    case K25_DTYPE_FP16: return k25_fp16_to_fp32(((const uint16_t *)row)[k]);
    default: K25_ASSERT(!"dense weight dtype");
    }
    return 0;
}

void k25_wquant_rows(enum k25_dtype q, int group, const void *src, enum k25_dtype src_dtype, size_t src_stride,
                     int64_t n, int64_t cols, void *dst)
{
    const size_t rb = k25_wquant_row_bytes(q, cols, group), eb = src_dtype == K25_DTYPE_FP32 ? 4 : 2;
    const int64_t ng = cols / group;
    const float qmax = q == K25_DTYPE_INT8 ? 127.0f : 7.0f;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *srow = (const unsigned char *)src + (size_t)i * src_stride * eb;
        unsigned char *row = (unsigned char *)dst + (size_t)i * rb, *data = row + 4 * ng;
        memset(data, 0, rb - 4 * (size_t)ng);
        for (int64_t g = 0; g < ng; g++) {
            float amax = 0.0f;
            for (int64_t k = g * group; k < (g + 1) * group; k++) {
                float a = fabsf(dense_get(srow, src_dtype, k));
                amax = a > amax ? a : amax;
            }
            float s = amax / qmax, inv = s > 0 ? 1.0f / s : 0.0f;
            memcpy(row + 4 * g, &s, 4);
            for (int64_t k = g * group; k < (g + 1) * group; k++) {
                float v = nearbyintf(dense_get(srow, src_dtype, k) * inv);
                int iv = (int)(v > qmax ? qmax : v < -qmax ? -qmax : v);
                if (q == K25_DTYPE_INT8) {
                    data[k] = (unsigned char)(signed char)iv;
                } else { /* per 32 values: byte l holds value l (low nibble) and l+16 (high), + 8 */
                    int64_t blk = k / 32, l = k % 32;
                    unsigned char *p = data + 16 * blk + (l & 15);
                    *p |= (unsigned char)((iv + 8) << (l < 16 ? 0 : 4));
                }
            }
        }
    }
}

void k25_wrows_dequant(const struct k25_wrows *w, int64_t r0, int64_t n, float *out, size_t out_stride)
{
    K25_ASSERT(r0 >= 0 && r0 + n <= w->rows);
    const int64_t cols = w->cols;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *row = w->data + (size_t)(r0 + i) * w->row_bytes;
        float *o = out + (size_t)i * out_stride;
        switch (w->dtype) {
        case K25_DTYPE_FP32: memcpy(o, row, sizeof(float) * (size_t)cols); break;
        case K25_DTYPE_BF16:
            for (int64_t k = 0; k < cols; k++) { /* bf16 is the high half of an fp32 */
                uint32_t u = (uint32_t)(row[2 * k] | row[2 * k + 1] << 8) << 16;
                memcpy(&o[k], &u, 4);
            }
            break;
        case K25_DTYPE_FP16:
            for (int64_t k = 0; k < cols; k++)
                o[k] = k25_fp16_to_fp32((uint16_t)(row[2 * k] | row[2 * k + 1] << 8));
            break;
        case K25_DTYPE_INT8:
        case K25_DTYPE_INT4: {
            const int64_t ng = cols / w->group;
            const unsigned char *data = row + 4 * ng;
            for (int64_t g = 0; g < ng; g++) {
                float s;
                memcpy(&s, row + 4 * g, 4);
                for (int64_t k = g * w->group; k < (g + 1) * w->group; k++) {
                    int v;
                    if (w->dtype == K25_DTYPE_INT8) {
                        v = (signed char)data[k];
                    } else {
                        unsigned char b = data[16 * (k / 32) + (k % 32 & 15)];
                        v = (k % 32 < 16 ? b & 15 : b >> 4) - 8;
                    }
                    o[k] = (float)v * s; /* the product the kernels form */
                }
            }
            break;
        }
        default: K25_ASSERT(!"weight dtype");
        }
    }
}
