/*
 * internal.h - engine-private declarations shared between engine/ files.
 * Not installed, not used by harness/ (harness uses k25.h only).
 */
#ifndef K25_INTERNAL_H
#define K25_INTERNAL_H

#include "k25.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/*
 * Memory accounting context (alloc.c): byte counters by category, current
 * and peak.  One per engine; the process has its own.  k25_alloc_acct
 * charges the process and acct (NULL: the process only); k25_free
 * uncharges whichever charged.
 */
struct k25_mem_acct {
    _Atomic int64_t cur[K25_MEM_NCAT];
    _Atomic int64_t peak[K25_MEM_NCAT];
    _Atomic int64_t total_cur;
    _Atomic int64_t total_peak;
};
void *k25_alloc_acct(struct k25_mem_acct *acct, enum k25_mem_cat cat, size_t bytes);
/* Charges (bytes > 0) or uncharges acct only: memory held without being
 * allocated through it (a backend mapping the model's weights). */
void k25_mem_acct_add(struct k25_mem_acct *acct, enum k25_mem_cat cat, int64_t bytes);
void k25_mem_acct_get(const struct k25_mem_acct *acct, struct k25_mem_stats *out);
void k25_mem_acct_reset_peak(struct k25_mem_acct *acct);

/* One decoder layer, weights in HF orientation: W[out][in], row-major.  The
 * matrices hold elements of the model's wdtype (fp32, or bf16/fp16 bits as
 * uint16_t: cast before reading); the norms are always fp32. */
struct k25_layer {
    float *attn_norm;  /* [dim] */
    float *wqkv;       /* [(n_heads + 2*n_kv_heads) * head_dim][dim]: q rows, then k, then v */
    float *wo;         /* [dim][n_heads * head_dim] */
    float *ffn_norm;   /* [dim] */
    float *w_gate_up;  /* [2 * ffn_dim][dim]: gate rows, then up rows */
    float *w_down;     /* [dim][ffn_dim] */
};

/*
 * A loaded model.  Every weight buffer is allocated with
 * k25_alloc(K25_MEM_WEIGHTS, ...) and owned by the model; lm_head aliases
 * embed when the embeddings are tied (then it is not freed twice).
 */
struct k25_model {
    struct k25_model_shape shape;
    enum k25_dtype wdtype;     /* element type of the matrices (weight_dtype): fp32, bf16 or fp16 */
    float *embed;              /* [vocab][dim] */
    struct k25_layer *layers;  /* [n_layers], k25_alloc'd */
    float *final_norm;         /* [dim] */
    float *lm_head;            /* [vocab][dim]; == embed when tied */
    char source[1100];
};

/* Allocates every weight buffer of m->shape, matrices in m->wdtype.  0 or K25_ENOMEM. */
int k25_model_alloc_weights(struct k25_model *m, struct k25_error *err);
/* Frees the buffers k25_model_alloc_weights made (safe on partial allocs). */
void k25_model_free_weights(struct k25_model *m);

/*
 * Real weights from a Hugging Face style directory: reads dir/config.json
 * (hidden_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, intermediate_size, vocab_size, rope_theta,
 * rms_norm_eps, tie_word_embeddings, head_dim), then the tensors from
 * dir/model.safetensors or the shards listed in
 * dir/model.safetensors.index.json.  Matrices are stored in m->wdtype (set
 * by the caller): a tensor already in it is copied as is, others are
 * converted (rounding to nearest even); norms are read as fp32.  Fills m->shape and every weight; on failure frees
 * what it allocated and names the file and tensor in err.
 */
int k25_model_load_safetensors(const char *dir, struct k25_model *m, struct k25_error *err);


/*
 * Sizes the OpenMP and OpenBLAS pools for the next step without changing
 * the configured count that k25_get_threads reports (threads.c).
 */
void k25_threads_apply(int n);
/* The count k25_threads_apply last set (process-wide; 0 before the first call). */
int k25_threads_applied(void);

/* fp32 to bfloat16 bits, rounding to nearest even (NaN stays NaN). */
static inline uint16_t k25_fp32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#endif /* K25_INTERNAL_H */
