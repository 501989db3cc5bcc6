/*
 * baselines.h - reference attention implementations the engine's
 * ChunkedAttention is compared against (docs/attention.md, issue 4).
 * Both take the same jobs as the engine's kernel (engine/cpu/attn.h) and
 * register in the engine's implementation table (engine/cpu/attn_impl.c) as
 * k25_attn_flash2 and k25_attn_naive, so the engine runs with any of them
 * (`--attention flash2|naive`) and `k25 attn-bench` times them side by
 * side.  They are part of libk25 and depend on engine/cpu/attn.h only.
 */
#ifndef K25_BASELINES_H
#define K25_BASELINES_H

#include "attn.h"

/*
 * FlashAttention-2-style attention: per (job, query head, tile of BR
 * queries), KV tiles of BC tokens with an online softmax; causal tiles
 * past the diagonal are skipped; no N x N matrix.  Parallel over (job,
 * head, query tile) only, as FA2 is: one query head at a time reads its KV
 * head (no GQA stacking), and a decode step is one item per head (no
 * split along the KV length).
 */
void k25_baseline_flash2_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                                   struct k25_mem_acct *acct);

/*
 * Naive attention, as a framework's eager code does it: gathers the paged
 * cache into contiguous fp32 K and V [kv_head][token][head_dim], computes
 * the full score matrix S [head][query][key] of a job, masks, softmaxes
 * (libm expf) and multiplies by V.  Memory grows with queries x keys.
 */
void k25_baseline_naive_attention(const struct k25_attn_job *jobs, int n_jobs, int n_heads, float scale,
                                  struct k25_mem_acct *acct);

#endif
