/*
 * test_half.c - IEEE binary16 and bfloat16 conversions (engine/half.c),
 * used by the fp16 KV cache and the safetensors loader.
 *
 * Known bit patterns (zeros, one, the largest half, subnormals, infinities,
 * NaN), round to nearest even at every kind of tie, and sweeps over all
 * 65536 half and bfloat16 values against a reference decoder written here
 * with ldexp, independent of the engine's bit manipulation.
 */
#include "testutil.h"

#include "internal.h"

#include <float.h>
#include <math.h>

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Reference binary16 decoder: sign * man * 2^(exp-25) with the implicit bit. */
static float ref_fp16(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 31)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -24);
    else
        v = ldexp(man + 1024, exp - 25);
    return (float)(sign ? -v : v);
}

/* Reference bfloat16 decoder: 8 exponent bits, 7 mantissa bits. */
static float ref_bf16(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 7) & 0xff, man = h & 0x7f;
    double v;
    if (exp == 255)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -133);
    else
        v = ldexp(man + 128, exp - 134);
    return (float)(sign ? -v : v);
}

static bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static void test_fp16_known_decodes(void **state)
{
    (void)state;
    assert_true(k25_fp16_to_fp32(0x0000) == 0.0f && !signbit(k25_fp16_to_fp32(0x0000)));
    assert_true(k25_fp16_to_fp32(0x8000) == 0.0f && signbit(k25_fp16_to_fp32(0x8000)));
    assert_true(k25_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(k25_fp16_to_fp32(0xbc00) == -1.0f);
    assert_true(k25_fp16_to_fp32(0xc000) == -2.0f);
    assert_true(k25_fp16_to_fp32(0x3555) == 0.333251953125f);
    assert_true(k25_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(k25_fp16_to_fp32(0xfbff) == -65504.0f);
    assert_true(k25_fp16_to_fp32(0x0400) == ldexpf(1.0f, -14));     /* smallest normal */
    assert_true(k25_fp16_to_fp32(0x0001) == ldexpf(1.0f, -24));     /* smallest subnormal */
    assert_true(k25_fp16_to_fp32(0x03ff) == ldexpf(1023.0f, -24));  /* largest subnormal */
    assert_true(k25_fp16_to_fp32(0x8001) == -ldexpf(1.0f, -24));
    assert_true(isinf(k25_fp16_to_fp32(0x7c00)) && k25_fp16_to_fp32(0x7c00) > 0);
    assert_true(isinf(k25_fp16_to_fp32(0xfc00)) && k25_fp16_to_fp32(0xfc00) < 0);
    assert_true(isnan(k25_fp16_to_fp32(0x7e00)));
    assert_true(isnan(k25_fp16_to_fp32(0x7c01)));
    assert_true(isnan(k25_fp16_to_fp32(0xfe00)) && signbit(k25_fp16_to_fp32(0xfe00)));
}

static void test_fp16_known_encodes(void **state)
{
    (void)state;
    assert_int_equal(k25_fp32_to_fp16(0.0f), 0x0000);
    assert_int_equal(k25_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(k25_fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(k25_fp32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(k25_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(k25_fp32_to_fp16(ldexpf(1.0f, -14)), 0x0400);
    assert_int_equal(k25_fp32_to_fp16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(k25_fp32_to_fp16(ldexpf(1023.0f, -24)), 0x03ff);
    assert_int_equal(k25_fp32_to_fp16(INFINITY), 0x7c00);
    assert_int_equal(k25_fp32_to_fp16(-INFINITY), 0xfc00);
    assert_true(is_half_nan(k25_fp32_to_fp16(NAN)));
    assert_true(is_half_nan(k25_fp32_to_fp16(-NAN)));
    /* a NaN whose payload lives only in the low float bits must stay NaN */
    uint32_t low_nan = 0x7f800001u;
    float f;
    memcpy(&f, &low_nan, 4);
    assert_true(is_half_nan(k25_fp32_to_fp16(f)));

    /* overflow: 65519.996 rounds down to 65504, 65520 (a tie) up to inf */
    assert_int_equal(k25_fp32_to_fp16(nextafterf(65520.0f, 0)), 0x7bff);
    assert_int_equal(k25_fp32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(k25_fp32_to_fp16(1e6f), 0x7c00);
    assert_int_equal(k25_fp32_to_fp16(-1e30f), 0xfc00);
    assert_int_equal(k25_fp32_to_fp16(FLT_MAX), 0x7c00);

    /* underflow: 2^-25 is a tie between 0 and 2^-24 (even: 0), above it rounds up */
    assert_int_equal(k25_fp32_to_fp16(ldexpf(1.0f, -25)), 0x0000);
    assert_int_equal(k25_fp32_to_fp16(-ldexpf(1.0f, -25)), 0x8000);
    assert_int_equal(k25_fp32_to_fp16(nextafterf(ldexpf(1.0f, -25), 1)), 0x0001);
    assert_int_equal(k25_fp32_to_fp16(ldexpf(1.0f, -26)), 0x0000);
    assert_int_equal(k25_fp32_to_fp16(1e-30f), 0x0000);
    assert_int_equal(k25_fp32_to_fp16(ldexpf(1.0f, -149)), 0x0000); /* float subnormal */
    assert_int_equal(k25_fp32_to_fp16(ldexpf(3.0f, -25)), 0x0002);  /* 1.5 ulp: even 2 */
    assert_int_equal(k25_fp32_to_fp16(ldexpf(5.0f, -25)), 0x0002);  /* 2.5 ulp: even 2 */
    /* largest subnormal + half an ulp: tie between 0x03ff and 0x0400, even is 0x0400 */
    assert_int_equal(k25_fp32_to_fp16(ldexpf(2047.0f, -25)), 0x0400);

    /* normal ties: 1 + 2^-11 is halfway between 0x3c00 and 0x3c01 */
    assert_int_equal(k25_fp32_to_fp16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    assert_int_equal(k25_fp32_to_fp16(1.0f + ldexpf(3.0f, -11)), 0x3c02);
    assert_int_equal(k25_fp32_to_fp16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    assert_int_equal(k25_fp32_to_fp16(1.0f + ldexpf(1.0f, -11) - ldexpf(1.0f, -20)), 0x3c00);
    /* a tie that carries into the exponent: 2047.5 * 2^-10 -> 2.0 */
    assert_int_equal(k25_fp32_to_fp16(ldexpf(4095.0f, -11)), 0x4000);
}

/* Every half decodes like the reference and encodes back to itself. */
static void test_fp16_roundtrip_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = k25_fp16_to_fp32((uint16_t)h);
        float r = ref_fp16((uint16_t)h);
        if (is_half_nan((uint16_t)h)) {
            assert_true(isnan(f));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
            uint16_t back = k25_fp32_to_fp16(f);
            assert_true(is_half_nan(back));
            assert_int_equal(back >> 15, h >> 15);
            continue;
        }
        if (f2u(f) != f2u(r))
            fail_msg("fp16 0x%04x decodes to %a, reference %a", h, (double)f, (double)r);
        uint16_t back = k25_fp32_to_fp16(f);
        if (back != h)
            fail_msg("fp16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

/*
 * Between every pair of adjacent finite positive halves: the midpoint goes
 * to the even one, the floats just below and above it to the nearer one.
 * (The midpoint of two halves needs 12 significant bits: exact in a float.)
 */
static void test_fp16_rounding_all_midpoints(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x7bff + 1; h++) {
        for (int neg = 0; neg < 2; neg++) {
            float lo = k25_fp16_to_fp32((uint16_t)h);
            float hi = h == 0x7bff ? 65536.0f : k25_fp16_to_fp32((uint16_t)(h + 1));
            float mid = (lo + hi) / 2;
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            uint16_t s = neg ? 0x8000 : 0;
            float sg = neg ? -1.0f : 1.0f;
            uint16_t got_mid = k25_fp32_to_fp16(sg * mid);
            uint16_t got_below = k25_fp32_to_fp16(sg * nextafterf(mid, 0));
            uint16_t got_above = k25_fp32_to_fp16(sg * nextafterf(mid, INFINITY));
            if (got_mid != (even | s) || got_below != (h | s) || got_above != ((h + 1) | s))
                fail_msg("around the midpoint of 0x%04x and 0x%04x (sign %d): got "
                         "0x%04x/0x%04x/0x%04x", h, h + 1, neg, got_below, got_mid, got_above);
        }
    }
}

static void test_bf16_known_and_all(void **state)
{
    (void)state;
    assert_true(k25_bf16_to_fp32(0x0000) == 0.0f && !signbit(k25_bf16_to_fp32(0x0000)));
    assert_true(k25_bf16_to_fp32(0x8000) == 0.0f && signbit(k25_bf16_to_fp32(0x8000)));
    assert_true(k25_bf16_to_fp32(0x3f80) == 1.0f);
    assert_true(k25_bf16_to_fp32(0xc040) == -3.0f);
    assert_true(k25_bf16_to_fp32(0x3eab) == 0.333984375f);
    assert_true(k25_bf16_to_fp32(0x7f7f) == 0x1.fep127f);           /* largest finite */
    assert_true(k25_bf16_to_fp32(0x0080) == ldexpf(1.0f, -126));    /* smallest normal */
    assert_true(k25_bf16_to_fp32(0x0001) == ldexpf(1.0f, -133));    /* smallest subnormal */
    assert_true(isinf(k25_bf16_to_fp32(0x7f80)) && k25_bf16_to_fp32(0x7f80) > 0);
    assert_true(isinf(k25_bf16_to_fp32(0xff80)) && k25_bf16_to_fp32(0xff80) < 0);
    assert_true(isnan(k25_bf16_to_fp32(0x7fc0)));
    assert_true(isnan(k25_bf16_to_fp32(0x7f81)));

    for (uint32_t h = 0; h < 65536; h++) {
        float f = k25_bf16_to_fp32((uint16_t)h);
        float r = ref_bf16((uint16_t)h);
        if (isnan(r)) {
            assert_true(isnan(f));
            assert_int_equal(f2u(f), h << 16); /* payload and sign kept */
            continue;
        }
        if (f2u(f) != f2u(r))
            fail_msg("bf16 0x%04x decodes to %a, reference %a", h, (double)f, (double)r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_known_decodes),
        cmocka_unit_test(test_fp16_known_encodes),
        cmocka_unit_test(test_fp16_roundtrip_all),
        cmocka_unit_test(test_fp16_rounding_all_midpoints),
        cmocka_unit_test(test_bf16_known_and_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
