/*
 * k25_cuda_ops.h - what the CUDA kernels (the .cu files of engine/cuda/, C++) offer the
 * CUDA backend's table (engine/cuda/backend_cuda.c, C): launchers with
 * plain arguments (device pointers, sizes, a stream), and the error record
 * every CUDA, cuBLAS and cuDNN call reports into.  C and C++ compatible;
 * the .cu files see no engine header (those are C11-only).
 *
 * Errors.  Every runtime, cuBLAS(Lt) and cuDNN call goes through
 * K25_CUDA / K25_CUBLAS / K25_CUDNN, which record the first failing call
 * (its statement, file, line, the device and the library's error name) in
 * a struct k25cu_err and evaluate to false on failure.  A launcher returns
 * false when its launch (or an API call inside it) failed.  The backend's
 * status() slot turns the record into a struct k25_error once per step.
 */
#ifndef K25_CUDA_OPS_H
#define K25_CUDA_OPS_H

#include <cuda_runtime_api.h>

#include "k25_cuda_math.h" /* struct k25cu_kv_layout */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The first failing call of a backend instance. */
struct k25cu_err {
    int failed;        /* 0 until a call fails */
    int device;        /* the device the instance runs on */
    long code;         /* the library's status value */
    char lib[8];       /* "CUDA", "cuBLAS", "cuDNN", "k25" (a launch check of ours) */
    char name[64];     /* the status's name (cudaErrorMemoryAllocation, ...) */
    char stmt[160];    /* the statement, as written */
    const char *file;  /* __FILE__ */
    int line;
    int n_later;       /* failures after the first (not recorded) */
};

/* Records a failed call (the first one in full); returns ok. */
bool k25cu_note(struct k25cu_err *e, bool ok, const char *lib, long code, const char *name, const char *stmt,
                const char *file, int line);

/* cuBLAS / cuDNN status names (the libraries' own strings). */
const char *k25cu_cublas_name(int status);
const char *k25cu_cudnn_name(int status);

#define K25_CUDA(e, stmt)                                                                                    \
    __extension__({                                                                                          \
        cudaError_t k25_rc_ = (stmt);                                                                        \
        k25cu_note((e), k25_rc_ == cudaSuccess, "CUDA", (long)k25_rc_, cudaGetErrorName(k25_rc_), #stmt,      \
                   __FILE__, __LINE__);                                                                      \
    })
#define K25_CUBLAS(e, stmt)                                                                                  \
    __extension__({                                                                                          \
        int k25_rc_ = (int)(stmt);                                                                           \
        k25cu_note((e), k25_rc_ == 0, "cuBLAS", (long)k25_rc_, k25cu_cublas_name(k25_rc_), #stmt, __FILE__,   \
                   __LINE__);                                                                                \
    })
#define K25_CUDNN(e, stmt)                                                                                   \
    __extension__({                                                                                          \
        int k25_rc_ = (int)(stmt);                                                                           \
        k25cu_note((e), k25_rc_ == 0, "cuDNN", (long)k25_rc_, k25cu_cudnn_name(k25_rc_), #stmt, __FILE__,     \
                   __LINE__);                                                                                \
    })
/* The kernel launch just made succeeded (a bad configuration shows here; faults later, at a sync). */
#define K25_LAUNCHED(e) K25_CUDA((e), cudaGetLastError())

/* Element types the kernels read (values of enum k25_dtype are not visible here). */
enum k25cu_type { K25CU_F32, K25CU_F16, K25CU_BF16, K25CU_I8, K25CU_I4 };

/* ---- elementwise (rmsnorm.cu, rope.cu, swiglu.cu, gather.cu, convert.cu) */
bool k25cu_rmsnorm(struct k25cu_err *e, cudaStream_t s, const float *x, size_t xs, const float *w, float eps,
                   float *y, size_t ys, int m, int d);
bool k25cu_rope_cache(struct k25cu_err *e, cudaStream_t s, const int32_t *pos, const double *inv_freq, float *cs,
                      size_t css, int m, int hd);
bool k25cu_rope(struct k25cu_err *e, cudaStream_t s, float *x, size_t xs, int m, int n_heads, int hd,
                const float *cs, size_t css);
bool k25cu_swiglu(struct k25cu_err *e, cudaStream_t s, const float *gu, size_t gs, float *h, size_t hs, int m,
                  int ffn);
/* dst[i][0:cols] = src[rows[i]] as fp32 (src of type t: F32, F16 or BF16; rows on the device) */
bool k25cu_gather(struct k25cu_err *e, cudaStream_t s, const void *src, size_t src_stride, enum k25cu_type t,
                  const int32_t *rows, int n, int cols, float *dst, size_t dst_stride);
/* dst[i][0:cols] = src row i widened to fp32 (src of type t: F32, F16 or BF16, stride in elements), dense */
bool k25cu_widen(struct k25cu_err *e, cudaStream_t s, const void *src, size_t src_stride, enum k25cu_type t, int n,
                 int cols, float *dst);
