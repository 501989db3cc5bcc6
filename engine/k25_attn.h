/*
 * k25_attn.h - public interface of the engine's attention kernels: the job
 * an implementation runs, the KV view it reads, and the table of
 * implementations (attn_impl.c: ChunkedAttention, flash2, naive).
 *
 * What the attention microbenchmark (`k25 attn-bench`, harness/attnbench.c)
 * times without the rest of the engine.  The kernels' shared helpers stay
 * in the engine's internal attn.h, which includes this header.
 */
#ifndef K25_ATTN_PUBLIC_H
#define K25_ATTN_PUBLIC_H

#include "k25.h"

struct k25_mem_acct; /* alloc.c: where kernel scratch is charged (NULL: the process only) */

/*
 * The int8/int4 quantizers that produce the layout described below
 * (engine/cpu/kvquant.c; asymmetric min/max, IEEE-half scale and zero, error
 * at most scale / 2 per value).  Bytes of one quantized row of hd values:
 */
static inline size_t k25_kvq_row_bytes(int hd, int bits)
{
    return (size_t)hd * (size_t)bits / 8;
}
/* Keys, per channel over a group of G tokens: x[G][x_stride] (hd channels
 * used) -> q rows [G][row_bytes] and sz[2][hd] (scale row, zero row). */
void k25_kvq_quant_keys(const float *x, int x_stride, int G, int hd, int bits, uint8_t *q, uint16_t *sz);
/* Values, per token over groups of vg channels: one row x[hd] -> q
 * (row_bytes) and sz[hd/vg][2] (scale, zero). */
void k25_kvq_quant_value_row(const float *x, int hd, int vg, int bits, uint8_t *q, uint16_t *sz);

/*
 * The KV cache of one sequence for one layer, as the attention kernel
 * reads it.  Slots, not positions: slot i of a sequence is its i-th kept
 * KV entry.  Without compression slot = position; after pruning/merging
 * the kept slots stay in position order (each keeps its original RoPE
 * rotation, applied before the key was stored), so the causal mask in slot
 * space is exact: every compacted slot precedes every later query, and the
 * uncompressed tail is contiguous (see kvcache.h).
 *
 * Block b holds slots [b*block_size, (b+1)*block_size); its keys for KV
 * head g start at k_blocks[b] + g*block_size*head_dim elements,
 * token-major ([kv_head][token][head_dim]); values likewise.  Elements are
 * float (K25_DTYPE_FP32), IEEE half (K25_DTYPE_FP16), or quantized
 * (K25_DTYPE_INT8: one byte; K25_DTYPE_INT4: two per byte, even channel in
 * the low nibble) with asymmetric scales:
 *   keys, per channel over groups of `group` slots:
 *     k_blocks[b] + ks_off + g*(block_size/group)*2*head_dim*2 bytes:
 *     [group][scale|zero][head_dim] IEEE half;
 *   values, per token over groups of `vgroup` channels:
 *     k_blocks[b] + vs_off + g*block_size*(head_dim/vgroup)*2*2 bytes:
 *     [token][head_dim/vgroup][scale|zero] IEEE half;
 *   x = q * scale + zero.
 * Quantized views hold slots [0, n_quant) in the blocks and slots
 * [n_quant, n_tokens) in fp16 residual rows res_k/res_v
 * ([kv_head][res_cap][head_dim]).
 * A compressed sequence has slot metadata (has_meta): one byte per slot,
 * the tokens it stands for (1 unless merged, at most 255), at k_blocks[b]
 * + meta_off, [kv_head][block_size]; ln(count) is added to the slot's
 * attention logit (k25_kv_logc).
 * Fields after v_blocks are zero for plain fp32/fp16 views.
 */
struct k25_kv_view {
    int n_tokens;
    int block_size;
    int n_kv_heads;
    int head_dim;
    enum k25_dtype dtype;
    const void *const *k_blocks; /* [n_blocks] */
    const void *const *v_blocks; /* [n_blocks] */
    /* int8/int4 */
    int group, vgroup;
    size_t ks_off, vs_off;
    int n_quant;
    const uint16_t *res_k, *res_v;
    int res_cap;
    /* compression */
    bool has_meta;
    size_t meta_off;
    /* scoring (job.score): only slots >= score_k0 need scores (earlier ones have
     * passed through compression; their columns are left as they are), and
     * only the last score_window queries of a job score (0: every query) */
    int score_k0;
    int score_window;
};

/*
 * One attention job: n_q consecutive queries of one sequence at slots
 * q_pos0 .. q_pos0+n_q-1 attend causally to the sequence's KV (which
 * already holds their own keys): query i sees slots 0 .. q_pos0+i.
 * score (optional, [n_kv_heads][q_pos0+n_q], zeroed by the caller) receives
 * the attention each slot got, summed over the job's queries and the query
 * heads of its KV head (softmax probabilities), for compression scoring;
 * only columns >= kv.score_k0, and only from the last kv.score_window
 * queries when that is set (k25_attn_score_q0).
 */
struct k25_attn_job {
    const float *q;   /* [n_q][q_stride], heads at [h*head_dim], RoPE applied */
    int q_stride;
    int n_q;
    int q_pos0;
    struct k25_kv_view kv;
    float *out;       /* [n_q][out_stride], heads at [h*head_dim] */
    int out_stride;
    float *score;     /* NULL or [n_kv_heads][q_pos0 + n_q] */
};

/*
 * An attention implementation: runs every job; n_heads query heads share
 * n_kv_heads KV heads; scores are scaled by scale before the softmax.
 * Scratch comes from the tracking allocator (K25_MEM_ATTN_SCRATCH),
 * charged to acct.
 */
typedef void (*k25_attention_fn)(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                                 struct k25_mem_acct *acct);

/* Attention scratch bytes of one call (the arguments of k25_attn_scratch_bytes in k25.h). */
typedef int64_t (*k25_attn_scratch_fn)(int n_heads, int n_kv_heads, int head_dim, int block_size,
                                       enum k25_dtype dtype, int n_seqs, int64_t n_q, int64_t n_kv,
                                       int threads);

/* One entry of the implementation table (attn_impl.c). */
struct k25_attn_impl_desc {
    enum k25_attn_impl id;
    const char *name;
    k25_attention_fn run;
    k25_attn_scratch_fn scratch_bytes;
    /* reads slot metadata (merged slots' ln count): can run on a compressed cache */
    bool compression;
};

/* The entry for impl (never NULL for a valid impl; asserts otherwise). */
const struct k25_attn_impl_desc *k25_attn_impl_get(enum k25_attn_impl impl);

#endif /* K25_ATTN_PUBLIC_H */
