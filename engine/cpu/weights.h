/*
 * weights.h - weight matrices as the CPU kernels read them (engine-internal).
 *
 * gemv.c holds the decode kernels: y = x . W^T for a few activation rows
 * (batch-1 and small-batch decode), threads over W's rows, each weight row
 * read from memory once per call and applied to every x row while it is in
 * cache.  One kernel set per instruction path (scalar, AVX2+FMA, AVX-512),
 * chosen at run time; the dense formats (fp32, bf16, fp16) and the
 * group-wise quantized ones (int8, int4) dequantize inside the dot product.
 * wquant.c quantizes rows into the int8/int4 layout (backend.h) and
 * dequantizes row ranges into fp32 (the prefill tile and the embedding op).
 *
 * Batch invariance: the value of y[i][j] is computed by the same sequence
 * of floating-point operations whatever m is and whichever rows share the
 * call (per row: four 8-lane accumulators over blocks of 32 values on
 * AVX2, two 16-lane ones on AVX-512, a fixed reduction tree, the tail of a
 * row that is not a multiple of 32 added last), so it is bit-identical for
 * m = 1 and for any m <= K25_GEMV_MAX_M on one path.  Different paths
 * differ in rounding only (tests/test_decode.c bounds it).
 */
#ifndef K25_WEIGHTS_H
#define K25_WEIGHTS_H

#include "internal.h"
#include "k25_cpu.h"

#include <stdbool.h>
#include <stddef.h>

/* Largest m the decode kernels take: cpu_gemm sends larger steps (prefill) to OpenBLAS. */
#define K25_GEMV_MAX_M 16

/* A weight matrix [rows][cols] in host memory. */
struct k25_wrows {
    const unsigned char *data; /* row 0 (borrowed) */
    size_t row_bytes;          /* bytes from one row to the next */
    enum k25_dtype dtype;      /* fp32, bf16, fp16, int8 or int4 (backend.h layouts) */
    int64_t rows, cols;
    int group;                 /* int8/int4: values per scale; 0 for dense formats */
};

/* Instruction paths of the kernels. */
enum k25_kpath { K25_KPATH_SCALAR, K25_KPATH_AVX2, K25_KPATH_AVX512, K25_KPATH_N };
const char *k25_kpath_name(enum k25_kpath p);
/* True when this CPU runs path p (and the build has it). */
bool k25_kpath_available(enum k25_kpath p);
/* The path for a cpu_kernels setting: auto = the widest available; a path the CPU lacks is
 * K25_EUNSUPPORTED naming the key and what the CPU has. */
int k25_kpath_resolve(enum k25_cpu_kernels want, enum k25_kpath *out, struct k25_error *err);

/*
 * y[i][j] = x[i] . w[j] (+ y[i][j] when acc) for i < m, j < w->rows, on
 * path p.  1 <= m <= K25_GEMV_MAX_M; strides in floats.  OpenMP threads
 * share out w's rows; nothing is allocated.
 */
void k25_gemv(enum k25_kpath p, const float *x, size_t x_stride, int m, const struct k25_wrows *w, float *y,
              size_t y_stride, bool acc);

/* ---- quantized layout (wquant.c) */

/* k25_wquant_row_bytes, k25_wquant_rows: k25_cpu.h (the engine quantizes weights at load with them). */
/* The group size of an int8/int4 matrix of cols values whose rows are row_bytes long (the
 * layout has no padding, so the size implies the group); 0 when row_bytes fits no group. */
int k25_wquant_group(enum k25_dtype q, int64_t cols, size_t row_bytes);
/* Rows [r0, r0 + n) of w as fp32 into out (rows out_stride floats apart), any format. */
void k25_wrows_dequant(const struct k25_wrows *w, int64_t r0, int64_t n, float *out, size_t out_stride);

#endif /* K25_WEIGHTS_H */
