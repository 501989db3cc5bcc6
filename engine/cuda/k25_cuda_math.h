/*
 * k25_cuda_math.h - the per-element arithmetic of the CUDA kernels, as
 * __host__ __device__ functions, so the code the kernels run is the code
 * tests/test_cuda_host.c checks on the CPU against a double reference and
 * against the CPU backend's own routines (half.c, kvquant.c, attn.h).
 *
 * Usable from C11 when not compiled by nvcc: K25_HD is then `static
 * inline`.  Device code uses the IEEE round-to-nearest intrinsics
 * (__fmul_rn, __fadd_rn, __float2int_rn) where the CPU's expression must
 * not be contracted into an FMA, so quantization codes, SwiGLU and RoPE are
 * bit-identical to the CPU backend's (which compiles with -std=c11, i.e.
 * -ffp-contract=off).
 *
 * Also the host-side arithmetic of the launches: split-KV partitioning,
 * workspace sizes, launch geometry and block-table entries (plain integer
 * functions, tested in every build).
 */
#ifndef K25_CUDA_MATH_H
#define K25_CUDA_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define K25_HD static __host__ __device__ inline
#else
#define K25_HD static inline
#endif

/* ------------------------------------------------------------ IEEE bits */

K25_HD uint32_t k25cm_f2u(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

K25_HD float k25cm_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* a * b, a + b, a - b rounded to nearest, never fused with a neighbour. */
K25_HD float k25cm_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

K25_HD float k25cm_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

K25_HD float k25cm_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/* x rounded to the nearest integer, ties to even (lrintf in the default rounding mode). */
K25_HD int k25cm_rint(float x)
{
#ifdef __CUDA_ARCH__
    return __float2int_rn(x);
#else
    return (int)lrintf(x);
#endif
}

/* IEEE half -> float (exact). */
K25_HD float k25cm_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) /* inf / nan */
        return k25cm_u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float v = k25cm_mul((float)m, 5.9604644775390625e-08f);
        return sign ? -v : v;
    }
    return k25cm_u2f(sign | ((e + 112) << 23) | (m << 13));
}

