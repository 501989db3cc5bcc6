/*
 * swiglu.cu - h[i][j] = silu(gu[i][j]) * gu[i][ffn + j], the CPU's formula
 * (k25cm_swiglu: its fast exp, operation for operation), one thread per value.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define SWIGLU_THREADS 256

__global__ void swiglu_kernel(const float *__restrict__ gu, size_t gs, float *__restrict__ h, size_t hs, int m,
                              int ffn)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)m * ffn)
        return;
    int i = (int)(t / ffn), j = (int)(t % ffn);
    const float *g = gu + (size_t)i * gs;
    h[(size_t)i * hs + j] = k25cm_swiglu(g[j], g[ffn + j]);
}

extern "C" bool k25cu_swiglu(struct k25cu_err *e, cudaStream_t s, const float *gu, size_t gs, float *h, size_t hs,
                             int m, int ffn)
{
    if (m <= 0)
        return true;
    swiglu_kernel<<<k25cm_grid1((int64_t)m * ffn, SWIGLU_THREADS), SWIGLU_THREADS, 0, s>>>(gu, gs, h, hs, m, ffn);
    return K25_LAUNCHED(e);
}
