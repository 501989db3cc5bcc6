/*
 * baselines.h - reference attention implementations the engine's
 * ChunkedAttention is compared against (DESIGN.md §2, issue 4).  Both take
 * the same jobs as the engine's kernel (engine/backend.h), so the engine
 * runs with any of them (`--attention flash2|naive`) and `k25 attn-bench`
 * times them side by side.  They are part of libk25.
 */
#ifndef K25_BASELINES_H
#define K25_BASELINES_H

#include "backend.h"

/*
 * FlashAttention-2-style attention: per (job, query head, tile of BR
 * queries), KV tiles of BC tokens with an online softmax; causal tiles
 * past the diagonal are skipped; no N x N matrix.  Parallel over (job,
 * head, query tile) only, as FA2 is: one query head at a time reads its KV
 * head (no GQA stacking), and a decode step is one item per head (no
 * split along the KV length).
 */
void k25_baseline_flash2_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale);

/*
 * Naive attention, as a framework's eager code does it: gathers the paged
 * cache into contiguous fp32 K and V [kv_head][token][head_dim], computes
 * the full score matrix S [head][query][key] of a job, masks, softmaxes
 * (libm expf) and multiplies by V.  Memory grows with queries x keys.
 */
void k25_baseline_naive_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale);

/* Attention scratch bytes of one call (same arguments as k25_attn_scratch_bytes). */
int64_t k25_flash2_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int block_size,
                                 enum k25_dtype dtype, int n_seqs, int64_t n_q, int64_t n_kv,
                                 int threads);
int64_t k25_naive_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int n_q, int64_t n_kv);

#endif