/* float -> IEEE half, round to nearest even (the CPU's k25_fp32_to_fp16, half.c). */
K25_HD uint16_t k25cm_f2h(float f)
{
    uint32_t x = k25cm_f2u(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* adding 0.5 rounds the mantissa at 2^-24, nearest even */
        float v = k25cm_add(k25cm_u2f(ax), 0.5f);
        return (uint16_t)(sign | (k25cm_f2u(v) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd;
    return (uint16_t)(sign | (ax >> 13));
}

/* bfloat16 -> float (exact). */
K25_HD float k25cm_bf2f(uint16_t h)
{
    return k25cm_u2f((uint32_t)h << 16);
}

/* float -> bfloat16, round to nearest even (NaN kept a NaN). */
K25_HD uint16_t k25cm_f2bf(float f)
{
    uint32_t x = k25cm_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ------------------------------------------------- KV quantization (kvquant.c) */

/* The smallest half >= x. */
K25_HD uint16_t k25cm_half_up(float x)
{
    uint16_t h = k25cm_f2h(x);
    if (k25cm_h2f(h) >= x)
        return h;
    if (h == 0x8000 || h == 0x0000)
        return 0x0001;
    return (h & 0x8000) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
}

/* The largest half <= x. */
K25_HD uint16_t k25cm_half_down(float x)
{
    uint16_t h = k25cm_f2h(x);
    if (k25cm_h2f(h) <= x)
        return h;
    if (h == 0x0000 || h == 0x8000)
        return 0x8001;
    return (h & 0x8000) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}

/* Scale and zero (halves, and as floats) of values in [mn, mx] on qmax steps; inv = 1/scale (0 if none). */
K25_HD void k25cm_kvq_grid(float mn, float mx, int qmax, uint16_t *s16, uint16_t *z16, float *zf, float *inv)
{
    *z16 = k25cm_half_down(mn);
    *zf = k25cm_h2f(*z16);
    float s = k25cm_sub(mx, *zf) / (float)qmax;
    *s16 = s > 0 ? k25cm_half_up(s) : 0;
    float sf = k25cm_h2f(*s16);
    *inv = sf > 0 ? 1.0f / sf : 0.0f;
}

/* The code of x on the grid (zero zf, 1/scale inv), clamped to [0, qmax]. */
K25_HD int k25cm_kvq_code(float x, float zf, float inv, int qmax)
{
    int q = k25cm_rint(k25cm_mul(k25cm_sub(x, zf), inv));
    return q < 0 ? 0 : q > qmax ? qmax : q;
}

/* x = q * scale + zero (the CPU's dequantization, unfused). */
K25_HD float k25cm_kvq_value(int q, float scale, float zero)
{
    return k25cm_add(k25cm_mul((float)q, scale), zero);
}

/* Code of channel d of a packed row (int8: one byte; int4: even channel in the low nibble). */
K25_HD int k25cm_kvq_get(const uint8_t *row, int d, int bits)
{
    return bits == 8 ? row[d] : (row[d >> 1] >> ((d & 1) * 4)) & 15;
}

/* The byte holding channels 2b (low nibble) and 2b + 1 (high) of an int4 row. */
K25_HD uint8_t k25cm_kvq_pack4(int lo, int hi)
{
    return (uint8_t)(lo | (hi << 4));
}

/* ------------------------------------------------ KV cache addressing */

/*
 * The KV pool's layout (engine/kvcache.h) as the kernels read it: the
 * fields of struct k25_kv_pool they need, in bytes.  Block = [layer][K|V]
 * [kv_head][slot][head_dim] + (int8/int4) key scales [kv_head][slot/group]
 * [scale|zero][head_dim] at ks_off and value scales [kv_head][slot]
 * [head_dim/vgroup][scale|zero] at vs_off, per layer; `lay` below is the
 * address of one layer of one block.  The int8/int4 fp16 residual of a
 * layer: [K|V][kv_head][res_cap][head_dim].
 */
struct k25cu_kv_layout {
    int block_size, n_kv_heads, head_dim, bits; /* bits 0: fp32/fp16 rows */
    int elem_bytes;                             /* 4 or 2 when bits == 0 */
    int group, vgroup, res_cap;
    size_t row_bytes, head_bytes, half_bytes, ks_off, vs_off, ks_head_bytes, vs_head_bytes;
};

/* The stored row of slot offset o (slot % block_size) of KV head g, keys (kv 0) or values (kv 1). */
K25_HD const uint8_t *k25cm_kv_row(const struct k25cu_kv_layout *L, const uint8_t *lay, int kv, int g, int o)
{
    return lay + (kv ? L->half_bytes : 0) + (size_t)g * L->head_bytes + (size_t)o * L->row_bytes;
}

/* int8/int4: the key group's scale row (zero row head_dim halves later) of slot offset o. */
K25_HD const uint16_t *k25cm_kv_kscale(const struct k25cu_kv_layout *L, const uint8_t *lay, int g, int o)
{
    return (const uint16_t *)(lay + L->ks_off + (size_t)g * L->ks_head_bytes) + (size_t)(o / L->group) * 2 * L->head_dim;
}

/* int8/int4: the (scale, zero) pairs of slot offset o's value groups. */
K25_HD const uint16_t *k25cm_kv_vscale(const struct k25cu_kv_layout *L, const uint8_t *lay, int g, int o)
{
    return (const uint16_t *)(lay + L->vs_off + (size_t)g * L->vs_head_bytes) + (size_t)o * (L->head_dim / L->vgroup) * 2;
}

/* int8/int4: residual row idx of KV head g (res: the layer's residual). */
K25_HD const uint16_t *k25cm_kv_res_row(const struct k25cu_kv_layout *L, const uint16_t *res, int kv, int g, int idx)
{
    return res + (((size_t)kv * L->n_kv_heads + g) * L->res_cap + (size_t)idx) * L->head_dim;
}

/* Channel d of a row stored in the block as fp32 / fp16 (bits 0) or as codes (int8/int4,
 * dequantized with the slot's key scales or value scales). */
K25_HD float k25cm_kv_elem(const struct k25cu_kv_layout *L, const uint8_t *row, const uint16_t *sc, int kv, int d)
{
    if (L->bits == 0)
        return L->elem_bytes == 4 ? ((const float *)row)[d] : k25cm_h2f(((const uint16_t *)row)[d]);
    int q = k25cm_kvq_get(row, d, L->bits);
    if (!kv)
        return k25cm_kvq_value(q, k25cm_h2f(sc[d]), k25cm_h2f(sc[L->head_dim + d]));
    int k = d / L->vgroup;
    return k25cm_kvq_value(q, k25cm_h2f(sc[2 * k]), k25cm_h2f(sc[2 * k + 1]));
}

/*
 * The closing group's keys, one code byte (int8: channel `byte`; int4:
 * channels 2 byte, 2 byte + 1) of KV head g: min and max over the group's
 * residual rows, the grid, the codes of every token, as
 * k25_kvq_quant_keys (kvquant.c).  lay: the block's layer, o: the group's
 * first slot offset.  One GPU thread per (g, byte).
 */
K25_HD void k25cm_kvq_key_byte(const struct k25cu_kv_layout *L, const uint16_t *res, uint8_t *lay, int o, int g,
                               int byte)
{
    const int hd = L->head_dim, G = L->group, qmax = (1 << L->bits) - 1, per = L->bits == 8 ? 1 : 2;
    const uint16_t *rk = k25cm_kv_res_row(L, res, 0, g, 0);
    uint8_t *kq = (uint8_t *)k25cm_kv_row(L, lay, 0, g, o);
    uint16_t *ksz = (uint16_t *)k25cm_kv_kscale(L, lay, g, o);
    float zf[2] = {0, 0}, inv[2] = {0, 0};
    for (int c = 0; c < per; c++) {
        int d = byte * per + c;
        float mn = k25cm_h2f(rk[d]), mx = mn;
        for (int t = 1; t < G; t++) {
            float x = k25cm_h2f(rk[(size_t)t * hd + d]);
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
        }
        uint16_t s16, z16;
        k25cm_kvq_grid(mn, mx, qmax, &s16, &z16, &zf[c], &inv[c]);
        ksz[d] = s16;
        ksz[hd + d] = z16;
    }
    for (int t = 0; t < G; t++) {
        const uint16_t *x = rk + (size_t)t * hd + (size_t)byte * per;
        int q0 = k25cm_kvq_code(k25cm_h2f(x[0]), zf[0], inv[0], qmax);
        kq[(size_t)t * L->row_bytes + byte] =
            per == 1 ? (uint8_t)q0 : k25cm_kvq_pack4(q0, k25cm_kvq_code(k25cm_h2f(x[1]), zf[1], inv[1], qmax));
    }
}

/*
 * The closing group's values, one (token t, value group k) of KV head g:
 * min and max over the group's channels, the grid, the codes, as
 * k25_kvq_quant_value_row.  int4 value groups are even (kvcache.c checks),
 * so a group owns whole bytes.  One GPU thread per (g, t, k).
 */
K25_HD void k25cm_kvq_value_group(const struct k25cu_kv_layout *L, const uint16_t *res, uint8_t *lay, int o, int g,
                                  int t, int k)
{
    const int vg = L->vgroup, g0 = k * vg, qmax = (1 << L->bits) - 1;
    const uint16_t *x = k25cm_kv_res_row(L, res, 1, g, t);
    uint8_t *q = (uint8_t *)k25cm_kv_row(L, lay, 1, g, o + t);
    uint16_t *vsz = (uint16_t *)k25cm_kv_vscale(L, lay, g, o + t);
    float mn = k25cm_h2f(x[g0]), mx = mn;
    for (int d = g0 + 1; d < g0 + vg; d++) {
        float f = k25cm_h2f(x[d]);
        mn = f < mn ? f : mn;
        mx = f > mx ? f : mx;
    }
    uint16_t s16, z16;
    float zf, inv;
    k25cm_kvq_grid(mn, mx, qmax, &s16, &z16, &zf, &inv);
    vsz[2 * k] = s16;
    vsz[2 * k + 1] = z16;
    if (L->bits == 8)
        for (int d = g0; d < g0 + vg; d++)
            q[d] = (uint8_t)k25cm_kvq_code(k25cm_h2f(x[d]), zf, inv, qmax);
    else
        for (int d = g0; d < g0 + vg; d += 2)
            q[d >> 1] = k25cm_kvq_pack4(k25cm_kvq_code(k25cm_h2f(x[d]), zf, inv, qmax),
                                        k25cm_kvq_code(k25cm_h2f(x[d + 1]), zf, inv, qmax));
}

/* ------------------------------------------------------------ activations */

/* exp(x) for the softmax and SwiGLU: the CPU's k25_fast_expf (attn.h), operation for operation. */
K25_HD float k25cm_fast_expf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = k25cm_sub(k25cm_add(k25cm_mul(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float r = k25cm_sub(x, k25cm_mul(n, 0.693145751953125f));
    r = k25cm_sub(r, k25cm_mul(n, 1.428606765330187e-06f));
    float p = 1.0f / 5040.0f;
    p = k25cm_add(k25cm_mul(p, r), 1.0f / 720.0f);
    p = k25cm_add(k25cm_mul(p, r), 1.0f / 120.0f);
    p = k25cm_add(k25cm_mul(p, r), 1.0f / 24.0f);
    p = k25cm_add(k25cm_mul(p, r), 1.0f / 6.0f);
    p = k25cm_add(k25cm_mul(p, r), 0.5f);
    p = k25cm_add(k25cm_mul(p, r), 1.0f);
    p = k25cm_add(k25cm_mul(p, r), 1.0f);
    return k25cm_mul(p, k25cm_u2f((uint32_t)(((int32_t)n + 127) << 23)));
}

/* silu(g) * u as the CPU computes it: g / (1 + exp(-g)) * u. */
K25_HD float k25cm_swiglu(float g, float u)
{
    return k25cm_mul(g / k25cm_add(1.0f, k25cm_fast_expf(-g)), u);
}

/* RMSNorm's 1 / rms from the row's sum of squares ss (double) over d values. */
K25_HD float k25cm_rms_inv(double ss, int d, float eps)
{
    return (float)(1.0 / sqrt(ss / d + (double)eps));
}

/* One normalized element: x * inv * w, left to right. */
K25_HD float k25cm_rms_apply(float x, float inv, float w)
{
    return k25cm_mul(k25cm_mul(x, inv), w);
}

/* RoPE ("rotate half") of the pair (a, b) = (v[j], v[j + hd/2]) by angle (c, s). */
K25_HD void k25cm_rope_pair(float a, float b, float c, float s, float *ra, float *rb)
{
    *ra = k25cm_sub(k25cm_mul(a, c), k25cm_mul(b, s));
    *rb = k25cm_add(k25cm_mul(b, c), k25cm_mul(a, s));
}

/* The angle of position pos at inverse frequency f, in double (positions reach 256K+). */
K25_HD double k25cm_rope_angle(int32_t pos, double f)
{
    return (double)pos * f;
}

/* --------------------------------------------------------- online softmax */

/*
 * A row's running state: max m of the scores seen, sum l of exp(s - m).
 * Folding a tile whose visible maximum is tmax: the new max, and the factor
 * alpha that rescales the old l and output accumulator (0 when nothing was
 * seen before, so -inf - -inf never happens).
 */
struct k25cm_sm {
    float m, l;
};

K25_HD float k25cm_sm_rescale(struct k25cm_sm *st, float tmax)
{
    if (!(tmax > st->m)) /* also tmax = -inf: nothing visible in the tile */
        return 1.0f;
    float alpha = st->m == -INFINITY ? 0.0f : k25cm_fast_expf(k25cm_sub(st->m, tmax));
    st->l = k25cm_mul(st->l, alpha);
    st->m = tmax;
    return alpha;
}

/* exp(s - m) of one visible score after k25cm_sm_rescale (0 for a masked one). */
K25_HD float k25cm_sm_p(const struct k25cm_sm *st, float s, int visible)
{
    return visible ? k25cm_fast_expf(k25cm_sub(s, st->m)) : 0.0f;
}

/*
 * Split-KV merge: folds partial b (its m, l; accumulator scaled by its own
 * max) into the running a.  wa, wb are the factors each accumulator gets.
 * Splits are folded in split order 0, 1, 2, ... (fixed), so the result is
 * the same every run.
 */
K25_HD void k25cm_merge(struct k25cm_sm *a, float mb, float lb, float *wa, float *wb)
{
    if (lb <= 0.0f || mb == -INFINITY) { /* b saw nothing */
        *wa = 1.0f, *wb = 0.0f;
        return;
    }
    if (a->l <= 0.0f || a->m == -INFINITY) {
        *wa = 0.0f, *wb = 1.0f;
        a->m = mb, a->l = lb;
        return;
    }
    float m = a->m > mb ? a->m : mb;
    *wa = k25cm_fast_expf(k25cm_sub(a->m, m));
    *wb = k25cm_fast_expf(k25cm_sub(mb, m));
    a->l = k25cm_add(k25cm_mul(a->l, *wa), k25cm_mul(lb, *wb));
    a->m = m;
}

/* ------------------------------------------------ launch arithmetic (host) */

/* Tiles of the attention kernel: KV slots per tile and query rows per block. */
#define K25CU_ATTN_BK 32
#define K25CU_ATTN_ROWS 16       /* 4 warps x 4 rows */
#define K25CU_ATTN_THREADS 128
#define K25CU_ATTN_MAX_HD 128
#define K25CU_SPLIT_MAX 16       /* most splits of one decode row */
#define K25CU_SPLIT_MIN_TILES 16 /* fewest tiles a split gets */

K25_HD int64_t k25cm_cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/*
 * Splits of a decode row over n_kv slots: one per K25CU_SPLIT_MIN_TILES
 * tiles, at most K25CU_SPLIT_MAX.  A function of the row's KV length only
 * (not of the batch or the GPU), so a row's result does not depend on what
 * shares its step.
 */
K25_HD int k25cm_split_count(int n_kv)
{
    int64_t tiles = k25cm_cdiv(n_kv, K25CU_ATTN_BK);
    int64_t n = tiles / K25CU_SPLIT_MIN_TILES;
    return n < 1 ? 1 : n > K25CU_SPLIT_MAX ? K25CU_SPLIT_MAX : (int)n;
}

/* Tiles [*t0, *t1) of split i of n_split over n_tiles: near-equal whole tiles, in order. */
K25_HD void k25cm_split_range(int n_tiles, int n_split, int i, int *t0, int *t1)
{
    *t0 = (int)((int64_t)i * n_tiles / n_split);
    *t1 = (int)((int64_t)(i + 1) * n_tiles / n_split);
}

/* Floats of one split partial of one row: m, l, then head_dim accumulator values. */
K25_HD size_t k25cm_part_floats(int head_dim)
{
    return (size_t)head_dim + 2;
}

/* Workspace bytes of the split partials: rows x n_kv_heads x K25CU_SPLIT_MAX partials. */
K25_HD size_t k25cm_part_bytes(int64_t rows, int n_kv_heads, int head_dim)
{
    return sizeof(float) * (size_t)rows * (size_t)n_kv_heads * K25CU_SPLIT_MAX * k25cm_part_floats(head_dim);
}

/* Attention work items of a sequence with n_q queries and `group` query heads per KV head. */
K25_HD int k25cm_attn_items(int n_q, int group)
{
    return (int)k25cm_cdiv((int64_t)n_q * group, K25CU_ATTN_ROWS);
}

/* Shared memory of the attention kernel: K tile (rows padded by one float), V tile, query rows. */
K25_HD size_t k25cm_attn_smem(int head_dim)
{
    return sizeof(float) * ((size_t)K25CU_ATTN_BK * (head_dim + 1) + (size_t)K25CU_ATTN_BK * head_dim +
                            (size_t)K25CU_ATTN_ROWS * head_dim);
}

/* Blocks of a 1-D launch of n threads, `block` a block. */
K25_HD unsigned k25cm_grid1(int64_t n, int block)
{
    return n <= 0 ? 1u : (unsigned)k25cm_cdiv(n, block);
}

/*
 * Block-table entry b of a sequence for layer l: the device address of
 * layer l of its block ids[b] (block buffers at base[id], layer_bytes
 * apart), as the attention and KV-write kernels read it.
 */
K25_HD uint64_t k25cm_block_entry(const uint64_t *base, const int32_t *ids, int b, int l, size_t layer_bytes)
{
    return base[ids[b]] + (uint64_t)l * layer_bytes;
}

/* GEMV rows per block and the M templates the kernel is built for (m rounds up to one). */
#define K25CU_GEMV_MAX_M 16
#define K25CU_GEMV_WARPS 4

K25_HD int k25cm_gemv_mtile(int m)
{
    return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : m <= 8 ? 8 : 16;
}

/* Whether the GEMV kernel may read weight rows 16 bytes at a time: the matrix and every row start
 * 16-byte aligned (row_bytes a multiple of 16) and k is a whole number of 16-byte vectors. */
K25_HD int k25cm_gemv_vec(uint64_t w_addr, size_t row_bytes, int k, int elem_bytes)
{
    return w_addr % 16 == 0 && row_bytes % 16 == 0 && ((size_t)k * elem_bytes) % 16 == 0;
}

#endif /* K25_CUDA_MATH_H */
