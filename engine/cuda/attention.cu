/*
 * attention.cu - attention over the paged KV cache for every KV dtype:
 * one tiled online-softmax kernel for prefill chunks and decode, plus the
 * fixed-order merge of split-KV decode.
 *
 * Work.  A step's rows are (query, query head of a KV head's group) pairs;
 * an item is up to K25CU_ATTN_ROWS (16) rows of one sequence, so the query
 * heads that share a KV head read each K/V tile once.  Grid: (item, KV
 * head, split).  Block: 4 warps, each owning 4 rows.
 *
 * Tiles.  K25CU_ATTN_BK (32) slots at a time are loaded into shared
 * memory as fp32, dequantized on the way for int8/int4 (fused: codes,
 * scales and zero points are read from the block, the residual's fp16
 * rows past n_quant), keys padded by one float per row (no bank
 * conflicts).  Lane j of a warp scores key j of the tile against each of
 * its rows (dot over head_dim in fp32, times scale), the causal mask
 * aligned bottom-right: the query at slot q_slot0 + i sees slots
 * 0 .. q_slot0 + i, which with a chunk of n_q queries over n_tokens slots
 * is the lower-right triangle.  The online softmax (k25cm_sm_rescale,
 * k25cm_sm_p) keeps each row's max and sum, fp32; P.V accumulates into
 * head_dim / 32 registers per lane per row.
 *
 * Split-KV.  Sequences with one query (decode) split their KV into
 * k25cm_split_count(n_kv) parts of whole tiles (a function of the length
 * alone, not of the batch: a row's result is batch-invariant); each part
 * writes (m, l, acc) and the merge kernel folds parts 0, 1, 2, ... in that
 * order (k25cm_merge), so results are deterministic.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define BK K25CU_ATTN_BK
#define ROWS_PER_WARP 4
#define MAX_C (K25CU_ATTN_MAX_HD / 32) /* accumulator values per lane per row */

/* Slot j of the tile as the loaders need it (computed once per tile by the first BK threads). */
struct slot_src {
    const uint8_t *k, *v;      /* stored row (block) or fp16 residual row; NULL past the row range */
    const uint16_t *ksz, *vsz; /* int8/int4 rows in blocks: key scale row, value (scale, zero) pairs */
};

/* Channel d of a tile slot's key (kv 0) or value (kv 1) as fp32, dequantized where stored so. */
__device__ static inline float load_elem(const struct k25cu_kv_layout &L, const struct slot_src &ss, int kv, int d)
{
    const uint8_t *row = kv ? ss.v : ss.k;
    if (L.bits && !ss.ksz) /* a residual row */
        return k25cm_h2f(((const uint16_t *)row)[d]);
    return k25cm_kv_elem(&L, row, kv ? ss.vsz : ss.ksz, kv, d);
}

