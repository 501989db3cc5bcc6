/*
 * gather.cu - row gathers: the embedding lookup (fp32, fp16 or bf16 table
 * rows to fp32, exact), rows_gather (fp32), and the fp32 -> fp16/bf16
 * conversion of a GEMM's activations for cuBLASLt.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define GATHER_THREADS 256

/* One block per output row. */
__global__ void gather_kernel(const unsigned char *__restrict__ src, size_t src_stride_bytes, int type,
                              const int32_t *__restrict__ rows, int cols, float *__restrict__ dst,
                              size_t dst_stride)
{
    const unsigned char *r = src + (size_t)rows[blockIdx.x] * src_stride_bytes;
    float *o = dst + (size_t)blockIdx.x * dst_stride;
    for (int j = threadIdx.x; j < cols; j += GATHER_THREADS) {
        float v;
        if (type == K25CU_F32)
            v = ((const float *)r)[j];
        else if (type == K25CU_F16)
            v = k25cm_h2f(((const uint16_t *)r)[j]);
        else
            v = k25cm_bf2f(((const uint16_t *)r)[j]);
        o[j] = v;
    }
}

__global__ void convert_kernel(const float *__restrict__ src, size_t ss, int m, int k, int type,
                               uint16_t *__restrict__ dst)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)m * k)
        return;
    int i = (int)(t / k), j = (int)(t % k);
    float v = src[(size_t)i * ss + j];
    dst[t] = type == K25CU_F16 ? k25cm_f2h(v) : k25cm_f2bf(v);
}

extern "C" bool k25cu_gather(struct k25cu_err *e, cudaStream_t s, const void *src, size_t src_stride,
                             enum k25cu_type t, const int32_t *rows, int n, int cols, float *dst, size_t dst_stride)
{
    if (n <= 0)
        return true;
    if (t != K25CU_F32 && t != K25CU_F16 && t != K25CU_BF16)
        return k25cu_note(e, false, "k25", t, "unsupported element type", "k25cu_gather", __FILE__, __LINE__);
    const size_t eb = t == K25CU_F32 ? 4 : 2;
    gather_kernel<<<n, GATHER_THREADS, 0, s>>>((const unsigned char *)src, src_stride * eb, (int)t, rows, cols, dst,
                                               dst_stride);
    return K25_LAUNCHED(e);
}

/* One thread per element: row i of src (stride in elements) widened to fp32 into dense dst rows. */
__global__ void widen_kernel(const unsigned char *__restrict__ src, size_t ss_bytes, int type, int n, int cols,
                             float *__restrict__ dst)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n * cols)
        return;
    int i = (int)(t / cols), j = (int)(t % cols);
    const unsigned char *r = src + (size_t)i * ss_bytes;
    dst[t] = type == K25CU_F32   ? ((const float *)r)[j]
             : type == K25CU_F16 ? k25cm_h2f(((const uint16_t *)r)[j])
                                 : k25cm_bf2f(((const uint16_t *)r)[j]);
}

extern "C" bool k25cu_widen(struct k25cu_err *e, cudaStream_t s, const void *src, size_t src_stride,
                            enum k25cu_type t, int n, int cols, float *dst)
{
    if (n <= 0)
        return true;
    const size_t eb = t == K25CU_F32 ? 4 : 2;
    widen_kernel<<<k25cm_grid1((int64_t)n * cols, GATHER_THREADS), GATHER_THREADS, 0, s>>>(
        (const unsigned char *)src, src_stride * eb, (int)t, n, cols, dst);
    return K25_LAUNCHED(e);
}

extern "C" bool k25cu_convert(struct k25cu_err *e, cudaStream_t s, const float *src, size_t ss, int m, int k,
                              enum k25cu_type t, uint16_t *dst)
{
    if (m <= 0)
        return true;
    convert_kernel<<<k25cm_grid1((int64_t)m * k, GATHER_THREADS), GATHER_THREADS, 0, s>>>(src, ss, m, k, (int)t,
                                                                                          dst);
    return K25_LAUNCHED(e);
}