/* dst = src as F16 / BF16 (a GEMM's activations), dense rows of k from rows of stride ss */
bool k25cu_convert(struct k25cu_err *e, cudaStream_t s, const float *src, size_t ss, int m, int k,
                   enum k25cu_type t, uint16_t *dst);

/* ---- GEMM (gemm.cu): y[m][n] (+)= x[m][k] . w[n][k]^T, w of type t (F32, F16, BF16) */
bool k25cu_gemv(struct k25cu_err *e, cudaStream_t s, const float *x, size_t xs, int m, const void *w,
                size_t ws, enum k25cu_type t, int n, int k, float *y, size_t ys, bool acc);
struct k25cu_lt; /* cuBLASLt handle, workspace and plan cache */
bool k25cu_lt_create(struct k25cu_err *e, struct k25cu_lt **out);
void k25cu_lt_destroy(struct k25cu_lt *lt);
/* x16: dense [m][k] of type t when t is F16/BF16 (converted by the caller), else x itself (F32) */
bool k25cu_lt_gemm(struct k25cu_err *e, struct k25cu_lt *lt, cudaStream_t s, const void *x, size_t xs, int m,
                   const void *w, size_t ws, enum k25cu_type t, int n, int k, float *y, size_t ys, bool acc);

/* ---- KV cache (kvwrite.cu).  Layout: kvcache.h.  table[b]: device address of layer l of the b-th
 * block the call touches (blocks slot0/bs ..) */
bool k25cu_kv_write_rows(struct k25cu_err *e, cudaStream_t s, const struct k25cu_kv_layout *L,
                         unsigned char *const *table, int slot0, int n, const float *k, const float *v,
                         size_t stride);
/* int8/int4: rows to the fp16 residual res ([K|V][n_kv_heads][res_cap][head_dim] of the layer) at idx0.. */
bool k25cu_kv_write_res(struct k25cu_err *e, cudaStream_t s, const struct k25cu_kv_layout *L, uint16_t *res,
                        int idx0, int n, const float *k, const float *v, size_t stride);
/* int8/int4: quantizes residual rows [0, group) into `lay` (layer l of the block) at offset o (slot % bs)
 * and shifts the residual down by group rows */
bool k25cu_kv_quant_group(struct k25cu_err *e, cudaStream_t s, const struct k25cu_kv_layout *L, uint16_t *res,
                          unsigned char *lay, int o);

/* ---- attention (attention.cu) */
struct k25cu_attn_seq {
    int n_tokens, n_quant;      /* slots; slots quantized into blocks (n_tokens when not quantized) */
    int q_row0, n_q, q_slot0;   /* its query rows in q/out and their slots */
    int table0;                 /* its first entry in the block table */
    int n_split;                /* split-KV parts of its rows (1: none) */
    const uint16_t *res_k, *res_v; /* int8/int4: residual rows of this layer, KV head 0 */
};
struct k25cu_attn_item {        /* up to K25CU_ATTN_ROWS rows (query, head of the group) of one sequence */
    int seq, r0, nr;            /* rows r0 .. r0+nr-1: query r / group, head r % group */
    int part_row;               /* its first row in the split partials */
};
struct k25cu_attn_args {
    const float *q;
    size_t q_stride;
    float *out;
    size_t out_stride;
    int n_heads, group;
    float scale;
    struct k25cu_kv_layout kv;
    const struct k25cu_attn_seq *seqs;   /* device */
    const struct k25cu_attn_item *items; /* device */
    int n_items, max_split;
    const unsigned char *const *table;   /* device: layer base address of each block */
    float *part;                         /* split partials [part rows][n_kv_heads][K25CU_SPLIT_MAX][hd+2] */
    int n_part_rows;
};
bool k25cu_attention(struct k25cu_err *e, cudaStream_t s, const struct k25cu_attn_args *a);

/* ---- sampling (argmax.cu): ids[i] = argmax_j x[i][j] (the lowest j among equal maxima), device ids */
bool k25cu_argmax(struct k25cu_err *e, cudaStream_t s, const float *x, size_t xs, int m, int n, int32_t *ids);

/* ---- probes (probe.cu), timed with events: bf16 GEMM peak, device-memory bandwidth, and the decode
 * GEMM (bf16 weights 14336 x 4096, llama3-8b's gate/up rows) at m = 1 and 16 on the GEMV kernel and on
 * cuBLASLt (activations converted to bf16) */
struct k25cu_probe_out {
    double bf16_tflops, bw_gbs;
    double gemv_us[2], lt_us[2]; /* m = 1, m = 16 */
};
bool k25cu_probe(struct k25cu_err *e, struct k25cu_lt *lt, cudaStream_t s, struct k25cu_probe_out *out);

#ifdef __cplusplus
}
#endif

#endif /* K25_CUDA_OPS_H */