template <int HD>
__global__ __launch_bounds__(K25CU_ATTN_THREADS) void attn_kernel(struct k25cu_attn_args a)
{
    constexpr int C = HD / 32;
    __shared__ float Ks[BK][HD + 1];
    __shared__ float Vs[BK][HD];
    __shared__ float Qs[K25CU_ATTN_ROWS][HD];
    __shared__ struct slot_src src[BK];

    const struct k25cu_attn_item it = a.items[blockIdx.x];
    const struct k25cu_attn_seq sq = a.seqs[it.seq];
    const int g = blockIdx.y, sp = blockIdx.z;
    const int n_split = sq.n_q == 1 ? sq.n_split : 1;
    if (sp >= n_split)
        return;
    const struct k25cu_kv_layout &L = a.kv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    /* rows of this block: query r / group, head g * group + r % group */
    const int last_q = (it.r0 + it.nr - 1) / a.group;
    const int kv_end = min(sq.n_tokens, sq.q_slot0 + last_q + 1);
    const int n_tiles = (int)k25cm_cdiv(kv_end, BK);
    int t0, t1;
    k25cm_split_range(n_tiles, n_split, sp, &t0, &t1);

    int qslot[ROWS_PER_WARP];
    bool live[ROWS_PER_WARP];
    #pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
        int lr = warp * ROWS_PER_WARP + i, r = it.r0 + lr;
        live[i] = lr < it.nr;
        qslot[i] = live[i] ? sq.q_slot0 + r / a.group : -1;
    }
    for (int idx = threadIdx.x; idx < K25CU_ATTN_ROWS * HD; idx += K25CU_ATTN_THREADS) {
        int lr = idx / HD, d = idx % HD, r = it.r0 + lr;
        float v = 0.0f;
        if (lr < it.nr) {
            int qi = r / a.group, h = g * a.group + r % a.group;
            v = a.q[(size_t)(sq.q_row0 + qi) * a.q_stride + (size_t)h * HD + d];
        }
        Qs[lr][d] = v;
    }

    struct k25cm_sm st[ROWS_PER_WARP];
    float acc[ROWS_PER_WARP][C];
    #pragma unroll
    for (int i = 0; i < ROWS_PER_WARP; i++) {
        st[i].m = -INFINITY;
        st[i].l = 0.0f;
        for (int c = 0; c < C; c++)
            acc[i][c] = 0.0f;
    }

    for (int t = t0; t < t1; t++) {
        const int k0 = t * BK;
        __syncthreads(); /* the previous tile is consumed (and Qs written, first time) */
        if (threadIdx.x < BK) {
            int s = k0 + threadIdx.x;
            struct slot_src ss = {NULL, NULL, NULL, NULL};
            if (s < kv_end) {
                if (L.bits && s >= sq.n_quant) {
                    ss.k = (const uint8_t *)(sq.res_k + ((size_t)g * L.res_cap + (size_t)(s - sq.n_quant)) * HD);
                    ss.v = (const uint8_t *)(sq.res_v + ((size_t)g * L.res_cap + (size_t)(s - sq.n_quant)) * HD);
                } else {
                    const uint8_t *lay = a.table[sq.table0 + s / L.block_size];
                    const int o = s % L.block_size;
                    ss.k = k25cm_kv_row(&L, lay, 0, g, o);
                    ss.v = k25cm_kv_row(&L, lay, 1, g, o);
                    if (L.bits) {
                        ss.ksz = k25cm_kv_kscale(&L, lay, g, o);
                        ss.vsz = k25cm_kv_vscale(&L, lay, g, o);
                    }
                }
            }
            src[threadIdx.x] = ss;
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < BK * HD; idx += K25CU_ATTN_THREADS) {
            int j = idx / HD, d = idx % HD;
            const struct slot_src ss = src[j];
            float kv = 0.0f, vv = 0.0f;
            if (ss.k) {
                kv = load_elem(L, ss, 0, d);
                vv = load_elem(L, ss, 1, d);
            }
            Ks[j][d] = kv;
            Vs[j][d] = vv;
        }
        __syncthreads();

        const int slot = k0 + lane;
        #pragma unroll
        for (int i = 0; i < ROWS_PER_WARP; i++) {
            if (!live[i]) /* uniform across the warp */
                continue;
            const float *qr = Qs[warp * ROWS_PER_WARP + i];
            float sc = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++)
                sc = fmaf(qr[d], Ks[lane][d], sc);
            sc *= a.scale;
            const int vis = slot <= qslot[i] && slot < kv_end;
            float tmax = vis ? sc : -INFINITY;
            for (int o = 16; o > 0; o >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
            const float alpha = k25cm_sm_rescale(&st[i], tmax);
            const float p = st[i].m == -INFINITY ? 0.0f : k25cm_sm_p(&st[i], sc, vis);
            float ps = p;
            for (int o = 16; o > 0; o >>= 1)
                ps += __shfl_xor_sync(0xffffffffu, ps, o);
            st[i].l += ps;
#pragma unroll
            for (int c = 0; c < C; c++)
                acc[i][c] *= alpha;
            for (int j = 0; j < BK; j++) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int c = 0; c < C; c++)
                    acc[i][c] = fmaf(pj, Vs[j][lane + 32 * c], acc[i][c]);
            }
        }
    }

    #pragma unroll

    for (int i = 0; i < ROWS_PER_WARP; i++) {
        if (!live[i])
            continue;
        const int r = it.r0 + warp * ROWS_PER_WARP + i, qi = r / a.group, h = g * a.group + r % a.group;
        if (n_split == 1) {
            const float inv = st[i].l > 0.0f ? 1.0f / st[i].l : 0.0f;
            float *o = a.out + (size_t)(sq.q_row0 + qi) * a.out_stride + (size_t)h * HD;
            for (int c = 0; c < C; c++)
                o[lane + 32 * c] = acc[i][c] * inv;
        } else {
            const size_t pf = k25cm_part_floats(HD);
            float *pp = a.part + (((size_t)(it.part_row + warp * ROWS_PER_WARP + i) * L.n_kv_heads + g) *
                                      K25CU_SPLIT_MAX + sp) * pf;
            if (lane == 0)
                pp[0] = st[i].m, pp[1] = st[i].l;
            for (int c = 0; c < C; c++)
                pp[2 + lane + 32 * c] = acc[i][c];
        }
    }
}

