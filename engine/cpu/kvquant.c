/*
 * kvquant.c - INT8/INT4 quantization of KV rows: keys per channel over a
 * group of tokens, values per token over a group of channels (kvquant.h).
 */
#include "kvquant.h"
#include "internal.h"

#include <math.h>

/* The smallest half >= x (x finite, |x| within the half range). */
static uint16_t half_up(float x)
{
    uint16_t h = k25_fp32_to_fp16(x);
    if (k25_fp16_to_fp32(h) >= x)
        return h;
    if (h == 0x8000 || h == 0x0000)
        return 0x0001;
    return (h & 0x8000) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
}

/* The largest half <= x. */
static uint16_t half_down(float x)
{
    uint16_t h = k25_fp32_to_fp16(x);
    if (k25_fp16_to_fp32(h) <= x)
        return h;
    if (h == 0x0000 || h == 0x8000)
        return 0x8001;
    return (h & 0x8000) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}

/* Scale and zero (halves) for values in [mn, mx] on a grid of qmax steps. */
static void grid(float mn, float mx, int qmax, uint16_t *s16, uint16_t *z16, float *sf, float *zf)
{
    *z16 = half_down(mn);
    *zf = k25_fp16_to_fp32(*z16);
    float s = (mx - *zf) / (float)qmax;
    *s16 = s > 0 ? half_up(s) : 0;
    *sf = k25_fp16_to_fp32(*s16);
}

static inline int quant1(float x, float zf, float inv, int qmax)
{
    int q = (int)lrintf((x - zf) * inv);
    return q < 0 ? 0 : q > qmax ? qmax : q;
}

void k25_kvq_quant_keys(const float *x, int x_stride, int G, int hd, int bits, uint8_t *q, uint16_t *sz)
{
    const int qmax = (1 << bits) - 1;
    const size_t rb = k25_kvq_row_bytes(hd, bits);
    for (int t = 0; t < G; t++)
        for (size_t j = 0; j < rb; j++)
            q[(size_t)t * rb + j] = 0;
    for (int d = 0; d < hd; d++) {
        float mn = x[d], mx = x[d];
        for (int t = 1; t < G; t++) {
            float v = x[(size_t)t * x_stride + d];
            mn = v < mn ? v : mn;
            mx = v > mx ? v : mx;
        }
        float sf, zf;
        grid(mn, mx, qmax, &sz[d], &sz[hd + d], &sf, &zf);
        float inv = sf > 0 ? 1.0f / sf : 0.0f;
        for (int t = 0; t < G; t++) {
            int v = quant1(x[(size_t)t * x_stride + d], zf, inv, qmax);
            uint8_t *row = q + (size_t)t * rb;
            if (bits == 8)
                row[d] = (uint8_t)v;
            else
                row[d >> 1] |= (uint8_t)(v << ((d & 1) * 4));
        }
    }
}

void k25_kvq_dequant_key_row(const uint8_t *q, const float *sz_f, int hd, int bits, float *dst)
{
    const float *s = sz_f, *z = sz_f + hd;
    if (bits == 8) {
#pragma omp simd
        for (int d = 0; d < hd; d++)
            dst[d] = (float)q[d] * s[d] + z[d];
    } else {
#pragma omp simd
        for (int j = 0; j < hd / 2; j++) {
            dst[2 * j] = (float)(q[j] & 15) * s[2 * j] + z[2 * j];
            dst[2 * j + 1] = (float)(q[j] >> 4) * s[2 * j + 1] + z[2 * j + 1];
        }
    }
}

void k25_kvq_quant_value_row(const float *x, int hd, int vg, int bits, uint8_t *q, uint16_t *sz)
{
    const int qmax = (1 << bits) - 1;
    for (size_t j = 0; j < k25_kvq_row_bytes(hd, bits); j++)
        q[j] = 0;
    for (int g0 = 0, k = 0; g0 < hd; g0 += vg, k++) {
        float mn = x[g0], mx = x[g0];
        for (int d = g0 + 1; d < g0 + vg; d++) {
            mn = x[d] < mn ? x[d] : mn;
            mx = x[d] > mx ? x[d] : mx;
        }
        float sf, zf;
        grid(mn, mx, qmax, &sz[2 * k], &sz[2 * k + 1], &sf, &zf);
        float inv = sf > 0 ? 1.0f / sf : 0.0f;
        for (int d = g0; d < g0 + vg; d++) {
            int v = quant1(x[d], zf, inv, qmax);
            if (bits == 8)
                q[d] = (uint8_t)v;
            else
                q[d >> 1] |= (uint8_t)(v << ((d & 1) * 4));
        }
    }
}

void k25_kvq_dequant_value_row(const uint8_t *q, const uint16_t *sz, int hd, int vg, int bits, float *dst)
{
    for (int g0 = 0, k = 0; g0 < hd; g0 += vg, k++) {
        float s = k25_fp16_to_fp32(sz[2 * k]), z = k25_fp16_to_fp32(sz[2 * k + 1]);
        if (bits == 8) {
#pragma omp simd
            for (int d = g0; d < g0 + vg; d++)
                dst[d] = (float)q[d] * s + z;
        } else {
#pragma omp simd
            for (int j = g0 / 2; j < (g0 + vg) / 2; j++) {
                dst[2 * j] = (float)(q[j] & 15) * s + z;
                dst[2 * j + 1] = (float)(q[j] >> 4) * s + z;
            }
        }
    }
}
