/*
 * half.c - IEEE binary16 and bfloat16 conversions (portable bit
 * manipulation, round to nearest even), used by the fp16 KV cache and the
 * safetensors loader.
 */
#include "internal.h"

#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float k25_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0)
            return u2f(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return u2f(sign | 0x7f800000u | (man << 13));
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t k25_fp32_to_fp16(float f)
{
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* Adding 0.5 makes the FPU round the mantissa at bit 2^-24 (nearest even). */
        float v = u2f(ax) + 0.5f;
        return (uint16_t)(sign | (f2u(v) - 0x3f000000u));
    }
    /* normal: rebias exponent, round mantissa to 10 bits, nearest even */
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd; /* (15-127)<<23 rebias plus rounding bias */
    return (uint16_t)(sign | (ax >> 13));
}

float k25_bf16_to_fp32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}