/* One warp per (item row, KV head) of a split sequence: folds its parts in order. */
template <int HD>
__global__ __launch_bounds__(32) void merge_kernel(struct k25cu_attn_args a)
{
    constexpr int C = HD / 32;
    const struct k25cu_attn_item it = a.items[blockIdx.x];
    const struct k25cu_attn_seq sq = a.seqs[it.seq];
    const int g = blockIdx.y, lr = blockIdx.z, lane = threadIdx.x;
    if (sq.n_q != 1 || sq.n_split <= 1 || lr >= it.nr)
        return;
    const int r = it.r0 + lr, h = g * a.group + r % a.group;
    const size_t pf = k25cm_part_floats(HD);
    const float *pp = a.part + ((size_t)(it.part_row + lr) * a.kv.n_kv_heads + g) * K25CU_SPLIT_MAX * pf;
    struct k25cm_sm st = {-INFINITY, 0.0f};
    float acc[C];
#pragma unroll
    for (int c = 0; c < C; c++)
        acc[c] = 0.0f;
    for (int sp = 0; sp < sq.n_split; sp++, pp += pf) {
        float wa, wb;
        k25cm_merge(&st, pp[0], pp[1], &wa, &wb);
#pragma unroll
        for (int c = 0; c < C; c++)
            acc[c] = k25cm_add(k25cm_mul(acc[c], wa), k25cm_mul(pp[2 + lane + 32 * c], wb));
    }
    const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    float *o = a.out + (size_t)sq.q_row0 * a.out_stride + (size_t)h * HD;
    for (int c = 0; c < C; c++)
        o[lane + 32 * c] = acc[c] * inv;
}

template <int HD> static bool launch(struct k25cu_err *e, cudaStream_t s, const struct k25cu_attn_args *a)
{
    dim3 grid((unsigned)a->n_items, (unsigned)a->kv.n_kv_heads, (unsigned)a->max_split);
    attn_kernel<HD><<<grid, K25CU_ATTN_THREADS, 0, s>>>(*a);
    if (!K25_LAUNCHED(e))
        return false;
    if (a->max_split > 1) {
        dim3 mg((unsigned)a->n_items, (unsigned)a->kv.n_kv_heads, K25CU_ATTN_ROWS);
        merge_kernel<HD><<<mg, 32, 0, s>>>(*a);
        if (!K25_LAUNCHED(e))
            return false;
    }
    return true;
}

extern "C" bool k25cu_attention(struct k25cu_err *e, cudaStream_t s, const struct k25cu_attn_args *a)
{
    if (a->n_items <= 0)
        return true;
    switch (a->kv.head_dim) {
    case 32: return launch<32>(e, s, a);
    case 64: return launch<64>(e, s, a);
    case 96: return launch<96>(e, s, a);
    case 128: return launch<128>(e, s, a);
    default: break;
    }
    return k25cu_note(e, false, "k25", a->kv.head_dim, "head_dim not built (32, 64, 96, 128)", "k25cu_attention",
                      __FILE__, __LINE__);
}
